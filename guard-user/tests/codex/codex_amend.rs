//! The Codex CLI tier, amendments: the lines guard appends are read by the real Codex CLI with
//! the same decisions, and a Codex rules folder holding the lines Codex appends is guard's
//! `--rules` as it is (see `codex_cli.rs` for the install and the environment).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::install;
use crate::run::{Outcome, guard, run};

/// The Codex home of this file's runs (`codex_cli.rs` uses 0 to 6).
const WORKER: usize = 7;

/// A Starlark (and JSON) string literal, as Codex's appender writes tokens.
fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

/// A Codex rules folder as Codex leaves it: `rules/default.rules` holding the lines its
/// "always allow" approvals append (the line format of Codex's `execpolicy` amend code:
/// `prefix_rule(pattern=[JSON strings joined by ", "], decision="allow")` and
/// `network_rule(host=JSON, protocol="https", decision="deny", justification=JSON)`, each on
/// its own line, a newline added first when the file does not end with one), beside a
/// hand-written file.
fn codex_rules_folder(home: &Path) -> PathBuf {
    let rules = home.join(".codex/rules");
    std::fs::create_dir_all(&rules).expect("create rules folder");
    std::fs::write(
        rules.join("team.rules"),
        "prefix_rule(pattern = [\"git\", \"push\"], decision = \"prompt\", justification = \"review first\")\n\
         prefix_rule(pattern = [[\"rm\", \"shred\"], \"-rf\"], decision = \"forbidden\")\n\
         host_executable(name = \"git\", paths = [\"/usr/bin/git\"])\n",
    )
    .expect("write team.rules");
    // The first line without its newline: Codex's appender adds one before its line.
    let mut default = String::from("prefix_rule(pattern=[\"ls\"], decision=\"allow\")");
    for prefix in [
        vec!["cargo", "test"],
        vec!["echo", "Hello, world!"],
        vec!["npm", "run", "say \"hi\" é"],
        vec!["git", "status"],
    ] {
        let tokens: Vec<String> = prefix.iter().map(|t| quote(t)).collect();
        default.push_str(&format!(
            "\nprefix_rule(pattern=[{}], decision=\"allow\")",
            tokens.join(", ")
        ));
    }
    default.push_str(&format!(
        "\nnetwork_rule(host={}, protocol=\"https\", decision=\"deny\", justification={})\n",
        quote("tracker.example.com"),
        quote("no \"tracking\"")
    ));
    std::fs::write(rules.join("default.rules"), default).expect("write default.rules");
    rules
}

/// Commands over the amendment tests' policies.
const AMENDED_COMMANDS: &[&[&str]] = &[
    &["cargo", "test", "--all"],
    &["cargo", "build"],
    &["echo", "Hello, world!"],
    &["echo", "Hello,", "world!"],
    &["npm", "run", "say \"hi\" é", "x"],
    &["git", "status", "-s"],
    &["git", "push", "origin"],
    &["/usr/bin/git", "push"],
    &["rm", "-rf", "/"],
    &["ls", "-la"],
    &["make", "deploy"],
];

