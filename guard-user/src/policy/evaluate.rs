//! Evaluation: which rules match a command, and the decision they make together (docs/policy-language.md §2).

use std::sync::Arc;

use super::model::Policy;
use super::paths::{executable_name, resolve_program_path};
use super::rule::{Decision, PrefixRule, RuleMatch, RuleOrigin};
use super::rule_set::{Tool, exec_subject};

/// The verdict for commands no rule matched, given the command.
pub type Fallback<'a> = &'a dyn Fn(&[String]) -> Decision;

/// How commands are matched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchOptions {
    /// Let `/usr/bin/git` and `./git` reach the rules for `git` (subject to `host_executable`).
    pub resolve_host_executables: bool,
}

/// The decision for one or more commands and every match that went into it, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// The strongest decision among the matches; `None` only when nothing matched and no
    /// fallback was given.
    pub decision: Option<Decision>,
    pub matched_rules: Vec<RuleMatch>,
}

impl Evaluation {
    pub fn from_matches(matched_rules: Vec<RuleMatch>) -> Self {
        let decision = matched_rules.iter().map(RuleMatch::decision).max();
        Evaluation {
            decision,
            matched_rules,
        }
    }

    /// True when at least one written rule (not the fallback) matched.
    pub fn is_match(&self) -> bool {
        self.matched_rules.iter().any(RuleMatch::is_policy_match)
    }
}

/// What the kernel decides for one exec, and which rule it names in the event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelExecVerdict {
    pub decision: Decision,
    /// The deciding rule; `None` when no rule matched and `enforcement(unmatched_exec=...)`
    /// decided.
    pub rule: Option<Arc<PrefixRule>>,
}

impl KernelExecVerdict {
    /// The deciding rule is audit-only (the policy's own audit-only mode is not included).
    pub fn audit_only(&self) -> bool {
        self.rule.as_ref().is_some_and(|rule| rule.audit_only)
    }
}

/// The kernel's `Verdict::strongest` between two matching rules: a stronger decision wins, and
/// at the same decision an enforced rule beats an audit-only one; otherwise `kept` stays.
fn kernel_rule_beats(candidate: &PrefixRule, kept: &PrefixRule) -> bool {
    (candidate.decision, !candidate.audit_only) > (kept.decision, !kept.audit_only)
}

impl Policy {
    /// Every rule that matches `cmd`: exact first-token stage, then (if that found nothing and
    /// resolution is on) the host-executable stage, then the rule sets' decision for an exec of
    /// `cmd` (its command line as `guard check` renders it), then, if nothing matched, the
    /// fallback. The caller's strongest-wins takes all of them together.
    pub fn matches_for_command(
        &self,
        cmd: &[String],
        fallback: Option<Fallback<'_>>,
        options: MatchOptions,
    ) -> Vec<RuleMatch> {
        let mut matches: Vec<RuleMatch> = self
            .matching_rules(cmd)
            .into_iter()
            .map(|rule| rule.match_of(cmd))
            .collect();
        if matches.is_empty() && options.resolve_host_executables {
            matches = self.matches_through_host_executable(cmd);
        }
        if !self.rule_sets().is_empty()
            && let Some(found) = self.rule_set_decision(Tool::Exec, Some(&exec_subject(cmd)))
        {
            matches.push(found.to_rule_match());
        }
        matches.extend(self.legacy_matches(cmd));
        if matches.is_empty()
            && let Some(fallback) = fallback
        {
            matches.push(RuleMatch::HeuristicsRuleMatch {
                command: cmd.to_vec(),
                decision: fallback(cmd),
            });
        }
        matches
    }

