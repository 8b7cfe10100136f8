//! `rule_set(deny=, ask=, allow=)` and the built-in protected paths, through the binary: `guard
//! policy evaluate`, `guard check`, `guard policy show` and `guard policy validate`.

use std::path::{Path, PathBuf};

use crate::common::{Run, Sandbox, display};
use serde_json::{Value, json};

impl Sandbox {
    /// `guard policy evaluate --rules <rules> --tool <tool> [--subject <subject>] [--json]`.
    fn evaluate_run(&self, rules: &Path, tool: &str, subject: Option<&str>, json: bool) -> Run {
        let rules = display(rules);
        let mut args = vec!["policy", "evaluate", "--rules", &rules, "--tool", tool];
        if let Some(subject) = subject {
            args.extend_from_slice(&["--subject", subject]);
        }
        if json {
            args.push("--json");
        }
        self.run(&args)
    }

    /// The JSON of `guard policy evaluate`, parsed.
    fn evaluate(&self, rules: &Path, tool: &str, subject: Option<&str>) -> Value {
        self.evaluate_run(rules, tool, subject, true).json()
    }

    /// Only the decision of `guard policy evaluate`.
    fn decision(&self, rules: &Path, tool: &str, subject: Option<&str>) -> String {
        self.evaluate(rules, tool, subject)["decision"]
            .as_str()
            .expect("decision is a string")
            .to_string()
    }

    /// A rules file `p.rules` with `contents`.
    fn rules(&self, contents: &str) -> PathBuf {
        self.write("p.rules", contents)
    }
}

/// The `rule` object `guard policy evaluate --json` reports for a written rule.
fn rule(file: &Path, line: usize, pattern: &str) -> Value {
    json!({"file": display(file), "line": line, "pattern": pattern})
}

#[test]
fn done_when_bash_rm_rf_is_forbidden() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules("rule_set(deny=[\"bash(rm -rf*)\"])\n");
    assert_eq!(
        sandbox.evaluate(&rules, "bash", Some("rm -rf /")),
        json!({"decision": "forbidden", "rule": rule(&rules, 1, "bash(rm -rf*)")})
    );
}

#[test]
fn json_has_exactly_decision_and_rule_and_none_has_no_rule() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules("\n\nrule_set(\n    ask=[\"exec(git push*)\"],\n)\n");
    let asked = sandbox.evaluate(&rules, "exec", Some("git push origin main"));
    let keys: Vec<&String> = asked.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["decision", "rule"]);
    let rule_keys: Vec<&String> = asked["rule"].as_object().unwrap().keys().collect();
    assert_eq!(rule_keys, ["file", "line", "pattern"]);
    // The line is the `rule_set(` call's.
    assert_eq!(asked["rule"], rule(&rules, 3, "exec(git push*)"));
    assert_eq!(asked["decision"], "prompt");
    assert_eq!(
        sandbox.evaluate(&rules, "exec", Some("git status")),
        json!({"decision": "none"})
    );
}

#[test]
fn first_match_is_deny_then_ask_then_allow_whatever_the_order_written() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules(
        r#"rule_set(
    allow=["exec"],
    ask=["exec(git *)"],
    deny=["exec(git push --force*)", "exec(git push -f*)"],
)
"#,
    );
    let push = sandbox.evaluate(&rules, "exec", Some("git push -f origin"));
    assert_eq!(push["decision"], "forbidden");
    assert_eq!(push["rule"]["pattern"], "exec(git push -f*)");
    assert_eq!(
        sandbox.evaluate(&rules, "exec", Some("git push origin"))["rule"]["pattern"],
        "exec(git *)"
    );
    assert_eq!(
        sandbox.evaluate(&rules, "exec", Some("ls"))["rule"]["pattern"],
        "exec"
    );
    assert_eq!(sandbox.decision(&rules, "exec", Some("ls")), "allow");
    // No tier names read: no decision at all.
    assert_eq!(sandbox.decision(&rules, "read", Some("/etc/hosts")), "none");
}

#[test]
fn a_call_without_subject_matches_only_bare_tool_names() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules("rule_set(deny=[\"exec(*)\"], ask=[\"exec\"])\n");
    assert_eq!(sandbox.decision(&rules, "exec", None), "prompt");
    assert_eq!(sandbox.decision(&rules, "exec", Some("ls")), "forbidden");
    let subject_only = sandbox.write("s.rules", "rule_set(deny=[\"write(*)\"])\n");
    assert_eq!(sandbox.decision(&subject_only, "write", None), "none");
}

