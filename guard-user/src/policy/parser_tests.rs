//! docs/policy-language.md §1: every builtin, argument form and error message of the `.rules` language.

use super::*;
use crate::policy::{MatchOptions, RuleMatch};

fn parse(src: &str) -> Result<Policy> {
    let mut parser = PolicyParser::new();
    parser.parse("test.rules", src)?;
    Ok(parser.build())
}

fn parse_err(src: &str) -> String {
    match parse(src) {
        Ok(_) => panic!("expected {src:?} to be refused"),
        Err(err) => err.to_string(),
    }
}

/// The single line a person sees, as `guard` prints it.
fn display_line(src: &str) -> String {
    let source = parse(src).expect_err("expected a parse error");
    crate::policy::LoadError::Parse {
        path: "test.rules".into(),
        source,
    }
    .display_line()
}

fn argv(text: &str) -> Vec<String> {
    shlex::split(text).unwrap()
}

fn decision(policy: &Policy, cmd: &str) -> Option<Decision> {
    policy.check(&argv(cmd), None).decision
}

#[test]
fn builtins_accept_keywords_and_positions_and_return_none() {
    let policy = parse(
        r#"
r = prefix_rule(["git", "status"], "prompt")
assert_eq = lambda a, b: None if a == b else fail("not equal")
assert_eq(r, None)
network_rule("example.com", "https", "deny", "no")
host_executable("git", ["/usr/bin/git"])
"#,
    )
    .unwrap();
    assert_eq!(decision(&policy, "git status"), Some(Decision::Prompt));
    assert_eq!(policy.network_rules()[0].decision, Decision::Forbidden);
    assert_eq!(
        policy.network_rules()[0].justification.as_deref(),
        Some("no")
    );
    assert_eq!(
        policy.host_executables()["git"].as_ref(),
        [PathBuf::from("/usr/bin/git")]
    );
}

#[test]
fn extended_dialect_features_and_f_strings_work() {
    let policy = parse(
        r#"
def allow(*tokens, decision = "allow"):
    prefix_rule(pattern = list(tokens), decision = decision)
[allow(p, "status") for p in ["git", "hg"]]
sub = "log"
allow("git", f"{sub}")
(lambda: prefix_rule(pattern = ["ls"]))()
"#,
    )
    .unwrap();
    assert_eq!(decision(&policy, "hg status"), Some(Decision::Allow));
    assert_eq!(decision(&policy, "git log"), Some(Decision::Allow));
    assert_eq!(decision(&policy, "ls"), Some(Decision::Allow));
}

