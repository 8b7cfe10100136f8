//! Exec decisions in the real kernel (docs/design.md, "Decisions in the kernel"): a forbidden program
//! does not run however it is reached, argv rules stop `git push` but not `git status` and cannot
//! be raced, events name the rule's file and line, only the session's scope is enforced, nothing
//! stays loaded after a session, and audit-only records without refusing.
//!
//! The programs are copies of `touch` (and `sh`) in each test's temporary folder under names
//! nothing else uses, so the side effect that must not happen is a file that does not appear.
//! Both backends: on `cgroup` a refused exec is SIGKILL before the new image runs; on `lsm` a
//! refusal by identity or name fails `execve` with EPERM, while argv refusals are SIGKILL on both.
//! Needs root; without it, or where the kernel cannot run the programs, each test prints
//! `skipped: ...` (and fails when CI=true).

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{LSM_HOOKS, assert_absent, assert_exists, assert_ran, fresh_dir, stderr};
use guard::compile::kernel_dev;
use guard::kernel::Backend;
use guard::kernel::events::{Action, EventKind, KernelEvent};
use guard::policy::Decision;
use guard::session::SessionOptions;
use guard_tests::kernel::{
    TestSession, copy_program, helper, killed, session_in_or_skip, shell_program, touch_program,
};

const RUN_TIMEOUT: Duration = Duration::from_secs(20);
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// A temporary folder with the test's programs in it, and options that make one-token rules
/// look there first.
fn programs_dir() -> (tempfile::TempDir, SessionOptions) {
    let dir = tempfile::tempdir().expect("making a temporary folder");
    let options = SessionOptions {
        extra_path_dirs: vec![dir.path().to_path_buf()],
        ..SessionOptions::default()
    };
    (dir, options)
}

fn run(session: &TestSession, command: &mut Command) -> io::Result<Output> {
    session.run(command, RUN_TIMEOUT)
}

/// The exec was refused the way `backend` refuses a program by identity or name: SIGKILL
/// (`cgroup`) or EPERM from execve (`lsm`).
fn assert_exec_refused(backend: Backend, what: &str, result: io::Result<Output>) {
    match (backend, result) {
        (Backend::Cgroup, Ok(output)) if killed(&output.status) => {}
        (Backend::Lsm, Err(err)) if err.kind() == io::ErrorKind::PermissionDenied => {}
        (backend, Ok(output)) => panic!(
            "{what}: expected the {} backend's refusal, got {} (stderr: {})",
            backend.as_str(),
            output.status,
            stderr(&output)
        ),
        (backend, Err(err)) => panic!(
            "{what}: expected the {} backend's refusal, got the error {err}",
            backend.as_str()
        ),
    }
}

/// A refusal by argv: SIGKILL on both backends.
fn assert_killed(what: &str, result: io::Result<Output>) {
    match result {
        Ok(output) if killed(&output.status) => {}
        Ok(output) => panic!(
            "{what}: expected SIGKILL, got {} (stderr: {})",
            output.status,
            stderr(&output)
        ),
        Err(err) => panic!("{what}: expected SIGKILL, the exec failed: {err}"),
    }
}

/// `sh -c` reporting that the program it ran was refused: killed (137, or the shell itself when
/// it exec'd the command in place) on `cgroup`; EPERM's "Operation not permitted", 126, on `lsm`.
fn assert_shell_saw_refusal(backend: Backend, what: &str, result: io::Result<Output>) {
    let output = result.unwrap_or_else(|err| panic!("{what}: the shell did not start: {err}"));
    let ok = match backend {
        Backend::Cgroup => killed(&output.status) || output.status.code() == Some(137),
        Backend::Lsm => {
            output.status.code() == Some(126) && stderr(&output).contains("Operation not permitted")
        }
    };
    assert!(
        ok,
        "{what}: expected the {} backend's refusal through sh, got {} (stderr: {})",
        backend.as_str(),
        output.status,
        stderr(&output)
    );
}

/// The kernel's (dev, ino) of a file, as identity entries and events carry it.
fn identity(path: &Path) -> (u64, u64) {
    let meta =
        std::fs::metadata(path).unwrap_or_else(|err| panic!("stat {}: {err}", path.display()));
    (kernel_dev(meta.dev()), meta.ino())
}

