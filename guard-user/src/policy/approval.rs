//! Whether a command may run, must be approved, or is refused under an approval policy (the
//! Codex CLI's `AskForApproval`): the policy's evaluation with the mode-aware heuristics for
//! unmatched commands, the reasons the reference gives, and the amendment it would offer.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use super::heuristics::{is_dangerous_command, is_known_safe_command};
use super::model::Policy;
use super::reason::decision_reason;
use super::rule::Decision;
use super::shell::commands_for_exec_policy;
use super::{Evaluation, Fallback, MatchOptions};

/// When a person is asked (serialised as the reference's kebab-case names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "mode")]
pub enum ApprovalPolicy {
    /// Only known-safe read-only commands run without asking.
    Untrusted,
    /// Everything runs sandboxed; a person is asked only after a failure (deprecated upstream).
    OnFailure,
    /// The default: unmatched, non-dangerous commands run in the sandbox without asking.
    #[default]
    OnRequest,
    /// Like on-request, but a `false` category is refused instead of asked.
    Granular { sandbox_approval: bool, rules: bool },
    /// Nobody is asked: what would be asked is refused.
    Never,
}

impl fmt::Display for ApprovalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApprovalPolicy::Untrusted => f.write_str("untrusted"),
            ApprovalPolicy::OnFailure => f.write_str("on-failure"),
            ApprovalPolicy::OnRequest => f.write_str("on-request"),
            ApprovalPolicy::Never => f.write_str("never"),
            ApprovalPolicy::Granular {
                sandbox_approval,
                rules,
            } => write!(
                f,
                "granular:sandbox_approval={sandbox_approval},rules={rules}"
            ),
        }
    }
}

impl FromStr for ApprovalPolicy {
    type Err = String;

    /// `untrusted`, `on-failure`, `on-request`, `never`, or `granular` with optional
    /// `:sandbox_approval=BOOL,rules=BOOL` (each `true` when left out).
    fn from_str(text: &str) -> Result<Self, String> {
        let (name, options) = text.split_once(':').unwrap_or((text, ""));
        let plain = |policy| {
            if options.is_empty() {
                Ok(policy)
            } else {
                Err(format!("`{name}` takes no options (only granular does)"))
            }
        };
        match name {
            "untrusted" => plain(ApprovalPolicy::Untrusted),
            "on-failure" => plain(ApprovalPolicy::OnFailure),
            "on-request" => plain(ApprovalPolicy::OnRequest),
            "never" => plain(ApprovalPolicy::Never),
            "granular" => {
                let (mut sandbox_approval, mut rules) = (true, true);
                for option in options.split(',').filter(|o| !o.is_empty()) {
                    let (key, value) = option.split_once('=').ok_or_else(|| {
                        format!("granular option `{option}` is not KEY=true|false")
                    })?;
                    let value: bool = value
                        .parse()
                        .map_err(|_| format!("granular option `{key}` wants true or false"))?;
                    match key {
                        "sandbox_approval" => sandbox_approval = value,
                        "rules" => rules = value,
                        _ => {
                            return Err(format!(
                                "unknown granular option `{key}` (sandbox_approval, rules)"
                            ));
                        }
                    }
                }
                Ok(ApprovalPolicy::Granular {
                    sandbox_approval,
                    rules,
                })
            }
            _ => Err(format!(
                "unknown approval policy `{name}`: untrusted, on-request, on-failure, never, or \
                 granular[:sandbox_approval=BOOL,rules=BOOL]"
            )),
        }
    }
}

impl ApprovalPolicy {
    /// The policy the kernel holds for `policy` under this approval policy: `untrusted` asks
    /// about every exec that is not known-safe ([`untrusted_policy`]); the others change no
    /// kernel decision (they change what becomes of a prompt: [`prompt_rejection`]).
    pub fn kernel_policy(self, policy: Policy) -> Policy {
        match self {
            ApprovalPolicy::Untrusted => untrusted_policy(&policy),
            _ => policy,
        }
    }
}

