//! Loading and attaching guard's BPF programs. Everything loaded here is owned by the
//! [`Enforcer`]: by default dropping it detaches every program (links are file descriptors), so
//! a crash of the process fails open rather than leaving rules nobody maintains. A daemon that
//! must keep enforcing across its own restart calls [`Enforcer::pin_links`]: from then on its
//! links are pinned in a bpffs folder and stay attached, deciding with the maps' last contents,
//! until [`super::pins::release`] removes the pins (see `pins` for the handover).

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use aya::maps::Array;
use aya::programs::cgroup_sock::CgroupSockLinkId;
use aya::programs::cgroup_sock_addr::CgroupSockAddrLinkId;
use aya::programs::links::FdLink;
use aya::programs::lsm::LsmLinkId;
use aya::programs::tp_btf::BtfTracePointLinkId;
use aya::programs::{
    BtfTracePoint, CgroupAttachMode, CgroupDevice, CgroupSkb, CgroupSock, CgroupSockAddr, Lsm,
    SockOps,
};
use aya::{Btf, Ebpf, EbpfLoader};
use guard_common::maps::{DnsRedirect, HeldSocket, NetHold};

use super::btf::{aya_kernel_btf, kernel_offsets};
use super::maps::MapSync;
use super::pins::is_bpffs;
use super::program_cache::{CachedSet, KeptPaths, Store};
use crate::compile::encode::ExecMapSizes;

/// The BPF object built by `build.rs` from `guard-ebpf`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/guard"));

/// How guard reaches the kernel (docs/design.md, "Backends").
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// BPF LSM hooks: a refused exec or connect gets EPERM.
    Lsm,
    /// cgroup sock_addr hooks (EPERM) and the exec tracepoint (SIGKILL before the image runs).
    Cgroup,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Lsm => "lsm",
            Backend::Cgroup => "cgroup",
        }
    }

    /// The preferred backend this kernel allows, found by loading (never by reading config:
    /// kernels that list `bpf` in their LSMs may still refuse the programs), with the reason the
    /// `lsm` backend was refused when it was.
    pub fn detect() -> (Backend, Option<String>) {
        match try_load_lsm() {
            Ok(()) => (Backend::Lsm, None),
            Err(err) => (Backend::Cgroup, Some(format!("{err:#}"))),
        }
    }

    /// [`Backend::detect`], remembered for the boot in [`BACKEND_OF_BOOT`] (root's alone): the
    /// BPF LSM is not turned on or off without a reboot, and the probe makes every map of the
    /// object (a tenth of a stand-alone run's start). `guard doctor` probes afresh.
    pub fn detect_for_boot() -> Backend {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let remembered = std::fs::read_to_string(BACKEND_OF_BOOT).unwrap_or_default();
        if let Some((of_boot, backend)) = remembered.split_once('\n')
            && !boot.is_empty()
            && of_boot == boot.trim()
        {
            match backend.trim() {
                "lsm" => return Backend::Lsm,
                "cgroup" => return Backend::Cgroup,
                _ => {}
            }
        }
        let backend = Backend::detect().0;
        if !boot.is_empty() {
            // Best effort: without it the next run probes again.
            let _ = remember_backend(boot.trim(), backend);
        }
        backend
    }
}

/// Where [`Backend::detect_for_boot`] remembers the backend: the boot's id, then its name.
pub const BACKEND_OF_BOOT: &str = "/run/guard/backend";

