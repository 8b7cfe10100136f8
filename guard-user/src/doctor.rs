//! `guard doctor`: what this kernel allows, found by loading programs (never by reading config).

use serde::Serialize;

use crate::kernel::btf::kernel_offsets;
use crate::kernel::layers::{FileGaps, Layer, LayerState, LayerStatus};
use crate::kernel::loader::{Backend, try_load_lsm};
use crate::kernel::scope::{ScopeCgroup, cgroup2_root};

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub backend: Option<Backend>,
    pub checks: Vec<Check>,
    /// Whether `guard run` can confine writes (either backend).
    pub landlock: Landlock,
    /// How the backend in use holds each kind of rule (empty when none works).
    pub enforces: Vec<Enforcing>,
    /// What guard's resolver cannot see, and how each is decided instead.
    pub resolver_cannot_see: Vec<BlindSpot>,
    /// Whether the system rules folder is where a command under guard cannot plant a policy.
    pub system_rules: SystemRules,
    /// The `guard run --sandbox` modes this machine can hold.
    pub sandbox_modes: crate::confine::sandbox::SandboxSupport,
    /// What keeps a root process of each kind of scope from loosening it ([`AGAINST_ROOT`]).
    pub against_root: Vec<AgainstRoot>,
    /// The layers of enforcement a scope here gets, as the probes found them (a run's and the
    /// daemon's own layers, live, are in `guard status`).
    pub layers: Vec<LayerStatus>,
}

/// What holds a root process inside one kind of scope, and what it can still do against
/// guard's own programs.
#[derive(Debug, Serialize)]
pub struct AgainstRoot {
    pub scope: &'static str,
    pub holds: &'static str,
    pub can_still: &'static str,
}

/// [`Report::against_root`]: the commands `guard run` starts, and the processes of a daemon's
/// configured cgroups and matched containers, which guard did not start (docs/limits.md).
pub const AGAINST_ROOT: [(&str, &str, &str); 2] = [
    (
        "a `guard run` command (stand-alone, or under the daemon)",
        "every bpf file system hidden in its mount namespace (it cannot name guard's pins); \
         `bpf`, `setns` and new user namespaces refused by its seccomp filter; CAP_NET_ADMIN, \
         CAP_SYS_ADMIN, CAP_BPF, CAP_SYS_CHROOT and the rest of the dropped set gone; a run it \
         asks the daemon for is nested below its own scope; a link detached anyway is attached \
         again within 250 ms",
        "nothing against guard's programs that guard knows of",
    ),
    (
        "a daemon's `[scope]` cgroup or `[[scope.patterns]]` container (processes guard did not \
         start)",
        "the daemon's programs, attached to the cgroup; pins on the host's bpffs, which a \
         container without it mounted cannot name; a detached link attached again within \
         250 ms, recorded (`link_repaired`), counted in `guard status` and the metrics",
        "with a bpffs in reach (root on the host): open guard's pins and detach its connect, \
         send and device links for up to 250 ms at a time; with its capabilities kept: rewrite \
         its own traffic after the decision (NAT, policy routing: CAP_NET_ADMIN), leave its \
         cgroup (clone3 into another cgroup, a write to a cgroup.procs it can reach); run such \
         processes under `guard run` to take these away",
    ),
];

/// The system rules folder (`/etc/guard/rules`, or `GUARD_SYSTEM_RULES`): the policy every
/// `guard run` without `--rules` loads, so a command that could make or change it would choose
/// the next run's policy.
#[derive(Debug, Serialize)]
pub struct SystemRules {
    pub path: String,
    /// Safe as it is: it exists and only root can change it, or it is missing and guard's
    /// own folder above it is held read-only under `guard run`.
    pub ok: bool,
    pub detail: String,
}

impl SystemRules {
    pub fn probe() -> SystemRules {
        Self::probe_at(&crate::policy::load::system_rules_location())
    }

    fn probe_at(path: &std::path::Path) -> SystemRules {
        use std::os::unix::fs::MetadataExt;
        let shown = path.display().to_string();
        let make =
            "create it as root (`install -d -m 0755 PATH`) so it is root's".replace("PATH", &shown);
        let (ok, detail) = match std::fs::metadata(path) {
            Ok(meta) if meta.uid() != 0 || meta.mode() & 0o022 != 0 => (
                false,
                format!(
                    "exists but is not root's alone (owner uid {}, mode {:o}): whoever can \
                     write it chooses the policy; `chown root: {shown} && chmod go-w {shown}`",
                    meta.uid(),
                    meta.mode() & 0o7777
                ),
            ),
            Ok(_) => (
                true,
                "exists, root's alone; under `guard run` it is read-only".to_string(),
            ),
            Err(_) => match crate::confine::guards_own_holder(path) {
                Some(holder) => (
                    true,
                    format!(
                        "missing (the embedded default policy applies); `guard run` holds {} \
                         read-only, so no command can make it",
                        holder.display()
                    ),
                ),
                None => (
                    false,
                    format!(
                        "missing, and the folder above it is not guard's, so `guard run` cannot \
                         hold its place: a root command could make it and plant the next run's \
                         policy; {make}"
                    ),
                ),
            },
        };
        SystemRules {
            path: shown,
            ok,
            detail,
        }
    }
}