/// Fails unless the compiled image holds `path`'s identity (else a later "it ran" would be the
/// compiler's fault, not the kernel's).
fn assert_identity_compiled(session: &TestSession, path: &Path) {
    let (dev, ino) = identity(path);
    assert!(
        session
            .image()
            .identities
            .iter()
            .any(|e| (e.dev, e.ino) == (dev, ino)),
        "the image has no identity for {} ({dev}:{ino}); identities: {:?}; warnings: {:?}",
        path.display(),
        session.image().identities,
        session.image().warnings
    );
}

fn rule_origin(session: &TestSession, event: &KernelEvent) -> (String, usize) {
    let id = event
        .rule
        .unwrap_or_else(|| panic!("the event names no rule: {event:#?}"));
    let rule = session.image().rules.get(id as usize).unwrap_or_else(|| {
        panic!(
            "rule id {id} is not in the image ({} rules)",
            session.image().rules.len()
        )
    });
    let origin = rule
        .origin
        .as_ref()
        .unwrap_or_else(|| panic!("rule {id} has no origin"));
    (origin.file.to_string(), origin.line)
}

fn forbidden_rules() -> &'static str {
    "# kernel_exec: one program forbidden by name\nprefix_rule(pattern=[\"gt-forbidden\"], decision=\"forbidden\")\n"
}

#[test]
fn a_forbidden_program_does_not_run_by_any_path_or_link_while_others_do() {
    let (dir, options) = programs_dir();
    let touch = touch_program();
    let forbidden = copy_program(&touch, dir.path(), "gt-forbidden");
    let allowed = copy_program(&touch, dir.path(), "gt-allowed");
    // Same bytes as the forbidden program, another file: runs (identity is the file, not its
    // contents or where it came from).
    let copy = copy_program(&touch, dir.path(), "gt-copy");
    let symlink = dir.path().join("gt-symlink");
    std::os::unix::fs::symlink(&forbidden, &symlink).unwrap();
    let hardlink = dir.path().join("gt-hardlink");
    std::fs::hard_link(&forbidden, &hardlink).unwrap();
    let Some(mut session) = session_in_or_skip(dir, forbidden_rules(), options) else {
        return;
    };
    let backend = session.backend();
    assert_identity_compiled(&session, &forbidden);
    let markers = session.path().join("markers");
    std::fs::create_dir(&markers).unwrap();
    let marker = |name: &str| markers.join(name);

    assert_ran(
        "gt-allowed",
        run(&session, Command::new(&allowed).arg(marker("allowed"))),
    );
    assert_exists(&marker("allowed"), "an allowed program runs in the scope");
    assert_ran(
        "gt-copy",
        run(&session, Command::new(&copy).arg(marker("copy"))),
    );
    assert_exists(
        &marker("copy"),
        "a copy of the forbidden program is another file",
    );

    assert_exec_refused(
        backend,
        "gt-forbidden by absolute path",
        run(&session, Command::new(&forbidden).arg(marker("absolute"))),
    );
    assert_absent(
        &marker("absolute"),
        "the forbidden program must not run by its absolute path",
    );

    let relative = run(
        &session,
        Command::new("./gt-forbidden")
            .arg(marker("relative"))
            .current_dir(session.path()),
    );
    assert_exec_refused(backend, "./gt-forbidden", relative);
    assert_absent(
        &marker("relative"),
        "the forbidden program must not run by a relative path",
    );

    assert_exec_refused(
        backend,
        "a symlink to gt-forbidden",
        run(&session, Command::new(&symlink).arg(marker("symlink"))),
    );
    assert_absent(
        &marker("symlink"),
        "the forbidden program must not run through a symlink",
    );

    // The hard link has another name (no name entry matches `gt-hardlink`): only the file's
    // identity catches it. The event proves which file it was.
    let _ = session.drain_events(Duration::from_millis(50), Duration::from_secs(2));
    assert_exec_refused(
        backend,
        "a hard link to gt-forbidden",
        run(&session, Command::new(&hardlink).arg(marker("hardlink"))),
    );
    assert_absent(
        &marker("hardlink"),
        "the forbidden program must not run through a hard link",
    );
    let (dev, ino) = identity(&forbidden);
    let event = session.expect_event("the hard link's refusal", EVENT_TIMEOUT, |e| {
        e.kind == EventKind::Exec && e.ino == ino
    });
    assert_eq!(
        (event.dev, event.ino),
        (dev, ino),
        "the refused file's identity: {event:#?}"
    );
    assert_eq!(event.decision, Decision::Forbidden, "{event:#?}");
    assert_eq!(
        event.exe,
        hardlink.to_str().unwrap(),
        "the event names the path given to exec: {event:#?}"
    );
}

