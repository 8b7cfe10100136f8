//! What the kernel decides for an exec, worked out in userspace (`guard check --kernel`): the
//! prefix rules as the exec programs match them (by the executed file, see
//! [`Policy::kernel_exec_verdict`]) and the pattern tables (rule-set `exec(...)` globs, legacy
//! regexes and forbidden substrings) through the userspace twin of the kernel's table walk, the
//! strongest of both, else the policy's `enforcement(unmatched_exec=...)`.

use std::path::Path;

use crate::policy::paths::executable_name;
use crate::policy::{Decision, Policy};

use super::patterns::{CompiledPatterns, compile_patterns};

/// The kernel's decision for an exec and the rule that made it (as written), `None` when the
/// unmatched default decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelExecDecision {
    pub decision: Decision,
    pub rule: Option<String>,
}

/// The decision for an exec of the file named like `argv[0]` (its file name when it is a
/// path) with `argv[1..]`.
pub fn kernel_exec_decision(policy: &Policy, argv: &[String]) -> KernelExecDecision {
    let Some(program) = argv.first() else {
        return ExecTwin::new(policy.clone()).unmatched();
    };
    ExecTwin::new(policy.clone()).decide(Path::new(program), argv)
}

/// A policy with its pattern tables compiled once, for deciding many execs (the hold asks it
/// about every exec the command makes).
pub struct ExecTwin {
    policy: Policy,
    patterns: CompiledPatterns,
}

impl ExecTwin {
    pub fn new(policy: Policy) -> ExecTwin {
        let patterns = compile_patterns(&policy, 0);
        ExecTwin { policy, patterns }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The decision for an exec of `file` (the file the kernel runs: its name is token 0) with
    /// `argv` (`argv[0]` is read only by the pattern tables, as the kernel's readings do).
    pub fn decide(&self, file: &Path, argv: &[String]) -> KernelExecDecision {
        let program = file.to_string_lossy().into_owned();
        let mut cmd = vec![program.clone()];
        cmd.extend(argv.iter().skip(1).cloned());
        let by_prefix = self.policy.kernel_exec_verdict(&cmd);
        let by_prefix = by_prefix.rule.as_ref().map(|rule| KernelExecDecision {
            decision: by_prefix.decision,
            rule: Some(crate::policy::render::prefix_rule_text(rule)),
        });
        let name = executable_name(file).unwrap_or(&program);
        let argv0 = argv.first().map_or(program.as_str(), String::as_str);
        let args: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
        let by_pattern =
            self.patterns
                .tables
                .decide_exec(name, argv0, &args)
                .map(|(decision, rule)| KernelExecDecision {
                    decision,
                    rule: self
                        .patterns
                        .rules
                        .get(rule as usize)
                        .map(|r| r.text.clone()),
                });
        match (by_prefix, by_pattern) {
            // On a tie the prefix rule stands: the kernel meets it first.
            (Some(prefix), Some(pattern)) if pattern.decision > prefix.decision => pattern,
            (Some(prefix), _) => prefix,
            (None, Some(pattern)) => pattern,
            (None, None) => self.unmatched(),
        }
    }

    fn unmatched(&self) -> KernelExecDecision {
        KernelExecDecision {
            decision: self.policy.enforcement().unmatched_exec,
            rule: None,
        }
    }
}
