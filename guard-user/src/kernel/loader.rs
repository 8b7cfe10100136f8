//! Loading and attaching guard's BPF programs. Everything loaded here is owned by the
//! [`Enforcer`]: dropping it detaches every program (links are file descriptors; nothing is
//! pinned), so a crash of the process fails open rather than leaving rules nobody maintains.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use aya::programs::{BtfTracePoint, CgroupAttachMode, CgroupSockAddr, Lsm};
use aya::{Btf, Ebpf, EbpfLoader};

use super::btf::{aya_kernel_btf, kernel_offsets};
use super::maps::MapSync;

/// The BPF object built by `build.rs` from `guard-ebpf`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/guard"));

/// How guard reaches the kernel (DESIGN.md, "Enforcement backends").
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
}

/// The `lsm` backend's programs load and the `bpf` LSM is active (an inactive BPF LSM loads
/// and attaches programs that never run).
pub fn try_load_lsm() -> Result<()> {
    let active = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
    let btf = aya_kernel_btf()?;
    let mut ebpf = load_object(btf)?;
    let program: &mut Lsm = program(&mut ebpf, "bprm_check_security")?;
    program
        .load("bprm_check_security", btf)
        .context("the kernel refused to load lsm/bprm_check_security")?;
    if !active.split(',').any(|lsm| lsm.trim() == "bpf") {
        bail!(
            "the programs load, but `bpf` is not among the active LSMs ({}); boot with lsm=...,bpf",
            active.trim()
        );
    }
    Ok(())
}

fn load_object(btf: &Btf) -> Result<Ebpf> {
    if OBJECT.is_empty() {
        bail!("this guard was built with AYA_BUILD_SKIP=1 and carries no BPF programs");
    }
    let offsets = kernel_offsets()?;
    EbpfLoader::new()
        .btf(Some(btf))
        .override_global("OFFSETS", &offsets, true)
        .load(OBJECT)
        .context("loading guard's BPF object")
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
pub struct Enforcer {
    ebpf: Ebpf,
    backend: Backend,
    pub maps: MapSync,
}

impl Enforcer {
    /// Loads the object and attaches the programs that are not tied to a cgroup: the exec
    /// tracepoint, and on the `lsm` backend the LSM hooks. Nothing is enforced until
    /// [`MapSync::apply`] marks the maps ready and a scope is added.
    pub fn load(backend: Backend) -> Result<Self> {
        let btf = aya_kernel_btf()?;
        let mut ebpf = load_object(btf)?;
        {
            let exec: &mut BtfTracePoint = program(&mut ebpf, "sched_process_exec")?;
            exec.load("sched_process_exec", btf)
                .context("loading tp_btf/sched_process_exec")?;
            exec.attach()
                .context("attaching tp_btf/sched_process_exec")?;
        }
        if backend == Backend::Lsm {
            for (name, hook) in [
                ("bprm_check_security", "bprm_check_security"),
                ("socket_connect", "socket_connect"),
                ("socket_sendmsg", "socket_sendmsg"),
            ] {
                let lsm: &mut Lsm = program(&mut ebpf, name)?;
                lsm.load(hook, btf)
                    .with_context(|| format!("loading lsm/{hook}"))?;
                lsm.attach()
                    .with_context(|| format!("attaching lsm/{hook}"))?;
            }
        }
        let maps = MapSync::new();
        Ok(Enforcer {
            ebpf,
            backend,
            maps,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// On the `cgroup` backend, attaches the connect and sendmsg hooks to `cgroup` (they then
    /// apply to it and every cgroup below it). The `lsm` backend needs nothing per cgroup.
    pub fn attach_cgroup(&mut self, cgroup: &Path) -> Result<()> {
        if self.backend == Backend::Lsm {
            return Ok(());
        }
        let dir =
            File::open(cgroup).with_context(|| format!("opening cgroup {}", cgroup.display()))?;
        for name in ["connect4", "connect6", "sendmsg4", "sendmsg6"] {
            let hook: &mut CgroupSockAddr = program(&mut self.ebpf, name)?;
            if hook.fd().is_err() {
                hook.load()
                    .with_context(|| format!("loading cgroup/{name}"))?;
            }
            // aya 0.14 passes BPF_F_ALLOW_MULTI to bpf_link_create with AllowMultiple, which
            // the kernel refuses; link-based attachments are multi-attach anyway.
            hook.attach(&dir, CgroupAttachMode::Single)
                .with_context(|| format!("attaching cgroup/{name} to {}", cgroup.display()))?;
        }
        Ok(())
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
        self.maps.remove_scope(&mut self.ebpf, cgroup_id)
    }

    pub fn apply(
        &mut self,
        image: &crate::compile::image::EnforcementImage,
    ) -> Result<super::maps::SyncStats> {
        self.maps.apply(&mut self.ebpf, image)
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
