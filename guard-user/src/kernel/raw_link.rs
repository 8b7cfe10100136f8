//! A cgroup link made and pinned with the `bpf` syscall itself: aya 0.14 attaches `cgroup/dev`
//! through a `bpf_link` but cannot hand that link out as an [`aya::programs::links::FdLink`]
//! (so it could not be pinned like the other links). The kernel's interface is two commands.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{Context, Result};

/// `enum bpf_cmd`.
const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_LINK_CREATE: libc::c_long = 28;
/// `enum bpf_attach_type`.
pub const BPF_CGROUP_INET_EGRESS: u32 = 1;
pub const BPF_CGROUP_SOCK_OPS: u32 = 3;
pub const BPF_CGROUP_DEVICE: u32 = 6;

/// `union bpf_attr` as `BPF_LINK_CREATE` reads it (the rest zero), padded to a size the
/// kernel accepts.
#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    _rest: [u64; 6],
}

/// `union bpf_attr` as `BPF_OBJ_PIN` reads it.
#[repr(C)]
#[derive(Default)]
struct ObjPin {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
    path_fd: i32,
    _pad: u32,
}

/// Attaches `program` to the cgroup folder `cgroup` as `attach_type` through a new `bpf_link`:
/// the link is attached while its descriptor (or a pin of it) lives.
pub fn attach_cgroup(program: BorrowedFd<'_>, cgroup: &Path, attach_type: u32) -> Result<OwnedFd> {
    let dir = std::fs::File::open(cgroup)
        .with_context(|| format!("opening cgroup {}", cgroup.display()))?;
    let attr = LinkCreate {
        prog_fd: program.as_raw_fd() as u32,
        target_fd: dir.as_raw_fd() as u32,
        attach_type,
        ..LinkCreate::default()
    };
    // SAFETY: the attribute is a valid `bpf_attr` prefix of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &attr as *const LinkCreate,
            std::mem::size_of::<LinkCreate>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("bpf_link_create on {}", cgroup.display()));
    }
    // SAFETY: the kernel returned a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Pins `link` at `path` (on a bpffs); the link stays attached until the pin is removed and
/// no descriptor holds it.
pub fn pin(link: &impl AsFd, path: &Path) -> Result<()> {
    let name = CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{} has a NUL byte", path.display()))?;
    let attr = ObjPin {
        pathname: name.as_ptr() as u64,
        bpf_fd: link.as_fd().as_raw_fd() as u32,
        ..ObjPin::default()
    };
    // SAFETY: the attribute is a valid `bpf_attr` prefix whose path outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_PIN,
            &attr as *const ObjPin,
            std::mem::size_of::<ObjPin>(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("pinning a link at {}", path.display()));
    }
    Ok(())
}
