//! Exec approvals and scope exemptions in the real kernel.
//!
//! Approvals (`EnforcementImage::add_exec_approval`): once a person approves the argv a `prompt`
//! refused, exactly that argv runs; a longer, shorter or different one is still refused, removing
//! the approval refuses it again, `forbidden` is never approved away, and an approval also lets an
//! unmatched exec run where the unmatched default is `prompt`.
//!
//! Scope (`Enforcer::exempt_scope`): the deepest listed cgroup decides, so a cgroup exempt below
//! one in scope runs what its parent refuses, and a cgroup listed in scope below an exempt one is
//! enforced again.
//!
//! The programs are copies of `touch` under names nothing else uses, so what must not happen is a
//! file that does not appear. Needs root; without it, or where the kernel cannot run the
//! programs, each test prints `skipped: ...` (and fails when CI=true).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{net_probe, stderr};
use guard::compile::EnforcementImage;
use guard::kernel::events::EventKind;
use guard::kernel::scope::ScopeCgroup;
use guard::session::SessionOptions;
use guard_tests::kernel::{
    TestSession, copy_program, exec_refused, killed, run_in, session_in_or_skip, touch_program,
};

const RUN_TIMEOUT: Duration = Duration::from_secs(20);

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// A temporary folder holding a copy of `touch` named `name`, and options that make one-token
/// rules look there first.
fn program_dir(name: &str) -> (tempfile::TempDir, PathBuf, SessionOptions) {
    let dir = tempfile::tempdir().expect("making a temporary folder");
    let program = copy_program(&touch_program(), dir.path(), name);
    let options = SessionOptions {
        extra_path_dirs: vec![dir.path().to_path_buf()],
        ..SessionOptions::default()
    };
    (dir, program, options)
}

/// Runs `program ARGS` in the session's scope, in a fresh folder (so the files `touch` makes
/// show what ran); the result and that folder.
fn run_args(session: &TestSession, program: &Path, args: &str) -> (io::Result<Output>, PathBuf) {
    run_args_in(session, session.scope(), program, args)
}

fn run_args_in(
    session: &TestSession,
    cgroup: &ScopeCgroup,
    program: &Path,
    args: &str,
) -> (io::Result<Output>, PathBuf) {
    let work = tempfile::Builder::new()
        .prefix("work-")
        .tempdir_in(session.path())
        .expect("making a work folder")
        .keep();
    let result = run_in(
        cgroup,
        Command::new(program).args(words(args)).current_dir(&work),
        RUN_TIMEOUT,
    );
    (result, work)
}

/// `program ARGS` ran: it exited 0 and touched one file per argument.
#[track_caller]
fn assert_runs(session: &TestSession, program: &Path, args: &str, why: &str) {
    let (result, work) = run_args(session, program, args);
    assert_ran(result, &work, args, why);
}

#[track_caller]
fn assert_ran(result: io::Result<Output>, work: &Path, args: &str, why: &str) {
    match result {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "`{args}`: expected it to run ({why}), got {} (stderr: {})",
            output.status,
            stderr(&output)
        ),
        Err(err) => panic!("`{args}`: expected it to run ({why}), the exec failed: {err}"),
    }
    for file in words(args) {
        assert!(
            work.join(&file).exists(),
            "`{args}` did not make {file}: {why}"
        );
    }
}

/// `program ARGS` was refused by argv: SIGKILL, nothing touched.
#[track_caller]
fn assert_killed(session: &TestSession, program: &Path, args: &str, why: &str) {
    let (result, work) = run_args(session, program, args);
    match &result {
        Ok(output) if killed(&output.status) => {}
        Ok(output) => panic!(
            "`{args}`: expected SIGKILL ({why}), got {} (stderr: {})",
            output.status,
            stderr(output)
        ),
        Err(err) => panic!("`{args}`: expected SIGKILL ({why}), the exec failed: {err}"),
    }
    assert_untouched(&work, args, why);
}

/// `program ARGS` in `cgroup` was refused either way a backend refuses an exec (SIGKILL; EPERM
/// for identity and name on `lsm`), nothing touched.
#[track_caller]
fn assert_refused_in(
    session: &TestSession,
    cgroup: &ScopeCgroup,
    program: &Path,
    args: &str,
    why: &str,
) {
    let (result, work) = run_args_in(session, cgroup, program, args);
    assert!(
        exec_refused(&result),
        "`{args}` in {}: expected a refusal ({why}), got {:?}",
        cgroup.path().display(),
        result.as_ref().map(|o| (o.status, stderr(o)))
    );
    assert_untouched(&work, args, why);
}

