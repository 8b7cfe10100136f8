//! docs/policy-language.md §2: matching, the host-executable stage, strongest-wins, fallbacks, `check_multiple`,
//! and the policy operations (`add_*`, `merge_overlay`, allowed prefixes, network domains).

use std::path::PathBuf;

use super::*;
use crate::policy::{NetworkProtocol, PolicyParser};

fn parse(src: &str) -> Policy {
    let mut parser = PolicyParser::new();
    parser.parse("test.rules", src).expect("test policy parses");
    parser.build()
}

fn argv(text: &str) -> Vec<String> {
    shlex::split(text).unwrap()
}

const RESOLVE: MatchOptions = MatchOptions {
    resolve_host_executables: true,
};

fn prefixes(eval: &Evaluation) -> Vec<Vec<String>> {
    eval.matched_rules
        .iter()
        .map(|found| match found {
            RuleMatch::PrefixRuleMatch { matched_prefix, .. } => matched_prefix.clone(),
            RuleMatch::HeuristicsRuleMatch { command, .. } => {
                std::iter::once("<heuristics>".to_string())
                    .chain(command.iter().cloned())
                    .collect()
            }
            RuleMatch::RuleSetMatch { pattern, .. } => vec!["<rule_set>".into(), pattern.clone()],
            RuleMatch::LegacyMatch { rule, .. } => vec!["<legacy>".into(), rule.clone()],
        })
        .collect()
}

fn resolved(eval: &Evaluation) -> Vec<Option<PathBuf>> {
    eval.matched_rules
        .iter()
        .map(|found| match found {
            RuleMatch::PrefixRuleMatch {
                resolved_program, ..
            } => resolved_program.clone(),
            RuleMatch::HeuristicsRuleMatch { .. }
            | RuleMatch::RuleSetMatch { .. }
            | RuleMatch::LegacyMatch { .. } => None,
        })
        .collect()
}

#[test]
fn exact_stage_keeps_every_match_in_storage_order_and_the_strongest_wins() {
    let policy = parse(
        r#"
prefix_rule(pattern=["git"], decision="allow")
prefix_rule(pattern=["git", "push"], decision="forbidden")
prefix_rule(pattern=["git", ["push", "pull"], "origin"], decision="prompt")
"#,
    );
    let eval = policy.check(&argv("git push origin main"), None);
    assert_eq!(eval.decision, Some(Decision::Forbidden));
    assert_eq!(
        prefixes(&eval),
        [argv("git"), argv("git push"), argv("git push origin")]
    );
    assert!(eval.is_match());
    let eval = policy.check(&argv("git pull origin"), None);
    assert_eq!(eval.decision, Some(Decision::Prompt));
    // No option skipping.
    assert_eq!(
        policy.check(&argv("git -C x push"), None).decision,
        Some(Decision::Allow)
    );
}

