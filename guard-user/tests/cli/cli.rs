//! End-to-end tests of the `guard` binary: every subcommand is run as a real process, in a
//! temporary folder, with `GUARD_SYSTEM_RULES` pointing at a path that does not exist (so the
//! machine's /etc/guard/rules never leaks in) unless a test sets it on purpose.

use std::fs;
use std::path::Path;

use crate::common::{Run, Sandbox, display, read, run_command};
use proptest::prelude::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

impl Sandbox {
    /// `guard check [options...] -- argv...`.
    fn check(&self, options: &[&str], argv: &[&str]) -> Run {
        self.run(check_args(&[], options, argv))
    }

    /// `guard check --json [options...] -- argv...`, parsed.
    fn check_json(&self, options: &[&str], argv: &[&str]) -> Value {
        self.run(check_args(&["--json"], options, argv)).json()
    }

    /// `guard check --json [options...] -- argv...` with one environment variable set, parsed.
    fn check_json_with_env(
        &self,
        key: &str,
        value: &Path,
        options: &[&str],
        argv: &[&str],
    ) -> Value {
        let mut command = self.command();
        command
            .env(key, value)
            .args(check_args(&["--json"], options, argv));
        run_command(&mut command).json()
    }

    /// `guard check --json --rules <rules> --resolve-host-executables -- argv...`, parsed.
    fn check_resolving(&self, rules: &str, argv: &[&str]) -> Value {
        self.check_json(&["--rules", rules, "--resolve-host-executables"], argv)
    }

    /// `guard check --json --rules <rules> --split-shell -- argv...`, parsed.
    fn check_split_shell(&self, rules: &str, argv: &[&str]) -> Value {
        self.check_json(&["--rules", rules, "--split-shell"], argv)
    }

    /// `guard policy show --json --rules <rules>`, parsed.
    fn policy_show_json(&self, rules: &str) -> Value {
        self.run(["policy", "show", "--json", "--rules", rules])
            .json()
    }

    /// `guard allow-prefix --rules-file <file> -- tokens...`.
    fn allow_prefix(&self, file: &Path, tokens: &[&str]) -> Run {
        let path = display(file);
        let mut args = vec!["allow-prefix", "--rules-file", &path, "--"];
        args.extend_from_slice(tokens);
        self.run(&args)
    }

    /// `guard <verb> <host> --protocol <protocol> [--justification <j>] --rules-file <file>`.
    fn host_amend(
        &self,
        verb: &str,
        host: &str,
        protocol: &str,
        justification: Option<&str>,
        file: &Path,
    ) -> Run {
        let path = display(file);
        let mut args = vec![verb, host, "--protocol", protocol];
        if let Some(justification) = justification {
            args.extend_from_slice(&["--justification", justification]);
        }
        args.extend_from_slice(&["--rules-file", &path]);
        self.run(&args)
    }
}

/// The arguments of `guard check [first...] [options...] -- argv...`.
fn check_args<'a>(first: &[&'a str], options: &[&'a str], argv: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["check"];
    args.extend_from_slice(first);
    args.extend_from_slice(options);
    args.push("--");
    args.extend_from_slice(argv);
    args
}

impl Run {
    /// A policy error: exit 2, nothing on stdout, and the given first stderr line.
    #[track_caller]
    fn assert_policy_error(&self, first_line: &str) {
        self.assert_code(2);
        assert_json_error_or_nothing(self);
        assert_eq!(
            self.first_stderr_line(),
            first_line,
            "first stderr line\n--- stderr:\n{}",
            self.stderr
        );
    }
}

// ---------------------------------------------------------------------------------------------
// guard check
// ---------------------------------------------------------------------------------------------

/// The "done when" case, verbatim: a relative `--rules r.rules`.
#[test]
fn check_json_done_when_git_status_allowed() {
    let sandbox = Sandbox::new();
    sandbox.write("r.rules", "prefix_rule(pattern=[\"git\", \"status\"])\n");
    let out = sandbox.check(&["--json", "--rules", "r.rules"], &["git", "status"]);
    assert_eq!(
        out.json(),
        json!({
            "decision": "allow",
            "commands": [["git", "status"]],
            "used_complex_parsing": false,
            "matched_rules": [{
                "matched_prefix": ["git", "status"],
                "decision": "allow",
                "rule_id": 0,
                "file": "r.rules",
                "line": 1,
            }],
        })
    );
    assert_eq!(out.stderr, "");
}

#[test]
fn check_json_reports_absolute_file_and_line_and_justification() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "policy.rules",
        "# comment\n\nprefix_rule(\n    pattern=[\"git\", \"push\"],\n    decision=\"prompt\",\n    justification=\"  talks to a remote \",\n)\n",
    );
    let value = sandbox.check_json(
        &["--rules", &display(&rules)],
        &["git", "push", "origin", "main"],
    );
    assert_eq!(
        value,
        json!({
            "decision": "prompt",
            "commands": [["git", "push", "origin", "main"]],
            "used_complex_parsing": false,
            "matched_rules": [{
                "matched_prefix": ["git", "push"],
                "decision": "prompt",
                "rule_id": 0,
                "justification": "  talks to a remote ",
                "file": display(&rules),
                "line": 3,
            }],
        })
    );
}

#[test]
fn check_without_fallback_no_match_is_none() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("r.rules", "prefix_rule(pattern=[\"git\", \"status\"])\n");
    let rules = display(&rules);
    for argv in [
        &["cargo", "build"][..],
        &["git"][..],
        &["git", "-C", "x", "status"][..],
        &["/usr/bin/git", "status"][..],
    ] {
        let value = sandbox.check_json(&["--rules", &rules], argv);
        assert_eq!(
            value,
            json!({
                "decision": "none",
                "commands": [argv],
                "used_complex_parsing": false,
                "matched_rules": [],
            }),
            "argv {argv:?}"
        );
    }
}

#[test]
fn check_empty_argv_is_legal() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("r.rules", "prefix_rule(pattern=[\"git\", \"status\"])\n");
    let value = sandbox.check_json(&["--rules", &display(&rules)], &[]);
    assert_eq!(
        value,
        json!({
            "decision": "none",
            "commands": [[]],
            "used_complex_parsing": false,
            "matched_rules": [],
        })
    );
    // Without `--` at all, too.
    let out = sandbox.run(["check", "--json", "--rules", &display(&rules)]);
    assert_eq!(out.json()["decision"], "none");
}

#[test]
fn check_fallback_heuristics() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("r.rules", "prefix_rule(pattern=[\"git\", \"status\"])\n");
    let rules = display(&rules);
    for (argv, decision) in [
        (&["ls"][..], "allow"),
        (&["ls", "-la"][..], "allow"),
        (&["rm", "-rf", "x"][..], "prompt"),
        (&["frobnicate", "--all"][..], "prompt"),
    ] {
        let value = sandbox.check_json(&["--rules", &rules, "--fallback", "heuristics"], argv);
        assert_eq!(
            value,
            json!({
                "decision": decision,
                "commands": [argv],
                "used_complex_parsing": false,
                "matched_rules": [{"heuristics": argv, "decision": decision}],
            }),
            "argv {argv:?}"
        );
    }
    // A rule match leaves the fallback out entirely.
    let value = sandbox.check_json(
        &["--rules", &rules, "--fallback", "heuristics"],
        &["git", "status"],
    );
    assert_eq!(value["decision"], "allow");
    assert_eq!(value["matched_rules"].as_array().unwrap().len(), 1);
    assert!(value["matched_rules"][0].get("heuristics").is_none());
}

#[test]
fn check_fixed_fallbacks_are_heuristics_matches() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("r.rules", "prefix_rule(pattern=[\"git\", \"status\"])\n");
    let rules = display(&rules);
    for decision in ["allow", "prompt", "forbidden"] {
        let value =
            sandbox.check_json(&["--rules", &rules, "--fallback", decision], &["ls", "-la"]);
        assert_eq!(
            value,
            json!({
                "decision": decision,
                "commands": [["ls", "-la"]],
                "used_complex_parsing": false,
                "matched_rules": [{"heuristics": ["ls", "-la"], "decision": decision}],
            }),
            "--fallback {decision}"
        );
    }
    // A matching rule is not overridden by a stronger fallback.
    let value = sandbox.check_json(
        &["--rules", &rules, "--fallback", "forbidden"],
        &["git", "status"],
    );
    assert_eq!(value["decision"], "allow");
}

#[test]
fn check_rejects_an_unknown_fallback() {
    let sandbox = Sandbox::new();
    let out = sandbox.check(&["--fallback", "deny"], &["ls"]);
    assert_ne!(out.code, Some(0));
    assert_eq!(out.stdout, "");
}

#[test]
fn check_strongest_decision_wins() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "r.rules",
        "prefix_rule(pattern=[\"git\"], decision=\"allow\")\n\
         prefix_rule(pattern=[\"git\", \"push\", \"--force\"], decision=\"forbidden\")\n\
         prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n",
    );
    let file = display(&rules);
    let value = sandbox.check_json(&["--rules", &file], &["git", "push", "--force", "origin"]);
    assert_eq!(
        value,
        json!({
            "decision": "forbidden",
            "commands": [["git", "push", "--force", "origin"]],
            "used_complex_parsing": false,
            "matched_rules": [
                {"matched_prefix": ["git"], "decision": "allow", "rule_id": 0, "file": file, "line": 1},
                {"matched_prefix": ["git", "push", "--force"], "decision": "forbidden", "rule_id": 1, "file": file, "line": 2},
                {"matched_prefix": ["git", "push"], "decision": "prompt", "rule_id": 2, "file": file, "line": 3},
            ],
        })
    );
    let value = sandbox.check_json(&["--rules", &file], &["git", "push"]);
    assert_eq!(value["decision"], "prompt");
    let value = sandbox.check_json(&["--rules", &file], &["git", "log"]);
    assert_eq!(value["decision"], "allow");
}

#[test]
fn check_alternatives_and_first_token_expansion() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "r.rules",
        "prefix_rule(pattern=[[\"npm\", \"yarn\"], [\"test\", \"lint\"]], decision=\"prompt\")\n",
    );
    let file = display(&rules);
    let value = sandbox.check_json(&["--rules", &file], &["yarn", "lint", "--fix"]);
    assert_eq!(
        value["matched_rules"],
        json!([{"matched_prefix": ["yarn", "lint"], "decision": "prompt", "rule_id": 1, "file": file, "line": 1}])
    );
    let value = sandbox.check_json(&["--rules", &file], &["npm", "install"]);
    assert_eq!(value["decision"], "none");
}

#[test]
fn check_several_rules_files_in_order() {
    let sandbox = Sandbox::new();
    let first = sandbox.write(
        "z-first.rules",
        "prefix_rule(pattern=[\"git\"], decision=\"prompt\")\n",
    );
    let second = sandbox.write(
        "a-second.rules",
        "\nprefix_rule(pattern=[\"git\", \"status\"])\n",
    );
    let value = sandbox.check_json(
        &["--rules", &display(&first), "--rules", &display(&second)],
        &["git", "status"],
    );
    assert_eq!(
        value["matched_rules"],
        json!([
            {"matched_prefix": ["git"], "decision": "prompt", "rule_id": 0, "file": display(&first), "line": 1},
            {"matched_prefix": ["git", "status"], "decision": "allow", "rule_id": 1, "file": display(&second), "line": 2},
        ])
    );
    assert_eq!(value["decision"], "prompt");
    // Given the other way round, the order follows the command line, not the names.
    let value = sandbox.check_json(
        &["--rules", &display(&second), "--rules", &display(&first)],
        &["git", "status"],
    );
    assert_eq!(value["matched_rules"][0]["file"], display(&second));
    assert_eq!(value["matched_rules"][0]["rule_id"], 0);
    assert_eq!(value["matched_rules"][1]["file"], display(&first));
    assert_eq!(value["matched_rules"][1]["rule_id"], 1);
}

