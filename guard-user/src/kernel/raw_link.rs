//! A cgroup link made and pinned with the `bpf` syscall itself: aya 0.14 attaches `cgroup/dev`
//! through a `bpf_link` but cannot hand that link out as an [`aya::programs::links::FdLink`]
//! (so it could not be pinned like the other links). The kernel's interface is two commands.
//! Also here, in the same words: opening a pin (`BPF_OBJ_GET`) and asking whether a cgroup
//! link is still attached (`BPF_OBJ_GET_INFO_BY_FD`), to notice a link someone detached.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{Context, Result};

/// `enum bpf_cmd`.
const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_CREATE: libc::c_long = 28;
/// `enum bpf_link_type`.
const BPF_LINK_TYPE_CGROUP: u32 = 3;
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

/// `union bpf_attr` as `BPF_OBJ_GET_INFO_BY_FD` reads it.
#[repr(C)]
#[derive(Default)]
struct InfoByFd {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `struct bpf_link_info` as far as a cgroup link's part goes (the rest of the union padded).
#[repr(C)]
#[derive(Default)]
struct LinkInfo {
    kind: u32,
    id: u32,
    prog_id: u32,
    _pad: u32,
    /// `cgroup.cgroup_id`: 0 once the link was detached.
    cgroup_id: u64,
    /// `cgroup.attach_type`.
    attach_type: u32,
    _rest: [u32; 9],
}

/// What the kernel says of a cgroup link now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupLinkState {
    /// The cgroup it is attached to; 0 when it was detached (`BPF_LINK_DETACH`, or its cgroup
    /// was removed).
    pub cgroup_id: u64,
    pub attach_type: u32,
}

/// Fills `info` (a prefix of the object's `bpf_*_info`, which the kernel fills as far as it
/// goes) for the BPF object `fd` holds (`BPF_OBJ_GET_INFO_BY_FD`).
pub fn object_info<T>(fd: BorrowedFd<'_>, info: &mut T) -> std::io::Result<()> {
    let attr = InfoByFd {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<T>() as u32,
        info: (info as *mut T) as u64,
    };
    // SAFETY: the attribute points at a writable `T` of the length it gives.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &attr as *const InfoByFd,
            std::mem::size_of::<InfoByFd>(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The state of the cgroup link `link` (`None`: not a cgroup link).
pub fn cgroup_link_state(link: &impl AsFd) -> Result<Option<CgroupLinkState>> {
    let mut info = LinkInfo::default();
    object_info(link.as_fd(), &mut info).context("reading a link's info")?;
    Ok(
        (info.kind == BPF_LINK_TYPE_CGROUP).then_some(CgroupLinkState {
            cgroup_id: info.cgroup_id,
            attach_type: info.attach_type,
        }),
    )
}

/// A new descriptor of the BPF object pinned at `path`.
pub fn obj_get(path: &Path) -> Result<OwnedFd> {
    let name = CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{} has a NUL byte", path.display()))?;
    let attr = ObjPin {
        pathname: name.as_ptr() as u64,
        ..ObjPin::default()
    };
    // SAFETY: the attribute is a valid `bpf_attr` prefix whose path outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            &attr as *const ObjPin,
            std::mem::size_of::<ObjPin>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("opening the pin {}", path.display()));
    }
    // SAFETY: the kernel returned a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
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
