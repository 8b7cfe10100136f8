//! End-to-end tests of `guard authz check` and `guard authz default`: the binary run as a real
//! process, in a temporary folder (the helpers shared with `cli.rs` are in `common/`).

use crate::common::{Run, Sandbox, display, run_command};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

impl Sandbox {
    /// `guard authz check ARGS...`.
    fn authz_check(&self, args: &[&str]) -> Run {
        let mut all = vec!["authz", "check"];
        all.extend_from_slice(args);
        self.run(&all)
    }

    /// `guard authz check --json ARGS...`: the exit status and the one JSON line.
    fn authz_check_json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.authz_check(&all);
        (out.code.expect("exited"), out.one_json_line())
    }
}

impl Run {
    /// Exit 2, nothing on stdout, and a first stderr line that starts with `prefix`.
    #[track_caller]
    fn assert_bad_input(&self, prefix: &str) {
        self.assert_code(2);
        assert_eq!(self.stdout, "", "nothing on stdout on bad input");
        let first = self.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(prefix),
            "first stderr line should start with {prefix:?}:\n{}",
            self.stderr
        );
    }
}

const ALICE: &str = r#"{"sub": "alice", "attrs": {"uid": ["1000"], "groups": ["users"]}}"#;
const ROOT: &str = r#"{"sub": "root", "attrs": {"uid": "0"}}"#;
const ADA: &str = r#"{"sub": "ada", "attrs": {"uid": ["1001"], "groups": ["users", "wheel"]}}"#;

// ---------------------------------------------------------------------------------------------
// The built-in policy
// ---------------------------------------------------------------------------------------------

#[test]
fn json_output_shape_and_exit_codes_with_the_builtin_policy() {
    let sandbox = Sandbox::new();
    let own = [
        "--subject",
        ALICE,
        "--action",
        "audit",
        "--entity",
        "audit",
        "--resource",
        r#"{"owner": "alice"}"#,
    ];
    assert_eq!(
        sandbox.authz_check_json(&own),
        (
            0,
            json!({"decision": "allow", "rule": 4, "obligations": []})
        )
    );
    // The exact line, key order included.
    let out = sandbox.authz_check(&[&["--json"], &own[..]].concat());
    assert_eq!(
        out.stdout,
        "{\"decision\":\"allow\",\"rule\":4,\"obligations\":[]}\n"
    );
    assert_eq!(out.stderr, "");

    let refused = json!({"decision": "deny", "rule": null, "obligations": []});
    let theirs = [
        "--subject",
        ALICE,
        "--action",
        "audit",
        "--entity",
        "audit",
        "--resource",
        r#"{"owner": "bob"}"#,
    ];
    assert_eq!(sandbox.authz_check_json(&theirs), (1, refused.clone()));
    for action in ["status", "approve", "reload"] {
        assert_eq!(
            sandbox.authz_check_json(&["--subject", ALICE, "--action", action]),
            (1, refused.clone()),
            "{action}"
        );
    }
    assert_eq!(
        sandbox.authz_check_json(&["--subject", ROOT, "--action", "reload"]),
        (
            0,
            json!({"decision": "allow", "rule": 1, "obligations": []})
        )
    );
    // Root inside a guard scope may not reload (rule 0, before root's own).
    let scoped_root = r#"{"sub": "root", "attrs": {"uid": ["0"], "in_guard_scope": ["true"]}}"#;
    assert_eq!(
        sandbox.authz_check_json(&["--subject", scoped_root, "--action", "reload"]),
        (1, json!({"decision": "deny", "rule": 0, "obligations": []}))
    );
}

#[test]
fn admin_group_applies_to_the_builtin_policy() {
    let sandbox = Sandbox::new();
    let approve = [
        "--subject",
        ADA,
        "--action",
        "approve",
        "--entity",
        "prompt",
    ];
    assert_eq!(sandbox.authz_check_json(&approve).0, 1);
    let with_group = [&approve[..], &["--admin-group", "wheel"]].concat();
    assert_eq!(
        sandbox.authz_check_json(&with_group),
        (
            0,
            json!({"decision": "allow", "rule": 2, "obligations": []})
        )
    );
    // The group is the built-in policy's: it cannot go with a policy file.
    let file = display(&sandbox.write("p.json", r#"{"rules": []}"#));
    let out = sandbox.authz_check(&[&with_group[..], &["--policy", &file]].concat());
    out.assert_code(2);
}

#[test]
fn human_output_names_the_rule() {
    let sandbox = Sandbox::new();
    let out = sandbox.authz_check(&[
        "--subject",
        ALICE,
        "--action",
        "audit",
        "--entity",
        "audit",
        "--resource",
        r#"{"owner": "alice"}"#,
    ]);
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        "allow: rule 4 (allow [audit] when entity=audit, resource.owner=$sub)\n"
    );
    let out = sandbox.authz_check(&["--subject", ALICE, "--action", "status"]);
    out.assert_code(1);
    assert_eq!(
        out.stdout,
        "deny: no rule matches (requests no rule allows are refused)\n"
    );
}

#[test]
fn human_output_is_coloured_when_forced() {
    let sandbox = Sandbox::new();
    let out = run_command(sandbox.command().env("CLICOLOR_FORCE", "1").args([
        "authz",
        "check",
        "--subject",
        ROOT,
        "--action",
        "status",
    ]));
    out.assert_code(0);
    assert!(out.stdout.contains("\u{1b}["), "styled: {:?}", out.stdout);
    assert!(out.stdout.contains("allow"), "{}", out.stdout);
}

// ---------------------------------------------------------------------------------------------
// A policy file, resource and env
// ---------------------------------------------------------------------------------------------

const FILE_POLICY: &str = r#"{"comment": "fields this version does not know are ignored",
 "rules": [
  {"effect": "deny", "actions": ["*"], "when": {"env.transport": ["tcp"]}, "obligations": ["log"]},
  {"effect": "allow", "actions": ["audit"], "when": {"resource.owner": ["$sub"]}, "obligations": ["mask"]},
  {"effect": "allow", "actions": ["status", "prompts"], "when": {"groups": ["ops", "admin"]}}
]}
"#;

