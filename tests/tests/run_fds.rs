//! `guard run` as a process: it passes the command stdin, stdout and stderr only (and
//! `--preserve-fds N` more), so a descriptor inherited from its caller, such as a socket made
//! outside the scope that no hook ever decided, is not usable by the command; and a `kill -9` of
//! it leaves no scope (and no unenforced process) past the next `guard run` or daemon start.
//! Needs root (`guard run` loads the programs); without it each test prints `skipped: ...` (and
//! fails when CI=true).

use std::io::Read;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use guard::kernel::scope::cgroup_pids;
use guard_tests::daemon::{DaemonSetup, TestDaemon, guard_bin, text};
use guard_tests::kernel::{root_or_skip, wait_output};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Held by every test here that starts `guard run` or a daemon: each start removes the scopes
/// a killed `guard run` left, so one running beside the kill -9 test would clean up (and say
/// so) in its place.
static STARTS_GUARD: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_guard_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    STARTS_GUARD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A rules file in `dir` whose one rule matches nothing these tests run.
fn write_rules(dir: &Path) -> PathBuf {
    let rules = dir.join("test.rules");
    std::fs::write(
        &rules,
        "prefix_rule(pattern=[\"never-run-this\"], decision=\"forbidden\")\n",
    )
    .unwrap();
    rules
}

/// `guard run [--preserve-fds N] -- sh -c SCRIPT` with an open file without CLOEXEC at fd 3 and
/// a connected loopback socket at fd 4 (both made here, outside any scope).
fn run_with_inherited(
    preserve: Option<u32>,
    script: &str,
    file: &std::fs::File,
    socket: &std::net::TcpStream,
) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(dir.path());
    let mut command = Command::new(guard_bin());
    command.args(["run", "--rules"]).arg(&rules);
    if let Some(n) = preserve {
        command.args(["--preserve-fds", &n.to_string()]);
    }
    command.args(["--", "sh", "-c", script]);
    let (file_fd, socket_fd) = (file.as_raw_fd(), socket.as_raw_fd());
    // SAFETY: dup2 only, async-signal-safe; dup2 leaves the new descriptors without CLOEXEC,
    // as a careless caller's would be.
    unsafe {
        command.pre_exec(move || {
            if libc::dup2(file_fd, 3) != 3 || libc::dup2(socket_fd, 4) != 4 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting guard");
    wait_output(child, RUN_TIMEOUT)
}

#[test]
fn inherited_descriptors_do_not_reach_the_command_unless_preserved() {
    if !root_or_skip() {
        return;
    }
    let _one = one_guard_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inherited");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let socket = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    peer.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let file = std::fs::File::create(&path).unwrap();
    let script = "if echo file >&3; then echo fd3=open; else echo fd3=closed; fi; \
                  if echo sock >&4; then echo fd4=open; else echo fd4=closed; fi";

    let output = run_with_inherited(None, script, &file, &socket);
    let said = text(&output.stdout);
    assert!(
        said.contains("fd3=closed") && said.contains("fd4=closed"),
        "by default only 0-2 pass: {said} / {}",
        text(&output.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "",
        "nothing was written to the file"
    );
    let mut buf = [0u8; 16];
    assert!(
        peer.read(&mut buf).is_err(),
        "nothing came over the inherited socket"
    );

    let output = run_with_inherited(Some(1), script, &file, &socket);
    let said = text(&output.stdout);
    assert!(
        said.contains("fd3=open") && said.contains("fd4=closed"),
        "--preserve-fds 1 passes fd 3 only: {said} / {}",
        text(&output.stderr)
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "file\n");
    assert!(peer.read(&mut buf).is_err(), "still nothing over fd 4");
}

/// Waits (at most `limit`) for `done`.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// Starts `guard run -- sleep 60` and kills it with SIGKILL once its command runs: the scope it
/// leaves, and the pid of the command still running in it.
fn kill_9_a_guard_run(rules: &Path) -> (PathBuf, u32) {
    let mut child = Command::new(guard_bin())
        .args(["run", "--rules"])
        .arg(rules)
        .args(["--", "sleep", "60"])
        .env_remove("GUARD_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting guard run");
    let scope = guard::kernel::scope::cgroup2_root()
        .unwrap()
        .join(guard::kernel::scope::STANDALONE_PARENT)
        .join(format!("run-{}-0", child.id()));
    let running = wait_for(Duration::from_secs(30), || !cgroup_pids(&scope).is_empty());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        running,
        "guard run's command started in {}",
        scope.display()
    );
    let command = cgroup_pids(&scope)[0];
    assert!(
        scope.exists() && Path::new(&format!("/proc/{command}")).exists(),
        "the kill -9 left the scope and its command behind (what this test is about)"
    );
    (scope, command)
}

#[track_caller]
fn assert_gone(scope: &Path, command: u32, what: &str) {
    assert!(!scope.exists(), "{what} removed {}", scope.display());
    assert!(
        wait_for(Duration::from_secs(5), || !Path::new(&format!(
            "/proc/{command}"
        ))
        .exists()),
        "{what} killed the command (pid {command}) left running unenforced"
    );
}

#[test]
fn a_kill_9_of_guard_run_leaves_nothing_past_the_next_run_or_daemon_start() {
    if !root_or_skip() {
        return;
    }
    let _one = one_guard_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(dir.path());

    let (scope, command) = kill_9_a_guard_run(&rules);
    let next = wait_output(
        Command::new(guard_bin())
            .args(["run", "--rules"])
            .arg(&rules)
            .args(["--", "true"])
            .env_remove("GUARD_SOCKET")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        RUN_TIMEOUT,
    );
    assert!(next.status.success(), "{}", text(&next.stderr));
    let stderr = text(&next.stderr);
    assert!(
        stderr.contains("removed the scope") && stderr.contains(&scope.display().to_string()),
        "the next run says what it cleaned up: {stderr}"
    );
    assert_gone(&scope, command, "the next guard run");

    let (scope, command) = kill_9_a_guard_run(&rules);
    let daemon = TestDaemon::start(&DaemonSetup::default());
    assert_gone(&scope, command, "the daemon's start");
    assert!(
        daemon.log().contains("removed the scope"),
        "the daemon logs it: {}",
        daemon.log()
    );
}