#[test]
fn tool_star_star_and_tool_name_globs_with_the_bash_alias() {
    let sandbox = Sandbox::new();
    let bash_star = sandbox.rules("rule_set(ask=[\"bash*\"])\n");
    assert_eq!(sandbox.decision(&bash_star, "exec", Some("ls")), "prompt");
    assert_eq!(sandbox.decision(&bash_star, "bash", None), "prompt");
    assert_eq!(sandbox.decision(&bash_star, "read", Some("/x")), "none");
    let everything = sandbox.write("all.rules", "rule_set(deny=[\"*\"])\n");
    for (tool, subject) in [
        ("exec", Some("ls")),
        ("connect", Some("example.com:443")),
        ("read", Some("/x")),
        ("write", None),
    ] {
        assert_eq!(sandbox.decision(&everything, tool, subject), "forbidden");
    }
    // `exec(...)` answers to bash, `bash(...)` to exec, and a glob to either name.
    let names = sandbox.write(
        "names.rules",
        "rule_set(deny=[\"exec(rm *)\"], ask=[\"bash(curl *)\"], allow=[\"?xe?(ls)\", \"con*(*:443)\"])\n",
    );
    assert_eq!(sandbox.decision(&names, "bash", Some("rm x")), "forbidden");
    assert_eq!(sandbox.decision(&names, "exec", Some("curl x")), "prompt");
    assert_eq!(sandbox.decision(&names, "exec", Some("ls")), "allow");
    assert_eq!(
        sandbox.decision(&names, "connect", Some("Example.COM:443")),
        "allow"
    );
    assert_eq!(
        sandbox.decision(&names, "connect", Some("example.com:80")),
        "none"
    );
}

#[test]
fn command_globs_star_matches_slashes_and_spaces_and_subjects_are_requoted() {
    let sandbox = Sandbox::new();
    let rules = sandbox
        .rules("rule_set(deny=[\"exec(rm -rf*)\", \"exec(*/bin/sh *)\", \"exec(echo 'a b')\"])\n");
    assert_eq!(
        sandbox.decision(&rules, "exec", Some("rm -rf /home/u")),
        "forbidden"
    );
    assert_eq!(
        sandbox.decision(&rules, "exec", Some("/usr/bin/sh -c x")),
        "forbidden"
    );
    assert_eq!(
        sandbox.decision(&rules, "exec", Some("sudo rm -rf /")),
        "none"
    );
    // The subject is split like a shell and rendered again, as `guard check` shows argv.
    assert_eq!(
        sandbox.decision(&rules, "exec", Some("rm   -rf   x")),
        "forbidden"
    );
    assert_eq!(
        sandbox.decision(&rules, "exec", Some("echo \"a b\"")),
        "forbidden"
    );
    let bad = sandbox.evaluate_run(&rules, "exec", Some("echo 'open"), false);
    bad.assert_code(2);
    assert!(bad.stderr.contains("unbalanced quotes"), "{}", bad.stderr);
}

#[test]
fn path_globs_follow_gitignore_habits() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules(
        r#"rule_set(
    deny=["read(*.env)", "write(.git/**)", "write(/srv/*.log)"],
    ask=["write(/srv/**)", "write(src/*.rs)"],
)
"#,
    );
    // A pattern without `/` is a file name anywhere.
    assert_eq!(
        sandbox.decision(&rules, "read", Some("/home/u/.env")),
        "forbidden"
    );
    assert_eq!(
        sandbox.decision(&rules, "read", Some("/a/b/c/prod.env")),
        "forbidden"
    );
    assert_eq!(
        sandbox.decision(&rules, "read", Some("/a/prod.env.bak")),
        "none"
    );
    // A relative pattern with `/` matches below any folder, the folder itself included.
    for path in [
        "/repo/.git/config",
        "/x/y/.git/refs/heads/main",
        "/repo/.git",
    ] {
        assert_eq!(
            sandbox.decision(&rules, "write", Some(path)),
            "forbidden",
            "{path}"
        );
    }
    assert_eq!(
        sandbox.decision(&rules, "write", Some("/repo/.gitignore")),
        "none"
    );
    assert_eq!(
        sandbox.decision(&rules, "write", Some("/p/src/main.rs")),
        "prompt"
    );
    assert_eq!(
        sandbox.decision(&rules, "write", Some("/p/src/bin/x.rs")),
        "none"
    );
    // `*` stays in one folder, `**` crosses them; an absolute pattern is anchored.
    assert_eq!(
        sandbox.decision(&rules, "write", Some("/srv/a.log")),
        "forbidden"
    );
    assert_eq!(
        sandbox.decision(&rules, "write", Some("/srv/x/a.log")),
        "prompt"
    );
    assert_eq!(
        sandbox.decision(&rules, "write", Some("/home/srv/a.log")),
        "none"
    );
}

