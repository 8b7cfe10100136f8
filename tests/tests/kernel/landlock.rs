//! `guard run` confines the command's writes: a write below a protected path or a rule set's
//! `write(...)` denial fails (EROFS, "Read-only file system", from the read-only binds of the
//! command's mount namespace; see `writes` for the rest) and leaves the file as it was,
//! while reads and writes elsewhere go on. Stand-alone (`--rules`) and under a test daemon
//! (`--socket`), on the real kernel.
//!
//! Every file the tests write is in a temporary folder of their own; Landlock only ever applies
//! to the command `guard run` starts, never to the test process. Root and Landlock are needed:
//! without them a test prints `skipped: ...` (and fails under `CI=true`).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{describe, landlock_or_skip, run_guard, step};
use guard_tests::daemon::{DaemonSetup, TestDaemon, guard_bin, text};

/// How long one `guard run` may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `command` (stdin closed, output collected), at most [`RUN_TIMEOUT`].
fn run(command: &mut Command) -> Output {
    run_guard(command, RUN_TIMEOUT)
}

/// `guard run --rules RULES -- sh -c SCRIPT` in `cwd`.
fn guard_run(rules: &Path, cwd: &Path, script: &str) -> Output {
    run(Command::new(guard_bin())
        .arg("run")
        .arg("--rules")
        .arg(rules)
        .args(["--", "sh", "-c", script])
        .current_dir(cwd))
}

#[test]
fn a_relative_write_denial_refuses_writes_into_git_and_lets_other_writes_through() {
    if !landlock_or_skip() {
        return;
    }
    let rules_dir = tempfile::tempdir().unwrap();
    let rules = rules_dir.path().join("test.rules");
    std::fs::write(&rules, "rule_set(deny = [\"write(.git/**)\"])\n").unwrap();
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path();
    std::fs::create_dir(cwd.join(".git")).unwrap();
    std::fs::write(cwd.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    std::fs::write(cwd.join("other"), "before\n").unwrap();
    std::fs::create_dir(cwd.join("src")).unwrap();

    let out = guard_run(&rules, cwd, "echo x > .git/config");
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains("Read-only file system"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n",
        "the file is unchanged"
    );

    let out = guard_run(&rules, cwd, "echo x > other");
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(std::fs::read_to_string(cwd.join("other")).unwrap(), "x\n");

    // More ways in, and what stays allowed, in one run.
    let script = [
        step("append", "echo x >> .git/config"),
        step("create", "echo x > .git/new"),
        step("remove", "rm -f .git/config"),
        step("rename", "mv .git gone"),
        step("truncate", "truncate -s 0 .git/config"),
        step("read", "cat .git/config >/dev/null"),
        step("subfolder", "echo y > src/new.rs"),
        step("tmp", "echo y > \"$OUT\""),
        // The current folder is on the way to `.git`: a new entry in it is still made.
        step("new_in_cwd", "echo y > brand-new"),
    ]
    .concat();
    let outside = tempfile::tempdir().unwrap();
    let out = run(Command::new(guard_bin())
        .arg("run")
        .arg("--rules")
        .arg(&rules)
        .args(["--", "sh", "-c", &script])
        .env("OUT", outside.path().join("out"))
        .current_dir(cwd));
    assert!(out.status.success(), "{}", describe(&out));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(
        lines,
        [
            "append=refused",
            "create=refused",
            "remove=refused",
            "rename=refused",
            "truncate=refused",
            "read=ok",
            "subfolder=ok",
            "tmp=ok",
            "new_in_cwd=ok",
        ],
        "{}",
        describe(&out)
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
    assert!(!cwd.join(".git/new").exists() && !cwd.join("gone").exists());
    assert_eq!(
        std::fs::read_to_string(cwd.join("src/new.rs")).unwrap(),
        "y\n"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("out")).unwrap(),
        "y\n"
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join("brand-new")).unwrap(),
        "y\n"
    );
}