/// One kind of rule and how the backend in use holds it.
#[derive(Debug, Serialize)]
pub struct Enforcing {
    pub rules: &'static str,
    pub how: &'static str,
    /// `false` where the kernel does not enforce these rules on this backend.
    pub enforced: bool,
}

/// One thing guard's resolver cannot see ([`crate::resolve::CANNOT_SEE`]).
#[derive(Debug, Serialize)]
pub struct BlindSpot {
    pub what: &'static str,
    pub how: &'static str,
}

/// The rows of [`crate::kernel::coverage::ENFORCES`] for `backend`.
pub fn enforcing(backend: Backend) -> Vec<Enforcing> {
    crate::kernel::coverage::ENFORCES
        .iter()
        .map(|row| Enforcing {
            rules: row.rules,
            how: row.on(backend),
            enforced: !row.on(backend).starts_with("not enforced"),
        })
        .collect()
}

/// The Landlock ABI this kernel answers, found by asking it
/// (`landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`).
#[derive(Debug, Serialize)]
pub struct Landlock {
    /// The ABI version; `None` when Landlock is absent.
    pub abi: Option<u32>,
    pub present: bool,
    pub detail: String,
}

impl Landlock {
    pub fn probe() -> Landlock {
        // securityfs says which LSMs are active, where it is mounted; the syscall decides.
        let listed = std::fs::read_to_string("/sys/kernel/security/lsm")
            .ok()
            .map(|lsms| lsms.trim().split(',').any(|lsm| lsm == "landlock"));
        let listed = match listed {
            Some(true) => " (listed in /sys/kernel/security/lsm)",
            Some(false) => " (not listed in /sys/kernel/security/lsm)",
            None => "",
        };
        match crate::confine::landlock::abi() {
            Ok(abi) if abi >= 1 => Landlock {
                abi: Some(abi),
                present: true,
                detail: format!(
                    "ABI {abi}{listed}: `guard run` confines writes below the protected paths \
                     and the rule sets' write(...) denials"
                ),
            },
            Ok(abi) => Landlock {
                abi: None,
                present: false,
                detail: format!("absent (ABI {abi}){listed}: `guard run` does not confine writes"),
            },
            Err(err) => Landlock {
                abi: None,
                present: false,
                detail: format!(
                    "absent: {}{listed}: `guard run` does not confine writes",
                    crate::confine::landlock::absent_because(&err)
                ),
            },
        }
    }
}

fn check(name: &'static str, result: anyhow::Result<String>) -> Check {
    match result {
        Ok(detail) => Check {
            name,
            ok: true,
            detail,
        },
        Err(err) => Check {
            name,
            ok: false,
            detail: format!("{err:#}"),
        },
    }
}

pub fn run() -> Report {
    let mut checks = vec![
        check(
            "kernel BTF",
            kernel_offsets()
                .map(|o| format!("offsets read (linux_binprm.file at {})", o.bprm_file)),
        ),
        check(
            "cgroup v2",
            cgroup2_root().map(|p| format!("mounted at {}", p.display())),
        ),
    ];
    let lsm = check(
        "lsm backend",
        try_load_lsm()
            .map(|()| "lsm/bprm_check_security loads and `bpf` is an active LSM".to_string()),
    );
    let mut probed = Vec::new();
    let cgroup = check("cgroup backend", try_cgroup_backend(&mut probed));
    let backend = if lsm.ok {
        Some(Backend::Lsm)
    } else if cgroup.ok {
        Some(Backend::Cgroup)
    } else {
        None
    };
    checks.push(lsm);
    checks.push(cgroup);
    let layers = backend.map(|b| layers(b, probed)).unwrap_or_default();
    Report {
        layers,
        backend,
        checks,
        landlock: Landlock::probe(),
        enforces: backend.map(enforcing).unwrap_or_default(),
        resolver_cannot_see: crate::resolve::CANNOT_SEE
            .iter()
            .map(|(what, how)| BlindSpot { what, how })
            .collect(),
        system_rules: SystemRules::probe(),
        sandbox_modes: crate::confine::sandbox::support(),
        against_root: AGAINST_ROOT
            .iter()
            .map(|(scope, holds, can_still)| AgainstRoot {
                scope,
                holds,
                can_still,
            })
            .collect(),
    }
}

