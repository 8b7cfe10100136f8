//! What the kernel decides for an exec, worked out in userspace (`guard check --kernel`, the
//! hold): the kernel's own decision code ([`KernelEngine`]) over the entries of an image, with
//! the executed file's identity read from the file, as the exec programs read it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use guard_common::event::flag;
use guard_common::maps::ExecIdentity;

use super::exec::kernel_dev;
use super::kernel_engine::KernelEngine;
use super::{CompileEnv, NoResolver, compile};
use crate::policy::paths::executable_name;
use crate::policy::{Decision, Policy};

/// The kernel's decision for an exec and the rule that made it (as written), `None` when the
/// unmatched default decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelExecDecision {
    pub decision: Decision,
    pub rule: Option<String>,
    /// Under an exec allowlist, the files an allow by the executed file's name admits (by
    /// identity); empty otherwise.
    pub admits: Vec<PathBuf>,
}

/// The decision for running `argv` here: `argv[0]` found as a shell would (a path as given,
/// a bare name on this process's `PATH`), with the policy compiled for this machine.
pub fn kernel_exec_decision(
    policy: &Policy,
    argv: &[String],
) -> anyhow::Result<KernelExecDecision> {
    let env = CompileEnv::from_process();
    let twin = ExecTwin::new(Arc::new(KernelEngine::new(compile(
        policy,
        &NoResolver,
        &env,
    ))?));
    let program = argv.first().map_or("", String::as_str);
    let file = executed_file(program, &env);
    let mut decision = twin.decide(&file, argv);
    if policy.enforcement().unmatched_exec != Decision::Allow
        && let Some(name) = executable_name(&file)
    {
        decision.admits = super::exec::files_a_name_admits(policy, &env, name);
    }
    Ok(decision)
}

/// The file an exec of `program` runs: a name with a `/` as it is, a bare name the first
/// regular file of that name in `env`'s `PATH` folders (else the name itself).
fn executed_file(program: &str, env: &CompileEnv) -> PathBuf {
    if program.contains('/') {
        return PathBuf::from(program);
    }
    env.path_dirs
        .iter()
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| PathBuf::from(program))
}

/// An image's exec decisions, for deciding many execs (the hold asks it about every exec the
/// command makes).
#[derive(Clone)]
pub struct ExecTwin {
    engine: Arc<KernelEngine>,
    /// The scope whose execs it decides: only its approvals count (`None`: every approval).
    scope: Option<u64>,
}

impl ExecTwin {
    pub fn new(engine: Arc<KernelEngine>) -> ExecTwin {
        ExecTwin {
            engine,
            scope: None,
        }
    }

    /// Decides the execs of `scope` (a cgroup id): other scopes' approvals do not count.
    pub fn for_scope(mut self, scope: Option<u64>) -> ExecTwin {
        self.scope = scope;
        self
    }

    /// The decision for an exec of `file` (the file the kernel runs: its name is token 0, its
    /// device and inode its identity; a bare name, found nowhere, or a file that cannot be read
    /// has none) with `argv` (`argv[0]` as the caller gives it).
    pub fn decide(&self, file: &Path, argv: &[String]) -> KernelExecDecision {
        let none = ExecIdentity { dev: 0, ino: 0 };
        let identity = if file.to_string_lossy().contains('/') {
            std::fs::metadata(file).map_or(none, |found| ExecIdentity {
                dev: kernel_dev(found.dev()),
                ino: found.ino(),
            })
        } else {
            none
        };
        let program = file.to_string_lossy();
        let name = executable_name(file).unwrap_or(&program);
        let decided = self.engine.exec_in(self.scope, identity, name, argv);
        KernelExecDecision {
            // Not a code the encoder writes: the strongest answer.
            decision: Decision::from_code(decided.verdict.decision).unwrap_or(Decision::Forbidden),
            rule: (decided.flags & flag::UNMATCHED == 0)
                .then(|| self.engine.rule_text(decided.verdict.rule))
                .flatten(),
            admits: Vec::new(),
        }
    }
}