    /// What the legacy policies forbid of `cmd`, as the kernel reads it: a forbidden program
    /// regex over `argv[0]`'s file name, a forbidden substring in any later argument.
    fn legacy_matches(&self, cmd: &[String]) -> Vec<RuleMatch> {
        let Some((program, args)) = cmd.split_first() else {
            return Vec::new();
        };
        let name = program.rsplit('/').next().unwrap_or(program);
        let mut found = Vec::new();
        for legacy in self.legacy_policies() {
            let origin = |line: usize| {
                Some(RuleOrigin {
                    file: legacy.file.clone(),
                    line,
                })
            };
            if let Some(regex) = legacy
                .policy
                .forbidden_program_regexes()
                .iter()
                .find(|f| f.regex.is_match(name))
            {
                found.push(RuleMatch::LegacyMatch {
                    rule: format!("forbid_program_regex({:?})", regex.regex.as_str()),
                    reason: regex.reason.clone(),
                    origin: origin(regex.line),
                });
            }
            for forbidden in legacy.policy.forbidden_substrings() {
                if let Some(arg) = args.iter().find(|arg| arg.contains(&forbidden.text)) {
                    found.push(RuleMatch::LegacyMatch {
                        rule: format!("forbid_substrings([{:?}])", forbidden.text),
                        reason: format!("arg `{arg}` contains forbidden substring"),
                        origin: origin(forbidden.line),
                    });
                    break;
                }
            }
        }
        found
    }

    /// `argv[0]` as an absolute path, matched by its file name against that name's rules, if
    /// `host_executable` lists the path (or says nothing about the name).
    fn matches_through_host_executable(&self, cmd: &[String]) -> Vec<RuleMatch> {
        let Some(path) = cmd
            .first()
            .and_then(|program| resolve_program_path(program))
        else {
            return Vec::new();
        };
        let Some(name) = executable_name(&path) else {
            return Vec::new();
        };
        if !self.has_rules_for_program(name) {
            return Vec::new();
        }
        if let Some(allowed) = self.host_executables().get(name)
            && !allowed.contains(&path)
        {
            return Vec::new();
        }
        let renamed: Vec<String> = std::iter::once(name.to_string())
            .chain(cmd[1..].iter().cloned())
            .collect();
        self.matching_rules(&renamed)
            .into_iter()
            .map(|rule| rule.match_of(&renamed))
            .map(|mut found| {
                if let RuleMatch::PrefixRuleMatch {
                    resolved_program, ..
                } = &mut found
                {
                    *resolved_program = Some(path.clone());
                }
                found
            })
            .collect()
    }

    /// The reference's `check`: resolution off.
    pub fn check(&self, cmd: &[String], fallback: Option<Fallback<'_>>) -> Evaluation {
        self.check_with_options(cmd, fallback, MatchOptions::default())
    }

    pub fn check_with_options(
        &self,
        cmd: &[String],
        fallback: Option<Fallback<'_>>,
        options: MatchOptions,
    ) -> Evaluation {
        Evaluation::from_matches(self.matches_for_command(cmd, fallback, options))
    }

    /// What the kernel decides for an exec of `cmd`: the strongest decision of every prefix rule
    /// that matches (the same matching as [`Policy::check`]), or the policy's
    /// `enforcement(unmatched_exec=...)` (allow by default) when none does.
    ///
    /// The kernel never trusts `argv[0]`: it compares the executed file's *name* as token 0
    /// (and one-token rules also by the file's identity), so pass that name as `cmd[0]`. When
    /// `cmd[0]` is a path, its file name is used as token 0, and one-token rules written as that
    /// exact absolute path also count (the kernel holds their file's identity). Rules with more
    /// tokens whose program is written as a path never match in the kernel.
    ///
    /// It takes the executed file to be one its name resolves to: under an exec allowlist the
    /// kernel lets an allow by name hold for those files alone (by identity), where the name
    /// resolves to any.
    pub fn kernel_exec_decision(&self, cmd: &[String]) -> Decision {
        self.kernel_exec_verdict(cmd).decision
    }