/// How the command's writes are confined, as far as the heuristics care.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxProfile {
    /// `read-only` or `workspace-write`: the filesystem is restricted.
    #[default]
    Restricted,
    /// `danger-full-access`: no confinement.
    Unrestricted,
    /// Confinement is someone else's (an external sandbox).
    External,
}

/// What is asked: the command, how it is run, and an amendment proposed with it.
#[derive(Clone, Debug, Default)]
pub struct ApprovalRequest<'a> {
    pub argv: &'a [String],
    pub policy: ApprovalPolicy,
    pub sandbox: SandboxProfile,
    /// The run asks to leave the sandbox (escalated, or with extra permissions).
    pub sandbox_override: bool,
    /// A `prefix_rule` proposed with the request (the reference's model-supplied one).
    pub proposed_prefix: Option<&'a [String]>,
}

/// The reference's `ExecApprovalRequirement`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "requirement", rename_all = "snake_case")]
pub enum ApprovalRequirement {
    /// Run without asking; outside the sandbox only when every command had an explicit allow.
    Skip {
        bypass_sandbox: bool,
        /// The prefix to offer if the sandboxed run fails and a person is asked to run it
        /// outside.
        amendment: Option<Vec<String>>,
    },
    /// Ask a person.
    NeedsApproval {
        reason: Option<String>,
        /// The prefix an "always" answer would allow.
        amendment: Option<Vec<String>>,
    },
    /// Refuse.
    Forbidden { reason: String },
}

/// Prefixes never offered as an amendment when proposed exactly: each would allow whole
/// interpreters or shells.
pub const BANNED_PREFIXES: &[&[&str]] = &[
    &["python3"],
    &["python3", "-"],
    &["python3", "-c"],
    &["python"],
    &["python", "-"],
    &["python", "-c"],
    &["py"],
    &["py", "-3"],
    &["pythonw"],
    &["pyw"],
    &["pypy"],
    &["pypy3"],
    &["git"],
    &["bash"],
    &["bash", "-lc"],
    &["sh"],
    &["sh", "-c"],
    &["sh", "-lc"],
    &["zsh"],
    &["zsh", "-lc"],
    &["/bin/zsh"],
    &["/bin/zsh", "-lc"],
    &["/bin/bash"],
    &["/bin/bash", "-lc"],
    &["pwsh"],
    &["pwsh", "-Command"],
    &["pwsh", "-c"],
    &["powershell"],
    &["powershell", "-Command"],
    &["powershell", "-c"],
    &["powershell.exe"],
    &["powershell.exe", "-Command"],
    &["powershell.exe", "-c"],
    &["env"],
    &["sudo"],
    &["node"],
    &["node", "-e"],
    &["perl"],
    &["perl", "-e"],
    &["ruby"],
    &["ruby", "-e"],
    &["php"],
    &["php", "-r"],
    &["lua"],
    &["lua", "-e"],
    &["osascript"],
];

/// Whether `prefix` is exactly one of [`BANNED_PREFIXES`].
pub fn is_banned_prefix(prefix: &[String]) -> bool {
    BANNED_PREFIXES.iter().any(|banned| {
        banned.len() == prefix.len() && banned.iter().zip(prefix).all(|(b, p)| b == p)
    })
}

