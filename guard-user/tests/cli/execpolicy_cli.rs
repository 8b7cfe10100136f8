//! `guard execpolicy check`: the Codex CLI's contract. The expected texts below are what
//! `codex execpolicy check` 0.169.0 printed for the same files and arguments; the Codex CLI
//! tier (`tests/codex/codex_cli.rs`) compares with the real binary on thousands more, where npm
//! is reachable.

use crate::common::Sandbox;

const AGENT_RULES: &str = r#"prefix_rule(pattern = ["git", ["status", "log", "diff"]])
prefix_rule(pattern = ["git", "push"], decision = "prompt", justification = "pushes leave the machine")
prefix_rule(pattern = [["rm", "shred"], "-rf"], decision = "forbidden")
host_executable(name = "git", paths = ["/usr/bin/git"])
network_rule(host = "api.github.com", protocol = "https", decision = "allow")
"#;

fn sandbox() -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.write("agent.rules", AGENT_RULES);
    sandbox
}

#[test]
fn prints_codex_json_for_a_match_and_nothing_else() {
    let sandbox = sandbox();
    let run = sandbox.run([
        "execpolicy",
        "check",
        "--rules",
        "agent.rules",
        "git",
        "push",
        "origin",
        "main",
    ]);
    run.assert_success();
    assert_eq!(
        run.stdout,
        r#"{"matchedRules":[{"prefixRuleMatch":{"matchedPrefix":["git","push"],"decision":"prompt","justification":"pushes leave the machine"}}],"decision":"prompt"}
"#
    );
    assert_eq!(run.stderr, "");
}

#[test]
fn no_match_has_no_decision_and_paths_resolve_only_when_asked() {
    let sandbox = sandbox();
    let unresolved = sandbox.run([
        "execpolicy",
        "check",
        "-r",
        "agent.rules",
        "/usr/bin/git",
        "push",
    ]);
    assert_eq!(unresolved.stdout, "{\"matchedRules\":[]}\n");
    let resolved = sandbox.run([
        "execpolicy",
        "check",
        "-r",
        "agent.rules",
        "--resolve-host-executables",
        "/usr/bin/git",
        "push",
    ]);
    assert_eq!(
        resolved.stdout,
        r#"{"matchedRules":[{"prefixRuleMatch":{"matchedPrefix":["git","push"],"decision":"prompt","resolvedProgram":"/usr/bin/git","justification":"pushes leave the machine"}}],"decision":"prompt"}
"#
    );
    // host_executable lists /usr/bin/git only.
    let elsewhere = sandbox.run([
        "execpolicy",
        "check",
        "-r",
        "agent.rules",
        "--resolve-host-executables",
        "/opt/bin/git",
        "push",
    ]);
    assert_eq!(elsewhere.stdout, "{\"matchedRules\":[]}\n");
}

#[test]
fn pretty_is_two_space_indented() {
    let sandbox = sandbox();
    let run = sandbox.run([
        "execpolicy",
        "check",
        "-r",
        "agent.rules",
        "--pretty",
        "--",
        "rm",
        "-rf",
        "build",
    ]);
    run.assert_success();
    assert_eq!(
        run.stdout,
        "{\n  \"matchedRules\": [\n    {\n      \"prefixRuleMatch\": {\n        \"matchedPrefix\": [\n          \"rm\",\n          \"-rf\"\n        ],\n        \"decision\": \"forbidden\"\n      }\n    }\n  ],\n  \"decision\": \"forbidden\"\n}\n"
    );
}

#[test]
fn a_file_that_fails_prints_codex_error_and_exits_1() {
    let sandbox = sandbox();
    sandbox.write(
        "ex.rules",
        "prefix_rule(pattern = [\"git\", \"push\"], decision = \"prompt\", match = [\"git pull\"])\n",
    );
    let run = sandbox.run([
        "execpolicy",
        "check",
        "-r",
        "agent.rules",
        "-r",
        "ex.rules",
        "git",
    ]);
    run.assert_code(1);
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        "Error: failed to parse policy at ex.rules\n\nCaused by:\n    expected every example to match at least one rule. rules: [\"PrefixRule { pattern: PrefixPattern { canonical_matching: false, first: \\\"git\\\", rest: [Single(\\\"push\\\")] }, decision: Prompt, justification: None }\"]; unmatched examples: [\"git pull\"]\n"
    );
    let missing = sandbox.run(["execpolicy", "check", "-r", "missing.rules", "git"]);
    missing.assert_code(1);
    assert_eq!(
        missing.stderr,
        "Error: failed to read policy at missing.rules\n\nCaused by:\n    No such file or directory (os error 2)\n"
    );
}

#[test]
fn guards_own_builtins_are_unknown_names_as_in_codex() {
    let sandbox = sandbox();
    sandbox.write(
        "guard-only.rules",
        "prefix_rule(pattern = [\"git\"])\nenforcement(unmatched_network = \"prompt\")\n",
    );
    let run = sandbox.run(["execpolicy", "check", "-r", "guard-only.rules", "git"]);
    run.assert_code(1);
    assert_eq!(
        run.stderr,
        "Error: failed to parse policy at guard-only.rules\n\nCaused by:\n    starlark error: error: Variable `enforcement` not found\n     --> guard-only.rules:2:1\n      |\n    2 | enforcement(unmatched_network = \"prompt\")\n      | ^^^^^^^^^^^\n      |\n    \n"
    );
    // guard's own check reads the same file.
    sandbox
        .run([
            "check",
            "--rules",
            "guard-only.rules",
            "--json",
            "--",
            "git",
        ])
        .assert_success();
}

#[test]
fn rules_and_a_command_are_required() {
    let sandbox = sandbox();
    let run = sandbox.run(["execpolicy", "check", "-r", "agent.rules"]);
    run.assert_code(2);
    assert_eq!(
        run.stderr,
        "error: the following required arguments were not provided:\n  <COMMAND>...\n\nUsage: guard execpolicy check --rules <PATH> <COMMAND>...\n\nFor more information, try '--help'.\n"
    );
}