fn remember_backend(boot: &str, backend: Backend) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = Path::new(BACKEND_OF_BOOT);
    let dir = path.parent().expect("a file in a folder");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // Written whole, then renamed over: a reader sees the old or the new, never half.
    let partial = dir.join(format!(".backend.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)?;
    writeln!(file, "{boot}\n{}", backend.as_str())?;
    drop(file);
    std::fs::rename(&partial, path)
}

/// The `lsm` backend's programs load and the `bpf` LSM is active (an inactive BPF LSM loads
/// and attaches programs that never run).
pub fn try_load_lsm() -> Result<()> {
    let active = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
    let bpf_active = active.split(',').any(|lsm| lsm.trim() == "bpf");
    if !bpf_active && !active.is_empty() {
        // Known without a load (which costs every map of the object): no program would run.
        bail!(
            "`bpf` is not among the active LSMs ({}); boot with lsm=...,bpf",
            active.trim()
        );
    }
    let btf = aya_kernel_btf()?;
    let mut ebpf = load_object(Some(btf), ExecMapSizes::FULL, None)?;
    let program: &mut Lsm = program(&mut ebpf, "bprm_check_security")?;
    program
        .load("bprm_check_security", btf)
        .context("the kernel refused to load lsm/bprm_check_security")?;
    if !bpf_active {
        bail!(
            "the programs load, but `bpf` is not among the active LSMs ({}); boot with lsm=...,bpf",
            active.trim()
        );
    }
    Ok(())
}

/// Parses guard's object and makes (or, kept, opens) its maps. With the kernel's `btf` the
/// programs are relocated for this kernel and its offsets patched in, so any of them can be
/// loaded; without it (a complete kept set, whose programs are all loaded already) none may be.
fn load_object(btf: Option<&Btf>, sizes: ExecMapSizes, kept: Option<&KeptPaths>) -> Result<Ebpf> {
    if OBJECT.is_empty() {
        bail!("this guard was built with AYA_BUILD_SKIP=1 and carries no BPF programs");
    }
    let mut loader = EbpfLoader::new();
    let offsets;
    if let Some(btf) = btf {
        offsets = kernel_offsets()?;
        loader
            .btf(Some(btf))
            .override_global("OFFSETS", &offsets, true);
    } else {
        loader.btf(None);
    }
    loader
        .map_max_entries("ARGV_TRIE", sizes.argv_edges)
        .map_max_entries("EXEC_IDENTITIES", sizes.exec_entries)
        .map_max_entries("EXEC_NAMES", sizes.exec_entries)
        .map_max_entries("ARGV_ROOTS", sizes.exec_entries)
        .map_max_entries("TASKS", sizes.tasks);
    let pins: Vec<(&str, PathBuf)> = kept
        .map(|set| {
            KEPT_MAPS
                .iter()
                .map(|name| (*name, set.map_path(name)))
                .collect()
        })
        .unwrap_or_default();
    for (name, path) in &pins {
        // Opened where pinned, else made and pinned there.
        loader.map_pin_path(name, path.as_path());
    }
    loader.load(OBJECT).context("loading guard's BPF object")
}

/// What a kept program set's key is made of besides the object: whatever else changes the
/// loaded programs or the sizes of their maps. The boot stands for the kernel (its offsets are
/// patched into the programs), and is known without parsing the kernel's BTF.
fn kept_set_key(backend: Backend, sizes: ExecMapSizes) -> Result<String> {
    let boot = std::fs::read("/proc/sys/kernel/random/boot_id")
        .context("reading /proc/sys/kernel/random/boot_id")?;
    let sizes = format!("{sizes:?}");
    // The build too: how the loader loads and pins a set may change while the object does not.
    let build = concat!(env!("CARGO_PKG_VERSION"), " ", env!("GUARD_COMMIT"));
    Ok(super::program_cache::key(
        OBJECT,
        &[
            backend.as_str().as_bytes(),
            &boot,
            sizes.as_bytes(),
            build.as_bytes(),
        ],
    ))
}

/// Whether aya loads `name` on `backend`: the LSM programs only on `lsm`, and never the unix
/// socket hooks, which `unix_hooks` loads itself (aya 0.14 would give them the wrong attach
/// type).
fn loads_on(backend: Backend, name: &str) -> bool {
    (backend == Backend::Lsm || !LSM_HOOKS.contains(&name))
        && !super::unix_hooks::PROGRAMS
            .iter()
            .any(|(unix, _)| *unix == name)
}

/// Whether the kept set holds every program `ebpf` could load on `backend`, and the unix hooks
/// or the mark that this kernel has none: then nothing is ever loaded from `ebpf`, which needs
/// no relocation for this kernel.
fn kept_set_complete(ebpf: &Ebpf, backend: Backend, kept: &KeptPaths) -> bool {
    let pinned = kept.programs();
    let unix = super::unix_hooks::PROGRAMS
        .iter()
        .all(|(name, _)| pinned.iter().any(|p| p == name))
        || kept.has_mark(NO_UNIX_HOOKS);
    unix && ebpf
        .programs()
        .map(|(name, _)| name)
        .filter(|name| loads_on(backend, name))
        .all(|name| pinned.iter().any(|p| p == name))
}

/// The mark a kept set carries when this kernel has no unix socket hooks.
const NO_UNIX_HOOKS: &str = "no-unix-hooks";

/// Every map of guard's object that userspace or the programs change: a kept set pins them
/// all, so a program loaded later and the programs kept from before share them. A map missing
/// here is not pinned, and a set whose programs use it is found inconsistent and loaded afresh
/// (`program_cache`); a test compares this list with the object's.
pub const KEPT_MAPS: [&str; 30] = [
    "SETTINGS",
    "DNS_REDIRECT",
    "DNS_ORIGINALS",
    "STAND_INS",
    "NET_HOLD",
    "HOLD_SCOPES",
    "HELD_SOCKETS",
    "SPLICED_PEERS",
    "APPROVALS",
    "SCOPES",
    "EXEC_IDENTITIES",
    "EXEC_NAMES",
    "ARGV_TRIE",
    "LONG_TOKEN_IDS",
    "ARGV_ROOTS",
    "DEST_V4",
    "DEST_V6",
    "DFA_SLOTS",
    "DFA_HEADERS",
    "DFA_ROWS",
    "TASKS",
    "EVENTS",
    "SCOPE_EVENTS",
    "COUNTERS",
    "EXEC_SCRATCH",
    "LSM_SCRATCH",
    "UNIX_EXACT",
    "UNIX_PREFIX",
    "UNIX_SCRATCH",
    "FILE_SCRATCH",
];

/// Puts the programs pinned in `set` in place of their unloaded copies in `ebpf`: they are
/// loaded and verified already. A program whose kind this does not know is left to load.
fn restore_kept_programs(ebpf: &mut Ebpf, set: &KeptPaths) -> Result<()> {
    use aya::programs::Program as P;
    use aya::programs::{CgroupSkbAttachType, CgroupSockAddrAttachType, CgroupSockAttachType};
    for name in set.programs() {
        let path = set.program_path(&name);
        let Some(slot) = ebpf.program_mut(&name) else {
            continue;
        };
        let sock_addr = |kind| CgroupSockAddr::from_pin(&path, kind).map(P::CgroupSockAddr);
        let restored = match (&*slot, name.as_str()) {
            (P::BtfTracePoint(_), _) => BtfTracePoint::from_pin(&path).map(P::BtfTracePoint),
            (P::Lsm(_), _) => Lsm::from_pin(&path).map(P::Lsm),
            (P::CgroupSock(_), _) => {
                CgroupSock::from_pin(&path, CgroupSockAttachType::SockCreate).map(P::CgroupSock)
            }
            (P::CgroupDevice(_), _) => CgroupDevice::from_pin(&path).map(P::CgroupDevice),
            (P::CgroupSkb(_), _) => {
                CgroupSkb::from_pin(&path, CgroupSkbAttachType::Egress).map(P::CgroupSkb)
            }
            (P::SockOps(_), _) => SockOps::from_pin(&path).map(P::SockOps),
            (P::CgroupSockAddr(_), "connect4") => sock_addr(CgroupSockAddrAttachType::Connect4),
            (P::CgroupSockAddr(_), "connect6") => sock_addr(CgroupSockAddrAttachType::Connect6),
            (P::CgroupSockAddr(_), "sendmsg4") => sock_addr(CgroupSockAddrAttachType::UDPSendMsg4),
            (P::CgroupSockAddr(_), "sendmsg6") => sock_addr(CgroupSockAddrAttachType::UDPSendMsg6),
            (P::CgroupSockAddr(_), "recvmsg4") => sock_addr(CgroupSockAddrAttachType::UDPRecvMsg4),
            (P::CgroupSockAddr(_), "recvmsg6") => sock_addr(CgroupSockAddrAttachType::UDPRecvMsg6),
            (P::CgroupSockAddr(_), "getpeername4") => {
                sock_addr(CgroupSockAddrAttachType::GetPeerName4)
            }
            (P::CgroupSockAddr(_), "getpeername6") => {
                sock_addr(CgroupSockAddrAttachType::GetPeerName6)
            }
            _ => continue,
        };
        *slot = restored.with_context(|| format!("opening the kept program {}", path.display()))?;
    }
    Ok(())
}

/// Loads the exec program on a thread of its own beside the other programs a scope needs at
/// once (the LSM hooks, or the cgroup backend's connect, send, socket and device hooks): the
/// kernel verifies a load on the caller's CPU, and root's loads run side by side (only
/// unprivileged ones share the verifier's lock), so a cold start costs about the exec
/// program's verification, two thirds of the whole, instead of the sum. Programs loaded already
/// (kept from an earlier run) are left as they are; `all` (filling a kept set) loads every
/// program the backend can run, those loaded on first use too.
fn preload(ebpf: &mut Ebpf, backend: Backend, btf: &Btf, all: bool) -> Result<()> {
    let beside: &[&str] = match backend {
        Backend::Lsm => &LSM_HOOKS,
        Backend::Cgroup => &[
            "connect4",
            "connect6",
            "sendmsg4",
            "sendmsg6",
            SOCK_CREATE,
            DEVICES,
        ],
    };
    let mut exec = None;
    let mut rest = Vec::new();
    let mut extra = Vec::new();
    for (name, program) in ebpf.programs_mut() {
        if program.fd().is_ok() {
            continue;
        }
        if name == EXEC {
            exec = Some(program);
        } else if beside.contains(&name) {
            rest.push((name, program));
        } else if all && loads_on(backend, name) {
            extra.push((name, program));
        }
    }
    std::thread::scope(|scope| {
        let exec = exec.map(|program| scope.spawn(move || load_one(EXEC, program, btf)));
        let rest: Result<()> = rest
            .into_iter()
            .try_for_each(|(name, program)| load_one(name, program, btf));
        for (name, program) in extra {
            // One this kernel refuses (getpeername before 5.8) is not kept: the set is never
            // complete, and each run loads it as before, where it says what it lacks.
            if let Err(err) = load_one(name, program, btf) {
                tracing::debug!("not kept: {err:#}");
            }
        }
        let exec = match exec {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(anyhow!("the thread loading {EXEC} panicked"))),
            None => Ok(()),
        };
        rest.and(exec)
    })
}

/// A program may be loaded only from an object relocated for this kernel: one from a complete
/// kept set is not (its programs are all loaded already), and loading it anyway would run
/// unrelocated field offsets. Fails closed: the program is not attached.
fn may_load(relocated: bool, name: &str) -> Result<()> {
    if relocated {
        Ok(())
    } else {
        bail!(
            "{name} is not in the kept program set this run reuses; run `guard release` (or \
             `guard run --fresh-programs`) to load afresh"
        )
    }
}

/// Loads one program (the verifier's walk), by its kind.
fn load_one(name: &str, program: &mut aya::programs::Program, btf: &Btf) -> Result<()> {
    use aya::programs::Program as P;
    // The tracepoint a tp_btf program attaches to is its name, but for the sandbox's.
    let target = if name == SANDBOX_REFUSALS {
        "sys_exit"
    } else {
        name
    };
    match program {
        P::BtfTracePoint(p) => p.load(target, btf),
        P::Lsm(p) => p.load(name, btf),
        P::CgroupSockAddr(p) => p.load(),
        P::CgroupSock(p) => p.load(),
        P::CgroupDevice(p) => p.load(),
        P::CgroupSkb(p) => p.load(),
        P::SockOps(p) => p.load(),
        _ => return Ok(()),
    }
    .with_context(|| format!("loading {name}"))?;
    log_verified(name, program.info());
    Ok(())
}

