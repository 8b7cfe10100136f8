//! The trie against the plain walk it replaced (kept here only, as the oracle): on generated
//! policies and commands, every evaluation that goes through the index gives the answers a walk
//! of every rule gives, in the same order.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;

use crate::policy::{
    Decision, MatchOptions, PatternToken, Policy, PrefixPattern, PrefixRule, RuleId, RuleMatch,
    RuleOrigin,
};

/// Few programs and few tokens, so rules overlap, share prefixes and repeat one another.
const PROGRAMS: [&str; 4] = ["git", "ls", "/usr/bin/git", "git-log"];
const TOKENS: [&str; 5] = ["a", "b", "c", "log", ""];

fn token() -> impl Strategy<Value = String> {
    prop::sample::select(&TOKENS[..]).prop_map(str::to_string)
}

/// One pattern position: a single token, a few alternatives (duplicates allowed), or many
/// (`x0`..`x11` with the common tokens, so two of them pass the fan-out limit).
fn pattern_token() -> impl Strategy<Value = PatternToken> {
    prop_oneof![
        4 => token().prop_map(PatternToken::Single),
        2 => prop::collection::vec(token(), 2..4).prop_map(PatternToken::Alts),
        1 => Just(PatternToken::Alts(
            TOKENS.iter().map(|t| t.to_string()).chain((0..7).map(|i| format!("x{i}"))).collect()
        )),
    ]
}

fn rule() -> impl Strategy<Value = PrefixRule> {
    (
        prop::sample::select(&PROGRAMS[..]),
        prop::collection::vec(pattern_token(), 0..4),
        prop::sample::select(&[Decision::Allow, Decision::Prompt, Decision::Forbidden][..]),
        prop::option::of(Just("why".to_string())),
        any::<bool>(),
        0..1000usize,
    )
        .prop_map(
            |(program, rest, decision, justification, audit_only, line)| PrefixRule {
                id: RuleId(0),
                pattern: PrefixPattern {
                    first: program.into(),
                    rest: rest.into(),
                },
                decision,
                justification,
                origin: Some(RuleOrigin {
                    file: "gen.rules".into(),
                    line,
                }),
                audit_only,
            },
        )
}

fn command() -> impl Strategy<Value = Vec<String>> {
    (
        prop::sample::select([&PROGRAMS[..], &["busybox", "other", "x3"][..]].concat()),
        prop::collection::vec(
            prop_oneof![4 => token(), 1 => (0..7).prop_map(|i| format!("x{i}"))],
            0..5,
        ),
    )
        .prop_map(|(program, rest)| std::iter::once(program.to_string()).chain(rest).collect())
}

/// The oracle: every rule whose first token is `cmd[0]`, in load order, that matches.
fn walk_all(policy: &Policy, cmd: &[String]) -> Vec<RuleMatch> {
    policy
        .prefix_rules()
        .iter()
        .filter(|rule| cmd.first().is_some_and(|p| rule.program() == p))
        .filter_map(|rule| rule.matches(cmd))
        .collect()
}

fn policy_of(rules: Vec<PrefixRule>, overlay: Vec<PrefixRule>) -> Policy {
    let host_executables = HashMap::from([(
        "git".to_string(),
        Arc::from(vec![PathBuf::from("/usr/bin/git")]),
    )]);
    let base = Policy::from_parts(rules, Vec::new(), host_executables);
    let mut merged = base.merge_overlay(&Policy::from_parts(overlay, Vec::new(), HashMap::new()));
    // An amendment appended after the build is indexed as well.
    merged
        .add_prefix_rule(&["ls".to_string(), "a".to_string()], Decision::Prompt)
        .unwrap();
    merged
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_trie_answers_as_a_walk_of_every_rule(
        rules in prop::collection::vec(rule(), 0..24),
        overlay in prop::collection::vec(rule(), 0..4),
        commands in prop::collection::vec(command(), 1..8),
    ) {
        let policy = policy_of(rules, overlay);
        for cmd in &commands {
            let expected = walk_all(&policy, cmd);
            let direct = expected.clone();
            // Plain checks: the same matches, in load order, and strongest-wins over them.
            let found = policy.check(cmd, None);
            prop_assert_eq!(&found.matched_rules, &expected, "{:?}", cmd);
            prop_assert_eq!(
                found.decision,
                expected.iter().map(RuleMatch::decision).max(),
                "{:?}", cmd
            );
            // Every candidate the index gives up is one a walk could have met.
            for rule in policy.candidate_rules(cmd) {
                prop_assert_eq!(rule.program(), cmd[0].as_str());
            }
            prop_assert_eq!(
                policy.has_rules_for_program(&cmd[0]),
                policy.prefix_rules().iter().any(|r| r.program() == cmd[0])
            );
            // Through host-executable resolution: `/usr/bin/git` reaches `git`'s rules.
            let resolve = MatchOptions { resolve_host_executables: true };
            let resolved = policy.check_with_options(cmd, None, resolve).matched_rules;
            prop_assert_eq!(&resolved, &resolution_oracle(&policy, cmd, direct), "{:?}", cmd);
            // The kernel's reading: the oracle's strongest rule over the same readings.
            prop_assert_eq!(
                policy.kernel_exec_verdict(cmd),
                kernel_oracle(&policy, cmd),
                "{:?}", cmd
            );
        }
    }
}