#[test]
fn path_subjects_are_absolute_and_lexically_normalised() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules("rule_set(deny=[\"write(/etc/**)\", \"write(.git/**)\"])\n");
    assert_eq!(
        sandbox.decision(&rules, "write", Some("/tmp/../etc/./passwd")),
        "forbidden"
    );
    assert_eq!(
        sandbox.decision(&rules, "write", Some("/etc/../tmp/x")),
        "none"
    );
    // Relative to the current folder (the sandbox), lexically.
    assert_eq!(
        sandbox.decision(&rules, "write", Some(".git/config")),
        "forbidden"
    );
    assert_eq!(
        sandbox.decision(&rules, "write", Some("sub/../.git/HEAD")),
        "forbidden"
    );
    assert_eq!(sandbox.decision(&rules, "write", Some(".git/../x")), "none");
    let text = sandbox.evaluate_run(&rules, "write", Some("a/../.git/HEAD"), false);
    text.assert_success();
    let expected = format!("write {}  ", display(&sandbox.file(".git/HEAD")));
    assert!(text.stdout.contains(&expected), "{}", text.stdout);
}

#[test]
fn text_output_is_one_line_with_the_rule() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules("rule_set(deny=[\"bash(rm -rf*)\"])\n");
    let run = sandbox.evaluate_run(&rules, "bash", Some("rm -rf /"), false);
    run.assert_success();
    assert_eq!(
        run.stdout,
        format!(
            "forbidden  exec rm -rf /  by \"bash(rm -rf*)\" at {}:1\n",
            display(&rules)
        )
    );
    let none = sandbox.evaluate_run(&rules, "read", None, false);
    assert_eq!(
        none.stdout,
        "none  read (no subject)  no rule_set pattern matches\n"
    );
}