/// The decision for a command no rule matched, under `request`'s policy and sandbox.
fn unmatched_decision(request: &ApprovalRequest<'_>, argv: &[String], complex: bool) -> Decision {
    let policy = request.policy;
    if policy == ApprovalPolicy::Untrusted && !complex && is_known_safe_command(argv) {
        return Decision::Allow;
    }
    let unconfined = matches!(
        request.sandbox,
        SandboxProfile::Unrestricted | SandboxProfile::External
    );
    if is_dangerous_command(argv) {
        return match policy {
            ApprovalPolicy::Never if unconfined => Decision::Allow,
            ApprovalPolicy::Never => Decision::Forbidden,
            _ => Decision::Prompt,
        };
    }
    match policy {
        ApprovalPolicy::Never | ApprovalPolicy::OnFailure => Decision::Allow,
        ApprovalPolicy::Untrusted => Decision::Prompt,
        ApprovalPolicy::OnRequest | ApprovalPolicy::Granular { .. } => {
            if unconfined || !request.sandbox_override {
                Decision::Allow
            } else {
                Decision::Prompt
            }
        }
    }
}

/// The requirement for `request` under `policy` (the reference's
/// `create_exec_approval_requirement_for_command`).
pub fn approval_requirement(policy: &Policy, request: &ApprovalRequest<'_>) -> ApprovalRequirement {
    let split = commands_for_exec_policy(request.argv);
    let complex = split.used_complex_parsing;
    let decide = |cmd: &[String]| unmatched_decision(request, cmd, complex);
    let fallback: Fallback<'_> = &decide;
    let options = MatchOptions {
        resolve_host_executables: true,
    };
    let evaluation = policy.check_multiple(&split.commands, Some(fallback), options);
    let requested = requested_amendment(policy, request, &split.commands, &evaluation, complex);
    match evaluation.decision.unwrap_or(Decision::Allow) {
        Decision::Forbidden => ApprovalRequirement::Forbidden {
            reason: decision_reason(request.argv, &evaluation)
                .unwrap_or_else(|| "blocked by policy".to_string()),
        },
        Decision::Prompt => {
            let prompt_is_rule = evaluation
                .matched_rules
                .iter()
                .any(|m| m.is_policy_match() && m.decision() == Decision::Prompt);
            if let Some(reason) = prompt_rejection(request.policy, prompt_is_rule) {
                return ApprovalRequirement::Forbidden {
                    reason: reason.to_string(),
                };
            }
            let heuristic_amendment = (!complex && !prompt_is_rule)
                .then(|| first_heuristic(&evaluation, Decision::Prompt))
                .flatten();
            ApprovalRequirement::NeedsApproval {
                reason: prompt_is_rule
                    .then(|| decision_reason(request.argv, &evaluation))
                    .flatten(),
                amendment: requested.or(heuristic_amendment),
            }
        }
        Decision::Allow => {
            let every_explicit = split.commands.iter().all(|cmd| {
                policy
                    .matches_for_command(cmd, None, options)
                    .iter()
                    .any(|m| m.is_policy_match() && m.decision() == Decision::Allow)
            });
            ApprovalRequirement::Skip {
                bypass_sandbox: every_explicit,
                amendment: (!complex && !evaluation.is_match())
                    .then(|| first_heuristic(&evaluation, Decision::Allow))
                    .flatten(),
            }
        }
    }
}

/// The policy the kernel holds under the `untrusted` approval policy: every exec that is not
/// known-safe asks. The kernel sees the executed file and argv, not the heuristics' view of a
/// script, so it takes the safe answer: only the programs that are safe with any arguments
/// (`ls`, `cat`, ...) are allowed by name, and those that are safe only with some arguments
/// (`git status`, `sed -n`, `find` without `-exec`) ask like any other. The policy's own rules
/// still decide first: a forbidden or prompt rule beats these allows, and an explicit allow
/// runs as before.
pub fn untrusted_policy(policy: &Policy) -> Policy {
    let mut untrusted = policy.clone();
    let unmatched = policy.enforcement().unmatched_exec.max(Decision::Prompt);
    untrusted.set_enforcement(super::rule::EnforcementOverrides {
        unmatched_exec: Some(unmatched),
        ..Default::default()
    });
    for program in super::heuristics::always_safe_programs() {
        // A literal one-token prefix always parses.
        let _ = untrusted.add_prefix_rule(&[program.to_string()], Decision::Allow);
    }
    untrusted
}

