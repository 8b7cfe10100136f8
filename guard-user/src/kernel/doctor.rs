//! `guard doctor`: what this kernel allows, found by loading programs (never by reading config).

use serde::Serialize;

use super::btf::kernel_offsets;
use super::loader::{Backend, try_load_lsm};
use super::scope::{ScopeCgroup, cgroup2_root};

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
    let cgroup = check("cgroup backend", try_cgroup_backend());
    let backend = if lsm.ok {
        Some(Backend::Lsm)
    } else if cgroup.ok {
        Some(Backend::Cgroup)
    } else {
        None
    };
    checks.push(lsm);
    checks.push(cgroup);
    Report { backend, checks }
}

/// Loads the exec tracepoint and attaches the connect hooks to a throw-away cgroup.
fn try_cgroup_backend() -> anyhow::Result<String> {
    let mut enforcer = super::Enforcer::load(Backend::Cgroup)?;
    let scope = ScopeCgroup::create(&format!("doctor-{}", std::process::id()))?;
    enforcer.attach_cgroup(scope.path())?;
    drop(enforcer);
    Ok("tp_btf/sched_process_exec and cgroup/connect4|6, sendmsg4|6 load and attach".to_string())
}