/// How many instructions the verifier walked for a program (`GUARD_LOG=debug`): the measure
/// of how close it is to the kernel's limit of 1,000,000.
fn log_verified(name: &str, info: Result<aya::programs::ProgramInfo, aya::programs::ProgramError>) {
    if let Some(count) = info.ok().and_then(|info| info.verified_instruction_count()) {
        tracing::debug!(
            program = name,
            verified_instructions = count,
            "program loaded"
        );
    }
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| anyhow!("the BPF object has no program {name}"))?
        .try_into()
        .with_context(|| format!("program {name} has an unexpected type"))
}

/// guard's programs, loaded and attached, and the maps they decide from.
/// One program's run statistics ([`Enforcer::program_run_stats`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramRunStats {
    /// The program's name in guard's object (its function name).
    pub name: String,
    pub run_time: std::time::Duration,
    pub run_count: u64,
}

/// Whether the kernel keeps BPF programs' run time and count (`kernel.bpf_stats_enabled`, on
/// while the sysctl is 1 or any process holds a `BPF_ENABLE_STATS` fd); `None` when the sysctl
/// cannot be read (e.g. under the unit's `ProcSubset=pid`).
pub fn bpf_stats_enabled() -> Option<bool> {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
        .ok()
        .map(|text| text.trim() != "0")
}

pub struct Enforcer {
    ebpf: Ebpf,
    backend: Backend,
    pub maps: MapSync,
    /// Links still owned by their programs: detached when `ebpf` is dropped.
    links: Vec<HeldLink>,
    /// Set by [`Enforcer::pin_links`].
    pins: Option<Pins>,
    /// The port of guard's resolver, once [`Enforcer::redirect_dns`] sent DNS there.
    dns_port: Option<u16>,
    /// [`Enforcer::report_sandbox_refusals`] attached its program (owned or pinned).
    sandbox_refusals: bool,
    /// [`Enforcer::hold_network`] turned the hold of prompted connects and sends on.
    net_hold: bool,
    /// The port of guard's splice listener on 127.0.0.1 ([`Enforcer::hold_network`]; 0: none).
    splice_port: u16,
    /// [`GETPEERNAME_HOOKS`] loaded (kernel 5.8+), so they are attached with the hold's hooks.
    names_spliced_peers: bool,
    /// [`Enforcer::follow`] made this set an overlay's: it only decides.
    follower: bool,
    /// `cgroup/connect_unix` and `cgroup/sendmsg_unix`, loaded (`None`: this kernel has no
    /// unix hooks, and unix sockets are not decided).
    unix: Option<super::unix_hooks::UnixHooks>,
    /// The kept program set this Enforcer's programs are pinned in ([`Enforcer::load_kept`]).
    kept: Option<KeptPaths>,
    /// Whether `ebpf`'s programs were relocated for this kernel: else (a complete kept set)
    /// every program is loaded already and none may be loaded from it.
    relocated: bool,
}

/// A link attached by this Enforcer and still owned by its program (not pinned).
enum HeldLink {
    /// A `tp_btf` program: the exec tracepoint, or [`SANDBOX_REFUSALS`].
    Trace(&'static str, BtfTracePointLinkId),
    Lsm(&'static str, LsmLinkId),
    /// Program name, the cgroup it is attached to (to attach it again if pinning fails).
    Cgroup(&'static str, PathBuf, CgroupSockAddrLinkId),
    /// `cgroup/sock_create` and the cgroup it is attached to.
    SockCreate(PathBuf, CgroupSockLinkId),
    /// A program attached with [`super::raw_link`] (aya cannot hand these links out to be
    /// pinned, or cannot load the program at all): `cgroup/dev` ([`DEVICES`]) and the unix
    /// socket hooks ([`super::unix_hooks`]); its name, cgroup and link.
    Raw(&'static str, PathBuf, std::os::fd::OwnedFd),
}

impl HeldLink {
    fn program(&self) -> &'static str {
        match self {
            HeldLink::Trace(name, _) | HeldLink::Lsm(name, _) | HeldLink::Cgroup(name, _, _) => {
                name
            }
            HeldLink::SockCreate(_, _) => SOCK_CREATE,
            HeldLink::Raw(name, _, _) => name,
        }
    }
}

/// Where this Enforcer pins its links.
struct Pins {
    dir: PathBuf,
    /// Suffix of the next pin's file name.
    next: usize,
    /// The pinned links (closing their descriptors leaves them attached: they are pinned).
    pinned: Vec<PinnedEntry>,
}

/// A link this Enforcer pinned, with what it attached: a process that can name the pin can
/// detach the link (`BPF_LINK_DETACH` checks no capability), or remove the pin, and
/// [`Enforcer::repair_links`] then attaches and pins it again.
struct PinnedEntry {
    path: PathBuf,
    program: &'static str,
    /// The cgroup a cgroup link is attached to; `None` for a tracing or LSM link, which
    /// cannot be detached.
    cgroup: Option<PathBuf>,
    /// This Enforcer's own descriptor of the link: the link is known even when its pin is gone.
    link: std::os::fd::OwnedFd,
}

/// A pinned link [`Enforcer::repair_links`] found detached or unpinned, and what it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkRepair {
    pub program: &'static str,
    pub pin: PathBuf,
    pub cgroup: Option<PathBuf>,
    /// The link had been detached (else only its pin was gone).
    pub detached: bool,
    /// `None`: attached and pinned again; else why it could not be.
    pub failed: Option<String>,
}

impl std::fmt::Display for LinkRepair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.detached {
            "was detached"
        } else {
            "lost its pin"
        };
        let on = self
            .cgroup
            .as_ref()
            .map(|c| format!(" on {}", c.display()))
            .unwrap_or_default();
        match &self.failed {
            None => write!(
                f,
                "guard's link {} ({}{on}) {what} by someone who could name it, and was attached \
                 and pinned again",
                self.pin.display(),
                self.program
            ),
            Some(err) => write!(
                f,
                "guard's link {} ({}{on}) {what}, and could not be put back: {err}; its hook is \
                 not enforced there until guard is restarted",
                self.pin.display(),
                self.program
            ),
        }
    }
}

// `path_mknod` would decide a file's creation before it happens, but the kernel refuses
// `bpf_d_path` there (it is not among the hooks that may sleep), so a new file is decided at
// `file_open`, just after its creation.
const LSM_HOOKS: [&str; 9] = [
    "bprm_check_security",
    "socket_connect",
    "socket_sendmsg",
    "file_open",
    "path_mkdir",
    "path_unlink",
    "path_rmdir",
    "path_rename",
    "path_truncate",
];
const CGROUP_HOOKS: [&str; 4] = ["connect4", "connect6", "sendmsg4", "sendmsg6"];
/// Attached with the connect and sendmsg hooks: they make replies of guard's resolver seem to
/// come from the address a redirected DNS query was sent to.
const RECVMSG_HOOKS: [&str; 2] = ["recvmsg4", "recvmsg6"];
/// Attached per scope on both backends: the one hook that sees raw, ping, UDP-Lite and SCTP
/// sockets (no LSM hook is needed for it, and the cgroup program works where LSM does not).
const SOCK_CREATE: &str = "sock_create";
/// `cgroup/dev`, attached per scope on both backends: no device node made, no block device
/// written (the disk below every file rule).
const DEVICES: &str = "device_access";
const EXEC: &str = "sched_process_exec";
/// Attached per scope while the hold of prompted connects is on ([`Enforcer::hold_network`]):
/// the egress program drops a held socket's packets until its destination is approved, the
/// sock_ops program bounds a held connect and reports how it ended.
const HELD_EGRESS: &str = "held_egress";
const HELD_HOOKS: [(&str, u32); 2] = [
    (HELD_EGRESS, super::raw_link::BPF_CGROUP_INET_EGRESS),
    ("held_sockops", super::raw_link::BPF_CGROUP_SOCK_OPS),
];
/// Attached with [`HELD_HOOKS`] where the kernel has them (5.8+): `getpeername` of a socket
/// sent to guard's splice listener names the stand-in its program connected to.
const GETPEERNAME_HOOKS: [&str; 2] = ["getpeername4", "getpeername6"];
/// `tp_btf/sys_exit`: reports the writes a sandbox mode refused (Landlock tells nobody).
const SANDBOX_REFUSALS: &str = "sandbox_refusal";