#[test]
fn an_unknown_tool_is_a_usage_error_naming_the_tools() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules("rule_set(deny=[\"*\"])\n");
    let run = sandbox.evaluate_run(&rules, "shell", Some("ls"), true);
    run.assert_code(2);
    // Under --json the error is also one object on stdout.
    let printed: Value = serde_json::from_str(&run.stdout).expect("one JSON error on stdout");
    assert_eq!(printed["error"]["kind"], "usage", "{printed}");
    assert!(
        run.stderr.contains(
            "unknown tool `shell`: the tools are exec (also called bash), connect, read, write"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_patterns_are_load_errors_with_file_line_and_the_accepted_forms() {
    let sandbox = Sandbox::new();
    for (body, problem) in [
        ("rule_set(deny=[\"bash(rm -rf*\"])", "must end with `)`"),
        (
            "rule_set(ask=[\"wrtie(.git/**)\"])",
            "names no tool of guard's (`wrtie`)",
        ),
        (
            "rule_set(allow=[\"read([)\"])",
            "has an invalid subject glob",
        ),
        ("rule_set(allow=[\"read()\"])", "has an empty subject glob"),
    ] {
        let rules = sandbox.rules(&format!("# a comment\n{body}\n"));
        let run = sandbox.run(["policy", "validate", &display(&rules)]);
        run.assert_code(2);
        let first = run.first_stderr_line();
        assert!(
            first.starts_with(&format!("{}:2: ", display(&rules))),
            "{first}"
        );
        assert!(first.contains(problem), "{first}");
        assert!(
            first.contains("the accepted forms are \"tool\", \"tool*\", \"tool(glob)\" and \"*\""),
            "{first}"
        );
        // The same error refuses the policy wherever it is used.
        sandbox
            .evaluate_run(&rules, "exec", Some("ls"), true)
            .assert_code(2);
    }
    // Lists of strings, by keyword.
    for body in [
        "rule_set([\"exec\"])",
        "rule_set(deny=[1])",
        "rule_set(deny=\"exec\")",
    ] {
        let rules = sandbox.rules(&format!("\n{body}\n"));
        let run = sandbox.run(["policy", "validate", &display(&rules)]);
        run.assert_code(2);
        assert!(
            run.first_stderr_line()
                .starts_with(&format!("{}:2: ", display(&rules))),
            "{body}: {}",
            run.stderr
        );
    }
}

#[test]
fn sets_are_evaluated_on_their_own_and_the_strongest_wins() {
    let sandbox = Sandbox::new();
    let first = sandbox.write("a.rules", "rule_set(allow=[\"exec(git *)\"])\n");
    let second = sandbox.write(
        "b.rules",
        "rule_set(ask=[\"exec(git push*)\"])\nrule_set(deny=[\"exec(git push -f*)\"], allow=[\"*\"])\n",
    );
    let run = |subject: &str| {
        sandbox
            .run([
                "policy",
                "evaluate",
                "--json",
                "--rules",
                &display(&first),
                "--rules",
                &display(&second),
                "--tool",
                "exec",
                "--subject",
                subject,
            ])
            .json()
    };
    // An allow in one set does not lift an ask or a deny in another.
    assert_eq!(
        run("git push origin")["rule"],
        rule(&second, 1, "exec(git push*)")
    );
    assert_eq!(
        run("git push -f")["rule"],
        rule(&second, 2, "exec(git push -f*)")
    );
    // Equal decisions: the earlier set is named.
    assert_eq!(run("git status")["rule"], rule(&first, 1, "exec(git *)"));
    assert_eq!(run("ls")["rule"], rule(&second, 2, "*"));
}

#[test]
fn check_joins_rule_sets_with_prefix_rules_under_strongest_wins() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules(
        r#"prefix_rule(pattern=["rm"], decision="allow")
prefix_rule(pattern=["git", "push"], decision="forbidden")
rule_set(deny=["bash(rm -rf*)"], allow=["exec(git *)"])
"#,
    );
    let path = display(&rules);
    let refused = sandbox
        .run(["check", "--json", "--rules", &path, "--", "rm", "-rf", "/"])
        .json();
    assert_eq!(refused["decision"], "forbidden");
    assert_eq!(
        refused["matched_rules"],
        json!([
            {"matched_prefix": ["rm"], "decision": "allow", "rule_id": 0, "file": path, "line": 1},
            {"rule_set": {"pattern": "bash(rm -rf*)", "file": path, "line": 3}, "decision": "forbidden"},
        ])
    );
    // A rule-set allow cannot lift a forbidden prefix rule either.
    let push = sandbox
        .run(["check", "--json", "--rules", &path, "--", "git", "push"])
        .json();
    assert_eq!(push["decision"], "forbidden");
    assert_eq!(
        push["matched_rules"][1]["rule_set"]["pattern"],
        "exec(git *)"
    );
    assert_eq!(push["matched_rules"][1]["decision"], "allow");
    // Only a rule set matched: that is a match, not the fallback's.
    let status = sandbox
        .run([
            "check",
            "--json",
            "--fallback",
            "forbidden",
            "--rules",
            &path,
            "--",
            "git",
            "status",
        ])
        .json();
    assert_eq!(status["decision"], "allow");
    assert_eq!(status["matched_rules"].as_array().unwrap().len(), 1);
    // The explanation names the pattern, its place and why.
    let text = sandbox.run(["check", "--rules", &path, "--", "rm", "-rf", "/"]);
    text.assert_success();
    assert!(
        text.stdout.contains(&format!(
            "forbidden by rule_set \"bash(rm -rf*)\" at {path}:3"
        )),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains("reason: `rm -rf /` rejected: rule_set denies `bash(rm -rf*)`"),
        "{}",
        text.stdout
    );
}

#[test]
fn protected_paths_are_forbidden_and_no_allow_lifts_them() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules("rule_set(allow=[\"write(*)\", \"write\"])\n");
    assert_eq!(
        sandbox.evaluate(&rules, "write", Some("/etc/guard/rules/x.rules")),
        json!({"decision": "forbidden", "rule": {
            "file": "<built-in protected paths>", "line": 1, "pattern": "write(/etc/guard/**)"}})
    );
    for path in [
        "/etc/guard/guard.toml",
        "/etc/guard",
        "/var/lib/guard/rules/default.rules",
        "/run/guard/guard.sock",
        "/var/log/guard/audit.jsonl",
        "/tmp/../etc/guard/rules/../x",
    ] {
        let found = sandbox.evaluate(&rules, "write", Some(path));
        assert_eq!(found["decision"], "forbidden", "{path}");
        assert_eq!(
            found["rule"]["file"], "<built-in protected paths>",
            "{path}"
        );
    }
    // The rules file the policy was read from is protected too, relative subject or not.
    let own = sandbox.evaluate(&rules, "write", Some("p.rules"));
    assert_eq!(own["decision"], "forbidden");
    assert_eq!(
        own["rule"]["pattern"],
        format!("write({})", display(&rules))
    );
    // Anything else: the written allow.
    assert_eq!(sandbox.decision(&rules, "write", Some("/tmp/x")), "allow");
    assert_eq!(
        sandbox.decision(&rules, "write", Some("/etc/guardian")),
        "allow"
    );
    // Protected paths are about writes: reading guard's rules is not refused by them.
    assert_eq!(
        sandbox.decision(&rules, "read", Some("/etc/guard/rules/x.rules")),
        "none"
    );
}

