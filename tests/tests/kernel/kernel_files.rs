//! File rules in the real kernel: rule-set `write(...)` and `read(...)` globs and the built-in
//! protected paths. On the `lsm` backend (the VM tier) the file hooks refuse with EACCES: a
//! write, a create, a remove, a rename and a truncate below `.git`, a read of a `*.secret`,
//! and any write to the rules file the policy was loaded from, while other files stay
//! writable; the events name the path and the rule's line. The `cgroup` backend has no file
//! hooks: there the session reports every file rule as not enforced, and the write it cannot
//! stop is not stopped (so nobody relies on it by mistake).
//!
//! Needs root; otherwise (or where the kernel cannot run the programs) each test prints
//! `skipped: ...`, and fails when CI=true.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::stderr;
use guard::kernel::Backend;
use guard::kernel::events::{Action, EventKind};
use guard::policy::Decision;
use guard::session::SessionOptions;
use guard_tests::kernel::{TestSession, session_from_files_or_skip};

const RUN_TIMEOUT: Duration = Duration::from_secs(20);
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

const RULES: &str = "rule_set(deny=[\"write(.git/**)\"], ask=[\"read(*.secret)\"])\n";

/// `sh -c script` in the scope, from `dir`.
fn shell(session: &TestSession, dir: &Path, script: &str) -> Output {
    let mut command = Command::new("/bin/sh");
    command.args(["-c", script]).current_dir(dir);
    session
        .run(&mut command, RUN_TIMEOUT)
        .unwrap_or_else(|err| panic!("`{script}`: the shell did not start: {err}"))
}

fn assert_refused(output: &Output, script: &str) {
    assert!(
        !output.status.success() && stderr(output).contains("Permission denied"),
        "`{script}`: expected EACCES (Permission denied), got {} (stderr: {})",
        output.status,
        stderr(output)
    );
}

fn assert_ok(output: &Output, script: &str) {
    assert!(
        output.status.success(),
        "`{script}`: expected it to succeed, got {} (stderr: {})",
        output.status,
        stderr(output)
    );
}

/// A session over [`RULES`] with a work folder holding `.git/config` and `notes.secret`, made
/// by this (unscoped) process.
fn started() -> Option<(TestSession, std::path::PathBuf)> {
    let dir = tempfile::tempdir().expect("making a temporary folder");
    let session =
        session_from_files_or_skip(dir, &[("test.rules", RULES)], SessionOptions::default())?;
    let work = session.path().join("work");
    std::fs::create_dir_all(work.join(".git")).unwrap();
    std::fs::write(work.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(work.join("notes.secret"), "hush\n").unwrap();
    Some((session, work))
}

#[test]
fn write_rules_refuse_writes_below_git_with_eacces_on_lsm() {
    let Some((mut session, work)) = started() else {
        return;
    };
    if session.backend() != Backend::Lsm {
        // The cgroup backend's answer is the next test's subject.
        assert!(
            !session.not_enforced().is_empty(),
            "the cgroup backend must say it does not hold the file rules"
        );
        return;
    }
    let config = work.join(".git/config");
    let script = "echo x > .git/config";
    assert_refused(&shell(&session, &work, script), script);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "[core]\n");
    let event = session.expect_event(script, EVENT_TIMEOUT, |e| e.kind == EventKind::Write);
    assert_eq!(event.action, Action::Eacces, "{event:#?}");
    assert_eq!(event.decision, Decision::Forbidden, "{event:#?}");
    assert_eq!(
        event.path.as_deref(),
        Some(config.to_str().unwrap()),
        "{event:#?}"
    );
    let rule = &session.image().rules[event.rule.expect("a rule") as usize];
    assert_eq!(rule.origin.as_ref().map(|o| o.line), Some(1), "{rule:#?}");
    assert_eq!(
        session.describe(&event),
        format!(
            "guard: refused write of `{}`: policy forbids writing files matching `.git/**` (test.rules:1)",
            config.display()
        )
    );

    // Every way of changing what is below .git.
    for script in [
        "echo x >> .git/config",
        "mkdir .git/new-folder",
        "rm .git/config",
        "mv .git/config moved",
        "mv notes.secret .git/moved-in",
        "truncate -s 0 .git/config",
    ] {
        assert_refused(&shell(&session, &work, script), script);
    }
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "[core]\n");
    // A new file is decided when it is opened, just after the kernel made it: the open is
    // refused and the file stays empty.
    let script = "echo x > .git/new-file";
    assert_refused(&shell(&session, &work, script), script);
    assert_eq!(
        std::fs::read(work.join(".git/new-file")).unwrap_or_default(),
        b""
    );
    for gone in [".git/new-folder", ".git/moved-in", "moved"] {
        assert!(!work.join(gone).exists(), "{gone} exists");
    }
    // Reading below .git and writing elsewhere are fine.
    assert_ok(
        &shell(&session, &work, "cat .git/config"),
        "cat .git/config",
    );
    let script = "echo x > elsewhere && rm elsewhere && mkdir d && mv d e && rmdir e";
    assert_ok(&shell(&session, &work, script), script);
}