#[test]
fn a_forbidden_program_does_not_run_through_a_shell() {
    let (dir, options) = programs_dir();
    let touch = touch_program();
    copy_program(&touch, dir.path(), "gt-forbidden");
    copy_program(&touch, dir.path(), "gt-allowed");
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    );
    let Some(session) = session_in_or_skip(dir, forbidden_rules(), options) else {
        return;
    };
    let backend = session.backend();
    let sh = shell_program();
    let forbidden_marker = session.path().join("by-shell-forbidden");
    let allowed_marker = session.path().join("by-shell-allowed");

    let allowed = run(
        &session,
        Command::new(&sh)
            .arg("-c")
            .arg(format!("gt-allowed '{}'", allowed_marker.display()))
            .env("PATH", &path),
    );
    assert_ran("sh -c gt-allowed", allowed);
    assert_exists(
        &allowed_marker,
        "sh finds and runs an allowed program on PATH",
    );

    let forbidden = run(
        &session,
        Command::new(&sh)
            .arg("-c")
            .arg(format!("gt-forbidden '{}'", forbidden_marker.display()))
            .env("PATH", &path),
    );
    assert_shell_saw_refusal(backend, "sh -c gt-forbidden", forbidden);
    assert_absent(
        &forbidden_marker,
        "a forbidden program must not run when a shell starts it",
    );
}

#[test]
fn a_forbidden_interpreter_does_not_run_a_script() {
    let (dir, options) = programs_dir();
    let sh = shell_program();
    let touch = touch_program();
    let forbidden_shell = copy_program(&sh, dir.path(), "gt-shell");
    let allowed_shell = copy_program(&sh, dir.path(), "gt-shell-ok");
    let forbidden_marker = dir.path().join("by-forbidden-interpreter");
    let allowed_marker = dir.path().join("by-allowed-interpreter");
    let script = |name: &str, interpreter: &Path, marker: &Path| -> PathBuf {
        let path = dir.path().join(name);
        let text = format!(
            "#!{}\n{} '{}'\n",
            interpreter.display(),
            touch.display(),
            marker.display()
        );
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    };
    let forbidden_script = script("forbidden-script", &forbidden_shell, &forbidden_marker);
    let allowed_script = script("allowed-script", &allowed_shell, &allowed_marker);
    let rules = "prefix_rule(pattern=[\"gt-shell\"], decision=\"forbidden\")\n";
    let Some(session) = session_in_or_skip(dir, rules, options) else {
        return;
    };
    let backend = session.backend();
    assert_identity_compiled(&session, &forbidden_shell);

    assert_ran(
        "a script for gt-shell-ok",
        run(&session, &mut Command::new(&allowed_script)),
    );
    assert_exists(&allowed_marker, "a script with an allowed interpreter runs");

    assert_exec_refused(
        backend,
        "a script for gt-shell",
        run(&session, &mut Command::new(&forbidden_script)),
    );
    assert_absent(
        &forbidden_marker,
        "a script must not run when its #! interpreter is forbidden",
    );
}

/// A folder with a fake `git` (a copy of `touch`: `git push` makes a file named `push`).
fn fake_git() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("making a temporary folder");
    let git = copy_program(&touch_program(), dir.path(), "git");
    (dir, git)
}