#[test]
fn no_match_without_fallback_is_empty_and_with_fallback_one_heuristics_match() {
    let policy = parse(r#"prefix_rule(pattern=["git", "status"])"#);
    let eval = policy.check(&argv("git push"), None);
    assert_eq!(eval.decision, None);
    assert!(eval.matched_rules.is_empty());
    let prompt: Fallback<'_> = &|_| Decision::Prompt;
    let eval = policy.check(&argv("git push"), Some(prompt));
    assert_eq!(eval.decision, Some(Decision::Prompt));
    assert_eq!(
        eval.matched_rules,
        [RuleMatch::HeuristicsRuleMatch {
            command: argv("git push"),
            decision: Decision::Prompt
        }]
    );
    assert!(!eval.is_match());
    // An empty command matches nothing; the fallback still answers.
    assert!(policy.check(&[], None).matched_rules.is_empty());
    assert_eq!(
        policy.check(&[], Some(prompt)).decision,
        Some(Decision::Prompt)
    );
    // A matched command never consults the fallback.
    let forbid: Fallback<'_> = &|_| Decision::Forbidden;
    assert_eq!(
        policy.check(&argv("git status"), Some(forbid)).decision,
        Some(Decision::Allow)
    );
}

#[test]
fn check_does_not_resolve_host_executables() {
    let policy = parse(r#"prefix_rule(pattern=["git", "status"])"#);
    assert_eq!(
        policy.check(&argv("/usr/bin/git status"), None).decision,
        None
    );
    let eval = policy.check_with_options(&argv("/usr/bin/git status"), None, RESOLVE);
    assert_eq!(eval.decision, Some(Decision::Allow));
    assert_eq!(prefixes(&eval), [argv("git status")]);
    assert_eq!(resolved(&eval), [Some(PathBuf::from("/usr/bin/git"))]);
}

#[test]
fn relative_and_bare_argv0_resolve_against_the_current_directory() {
    let policy = parse(r#"prefix_rule(pattern=["git", "status"])"#);
    let cwd = std::env::current_dir().unwrap();
    for cmd in ["./git status", "bin/../git status"] {
        let eval = policy.check_with_options(&argv(cmd), None, RESOLVE);
        assert_eq!(resolved(&eval), [Some(cwd.join("git"))], "{cmd}");
    }
    // A bare name matches in the exact stage and reports no resolved program.
    let eval = policy.check_with_options(&argv("git status"), None, RESOLVE);
    assert_eq!(resolved(&eval), [None]);
}

#[test]
fn host_executable_entries_limit_which_paths_reach_basename_rules() {
    let policy = parse(
        r#"
prefix_rule(pattern=["git", "status"])
prefix_rule(pattern=["git", "push"], decision="forbidden")
host_executable(name="git", paths=["/usr/bin/git", "/opt/git/bin/git"])
host_executable(name="ls", paths=[])
prefix_rule(pattern=["ls"])
"#,
    );
    let eval = policy.check_with_options(&argv("/opt/git/bin/../bin/git status"), None, RESOLVE);
    assert_eq!(resolved(&eval), [Some(PathBuf::from("/opt/git/bin/git"))]);
    // An unlisted path escapes every rule of the basename, forbidden ones included (§9).
    assert_eq!(
        policy
            .check_with_options(&argv("/tmp/git push"), None, RESOLVE)
            .decision,
        None
    );
    // An empty list blocks every absolute path; the bare name still matches exactly.
    assert_eq!(
        policy
            .check_with_options(&argv("/bin/ls"), None, RESOLVE)
            .decision,
        None
    );
    assert_eq!(
        policy
            .check_with_options(&argv("ls"), None, RESOLVE)
            .decision,
        Some(Decision::Allow)
    );
}

#[test]
fn an_exact_key_that_does_not_match_lets_the_basename_stage_run() {
    let policy = parse(
        r#"
prefix_rule(pattern=["/usr/bin/git", "push"], decision="forbidden")
prefix_rule(pattern=["git", "status"])
"#,
    );
    let eval = policy.check_with_options(&argv("/usr/bin/git status"), None, RESOLVE);
    assert_eq!(eval.decision, Some(Decision::Allow));
    let eval = policy.check_with_options(&argv("/usr/bin/git push"), None, RESOLVE);
    assert_eq!(eval.decision, Some(Decision::Forbidden));
    assert_eq!(resolved(&eval), [None]);
}

#[test]
fn check_multiple_concatenates_matches_and_fallbacks_in_command_order() {
    let policy = parse(
        r#"
prefix_rule(pattern=["ls"])
prefix_rule(pattern=["rm"], decision="forbidden")
"#,
    );
    let allow: Fallback<'_> = &|_| Decision::Allow;
    let commands = [argv("ls -l"), argv("cat x"), argv("rm -rf x")];
    let eval = policy.check_multiple(&commands, Some(allow), MatchOptions::default());
    assert_eq!(eval.decision, Some(Decision::Forbidden));
    assert_eq!(
        prefixes(&eval),
        [argv("ls"), argv("<heuristics> cat x"), argv("rm")]
    );
    let eval = policy.check_multiple(&commands[..2], None, MatchOptions::default());
    assert_eq!(eval.decision, Some(Decision::Allow));
    assert_eq!(eval.matched_rules.len(), 1);
}

#[test]
fn add_prefix_rule_appends_literal_rules_and_refuses_an_empty_prefix() {
    let mut policy = parse(r#"prefix_rule(pattern=["git", "status"], decision="prompt")"#);
    policy
        .add_prefix_rule(&argv("git status"), Decision::Allow)
        .unwrap();
    policy
        .add_prefix_rule(&argv("cargo [a|b]"), Decision::Allow)
        .unwrap();
    // Strongest still wins: an added allow does not override an earlier prompt.
    assert_eq!(
        policy.check(&argv("git status"), None).decision,
        Some(Decision::Prompt)
    );
    assert_eq!(
        policy.check(&argv("cargo [a|b]"), None).decision,
        Some(Decision::Allow)
    );
    assert_eq!(policy.check(&argv("cargo a"), None).decision, None);
    assert_eq!(policy.prefix_rules().last().unwrap().id.0, 2);
    assert_eq!(
        policy
            .add_prefix_rule(&[], Decision::Allow)
            .unwrap_err()
            .to_string(),
        "invalid pattern element: prefix cannot be empty"
    );
}

#[test]
fn add_network_rule_normalises_and_refuses_blank_justifications() {
    let mut policy = Policy::empty();
    policy
        .add_network_rule("Example.COM.", NetworkProtocol::Http, Decision::Allow, None)
        .unwrap();
    assert_eq!(policy.network_rules()[0].host, "example.com");
    let err = policy
        .add_network_rule(
            "x",
            NetworkProtocol::Http,
            Decision::Allow,
            Some(" ".into()),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid rule: justification cannot be empty"
    );
    assert!(
        policy
            .add_network_rule("*.x", NetworkProtocol::Http, Decision::Allow, None)
            .is_err()
    );
    assert_eq!(policy.network_rules().len(), 1);
}

#[test]
fn allowed_prefixes_render_sort_and_dedupe() {
    let policy = parse(
        r#"
prefix_rule(pattern=["git", ["status", "log"]])
prefix_rule(pattern=[["npm", "cargo"], "test"])
prefix_rule(pattern=["git", ["status", "log"]])
prefix_rule(pattern=["rm"], decision="forbidden")
prefix_rule(pattern=["curl"], decision="prompt")
prefix_rule(pattern=["a", "b"])
"#,
    );
    assert_eq!(
        policy.allowed_prefixes(),
        [
            argv("a b"),
            argv("cargo test"),
            vec!["git".to_string(), "[status|log]".to_string()],
            argv("npm test")
        ]
    );
}

#[test]
fn network_domains_move_hosts_to_their_last_allow_or_deny() {
    let policy = parse(
        r#"
network_rule(host="a.com", protocol="http", decision="allow")
network_rule(host="b.com", protocol="https", decision="deny")
network_rule(host="c.com", protocol="http", decision="allow")
network_rule(host="A.com:443", protocol="socks5_tcp", decision="forbidden")
network_rule(host="b.com", protocol="http", decision="prompt")
network_rule(host="c.com.", protocol="http", decision="allow")
network_rule(host="d.com", protocol="http", decision="prompt")
network_rule(host="b.com", protocol="http", decision="allow")
"#,
    );
    let domains = policy.network_domains();
    assert_eq!(domains.allowed, ["c.com", "b.com"]);
    assert_eq!(domains.denied, ["a.com"]);
}

proptest::proptest! {
    /// The domains are the reference's walk (each allow or deny moves its host to the end of
    /// its list and out of the other), found without walking the lists.
    #[test]
    fn network_domains_are_the_references_walk(
        rules in proptest::collection::vec((0..5usize, 0..3usize), 0..30),
    ) {
        let decisions = ["allow", "deny", "prompt"];
        let text: String = rules
            .iter()
            .map(|(host, decision)| {
                format!(
                    "network_rule(host=\"h{host}.com\", protocol=\"https\", decision=\"{}\")\n",
                    decisions[*decision]
                )
            })
            .collect();
        let (mut allowed, mut denied): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
        for (host, decision) in &rules {
            let host = format!("h{host}.com");
            let (upsert, remove) = match *decision {
                0 => (&mut allowed, &mut denied),
                1 => (&mut denied, &mut allowed),
                _ => continue,
            };
            remove.retain(|h| *h != host);
            upsert.retain(|h| *h != host);
            upsert.push(host);
        }
        let domains = parse(&text).network_domains();
        proptest::prop_assert_eq!(domains.allowed, allowed);
        proptest::prop_assert_eq!(domains.denied, denied);
    }
}

#[test]
fn merge_overlay_appends_rules_and_replaces_host_executables() {
    let base = parse(
        r#"
prefix_rule(pattern=["git", "push"])
network_rule(host="x.com", protocol="http", decision="allow")
host_executable(name="git", paths=["/usr/bin/git"])
host_executable(name="ls", paths=["/bin/ls"])
"#,
    );
    let mut overlay_parser = PolicyParser::new();
    overlay_parser
        .parse(
            "managed.rules",
            r#"
prefix_rule(pattern=["git", "push"], decision="forbidden", justification="managed")
network_rule(host="x.com", protocol="http", decision="deny")
host_executable(name="git", paths=["/opt/git"])
"#,
        )
        .unwrap();
    let merged = base.merge_overlay(&overlay_parser.build());
    // The overlay can only tighten: its forbidden beats the base allow.
    let eval = merged.check(&argv("git push"), None);
    assert_eq!(eval.decision, Some(Decision::Forbidden));
    assert_eq!(eval.matched_rules.len(), 2);
    let ids: Vec<u32> = merged.prefix_rules().iter().map(|r| r.id.0).collect();
    assert_eq!(ids, [0, 1]);
    assert_eq!(
        &*merged.prefix_rules()[1].origin.as_ref().unwrap().file,
        "managed.rules"
    );
    // Overlay network rules come later, so they move the host.
    assert_eq!(merged.network_domains().denied, ["x.com"]);
    assert_eq!(
        merged.host_executables()["git"].as_ref(),
        [PathBuf::from("/opt/git")]
    );
    assert_eq!(
        merged.host_executables()["ls"].as_ref(),
        [PathBuf::from("/bin/ls")]
    );
    // The base is unchanged.
    assert_eq!(
        base.check(&argv("git push"), None).decision,
        Some(Decision::Allow)
    );
}

#[test]
fn rules_for_one_program_are_found_without_scanning_others() {
    let mut src = String::new();
    for i in 0..500 {
        src.push_str(&format!("prefix_rule(pattern=[\"p{i}\", \"x\"])\n"));
    }
    src.push_str("prefix_rule(pattern=[\"target\", \"x\"], decision=\"prompt\")\n");
    let policy = parse(&src);
    let reached = policy.candidate_rules(&argv("target x --flag"));
    assert_eq!(reached.len(), 1);
    assert_eq!(reached[0].program(), "target");
    assert!(policy.candidate_rules(&argv("missing x")).is_empty());
    assert!(policy.has_rules_for_program("p7"));
    assert!(!policy.has_rules_for_program("missing"));
    assert_eq!(
        policy.check(&argv("target x"), None).decision,
        Some(Decision::Prompt)
    );
}

// --- the kernel's deciding rule ------------------------------------------------------------

/// The line of the rule the kernel names for an exec, if one matched.
fn kernel_rule_line(policy: &Policy, cmd: &str) -> Option<usize> {
    let verdict = policy.kernel_exec_verdict(&argv(cmd));
    assert_eq!(verdict.decision, policy.kernel_exec_decision(&argv(cmd)));
    verdict.rule.map(|rule| {
        rule.origin
            .as_ref()
            .expect("parsed rules have an origin")
            .line
    })
}

#[test]
fn the_kernel_names_the_strongest_rule_and_an_enforced_one_over_an_audit_only_one() {
    let policy = parse(
        r#"
prefix_rule(pattern=["git"], decision="allow")
prefix_rule(pattern=["git", "push"], decision="forbidden", audit_only=True)
prefix_rule(pattern=["git", "push", "origin"], decision="forbidden")
prefix_rule(pattern=["/usr/bin/rm"], decision="prompt")
prefix_rule(pattern=["rm", "-rf"], decision="prompt")
"#,
    );
    assert_eq!(kernel_rule_line(&policy, "/usr/bin/git status"), Some(2));
    let push = policy.kernel_exec_verdict(&argv("/usr/bin/git push origin main"));
    assert_eq!(push.decision, Decision::Forbidden);
    assert!(
        !push.audit_only(),
        "the enforced rule decides, not the audit-only one"
    );
    assert_eq!(kernel_rule_line(&policy, "git push origin main"), Some(4));
    assert!(
        policy
            .kernel_exec_verdict(&argv("git push fork"))
            .audit_only()
    );
    // A tie: the path rule is met before the rules for the name.
    assert_eq!(kernel_rule_line(&policy, "/usr/bin/rm -rf x"), Some(5));
    assert_eq!(kernel_rule_line(&policy, "/bin/rm -rf x"), Some(6));
    assert_eq!(kernel_rule_line(&policy, "/usr/bin/ls"), None);
}

#[test]
fn rule_sets_join_prefix_rules_and_keep_the_fallback_out() {
    let policy = parse(
        r#"
prefix_rule(pattern=["rm"], decision="allow")
rule_set(deny=["bash(rm -rf*)"], allow=["exec(ls*)"])
rule_set(ask=["exec(rm *)"])
"#,
    );
    let eval = policy.check(&argv("rm -rf /"), None);
    // The prefix allow, then the strongest rule-set decision (the deny of the first set).
    assert_eq!(
        prefixes(&eval),
        vec![
            argv("rm"),
            vec!["<rule_set>".into(), "bash(rm -rf*)".into()]
        ]
    );
    assert_eq!(eval.decision, Some(Decision::Forbidden));
    let eval = policy.check(&argv("rm x"), None);
    assert_eq!(eval.decision, Some(Decision::Prompt));
    // A rule-set match is a match: the fallback does not add its verdict.
    let forbid: &dyn Fn(&[String]) -> Decision = &|_| Decision::Forbidden;
    let eval = policy.check(&argv("ls -l"), Some(forbid));
    assert_eq!(eval.decision, Some(Decision::Allow));
    assert!(eval.is_match());
    assert_eq!(
        prefixes(&eval),
        vec![vec!["<rule_set>".to_string(), "exec(ls*)".into()]]
    );
    // The subject is the rendered command line: quoting is part of it.
    assert_eq!(policy.check(&argv("'rm -rf' x"), None).decision, None);
}

#[test]
fn the_kernel_reads_a_git_style_name_sub_as_name_and_sub() {
    let policy = parse(
        r#"
prefix_rule(pattern=["git", "push"], decision="forbidden")
prefix_rule(pattern=["git"], decision="prompt")
"#,
    );
    // `git-push origin` (git's own hard link) is `git push origin` to the argv walk.
    assert_eq!(
        policy.kernel_exec_decision(&argv("/usr/lib/git-core/git-push origin")),
        Decision::Forbidden
    );
    // Another subcommand is not: and the one-token rule for `git` holds only by git's own
    // name (a file named git-status is not `git`).
    assert_eq!(
        policy.kernel_exec_decision(&argv("git-status")),
        Decision::Allow
    );
    // The reference's own evaluation is unchanged: `git-push` is a program of its own there.
    assert_eq!(policy.check(&argv("git-push origin"), None).decision, None);
}