impl Enforcer {
    /// Loads the object and attaches the programs that are not tied to a cgroup: the exec
    /// tracepoint, and on the `lsm` backend the LSM hooks. Nothing is enforced until
    /// [`MapSync::apply`] marks the maps ready and a scope is added.
    pub fn load(backend: Backend) -> Result<Self> {
        Enforcer::load_sized(backend, ExecMapSizes::FULL)
    }

    /// [`Enforcer::load`] with exec maps of `sizes` (a run's overlay's set is smaller).
    pub fn load_sized(backend: Backend, sizes: ExecMapSizes) -> Result<Self> {
        Enforcer::load_with(backend, sizes, None)
    }

    /// [`Enforcer::load`] for a stand-alone run, into a kept program set
    /// ([`super::program_cache`]): the programs the set holds are not loaded and verified
    /// again, and the ones it lacks are pinned in it by [`Enforcer::keep_programs`]. The lease
    /// comes back with it (`None`: every set was busy, or none could be made, and the programs
    /// were loaded afresh); hold it until the run's scope and links are gone.
    pub fn load_kept(backend: Backend, store: &Store) -> Result<(Self, Option<CachedSet>)> {
        let sizes = ExecMapSizes::FULL;
        let set = match kept_set_key(backend, sizes).and_then(|key| CachedSet::lease(store, &key)) {
            Ok(set) => set,
            Err(err) => {
                tracing::warn!("no kept program set, loading afresh: {err:#}");
                None
            }
        };
        let Some(set) = set else {
            return Ok((Enforcer::load_with(backend, sizes, None)?, None));
        };
        match Enforcer::load_with(backend, sizes, Some(set.paths())) {
            Ok(enforcer) => Ok((enforcer, Some(set))),
            Err(err) if set.reused() => {
                // A set that cannot be used as it is goes, and this run loads afresh.
                tracing::warn!(
                    "the kept program set {} could not be used, loading afresh: {err:#}",
                    set.paths().dir().display()
                );
                super::pins::release(set.paths().dir())?;
                Ok((Enforcer::load_with(backend, sizes, None)?, None))
            }
            Err(err) => Err(err),
        }
    }

    /// Pins every program loaded so far that its kept set lacks (those loaded on first use
    /// too: call it again after attaching), and the object's read-only data, which the set's
    /// consistency check reads. Without a kept set it does nothing.
    pub fn keep_programs(&mut self) -> Result<()> {
        let Some(kept) = &self.kept else {
            return Ok(());
        };
        for (name, program) in self.ebpf.programs_mut() {
            let path = kept.program_path(name);
            if program.fd().is_ok() && !path.exists() && loads_on(self.backend, name) {
                program
                    .pin(&path)
                    .with_context(|| format!("pinning {name} at {}", path.display()))?;
            }
        }
        for (name, _, fd) in self.unix.iter().flat_map(|hooks| hooks.programs.iter()) {
            let path = kept.program_path(name);
            if !path.exists() {
                super::raw_link::pin(fd, &path)?;
            }
        }
        for (name, map) in self.ebpf.maps() {
            let path = kept.map_path(name);
            if name.starts_with('.') && !path.exists() {
                map.pin(&path)
                    .with_context(|| format!("pinning {name} at {}", path.display()))?;
            }
        }
        Ok(())
    }