#[test]
fn an_argv_rule_stops_git_push_but_not_git_status() {
    let (dir, git) = fake_git();
    let rules = "prefix_rule(pattern=[\"git\", \"push\"], decision=\"forbidden\")\n";
    let Some(session) = session_in_or_skip(dir, rules, SessionOptions::default()) else {
        return;
    };
    let work = fresh_dir(session.path(), "work");

    assert_ran(
        "git status",
        run(
            &session,
            Command::new(&git).arg("status").current_dir(&work),
        ),
    );
    assert_exists(&work.join("status"), "git status is not forbidden");

    assert_killed(
        "git push",
        run(&session, Command::new(&git).arg("push").current_dir(&work)),
    );
    assert_absent(&work.join("push"), "git push is forbidden");
    assert_killed(
        "git push origin main",
        run(
            &session,
            Command::new(&git)
                .args(["push", "origin", "main"])
                .current_dir(&work),
        ),
    );
    for file in ["push", "origin", "main"] {
        assert_absent(&work.join(file), "git push origin main is forbidden");
    }
    // argv[0] is the caller's choice and never what is compared: token 0 is the file's name.
    assert_killed(
        "git push with argv[0] = ls",
        run(
            &session,
            Command::new(&git).arg0("ls").arg("push").current_dir(&work),
        ),
    );
    assert_absent(
        &work.join("push"),
        "git push is forbidden whatever argv[0] says",
    );
}

#[test]
fn an_argv_rule_with_alternatives_refuses_each_with_its_decision() {
    let (dir, git) = fake_git();
    let rules = "prefix_rule(pattern=[\"git\", [\"push\", \"fetch\"]], decision=\"prompt\")\n";
    let Some(mut session) = session_in_or_skip(dir, rules, SessionOptions::default()) else {
        return;
    };
    let work = fresh_dir(session.path(), "work");

    for sub in ["push", "fetch"] {
        let _ = session.drain_events(Duration::from_millis(50), Duration::from_secs(2));
        assert_killed(
            &format!("git {sub}"),
            run(&session, Command::new(&git).arg(sub).current_dir(&work)),
        );
        assert_absent(&work.join(sub), "a prompt rule refuses until approved");
        let event = session.expect_event(&format!("git {sub}"), EVENT_TIMEOUT, |e| {
            e.kind == EventKind::Exec && e.argv.get(1).map(String::as_str) == Some(sub)
        });
        assert_eq!(event.decision, Decision::Prompt, "{event:#?}");
        assert_eq!(event.action, Action::Sigkill, "{event:#?}");
        // A prompt is worded as a request for approval, never as a prohibition.
        let said = session.describe(&event);
        assert!(
            said.contains("approv")
                && !said.contains("forbids")
                && said.contains("`git [push|fetch]`"),
            "{said}"
        );
    }
    assert_ran(
        "git status",
        run(
            &session,
            Command::new(&git).arg("status").current_dir(&work),
        ),
    );
    assert_exists(
        &work.join("status"),
        "git status matches neither alternative",
    );
}

#[test]
fn racing_argv_against_the_exec_never_runs_git_push() {
    const ITERATIONS: u32 = 1000;
    let (dir, git) = fake_git();
    let rules = "prefix_rule(pattern=[\"git\", \"push\"], decision=\"forbidden\")\n";
    let Some(mut session) = session_in_or_skip(dir, rules, SessionOptions::default()) else {
        return;
    };
    let work = fresh_dir(session.path(), "race");
    let racer = helper("argv-racer", env!("CARGO_BIN_EXE_argv-racer"));
    let started = Instant::now();
    let output = session
        .run(
            Command::new(&racer)
                .arg(&git)
                .arg(&work)
                .arg(ITERATIONS.to_string()),
            Duration::from_secs(150),
        )
        .unwrap_or_else(|err| panic!("argv-racer did not start: {err}"));
    let elapsed = started.elapsed();
    let report = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(
        output.status.success(),
        "argv-racer failed: {} ({report}; {})",
        output.status,
        stderr(&output)
    );

    // The evidence is the folders: one per iteration, holding what the new image touched.
    let (mut pushed, mut status, mut empty, mut other) = (0u32, 0u32, 0u32, 0u32);
    for i in 0..ITERATIONS {
        let folder = work.join(i.to_string());
        let names: Vec<String> = match std::fs::read_dir(&folder) {
            Ok(entries) => entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(err) => panic!("iteration {i} left no folder ({err}); the racer said: {report}"),
        };
        match names.as_slice() {
            [] => empty += 1,
            [name] if name == "status" => status += 1,
            _ if names.iter().any(|n| n == "push") => pushed += 1,
            _ => other += 1,
        }
    }
    let events = session.drain_events(Duration::from_millis(200), Duration::from_secs(10));
    let push_kills = events
        .iter()
        .filter(|e| {
            e.kind == EventKind::Exec
                && e.action == Action::Sigkill
                && e.argv.get(1).map(String::as_str) == Some("push")
        })
        .count();
    println!(
        "argv race: {report}; folders: push={pushed} status={status} empty={empty} other={other}; \
         push refusals reported: {push_kills}; {elapsed:.1?}"
    );
    assert_eq!(
        pushed, 0,
        "`git push` ran {pushed} times out of {ITERATIONS} ({report})"
    );
    // Every iteration that did not run is one the kernel killed, and said so.
    // Every child that exited 0 left `status`; the others left nothing: killed, or (argv torn
    // mid-copy into a string that is neither word, e.g. `statu` running into the next string)
    // a `touch` that failed.
    let count = |key: &str| -> u32 {
        report
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("the racer's report has no {key}: {report:?}"))
    };
    let (killed, exited, failed) = (count("killed"), count("exited"), count("other"));
    assert_eq!(
        count("iterations"),
        ITERATIONS,
        "the racer finished every iteration: {report}"
    );
    assert_eq!(
        status + other,
        exited,
        "each child that exited 0 touched one file: {report}"
    );
    assert_eq!(
        empty,
        killed + failed,
        "each empty folder is a killed or failed child: {report}"
    );
    assert_eq!(
        push_kills as u32, killed,
        "each killed `git push` has its event"
    );
    // Both outcomes happen (argv really changes under the exec), else this raced nothing.
    assert!(
        killed > 0 && exited > 0,
        "the race never saw both arguments: {report}"
    );
}