/// The layers a scope on `backend` gets: the per-cgroup hooks as the cgroup probe attached
/// them (`probed`; the lsm backend attaches the same ones for sockets, unix sockets and
/// devices), its exec and file hooks, and whether guard's resolver has an upstream to ask.
fn layers(backend: Backend, probed: Vec<LayerStatus>) -> Vec<LayerStatus> {
    let mut layers: Vec<LayerStatus> = probed
        .into_iter()
        .map(|status| match (backend, status.layer) {
            (Backend::Lsm, Layer::Exec) => LayerStatus::new(
                Layer::Exec,
                LayerState::Up,
                "lsm/bprm_check_security loads (EPERM before the exec)",
            ),
            (Backend::Lsm, Layer::Network) if status.state == LayerState::Up => LayerStatus::new(
                Layer::Network,
                LayerState::Up,
                "lsm/socket_connect and socket_sendmsg, with cgroup/sock_create",
            ),
            (Backend::Lsm, Layer::Files) => LayerStatus::new(
                Layer::Files,
                LayerState::Up,
                "the LSM file hooks (loaded with the lsm backend)",
            ),
            (Backend::Cgroup, Layer::Files) => LayerStatus::new(
                Layer::Files,
                LayerState::Degraded,
                crate::kernel::coverage::CGROUP_FILE_RULES,
            ),
            _ => status,
        })
        .collect();
    layers.push(match crate::resolve::upstream::choose(None) {
        Ok(upstream) => LayerStatus::new(
            Layer::Dns,
            LayerState::Up,
            format!("guard's resolver would ask {upstream}"),
        ),
        Err(err) => LayerStatus::new(
            Layer::Dns,
            LayerState::Missing,
            format!("no upstream name server for guard's resolver: {err:#}"),
        ),
    });
    layers.sort_by_key(|status| status.layer);
    layers
}

/// Loads the exec tracepoint and attaches the connect hooks to a throw-away cgroup; `layers`
/// gets the kernel's layers as they were attached there.
fn try_cgroup_backend(layers: &mut Vec<LayerStatus>) -> anyhow::Result<String> {
    let mut enforcer = crate::kernel::Enforcer::load(Backend::Cgroup)?;
    let scope = ScopeCgroup::create(&format!("doctor-{}", std::process::id()))?;
    enforcer.attach_cgroup(scope.path())?;
    *layers = enforcer.kernel_layers(FileGaps::default(), None);
    let unix = if enforcer.decides_unix_sockets() {
        ", and cgroup/connect_unix and sendmsg_unix decide unix sockets"
    } else {
        "; this kernel has no unix socket hooks (Linux 6.7+), so no unix socket is decided"
    };
    drop(enforcer);
    Ok(format!(
        "tp_btf/sched_process_exec, cgroup/connect4|6, sendmsg4|6 and cgroup/dev load and \
         attach{unix}"
    ))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::SystemRules;

    #[test]
    fn the_system_rules_folder_is_safe_only_when_root_alone_can_make_or_change_it() {
        let dir = tempfile::tempdir().unwrap();
        // Missing, below a folder that is not guard's: open to a root command.
        let open = SystemRules::probe_at(&dir.path().join("etc/rules"));
        assert!(!open.ok && open.detail.contains("install -d"), "{open:?}");
        // Missing, below guard's own folder, which `guard run` holds read-only.
        std::fs::create_dir(dir.path().join("guard")).unwrap();
        let held = SystemRules::probe_at(&dir.path().join("guard/rules"));
        assert!(held.ok && held.detail.contains("read-only"), "{held:?}");
        // Present but writable by others: whoever can write it chooses the policy.
        let rules = dir.path().join("guard/rules");
        std::fs::create_dir(&rules).unwrap();
        std::fs::set_permissions(&rules, std::fs::Permissions::from_mode(0o777)).unwrap();
        let loose = SystemRules::probe_at(&rules);
        assert!(
            !loose.ok && loose.detail.contains("chmod go-w"),
            "{loose:?}"
        );
        // Root's alone (only when the test runs as root: otherwise the folder is the user's).
        std::fs::set_permissions(&rules, std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = unsafe { libc::geteuid() } == 0;
        assert_eq!(SystemRules::probe_at(&rules).ok, root);
    }
}
