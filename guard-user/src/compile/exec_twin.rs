//! What the kernel decides for an exec, worked out in userspace (`guard check --kernel`): the
//! prefix rules as the exec programs match them (by the executed file, see
//! [`Policy::kernel_exec_verdict`]) and the pattern tables (rule-set `exec(...)` globs, legacy
//! regexes and forbidden substrings) through the userspace twin of the kernel's table walk, the
//! strongest of both, else the policy's `enforcement(unmatched_exec=...)`.

use std::path::Path;

use crate::policy::paths::executable_name;
use crate::policy::{Decision, Policy};

use super::patterns::compile_patterns;

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
    let by_prefix = policy.kernel_exec_verdict(argv);
    let by_prefix = by_prefix.rule.as_ref().map(|rule| KernelExecDecision {
        decision: by_prefix.decision,
        rule: Some(crate::policy::render::prefix_rule_text(rule)),
    });
    let by_pattern = argv.split_first().and_then(|(program, args)| {
        let name = executable_name(Path::new(program)).unwrap_or(program);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let compiled = compile_patterns(policy, 0);
        let (decision, rule) = compiled.tables.decide_exec(name, program, &args)?;
        Some(KernelExecDecision {
            decision,
            rule: compiled.rules.get(rule as usize).map(|r| r.text.clone()),
        })
    });
    match (by_prefix, by_pattern) {
        // On a tie the prefix rule stands: the kernel meets it first.
        (Some(prefix), Some(pattern)) if pattern.decision > prefix.decision => pattern,
        (Some(prefix), _) => prefix,
        (None, Some(pattern)) => pattern,
        (None, None) => KernelExecDecision {
            decision: policy.enforcement().unmatched_exec,
            rule: None,
        },
    }
}