#[test]
fn check_host_executable_from_a_later_file_replaces_an_earlier_one() {
    let sandbox = Sandbox::new();
    let first = sandbox.write(
        "1.rules",
        "prefix_rule(pattern=[\"git\", \"status\"])\nhost_executable(name=\"git\", paths=[\"/opt/git\"])\n",
    );
    let second = sandbox.write(
        "2.rules",
        "host_executable(name=\"git\", paths=[\"/usr/bin/git\"])\n",
    );
    let rules = [
        "--resolve-host-executables",
        "--rules",
        &display(&first),
        "--rules",
        &display(&second),
    ];
    let value = sandbox.check_json(&rules, &["/usr/bin/git", "status"]);
    assert_eq!(value["decision"], "allow");
    let value = sandbox.check_json(&rules, &["/opt/git", "status"]);
    assert_eq!(value["decision"], "none");
}

#[test]
fn check_rules_folder_sorted_skipping_symlinks_and_other_files() {
    let sandbox = Sandbox::new();
    let folder = sandbox.file("rules.d");
    // Written out of order; read in path order.
    let b = sandbox.write(
        "rules.d/b.rules",
        "prefix_rule(pattern=[\"git\", \"status\"])\n",
    );
    let a = sandbox.write(
        "rules.d/a.rules",
        "# first\nprefix_rule(pattern=[\"git\"], decision=\"prompt\")\n",
    );
    // Ignored: a symlinked .rules file, a file with another extension, a folder named *.rules,
    // and a file whose name merely contains "rules".
    let outside = sandbox.write(
        "outside/evil.rules",
        "prefix_rule(pattern=[\"git\"], decision=\"forbidden\")\n",
    );
    std::os::unix::fs::symlink(&outside, folder.join("c.rules")).expect("symlink");
    sandbox.write(
        "rules.d/d.txt",
        "prefix_rule(pattern=[\"git\"], decision=\"forbidden\")\n",
    );
    sandbox.write(
        "rules.d/e.rules.bak",
        "prefix_rule(pattern=[\"git\"], decision=\"forbidden\")\n",
    );
    sandbox.write(
        "rules.d/sub.rules/f.rules",
        "prefix_rule(pattern=[\"git\"], decision=\"forbidden\")\n",
    );
    let value = sandbox.check_json(&["--rules", &display(&folder)], &["git", "status"]);
    assert_eq!(
        value,
        json!({
            "decision": "prompt",
            "commands": [["git", "status"]],
            "used_complex_parsing": false,
            "matched_rules": [
                {"matched_prefix": ["git"], "decision": "prompt", "rule_id": 0, "file": display(&a), "line": 2},
                {"matched_prefix": ["git", "status"], "decision": "allow", "rule_id": 1, "file": display(&b), "line": 1},
            ],
        })
    );
    // `policy show` lists exactly the two files read.
    let shown = sandbox.policy_show_json(&display(&folder));
    assert_eq!(shown["sources"], json!([display(&a), display(&b)]));
    // The skipped files that look like rules are named on stderr, each with why; d.txt is not.
    let run = sandbox.check(&["--rules", &display(&folder)], &["git", "status"]);
    let skipped: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("guard: warning: skipped"))
        .collect();
    assert_eq!(skipped.len(), 2, "{}", run.stderr);
    assert!(
        skipped[0].contains(&display(&folder.join("c.rules"))) && skipped[0].contains("symlink"),
        "{}",
        run.stderr
    );
    assert!(
        skipped[1].contains(&display(&folder.join("e.rules.bak"))),
        "{}",
        run.stderr
    );
}

#[test]
fn an_explicit_rules_folder_without_rules_files_is_refused_unless_an_empty_policy_is_asked_for() {
    let sandbox = Sandbox::new();
    let folder = sandbox.file("agent");
    // The mistake this is about: one letter short of a rules file.
    sandbox.write(
        "agent/agent.rule",
        "prefix_rule(pattern=[\"git\", \"push\"], decision=\"forbidden\")\n",
    );
    for args in [
        vec!["run", "--rules", &display(&folder), "--", "git", "push"],
        vec!["check", "--rules", &display(&folder), "--", "git", "push"],
        vec!["policy", "validate", &display(&folder)],
    ] {
        let run = sandbox.run(&args);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr
                .contains("agent.rule: only `*.rules` and `*.policy` files are read")
                && run.stderr.contains("holds no `*.rules` or `*.policy` file")
                && run.stderr.contains("--allow-empty-policy"),
            "{args:?}: {}",
            run.stderr
        );
    }
    let run = sandbox.check(
        &["--rules", &display(&folder), "--allow-empty-policy"],
        &["git", "push"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr.contains("agent.rule"),
        "still warned: {}",
        run.stderr
    );
}

#[test]
fn check_overlay_forbidden_beats_base_allow() {
    let sandbox = Sandbox::new();
    let base = sandbox.write(
        "base.rules",
        "prefix_rule(pattern=[\"rm\"], decision=\"allow\")\n",
    );
    let overlay = sandbox.write(
        "managed.rules",
        "prefix_rule(pattern=[\"rm\", \"-rf\"], decision=\"forbidden\", justification=\"managed\")\n",
    );
    let value = sandbox.check_json(
        &["--rules", &display(&base), "--overlay", &display(&overlay)],
        &["rm", "-rf", "build"],
    );
    assert_eq!(
        value,
        json!({
            "decision": "forbidden",
            "commands": [["rm", "-rf", "build"]],
            "used_complex_parsing": false,
            "matched_rules": [
                {"matched_prefix": ["rm"], "decision": "allow", "rule_id": 0, "file": display(&base), "line": 1},
                {"matched_prefix": ["rm", "-rf"], "decision": "forbidden", "rule_id": 1, "justification": "managed", "file": display(&overlay), "line": 1},
            ],
        })
    );
    // Without the overlay the base allows it.
    let value = sandbox.check_json(&["--rules", &display(&base)], &["rm", "-rf", "build"]);
    assert_eq!(value["decision"], "allow");
}

#[test]
fn check_overlay_with_an_error_refuses_the_policy() {
    let sandbox = Sandbox::new();
    let base = sandbox.write("base.rules", "prefix_rule(pattern=[\"ls\"])\n");
    let overlay = sandbox.write(
        "managed.rules",
        "prefix_rule(pattern=[\"rm\"], decision=\"forbidden\")\nprefix_rule(pattern=[\"rm\"], decision=\"block\")\n",
    );
    let out = sandbox.check(
        &[
            "--json",
            "--rules",
            &display(&base),
            "--overlay",
            &display(&overlay),
        ],
        &["ls"],
    );
    out.assert_policy_error(&format!(
        "{}:2: error: invalid decision: block (problem is on or around line 2)",
        display(&overlay)
    ));
}

#[test]
fn check_split_shell_evaluates_each_command() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "r.rules",
        "prefix_rule(pattern=[\"rm\"], decision=\"forbidden\")\n",
    );
    let file = display(&rules);
    let value = sandbox.check_split_shell(&file, &["bash", "-lc", "ls && rm -rf x"]);
    assert_eq!(
        value,
        json!({
            "decision": "forbidden",
            "commands": [["ls"], ["rm", "-rf", "x"]],
            "used_complex_parsing": false,
            "matched_rules": [
                {"matched_prefix": ["rm"], "decision": "forbidden", "rule_id": 0, "file": file, "line": 1},
            ],
        })
    );
    // Each command gets its own fallback entry when nothing matches it.
    let value = sandbox.check_json(
        &[
            "--rules",
            &file,
            "--split-shell",
            "--fallback",
            "heuristics",
        ],
        &["bash", "-lc", "ls && rm -rf x"],
    );
    assert_eq!(
        value,
        json!({
            "decision": "forbidden",
            "commands": [["ls"], ["rm", "-rf", "x"]],
            "used_complex_parsing": false,
            "matched_rules": [
                {"heuristics": ["ls"], "decision": "allow"},
                {"matched_prefix": ["rm"], "decision": "forbidden", "rule_id": 0, "file": file, "line": 1},
            ],
        })
    );
    // Without --split-shell the script is one opaque argv.
    let value = sandbox.check_json(&["--rules", &file], &["bash", "-lc", "ls && rm -rf x"]);
    assert_eq!(
        value,
        json!({
            "decision": "none",
            "commands": [["bash", "-lc", "ls && rm -rf x"]],
            "used_complex_parsing": false,
            "matched_rules": [],
        })
    );
}

#[test]
fn check_split_shell_separators_and_quoting() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("r.rules", "prefix_rule(pattern=[\"git\", \"status\"])\n");
    let value = sandbox.check_split_shell(
        &display(&rules),
        &[
            "/bin/sh",
            "-c",
            "git status; grep -g\"*.py\" 'a b' | wc -l || echo \"/usr\"'/'\"local\"",
        ],
    );
    assert_eq!(
        value["commands"],
        json!([
            ["git", "status"],
            ["grep", "-g*.py", "a b"],
            ["wc", "-l"],
            ["echo", "/usr/local"],
        ])
    );
    assert_eq!(value["used_complex_parsing"], false);
    assert_eq!(value["decision"], "allow");
}

#[test]
fn check_split_shell_leaves_unsplittable_scripts_whole() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "r.rules",
        "prefix_rule(pattern=[\"echo\"], decision=\"forbidden\")\n",
    );
    let file = display(&rules);
    for script in [
        "echo $HOME",
        "echo hi > out.txt",
        "(echo hi)",
        "FOO=bar echo hi",
        "echo $(id)",
        "ls &",
        "ls &&",
    ] {
        let value = sandbox.check_split_shell(&file, &["bash", "-lc", script]);
        assert_eq!(
            value,
            json!({
                "decision": "none",
                "commands": [["bash", "-lc", script]],
                "used_complex_parsing": false,
                "matched_rules": [],
            }),
            "script {script:?}"
        );
    }
    // `bash -l -c` (four arguments) is not unwrapped either.
    let value = sandbox.check_split_shell(&file, &["bash", "-l", "-c", "echo hi"]);
    assert_eq!(value["commands"], json!([["bash", "-l", "-c", "echo hi"]]));
}