#[test]
fn events_name_the_process_the_command_and_the_rule() {
    let (dir, options) = programs_dir();
    let touch = touch_program();
    let git = copy_program(&touch, dir.path(), "git");
    let forbidden = copy_program(&touch, dir.path(), "gt-forbidden");
    let rules = "# kernel_exec: events\n\
                 prefix_rule(pattern=[\"gt-forbidden\"], decision=\"forbidden\")\n\
                 \n\
                 prefix_rule(pattern=[\"git\", \"push\"], decision=\"forbidden\")\n";
    let Some(mut session) = session_in_or_skip(dir, rules, options) else {
        return;
    };
    let backend = session.backend();
    let rules_file = session.rules_file.display().to_string();
    let work = fresh_dir(session.path(), "work");
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };

    // By argv: SIGKILL on both backends, decided on the new image (so argv and exe are its own).
    let mut command = Command::new(&git);
    command
        .arg0("git")
        .args(["push", "origin", "main"])
        .current_dir(&work);
    command.stdin(std::process::Stdio::null());
    let mut child = session.spawn(&mut command).expect("spawning git push");
    let pid = child.id();
    let status = guard_tests::kernel::wait_status(&mut child, RUN_TIMEOUT);
    assert!(
        killed(&status),
        "git push origin main: expected SIGKILL, got {status}"
    );
    let event = session.expect_event("git push origin main", EVENT_TIMEOUT, |e| e.pid == pid);
    assert_eq!(event.kind, EventKind::Exec, "{event:#?}");
    assert_eq!(event.decision, Decision::Forbidden, "{event:#?}");
    assert_eq!(event.action, Action::Sigkill, "{event:#?}");
    assert!(!event.audit_only && !event.unmatched, "{event:#?}");
    assert_eq!((event.pid, event.tgid), (pid, pid), "{event:#?}");
    assert_eq!(
        event.ppid,
        std::process::id(),
        "the parent is this test process: {event:#?}"
    );
    assert_eq!((event.uid, event.gid), (uid, gid), "{event:#?}");
    assert_eq!(event.cgroup_id, session.scope().id(), "{event:#?}");
    assert!(!event.comm.is_empty(), "{event:#?}");
    assert_eq!(event.exe, git.to_str().unwrap(), "{event:#?}");
    assert_eq!(event.argv, ["git", "push", "origin", "main"], "{event:#?}");
    assert_eq!(identity(&git), (event.dev, event.ino), "{event:#?}");
    let line = session.line_of("\"git\", \"push\"");
    assert_eq!(rule_origin(&session, &event), (rules_file.clone(), line));
    assert_eq!(
        session.describe(&event),
        format!(
            "guard: refused exec of `git push origin main`: policy forbids commands starting with `git push` (test.rules:{line})"
        )
    );

    // By identity: SIGKILL (cgroup) or EPERM (lsm).
    let marker = session.path().join("marker");
    let mut command = Command::new(&forbidden);
    command.arg(&marker).stdin(std::process::Stdio::null());
    let spawned = session.spawn(&mut command);
    let pid = match (backend, spawned) {
        (Backend::Cgroup, Ok(mut child)) => {
            let status = guard_tests::kernel::wait_status(&mut child, RUN_TIMEOUT);
            assert!(
                killed(&status),
                "gt-forbidden: expected SIGKILL, got {status}"
            );
            Some(child.id())
        }
        (Backend::Lsm, Err(err)) => {
            let kind = err.downcast_ref::<io::Error>().map(io::Error::kind);
            assert_eq!(
                kind,
                Some(io::ErrorKind::PermissionDenied),
                "gt-forbidden: {err:#}"
            );
            // The child that got EPERM is gone, and Command does not say its pid.
            None
        }
        (backend, Ok(mut child)) => {
            let status = guard_tests::kernel::wait_status(&mut child, RUN_TIMEOUT);
            panic!(
                "gt-forbidden on {}: expected a refusal, got {status}",
                backend.as_str()
            )
        }
        (backend, Err(err)) => panic!(
            "gt-forbidden on {}: expected a refusal, got {err:#}",
            backend.as_str()
        ),
    };
    assert_absent(&marker, "gt-forbidden is forbidden");
    let (dev, ino) = identity(&forbidden);
    let event = session.expect_event("gt-forbidden", EVENT_TIMEOUT, |e| {
        e.ino == ino && e.dev == dev
    });
    let expected_action = if backend == Backend::Lsm {
        Action::Eperm
    } else {
        Action::Sigkill
    };
    assert_eq!(event.kind, EventKind::Exec, "{event:#?}");
    assert_eq!(event.decision, Decision::Forbidden, "{event:#?}");
    assert_eq!(event.action, expected_action, "{event:#?}");
    if let Some(pid) = pid {
        assert_eq!((event.pid, event.tgid), (pid, pid), "{event:#?}");
    } else {
        assert!(event.pid > 0 && event.tgid > 0, "{event:#?}");
    }
    assert_eq!(
        event.ppid,
        std::process::id(),
        "the parent is this test process: {event:#?}"
    );
    assert_eq!((event.uid, event.gid), (uid, gid), "{event:#?}");
    assert_eq!(event.cgroup_id, session.scope().id(), "{event:#?}");
    assert!(!event.comm.is_empty(), "{event:#?}");
    assert_eq!(
        event.exe,
        forbidden.to_str().unwrap(),
        "the path given to exec: {event:#?}"
    );
    let line = session.line_of("gt-forbidden");
    assert_eq!(rule_origin(&session, &event), (rules_file, line));
    let shown = if event.argv.is_empty() {
        // The `lsm` hook decides before the new image exists: no argv of its own yet.
        forbidden.display().to_string()
    } else {
        assert_eq!(
            event.argv,
            [forbidden.to_str().unwrap(), marker.to_str().unwrap()],
            "{event:#?}"
        );
        format!("{} {}", forbidden.display(), marker.display())
    };
    assert_eq!(
        session.describe(&event),
        format!(
            "guard: refused exec of `{shown}`: policy forbids commands starting with `gt-forbidden` (test.rules:{line})"
        )
    );
}

