//! Evaluation: which rules match a command, and the decision they make together (spec §2).

use super::model::Policy;
use super::paths::{executable_name, resolve_program_path};
use super::rule::{Decision, RuleMatch};

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

impl Policy {
    /// Every rule that matches `cmd`: exact first-token stage, then (if that found nothing and
    /// resolution is on) the host-executable stage, then the fallback, if any.
    pub fn matches_for_command(
        &self,
        cmd: &[String],
        fallback: Option<Fallback<'_>>,
        options: MatchOptions,
    ) -> Vec<RuleMatch> {
        let mut matches: Vec<RuleMatch> = match cmd.first() {
            Some(program) => self
                .rules_for_program(program)
                .iter()
                .filter_map(|rule| rule.matches(cmd))
                .collect(),
            None => Vec::new(),
        };
        if matches.is_empty() && options.resolve_host_executables {
            matches = self.matches_through_host_executable(cmd);
        }
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
        let rules = self.rules_for_program(name);
        if rules.is_empty() {
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
        rules
            .iter()
            .filter_map(|rule| rule.matches(&renamed))
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
    pub fn kernel_exec_decision(&self, cmd: &[String]) -> Decision {
        let Some(program) = cmd.first() else {
            return self.enforcement().unmatched_exec;
        };
        let name = if program.contains('/') {
            executable_name(std::path::Path::new(program)).unwrap_or(program)
        } else {
            program
        };
        let renamed: Vec<String> = std::iter::once(name.to_string())
            .chain(cmd[1..].iter().cloned())
            .collect();
        let by_name = self
            .rules_for_program(name)
            .iter()
            .filter(|rule| rule.matches(&renamed).is_some())
            .map(|rule| rule.decision);
        let mut by_identity = Vec::new();
        if program.starts_with('/') {
            let path = super::paths::normalize_lexically(std::path::Path::new(program));
            by_identity.extend(
                self.rules_for_program(&path.to_string_lossy())
                    .iter()
                    .filter(|rule| rule.pattern.rest.is_empty())
                    .map(|rule| rule.decision),
            );
        }
        by_name
            .chain(by_identity)
            .max()
            .unwrap_or(self.enforcement().unmatched_exec)
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