#[test]
fn a_stand_alone_run_cannot_change_the_rules_file_it_was_loaded_from() {
    if !landlock_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("team.rules");
    let original = "prefix_rule(pattern = [\"git\", \"push\"], decision = \"forbidden\")\n";
    std::fs::write(&rules, original).unwrap();
    let script = [
        step(
            "overwrite",
            "echo 'prefix_rule(pattern=[\"git\"])' > \"$RULES\"",
        ),
        step(
            "append",
            "echo 'prefix_rule(pattern=[\"git\"])' >> \"$RULES\"",
        ),
        step("remove", "rm -f \"$RULES\""),
        step("read", "cat \"$RULES\""),
    ]
    .concat();
    let work = tempfile::tempdir().unwrap();
    let out = run(Command::new(guard_bin())
        .arg("run")
        .arg("--rules")
        .arg(&rules)
        .args(["--", "sh", "-c", &script])
        .env("RULES", &rules)
        .current_dir(work.path()));
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        text(&out.stdout),
        format!("overwrite=refused\nappend=refused\nremove=refused\n{original}read=ok\n"),
        "{}",
        describe(&out)
    );
    assert!(
        text(&out.stderr).contains("Read-only file system"),
        "{}",
        describe(&out)
    );
    assert_eq!(std::fs::read(&rules).unwrap(), original.as_bytes());
}

#[test]
fn a_run_under_the_daemon_cannot_change_its_rules_or_its_amendments() {
    if !landlock_or_skip() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "prefix_rule(pattern = [\"git\", \"push\"], decision = \"forbidden\")\n".into(),
        ..Default::default()
    });
    // An amendment, so the amendments file exists.
    let out = daemon.guard(&["allow-prefix", "--", "guard-landlock-test"]);
    assert!(out.status.success(), "{}", describe(&out));
    let amendments = daemon.amendments();
    let rules_before = std::fs::read(&daemon.rules_file).unwrap();
    let amendments_before = std::fs::read(&amendments).unwrap();
    assert!(!amendments_before.is_empty());

    let script = [
        step(
            "rules",
            "echo 'prefix_rule(pattern=[\"git\"])' >> \"$RULES\"",
        ),
        step(
            "amendments",
            "echo 'prefix_rule(pattern=[\"git\"])' >> \"$AMENDMENTS\"",
        ),
        step("replace", "rm -f \"$AMENDMENTS\""),
        step("read_rules", "cat \"$RULES\" >/dev/null"),
        step("read_amendments", "cat \"$AMENDMENTS\" >/dev/null"),
        step("elsewhere", "echo y > \"$OUT\""),
    ]
    .concat();
    let outside = tempfile::tempdir().unwrap();
    let out = run(daemon
        .guard_command(&["run", "-v", "--", "sh", "-c", &script])
        .env("RULES", &daemon.rules_file)
        .env("AMENDMENTS", &amendments)
        .env("OUT", outside.path().join("out"))
        .current_dir(outside.path()));
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        text(&out.stdout),
        "rules=refused\namendments=refused\nreplace=refused\nread_rules=ok\n\
         read_amendments=ok\nelsewhere=ok\n",
        "{}\n{}",
        describe(&out),
        daemon.log()
    );
    assert!(
        text(&out.stderr).contains("Read-only file system"),
        "{}",
        describe(&out)
    );
    // The daemon said which paths to hold: its state folder among them (canonical).
    let state = daemon.state_dir.canonicalize().unwrap();
    assert!(
        text(&out.stderr).contains(&format!("{}", state.display())),
        "{}",
        describe(&out)
    );
    assert_eq!(std::fs::read(&daemon.rules_file).unwrap(), rules_before);
    assert_eq!(std::fs::read(&amendments).unwrap(), amendments_before);
    assert_eq!(
        std::fs::read_to_string(outside.path().join("out")).unwrap(),
        "y\n"
    );
}