#[test]
fn processes_outside_the_scope_are_untouched() {
    let (dir, options) = programs_dir();
    let forbidden = copy_program(&touch_program(), dir.path(), "gt-forbidden");
    let Some(session) = session_in_or_skip(dir, forbidden_rules(), options) else {
        return;
    };
    let backend = session.backend();
    let inside = session.path().join("inside");
    let outside = session.path().join("outside");

    assert_exec_refused(
        backend,
        "gt-forbidden in the scope",
        run(&session, Command::new(&forbidden).arg(&inside)),
    );
    assert_absent(&inside, "the session enforces in its scope");

    // This test process is not in the scope: the same program runs, while the session holds.
    let output =
        guard_tests::kernel::retry_while_busy(|| Command::new(&forbidden).arg(&outside).output())
            .unwrap_or_else(|err| panic!("gt-forbidden outside the scope did not start: {err}"));
    let status = output.status;
    assert!(status.success(), "gt-forbidden outside the scope: {status}");
    assert_exists(&outside, "a process outside the scope is not guard's");
    drop(session);
}

/// The names guard's programs have in the kernel (which keeps at most 15 bytes of a name),
/// besides the [`LSM_HOOKS`].
const PROGRAM_NAMES: &[&str] = &[
    "sched_process_exec",
    "connect4",
    "connect6",
    "sendmsg4",
    "sendmsg6",
    "recvmsg4",
    "recvmsg6",
    "sock_create",
    "device_access",
    "connect_unix",
    "sendmsg_unix",
    "held_egress",
    "held_sockops",
    "getpeername4",
    "getpeername6",
];

