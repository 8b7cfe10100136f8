//! The pattern rules of a policy as the kernel will hold them: which table each goes to, the
//! rule (file and line) each verdict names, and the decisions of the userspace twin of the
//! kernel's walk against the rule-set engine that `guard check` and `guard policy evaluate` use.

use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::policy::protected::protected_paths;
use crate::policy::{LegacyPolicy, PolicyParser};

fn policy(rules: &str, legacy: Option<&str>) -> Policy {
    let mut parser = PolicyParser::new();
    parser.parse("team.rules", rules).unwrap();
    let mut policy = parser.build();
    if let Some(source) = legacy {
        policy.add_legacy_policy(LegacyPolicy {
            file: "team.policy".into(),
            policy: Arc::new(crate::legacy::parse_policy("team.policy", source).unwrap()),
        });
    }
    policy.set_protected_paths(protected_paths(&[PathBuf::from("/srv/rules/team.rules")]));
    policy
}

fn origin_of(compiled: &CompiledPatterns, first: u32, rule: u32) -> String {
    let rule = &compiled.rules[(rule - first) as usize];
    rule.origin.as_ref().map(ToString::to_string).unwrap()
}

#[test]
fn each_form_goes_to_its_table_and_names_its_file_and_line() {
    let policy = policy(
        "# team\nrule_set(\n    deny=[\"bash(rm -rf*)\", \"write(.git/**)\"],\n    ask=[\"read(*.env)\"],\n)\n",
        Some("forbid_substrings([\"--force\"])\n\nforbid_program_regex(\"^evil\", \"bad\")\n"),
    );
    let compiled = compile_patterns(&policy, 100);
    let tables = &compiled.tables;
    assert!(tables.program_name.is_some() && tables.argv.is_some());
    assert!(tables.command_line.is_some() && tables.read_path.is_some());
    assert!(tables.write_path.is_some());
    assert!(tables.left_out.is_empty(), "{:?}", tables.left_out);

    let (decision, rule) = tables.decide("evil-tool", &[]).unwrap();
    assert_eq!(decision, Decision::Forbidden);
    assert_eq!(origin_of(&compiled, 100, rule), "team.policy:3");
    let (_, rule) = tables.decide("git", &["push", "--force"]).unwrap();
    assert_eq!(origin_of(&compiled, 100, rule), "team.policy:1");
    let (decision, rule) = tables.decide("rm", &["-rf", "/"]).unwrap();
    assert_eq!(decision, Decision::Forbidden);
    assert_eq!(origin_of(&compiled, 100, rule), "team.rules:2");
    assert_eq!(tables.decide("rm", &["-r", "x"]), None);
    // Every reading of the program token counts: argv[0]'s name, and NAME-SUB as NAME SUB
    // (so the SUB of `x-y--force` is an argument, which holds the forbidden substring).
    let forbidden = |name: &str, argv0: &str, args: &[&str]| {
        tables.decide_exec(name, argv0, args).map(|d| d.0) == Some(Decision::Forbidden)
    };
    assert!(forbidden("true", "/bin/evil-tool", &[]));
    assert!(forbidden("true", "rm", &["-rf", "/"]));
    assert!(forbidden("x-y--force", "x-y--force", &[]));
    assert!(forbidden("true", "a/x-y--force", &[]));
    // A split needs a NAME and a SUB; the program token itself is no argument.
    assert_eq!(tables.decide_exec("-y--force", "-y--force", &[]), None);
    assert_eq!(tables.decide_exec("true", "true", &["x"]), None);
    let (decision, _) = tables.decide_path(Tool::Read, "/home/a/.env").unwrap();
    assert_eq!(decision, Decision::Prompt);
    let (decision, _) = tables
        .decide_path(Tool::Write, "/w/repo/.git/config")
        .unwrap();
    assert_eq!(decision, Decision::Forbidden);
    // A protected path: the rules file the policy came from.
    let (decision, rule) = tables
        .decide_path(Tool::Write, "/srv/rules/team.rules")
        .unwrap();
    assert_eq!(decision, Decision::Forbidden);
    assert!(origin_of(&compiled, 100, rule).starts_with("<built-in protected paths>:"));
    assert_eq!(tables.decide_path(Tool::Write, "/w/repo/src/main.rs"), None);
    // Reads and writes are told apart.
    assert_eq!(tables.decide_path(Tool::Read, "/w/repo/.git/config"), None);

    // Every read/write pattern and protected path is a file rule, exec patterns are not.
    let file_rules = tables.file_rules.len();
    assert_eq!(file_rules, 2 + policy.protected_paths().len());
}

#[test]
fn a_bare_pattern_matches_every_call_of_its_tools() {
    let policy = policy("rule_set(ask=[\"exec\"], deny=[\"write\"])\n", None);
    let tables = compile_patterns(&policy, 0).tables;
    assert_eq!(
        tables.decide("anything", &["at all"]).unwrap().0,
        Decision::Prompt
    );
    assert_eq!(
        tables.decide_path(Tool::Write, "/tmp/x").unwrap().0,
        Decision::Forbidden
    );
    assert_eq!(tables.decide_path(Tool::Read, "/tmp/x"), None);
}