/// The host-executable stage by walking every rule: when nothing matched, `argv[0]` resolved to
/// a path and renamed to its file name, if `host_executable` lets that path through.
fn resolution_oracle(policy: &Policy, cmd: &[String], direct: Vec<RuleMatch>) -> Vec<RuleMatch> {
    if !direct.is_empty() {
        return direct;
    }
    let Some(path) = crate::policy::paths::resolve_program_path(&cmd[0]) else {
        return direct;
    };
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    if policy
        .host_executables()
        .get(&name)
        .is_some_and(|allowed| !allowed.contains(&path))
    {
        return direct;
    }
    let renamed: Vec<String> = std::iter::once(name)
        .chain(cmd[1..].iter().cloned())
        .collect();
    walk_all(policy, &renamed)
        .into_iter()
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

/// [`Policy::kernel_exec_verdict`] by walking every rule: one-token rules written as the path,
/// then the rules for the file's name (and a `NAME-SUB` split, and a multi-call applet), shorter
/// prefixes first, strongest decision and enforced before audit-only, first met on a tie.
fn kernel_oracle(policy: &Policy, cmd: &[String]) -> crate::policy::KernelExecVerdict {
    let program = &cmd[0];
    let name = program.rsplit('/').next().unwrap_or(program);
    let mut met: Vec<&Arc<PrefixRule>> = Vec::new();
    if program.starts_with('/') {
        met.extend(
            policy
                .prefix_rules()
                .iter()
                .filter(|r| r.program() == program && r.pattern.rest.is_empty()),
        );
    }
    let with_first = |first: &str, rest: &[String]| -> Vec<String> {
        std::iter::once(first.to_string())
            .chain(rest.iter().cloned())
            .collect()
    };
    let mut readings = vec![(with_first(name, &cmd[1..]), 0)];
    if let Some((head, sub)) = name.split_once('-')
        && !head.is_empty()
        && !sub.is_empty()
    {
        let mut split = vec![head.to_string()];
        split.extend(with_first(sub, &cmd[1..]));
        readings.push((split, 1));
    }
    if crate::policy::rule::MULTI_CALL_PROGRAMS.contains(&name) && cmd.len() > 1 {
        readings.push((cmd[1..].to_vec(), 2));
    }
    let mut by_name: Vec<&Arc<PrefixRule>> = Vec::new();
    for (reading, kind) in &readings {
        for rule in policy.prefix_rules() {
            let counts = match kind {
                0 => true,
                1 => !rule.pattern.rest.is_empty(),
                _ => rule.decision != Decision::Allow,
            };
            if counts
                && rule.matches(reading).is_some()
                && !by_name.iter().any(|kept| Arc::ptr_eq(kept, rule))
            {
                by_name.push(rule);
            }
        }
    }
    by_name.sort_by_key(|rule| rule.pattern.rest.len());
    met.extend(by_name);
    let deciding = met
        .into_iter()
        .fold(None::<&Arc<PrefixRule>>, |kept, rule| match kept {
            Some(kept)
                if (rule.decision, !rule.audit_only) <= (kept.decision, !kept.audit_only) =>
            {
                Some(kept)
            }
            _ => Some(rule),
        });
    crate::policy::KernelExecVerdict {
        decision: deciding.map_or(policy.enforcement().unmatched_exec, |r| r.decision),
        rule: deciding.cloned(),
    }
}