    fn load_with(backend: Backend, sizes: ExecMapSizes, kept: Option<&KeptPaths>) -> Result<Self> {
        // A complete kept set: every program is loaded already, so neither the kernel's BTF
        // (parsed twice, most of a warm start's time) nor relocations are needed.
        let complete = match kept {
            Some(set) => {
                let ebpf = load_object(None, sizes, Some(set))?;
                kept_set_complete(&ebpf, backend, set).then_some(ebpf)
            }
            None => None,
        };
        let relocated = complete.is_none();
        let mut ebpf = match complete {
            Some(ebpf) => ebpf,
            None => load_object(Some(aya_kernel_btf()?), sizes, kept)?,
        };
        if let Some(kept) = kept {
            restore_kept_programs(&mut ebpf, kept)?;
        }
        if relocated {
            // Filling a kept set: every program, so the next run finds it complete.
            preload(&mut ebpf, backend, aya_kernel_btf()?, kept.is_some())?;
        }
        let mut links = Vec::new();
        {
            let exec: &mut BtfTracePoint = program(&mut ebpf, EXEC)?;
            if exec.fd().is_err() {
                exec.load(EXEC, aya_kernel_btf()?)
                    .context("loading tp_btf/sched_process_exec")?;
                log_verified(EXEC, exec.info());
            }
            let id = exec
                .attach()
                .context("attaching tp_btf/sched_process_exec")?;
            links.push(HeldLink::Trace(EXEC, id));
        }
        if backend == Backend::Lsm {
            // The program names are the hook names.
            for hook in LSM_HOOKS {
                let lsm: &mut Lsm = program(&mut ebpf, hook)?;
                if lsm.fd().is_err() {
                    lsm.load(hook, aya_kernel_btf()?)
                        .with_context(|| format!("loading lsm/{hook}"))?;
                    log_verified(hook, lsm.info());
                }
                let id = lsm
                    .attach()
                    .with_context(|| format!("attaching lsm/{hook}"))?;
                links.push(HeldLink::Lsm(hook, id));
            }
        }
        let unix = match kept.and_then(super::unix_hooks::UnixHooks::from_pins) {
            Some(hooks) => Some(hooks),
            None if !relocated => None,
            None => {
                let has_unix_offsets = kernel_offsets()?.sock_addr_uaddrlen != 0;
                let hooks = super::unix_hooks::load(OBJECT, &ebpf, has_unix_offsets)?;
                if let (None, Some(kept)) = (&hooks, kept) {
                    kept.mark(NO_UNIX_HOOKS)?;
                }
                hooks
            }
        };
        let maps = MapSync::with_sizes(sizes);
        Ok(Enforcer {
            ebpf,
            backend,
            maps,
            links,
            pins: None,
            dns_port: None,
            sandbox_refusals: false,
            net_hold: false,
            splice_port: 0,
            names_spliced_peers: false,
            follower: false,
            unix,
            kept: kept.cloned(),
            relocated,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// `(name, kernel program id)` of the programs loaded outside aya (the unix socket hooks).
    pub fn raw_program_ids(&self) -> Vec<(String, u32)> {
        self.unix
            .as_ref()
            .map(super::unix_hooks::UnixHooks::ids)
            .unwrap_or_default()
    }

    /// Each loaded program's accumulated run time and run count, as the kernel keeps them in
    /// its program info while BPF statistics are on ([`bpf_stats_enabled`]); while they are off
    /// both stay where they were (0 if they were never on).
    pub fn program_run_stats(&self) -> Vec<ProgramRunStats> {
        let mut out: Vec<ProgramRunStats> = self
            .ebpf
            .programs()
            .filter_map(|(name, program)| {
                let info = program.info().ok()?;
                Some(ProgramRunStats {
                    name: name.to_string(),
                    run_time: info.run_time(),
                    run_count: info.run_count(),
                })
            })
            .collect();
        let raw = self.raw_program_ids();
        if !raw.is_empty() {
            // Loaded outside aya (kernel::unix_hooks): found by id among the host's programs.
            for info in aya::programs::loaded_programs().flatten() {
                if let Some((name, _)) = raw.iter().find(|(_, id)| *id == info.id()) {
                    out.push(ProgramRunStats {
                        name: name.clone(),
                        run_time: info.run_time(),
                        run_count: info.run_count(),
                    });
                }
            }
        }
        // By name: aya keeps its programs in a hash map, and a scrape should read the same way
        // each time.
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Every program with a link this Enforcer holds, owned or pinned, and whether the link is
    /// live: a cgroup link someone detached is not (until [`Enforcer::repair_links`] puts it
    /// back), nor one whose state cannot be read (fails closed for the report).
    pub fn attached_programs(&self) -> Vec<(&'static str, bool)> {
        let live = |link: &std::os::fd::OwnedFd| {
            super::raw_link::cgroup_link_state(link)
                .map(|state| state.is_none_or(|s| s.cgroup_id != 0))
                .unwrap_or(false)
        };
        let owned = self.links.iter().map(|link| match link {
            HeldLink::Raw(name, _, fd) => (*name, live(fd)),
            other => (other.program(), true),
        });
        // A link whose cgroup was removed went with it: nothing is left there to hold.
        let pinned = self
            .pins
            .iter()
            .flat_map(|pins| &pins.pinned)
            .filter(|entry| entry.cgroup.as_ref().is_none_or(|cgroup| cgroup.exists()))
            .map(|entry| (entry.program, live(&entry.link)));
        owned.chain(pinned).collect()
    }

    /// Whether this kernel has the unix socket hooks (6.7+): without them no connect or send
    /// to a unix socket is decided.
    pub fn decides_unix_sockets(&self) -> bool {
        self.unix.is_some()
    }

    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Attaches the per-cgroup hooks to `cgroup` (they then apply to it and every cgroup below
    /// it): `cgroup/sock_create` and `cgroup/dev` on both backends, and on the `cgroup` backend
    /// the connect, sendmsg and recvmsg hooks too. On the `lsm` backend these are attached only
    /// when DNS is redirected ([`Enforcer::redirect_dns`] first), and then only redirect.
    pub fn attach_cgroup(&mut self, cgroup: &Path) -> Result<()> {
        let id = self.attach_sock_create(cgroup)?;
        self.hold(HeldLink::SockCreate(cgroup.to_path_buf(), id))?;
        // A follower's scopes are below the daemon's, whose device hook decides them.
        if !self.follower {
            let link = self.attach_devices(cgroup)?;
            self.hold(HeldLink::Raw(DEVICES, cgroup.to_path_buf(), link))?;
        }
        let unix_links = match &self.unix {
            Some(hooks) => hooks
                .programs
                .iter()
                .map(|(name, attach_type, program)| {
                    super::raw_link::attach_cgroup(program.as_fd(), cgroup, *attach_type)
                        .map(|link| HeldLink::Raw(name, cgroup.to_path_buf(), link))
                        .with_context(|| format!("attaching cgroup/{name}"))
                })
                .collect::<Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        for link in unix_links {
            self.hold(link)?;
        }
        if self.net_hold {
            for (name, attach_type) in HELD_HOOKS {
                let program = self.held_hook(name)?;
                let link = super::raw_link::attach_cgroup(program, cgroup, attach_type)
                    .with_context(|| format!("attaching {name}"))?;
                self.hold(HeldLink::Raw(name, cgroup.to_path_buf(), link))?;
            }
            if self.names_spliced_peers {
                for name in GETPEERNAME_HOOKS {
                    let id = self.attach_cgroup_hook(name, cgroup)?;
                    self.hold(HeldLink::Cgroup(name, cgroup.to_path_buf(), id))?;
                }
            }
        }
        // On the lsm backend the connect hooks only redirect and hold, which a follower leaves
        // to the daemon's set.
        if self.backend == Backend::Lsm
            && (self.follower || (self.dns_port.is_none() && !self.net_hold))
        {
            return Ok(());
        }
        // A follower rewrites no query, so it has no reply to make seem to come from elsewhere.
        let recvmsg = if self.follower {
            &[][..]
        } else {
            &RECVMSG_HOOKS[..]
        };
        for name in CGROUP_HOOKS.into_iter().chain(recvmsg.iter().copied()) {
            let id = self.attach_cgroup_hook(name, cgroup)?;
            self.hold(HeldLink::Cgroup(name, cgroup.to_path_buf(), id))?;
        }
        Ok(())
    }

    /// Attaches [`SANDBOX_REFUSALS`], which reports each write of a process in scope that
    /// failed with EACCES (as events of kind write with [`guard_common::event::flag::SANDBOX`]):
    /// for a scope whose writes a sandbox mode confines. Once is enough; a second call does
    /// nothing. Its syscall numbers are x86_64's, so elsewhere it is not attached (an error).
    pub fn report_sandbox_refusals(&mut self) -> Result<()> {
        if !cfg!(target_arch = "x86_64") {
            bail!("reporting sandbox refusals is built for x86_64's syscalls only");
        }
        if self.sandbox_refusals {
            return Ok(());
        }
        let relocated = self.relocated;
        let trace: &mut BtfTracePoint = program(&mut self.ebpf, SANDBOX_REFUSALS)?;
        if trace.fd().is_err() {
            may_load(relocated, SANDBOX_REFUSALS)?;
            trace
                .load("sys_exit", aya_kernel_btf()?)
                .context("loading tp_btf/sys_exit")?;
            log_verified(SANDBOX_REFUSALS, trace.info());
        }
        let id = trace.attach().context("attaching tp_btf/sys_exit")?;
        // Loaded once only: a link whose pin failed is kept (or detached) by `hold`, not retried.
        self.sandbox_refusals = true;
        self.hold(HeldLink::Trace(SANDBOX_REFUSALS, id))
    }

    /// Keeps a new link: pinned when this Enforcer pins its links, else owned.
    fn hold(&mut self, link: HeldLink) -> Result<()> {
        if self.pins.is_some() {
            self.pin(link)
        } else {
            self.links.push(link);
            Ok(())
        }
    }

    fn attach_sock_create(&mut self, cgroup: &Path) -> Result<CgroupSockLinkId> {
        let dir =
            File::open(cgroup).with_context(|| format!("opening cgroup {}", cgroup.display()))?;
        let relocated = self.relocated;
        let hook: &mut CgroupSock = program(&mut self.ebpf, SOCK_CREATE)?;
        if hook.fd().is_err() {
            may_load(relocated, SOCK_CREATE)?;
            hook.load().context("loading cgroup/sock_create")?;
        }
        // Single: see attach_cgroup_hook.
        hook.attach(&dir, CgroupAttachMode::Single)
            .with_context(|| format!("attaching cgroup/sock_create to {}", cgroup.display()))
    }

    /// `held_egress` or `held_sockops`, loaded on first use.
    fn held_hook(&mut self, name: &str) -> Result<std::os::fd::BorrowedFd<'_>> {
        let relocated = self.relocated;
        if name == HELD_EGRESS {
            let hook: &mut CgroupSkb = program(&mut self.ebpf, name)?;
            if hook.fd().is_err() {
                may_load(relocated, name)?;
                hook.load().context("loading cgroup_skb/egress")?;
            }
            Ok(hook.fd()?.as_fd())
        } else {
            let hook: &mut SockOps = program(&mut self.ebpf, name)?;
            if hook.fd().is_err() {
                may_load(relocated, name)?;
                hook.load().context("loading sockops")?;
            }
            Ok(hook.fd()?.as_fd())
        }
    }

    fn attach_devices(&mut self, cgroup: &Path) -> Result<std::os::fd::OwnedFd> {
        let relocated = self.relocated;
        let hook: &mut CgroupDevice = program(&mut self.ebpf, DEVICES)?;
        if hook.fd().is_err() {
            may_load(relocated, DEVICES)?;
            hook.load().context("loading cgroup/dev")?;
        }
        let program = hook.fd()?.as_fd();
        super::raw_link::attach_cgroup(program, cgroup, super::raw_link::BPF_CGROUP_DEVICE)
            .context("attaching cgroup/dev")
    }

    fn attach_cgroup_hook(&mut self, name: &str, cgroup: &Path) -> Result<CgroupSockAddrLinkId> {
        let dir =
            File::open(cgroup).with_context(|| format!("opening cgroup {}", cgroup.display()))?;
        let relocated = self.relocated;
        let hook: &mut CgroupSockAddr = program(&mut self.ebpf, name)?;
        if hook.fd().is_err() {
            may_load(relocated, name)?;
            hook.load()
                .with_context(|| format!("loading cgroup/{name}"))?;
        }
        // aya 0.14 passes BPF_F_ALLOW_MULTI to bpf_link_create with AllowMultiple, which
        // the kernel refuses; link-based attachments are multi-attach anyway.
        hook.attach(&dir, CgroupAttachMode::Single)
            .with_context(|| format!("attaching cgroup/{name} to {}", cgroup.display()))
    }

    /// From now on every link of this Enforcer is pinned in `dir` (created; it must be on a
    /// bpffs, see [`super::pins::ensure_bpffs`]): the ones attached already and any that
    /// [`Enforcer::attach_cgroup`] attaches later, one file per link named
    /// `<program>-<n>`. Pinned links stay attached after this Enforcer and its process are
    /// gone (even after SIGKILL), deciding with the maps' last contents (the programs keep
    /// their maps alive), until [`super::pins::release`] removes the pins.
    ///
    /// Use a fresh folder per Enforcer (a generation, [`super::pins::next_generation`]): a pin
    /// file that exists already is an error. On an error the links not yet pinned stay
    /// attached and owned by this Enforcer (a link whose pin failed is attached again), so
    /// enforcement goes on while it lives, and calling again with the same folder pins the
    /// rest; do not release an older generation until this has succeeded.
    pub fn pin_links(&mut self, dir: &Path) -> Result<()> {
        match &self.pins {
            Some(pins) if pins.dir != dir => bail!(
                "this Enforcer pins its links in {} already, not {}",
                pins.dir.display(),
                dir.display()
            ),
            Some(_) => {}
            None => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating the pin folder {}", dir.display()))?;
                if !is_bpffs(dir)? {
                    bail!(
                        "{} is not on a bpffs, so links cannot be pinned there (mount one with \
                         `mount -t bpf bpf <dir>`, or pins::ensure_bpffs)",
                        dir.display()
                    );
                }
                self.pins = Some(Pins {
                    dir: dir.to_path_buf(),
                    next: 0,
                    pinned: Vec::new(),
                });
            }
        }
        let mut links = std::mem::take(&mut self.links).into_iter();
        while let Some(link) = links.next() {
            if let Err(err) = self.pin(link) {
                // The rest stay owned (and attached) until the Enforcer is dropped, or a later
                // call pins them.
                self.links.extend(links);
                return Err(err);
            }
        }
        Ok(())
    }

    /// The folder [`Enforcer::pin_links`] pins in, if it was called.
    pub fn pin_dir(&self) -> Option<&Path> {
        self.pins.as_ref().map(|pins| pins.dir.as_path())
    }

    /// Takes `link` from its program and pins it in the pin folder. aya's `FdLink::pin`
    /// consumes the link, so one whose pin fails is detached: it is attached again (and kept
    /// unpinned) before the error is returned.
    fn pin(&mut self, link: HeldLink) -> Result<()> {
        let pins = self
            .pins
            .as_mut()
            .expect("pin is called only once pin_links set the folder");
        let program_name = link.program();
        let path = pins.dir.join(format!("{program_name}-{}", pins.next));
        pins.next += 1;
        if path.exists() {
            // Checked first: pinning over an existing file would fail only after the link is
            // taken from its program.
            self.links.push(link);
            bail!("{} exists already: pin into a fresh folder", path.display());
        }
        if let HeldLink::Raw(name, cgroup, fd) = link {
            // Pinning does not take this link: on an error it stays attached and owned.
            if let Err(err) = super::raw_link::pin(&fd, &path) {
                self.links.push(HeldLink::Raw(name, cgroup, fd));
                return Err(err);
            }
            self.keep_pinned(PinnedEntry {
                path,
                program: name,
                cgroup: Some(cgroup),
                link: fd,
            });
            return Ok(());
        }
        let (fd_link, cgroup): (FdLink, Option<PathBuf>) = match link {
            HeldLink::Trace(name, id) => {
                let trace: &mut BtfTracePoint = program(&mut self.ebpf, name)?;
                (trace.take_link(id)?.into(), None)
            }
            HeldLink::Lsm(name, id) => {
                let lsm: &mut Lsm = program(&mut self.ebpf, name)?;
                (lsm.take_link(id)?.into(), None)
            }
            HeldLink::Cgroup(name, cgroup, id) => {
                let hook: &mut CgroupSockAddr = program(&mut self.ebpf, name)?;
                let fd_link = FdLink::try_from(hook.take_link(id)?).with_context(|| {
                    format!(
                        "cgroup/{name} is not attached through a bpf_link, so it cannot be pinned"
                    )
                })?;
                (fd_link, Some(cgroup))
            }
            HeldLink::SockCreate(cgroup, id) => {
                let hook: &mut CgroupSock = program(&mut self.ebpf, SOCK_CREATE)?;
                let fd_link = FdLink::try_from(hook.take_link(id)?).context(
                    "cgroup/sock_create is not attached through a bpf_link, so it cannot be pinned",
                )?;
                (fd_link, Some(cgroup))
            }
            HeldLink::Raw(..) => unreachable!("pinned above"),
        };
        match fd_link.pin(&path) {
            Ok(pinned) => {
                // Our own descriptor of it, by the pin just made (aya's is not handed out).
                let link = super::raw_link::obj_get(&path);
                drop(pinned);
                self.keep_pinned(PinnedEntry {
                    path,
                    program: program_name,
                    cgroup,
                    link: link?,
                });
                Ok(())
            }
            Err(err) => {
                let again = self.reattach(program_name, cgroup.as_deref());
                let err = anyhow::Error::new(err)
                    .context(format!("pinning {program_name} at {}", path.display()));
                match again {
                    Ok(link) => {
                        self.links.push(link);
                        Err(err)
                    }
                    Err(again) => Err(err.context(format!(
                        "and attaching {program_name} again failed too, so it is detached: {again:#}"
                    ))),
                }
            }
        }
    }

    fn keep_pinned(&mut self, entry: PinnedEntry) {
        self.pins
            .as_mut()
            .expect("pinning sets the folder first")
            .pinned
            .push(entry);
    }

    /// Looks at every pinned cgroup link of this Enforcer: one that was detached is attached
    /// again to the same cgroup as the same hook and pinned in its old place, and a link whose
    /// pin was removed is pinned again. Returns what it found, one entry a link (empty: all
    /// was in place). Tracing and LSM links cannot be detached; their pins are put back too.
    pub fn repair_links(&mut self) -> Vec<LinkRepair> {
        let Some(pins) = self.pins.as_mut() else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut entries = std::mem::take(&mut pins.pinned);
        // A link whose cgroup was removed is detached by the kernel: nothing is left to hold
        // there, so its pin goes and it is not reported.
        entries.retain(|entry| {
            let gone = entry.cgroup.as_ref().is_some_and(|cgroup| !cgroup.exists());
            if gone {
                tracing::info!(
                    "the cgroup of {} is gone: its link is released",
                    entry.path.display()
                );
                let _ = std::fs::remove_file(&entry.path);
            }
            !gone
        });
        for entry in &mut entries {
            let state = super::raw_link::cgroup_link_state(&entry.link)
                .ok()
                .flatten();
            let detached = state.is_some_and(|s| s.cgroup_id == 0);
            let unpinned = !entry.path.exists();
            if !detached && !unpinned {
                continue;
            }
            let result = match (detached, state, entry.cgroup.clone()) {
                (true, Some(state), Some(cgroup)) => self
                    .attach_again(entry.program, &cgroup, state.attach_type)
                    .and_then(|link| {
                        let _ = std::fs::remove_file(&entry.path);
                        super::raw_link::pin(&link, &entry.path)?;
                        entry.link = link;
                        Ok(())
                    }),
                _ => {
                    let _ = std::fs::remove_file(&entry.path);
                    super::raw_link::pin(&entry.link, &entry.path)
                }
            };
            found.push(LinkRepair {
                program: entry.program,
                pin: entry.path.clone(),
                cgroup: entry.cgroup.clone(),
                detached,
                failed: result.err().map(|err| format!("{err:#}")),
            });
        }
        if let Some(pins) = self.pins.as_mut() {
            pins.pinned = entries;
        }
        found
    }

    /// A new link of the loaded program `name` on `cgroup` as `attach_type`.
    fn attach_again(
        &mut self,
        name: &str,
        cgroup: &Path,
        attach_type: u32,
    ) -> Result<std::os::fd::OwnedFd> {
        let unix = self
            .unix
            .as_ref()
            .and_then(|hooks| hooks.programs.iter().find(|(n, _, _)| *n == name));
        let program = match unix {
            Some((_, _, program)) => program.as_fd(),
            None => self
                .ebpf
                .program(name)
                .ok_or_else(|| anyhow!("no program {name}"))?
                .fd()
                .with_context(|| format!("{name} is not loaded"))?
                .as_fd(),
        };
        super::raw_link::attach_cgroup(program, cgroup, attach_type)
            .with_context(|| format!("attaching {name} to {} again", cgroup.display()))
    }

    fn reattach(&mut self, name: &'static str, cgroup: Option<&Path>) -> Result<HeldLink> {
        Ok(match cgroup {
            Some(cgroup) if name == SOCK_CREATE => {
                HeldLink::SockCreate(cgroup.to_path_buf(), self.attach_sock_create(cgroup)?)
            }
            Some(cgroup) => HeldLink::Cgroup(
                name,
                cgroup.to_path_buf(),
                self.attach_cgroup_hook(name, cgroup)?,
            ),
            None if name == EXEC || name == SANDBOX_REFUSALS => {
                let trace: &mut BtfTracePoint = program(&mut self.ebpf, name)?;
                HeldLink::Trace(name, trace.attach()?)
            }
            None => {
                let lsm: &mut Lsm = program(&mut self.ebpf, name)?;
                HeldLink::Lsm(name, lsm.attach()?)
            }
        })
    }

    /// Lists a cgroup (by id) as in scope: it and the cgroups below it are enforced on, unless
    /// a deeper listed cgroup is exempt ([`Enforcer::exempt_scope`]). The deepest listed cgroup
    /// decides. On the `cgroup` backend, connects are decided only where
    /// [`Enforcer::attach_cgroup`] attached the hooks (to this cgroup or an ancestor).
    pub fn add_scope(&mut self, cgroup_id: u64) -> Result<()> {
        self.maps.add_scope(&mut self.ebpf, cgroup_id)
    }

    /// Lists a cgroup (by id) as exempt: its processes are not enforced on even when an
    /// ancestor is in scope (e.g. the daemon's own cgroup under a host-wide root scope).
    pub fn exempt_scope(&mut self, cgroup_id: u64) -> Result<()> {
        self.maps.exempt_scope(&mut self.ebpf, cgroup_id)
    }

    /// Removes a cgroup's listing (in scope or exempt): its ancestors' listings decide again.
    pub fn remove_scope(&mut self, cgroup_id: u64) -> Result<()> {
        if self.net_hold {
            self.release_scope(cgroup_id)?;
        }
        self.maps.remove_scope(&mut self.ebpf, cgroup_id)
    }

    /// From now on the scope's DNS (TCP and UDP to port 53, any address) goes to guard's
    /// resolver on 127.0.0.1 and ::1 at `port`. Call before [`Enforcer::attach_cgroup`]: on
    /// the `lsm` backend only cgroups attached after it get the redirecting hooks.
    pub fn redirect_dns(&mut self, port: u16) -> Result<()> {
        let mut map: Array<_, DnsRedirect> = Array::try_from(
            self.ebpf
                .map_mut("DNS_REDIRECT")
                .ok_or_else(|| anyhow!("no DNS_REDIRECT map"))?,
        )?;
        let redirect = DnsRedirect {
            port,
            redirect_only: u8::from(self.backend == Backend::Lsm),
            follower: u8::from(self.follower),
        };
        map.set(0, redirect, 0).context("writing DNS_REDIRECT")?;
        self.dns_port = Some(port);
        Ok(())
    }

    /// Makes this set a follower, an overlay's (`guard run --overlay`, a `[[scope.patterns]]`
    /// pattern's rules): it is stacked on scopes that the daemon's own set enforces too, and the
    /// kernel refuses what either refuses. A follower only decides: DNS passes it (the daemon's
    /// set sends DNS to guard's resolver at `resolver_port`; `None`: there is none, and DNS is
    /// decided by address as any call), no address is rewritten, nothing is held (a prompt is
    /// refused and asked). Its cgroup programs are attached below the daemon's, or to the same
    /// cgroup before them, so they run first and see the call as the program made it. Call
    /// before [`Enforcer::attach_cgroup`].
    pub fn follow(&mut self, resolver_port: Option<u16>) -> Result<()> {
        self.follower = true;
        match resolver_port {
            Some(port) => self.redirect_dns(port),
            None => Ok(()),
        }
    }

    /// Holds prompted TCP connects and UDP sends as a slow network would, instead of refusing
    /// them (`guard-ebpf` `held`): a blocking connect waits up to `user_timeout`, the program's
    /// own timeouts apply, an approval lets the next SYN out. A connect to a stand-in address
    /// with no real address yet goes to guard's splice listener at `splice_port` (`None`: it is
    /// refused). Call before [`Enforcer::attach_cgroup`] (it attaches the egress and sock_ops
    /// programs to each scope from then on).
    pub fn hold_network(
        &mut self,
        user_timeout: std::time::Duration,
        splice_port: Option<u16>,
    ) -> Result<()> {
        self.write_net_hold(NetHold {
            enabled: 1,
            lsm_defers: u8::from(self.backend == Backend::Lsm),
            splice_port: splice_port.unwrap_or(0),
            user_timeout_ms: u32::try_from(user_timeout.as_millis()).unwrap_or(u32::MAX),
        })?;
        self.net_hold = true;
        self.splice_port = splice_port.unwrap_or(0);
        self.names_spliced_peers = splice_port.is_some() && self.load_getpeername_hooks();
        Ok(())
    }

    /// Loads [`GETPEERNAME_HOOKS`]; `false` where the kernel has no such hook (before 5.8):
    /// there `getpeername` of a spliced connect names the splice listener, which it only
    /// reports (nothing is let through or refused by it).
    fn load_getpeername_hooks(&mut self) -> bool {
        let relocated = self.relocated;
        for name in GETPEERNAME_HOOKS {
            let loaded = program::<CgroupSockAddr>(&mut self.ebpf, name).and_then(|hook| {
                if hook.fd().is_err() {
                    may_load(relocated, name)?;
                    hook.load()
                        .with_context(|| format!("loading cgroup/{name}"))?;
                }
                Ok(())
            });
            if let Err(err) = loaded {
                tracing::warn!(
                    "getpeername of a connect held at guard's splice listener names the \
                     listener, not the stand-in its program connected to: {err:#}"
                );
                return false;
            }
        }
        true
    }

    /// Holds the prompted connects of scope `id` (a cgroup id listed in scope) from now on,
    /// when the hold is on: someone answers its asks.
    pub fn hold_scope(&mut self, id: u64) -> Result<()> {
        let mut map = self.hold_scopes_map()?;
        map.insert(id, 1, 0)
            .context("listing a scope whose connects are held")
    }

    /// Scope `id`'s prompts are refused at once again (it ended, or nobody answers for it).
    pub fn release_scope(&mut self, id: u64) -> Result<()> {
        let mut map = self.hold_scopes_map()?;
        match map.remove(&id) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(err) => Err(err).context("removing a scope whose connects were held"),
        }
    }

    fn write_net_hold(&mut self, hold: NetHold) -> Result<()> {
        let mut map: Array<_, NetHold> = Array::try_from(
            self.ebpf
                .map_mut("NET_HOLD")
                .ok_or_else(|| anyhow!("no NET_HOLD map"))?,
        )?;
        map.set(0, hold, 0).context("writing NET_HOLD")
    }

    /// Whether the hold of prompted connects was set up ([`Enforcer::hold_network`]).
    pub fn holds_network(&self) -> bool {
        self.net_hold
    }

    /// The sockets held now or since (`HELD_SOCKETS`), by cookie.
    pub fn held_sockets(&self) -> Result<Vec<(u64, HeldSocket)>> {
        let map = self.held_sockets_map()?;
        map.iter()
            .map(|entry| entry.context("reading HELD_SOCKETS"))
            .collect()
    }

    /// The real address stand-in `stand_in` is mapped to (`STAND_INS`), once an approval or a
    /// rule let its name be resolved.
    pub fn stand_in_target(
        &self,
        stand_in: std::net::Ipv4Addr,
    ) -> Result<Option<std::net::Ipv4Addr>> {
        let map = self
            .ebpf
            .map("STAND_INS")
            .ok_or_else(|| anyhow!("no STAND_INS map"))?;
        let map: aya::maps::HashMap<_, u32, u32> = aya::maps::HashMap::try_from(map)?;
        match map.get(&u32::from_ne_bytes(stand_in.octets()), 0) {
            Ok(real) => Ok(Some(std::net::Ipv4Addr::from(real.to_ne_bytes()))),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(err) => Err(err).context("reading STAND_INS"),
        }
    }

    /// The scope (cgroup id) whose DNS socket `cookie` the kernel sent to guard's resolver
    /// (`None`: not redirected by this set, or its entry is gone).
    pub fn dns_query_scope(&self, cookie: u64) -> Result<Option<u64>> {
        let map: aya::maps::HashMap<_, u64, guard_common::maps::DnsOriginal> =
            aya::maps::HashMap::try_from(
                self.ebpf
                    .map("DNS_ORIGINALS")
                    .ok_or_else(|| anyhow!("no DNS_ORIGINALS map"))?,
            )?;
        match map.get(&cookie, 0) {
            Ok(original) => Ok(Some(original.scope).filter(|scope| *scope != 0)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(err) => Err(err).context("reading a DNS_ORIGINALS entry"),
        }
    }

    /// A reader of what the DNS redirect records of each query socket (scope and process),
    /// for guard's resolver's own thread.
    pub fn dns_origins(&self) -> Result<super::dns_origins::DnsOrigins> {
        super::dns_origins::DnsOrigins::open(
            self.ebpf
                .map("DNS_ORIGINALS")
                .ok_or_else(|| anyhow!("no DNS_ORIGINALS map"))?,
        )
    }

    /// What the kernel says of held socket `cookie` (`None`: not listed).
    pub fn held_socket(&self, cookie: u64) -> Result<Option<HeldSocket>> {
        let map = self.held_sockets_map()?;
        match map.get(&cookie, 0) {
            Ok(entry) => Ok(Some(entry)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(err) => Err(err).context("reading a HELD_SOCKETS entry"),
        }
    }

    /// Ends held socket `cookie` on a denial: marked denied (its packets stay dropped, and the
    /// kernel ends its connect at the next SYN retry, within a second, with ETIMEDOUT), then
    /// ended at once with `SOCK_DESTROY` where the kernel has `sock_diag` for TCP (ECONNABORTED).
    /// `Ok(false)`: only marked (no such socket for `sock_diag`, or no `sock_diag`).
    pub fn end_held_socket(&mut self, cookie: u64) -> Result<bool> {
        let splice_port = self.splice_port;
        let mut map = self.held_sockets_map_mut()?;
        let mut entry = match map.get(&cookie, 0) {
            Ok(entry) => entry,
            Err(aya::maps::MapError::KeyNotFound) => return Ok(false),
            Err(err) => return Err(err).context("reading a HELD_SOCKETS entry"),
        };
        // Where the socket is connecting: a spliced one to the listener, not its stand-in.
        let connection = super::held::connection(&entry, splice_port);
        entry.state = guard_common::maps::held::DENIED;
        map.insert(cookie, entry, 2 /* BPF_EXIST */)
            .context("marking a held socket denied")?;
        if entry.transport != guard_common::maps::TRANSPORT_TCP {
            return Ok(false);
        }
        match super::held::end_socket(cookie, &connection) {
            Ok(()) => Ok(true),
            // No sock_diag handler for TCP (a kernel without the module), or none built in:
            // the mark ends it at its next retry.
            Err(err)
                if matches!(
                    err.raw_os_error(),
                    Some(libc::ENOENT | libc::EOPNOTSUPP | libc::EINVAL)
                ) =>
            {
                Ok(false)
            }
            Err(err) => Err(err).context("ending a held socket (SOCK_DESTROY)"),
        }
    }

    /// Ends held socket `cookie` ([`Enforcer::end_held_socket`]) and forgets it: for a socket
    /// nobody will answer for, whose end nobody waits to see.
    pub fn end_and_forget_held_socket(&mut self, cookie: u64) -> Result<()> {
        self.end_held_socket(cookie)?;
        self.forget_held_socket(cookie)
    }

    fn held_sockets_map(&self) -> Result<aya::maps::HashMap<&aya::maps::MapData, u64, HeldSocket>> {
        let map = self
            .ebpf
            .map("HELD_SOCKETS")
            .ok_or_else(|| anyhow!("no HELD_SOCKETS map"))?;
        Ok(aya::maps::HashMap::try_from(map)?)
    }

    fn held_sockets_map_mut(
        &mut self,
    ) -> Result<aya::maps::HashMap<&mut aya::maps::MapData, u64, HeldSocket>> {
        let map = self
            .ebpf
            .map_mut("HELD_SOCKETS")
            .ok_or_else(|| anyhow!("no HELD_SOCKETS map"))?;
        Ok(aya::maps::HashMap::try_from(map)?)
    }

    fn hold_scopes_map(&mut self) -> Result<aya::maps::HashMap<&mut aya::maps::MapData, u64, u8>> {
        let map = self
            .ebpf
            .map_mut("HOLD_SCOPES")
            .ok_or_else(|| anyhow!("no HOLD_SCOPES map"))?;
        Ok(aya::maps::HashMap::try_from(map)?)
    }

    /// Forgets held socket `cookie` (its packets go out unheld from now on).
    pub fn forget_held_socket(&mut self, cookie: u64) -> Result<()> {
        let mut map = self.held_sockets_map_mut()?;
        match map.remove(&cookie) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(err) => Err(err).context("removing a HELD_SOCKETS entry"),
        }
    }

    /// The port DNS is redirected to, if it is.
    pub fn dns_port(&self) -> Option<u16> {
        self.dns_port
    }

    pub fn apply(
        &mut self,
        image: &crate::compile::image::EnforcementImage,
    ) -> Result<super::maps::SyncStats> {
        self.maps.apply(&mut self.ebpf, image)
    }

    /// Only `image`'s destination entries at `keys` and its stand-ins (see
    /// [`super::maps::MapSync::update_destinations`]), after [`Enforcer::apply`] has put a
    /// whole image in force once.
    pub fn update_destinations(
        &mut self,
        image: &crate::compile::image::EnforcementImage,
        keys: &[crate::compile::image::DestinationKey],
    ) -> Result<super::maps::SyncStats> {
        self.maps.update_destinations(&mut self.ebpf, image, keys)
    }

    /// What each scope put in the event ring buffer and lost, by its cgroup id.
    pub fn scope_events(
        &self,
    ) -> Result<std::collections::HashMap<u64, super::maps::ScopeEventCounts>> {
        super::maps::read_scope_events(&self.ebpf)
    }

    /// Per-CPU counters summed: `(name, value)` in `guard_common::maps::counter` order.
    pub fn counters(&self) -> Result<Vec<(&'static str, u64)>> {
        super::maps::read_counters(&self.ebpf)
    }

    /// The event ring buffer; call once.
    pub fn events(&mut self) -> Result<super::events::EventReader> {
        let map = self
            .ebpf
            .take_map("EVENTS")
            .ok_or_else(|| anyhow!("the event ring buffer was already taken"))?;
        super::events::EventReader::new(map)
    }
}

#[cfg(test)]
mod tests {
    use super::{KEPT_MAPS, OBJECT};

    /// A map the object has and [`KEPT_MAPS`] lacks would not be pinned in a kept set: every
    /// reuse would find the set inconsistent and load afresh.
    #[test]
    fn the_kept_maps_are_the_objects_maps() {
        if OBJECT.is_empty() {
            eprintln!("skipped: built with AYA_BUILD_SKIP=1, no BPF object to compare with");
            return;
        }
        let object = aya_obj::Object::parse(OBJECT).expect("parsing guard's BPF object");
        let mut ours: Vec<&str> = object
            .maps
            .keys()
            .map(String::as_str)
            .filter(|name| !name.starts_with('.'))
            .collect();
        ours.sort_unstable();
        let mut kept = KEPT_MAPS.to_vec();
        kept.sort_unstable();
        assert_eq!(ours, kept);
    }
}