#[test]
fn a_file_policy_with_resource_and_env() {
    let sandbox = Sandbox::new();
    let policy = display(&sandbox.write("authz.json", FILE_POLICY));
    let own = ["--policy", &policy, "--subject", ALICE, "--action", "audit"];
    let owner = ["--resource", r#"{"owner": ["alice", "carol"]}"#];
    assert_eq!(
        sandbox.authz_check_json(&[&own[..], &owner].concat()),
        (
            0,
            json!({"decision": "allow", "rule": 1, "obligations": ["mask"]})
        )
    );
    // Over TCP the deny rule comes first, and a denial carries no obligations.
    let tcp = ["--env", r#"{"transport": "tcp"}"#];
    assert_eq!(
        sandbox.authz_check_json(&[&own[..], &owner, &tcp].concat()),
        (1, json!({"decision": "deny", "rule": 0, "obligations": []}))
    );
    let unix = ["--env", r#"{"transport": "unix"}"#];
    assert_eq!(
        sandbox
            .authz_check_json(&[&own[..], &owner, &unix].concat())
            .0,
        0
    );
    // Without --resource the record has no owner: refused.
    assert_eq!(
        sandbox.authz_check_json(&own),
        (
            1,
            json!({"decision": "deny", "rule": null, "obligations": []})
        )
    );
    // A subject attribute named like a resource key does not count.
    let sneaky = r#"{"sub": "alice", "attrs": {"resource.owner": ["alice"]}}"#;
    assert_eq!(
        sandbox
            .authz_check_json(&[
                "--policy",
                &policy,
                "--subject",
                sneaky,
                "--action",
                "audit"
            ])
            .0,
        1
    );

    let out = sandbox.authz_check(&[&own[..], &owner].concat());
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        "allow: rule 1 (allow [audit] when resource.owner=$sub) obligations: mask\n"
    );
    let out = sandbox.authz_check(&[&own[..], &owner, &tcp].concat());
    out.assert_code(1);
    assert_eq!(
        out.stdout,
        "deny: rule 0 (deny [*] when env.transport=tcp)\n"
    );
    let ops = r#"{"sub": "olga", "attrs": {"groups": ["ops"]}}"#;
    let out = sandbox.authz_check(&["--policy", &policy, "--subject", ops, "--action", "prompts"]);
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        "allow: rule 2 (allow [status, prompts] when groups=ops|admin)\n"
    );
}

#[test]
fn unknown_names_are_warned_about_on_stderr_and_decided_anyway() {
    let sandbox = Sandbox::new();
    let policy = display(&sandbox.write(
        "typo.json",
        r#"{"rules": [{"effect": "allow", "actions": ["aprove"]}]}"#,
    ));
    let out = sandbox.authz_check(&[
        "--json",
        "--policy",
        &policy,
        "--subject",
        ALICE,
        "--action",
        "approve",
        "--entity",
        "prompts",
    ]);
    out.assert_code(1);
    assert!(
        out.stderr
            .contains("warning: rule 0 names \"aprove\", which is not one of the daemon's actions"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("warning: --entity \"prompts\" is not one of the daemon's entities"),
        "{}",
        out.stderr
    );
    assert_eq!(out.one_json_line()["decision"], "deny");
}

// ---------------------------------------------------------------------------------------------
// Bad input: exit 2
// ---------------------------------------------------------------------------------------------

#[test]
fn a_bad_json_argument_names_the_flag() {
    let sandbox = Sandbox::new();
    let base = ["--action", "status"];
    for (args, prefix) in [
        (
            vec!["--subject", r#"{"sub": "alice",}"#],
            "error: --subject: line 1, column 17: trailing comma",
        ),
        (
            vec!["--subject", r#"{"email": "a@b"}"#],
            "error: --subject: line 1, column 16: missing field `sub`",
        ),
        (
            vec!["--subject", r#"{"sub": ""}"#],
            "error: --subject: \"sub\" is empty",
        ),
        (
            vec!["--subject", ALICE, "--resource", r#"{"owner": 3}"#],
            "error: --resource: attribute \"owner\": expected a string or a list of strings, not a number",
        ),
        (
            vec!["--subject", ALICE, "--env", "[]"],
            "error: --env: expected a JSON object of attributes",
        ),
        (
            vec!["--subject", ALICE, "--env", "{"],
            "error: --env: line 1, column 1: EOF while parsing an object",
        ),
    ] {
        sandbox
            .authz_check(&[&base[..], &args].concat())
            .assert_bad_input(prefix);
    }
}

#[test]
fn a_bad_policy_file_names_the_file_line_and_column() {
    let sandbox = Sandbox::new();
    let bad = sandbox.write(
        "bad.json",
        "{\"rules\": [\n  {\"effect\": \"allow\", \"actions\": [\"*\"]},\n  {\"effect\": \"permit\", \"actions\": [\"*\"]}\n]}\n",
    );
    let path = display(&bad);
    for json in [false, true] {
        let mut args = vec!["--policy", &path, "--subject", ALICE, "--action", "status"];
        if json {
            args.push("--json");
        }
        let out = sandbox.authz_check(&args);
        out.assert_bad_input(&format!(
            "{path}:3:21: error: invalid effect \"permit\": expected \"allow\" or \"deny\""
        ));
    }
    let missing = sandbox.write(
        "missing.json",
        "{\"rules\": [\n  {\"actions\": [\"*\"]}\n]}",
    );
    sandbox
        .authz_check(&[
            "--policy",
            &display(&missing),
            "--subject",
            ALICE,
            "--action",
            "status",
        ])
        .assert_bad_input(&format!(
            "{}:2:20: error: a rule needs \"effect\": \"allow\" or \"deny\"",
            display(&missing)
        ));
    let absent = sandbox.file("absent.json");
    sandbox
        .authz_check(&[
            "--policy",
            &display(&absent),
            "--subject",
            ALICE,
            "--action",
            "status",
        ])
        .assert_bad_input(&format!(
            "error: {}: cannot read the authorization policy: ",
            display(&absent)
        ));
}

#[test]
fn missing_required_flags_are_usage_errors() {
    let sandbox = Sandbox::new();
    sandbox.authz_check(&["--action", "status"]).assert_code(2);
    sandbox.authz_check(&["--subject", ALICE]).assert_code(2);
}

#[test]
fn help_teaches_the_rule_shape_and_the_exit_status() {
    let sandbox = Sandbox::new();
    let out = sandbox.authz_check(&["--help"]);
    out.assert_code(0);
    for needle in [
        "\"effect\": \"allow\" or \"deny\"",
        "\"when\"",
        "resource.NAME",
        "$sub",
        "guard authz check --subject",
        "Exit status: 0 when the request is allowed, 1 when it is denied, 2 on bad input",
        "audit    read audit records",
    ] {
        assert!(
            out.stdout.contains(needle),
            "{needle:?} in:\n{}",
            out.stdout
        );
    }
}

// ---------------------------------------------------------------------------------------------
// guard authz default
// ---------------------------------------------------------------------------------------------

#[test]
fn default_prints_a_policy_that_parses_back_and_decides_the_same() {
    let sandbox = Sandbox::new();
    for group in [None, Some("wheel")] {
        let mut args = vec!["authz", "default"];
        if let Some(group) = group {
            args.extend_from_slice(&["--admin-group", group]);
        }
        let out = sandbox.run(&args);
        out.assert_code(0);
        let printed: Value = serde_json::from_str(&out.stdout).expect("default prints JSON");
        let mut expected = vec![
            json!({"effect": "deny", "actions": ["approve", "amend", "reload"], "when": {"in_guard_scope": ["true"]}}),
            json!({"effect": "allow", "actions": ["*"], "when": {"uid": ["0"]}}),
        ];
        if let Some(group) = group {
            expected
                .push(json!({"effect": "allow", "actions": ["*"], "when": {"groups": [group]}}));
        }
        expected.push(
            json!({"effect": "allow", "actions": ["run"], "when": {"scope": ["none", "host", "run"]}}),
        );
        expected.push(json!({
            "effect": "allow",
            "actions": ["prompts", "approve", "deny"],
            "when": {"entity": ["prompt"], "resource.owner": ["$sub"], "resource.amends": ["false"]},
        }));
        expected.push(json!({
            "effect": "allow",
            "actions": ["audit"],
            "when": {"entity": ["audit"], "resource.owner": ["$sub"]},
        }));
        assert_eq!(printed, json!({"rules": expected}));

        // As a policy file it decides exactly as the built-in policy does.
        let file = display(&sandbox.write("authz.json", &out.stdout));
        for (subject, action) in [(ROOT, "run"), (ADA, "approve"), (ALICE, "status")] {
            let from_file = sandbox.authz_check_json(&[
                "--policy",
                &file,
                "--subject",
                subject,
                "--action",
                action,
            ]);
            let mut builtin = vec!["--subject", subject, "--action", action];
            if let Some(group) = group {
                builtin.extend_from_slice(&["--admin-group", group]);
            }
            assert_eq!(
                from_file,
                sandbox.authz_check_json(&builtin),
                "{subject} {action}"
            );
        }
    }
}