#[test]
fn an_ask_read_rule_refuses_the_read_until_approved_on_lsm() {
    let Some((mut session, work)) = started() else {
        return;
    };
    if session.backend() != Backend::Lsm {
        assert!(!session.not_enforced().is_empty());
        return;
    }
    let script = "cat notes.secret";
    let out = shell(&session, &work, script);
    assert_refused(&out, script);
    assert!(out.stdout.is_empty(), "nothing was read");
    let event = session.expect_event(script, EVENT_TIMEOUT, |e| e.kind == EventKind::Read);
    assert_eq!(event.decision, Decision::Prompt, "{event:#?}");
    assert_eq!(event.action, Action::Eacces, "{event:#?}");
    // Writing it is no read.
    assert_ok(
        &shell(&session, &work, "echo more >> notes.secret"),
        "append",
    );
}

/// A denied read is the kernel's file hook, beside the sandbox's write confinement: it stays
/// denied under every mode, and for a command whose exec was approved.
#[test]
fn a_denied_read_stays_denied_in_every_sandbox_mode_and_after_an_approval_on_lsm() {
    use guard::asks::{Approval, ApprovalMode, ApprovalTarget};
    use guard::confine::sandbox::SandboxPlan;
    use guard::policy::sandbox::SandboxMode;

    let rules =
        "rule_set(deny=[\"read(*.env)\"])\nprefix_rule(pattern=[\"cat\"], decision=\"prompt\")\n";
    let dir = tempfile::tempdir().expect("making a temporary folder");
    let Some(mut session) =
        session_from_files_or_skip(dir, &[("test.rules", rules)], SessionOptions::default())
    else {
        return;
    };
    if session.backend() != Backend::Lsm {
        assert!(!session.not_enforced().is_empty());
        return;
    }
    let work = session.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("keys.env"), "TOKEN=1\n").unwrap();
    let cat = |session: &TestSession, mode: SandboxMode| -> Result<Output, String> {
        let plan = SandboxPlan::new(mode, &work, None, &[]);
        let restricted = Some(&plan).filter(|p| p.is_restricted());
        let (_, confinement) = session
            .write_confinement(&work, restricted, false)
            .expect("the sandbox's ruleset");
        let mut command = Command::new("cat");
        command
            .arg("keys.env")
            .current_dir(&work)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = session
            .spawn_confined(&mut command, &confinement, None)
            .map_err(|err| format!("{err:#}"))?;
        Ok(guard_tests::kernel::wait_output(child, RUN_TIMEOUT))
    };
    // Unapproved, the prompt rule stops cat itself (EPERM from its exec on this backend).
    let refused = cat(&session, SandboxMode::DangerFullAccess);
    assert!(
        refused
            .as_ref()
            .is_err_and(|err| err.contains("Operation not permitted")),
        "{refused:?}"
    );
    let scope = session.scope().id();
    session
        .hold_approval(Approval {
            ask: 1,
            mode: ApprovalMode::Session,
            by: "test".into(),
            target: ApprovalTarget::Exec {
                tokens: vec!["cat".into(), "keys.env".into()],
            },
            scope: None,
            for_scope: scope,
            until: None,
        })
        .expect("holding the approval");
    for mode in SandboxMode::RUNNABLE {
        let out = cat(&session, mode).expect("the approved cat starts");
        assert_refused(&out, &format!("cat keys.env under {}", mode.as_str()));
        assert!(
            out.stdout.is_empty(),
            "nothing was read under {}",
            mode.as_str()
        );
    }
}

#[test]
fn a_guarded_process_cannot_write_the_rules_file_that_guards_it_on_lsm() {
    let Some((session, work)) = started() else {
        return;
    };
    if session.backend() != Backend::Lsm {
        assert!(!session.not_enforced().is_empty());
        return;
    }
    let rules_file = session.rules_file.clone();
    for script in [
        format!("echo 'rule_set(allow=[\"*\"])' >> {}", rules_file.display()),
        format!("truncate -s 0 {}", rules_file.display()),
        format!("rm {}", rules_file.display()),
        format!("mv {} {}/stolen", rules_file.display(), work.display()),
    ] {
        assert_refused(&shell(&session, &work, &script), &script);
    }
    assert_eq!(std::fs::read_to_string(&rules_file).unwrap(), RULES);
    // Reading it is fine.
    let script = format!("cat {}", rules_file.display());
    let out = shell(&session, &work, &script);
    assert_ok(&out, &script);
    assert_eq!(String::from_utf8_lossy(&out.stdout), RULES);
}

#[test]
fn the_cgroup_backend_reports_file_rules_as_not_enforced() {
    let options = SessionOptions {
        backend: Some(Backend::Cgroup),
        ..SessionOptions::default()
    };
    let dir = tempfile::tempdir().expect("making a temporary folder");
    let Some(session) = session_from_files_or_skip(dir, &[("test.rules", RULES)], options) else {
        return;
    };
    let gaps = session.not_enforced();
    let texts: Vec<&str> = gaps.iter().map(|g| g.rule.as_str()).collect();
    assert!(
        texts.iter().any(|t| t.contains("write(.git/**)")),
        "{gaps:#?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("read(*.secret)")),
        "{gaps:#?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("protected")),
        "the protected paths are file rules too: {gaps:#?}"
    );
    for gap in &gaps {
        assert!(gap.reason.contains("cgroup"), "{gap:#?}");
    }
    // Not held, so not stopped: nobody may think otherwise.
    let work = session.path().join("work");
    std::fs::create_dir_all(work.join(".git")).unwrap();
    let script = "echo x > .git/config";
    assert_ok(&shell(&session, &work, script), script);
}