#[test]
fn check_split_shell_heredoc_is_complex_parsing() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "r.rules",
        "prefix_rule(pattern=[\"python3\"], decision=\"prompt\")\n",
    );
    let file = display(&rules);
    let value = sandbox.check_split_shell(&file, &["bash", "-lc", "python3 <<'PY'\nprint(1)\nPY"]);
    assert_eq!(
        value,
        json!({
            "decision": "prompt",
            "commands": [["python3"]],
            "used_complex_parsing": true,
            "matched_rules": [
                {"matched_prefix": ["python3"], "decision": "prompt", "rule_id": 0, "file": file, "line": 1},
            ],
        })
    );
    // The same with no matching rule: commands and the flag are unchanged.
    let other = sandbox.write("other.rules", "prefix_rule(pattern=[\"ls\"])\n");
    let value = sandbox.check_split_shell(
        &display(&other),
        &["bash", "-lc", "python3 <<'PY'\nprint(1)\nPY"],
    );
    assert_eq!(
        value,
        json!({
            "decision": "none",
            "commands": [["python3"]],
            "used_complex_parsing": true,
            "matched_rules": [],
        })
    );
}

#[test]
fn check_resolve_host_executables() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("r.rules", "prefix_rule(pattern=[\"git\", \"status\"])\n");
    let file = display(&rules);
    let value = sandbox.check_resolving(&file, &["/usr/bin/git", "status"]);
    assert_eq!(
        value,
        json!({
            "decision": "allow",
            "commands": [["/usr/bin/git", "status"]],
            "used_complex_parsing": false,
            "matched_rules": [{
                "matched_prefix": ["git", "status"],
                "decision": "allow",
                "rule_id": 0,
                "resolved_program": "/usr/bin/git",
                "file": file,
                "line": 1,
            }],
        })
    );
    // Lexically normalised.
    let value = sandbox.check_resolving(&file, &["/usr/bin/../bin/./git", "status"]);
    assert_eq!(
        value["matched_rules"][0]["resolved_program"],
        "/usr/bin/git"
    );
    // A relative argv[0] is taken against the current folder.
    let value = sandbox.check_resolving(&file, &["./git", "status"]);
    assert_eq!(value["decision"], "allow");
    assert_eq!(
        value["matched_rules"][0]["resolved_program"],
        display(&sandbox.file("git"))
    );
    // An exact match needs no resolution and reports none.
    let value = sandbox.check_resolving(&file, &["git", "status"]);
    assert!(value["matched_rules"][0].get("resolved_program").is_none());
    // A leading `~` is expanded with $HOME.
    let value = sandbox.check_json_with_env(
        "HOME",
        sandbox.path(),
        &["--rules", &file, "--resolve-host-executables"],
        &["~/bin/git", "status"],
    );
    assert_eq!(value["decision"], "allow");
    assert_eq!(
        value["matched_rules"][0]["resolved_program"],
        display(&sandbox.file("bin/git"))
    );
    // Without the flag, the absolute path does not reach the rule.
    let value = sandbox.check_json(&["--rules", &file], &["/usr/bin/git", "status"]);
    assert_eq!(value["decision"], "none");
    assert_eq!(value["matched_rules"], json!([]));
}

/// docs/policy-language.md §2.1: an exact-key rule that exists but does not match still lets the basename stage
/// run; one that matches stops it.
#[test]
fn check_resolution_runs_when_the_exact_key_does_not_match() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "r.rules",
        "prefix_rule(pattern=[\"/usr/bin/git\", \"push\"], decision=\"forbidden\")\nprefix_rule(pattern=[\"git\", \"status\"])\nprefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n",
    );
    let file = display(&rules);
    let options = ["--rules", &file, "--resolve-host-executables"];
    let value = sandbox.check_json(&options, &["/usr/bin/git", "status"]);
    assert_eq!(
        value["matched_rules"],
        json!([{
            "matched_prefix": ["git", "status"],
            "decision": "allow",
            "rule_id": 1,
            "resolved_program": "/usr/bin/git",
            "file": file,
            "line": 2,
        }])
    );
    let value = sandbox.check_json(&options, &["/usr/bin/git", "push"]);
    assert_eq!(
        value["matched_rules"],
        json!([{
            "matched_prefix": ["/usr/bin/git", "push"],
            "decision": "forbidden",
            "rule_id": 0,
            "file": file,
            "line": 1,
        }])
    );
}

#[test]
fn check_host_executable_limits_resolution() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "r.rules",
        "prefix_rule(pattern=[\"git\", \"status\"])\nhost_executable(name=\"git\", paths=[\"/opt/git\"])\n",
    );
    let file = display(&rules);
    let value = sandbox.check_resolving(&file, &["/usr/bin/git", "status"]);
    assert_eq!(
        value,
        json!({
            "decision": "none",
            "commands": [["/usr/bin/git", "status"]],
            "used_complex_parsing": false,
            "matched_rules": [],
        })
    );
    let value = sandbox.check_resolving(&file, &["/opt/git", "status"]);
    assert_eq!(value["decision"], "allow");
    assert_eq!(value["matched_rules"][0]["resolved_program"], "/opt/git");
    // An empty list blocks every absolute path.
    let empty = sandbox.write(
        "empty.rules",
        "prefix_rule(pattern=[\"git\", \"status\"])\nhost_executable(name=\"git\", paths=[])\n",
    );
    let value = sandbox.check_resolving(&display(&empty), &["/opt/git", "status"]);
    assert_eq!(value["decision"], "none");
}

#[test]
fn check_policy_error_bad_decision_line_three() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "bad.rules",
        "# a comment\nprefix_rule(pattern=[\"ok\"])\nprefix_rule(pattern=[\"a\"], decision=\"deny\")\n",
    );
    let out = sandbox.check(&["--json", "--rules", &display(&rules)], &["ok"]);
    out.assert_policy_error(&format!(
        "{}:3: error: invalid decision: deny (problem is on or around line 3)",
        display(&rules)
    ));
    // The human form refuses the same way.
    let out = sandbox.check(&["--rules", &display(&rules)], &["ok"]);
    out.assert_policy_error(&format!(
        "{}:3: error: invalid decision: deny (problem is on or around line 3)",
        display(&rules)
    ));
}

#[test]
fn check_policy_error_failed_match_example_points_at_the_call() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "examples.rules",
        "prefix_rule(pattern=[\"ls\"])\n\nprefix_rule(\n    pattern=[\"git\", \"status\"],\n    match=[\"git status\", \"git log\"],\n)\n",
    );
    let out = sandbox.check(&["--json", "--rules", &display(&rules)], &["ls"]);
    out.assert_code(2);
    assert_json_error_or_nothing(&out);
    let expected = format!(
        "{}:3: expected every example to match at least one rule.",
        display(&rules)
    );
    assert!(
        out.first_stderr_line().starts_with(&expected),
        "first stderr line should start with {expected:?}\n--- stderr:\n{}",
        out.stderr
    );
    assert!(
        out.first_stderr_line()
            .contains("unmatched examples: [\"git log\"]")
    );
}

#[test]
fn check_policy_error_not_match_example() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "nm.rules",
        "\nprefix_rule(\n    pattern=[\"git\"],\n    not_match=[\"git status\"],\n)\n",
    );
    let out = sandbox.check(&["--rules", &display(&rules)], &["git"]);
    out.assert_code(2);
    assert_eq!(out.stdout, "");
    let expected = format!(
        "{}:2: expected example to not match rule `",
        display(&rules)
    );
    assert!(
        out.first_stderr_line().starts_with(&expected),
        "first stderr line should start with {expected:?}\n--- stderr:\n{}",
        out.stderr
    );
    assert!(out.first_stderr_line().contains("`: git status"));
}

#[test]
fn check_policy_error_names_the_file_among_several() {
    let sandbox = Sandbox::new();
    let good = sandbox.write("good.rules", "prefix_rule(pattern=[\"ls\"])\n");
    let bad = sandbox.write(
        "rules.d/bad.rules",
        "network_rule(host=\"*.example.com\", protocol=\"https\", decision=\"allow\")\n",
    );
    let out = sandbox.run([
        "check",
        "--json",
        "--rules",
        &display(&good),
        "--rules",
        &display(&sandbox.file("rules.d")),
        "--",
        "ls",
    ]);
    out.assert_policy_error(&format!(
        "{}:1: error: invalid rule: network_rule host must be a specific host; wildcards are not allowed (problem is on or around line 1)",
        display(&bad)
    ));
}

#[test]
fn check_missing_rules_file_is_an_error() {
    let sandbox = Sandbox::new();
    let missing = sandbox.file("missing.rules");
    let out = sandbox.check(&["--json", "--rules", &display(&missing)], &["ls"]);
    out.assert_code(2);
    assert_json_error_or_nothing(&out);
    assert!(
        out.first_stderr_line()
            .starts_with(&format!("failed to read rules file {}", display(&missing))),
        "stderr:\n{}",
        out.stderr
    );
}

#[test]
fn check_human_output_mentions_decision_and_origin() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "r.rules",
        "prefix_rule(pattern=[\"git\", \"status\"])\n\nprefix_rule(pattern=[\"rm\"], decision=\"forbidden\")\n",
    );
    let file = display(&rules);

    let out = sandbox.check(&["--rules", &file], &["git", "status"]);
    out.assert_success();
    assert!(out.stdout.contains("allow"), "stdout:\n{}", out.stdout);
    assert!(
        out.stdout.contains(&format!("{file}:1")),
        "stdout:\n{}",
        out.stdout
    );
    assert!(!out.stdout.contains('\u{1b}'), "no colour codes when piped");

    let out = sandbox.check(&["--rules", &file], &["rm", "-rf", "x"]);
    out.assert_success();
    assert!(out.stdout.contains("forbidden"), "stdout:\n{}", out.stdout);
    assert!(
        out.stdout.contains(&format!("{file}:3")),
        "stdout:\n{}",
        out.stdout
    );
    assert!(out.stdout.lines().count() > 1, "an explanation and a hint");

    let out = sandbox.check(&["--rules", &file], &["zzz"]);
    out.assert_success();
    assert!(out.stdout.contains("none"), "stdout:\n{}", out.stdout);
    assert!(out.stdout.contains("allow-prefix"), "hint:\n{}", out.stdout);

    let out = sandbox.check(&["--rules", &file, "--fallback", "heuristics"], &["zzz"]);
    out.assert_success();
    assert!(out.stdout.contains("prompt"), "stdout:\n{}", out.stdout);
}

#[test]
fn check_embedded_default_policy_without_system_rules() {
    let sandbox = Sandbox::new();
    let value = sandbox.check_json(&[], &["git", "status"]);
    assert_eq!(value["decision"], "allow");
    assert_eq!(
        value["matched_rules"][0]["matched_prefix"],
        json!(["git", "status"])
    );
    let value = sandbox.check_json(&[], &["rm", "-rf", "/"]);
    assert_eq!(value["decision"], "forbidden");
    assert_eq!(
        value["matched_rules"][0]["matched_prefix"],
        json!(["rm", "-rf", "/"])
    );
    let value = sandbox.check_json(&[], &["git", "push", "origin", "main"]);
    assert_eq!(value["decision"], "prompt");
}