    /// [`Policy::kernel_exec_decision`] and the rule the kernel reports for it: the strongest
    /// matching rule, an enforced one before an audit-only one of the same decision, and on a
    /// tie the one the kernel meets first (path rules, then by name, shorter prefixes first).
    pub fn kernel_exec_verdict(&self, cmd: &[String]) -> KernelExecVerdict {
        let deciding = self.kernel_exec_matches(cmd).into_iter().fold(
            None::<&Arc<PrefixRule>>,
            |kept, rule| match kept {
                Some(kept) if !kernel_rule_beats(rule, kept) => Some(kept),
                _ => Some(rule),
            },
        );
        match deciding {
            Some(rule) => KernelExecVerdict {
                decision: rule.decision,
                rule: Some(rule.clone()),
            },
            None => KernelExecVerdict {
                decision: self.enforcement().unmatched_exec,
                rule: None,
            },
        }
    }

    /// The prefix rules the kernel matches for an exec of `cmd`, in the order it meets them:
    /// one-token rules written as `cmd[0]`'s absolute path (by file identity), then the rules
    /// for its file name, shorter prefixes first.
    fn kernel_exec_matches(&self, cmd: &[String]) -> Vec<&Arc<PrefixRule>> {
        let Some(program) = cmd.first() else {
            return Vec::new();
        };
        let name = if program.contains('/') {
            executable_name(std::path::Path::new(program)).unwrap_or(program)
        } else {
            program
        };
        let mut matches = Vec::new();
        if program.starts_with('/') {
            let path = super::paths::normalize_lexically(std::path::Path::new(program));
            matches.extend(
                self.matching_rules(&[path.to_string_lossy()])
                    .into_iter()
                    .filter(|rule| rule.pattern.rest.is_empty()),
            );
        }
        // The readings of token 0 the kernel's argv walk follows (by name; identity is the
        // kernel's alone): the name itself, and `NAME SUB` for a git-style `NAME-SUB`.
        let mut readings: Vec<Vec<String>> = vec![
            std::iter::once(name.to_string())
                .chain(cmd[1..].iter().cloned())
                .collect(),
        ];
        if let Some((head, sub)) = name.split_once('-')
            && !head.is_empty()
            && !sub.is_empty()
        {
            readings.push(
                [head.to_string(), sub.to_string()]
                    .into_iter()
                    .chain(cmd[1..].iter().cloned())
                    .collect(),
            );
        }
        // A multi-call program's applet (`busybox touch M` is `touch M`), for the rules that ask
        // or forbid (the kernel holds those as `[busybox, X, ...]`).
        let multi_call = super::rule::MULTI_CALL_PROGRAMS.contains(&name) && cmd.len() > 1;
        if multi_call {
            readings.push(cmd[1..].to_vec());
        }
        let mut by_name: Vec<&Arc<PrefixRule>> = Vec::new();
        for (i, renamed) in readings.iter().enumerate() {
            let applet = multi_call && i == readings.len() - 1;
            for rule in self.matching_rules(renamed) {
                // The file's own name reads every rule; the split reading argv rules only (a
                // one-token rule for `ssh` is not one for `ssh-keygen`); the applet reading the
                // rules that ask or forbid, as the kernel holds them (`[busybox, X, ...]`).
                let counts = if applet {
                    rule.decision != Decision::Allow
                } else {
                    i == 0 || !rule.pattern.rest.is_empty()
                };
                if counts && !by_name.iter().any(|kept| Arc::ptr_eq(kept, rule)) {
                    by_name.push(rule);
                }
            }
        }
        // Stable: rules of one length stay in definition order, as in the kernel's tables.
        by_name.sort_by_key(|rule| rule.pattern.rest.len());
        matches.extend(by_name);
        matches
    }

    /// Every command's matches concatenated in order (each unmatched command gets its own
    /// fallback entry); the strongest decision over all of them wins.
    pub fn check_multiple<C: AsRef<[String]>>(
        &self,
        commands: &[C],
        fallback: Option<Fallback<'_>>,
        options: MatchOptions,
    ) -> Evaluation {
        Evaluation::from_matches(
            commands
                .iter()
                .flat_map(|cmd| self.matches_for_command(cmd.as_ref(), fallback, options))
                .collect(),
        )
    }
}

#[cfg(test)]
#[path = "evaluate_tests.rs"]
mod tests;
