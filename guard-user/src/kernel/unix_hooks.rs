//! `cgroup/connect_unix` and `cgroup/sendmsg_unix` (kernel 6.7+), loaded here because aya 0.14
//! cannot: it knows neither attach type, and the kernel loads a sock_addr program only for the
//! attach type it was loaded with. The BPF object names their sections as connect4 programs
//! (so aya parses the object at all); this module parses the same object again with aya-obj,
//! points its map references at the maps aya made (so both share every map and the patched
//! globals), and loads the two with `BPF_PROG_LOAD` and the unix attach types.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{Context, Result, anyhow, bail};
use aya::Ebpf;
use aya::maps::Map;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_CGROUP_SOCK_ADDR: u32 = 18;
/// `enum bpf_attach_type`.
pub const BPF_CGROUP_UNIX_CONNECT: u32 = 49;
pub const BPF_CGROUP_UNIX_SENDMSG: u32 = 50;

/// The programs, by name in the object, and their attach types.
pub const PROGRAMS: [(&str, u32); 2] = [
    ("connect_unix", BPF_CGROUP_UNIX_CONNECT),
    ("sendmsg_unix", BPF_CGROUP_UNIX_SENDMSG),
];

/// The two programs, loaded.
#[derive(Debug)]
pub struct UnixHooks {
    /// In [`PROGRAMS`] order.
    pub programs: Vec<(&'static str, u32, OwnedFd)>,
}

impl UnixHooks {
    /// `(name, kernel program id)` of each program.
    pub fn ids(&self) -> Vec<(String, u32)> {
        self.programs
            .iter()
            .filter_map(|(name, _, fd)| Some((name.to_string(), program_id(fd.as_fd()).ok()?)))
            .collect()
    }
}

/// The kernel's id of the program `fd` holds (`bpf_prog_info.id` is its second field).
fn program_id(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<u32> {
    let mut info = [0u32; 64];
    super::raw_link::object_info(fd, &mut info)?;
    Ok(info[1])
}

/// `union bpf_attr` as `BPF_PROG_LOAD` reads it, up to `expected_attach_type` (the kernel takes
/// the rest as zero).
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The descriptor of any map aya made (every variant wraps the same map data).
fn map_fd(map: &Map) -> RawFd {
    use Map::*;
    match map {
        Array(d)
        | ArrayOfMaps(d)
        | BloomFilter(d)
        | CgroupArray(d)
        | CgroupStorage(d)
        | CgrpStorage(d)
        | CpuMap(d)
        | DevMap(d)
        | DevMapHash(d)
        | HashMap(d)
        | HashOfMaps(d)
        | InodeStorage(d)
        | LpmTrie(d)
        | LruHashMap(d)
        | PerCpuArray(d)
        | PerCpuCgroupStorage(d)
        | PerCpuHashMap(d)
        | PerCpuLruHashMap(d)
        | PerfEventArray(d)
        | ProgramArray(d)
        | Queue(d)
        | ReusePortSockArray(d)
        | RingBuf(d)
        | SockHash(d)
        | SockMap(d)
        | SkStorage(d)
        | Stack(d)
        | StackTraceMap(d)
        | Unsupported(d)
        | XskMap(d) => d.fd().as_fd().as_raw_fd(),
    }
}

impl UnixHooks {
    /// The two programs as a kept program set pinned them; `None` unless both are there.
    pub fn from_pins(kept: &super::program_cache::KeptPaths) -> Option<UnixHooks> {
        let programs = PROGRAMS
            .iter()
            .map(|(name, attach_type)| {
                super::raw_link::obj_get(&kept.program_path(name))
                    .ok()
                    .map(|fd| (*name, *attach_type, fd))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(UnixHooks { programs })
    }
}

/// Loads the two programs of `object` (the bytes aya loaded as `ebpf`, whose maps they use).
/// `Ok(None)` on a kernel without the unix hooks (no `bpf_sock_addr_kern.uaddrlen` in its BTF,
/// or a load refused with `EINVAL`): unix sockets are then not decided. Call before any map is
/// taken from `ebpf`.
pub fn load(object: &[u8], ebpf: &Ebpf, has_offsets: bool) -> Result<Option<UnixHooks>> {
    if !has_offsets {
        return Ok(None);
    }
    let mut parsed = aya_obj::Object::parse(object).context("parsing the BPF object again")?;
    let mut maps = Vec::new();
    for (name, map) in &parsed.maps {
        let made = ebpf
            .map(name)
            .ok_or_else(|| anyhow!("the loaded object has no map {name}"))?;
        maps.push((name.clone(), map_fd(made), map.clone()));
    }
    let text: HashSet<usize> = parsed
        .functions
        .keys()
        .map(|(section, _)| *section)
        .collect();
    parsed
        .relocate_maps(
            maps.iter().map(|(name, fd, map)| (name.as_str(), *fd, map)),
            &text,
        )
        .context("pointing the unix hooks at the loaded maps")?;
    parsed
        .relocate_calls(&text)
        .context("linking the unix hooks' calls")?;
    let license = CString::new("GPL").expect("no NUL");
    let mut programs = Vec::new();
    for (name, attach_type) in PROGRAMS {
        let program = parsed
            .programs
            .get(name)
            .ok_or_else(|| anyhow!("the BPF object has no program {name}"))?;
        let function = parsed
            .functions
            .get(&program.function_key())
            .ok_or_else(|| anyhow!("the BPF object has no code for {name}"))?;
        match prog_load(name, attach_type, &function.instructions, &license) {
            Ok(fd) => programs.push((name, attach_type, fd)),
            // A kernel before 6.7 has no such attach type.
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) && programs.is_empty() => {
                let log = verifier_log(name, attach_type, &function.instructions, &license);
                if log.trim().is_empty() {
                    return Ok(None);
                }
                bail!("loading cgroup/{name}: {err}\n{log}");
            }
            Err(err) => {
                let log = verifier_log(name, attach_type, &function.instructions, &license);
                bail!("loading cgroup/{name}: {err}\n{log}");
            }
        }
    }
    Ok(Some(UnixHooks { programs }))
}

/// The load's attribute, without a log.
fn load_attr(
    name: &str,
    attach_type: u32,
    instructions: &[aya_obj::generated::bpf_insn],
    license: &CString,
) -> ProgLoad {
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
        insn_cnt: instructions.len() as u32,
        insns: instructions.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type: attach_type,
        ..ProgLoad::default()
    };
    let shown = name.len().min(15);
    attr.prog_name[..shown].copy_from_slice(&name.as_bytes()[..shown]);
    attr
}

fn prog_load(
    name: &str,
    attach_type: u32,
    instructions: &[aya_obj::generated::bpf_insn],
    license: &CString,
) -> std::io::Result<OwnedFd> {
    sys_prog_load(&load_attr(name, attach_type, instructions, license))
}

fn sys_prog_load(attr: &ProgLoad) -> std::io::Result<OwnedFd> {
    // SAFETY: the attribute is a valid `bpf_attr` prefix whose pointers outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            attr as *const ProgLoad,
            std::mem::size_of::<ProgLoad>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The verifier's log of a load that failed, for the error (loaded again, with the log on).
fn verifier_log(
    name: &str,
    attach_type: u32,
    instructions: &[aya_obj::generated::bpf_insn],
    license: &CString,
) -> String {
    let mut log = vec![0u8; 1 << 20];
    let mut attr = load_attr(name, attach_type, instructions, license);
    attr.log_level = 1;
    attr.log_size = log.len() as u32;
    attr.log_buf = log.as_mut_ptr() as u64;
    let _ = sys_prog_load(&attr);
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end]).into_owned()
}