fn is_guard_program_name(kernel_name: &str) -> bool {
    !kernel_name.is_empty()
        && PROGRAM_NAMES
            .iter()
            .chain(LSM_HOOKS)
            .any(|name| name.starts_with(kernel_name))
}

/// Of `ids`, those still loaded, and the links still attached that run one of them.
fn still_loaded(ids: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let programs = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|info| info.id())
        .filter(|id| ids.contains(id))
        .collect();
    let links = aya::programs::loaded_links()
        .filter_map(Result::ok)
        .filter(|link| ids.contains(&link.program_id()))
        .map(|link| link.id())
        .collect();
    (programs, links)
}

/// Robust against other tests' sessions running in parallel threads: this follows the kernel ids
/// of this session's own programs (ids are not reused while a program lives) instead of counting
/// programs by name machine-wide.
#[test]
fn nothing_stays_loaded_or_attached_after_a_session() {
    let (dir, options) = programs_dir();
    copy_program(&touch_program(), dir.path(), "gt-forbidden");
    let Some(mut session) = session_in_or_skip(dir, forbidden_rules(), options) else {
        return;
    };
    let backend = session.backend();
    let ours = session.program_ids();
    // The unix socket hooks (connect and sendmsg) where the kernel has them (6.7+).
    let unix = if session.session.enforcer().decides_unix_sockets() {
        2
    } else {
        0
    };
    let expected = unix
        + match backend {
            // The exec tracepoint, sock_create, cgroup/dev, and the six sock_addr hooks
            // (connect, sendmsg and recvmsg, IPv4 and IPv6).
            Backend::Cgroup => 9,
            // The exec tracepoint, sock_create, cgroup/dev, and nine LSM hooks (exec, net,
            // files).
            Backend::Lsm => 12,
        };
    assert_eq!(
        ours.len(),
        expected,
        "loaded programs on {}: {ours:?}",
        backend.as_str()
    );
    let ids: Vec<u32> = ours.iter().map(|(_, id)| *id).collect();
    let kernel_names: Vec<(u32, String)> = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|info| ids.contains(&info.id()))
        .map(|info| {
            (
                info.id(),
                info.name_as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        kernel_names.len(),
        ids.len(),
        "the kernel lists all our programs: {kernel_names:?} vs {ours:?}"
    );
    for (id, name) in &kernel_names {
        assert!(
            is_guard_program_name(name),
            "program {id} is named {name:?}, not one of guard's"
        );
    }
    let (_, links) = still_loaded(&ids);
    assert_eq!(
        links.len(),
        expected,
        "each program is attached once: links {links:?}"
    );

    drop(session);
    // Freeing is asynchronous (RCU): poll, bounded.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let (programs, links) = still_loaded(&ids);
        if programs.is_empty() && links.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "3 s after the session ended, programs {programs:?} and links {links:?} of {ours:?} remain"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The verifier walks at most 1,000,000 instructions per program. The exec program once grew
/// past that on a new kernel build and every kernel test failed at load (verified counts move
/// with the kernel and the compiler): this fails first, at 0.8 of the limit, naming the count.
const VERIFIER_LIMIT: u32 = 1_000_000;
const VERIFIER_BUDGET: u32 = VERIFIER_LIMIT / 10 * 8;

#[test]
fn every_program_stays_within_0_8_of_the_verifiers_instruction_limit() {
    let (dir, options) = programs_dir();
    let Some(mut session) = session_in_or_skip(dir, forbidden_rules(), options) else {
        return;
    };
    let ours = session.program_ids();
    let mut counts = Vec::new();
    for info in aya::programs::loaded_programs().filter_map(Result::ok) {
        let Some((name, _)) = ours.iter().find(|(_, id)| *id == info.id()) else {
            continue;
        };
        let count = info.verified_instruction_count().unwrap_or_else(|| {
            panic!("the kernel reports no verified instruction count for {name}")
        });
        counts.push((name.clone(), count));
    }
    assert_eq!(
        counts.len(),
        ours.len(),
        "every program was found: {ours:?}"
    );
    println!("verified instructions: {counts:?}");
    for (name, count) in &counts {
        assert!(
            *count <= VERIFIER_BUDGET,
            "{name}: the verifier walked {count} instructions, {:.2} of its limit of \
             {VERIFIER_LIMIT}: split or simplify it before a kernel or compiler change refuses it",
            f64::from(*count) / f64::from(VERIFIER_LIMIT)
        );
    }
}

#[test]
fn audit_only_mode_records_without_refusing() {
    let (dir, mut options) = programs_dir();
    options.audit_only = true;
    let forbidden = copy_program(&touch_program(), dir.path(), "gt-forbidden");
    let Some(mut session) = session_in_or_skip(dir, forbidden_rules(), options) else {
        return;
    };
    let marker = session.path().join("marker");
    assert_ran(
        "gt-forbidden in audit-only mode",
        run(&session, Command::new(&forbidden).arg(&marker)),
    );
    assert_exists(&marker, "audit-only refuses nothing");
    let (dev, ino) = identity(&forbidden);
    let event = session.expect_event("the audit-only match", EVENT_TIMEOUT, |e| {
        e.ino == ino && e.dev == dev
    });
    assert_eq!(event.decision, Decision::Forbidden, "{event:#?}");
    assert_eq!(event.action, Action::None, "{event:#?}");
    assert!(event.audit_only, "{event:#?}");
    assert_eq!(
        rule_origin(&session, &event).1,
        session.line_of("gt-forbidden")
    );
    assert!(
        session
            .describe(&event)
            .starts_with("guard: audit-only, would refuse exec of "),
        "{}",
        session.describe(&event)
    );
}

#[test]
fn an_audit_only_rule_records_without_refusing_while_others_enforce() {
    let (dir, options) = programs_dir();
    let touch = touch_program();
    let audited = copy_program(&touch, dir.path(), "gt-audited");
    let enforced = copy_program(&touch, dir.path(), "gt-enforced");
    let git = copy_program(&touch, dir.path(), "git");
    let rules = "prefix_rule(pattern=[\"gt-audited\"], decision=\"forbidden\", audit_only=True)\n\
                 prefix_rule(pattern=[\"gt-enforced\"], decision=\"forbidden\")\n\
                 prefix_rule(pattern=[\"git\", \"push\"], decision=\"forbidden\", audit_only=True)\n";
    let Some(mut session) = session_in_or_skip(dir, rules, options) else {
        return;
    };
    let backend = session.backend();
    let work = fresh_dir(session.path(), "work");

    assert_exec_refused(
        backend,
        "gt-enforced",
        run(&session, Command::new(&enforced).arg(work.join("enforced"))),
    );
    assert_absent(&work.join("enforced"), "the enforced rule refuses");

    assert_ran(
        "gt-audited",
        run(&session, Command::new(&audited).arg(work.join("audited"))),
    );
    assert_exists(&work.join("audited"), "an audit-only rule refuses nothing");
    let (dev, ino) = identity(&audited);
    let event = session.expect_event("the audit-only rule", EVENT_TIMEOUT, |e| {
        e.ino == ino && e.dev == dev
    });
    assert_eq!(
        (event.decision, event.action, event.audit_only),
        (Decision::Forbidden, Action::None, true),
        "{event:#?}"
    );
    assert_eq!(
        rule_origin(&session, &event).1,
        session.line_of("gt-audited")
    );

    assert_ran(
        "git push (audit-only)",
        run(&session, Command::new(&git).arg("push").current_dir(&work)),
    );
    assert_exists(
        &work.join("push"),
        "an audit-only argv rule refuses nothing",
    );
    let event = session.expect_event("the audit-only argv rule", EVENT_TIMEOUT, |e| {
        e.argv.get(1).map(String::as_str) == Some("push")
    });
    assert_eq!(
        (event.decision, event.action, event.audit_only),
        (Decision::Forbidden, Action::None, true),
        "{event:#?}"
    );
    assert_eq!(
        rule_origin(&session, &event).1,
        session.line_of("\"git\", \"push\"")
    );
}