#[test]
fn check_system_rules_folder_replaces_the_default() {
    let sandbox = Sandbox::new();
    let system = sandbox.file("etc-guard-rules");
    let rules = sandbox.write(
        "etc-guard-rules/site.rules",
        "prefix_rule(pattern=[\"deploy\"], decision=\"prompt\")\n",
    );
    let run = |argv: &[&str]| sandbox.check_json_with_env("GUARD_SYSTEM_RULES", &system, &[], argv);
    assert_eq!(
        run(&["deploy", "prod"]),
        json!({
            "decision": "prompt",
            "commands": [["deploy", "prod"]],
            "used_complex_parsing": false,
            "matched_rules": [
                {"matched_prefix": ["deploy"], "decision": "prompt", "rule_id": 0, "file": display(&rules), "line": 1},
            ],
        })
    );
    // The embedded default is not read as well.
    assert_eq!(run(&["git", "status"])["decision"], "none");
    assert_eq!(run(&["rm", "-rf", "/"])["decision"], "none");
    // An explicit --rules wins over the system folder.
    let own = sandbox.write("own.rules", "prefix_rule(pattern=[\"ls\"])\n");
    let value = sandbox.check_json_with_env(
        "GUARD_SYSTEM_RULES",
        &system,
        &["--rules", &display(&own)],
        &["deploy"],
    );
    assert_eq!(value["decision"], "none");
}

#[test]
fn check_help_lists_the_flags() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(["check", "--help"]);
    out.assert_success();
    for flag in [
        "--rules",
        "--overlay",
        "--resolve-host-executables",
        "--fallback",
        "--split-shell",
        "--json",
        "heuristics",
    ] {
        assert!(out.stdout.contains(flag), "{flag} missing:\n{}", out.stdout);
    }
}

// ---------------------------------------------------------------------------------------------
// guard --help
// ---------------------------------------------------------------------------------------------

#[test]
fn top_level_help_lists_the_subcommands() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(["--help"]);
    out.assert_success();
    for subcommand in [
        "check",
        "policy",
        "allow-prefix",
        "allow-host",
        "ask-host",
        "deny-host",
    ] {
        assert!(
            out.stdout.contains(subcommand),
            "{subcommand} missing:\n{}",
            out.stdout
        );
    }
    let out = sandbox.run(["policy", "--help"]);
    out.assert_success();
    for subcommand in ["validate", "show", "classify"] {
        assert!(
            out.stdout.contains(subcommand),
            "{subcommand} missing:\n{}",
            out.stdout
        );
    }
}

#[test]
fn no_subcommand_is_a_usage_error() {
    let sandbox = Sandbox::new();
    let out = sandbox.run::<[&str; 0], &str>([]);
    assert_ne!(out.code, Some(0));
    assert_eq!(out.stdout, "");
}

// ---------------------------------------------------------------------------------------------
// guard policy validate
// ---------------------------------------------------------------------------------------------

#[test]
fn policy_validate_ok_prints_one_line() {
    let sandbox = Sandbox::new();
    let a = sandbox.write(
        "a.rules",
        "prefix_rule(pattern=[\"git\", \"status\"], match=[\"git status\"])\nnetwork_rule(host=\"x.com\", protocol=\"https\", decision=\"allow\")\n",
    );
    let b = sandbox.write(
        "b.rules",
        "host_executable(name=\"git\", paths=[\"/usr/bin/git\"])\n",
    );
    let out = sandbox.run(["policy", "validate", &display(&a), &display(&b)]);
    out.assert_success();
    assert_eq!(out.stdout.lines().count(), 1, "stdout:\n{}", out.stdout);
    assert!(out.stdout.starts_with("ok:"), "stdout:\n{}", out.stdout);
    assert!(out.stdout.ends_with('\n'));
    assert_eq!(out.stderr, "");

    // With an overlay and a folder.
    let overlay = sandbox.write(
        "managed/o.rules",
        "prefix_rule(pattern=[\"rm\"], decision=\"forbidden\")\n",
    );
    let out = sandbox.run([
        "policy",
        "validate",
        "--overlay",
        &display(&overlay),
        &display(sandbox.path()),
    ]);
    out.assert_success();
    assert_eq!(out.stdout.lines().count(), 1, "stdout:\n{}", out.stdout);
    assert!(out.stdout.starts_with("ok:"), "stdout:\n{}", out.stdout);
}

#[test]
fn policy_validate_error_exit_two_with_location_first() {
    let sandbox = Sandbox::new();
    let good = sandbox.write("good.rules", "prefix_rule(pattern=[\"ls\"])\n");
    let bad = sandbox.write(
        "bad.rules",
        "\n\nprefix_rule(pattern=[\"a\"], decision=\"deny\")\n",
    );
    let out = sandbox.run(["policy", "validate", &display(&good), &display(&bad)]);
    out.assert_policy_error(&format!(
        "{}:3: error: invalid decision: deny (problem is on or around line 3)",
        display(&bad)
    ));

    // An error in an overlay is found as well.
    let out = sandbox.run([
        "policy",
        "validate",
        "--overlay",
        &display(&bad),
        &display(&good),
    ]);
    out.assert_policy_error(&format!(
        "{}:3: error: invalid decision: deny (problem is on or around line 3)",
        display(&bad)
    ));

    // A failing example.
    let examples = sandbox.write(
        "ex.rules",
        "prefix_rule(\n    pattern=[\"git\"],\n    match=[\"cargo test\"],\n)\n",
    );
    let out = sandbox.run(["policy", "validate", &display(&examples)]);
    out.assert_code(2);
    assert_eq!(out.stdout, "");
    assert!(
        out.first_stderr_line().starts_with(&format!(
            "{}:1: expected every example to match at least one rule.",
            display(&examples)
        )),
        "stderr:\n{}",
        out.stderr
    );
}

#[test]
fn policy_validate_requires_a_path() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(["policy", "validate"]);
    assert_ne!(out.code, Some(0));
    assert_eq!(out.stdout, "");
}

// ---------------------------------------------------------------------------------------------
// guard policy show
// ---------------------------------------------------------------------------------------------

#[test]
fn policy_show_json_network_rules_and_domains() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "net.rules",
        "network_rule(host=\"Api.GitHub.COM:443\", protocol=\"https_connect\", decision=\"allow\", justification=\"api\")\n\
         network_rule(host=\"example.com.\", protocol=\"http\", decision=\"deny\")\n\
         network_rule(host=\"evil.com\", protocol=\"http-connect\", decision=\"allow\")\n\
         network_rule(host=\"EVIL.com\", protocol=\"socks5_tcp\", decision=\"forbidden\")\n\
         network_rule(host=\"example.com:8080\", protocol=\"socks5_udp\", decision=\"allow\")\n\
         network_rule(host=\"api.github.com\", protocol=\"http\", decision=\"prompt\")\n\
         network_rule(host=\"new.example\", protocol=\"http\", decision=\"prompt\")\n",
    );
    let file = display(&rules);
    let value = sandbox.policy_show_json(&file);
    assert_eq!(
        value["network_rules"],
        json!([
            {"host": "api.github.com", "protocol": "https", "decision": "allow", "justification": "api", "file": file, "line": 1},
            {"host": "example.com", "protocol": "http", "decision": "forbidden", "file": file, "line": 2},
            {"host": "evil.com", "protocol": "https", "decision": "allow", "file": file, "line": 3},
            {"host": "evil.com", "protocol": "socks5_tcp", "decision": "forbidden", "file": file, "line": 4},
            {"host": "example.com", "protocol": "socks5_udp", "decision": "allow", "file": file, "line": 5},
            {"host": "api.github.com", "protocol": "http", "decision": "prompt", "file": file, "line": 6},
            {"host": "new.example", "protocol": "http", "decision": "prompt", "file": file, "line": 7},
        ])
    );
    // example.com moves from denied to the end of allowed; evil.com from allowed to denied;
    // prompt neither adds nor removes.
    assert_eq!(
        value["network_domains"],
        json!({"allowed": ["api.github.com", "example.com"], "denied": ["evil.com"]})
    );
    assert_eq!(value["allowed_prefixes"], json!([]));
    assert_eq!(value["host_executables"], json!({}));
}

#[test]
fn policy_show_json_allowed_prefixes_and_host_executables() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "p.rules",
        "prefix_rule(pattern=[\"git\", [\"status\", \"log\"]])\n\
         prefix_rule(pattern=[\"cargo\", \"test\"])\n\
         prefix_rule(pattern=[\"git\", [\"status\", \"log\"]], decision=\"allow\")\n\
         prefix_rule(pattern=[[\"yarn\", \"npm\"], \"test\"])\n\
         prefix_rule(pattern=[\"rm\"], decision=\"forbidden\")\n\
         prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n\
         prefix_rule(pattern=[\"git\", [\"diff\"]])\n\
         host_executable(name=\"git\", paths=[\"/usr/bin/git\", \"/opt/bin/../git/git\", \"/usr/bin/git\"])\n\
         host_executable(name=\"cargo\", paths=[\"/home/me/.cargo/bin/cargo\"])\n",
    );
    let value = sandbox.policy_show_json(&display(&rules));
    assert_eq!(
        value["allowed_prefixes"],
        json!([
            ["cargo", "test"],
            ["git", "[status|log]"],
            ["git", "diff"],
            ["npm", "test"],
            ["yarn", "test"],
        ])
    );
    assert_eq!(
        value["host_executables"],
        json!({
            "cargo": ["/home/me/.cargo/bin/cargo"],
            "git": ["/usr/bin/git", "/opt/git/git"],
        })
    );
    assert_eq!(value["network_rules"], json!([]));
    assert_eq!(
        value["network_domains"],
        json!({"allowed": [], "denied": []})
    );
}

#[test]
fn policy_show_several_files_and_overlay() {
    let sandbox = Sandbox::new();
    let first = sandbox.write(
        "1.rules",
        "network_rule(host=\"a.com\", protocol=\"https\", decision=\"deny\")\n",
    );
    let second = sandbox.write(
        "2.rules",
        "network_rule(host=\"a.com\", protocol=\"https\", decision=\"allow\")\nnetwork_rule(host=\"b.com\", protocol=\"https\", decision=\"allow\")\n",
    );
    let overlay = sandbox.write(
        "o.rules",
        "network_rule(host=\"B.COM\", protocol=\"http\", decision=\"deny\")\n",
    );
    let value = sandbox
        .run([
            "policy",
            "show",
            "--json",
            "--rules",
            &display(&first),
            "--rules",
            &display(&second),
            "--overlay",
            &display(&overlay),
        ])
        .json();
    assert_eq!(
        value["network_domains"],
        json!({"allowed": ["a.com"], "denied": ["b.com"]})
    );
    assert_eq!(value["network_rules"][3]["file"], display(&overlay));
    assert_eq!(value["sources"], json!([display(&first), display(&second)]));
    assert_eq!(value["overlay_sources"], json!([display(&overlay)]));
}

#[test]
fn policy_show_text_and_errors() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "t.rules",
        "prefix_rule(pattern=[\"git\", [\"status\", \"log\"]])\nnetwork_rule(host=\"Api.GitHub.COM\", protocol=\"https_connect\", decision=\"deny\")\n",
    );
    let out = sandbox.run(["policy", "show", "--rules", &display(&rules)]);
    out.assert_success();
    assert!(out.stdout.contains("git [status|log]"), "{}", out.stdout);
    assert!(out.stdout.contains("api.github.com"), "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!("{}:1", display(&rules))),
        "{}",
        out.stdout
    );

    let bad = sandbox.write(
        "bad.rules",
        "network_rule(host=\"x.com\", protocol=\"HTTPS\", decision=\"allow\")\n",
    );
    let out = sandbox.run(["policy", "show", "--json", "--rules", &display(&bad)]);
    out.assert_policy_error(&format!(
        "{}:1: error: invalid rule: network_rule protocol must be one of http, https, socks5_tcp, socks5_udp (got HTTPS) (problem is on or around line 1)",
        display(&bad)
    ));
}