#[test]
fn a_rules_folder_is_protected_with_everything_below_it() {
    let sandbox = Sandbox::new();
    let folder = sandbox.path().join("rules.d");
    sandbox.write("rules.d/a.rules", "rule_set(allow=[\"write\"])\n");
    let found = sandbox.evaluate(&folder, "write", Some("rules.d/new.rules"));
    assert_eq!(found["decision"], "forbidden");
    assert_eq!(
        found["rule"]["pattern"],
        format!("write({}/**)", display(&folder))
    );
    assert_eq!(
        sandbox.decision(&folder, "write", Some("rules.d")),
        "forbidden"
    );
    assert_eq!(sandbox.decision(&folder, "write", Some("other/x")), "allow");
}

#[test]
fn policy_show_lists_rule_sets_and_protected_paths() {
    let sandbox = Sandbox::new();
    let rules = sandbox.rules(
        "prefix_rule(pattern=[\"ls\"])\nrule_set(deny=[\"bash(rm -rf*)\"], allow=[\"read\", \"exec(ls*)\"])\n",
    );
    let path = display(&rules);
    let shown = sandbox
        .run(["policy", "show", "--json", "--rules", &path])
        .json();
    assert_eq!(
        shown["rule_sets"],
        json!([{"deny": ["bash(rm -rf*)"], "ask": [], "allow": ["read", "exec(ls*)"],
                "file": path, "line": 2}])
    );
    let protected = shown["protected_paths"].as_array().unwrap();
    let patterns: Vec<&str> = protected
        .iter()
        .map(|p| p["pattern"].as_str().unwrap())
        .collect();
    assert_eq!(
        patterns,
        [
            "write(/etc/guard/**)",
            "write(/etc/guard/rules/**)",
            "write(/var/lib/guard/**)",
            "write(/run/guard/**)",
            "write(/var/log/guard/**)",
            &format!("write({path})"),
        ]
    );
    assert!(
        protected
            .iter()
            .all(|p| !p["why"].as_str().unwrap().is_empty())
    );
    assert_eq!(
        protected[5]["why"],
        "a rules file this policy was loaded from"
    );
    let text = sandbox.run(["policy", "show", "--rules", &path]);
    text.assert_success();
    for expected in [
        "Rule sets (1)",
        &format!("rule_set at {path}:2"),
        "forbidden bash(rm -rf*)",
        "allow     read  exec(ls*)",
        "Protected paths (6; forbidden whatever the rules say)",
        "write(/var/lib/guard/**)  the daemon's state folder, with the amendments file",
    ] {
        assert!(
            text.stdout.contains(expected),
            "{expected}\n{}",
            text.stdout
        );
    }
    let validated = sandbox.run(["policy", "validate", &path]);
    validated.assert_success();
    assert!(
        validated.stdout.ends_with(", 1 rule set(s)\n"),
        "{}",
        validated.stdout
    );
}