#[test]
fn a_pattern_the_kernel_cannot_hold_is_named_and_the_others_are_kept() {
    // `a` then 10 bytes: the DFA remembers where the last 11 bytes had an `a`, 2^11 states,
    // more than a table may have.
    let policy = policy(
        "rule_set(deny=[\"exec(*a??????????)\", \"exec(rm -rf*)\"])\n",
        None,
    );
    let compiled = compile_patterns(&policy, 0);
    let left_out = &compiled.tables.left_out;
    assert_eq!(left_out.len(), 1, "{left_out:?}");
    assert!(left_out[0].why.contains("*a??????????"), "{left_out:?}");
    assert_eq!(left_out[0].decision, Decision::Forbidden);
    assert!(compiled.tables.decide("rm", &["-rf", "/"]).is_some());
}

/// Globs that each fit but not together: `exec(*secretN*)`, each in a rule set of its own
/// (one match set each; the tier of one rule set is one match set, see below).
fn secret_globs(tier: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("rule_set({tier}=[\"exec(*secret{i}*)\"])\n"))
        .collect()
}

#[test]
fn the_globs_of_one_rule_set_tier_are_one_pattern_named_by_the_tier() {
    // The issue's ten `exec(*secretN*)` deny globs, as one writes them: one rule set.
    let globs: Vec<String> = (0..10).map(|i| format!("\"exec(*secret{i}*)\"")).collect();
    let text = format!(
        "rule_set(deny=[{}], allow=[\"exec(echo *)\"])\n",
        globs.join(", ")
    );
    let compiled = compile_patterns(&policy(&text, None), 0);
    assert!(
        compiled.tables.left_out.is_empty(),
        "{:?}",
        compiled.tables.left_out
    );
    for secret in ["secret0x", "a secret9 b"] {
        let (decision, rule) = compiled.tables.decide("echo", &[secret]).unwrap();
        assert_eq!(decision, Decision::Forbidden, "{secret}");
        let rule = &compiled.rules[rule as usize];
        assert!(
            rule.text
                .starts_with("rule_set(deny=[\"exec(*secret0*)\", \"exec(*secret1*)\"")
                && rule.summary.contains("`*secret9*`"),
            "{rule:?}"
        );
    }
    let (decision, rule) = compiled.tables.decide("echo", &["public"]).unwrap();
    assert_eq!(decision, Decision::Allow);
    assert_eq!(
        compiled.rules[rule as usize].text,
        "rule_set(allow=[\"exec(echo *)\"])"
    );
}

#[test]
fn a_set_too_large_keeps_the_patterns_that_fit_and_names_each_left_out() {
    let compiled = compile_patterns(&policy(&secret_globs("deny", 10), None), 0);
    let left_out = &compiled.tables.left_out;
    assert!(
        !left_out.is_empty(),
        "ten globs fit: the test needs a set that does not"
    );
    assert!(left_out.len() < 10, "nothing was kept: {left_out:?}");
    // The first patterns are kept and held; each left out names only itself and the limit.
    assert_eq!(
        compiled.tables.decide("echo", &["secret0x"]).map(|d| d.0),
        Some(Decision::Forbidden)
    );
    for left in left_out {
        assert_eq!(left.decision, Decision::Forbidden);
        assert!(left.why.contains("the limit is"), "{}", left.why);
        assert_eq!(left.why.matches("secret").count(), 1, "{}", left.why);
    }
}

/// The rule-set engine's decision for a write of `path`, as `guard policy evaluate` gives it.
fn engine_write(policy: &Policy, path: &str) -> Option<Decision> {
    policy
        .rule_set_decision(Tool::Write, Some(path))
        .map(|found| found.decision)
}

const PATH_RULES: &str = "rule_set(deny=[\"write(.git/**)\", \"write(/etc/**)\", \"write(*.lock)\"], \
     ask=[\"write(/home/*/notes/**)\"], allow=[\"write(/home/**)\", \"write(**/build/*.o)\"])\n";

#[test]
fn the_kernel_walk_decides_paths_as_the_rule_set_engine_does() {
    let policy = policy(PATH_RULES, None);
    let tables = compile_patterns(&policy, 0).tables;
    for path in [
        "/etc/passwd",
        "/etc",
        "/home/a/.git",
        "/home/a/repo/.git/HEAD",
        "/home/a/repo/.gitignore",
        "/home/a/notes/x",
        "/home/a/b/notes/x",
        "/home/a/Cargo.lock",
        "/home/a/x.o",
        "/tmp/build/x.o",
        "/tmp/build/sub/x.o",
        "/tmp/plain",
        "/srv/rules/team.rules",
    ] {
        assert_eq!(
            tables.decide_path(Tool::Write, path).map(|(d, _)| d),
            engine_write(&policy, path),
            "{path}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn kernel_and_engine_agree_on_any_path(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("etc"), Just("home"), Just("a"), Just(".git"), Just("notes"),
                Just("build"), Just("x.o"), Just("y.lock"), Just("z"),
            ],
            1..6,
        )
    ) {
        static POLICY: std::sync::LazyLock<(Policy, PatternTables)> = std::sync::LazyLock::new(|| {
            let policy = policy(PATH_RULES, None);
            let tables = compile_patterns(&policy, 0).tables;
            (policy, tables)
        });
        let (policy, tables) = &*POLICY;
        let path = format!("/{}", parts.join("/"));
        prop_assert_eq!(
            tables.decide_path(Tool::Write, &path).map(|(d, _)| d),
            engine_write(policy, &path),
            "{}", path
        );
    }
}