/// guard's `check --json` decision for `command` over `rules` (a folder or a file).
fn guard_decision(dir: &Path, rules: &Path, command: &[String], resolve: bool) -> String {
    let mut check = Command::new(guard());
    check
        .args(["check", "--json", "--rules"])
        .arg(rules)
        .current_dir(dir)
        .env("GUARD_SYSTEM_RULES", dir.join("no-system-rules"));
    if resolve {
        check.arg("--resolve-host-executables");
    }
    let out = check
        .arg("--")
        .args(command)
        .output()
        .expect("run guard check");
    assert!(out.status.success(), "guard check failed: {out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("guard's JSON");
    json["decision"].as_str().expect("a decision").to_string()
}

/// Codex's decision, from its JSON (`none` when nothing matched, as guard says it).
fn codex_decision(outcome: &Outcome) -> String {
    assert_eq!(outcome.code, Some(0), "codex failed: {outcome:?}");
    let json: serde_json::Value = serde_json::from_slice(&outcome.stdout).expect("codex's JSON");
    json["decision"].as_str().unwrap_or("none").to_string()
}

#[test]
fn a_codex_rules_folder_is_guards_rules_as_it_is() {
    let Some(codex) = install::codex() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary folder");
    let home = dir.path().join("home");
    let folder = codex_rules_folder(&home);
    // Codex reads its folder's `*.rules` files in name order; `codex execpolicy check` is given
    // them in that order, guard the folder itself.
    let files = ["default.rules", "team.rules"].map(|name| folder.join(name));
    let mut decided = 0;
    for command in AMENDED_COMMANDS {
        let command: Vec<String> = command.iter().map(|t| t.to_string()).collect();
        for resolve in [false, true] {
            let mut args: Vec<String> = Vec::new();
            for file in &files {
                args.extend(["-r".to_string(), file.display().to_string()]);
            }
            if resolve {
                args.push("--resolve-host-executables".to_string());
            }
            args.extend(command.iter().cloned());
            let theirs = run(&codex, dir.path(), WORKER, &args);
            let ours = run(guard(), dir.path(), WORKER, &args);
            assert_eq!(theirs, ours, "execpolicy check {args:?}");
            let expected = codex_decision(&theirs);
            decided += usize::from(expected != "none");
            assert_eq!(
                guard_decision(dir.path(), &folder, &command, resolve),
                expected,
                "guard check --rules {folder:?} -- {command:?} (resolve: {resolve})"
            );
        }
    }
    assert!(decided >= 12, "the folder decided only {decided} commands");
    let validate = Command::new(guard())
        .args(["policy", "validate"])
        .arg(&folder)
        .output()
        .expect("run guard policy validate");
    assert!(validate.status.success(), "{validate:?}");
}

#[test]
fn codex_reads_the_lines_guard_appends() {
    let Some(codex) = install::codex() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary folder");
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".codex")).expect("create home");
    let file = dir.path().join("amended.rules");
    std::fs::write(
        &file,
        "prefix_rule(pattern = [\"git\", \"push\"], decision = \"prompt\")\n\
         prefix_rule(pattern = [\"rm\", \"-rf\"], decision = \"forbidden\")",
    )
    .expect("write rules");
    let prefixes: &[&[&str]] = &[
        &["cargo", "test"],
        &["echo", "Hello, world!"],
        &["npm", "run", "say \"hi\" é"],
        &["git", "status"],
        &["ls"],
    ];
    let mut expected_tail = String::new();
    for prefix in prefixes {
        let out = Command::new(guard())
            .args(["allow-prefix", "--rules-file"])
            .arg(&file)
            .arg("--")
            .args(*prefix)
            .output()
            .expect("run guard allow-prefix");
        assert!(out.status.success(), "allow-prefix {prefix:?}: {out:?}");
        let tokens: Vec<String> = prefix.iter().map(|t| quote(t)).collect();
        expected_tail.push_str(&format!(
            "prefix_rule(pattern=[{}], decision=\"allow\")\n",
            tokens.join(", ")
        ));
    }
    for (verb, host, decision) in [
        ("allow-host", "api.github.com", "allow"),
        ("deny-host", "tracker.example.com", "deny"),
    ] {
        let out = Command::new(guard())
            .args([verb, host, "--protocol", "https", "--rules-file"])
            .arg(&file)
            .output()
            .expect("run guard allow-host");
        assert!(out.status.success(), "{verb} {host}: {out:?}");
        assert!(
            std::fs::read_to_string(&file)
                .expect("read rules")
                .contains(&format!(
                    "network_rule(host={}, protocol=\"https\", decision=\"{decision}\"",
                    quote(host)
                )),
            "{verb} wrote Codex's network_rule line"
        );
    }
    let written = std::fs::read_to_string(&file).expect("read rules");
    assert!(
        written.contains(&format!("decision = \"forbidden\")\n{expected_tail}")),
        "guard's prefix lines are Codex's, after the newline Codex would add:\n{written}"
    );
    let mut decided = 0;
    for command in AMENDED_COMMANDS {
        let command: Vec<String> = command.iter().map(|t| t.to_string()).collect();
        let args: Vec<String> = ["-r".to_string(), file.display().to_string()]
            .into_iter()
            .chain(command.iter().cloned())
            .collect();
        let theirs = run(&codex, dir.path(), WORKER, &args);
        let ours = run(guard(), dir.path(), WORKER, &args);
        assert_eq!(theirs, ours, "execpolicy check {args:?}");
        let expected = codex_decision(&theirs);
        decided += usize::from(expected == "allow");
        assert_eq!(guard_decision(dir.path(), &file, &command, false), expected);
    }
    assert!(
        decided >= 5,
        "Codex allowed only {decided} amended commands"
    );
}