// ---------------------------------------------------------------------------------------------
// guard policy classify
// ---------------------------------------------------------------------------------------------

#[test]
fn policy_classify_json() {
    let sandbox = Sandbox::new();
    for (argv, known_safe, dangerous) in [
        (&["ls", "-la"][..], true, false),
        (&["rm", "-rf", "x"][..], false, true),
        (&["git", "push"][..], false, false),
    ] {
        let mut args = vec!["policy", "classify", "--json", "--"];
        args.extend_from_slice(argv);
        assert_eq!(
            sandbox.run(&args).json(),
            json!({"known_safe": known_safe, "dangerous": dangerous}),
            "argv {argv:?}"
        );
    }
}

#[test]
fn policy_classify_text() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(["policy", "classify", "--", "ls", "-la"]);
    out.assert_success();
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
    let out = sandbox.run(["policy", "classify", "--", "rm", "-rf", "x"]);
    out.assert_success();
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
}

// ---------------------------------------------------------------------------------------------
// guard allow-prefix
// ---------------------------------------------------------------------------------------------

const CARGO_TEST_LINE: &str = "prefix_rule(pattern=[\"cargo\", \"test\"], decision=\"allow\")\n";

#[test]
fn allow_prefix_appends_exactly_one_line_once() {
    let sandbox = Sandbox::new();
    let file = sandbox.file("default.rules");
    let out = sandbox.allow_prefix(&file, &["cargo", "test"]);
    out.assert_success();
    assert_eq!(read(&file), CARGO_TEST_LINE.as_bytes());

    let out = sandbox.allow_prefix(&file, &["cargo", "test"]);
    out.assert_success();
    assert_eq!(read(&file), CARGO_TEST_LINE.as_bytes(), "byte-identical");

    // The amended file is a valid policy that allows longer commands.
    let value = sandbox.check_json(&["--rules", &display(&file)], &["cargo", "test", "--all"]);
    assert_eq!(
        value,
        json!({
            "decision": "allow",
            "commands": [["cargo", "test", "--all"]],
            "used_complex_parsing": false,
            "matched_rules": [
                {"matched_prefix": ["cargo", "test"], "decision": "allow", "rule_id": 0, "file": display(&file), "line": 1},
            ],
        })
    );
}

#[test]
fn allow_prefix_json_reports_the_outcome() {
    let sandbox = Sandbox::new();
    let file = sandbox.file("default.rules");
    let args = [
        "allow-prefix",
        "--json",
        "--rules-file",
        &display(&file),
        "--",
        "cargo",
        "test",
    ];
    let line = CARGO_TEST_LINE.trim_end();
    assert_eq!(
        sandbox.run(args).json(),
        json!({"file": display(&file), "line": line, "outcome": "appended"})
    );
    assert_eq!(
        sandbox.run(args).json(),
        json!({"file": display(&file), "line": line, "outcome": "already_present"})
    );
    assert_eq!(read(&file), CARGO_TEST_LINE.as_bytes());
}

#[test]
fn allow_prefix_adds_missing_final_newline_first() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("r.rules", "prefix_rule(pattern=[\"ls\"])");
    sandbox
        .allow_prefix(&file, &["cargo", "test"])
        .assert_success();
    assert_eq!(
        String::from_utf8(read(&file)).unwrap(),
        format!("prefix_rule(pattern=[\"ls\"])\n{CARGO_TEST_LINE}")
    );
    // A file that already ends in a newline gets no blank line.
    let file = sandbox.write("s.rules", "prefix_rule(pattern=[\"ls\"])\n");
    sandbox
        .allow_prefix(&file, &["cargo", "test"])
        .assert_success();
    assert_eq!(
        String::from_utf8(read(&file)).unwrap(),
        format!("prefix_rule(pattern=[\"ls\"])\n{CARGO_TEST_LINE}")
    );
    // The line already present somewhere in the middle is not appended again.
    let middle = format!("# mine\n{CARGO_TEST_LINE}prefix_rule(pattern=[\"ls\"])");
    let file = sandbox.write("t.rules", &middle);
    sandbox
        .allow_prefix(&file, &["cargo", "test"])
        .assert_success();
    assert_eq!(read(&file), middle.as_bytes());
}

#[test]
fn allow_prefix_creates_the_folder() {
    let sandbox = Sandbox::new();
    let file = sandbox.file("rules/default.rules");
    assert!(!file.parent().unwrap().exists());
    sandbox
        .allow_prefix(&file, &["cargo", "test"])
        .assert_success();
    assert_eq!(read(&file), CARGO_TEST_LINE.as_bytes());
}

#[test]
fn allow_prefix_escapes_tokens_as_json() {
    let sandbox = Sandbox::new();
    let file = sandbox.file("default.rules");
    let tokens = [
        "say \"hi\"",
        "a\\b",
        "tab\there",
        "new\nline",
        "\u{1}",
        "héllo wörld ✓",
        "",
    ];
    sandbox.allow_prefix(&file, &tokens).assert_success();
    assert_eq!(
        String::from_utf8(read(&file)).unwrap(),
        "prefix_rule(pattern=[\"say \\\"hi\\\"\", \"a\\\\b\", \"tab\\there\", \"new\\nline\", \"\\u0001\", \"héllo wörld ✓\", \"\"], decision=\"allow\")\n"
    );
    // And it reads back as exactly those tokens.
    let value = sandbox.check_json(&["--rules", &display(&file)], &tokens);
    assert_eq!(value["decision"], "allow");
    assert_eq!(value["matched_rules"][0]["matched_prefix"], json!(tokens));
}

#[test]
fn allow_prefix_without_tokens_fails_and_leaves_the_file() {
    let sandbox = Sandbox::new();
    let original = "prefix_rule(pattern=[\"ls\"])";
    let file = sandbox.write("r.rules", original);
    let out = sandbox.run(["allow-prefix", "--rules-file", &display(&file), "--"]);
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr
            .contains("prefix rule requires at least one token"),
        "stderr:\n{}",
        out.stderr
    );
    assert_eq!(read(&file), original.as_bytes());

    // A file that does not exist is not created.
    let missing = sandbox.file("new/none.rules");
    let out = sandbox.run(["allow-prefix", "--rules-file", &display(&missing)]);
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr
            .contains("prefix rule requires at least one token")
    );
    assert!(!missing.exists());
    assert!(!missing.parent().unwrap().exists());
}

#[test]
fn allow_prefix_without_rules_file_goes_to_the_daemon_and_says_when_none_answers() {
    let sandbox = Sandbox::new();
    let socket = display(&sandbox.file("no-daemon.sock"));
    let out = sandbox.run(["allow-prefix", "--socket", &socket, "--", "cargo", "test"]);
    assert_eq!(out.code, Some(4), "no daemon answers: {}", out.stderr);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr.contains("cannot reach the guard daemon") && out.stderr.contains("--socket"),
        "stderr:\n{}",
        out.stderr
    );
    assert_eq!(fs::read_dir(sandbox.path()).unwrap().count(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any tokens (argv cannot hold NUL) round-trip through an amendment line: appended once,
    /// never twice, and the amended file allows exactly that command.
    #[test]
    fn allow_prefix_round_trips_any_tokens(tokens in prop::collection::vec("[^\u{0}]{0,6}", 1..4)) {
        let sandbox = Sandbox::new();
        let file = sandbox.file("default.rules");
        let path = display(&file);
        let argv: Vec<&str> = tokens.iter().map(String::as_str).collect();
        let first = sandbox.allow_prefix(&file, &argv);
        prop_assert_eq!(first.code, Some(0), "stderr: {}", first.stderr);
        let written = read(&file);
        let text = String::from_utf8(written.clone()).unwrap();
        prop_assert_eq!(text.lines().count(), 1);
        prop_assert!(text.ends_with("], decision=\"allow\")\n"));
        let second = sandbox.allow_prefix(&file, &argv);
        prop_assert_eq!(second.code, Some(0), "stderr: {}", second.stderr);
        prop_assert_eq!(read(&file), written);

        let value = sandbox.check_json(&["--rules", &path], &argv);
        prop_assert_eq!(&value["decision"], "allow");
        prop_assert_eq!(&value["matched_rules"][0]["matched_prefix"], &json!(tokens));
    }
}

// ---------------------------------------------------------------------------------------------
// guard allow-host | ask-host | deny-host
// ---------------------------------------------------------------------------------------------

#[test]
fn host_amendments_write_exact_lines() {
    let sandbox = Sandbox::new();
    let file = sandbox.file("net/default.rules");
    let path = display(&file);
    for (verb, host, protocol, justification) in [
        ("allow-host", "API.GitHub.com:443", "https", None),
        ("ask-host", "api.github.com", "https_connect", None),
        ("deny-host", "Api.GitHub.Com.", "http-connect", None),
        (
            "allow-host",
            "[FE80::1]:8080",
            "socks5_udp",
            Some("lab \"box\""),
        ),
        ("deny-host", "10.0.0.1:80", "socks5_tcp", Some("no")),
        ("ask-host", "example.com", "http", Some(" ask ")),
    ] {
        sandbox
            .host_amend(verb, host, protocol, justification, &file)
            .assert_success();
    }
    assert_eq!(
        String::from_utf8(read(&file)).unwrap(),
        "network_rule(host=\"api.github.com\", protocol=\"https\", decision=\"allow\")\n\
         network_rule(host=\"api.github.com\", protocol=\"https\", decision=\"prompt\")\n\
         network_rule(host=\"api.github.com\", protocol=\"https\", decision=\"deny\")\n\
         network_rule(host=\"fe80::1\", protocol=\"socks5_udp\", decision=\"allow\", justification=\"lab \\\"box\\\"\")\n\
         network_rule(host=\"10.0.0.1\", protocol=\"socks5_tcp\", decision=\"deny\", justification=\"no\")\n\
         network_rule(host=\"example.com\", protocol=\"http\", decision=\"prompt\", justification=\" ask \")\n"
    );
    // The file is a valid policy.
    let out = sandbox.run(["policy", "validate", &path]);
    out.assert_success();
}

#[test]
fn host_amendment_is_written_once() {
    let sandbox = Sandbox::new();
    let file = sandbox.write("r.rules", "prefix_rule(pattern=[\"ls\"])");
    let args = [
        "allow-host",
        "API.GitHub.com:443",
        "--protocol",
        "https_connect",
        "--justification",
        "api",
        "--rules-file",
        &display(&file),
    ];
    sandbox.run(args).assert_success();
    let expected = "prefix_rule(pattern=[\"ls\"])\nnetwork_rule(host=\"api.github.com\", protocol=\"https\", decision=\"allow\", justification=\"api\")\n";
    assert_eq!(String::from_utf8(read(&file)).unwrap(), expected);
    sandbox.run(args).assert_success();
    assert_eq!(String::from_utf8(read(&file)).unwrap(), expected);
}

#[test]
fn host_amendment_rejects_wildcards_and_leaves_the_file() {
    let sandbox = Sandbox::new();
    let original = "network_rule(host=\"a.com\", protocol=\"https\", decision=\"allow\")\n";
    let file = sandbox.write("r.rules", original);
    for verb in ["allow-host", "ask-host", "deny-host"] {
        for host in ["*.github.com", "*", "a*b.com"] {
            let out = sandbox.host_amend(verb, host, "https", None, &file);
            assert_ne!(out.code, Some(0), "{verb} {host}");
            assert!(
                out.stderr.contains(
                    "invalid network rule: invalid rule: network_rule host must be a specific host; wildcards are not allowed"
                ),
                "{verb} {host} stderr:\n{}",
                out.stderr
            );
            assert_eq!(read(&file), original.as_bytes(), "{verb} {host}");
        }
    }
    // When the file did not exist, it still does not.
    let missing = sandbox.file("none.rules");
    let out = sandbox.host_amend("deny-host", "*.evil.com", "http", None, &missing);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains(
        "invalid network rule: invalid rule: network_rule host must be a specific host; wildcards are not allowed"
    ));
    assert!(!missing.exists());
    let in_new_folder = sandbox.file("new/none.rules");
    let out = sandbox.host_amend("allow-host", "*", "http", None, &in_new_folder);
    assert_ne!(out.code, Some(0));
    assert!(!in_new_folder.parent().unwrap().exists());
}