#[track_caller]
fn assert_untouched(work: &Path, args: &str, why: &str) {
    let made: Vec<_> = std::fs::read_dir(work).unwrap().collect();
    assert!(made.is_empty(), "`{args}` touched files: {why}");
}

/// `image` with `argv` approved for the scope `scope` (a cgroup id) alone.
fn with_approval(image: &EnforcementImage, scope: u64, argv: &str) -> EnforcementImage {
    let mut image = image.clone();
    image
        .add_exec_approval(
            scope,
            &words(argv),
            format!("approved exec `{argv}`"),
            format!("the command `{argv}`"),
        )
        .unwrap_or_else(|err| panic!("approving `{argv}`: {err}"));
    image
}

#[test]
fn an_approval_runs_exactly_the_approved_argv_and_nothing_else() {
    let (dir, program, options) = program_dir("gt-appr");
    let rules = "prefix_rule(pattern=[\"gt-appr\", \"push\"], decision=\"prompt\")\n";
    let Some(mut session) = session_in_or_skip(dir, rules, options) else {
        return;
    };
    let approved = "push origin main";
    assert_killed(&session, &program, approved, "a prompt rule refuses");

    let original = session.image().clone();
    let image = with_approval(
        &original,
        session.scope().id(),
        &format!("gt-appr {approved}"),
    );
    let stats = session.apply_image(image).expect("applying the approval");
    assert_eq!(stats.approvals, 1, "{stats:?}");
    let _ = session.drain_events(Duration::from_millis(50), Duration::from_secs(2));

    assert_runs(&session, &program, approved, "exactly the approved argv");
    assert_runs(
        &session,
        &program,
        approved,
        "and again: an approval is not used up",
    );
    let events = session.drain_events(Duration::from_millis(200), Duration::from_secs(2));
    assert!(
        !events.iter().any(|e| e.kind == EventKind::Exec),
        "an approved exec is an allow, with no event: {events:#?}"
    );
    // Approvals belong to the scope whose ask they answered: the same approval given to
    // another scope lets nothing through here.
    let elsewhere = with_approval(
        &original,
        session.scope().id() + 1,
        &format!("gt-appr {approved}"),
    );
    session
        .apply_image(elsewhere)
        .expect("applying another scope's approval");
    assert_killed(&session, &program, approved, "another scope's approval");
    let mine = with_approval(
        &original,
        session.scope().id(),
        &format!("gt-appr {approved}"),
    );
    session
        .apply_image(mine)
        .expect("applying the approval again");
    for other in [
        "push origin main --force",
        "push origin",
        "push other",
        "push origin maint",
        "push",
    ] {
        assert_killed(&session, &program, other, "only the exact argv is approved");
    }

    session
        .apply_image(original)
        .expect("applying the image without the approval");
    assert_killed(&session, &program, approved, "the approval was removed");
}

#[test]
fn forbidden_is_never_approved_away() {
    let (dir, program, options) = program_dir("gt-forb");
    copy_program(&touch_program(), dir.path(), "gt-forb-name");
    let rules = "prefix_rule(pattern=[\"gt-forb\", \"push\"], decision=\"forbidden\")\n\
                 prefix_rule(pattern=[\"gt-forb-name\"], decision=\"forbidden\")\n";
    let Some(mut session) = session_in_or_skip(dir, rules, options) else {
        return;
    };
    let by_name = session.path().join("gt-forb-name");
    let image = with_approval(
        session.image(),
        session.scope().id(),
        "gt-forb push origin main",
    );
    let image = with_approval(&image, session.scope().id(), "gt-forb-name made");
    session.apply_image(image).expect("applying the approvals");

    assert_killed(
        &session,
        &program,
        "push origin main",
        "an approval does not override an argv rule's forbidden",
    );
    let scope = session.scope();
    assert_refused_in(
        &session,
        scope,
        &by_name,
        "made",
        "an approval does not override a forbidden program",
    );
}

#[test]
fn an_approval_lets_an_unmatched_exec_run_where_the_default_is_prompt() {
    let (dir, program, options) = program_dir("gt-unm");
    let rules = "enforcement(unmatched_exec=\"prompt\")\n";
    let Some(mut session) = session_in_or_skip(dir, rules, options) else {
        return;
    };
    assert_killed(
        &session,
        &program,
        "made",
        "the unmatched default is prompt",
    );
    let image = with_approval(session.image(), session.scope().id(), "gt-unm made");
    session.apply_image(image).expect("applying the approval");
    assert_runs(&session, &program, "made", "the approved argv");
    assert_killed(
        &session,
        &program,
        "made more",
        "a longer argv is still unmatched, so prompt",
    );
    assert_killed(
        &session,
        &program,
        "other",
        "another argv is still unmatched",
    );
}