#[test]
fn load_statements_parse_but_fail_to_evaluate() {
    assert!(parse_err(r#"load("x.star", "y")"#).contains("No imports are available"));
}

#[test]
fn starlark_argument_errors_are_the_reference_texts() {
    let unknown = parse_err(r#"prefix_rule(pattern=["a"], foo="x")"#);
    assert!(
        unknown.contains("Found `foo` extra named parameter(s) for call to prefix_rule"),
        "{unknown}"
    );
    let missing = parse_err(r#"network_rule(host="x", protocol="http")"#);
    assert!(
        missing.contains("Missing parameter `decision` for call to `network_rule`"),
        "{missing}"
    );
    let tuple = parse_err(r#"prefix_rule(pattern=("a",))"#);
    assert!(
        tuple.contains("Type of parameter `pattern` doesn't match, expected `list`, actual `tuple"),
        "{tuple}"
    );
    for src in [
        r#"prefix_rule(pattern=["a"], match=("a",))"#,
        r#"prefix_rule(pattern=["a"], not_match=("b",))"#,
        r#"host_executable(name="git", paths=("/usr/bin/git",))"#,
    ] {
        assert!(
            parse_err(src).contains("doesn't match, expected `list`"),
            "{src}"
        );
    }
    // An explicit None for an optional string is a type error, not "absent".
    for src in [
        r#"prefix_rule(pattern=["a"], decision=None)"#,
        r#"prefix_rule(pattern=["a"], justification=None)"#,
        r#"network_rule(host="x", protocol="http", decision="allow", justification=None)"#,
    ] {
        assert!(parse_err(src).contains("Type of parameter"), "{src}");
    }
    assert!(parse_err("prefix_rule(").contains("Parse error"));
}

#[test]
fn pattern_errors() {
    for (src, want) in [
        ("[]", "invalid pattern element: pattern cannot be empty"),
        (
            r#"["a", []]"#,
            "invalid pattern element: pattern alternatives cannot be empty",
        ),
        (
            r#"["a", ["b", 1]]"#,
            "invalid pattern element: pattern alternative must be a string (got int)",
        ),
        (
            r#"["a", 1]"#,
            "invalid pattern element: pattern element must be a string or list of strings (got int)",
        ),
        (
            r#"["a", ("b",)]"#,
            "invalid pattern element: pattern element must be a string or list of strings (got tuple)",
        ),
    ] {
        let err = parse_err(&format!("prefix_rule(pattern={src})"));
        assert!(err.contains(want), "{src}: {err}");
    }
}

#[test]
fn decisions_are_case_sensitive_and_deny_is_network_only() {
    for raw in ["deny", "Allow", "ask", ""] {
        let err = parse_err(&format!(r#"prefix_rule(pattern=["a"], decision="{raw}")"#));
        assert!(err.contains(&format!("invalid decision: {raw}")), "{err}");
    }
    let policy = parse(r#"prefix_rule(pattern=["a"])"#).unwrap();
    assert_eq!(decision(&policy, "a"), Some(Decision::Allow));
}

#[test]
fn justification_is_checked_blank_and_stored_untrimmed() {
    assert!(
        parse_err(r#"prefix_rule(pattern=["a"], justification="  ")"#)
            .contains("invalid rule: justification cannot be empty")
    );
    assert!(
        parse_err(r#"network_rule(host="x", protocol="http", decision="allow", justification="")"#)
            .contains("invalid rule: justification cannot be empty")
    );
    let policy = parse(r#"prefix_rule(pattern=["a"], justification=" why ")"#).unwrap();
    let eval = policy.check(&argv("a"), None);
    let RuleMatch::PrefixRuleMatch { justification, .. } = &eval.matched_rules[0] else {
        panic!("expected a prefix match");
    };
    assert_eq!(justification.as_deref(), Some(" why "));
}

#[test]
fn first_position_alternatives_expand_in_order_with_duplicates() {
    let policy = parse(
        r#"prefix_rule(pattern=[["npm", "pnpm", "npm"], ["i", "install"]], decision="prompt")"#,
    )
    .unwrap();
    let programs: Vec<&str> = policy.prefix_rules().iter().map(|r| r.program()).collect();
    assert_eq!(programs, ["npm", "pnpm", "npm"]);
    // Later alternatives stay inside one rule: no cartesian expansion.
    assert!(
        policy
            .prefix_rules()
            .iter()
            .all(|r| r.pattern.rest.len() == 1)
    );
    assert_eq!(
        policy
            .check(&argv("npm install x"), None)
            .matched_rules
            .len(),
        2
    );
    // A one-element alternative list is a plain string.
    let single = parse(r#"prefix_rule(pattern=["git", ["status"]])"#).unwrap();
    assert_eq!(
        single.prefix_rules()[0].pattern.rest[0],
        PatternToken::Single("status".into())
    );
}

#[test]
fn rules_keep_their_file_line_and_id() {
    let policy =
        parse("\n\nprefix_rule(\n    pattern=[[\"a\", \"b\"]],\n)\nprefix_rule(pattern=[\"c\"])\n")
            .unwrap();
    let origins: Vec<(u32, usize)> = policy
        .prefix_rules()
        .iter()
        .map(|r| (r.id.0, r.origin.as_ref().unwrap().line))
        .collect();
    assert_eq!(origins, [(0, 3), (1, 3), (2, 6)]);
    assert_eq!(
        &*policy.prefix_rules()[0].origin.as_ref().unwrap().file,
        "test.rules"
    );
}

#[test]
fn network_rules_normalise_hosts_and_protocols() {
    let policy = parse(
        r#"
network_rule(host="Api.GitHub.COM:443", protocol="https_connect", decision="allow")
network_rule(host="[::1]:8080", protocol="http-connect", decision="prompt")
network_rule(host="10.0.0.1", protocol="socks5_udp", decision="forbidden")
"#,
    )
    .unwrap();
    let rules = policy.network_rules();
    assert_eq!(rules[0].host, "api.github.com");
    assert_eq!(rules[0].protocol, NetworkProtocol::Https);
    assert_eq!(rules[1].host, "::1");
    assert_eq!(rules[2].protocol, NetworkProtocol::Socks5Udp);
    assert_eq!(rules[2].origin.as_ref().unwrap().line, 4);
    for (src, want) in [
        (
            r#"host="*.x", protocol="http", decision="allow""#,
            "invalid rule: network_rule host must be a specific host; wildcards are not allowed",
        ),
        (
            r#"host="x", protocol="HTTPS", decision="allow""#,
            "invalid rule: network_rule protocol must be one of http, https, socks5_tcp, socks5_udp (got HTTPS)",
        ),
        (
            r#"host="x", protocol="http", decision="block""#,
            "invalid decision: block",
        ),
    ] {
        let err = parse_err(&format!("network_rule({src})"));
        assert!(err.contains(want), "{src}: {err}");
    }
    // Network rules never take part in command matching.
    assert_eq!(decision(&policy, "api.github.com"), None);
}

#[test]
fn host_executable_validation() {
    for (src, want) in [
        (
            r#"name="", paths=[]"#,
            "invalid rule: host_executable name cannot be empty",
        ),
        (
            r#"name="/usr/bin/git", paths=[]"#,
            "host_executable name must be a bare executable name (got /usr/bin/git)",
        ),
        (
            r#"name="bin/git", paths=[]"#,
            "host_executable name must be a bare executable name (got bin/git)",
        ),
        (
            r#"name="git/", paths=[]"#,
            "host_executable name must be a bare executable name (got git/)",
        ),
        (
            r#"name=".", paths=[]"#,
            "host_executable name must be a bare executable name (got .)",
        ),
        (
            r#"name="..", paths=[]"#,
            "host_executable name must be a bare executable name (got ..)",
        ),
        (
            r#"name="git", paths=[1]"#,
            "host_executable paths must be strings (got int)",
        ),
        (
            r#"name="git", paths=["usr/bin/git"]"#,
            "host_executable paths must be absolute (got usr/bin/git)",
        ),
        (
            r#"name="git", paths=["~/bin/git"]"#,
            "host_executable paths must be absolute (got ~/bin/git)",
        ),
        (
            r#"name="git", paths=["/usr/bin/hg"]"#,
            "host_executable path `/usr/bin/hg` must have basename `git`",
        ),
        (
            r#"name="git", paths=["/usr/bin/git/.."]"#,
            "host_executable path `/usr/bin/git/..` must have basename `git`",
        ),
    ] {
        let err = parse_err(&format!("host_executable({src})"));
        assert!(err.contains(want), "{src}: {err}");
    }
    let policy = parse(
        r#"
host_executable(name="git", paths=["/usr/bin/git"])
host_executable(name="git", paths=["/opt/x/../bin/git", "/opt/bin/git", "/opt/bin/./git"])
"#,
    )
    .unwrap();
    // Replaced, normalised, deduplicated, first-seen order kept.
    assert_eq!(
        policy.host_executables()["git"].as_ref(),
        [PathBuf::from("/opt/bin/git")]
    );
}

#[test]
fn example_errors_raised_during_the_call() {
    for (src, want) in [
        (
            r#"match=["git 'x"]"#,
            "invalid example: example string has invalid shell syntax",
        ),
        (
            r#"match=["  "]"#,
            "invalid example: example cannot be an empty string",
        ),
        (
            r#"not_match=[[]]"#,
            "invalid example: example cannot be an empty list",
        ),
        (
            r#"match=[["git", 1]]"#,
            "invalid example: example tokens must be strings (got int)",
        ),
        (
            r#"match=[1]"#,
            "invalid example: example must be a string or list of strings (got int)",
        ),
    ] {
        let err = parse_err(&format!(r#"prefix_rule(pattern=["git"], {src})"#));
        assert!(err.contains(want), "{src}: {err}");
    }
}

#[test]
fn examples_are_checked_against_the_rules_own_expansions_only() {
    // `git status` matches another rule of the file, but not this one: still an error.
    let err = parse(
        r#"
prefix_rule(pattern=["git", "status"])
prefix_rule(pattern=["git", "log"], match=["git status"])
"#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"expected every example to match at least one rule. rules: ["PrefixRule { pattern: PrefixPattern { canonical_matching: false, first: \"git\", rest: [Single(\"log\")] }, decision: Allow, justification: None }"]; unmatched examples: ["git status"]"#
    );
    assert_eq!(err.location().unwrap().start.line, 3);
    // Every expansion counts, and every unmatched example is listed, shell-quoted.
    let err = parse_err(
        r#"prefix_rule(pattern=[["a", "b"], "x"], match=["a x", "b x", "c x", ["b", "y z"]])"#,
    );
    assert!(
        err.ends_with(r#"unmatched examples: ["c x", "b 'y z'"]"#),
        "{err}"
    );
    assert!(
        err.contains(r#"first: \"a\""#) && err.contains(r#"first: \"b\""#),
        "{err}"
    );
}

#[test]
fn not_match_is_checked_first_and_quotes_the_match() {
    let err = parse(
        "\nprefix_rule(\n  pattern=[\"git\"],\n  match=[\"hg\"],\n  not_match=[\"git push\"],\n)\n",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"expected example to not match rule `PrefixRuleMatch { matched_prefix: ["git"], decision: Allow, resolved_program: None, justification: None }`: git push"#
    );
    assert_eq!(err.location().unwrap().start.line, 2);
}

#[test]
fn examples_resolve_host_executables_declared_later_in_the_same_file() {
    // Resolution is on during checks: an absolute example reaches the basename rule...
    parse(r#"prefix_rule(pattern=["git", "status"], match=["/usr/bin/git status"])"#).unwrap();
    // ...unless a host_executable later in the same file excludes that path.
    let err = parse(
        r#"
prefix_rule(pattern=["git", "status"], match=["/usr/bin/git status"])
host_executable(name="git", paths=["/opt/git"])
"#,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("unmatched examples: [\"/usr/bin/git status\"]")
    );
    // A not_match on a resolved path quotes the resolved program.
    let err = parse_err(r#"prefix_rule(pattern=["git"], not_match=["/usr/bin/git x"])"#);
    assert!(
        err.contains(r#"matched_prefix: ["git"], decision: Allow, resolved_program: Some(AbsolutePathBuf("/usr/bin/git"))"#),
        "{err}"
    );
}

#[test]
fn examples_are_checked_per_file_and_later_files_do_not_count() {
    let mut parser = PolicyParser::new();
    parser
        .parse(
            "a.rules",
            r#"prefix_rule(pattern=["git"], match=["/usr/bin/git x"])"#,
        )
        .unwrap();
    // The host_executable of a later file does not re-check a.rules' examples.
    parser
        .parse(
            "b.rules",
            r#"host_executable(name="git", paths=["/opt/git"])"#,
        )
        .unwrap();
    let err = parser
        .parse("c.rules", r#"prefix_rule(pattern=["hg"], match=["git"])"#)
        .unwrap_err();
    assert_eq!(err.location().unwrap().path, "c.rules");
}

#[test]
fn displayed_errors_are_path_line_message() {
    assert_eq!(
        display_line(
            "prefix_rule(pattern=[\"a\"])\n\nprefix_rule(pattern=[\"a\"], decision=\"deny\")\n"
        ),
        "test.rules:3: error: invalid decision: deny (problem is on or around line 3)"
    );
    assert_eq!(
        display_line("\nnetwork_rule(host=\"x\", protocol=\"http\")\n"),
        "test.rules:2: error: Missing parameter `decision` for call to `network_rule` (problem is on or around line 2)"
    );
    assert!(
        display_line("\n\nprefix_rule(pattern=[\"a\"], match=[\"b\"])\n")
            .starts_with("test.rules:3: expected every example to match at least one rule.")
    );
    // A call inside a function is reported where the builtin was called from.
    assert!(
        display_line("def f():\n    prefix_rule(pattern=[])\n\nf()\n")
            .starts_with("test.rules:2: ")
    );
}

#[test]
fn files_parsed_in_order_accumulate_into_one_policy() {
    let mut parser = PolicyParser::new();
    parser
        .parse("a.rules", r#"prefix_rule(pattern=["a"], match=["a"])"#)
        .unwrap();
    parser
        .parse("b.rules", r#"prefix_rule(pattern=["b"], match=["b"])"#)
        .unwrap();
    let policy = parser.build();
    assert_eq!(policy.prefix_rules().len(), 2);
    let resolved = policy.check_with_options(
        &argv("./b"),
        None,
        MatchOptions {
            resolve_host_executables: true,
        },
    );
    assert_eq!(resolved.decision, Some(Decision::Allow));
}

#[test]
fn sandbox_sets_the_write_confinement_and_the_last_call_wins() {
    use crate::policy::sandbox::SandboxMode;
    assert_eq!(parse("").unwrap().sandbox(), None);
    let policy = parse(
        "sandbox(mode=\"read-only\")\nsandbox(\"workspace-write\", writable=[\"/srv/cache\", \"out\"])\n",
    )
    .unwrap();
    let sandbox = policy.sandbox().unwrap();
    assert_eq!(sandbox.mode, SandboxMode::WorkspaceWrite);
    assert_eq!(
        sandbox.writable,
        vec![PathBuf::from("/srv/cache"), PathBuf::from("out")]
    );
    assert!(sandbox.from.ends_with(":2"), "{}", sandbox.from);
    assert!(
        parse_err("sandbox(mode=\"rw\")").contains(
            "sandbox(mode=\"rw\"): not a mode; use one of \"read-only\", \"workspace-write\", \"danger-full-access\""
        )
    );
    assert!(
        parse_err("sandbox(mode=\"read-only\", writable=[\"/x\"])")
            .contains("only workspace-write has writable roots")
    );
    assert!(parse_err("sandbox(mode=\"external\")").contains("not a mode"));
}

// --- large files, read a run of statements at a time ---------------------------------------

/// `rules` generated rules in the shapes real files use (variables, a helper, loops, f-strings,
/// comments, calls over several lines), then `tail`: 4 prefix rules per 4 (the helper's, an
/// alternative's, a loop's two) and a network rule; 200 rules make about 3 runs of [`RUN`].
fn large_source(rules: usize, tail: &str) -> String {
    let mut src =
        String::from("BASE = \"tool\"\ndef helper(n):\n    return [BASE + str(n), \"x\"]\n");
    for i in 0..rules {
        match i % 4 {
            0 => src.push_str(&format!("prefix_rule(pattern=helper({i}), decision=\"prompt\")\n")),
            1 => src.push_str(&format!(
                "# rule {i}\nprefix_rule(\n    pattern=[f\"p{i}\", [\"a\", \"b\"]],\n    justification=\"\"\"line one\nline two {i}\"\"\",\n)\n"
            )),
            2 => src.push_str(&format!(
                "for sub in [\"s1\", \"s2\"]:\n    prefix_rule(pattern=[\"q{i}\", sub], decision=\"forbidden\")\n"
            )),
            _ => src.push_str(&format!("network_rule(host=\"h{i}.example.com\", protocol=\"https\", decision=\"allow\")\n")),
        }
    }
    src.push_str(tail);
    src
}

/// The run size of these tests: small, so small sources make several runs.
const RUN: usize = 4096;

fn parse_in_runs(src: &str) -> Result<Policy> {
    let mut parser = PolicyParser::new();
    parser.parse_in_runs_of("test.rules", src, RUN)?;
    Ok(parser.build())
}

/// What the whole file read at once gives: the reading runs must give the same.
fn parse_whole(src: &str) -> Result<Policy> {
    let parser = PolicyParser::new();
    let globals = parser.globals();
    parser.eval_whole("test.rules", src, &globals)?;
    parser.builder.borrow().check_examples_from(0)?;
    Ok(parser.build())
}

/// Whether the runs alone could read `src` (no whole reading after them).
fn runs_vouch_for(src: &str) -> bool {
    let parser = PolicyParser::new();
    let globals = parser.globals();
    parser.eval_in_runs("test.rules", src, &globals, RUN)
}

fn same_policy(runs: &Policy, whole: &Policy) {
    assert_eq!(runs.prefix_rules(), whole.prefix_rules());
    assert_eq!(runs.network_rules(), whole.network_rules());
}

#[test]
fn a_large_file_read_in_runs_is_the_file_read_whole() {
    let src = large_source(300, "prefix_rule(pattern=[\"last\"], match=[\"last x\"])\n");
    assert!(super::statement_chunks(&src, RUN).len() > 2);
    assert!(runs_vouch_for(&src));
    let runs = parse_in_runs(&src).unwrap();
    same_policy(&runs, &parse_whole(&src).unwrap());
    assert_eq!(runs.prefix_rules().len(), 301);
    // Origins keep their lines across runs: the last rule is on the file's last line.
    let last = runs.prefix_rules().last().unwrap();
    assert_eq!(last.origin.as_ref().unwrap().line, src.lines().count());
}

#[test]
fn a_large_file_that_runs_cannot_vouch_for_is_read_whole() {
    // A helper that reads a variable bound at the end: a run before the binding cannot
    // compile it, the whole file can.
    let late = format!("{}\ndef late():\n    return LATE\n", large_source(10, ""));
    let src = format!(
        "{late}{}LATE = [\"z\"]\nprefix_rule(pattern=late())\n",
        large_source(200, "")
    );
    assert!(super::statement_chunks(&src, RUN).len() > 2);
    assert!(!runs_vouch_for(&src));
    let runs = parse_in_runs(&src).unwrap();
    same_policy(&runs, &parse_whole(&src).unwrap());
    assert_eq!(runs.prefix_rules().last().unwrap().program(), "z");

    // A builtin's name bound at the end: read whole, the early `len` is that unbound variable.
    let shadowed = format!("n = len([1])\n{}len = 3\n", large_source(200, ""));
    assert!(!runs_vouch_for(&shadowed));
    let runs_err = parse_in_runs(&shadowed).unwrap_err().to_string();
    let whole_err = parse_whole(&shadowed).unwrap_err().to_string();
    assert_eq!(runs_err, whole_err);
    assert!(runs_err.contains("len"), "{runs_err}");
}

#[test]
fn an_error_in_a_late_run_is_the_whole_file_s_error_and_leaves_nothing_behind() {
    let src = large_source(200, "prefix_rule(pattern=[\"x\"], decision=\"maybe\")\n");
    let mut parser = PolicyParser::new();
    parser
        .parse("first.rules", "prefix_rule(pattern=[\"kept\"])\n")
        .unwrap();
    let err = parser
        .parse_in_runs_of("test.rules", &src, RUN)
        .unwrap_err()
        .to_string();
    assert_eq!(err, parse_whole(&src).unwrap_err().to_string());
    assert!(
        err.contains(&format!("test.rules:{}", src.lines().count())),
        "{err}"
    );
    // Only what the whole reading recorded before its error stays; the rules of the runs read
    // first are gone, so nothing is recorded twice.
    let policy = parser.build();
    assert_eq!(policy.prefix_rules()[0].program(), "kept");
    assert_eq!(policy.prefix_rules().len(), 1 + 200);
}

/// `rules` calls and nothing bound: each run leaves the module empty, so the next takes a
/// fresh one.
fn calls_only(rules: usize) -> String {
    (0..rules)
        .map(|i| format!("prefix_rule(pattern=[\"c{i}\", [\"a\", \"b\"]], decision=\"prompt\")\n"))
        .collect()
}

#[test]
fn runs_that_bind_nothing_each_take_a_fresh_module_and_read_as_the_whole_file() {
    let src = calls_only(300);
    assert!(super::statement_chunks(&src, RUN).len() > 2);
    assert!(runs_vouch_for(&src));
    let runs = parse_in_runs(&src).unwrap();
    same_policy(&runs, &parse_whole(&src).unwrap());
    assert_eq!(runs.prefix_rules().len(), 300);

    // A builtin read in an early module and bound in a later one is still caught.
    let shadowed = format!(
        "prefix_rule(pattern=[str(len([1]))])\n{}len = 3\n",
        calls_only(300)
    );
    assert!(!runs_vouch_for(&shadowed));
    assert_eq!(
        parse_in_runs(&shadowed).unwrap_err().to_string(),
        parse_whole(&shadowed).unwrap_err().to_string()
    );
}

/// A file that loops for ever, recurses without end or grows a value in a loop stops with an
/// error that says so (found by the `rules_file` fuzz target's bounds: a generated file must not
/// hang or take the machine's memory).
#[test]
fn an_evaluation_that_does_not_end_stops_at_its_bounds() {
    let started = std::time::Instant::now();
    let endless = parse_err("for i in range(2000000000):\n    pass\n");
    assert!(
        endless.contains("more than 1000000 calls and loop steps"),
        "{endless}"
    );
    let deep = parse_err("def f(n):\n    return [f(n + 1) for _ in range(2)]\nf(0)\n");
    assert!(deep.contains("starlark error"), "{deep}");
    let growing = parse_err(
        "s = \"x\" * 65536\nxs = []\nfor i in range(2000000000):\n    xs.append(s + \"y\")\n",
    );
    assert!(growing.contains("grew past 128 MiB"), "{growing}");
    // Each stops at its bound, long before it would have finished.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}

#[test]
fn a_policy_takes_far_fewer_steps_than_the_bound() {
    let mut rules = String::new();
    for i in 0..5000 {
        rules.push_str(&format!(
            "prefix_rule(pattern = [\"tool{i}\", \"run\"], decision = \"allow\")\n"
        ));
    }
    rules.push_str("[prefix_rule(pattern = [f\"gen{i}\"]) for i in range(5000)]\n");
    let policy = parse(&rules).expect("a large policy stays inside the bounds");
    assert_eq!(decision(&policy, "gen4999"), Some(Decision::Allow));
}