#[test]
fn host_amendment_rejects_blank_justification_and_bad_input() {
    let sandbox = Sandbox::new();
    let file = sandbox.file("r.rules");
    for justification in ["", "   ", "\t\n"] {
        let out = sandbox.host_amend(
            "allow-host",
            "api.github.com",
            "https",
            Some(justification),
            &file,
        );
        assert_ne!(out.code, Some(0));
        assert!(
            out.stderr
                .contains("invalid network rule: justification cannot be empty"),
            "stderr:\n{}",
            out.stderr
        );
        assert!(!file.exists());
    }
    for (host, protocol, message) in [
        (
            "https://x.com",
            "https",
            "invalid network rule: invalid rule: network_rule host must be a hostname or IP literal (without scheme or path)",
        ),
        (
            "   ",
            "https",
            "invalid network rule: invalid rule: network_rule host cannot be empty",
        ),
        (
            "x.com",
            "HTTPS",
            "network_rule protocol must be one of http, https, socks5_tcp, socks5_udp (got HTTPS)",
        ),
    ] {
        let out = sandbox.host_amend("deny-host", host, protocol, None, &file);
        assert_ne!(out.code, Some(0), "{host} {protocol}");
        assert!(
            out.stderr.contains(message),
            "{host} {protocol} stderr:\n{}",
            out.stderr
        );
        assert!(!file.exists());
    }
}

#[test]
fn deny_host_shows_up_as_denied_domain() {
    let sandbox = Sandbox::new();
    let file = sandbox.file("r.rules");
    let path = display(&file);
    for (verb, host, protocol) in [
        ("allow-host", "evil.com", "https"),
        ("deny-host", "EVIL.com:443", "https_connect"),
        ("ask-host", "evil.com", "http"),
    ] {
        sandbox
            .host_amend(verb, host, protocol, None, &file)
            .assert_success();
    }
    let value = sandbox.policy_show_json(&path);
    assert_eq!(
        value["network_domains"],
        json!({"allowed": [], "denied": ["evil.com"]})
    );
    assert_eq!(
        value["network_rules"],
        json!([
            {"host": "evil.com", "protocol": "https", "decision": "allow", "file": path, "line": 1},
            {"host": "evil.com", "protocol": "https", "decision": "forbidden", "file": path, "line": 2},
            {"host": "evil.com", "protocol": "http", "decision": "prompt", "file": path, "line": 3},
        ])
    );
}

#[test]
fn host_amendment_requires_protocol() {
    let sandbox = Sandbox::new();
    let file = sandbox.file("r.rules");
    let out = sandbox.run(["allow-host", "a.com", "--rules-file", &display(&file)]);
    assert_ne!(out.code, Some(0));
    assert_eq!(out.stdout, "");
    assert!(!file.exists());
}

// ---------------------------------------------------------------------------------------------
// guard check --dest, --kernel, and the kernel-only builtins in guard policy
// ---------------------------------------------------------------------------------------------