#[test]
fn an_approval_overrides_a_prompt_by_program_name() {
    let (dir, program, options) = program_dir("gt-ask");
    let rules = "prefix_rule(pattern=[\"gt-ask\"], decision=\"prompt\")\n";
    let Some(mut session) = session_in_or_skip(dir, rules, options) else {
        return;
    };
    let backend = session.backend();
    let scope = session.scope();
    assert_refused_in(
        &session,
        scope,
        &program,
        "made",
        "a prompt by name refuses",
    );
    let image = with_approval(session.image(), session.scope().id(), "gt-ask made");
    session.apply_image(image).expect("applying the approval");
    // On `lsm`, bprm_check_security lets a prompt through to the tracepoint while approvals
    // exist; the tracepoint runs the approved argv and kills the rest.
    assert_runs(&session, &program, "made", "the approved argv");
    let (result, work) = run_args(&session, &program, "other");
    match (backend, &result) {
        (_, Ok(output)) if killed(&output.status) => {}
        (backend, other) => panic!(
            "`gt-ask other` on {}: expected SIGKILL from the tracepoint, got {:?}",
            backend.as_str(),
            other.as_ref().map(|o| o.status)
        ),
    }
    assert_untouched(&work, "other", "not approved");
}

#[test]
fn the_deepest_listed_cgroup_decides_whether_a_process_is_in_scope() {
    let (dir, program, options) = program_dir("gt-scoped");
    let (_blocked_listener, blocked_port) = {
        let listener = std::net::TcpListener::bind("127.0.0.3:0").expect("listening on 127.0.0.3");
        let port = listener.local_addr().unwrap().port();
        (listener, port)
    };
    let rules = format!(
        "prefix_rule(pattern=[\"gt-scoped\"], decision=\"forbidden\")\n\
         address_rule(addresses=[\"127.0.0.3\"], ports=[{blocked_port}], decision=\"deny\")\n"
    );
    let Some(mut session) = session_in_or_skip(dir, &rules, options) else {
        return;
    };
    // P is the session's scope (listed in scope); P/x exempt; P/y not listed; P/x/z listed in
    // scope again. The connect hooks are attached to P, so they see P's descendants too.
    let parent_id = session.scope().id();
    let exempt = session.scope().child("x").expect("making P/x");
    let unlisted = session.scope().child("y").expect("making P/y");
    let rescoped = exempt.child("z").expect("making P/x/z");
    session
        .enforcer_mut()
        .exempt_scope(exempt.id())
        .expect("exempting P/x");
    session
        .enforcer_mut()
        .add_scope(rescoped.id())
        .expect("scoping P/x/z");
    assert_ne!(parent_id, exempt.id());

    let scope = session.scope();
    assert_refused_in(&session, scope, &program, "made", "P is in scope");
    assert_refused_in(
        &session,
        &unlisted,
        &program,
        "made",
        "P/y inherits P's scope",
    );
    assert_refused_in(
        &session,
        &rescoped,
        &program,
        "made",
        "P/x/z is listed in scope below the exemption",
    );
    let (result, work) = run_args_in(&session, &exempt, &program, "made");
    assert_ran(result, &work, "made", "P/x is exempt");

    let probe = net_probe();
    let connect = |cgroup: &ScopeCgroup| -> String {
        let output = run_in(
            cgroup,
            Command::new(&probe).args(["tcp", "127.0.0.3", &blocked_port.to_string()]),
            RUN_TIMEOUT,
        )
        .expect("net-probe starts");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    let eperm = format!("errno {}", libc::EPERM);
    assert_eq!(connect(&unlisted), eperm, "a connect in P/y is refused");
    assert_eq!(connect(&exempt), "ok", "a connect in P/x is exempt");
    assert_eq!(connect(&rescoped), eperm, "a connect in P/x/z is refused");

    // Without its listing, P/x is P's again.
    session
        .enforcer_mut()
        .remove_scope(exempt.id())
        .expect("unlisting P/x");
    assert_refused_in(&session, &exempt, &program, "made", "P/x is unlisted now");
    drop((rescoped, unlisted, exempt));
}