/// The reason a prompt is refused at once instead of asked under `policy`, if it is;
/// `prompt_is_rule`: a rule prompted (not a default or a heuristic).
pub fn prompt_rejection(policy: ApprovalPolicy, prompt_is_rule: bool) -> Option<&'static str> {
    match policy {
        ApprovalPolicy::Never => {
            Some("approval required by policy, but AskForApproval is set to Never")
        }
        ApprovalPolicy::Granular { rules: false, .. } if prompt_is_rule => {
            Some("approval required by policy rule, but AskForApproval::Granular.rules is false")
        }
        ApprovalPolicy::Granular {
            sandbox_approval: false,
            ..
        } => Some(
            "approval required by policy, but AskForApproval::Granular.sandbox_approval is false",
        ),
        _ => None,
    }
}

/// The argv of the first heuristics match of `decision`.
fn first_heuristic(evaluation: &Evaluation, decision: Decision) -> Option<Vec<String>> {
    evaluation.matched_rules.iter().find_map(|m| match m {
        super::RuleMatch::HeuristicsRuleMatch {
            command,
            decision: d,
        } if *d == decision => Some(command.clone()),
        _ => None,
    })
}

/// The proposed prefix, if the reference would keep it: the command is not complex, the prefix
/// is not banned, no rule matched already, and allowing it would allow every command.
fn requested_amendment(
    policy: &Policy,
    request: &ApprovalRequest<'_>,
    commands: &[Vec<String>],
    evaluation: &Evaluation,
    complex: bool,
) -> Option<Vec<String>> {
    let prefix = request.proposed_prefix.filter(|p| !p.is_empty())?;
    if complex || is_banned_prefix(prefix) || evaluation.is_match() {
        return None;
    }
    proposed_prefix_allows(policy, request, commands, prefix).then(|| prefix.to_vec())
}

/// Whether adding `allow prefix` to `policy` makes every command of `commands` evaluate to
/// allow (with the same fallback).
fn proposed_prefix_allows(
    policy: &Policy,
    request: &ApprovalRequest<'_>,
    commands: &[Vec<String>],
    prefix: &[String],
) -> bool {
    let mut amended = policy.clone();
    if amended.add_prefix_rule(prefix, Decision::Allow).is_err() {
        return false;
    }
    let decide = |cmd: &[String]| unmatched_decision(request, cmd, false);
    let fallback: Fallback<'_> = &decide;
    let options = MatchOptions {
        resolve_host_executables: true,
    };
    commands.iter().all(|cmd| {
        amended
            .check_with_options(cmd, Some(fallback), options)
            .decision
            == Some(Decision::Allow)
    })
}

/// Why a proposed prefix is not accepted as an amendment for `argv`, if it is not: the rules
/// [`approval_requirement`] applies to a requested amendment, said for a person.
pub fn proposed_prefix_refusal(
    policy: &Policy,
    request: &ApprovalRequest<'_>,
    prefix: &[String],
) -> Option<String> {
    let shown = super::render_example(prefix);
    if prefix.is_empty() {
        return Some("the proposed prefix is empty".to_string());
    }
    if is_banned_prefix(prefix) {
        return Some(format!(
            "`{shown}` is a banned prefix: it would allow a whole interpreter or shell; \
             propose a longer one"
        ));
    }
    let split = commands_for_exec_policy(request.argv);
    if split.used_complex_parsing {
        return Some(
            "the command was parsed only approximately (a heredoc), so no prefix is derived \
             from it"
                .to_string(),
        );
    }
    if !proposed_prefix_allows(policy, request, &split.commands, prefix) {
        return Some(format!(
            "allowing `{shown}` would not allow `{}`: another rule still decides it, or the \
             prefix does not cover it",
            super::render_example(request.argv)
        ));
    }
    None
}

#[cfg(test)]
#[path = "approval_tests.rs"]
mod tests;