const DEST_RULES: &str = "\
network_rule(host=\"Example.COM\", protocol=\"https\", decision=\"deny\", justification=\"no paste\")
address_rule(addresses=[\"10.0.0.0/8\"], decision=\"deny\", justification=\"internal\")
address_rule(addresses=[\"10.0.0.5\", \"db.internal\"], decision=\"prompt\", ports=[5432], transport=\"tcp\", audit_only=True)
address_rule(addresses=[\"fd00::/8\"], decision=\"prompt\", transport=\"udp\")
network_rule(host=\"127.0.0.1\", protocol=\"http\", decision=\"prompt\")
network_rule(host=\"127.0.0.1\", protocol=\"https\", decision=\"allow\")
";

impl Sandbox {
    /// `guard check --json --no-resolve --rules <rules> --dest <dest> [options...]`, parsed:
    /// the rules as written, no DNS (resolution is tested with a DNS server of its own in
    /// `tests/tests/kernel/dns.rs`).
    fn check_dest_json(&self, rules: &str, dest: &str, options: &[&str]) -> Value {
        let mut args = vec![
            "check",
            "--json",
            "--no-resolve",
            "--rules",
            rules,
            "--dest",
            dest,
        ];
        args.extend_from_slice(options);
        self.run(&args).json()
    }
}

#[test]
fn check_dest_json_reports_every_matching_rule_and_the_strongest_decision() {
    let sandbox = Sandbox::new();
    let file = display(&sandbox.write("d.rules", DEST_RULES));
    assert_eq!(
        sandbox.check_dest_json(&file, "10.0.0.5:5432", &[]),
        json!({
            "destination": {"address": "10.0.0.5", "port": 5432, "transport": "tcp"},
            "decision": "forbidden",
            "unmatched": false,
            "resolved": false,
            "resolve_errors": [],
            "matched_rules": [
                {
                    "kind": "address_rule",
                    "text": "address_rule(addresses=[\"10.0.0.0/8\"], decision=\"deny\", justification=\"internal\")",
                    "decision": "forbidden",
                    "audit_only": false,
                    "file": file,
                    "line": 2,
                    "justification": "internal",
                },
                {
                    "kind": "address_rule",
                    "text": "address_rule(addresses=[\"10.0.0.5\", \"db.internal\"], decision=\"prompt\", ports=[5432], transport=\"tcp\", audit_only=True)",
                    "decision": "prompt",
                    "audit_only": true,
                    "file": file,
                    "line": 3,
                },
            ],
        })
    );
    // The port and the transport filter: only the CIDR rule matches UDP.
    let value = sandbox.check_dest_json(&file, "10.0.0.5:5432", &["--transport", "udp"]);
    assert_eq!(value["destination"]["transport"], "udp");
    assert_eq!(value["matched_rules"].as_array().unwrap().len(), 1);
    assert_eq!(value["matched_rules"][0]["line"], 2);
}

#[test]
fn check_dest_ipv6_and_ipv4_mapped_addresses() {
    let sandbox = Sandbox::new();
    let file = display(&sandbox.write("d.rules", DEST_RULES));
    let value = sandbox.check_dest_json(&file, "[::ffff:10.9.9.9]:443", &[]);
    assert_eq!(value["destination"]["address"], "10.9.9.9");
    assert_eq!(value["decision"], "forbidden");
    let value = sandbox.check_dest_json(&file, "[fd00::1]:53", &["--transport", "udp"]);
    assert_eq!(value["destination"]["address"], "fd00::1");
    assert_eq!(value["decision"], "prompt");
    let value = sandbox.check_dest_json(&file, "[fd00::1]:53", &[]);
    assert_eq!(
        (value["decision"].clone(), value["unmatched"].clone()),
        (json!("allow"), json!(true))
    );
}

#[test]
fn check_dest_network_rules_use_their_hosts_last_allow_or_deny_and_protocol_ports() {
    let sandbox = Sandbox::new();
    let file = display(&sandbox.write("d.rules", DEST_RULES));
    // 127.0.0.1: prompt (http) then allow (https): allow, on port 80 too.
    for port in ["80", "443"] {
        let value = sandbox.check_dest_json(&file, &format!("127.0.0.1:{port}"), &[]);
        assert_eq!(value["decision"], "allow", "port {port}");
        assert_eq!(value["matched_rules"][0]["line"], 6, "port {port}");
        assert_eq!(value["matched_rules"][0]["kind"], "network_rule");
    }
    // https also covers UDP 443 (HTTP/3); no protocol covers port 22.
    let value = sandbox.check_dest_json(&file, "127.0.0.1:443", &["--transport", "udp"]);
    assert_eq!(value["unmatched"], false);
    let value = sandbox.check_dest_json(&file, "127.0.0.1:22", &[]);
    assert_eq!(value["unmatched"], true);
}

#[test]
fn check_dest_host_names_match_rules_written_with_that_name() {
    let sandbox = Sandbox::new();
    let file = display(&sandbox.write("d.rules", DEST_RULES));
    assert_eq!(
        sandbox.check_dest_json(&file, "EXAMPLE.com.:443", &[]),
        json!({
            "destination": {"host": "example.com", "port": 443, "transport": "tcp"},
            "decision": "forbidden",
            "unmatched": false,
            "resolved": false,
            "resolve_errors": [],
            "matched_rules": [{
                "kind": "network_rule",
                "text": "network_rule(host=\"example.com\", protocol=\"https\", decision=\"deny\", justification=\"no paste\")",
                "decision": "forbidden",
                "audit_only": false,
                "file": file,
                "line": 1,
                "justification": "no paste",
                "host": "example.com",
            }],
        })
    );
    let value = sandbox.check_dest_json(&file, "db.internal:5432", &[]);
    assert_eq!(value["decision"], "prompt");
    assert_eq!(value["matched_rules"][0]["host"], "db.internal");
    // A name is not resolved: the address rules for 10.0.0.0/8 do not match it.
    let value = sandbox.check_dest_json(&file, "example.com:80", &[]);
    assert_eq!(value["unmatched"], true);
    assert_eq!(value["matched_rules"], json!([]));
}

#[test]
fn check_dest_unmatched_follows_the_enforcement_setting() {
    let sandbox = Sandbox::new();
    let open = display(&sandbox.write(
        "open.rules",
        "address_rule(addresses=[\"10.0.0.0/8\"], decision=\"deny\")\n",
    ));
    let value = sandbox.check_dest_json(&open, "192.168.0.1:443", &[]);
    assert_eq!(
        (value["decision"].clone(), value["unmatched"].clone()),
        (json!("allow"), json!(true))
    );
    let strict =
        display(&sandbox.write("strict.rules", "enforcement(unmatched_network=\"deny\")\n"));
    let value = sandbox.check_dest_json(&strict, "192.168.0.1:443", &[]);
    assert_eq!(
        (value["decision"].clone(), value["unmatched"].clone()),
        (json!("forbidden"), json!(true))
    );
    // An overlay can tighten the unmatched decision.
    let value = sandbox
        .run([
            "check",
            "--json",
            "--rules",
            &open,
            "--overlay",
            &strict,
            "--dest",
            "192.168.0.1:443",
        ])
        .json();
    assert_eq!(value["decision"], "forbidden");
}

#[test]
fn check_dest_human_output_explains_the_decision() {
    let sandbox = Sandbox::new();
    let file = display(&sandbox.write("d.rules", DEST_RULES));
    let out = sandbox.run([
        "check",
        "--no-resolve",
        "--rules",
        &file,
        "--dest",
        "10.0.0.5:5432",
    ]);
    out.assert_success();
    let stdout = &out.stdout;
    assert!(
        stdout.starts_with("forbidden  10.0.0.5:5432 (tcp)"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("{file}:2")), "{stdout}");
    assert!(stdout.contains(&format!("{file}:3")), "{stdout}");
    assert!(stdout.contains("justification: internal"), "{stdout}");
    assert!(stdout.contains("audit only"), "{stdout}");
    assert!(
        stdout.contains("To change it: edit or remove the forbidden rule at"),
        "{stdout}"
    );

    let out = sandbox.run([
        "check",
        "--no-resolve",
        "--rules",
        &file,
        "--dest",
        "[2001:db8::1]:443",
    ]);
    out.assert_success();
    assert!(
        out.stdout.starts_with("allow  [2001:db8::1]:443 (tcp)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("no rule matches"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("address_rule(addresses=[\"2001:db8::1\"]"),
        "{}",
        out.stdout
    );

    let out = sandbox.run([
        "check",
        "--no-resolve",
        "--rules",
        &file,
        "--dest",
        "example.com:443",
    ]);
    out.assert_success();
    assert!(
        out.stdout.contains("guard allow-host example.com"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("nothing was resolved"),
        "{}",
        out.stdout
    );
}

#[test]
fn check_dest_usage_errors() {
    let sandbox = Sandbox::new();
    let file = display(&sandbox.write("d.rules", DEST_RULES));
    for (dest, want) in [
        ("example.com", "has no port"),
        ("::1:443", "write an IPv6 address in brackets"),
        ("example.com:0", "the port must be a number from 1 to 65535"),
        ("*.x:443", "wildcards are not allowed"),
    ] {
        let out = sandbox.run(["check", "--rules", &file, "--dest", dest]);
        out.assert_code(2);
        assert_eq!(out.stdout, "");
        assert!(out.stderr.contains(want), "{dest}: {}", out.stderr);
    }
    // A destination and a command together, or --transport alone, are usage errors.
    let out = sandbox.run(["check", "--rules", &file, "--dest", "a.com:1", "--", "git"]);
    out.assert_code(2);
    let out = sandbox.run(["check", "--rules", &file, "--transport", "udp", "--", "git"]);
    out.assert_code(2);
    let out = sandbox.run([
        "check",
        "--rules",
        &file,
        "--dest",
        "a.com:1",
        "--transport",
        "sctp",
    ]);
    out.assert_code(2);
    // Help mentions the new flags.
    let out = sandbox.run(["check", "--help"]);
    for flag in ["--dest", "--transport", "--kernel"] {
        assert!(out.stdout.contains(flag), "{flag} missing:\n{}", out.stdout);
    }
}

#[test]
fn check_kernel_reports_what_the_kernel_decides_for_the_exec() {
    let sandbox = Sandbox::new();
    let file = display(&sandbox.write(
        "k.rules",
        "prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\nprefix_rule(pattern=[\"git\"], decision=\"allow\")\nenforcement(unmatched_exec=\"prompt\")\n",
    ));
    let value = sandbox.check_json(&["--rules", &file, "--kernel"], &["git", "push"]);
    assert_eq!(value["decision"], "prompt");
    assert_eq!(value["kernel_decision"], "prompt");
    // No rule: the check says none, the kernel applies unmatched_exec.
    let value = sandbox.check_json(&["--rules", &file, "--kernel"], &["ls"]);
    assert_eq!(value["decision"], "none");
    assert_eq!(value["kernel_decision"], "prompt");
    // The kernel matches the executed file's name: /usr/bin/git is `git` there.
    let value = sandbox.check_json(&["--rules", &file, "--kernel"], &["/usr/bin/git", "status"]);
    assert_eq!(value["decision"], "none");
    assert_eq!(value["kernel_decision"], "allow");
    // Without --kernel the contract is unchanged.
    let value = sandbox.check_json(&["--rules", &file], &["git", "push"]);
    assert!(value.get("kernel_decision").is_none(), "{value}");
    let out = sandbox.check(&["--rules", &file, "--kernel"], &["ls"]);
    out.assert_success();
    assert!(out.stdout.contains("kernel: prompt"), "{}", out.stdout);
}

#[test]
fn check_kernel_includes_the_pattern_tables_of_rule_sets_and_legacy_policies() {
    let sandbox = Sandbox::new();
    let rules = display(&sandbox.write(
        "p.rules",
        "rule_set(deny=[\"exec(*push*)\"])\nprefix_rule(pattern=[\"git\"], decision=\"allow\")\n",
    ));
    // `guard run` kills this exec (the glob's table): the kernel answer says so, and names it.
    let value = sandbox.check_json(&["--rules", &rules, "--kernel"], &["git", "push", "origin"]);
    assert_eq!(value["kernel_decision"], "forbidden", "{value}");
    assert_eq!(
        value["kernel_rule"], "rule_set(deny=[\"exec(*push*)\"])",
        "{value}"
    );
    // Arguments with spaces are read as the shell-quoted join, as the rule set reads them.
    let value = sandbox.check_json(
        &["--rules", &rules, "--kernel"],
        &["git", "commit", "-m", "hi there"],
    );
    assert_eq!(value["kernel_decision"], "allow", "{value}");
    assert_eq!(
        value["kernel_rule"], "prefix_rule(pattern=[\"git\"], decision=\"allow\")",
        "{value}"
    );
    let legacy = display(&sandbox.write("team.policy", "forbid_substrings([\"--force\"])\n"));
    let value = sandbox.check_json(
        &["--rules", &rules, "--rules", &legacy, "--kernel"],
        &["git", "commit", "--force"],
    );
    assert_eq!(value["kernel_decision"], "forbidden", "{value}");
    let out = sandbox.check(&["--rules", &rules, "--kernel"], &["git", "push"]);
    assert!(
        out.stdout
            .contains("kernel: forbidden by rule_set(deny=[\"exec(*push*)\"])"),
        "{}",
        out.stdout
    );
}

#[test]
fn policy_show_json_lists_address_rules_and_enforcement() {
    let sandbox = Sandbox::new();
    let file = display(&sandbox.write(
        "s.rules",
        "address_rule(addresses=[\"10.1.2.3/8\", \"Example.COM\", \"::1\"], decision=\"deny\", ports=[443, 80], transport=\"tcp\", justification=\"why\", audit_only=True)\naddress_rule(addresses=[\"fd00::/8\"], decision=\"allow\")\nenforcement(unmatched_exec=\"prompt\", audit_only=True)\nprefix_rule(pattern=[\"rm\"], decision=\"forbidden\", audit_only=True)\n",
    ));
    let value = sandbox.policy_show_json(&file);
    assert_eq!(
        value["address_rules"],
        json!([
            {"id": 0, "addresses": ["10.0.0.0/8", "example.com", "::1"], "ports": [443, 80], "transport": "tcp", "decision": "forbidden", "audit_only": true, "justification": "why", "file": file, "line": 1},
            {"id": 1, "addresses": ["fd00::/8"], "ports": null, "transport": "any", "decision": "allow", "audit_only": false, "file": file, "line": 2},
        ])
    );
    assert_eq!(
        value["enforcement"],
        json!({"unmatched_exec": "prompt", "unmatched_network": "allow", "unmatched_unix": "forbidden", "anonymous_exec": "forbidden", "audit_only": true, "socket_kinds": [], "dns_max_labels": 10, "dns_max_name_length": 128, "dns_wildcard_lookups_per_second": 100})
    );
    assert_eq!(value["prefix_rules"][0]["audit_only"], true);

    // A reference file: no address rules, the defaults, and prefix rules without audit_only.
    let plain = display(&sandbox.write("p.rules", "prefix_rule(pattern=[\"git\"])\n"));
    let value = sandbox.policy_show_json(&plain);
    assert_eq!(value["address_rules"], json!([]));
    assert_eq!(
        value["enforcement"],
        json!({"unmatched_exec": "allow", "unmatched_network": "allow", "unmatched_unix": "forbidden", "anonymous_exec": "forbidden", "audit_only": false, "socket_kinds": [], "dns_max_labels": 10, "dns_max_name_length": 128, "dns_wildcard_lookups_per_second": 100})
    );
    assert!(value["prefix_rules"][0].get("audit_only").is_none());
}

#[test]
fn policy_show_text_lists_address_rules_and_enforcement() {
    let sandbox = Sandbox::new();
    let file = display(&sandbox.write(
        "s.rules",
        "address_rule(addresses=[\"10.0.0.0/8\"], decision=\"deny\", ports=[22])\nenforcement(unmatched_network=\"prompt\")\n",
    ));
    let out = sandbox.run(["policy", "show", "--rules", &file]);
    out.assert_success();
    let stdout = &out.stdout;
    assert!(stdout.contains("Address rules (1)"), "{stdout}");
    assert!(stdout.contains("10.0.0.0/8"), "{stdout}");
    assert!(stdout.contains(&format!("{file}:1")), "{stdout}");
    assert!(stdout.contains("Enforcement"), "{stdout}");
    assert!(
        stdout.contains("unmatched exec:    allow (default)"),
        "{stdout}"
    );
    assert!(stdout.contains("unmatched network: prompt\n"), "{stdout}");
}

#[test]
fn policy_validate_counts_address_rules_and_reports_their_errors() {
    let sandbox = Sandbox::new();
    let good = sandbox.write(
        "g.rules",
        "address_rule(addresses=[\"10.0.0.0/8\"], decision=\"deny\")\n",
    );
    let out = sandbox.run(["policy", "validate", &display(&good)]);
    out.assert_success();
    assert!(out.stdout.contains(", 1 address rule(s)"), "{}", out.stdout);
    let bad = sandbox.write(
        "bad.rules",
        "\naddress_rule(addresses=[\"10.0.0.0/33\"], decision=\"deny\")\n",
    );
    let out = sandbox.run(["policy", "validate", &display(&bad)]);
    out.assert_policy_error(&format!(
        "{}:2: error: invalid rule: invalid address \"10.0.0.0/33\" in address_rule: prefix length 33 is more than 32, the most an IPv4 network has (problem is on or around line 2)",
        display(&bad)
    ));
}

// ---------------------------------------------------------------------------------------------
// guard check --approval
// ---------------------------------------------------------------------------------------------

/// The case: `never` refuses what a prompt rule asks, with the reference's reason; the
/// text says it too, and the other modes ask.
#[test]
fn check_approval_never_refuses_a_prompt_rule_with_the_references_reason() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "r.rules",
        "prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\", justification=\"CI pushes\")\n",
    );
    let never = sandbox.check_json(
        &["--rules", "r.rules", "--approval", "never"],
        &["git", "push"],
    );
    assert_eq!(
        never["approval"],
        json!({
            "policy": "never",
            "requirement": "forbidden",
            "reason": "approval required by policy, but AskForApproval is set to Never",
        })
    );
    // The policy's own decision is unchanged beside it.
    assert_eq!(never["decision"], "prompt");
    let text = sandbox.check(
        &["--rules", "r.rules", "--approval", "never"],
        &["git", "push"],
    );
    assert!(
        text.stdout
            .contains("approval (never): refused: approval required by policy, but AskForApproval is set to Never"),
        "{}",
        text.stdout
    );
    let asked = sandbox.check_json(
        &["--rules", "r.rules", "--approval", "on-request"],
        &["git", "push"],
    );
    assert_eq!(asked["approval"]["requirement"], "needs_approval");
    assert_eq!(
        asked["approval"]["reason"],
        "`git push` requires approval: CI pushes"
    );
    let granular = sandbox.check_json(
        &["--rules", "r.rules", "--approval", "granular:rules=false"],
        &["git", "push"],
    );
    assert_eq!(
        granular["approval"]["reason"],
        "approval required by policy rule, but AskForApproval::Granular.rules is false"
    );
}

#[test]
fn check_approval_judges_a_proposed_prefix_and_refuses_a_banned_one() {
    let sandbox = Sandbox::new();
    sandbox.write("r.rules", "prefix_rule(pattern=[\"ls\"])\n");
    let banned = sandbox.check_json(
        &[
            "--rules",
            "r.rules",
            "--approval",
            "untrusted",
            "--prefix-rule",
            "python3 -c",
        ],
        &["python3", "-c", "print(1)"],
    );
    assert_eq!(banned["approval"]["requirement"], "needs_approval");
    assert_eq!(banned["approval"]["proposed_prefix"]["accepted"], false);
    assert!(
        banned["approval"]["proposed_prefix"]["why"]
            .as_str()
            .unwrap()
            .contains("banned prefix"),
        "{banned}"
    );
    let kept = sandbox.check_json(
        &[
            "--rules",
            "r.rules",
            "--approval",
            "untrusted",
            "--prefix-rule",
            "make test",
        ],
        &["make", "test", "-j4"],
    );
    assert_eq!(kept["approval"]["amendment"], json!(["make", "test"]));
    assert_eq!(kept["approval"]["proposed_prefix"]["accepted"], true);
    let bad = sandbox.check(&["--approval", "sometimes"], &["ls"]);
    bad.assert_code(2);
    assert!(
        bad.stderr.contains("unknown approval policy"),
        "{}",
        bad.stderr
    );
}

/// An allow that a stronger rule of the file outvotes would change nothing: it is refused with
/// that rule, and the file is left as it was.
#[test]
fn allow_prefix_that_a_stronger_rule_outvotes_is_refused_and_writes_nothing() {
    let sandbox = Sandbox::new();
    let original = "prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n";
    let file = sandbox.write("r.rules", original);
    let out = sandbox.allow_prefix(&file, &["git", "push", "origin"]);
    out.assert_code(2);
    assert!(
        out.stderr.contains("allowing `git push origin` would change nothing: the prompt prefix_rule for `git push` at")
            && out.stderr.contains("r.rules:1"),
        "{}",
        out.stderr
    );
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        original,
        "nothing was written"
    );
    // Another prefix is written as before.
    sandbox
        .allow_prefix(&file, &["git", "status"])
        .assert_success();
    assert!(
        fs::read_to_string(&file)
            .unwrap()
            .ends_with("prefix_rule(pattern=[\"git\", \"status\"], decision=\"allow\")\n")
    );
}

// ---------------------------------------------------------------------------------------------
// guard check --patch
// ---------------------------------------------------------------------------------------------

#[test]
fn check_patch_judges_inside_outside_and_escaping_paths_with_the_references_reasons() {
    let sandbox = Sandbox::new();
    let workspace = sandbox.file("project");
    fs::create_dir_all(&workspace).unwrap();
    let ws = display(&workspace);
    let inside = sandbox.write(
        "inside.patch",
        "*** Begin Patch\n*** Add File: project/src/new.rs\n+fn x() {}\n*** End Patch\n",
    );
    let outside = sandbox.write(
        "outside.patch",
        "*** Begin Patch\n*** Update File: /etc/hosts\n+1.2.3.4 x\n*** End Patch\n",
    );
    let escaping = sandbox.write(
        "escaping.patch",
        "*** Begin Patch\n*** Update File: project/a.rs\n*** Move to: project/../../../etc/b.rs\n+x\n*** End Patch\n",
    );
    let judge = |patch: &Path, approval: &str| {
        sandbox.check_json(
            &[
                "--patch",
                &display(patch),
                "--workspace",
                &ws,
                "--approval",
                approval,
            ],
            &[],
        )["patch"]
            .clone()
    };
    let approved = judge(&inside, "on-request");
    assert_eq!(approved["decision"], "auto_approve", "{approved}");
    assert_eq!(approved["paths"][0]["writable"], true);
    assert_eq!(judge(&inside, "untrusted")["decision"], "ask_user");
    for patch in [&outside, &escaping] {
        assert_eq!(judge(patch, "on-request")["decision"], "ask_user");
        let rejected = judge(patch, "never");
        assert_eq!(rejected["decision"], "reject");
        assert_eq!(
            rejected["reason"],
            "writing outside of the project; rejected by user approval settings"
        );
    }
    let read_only = sandbox.check_json(
        &[
            "--patch",
            &display(&inside),
            "--sandbox",
            "read-only",
            "--approval",
            "never",
        ],
        &[],
    );
    assert_eq!(
        read_only["patch"]["reason"],
        "writing is blocked by read-only sandbox; rejected by user approval settings"
    );
    let empty = sandbox.write("empty.patch", "*** Begin Patch\n*** End Patch\n");
    assert_eq!(judge(&empty, "on-request")["reason"], "empty patch");
    let broken = sandbox.write(
        "broken.patch",
        "*** Begin Patch\n*** Frob: x\n*** End Patch\n",
    );
    let out = sandbox.check(&["--patch", &display(&broken)], &[]);
    out.assert_code(2);
    assert!(
        out.stderr.contains("broken.patch:2: unknown patch line"),
        "{}",
        out.stderr
    );
}

#[test]
fn version_names_the_commit_and_completions_and_man_pages_come_from_the_help() {
    let sandbox = Sandbox::new();
    let version = sandbox.run(["--version"]).stdout;
    assert!(
        version.starts_with("guard 0.") && version.contains(" (commit "),
        "{version}"
    );
    for shell in ["bash", "zsh", "fish"] {
        let run = sandbox.run(["completions", shell]);
        assert_eq!(run.code, Some(0), "{shell}: {}", run.stderr);
        assert!(
            run.stdout.contains("allow-host") && run.stdout.contains("--sandbox"),
            "{shell} completes subcommands and flags"
        );
    }
    let page = sandbox.run(["man"]);
    assert!(
        page.code == Some(0) && page.stdout.contains(".TH guard 1"),
        "{}",
        page.stdout
    );
    let page = sandbox.run(["man", "run"]).stdout;
    assert!(
        page.contains(".TH guard-run 1") && page.contains("sandbox"),
        "{page}"
    );
    let missing = sandbox.run(["man", "nope"]);
    assert_eq!(missing.code, Some(2));
    assert!(
        missing.stderr.contains("no subcommand `nope`"),
        "{}",
        missing.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// Errors under --json
// ---------------------------------------------------------------------------------------------

#[test]
fn json_errors_are_one_object_on_stdout_with_the_file_line_and_exit_code() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "bad.rules",
        "\nprefix_rule(pattern=[\"git\"], decision=\"maybe\")\n",
    );
    let out = sandbox.check(&["--json", "--rules", "bad.rules"], &["git", "status"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.starts_with("bad.rules:2: "),
        "people's line stays on stderr: {}",
        out.stderr
    );
    let error = &error_of(&out);
    assert_eq!(error["kind"], "policy", "{error}");
    assert_eq!(error["line"], 2, "{error}");
    assert!(
        error["file"].as_str().unwrap().ends_with("bad.rules"),
        "{error}"
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("invalid decision: maybe"),
        "{error}"
    );
    assert_eq!(error["exit_code"], 2, "{error}");

    // A file that is not there: the message says which, with no line to point at.
    let out = sandbox.run(["policy", "show", "--json", "--rules", "missing.rules"]);
    let error = &error_of(&out);
    assert_eq!(
        (out.code, &error["kind"]),
        (Some(2), &json!("policy")),
        "{out:?}"
    );
    assert!(error.get("line").is_none(), "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("missing.rules"),
        "{error}"
    );

    // No daemon at the socket: exit 4, as without --json.
    let socket = sandbox.path().join("no-daemon.sock");
    let out = sandbox.run(["status", "--json", "--socket", &display(&socket)]);
    assert_eq!(out.code, Some(4), "{out:?}");
    assert_eq!(error_of(&out)["kind"], "unreachable", "{out:?}");

    // Without --json, and with `--json` only after `--` (the checked command's), people's text.
    let out = sandbox.check(&["--rules", "bad.rules"], &["git", "--json"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert_eq!(out.stdout, "", "{out:?}");
    assert!(out.stderr.contains("bad.rules:2:"), "{}", out.stderr);
}

/// A failed command's stdout: nothing, or under `--json` one `{"error": {...}}` object.
fn assert_json_error_or_nothing(out: &Run) {
    if !out.stdout.is_empty() {
        assert_eq!(error_of(out)["exit_code"], 2, "{out:?}");
    }
}

/// The `error` object a failed command printed on stdout under `--json`.
fn error_of(out: &Run) -> Value {
    let value: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|err| panic!("stdout is not one JSON value ({err}): {out:?}"));
    value["error"].clone()
}

#[test]
fn check_unix_refuses_a_socket_nothing_names_by_default_and_gives_the_rule() {
    let sandbox = Sandbox::new();
    let empty = display(&sandbox.write("empty.rules", ""));
    let out = sandbox.run(["check", "--rules", &empty, "--unix", "/srv/app.sock"]);
    assert!(
        out.stdout
            .starts_with("forbidden  unix socket /srv/app.sock\n")
            && out
                .stdout
                .contains("enforcement(unmatched_unix=...) decides: forbidden")
            && out.stdout.contains(
                "add unix_rule(socket=\"/srv/app.sock\", decision=\"allow\") to a rules file"
            ),
        "{}",
        out.stdout
    );
    // The network default does not decide unix sockets; unmatched_unix does.
    let network = display(&sandbox.write(
        "network.rules",
        "enforcement(unmatched_network=\"allow\")\n",
    ));
    let value = sandbox
        .run([
            "check",
            "--json",
            "--rules",
            &network,
            "--unix",
            "/srv/app.sock",
        ])
        .json();
    assert_eq!(
        (&value["decision"], &value["unmatched"]),
        (&json!("forbidden"), &json!(true))
    );
    let allowing = display(&sandbox.write("unix.rules", "enforcement(unmatched_unix=\"allow\")\n"));
    let value = sandbox
        .run([
            "check",
            "--json",
            "--rules",
            &allowing,
            "--unix",
            "/srv/app.sock",
        ])
        .json();
    assert_eq!(value["decision"], "allow");
    // A built-in refused server stays refused under an allowing default.
    let value = sandbox
        .run([
            "check",
            "--json",
            "--rules",
            &allowing,
            "--unix",
            "/run/docker.sock",
        ])
        .json();
    assert_eq!(value["decision"], "forbidden");
}
