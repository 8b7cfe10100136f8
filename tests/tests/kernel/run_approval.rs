//! `guard run --approval MODE`, the Codex CLI's approval policies held by the kernel: under
//! `never` a prompted exec is refused at once with the reference's reason and raises no ask;
//! under `untrusted` every exec that is not known-safe asks (and so is refused until answered),
//! while known-safe programs run; the default (`on-request`) raises an ask. Needs root (`guard
//! run` loads the programs); without it each test prints `skipped: ...` (and fails when
//! CI=true).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::run_guard;
use guard_tests::daemon::{guard_bin, text};
use guard_tests::kernel::{root_or_skip, shell_program, starting};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

const RULES: &str =
    "prefix_rule(pattern=[\"touch\"], decision=\"prompt\", justification=\"asks first\")\n";

/// `guard run --rules R [EXTRA] -- sh -c SCRIPT` in `dir`.
fn run(dir: &Path, extra: &[&str], script: &str) -> Output {
    let rules = dir.join("approval.rules");
    std::fs::write(&rules, RULES).unwrap();
    run_guard(
        Command::new(guard_bin())
            .args(["run", "--rules"])
            .arg(&rules)
            .args(extra)
            .arg("--")
            .arg(shell_program())
            .args(["-c", script])
            .current_dir(dir),
        RUN_TIMEOUT,
    )
}

#[test]
fn never_refuses_a_prompt_rules_exec_at_once_with_the_references_reason_and_no_ask() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["--approval", "never"],
        "touch made; echo rc=$?",
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains("rc=137"),
        "the exec was refused: {stdout} / {stderr}"
    );
    assert!(!dir.path().join("made").exists(), "touch did not run");
    assert!(
        stderr.contains(
            "approval required for commands starting with `touch`: asks first (approval.rules:1); \
             approval required by policy, but AskForApproval is set to Never"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("guard: ask "),
        "no ask was raised: {stderr}"
    );

    // The default raises an ask for the same exec.
    let out = run(dir.path(), &[], "touch made; echo rc=$?");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("guard: ask 1: "), "{stderr}");
    assert!(!dir.path().join("made").exists());
}

#[test]
fn untrusted_asks_about_every_exec_that_is_not_known_safe() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("present"), "").unwrap();
    // `sh` itself is not known-safe, so the command is `ls` directly (known-safe: it runs).
    let rules = dir.path().join("approval.rules");
    std::fs::write(&rules, RULES).unwrap();
    let _starting = starting();
    let listed = Command::new(guard_bin())
        .args(["run", "--approval", "untrusted", "--rules"])
        .arg(&rules)
        .args(["--", "ls"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert!(text(&listed.stdout).contains("present"));

    let out = run(dir.path(), &["--approval", "untrusted"], "ls");
    assert_eq!(
        out.status.code(),
        Some(137),
        "sh is not known-safe: {out:?}"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--approval untrusted asks about every command that is not known-safe"),
        "{stderr}"
    );
    assert!(
        stderr.contains("guard: ask 1: "),
        "the exec is an ask: {stderr}"
    );
}
