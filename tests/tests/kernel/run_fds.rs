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

use crate::common::scope_escape;
use guard::kernel::scope::cgroup_pids;
use guard_tests::daemon::{DaemonSetup, TestDaemon, guard_bin, text};
use guard_tests::kernel::{no_other_starts, pty, root_or_skip, starting, wait_output};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

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
    let _starting = starting();
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
    // Every start removes abandoned scopes: none may run beside this test's own.
    let _alone = no_other_starts();
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

/// Reads `path` once it exists and has a line (at most `limit`).
fn read_when_there(path: &Path, limit: Duration) -> Option<String> {
    wait_for(limit, || {
        std::fs::read_to_string(path).is_ok_and(|text| text.ends_with('\n'))
    });
    std::fs::read_to_string(path).ok()
}

/// `guard run --rules RULES -- sh -c SCRIPT`, started (not waited for), with its output piped.
fn spawn_run(rules: &Path, script: &str) -> std::process::Child {
    Command::new(guard_bin())
        .args(["run", "--rules"])
        .arg(rules)
        .args(["--", "sh", "-c", script])
        .env_remove("GUARD_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting guard run")
}

fn process_gone(pid: u32) -> bool {
    wait_for(Duration::from_secs(5), || {
        !Path::new(&format!("/proc/{pid}")).exists()
    })
}

#[test]
fn a_signal_to_guard_run_goes_to_the_command_and_the_scope_ends_with_the_run() {
    if !root_or_skip() {
        return;
    }
    let _starting = starting();
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(dir.path());
    let (pid_file, got) = (dir.path().join("pid"), dir.path().join("got"));
    // The command notes SIGTERM and goes on: it ignores what would end it.
    let script = format!(
        "echo $$ > {pid}; trap 'echo TERM >> {got}' TERM; while :; do sleep 0.1; done",
        pid = pid_file.display(),
        got = got.display()
    );
    let guard = spawn_run(&rules, &script);
    let pid: u32 = read_when_there(&pid_file, Duration::from_secs(30))
        .expect("the command started")
        .trim()
        .parse()
        .unwrap();
    let scope = guard::kernel::scope::cgroup2_root()
        .unwrap()
        .join(guard::kernel::scope::STANDALONE_PARENT)
        .join(format!("run-{}-0", guard.id()));
    // SAFETY: a signal to the guard run started above.
    unsafe { libc::kill(guard.id() as i32, libc::SIGTERM) };
    let output = wait_output(guard, RUN_TIMEOUT);
    let stderr = text(&output.stderr);

    assert_eq!(
        read_when_there(&got, Duration::from_secs(1)).as_deref(),
        Some("TERM\n"),
        "guard run passed SIGTERM on to the command (stderr: {stderr})"
    );
    assert!(
        stderr.contains("killing everything in the scope") && stderr.contains("SIGTERM"),
        "it says why it ends the scope: {stderr}"
    );
    assert_eq!(output.status.code(), Some(137), "the command was killed");
    assert!(process_gone(pid), "nothing of the scope outlives its run");
    assert!(!scope.exists(), "the scope {} was removed", scope.display());
}

#[test]
fn a_kill_9_of_guard_run_leaves_its_scope_enforced_until_release() {
    if !root_or_skip() {
        return;
    }
    // Every start removes abandoned scopes: none may run beside this test's own.
    let _alone = no_other_starts();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("test.rules");
    std::fs::write(
        &rules,
        "prefix_rule(pattern=[\"touch\"], decision=\"forbidden\")\n",
    )
    .unwrap();
    let (pid_file, done) = (dir.path().join("pid"), dir.path().join("done"));
    // Once its guard run is dead (it waits for `go`), the command tries a forbidden exec 20
    // times, then says it went on.
    let go = dir.path().join("go");
    let script = format!(
        "trap '' TERM HUP INT; echo $$ > {pid}; \
         i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
         i=0; while [ $i -lt 20 ]; do touch {dir}/made-$i 2>/dev/null; i=$((i+1)); done; \
         echo went-on > {done}; sleep 60",
        pid = pid_file.display(),
        go = go.display(),
        dir = dir.path().display(),
        done = done.display()
    );
    let mut guard = spawn_run(&rules, &script);
    let pid: u32 = read_when_there(&pid_file, Duration::from_secs(30))
        .expect("the command started")
        .trim()
        .parse()
        .unwrap();
    let run_name = format!("run-{}-0", guard.id());
    guard.kill().unwrap();
    guard.wait().unwrap();
    std::fs::write(&go, "").unwrap();

    assert_eq!(
        read_when_there(&done, Duration::from_secs(30)).as_deref(),
        Some("went-on\n"),
        "the command ran on after its guard run died"
    );
    let made: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("made-"))
        .collect();
    assert!(
        made.is_empty(),
        "the pinned programs still refused `touch` with no guard run: {made:?}"
    );
    let pins = Path::new(guard::kernel::pins::RUNS_ROOT).join(&run_name);
    assert!(
        pins.exists(),
        "the run's links are pinned at {}",
        pins.display()
    );

    let release = Command::new(guard_bin())
        .args(["release", "--pin-dir"])
        .arg(dir.path().join("no-daemon-pins"))
        .output()
        .unwrap();
    let said = text(&release.stdout);
    assert!(
        said.contains("removed the scope") && said.contains(&run_name),
        "guard release removes the dead run's scope: {said} / {}",
        text(&release.stderr)
    );
    assert!(process_gone(pid), "guard release killed the command");
    assert!(!pins.exists(), "and then removed the pins");
}

#[test]
fn the_command_cannot_start_a_process_in_another_cgroup() {
    if !root_or_skip() {
        return;
    }
    let _starting = starting();
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(dir.path());
    let root = guard::kernel::scope::cgroup2_root().unwrap();
    let marker = dir.path().join("escaped");
    let script = format!(
        "{helper} clone3-into {root} {marker}; echo clone3-exit=$?; \
         if echo $$ > {root}/cgroup.procs; then echo procs=moved; else echo procs=refused; fi",
        helper = scope_escape().display(),
        root = root.display(),
        marker = marker.display()
    );
    let output = wait_output(spawn_run(&rules, &script), RUN_TIMEOUT);
    let said = text(&output.stdout);
    assert!(
        said.contains("clone3-into: ENOSYS") && said.contains("clone3-exit=3"),
        "clone3 fails as on a kernel without it, and fork still works: {said} / {}",
        text(&output.stderr)
    );
    assert!(said.contains("procs=refused"), "{said}");
    assert!(!marker.exists(), "no process ran in the root cgroup");
}

#[test]
fn the_command_cannot_push_keystrokes_into_its_terminal() {
    use std::io::Write;
    if !root_or_skip() {
        return;
    }
    let _starting = starting();
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(dir.path());
    let (controller, terminal) = pty();
    let (mut controller, terminal) = (
        std::fs::File::from(controller),
        std::fs::File::from(terminal),
    );
    let answer = dir.path().join("answer");
    // What a person types arrives as ever; what the command pushes does not.
    let script = format!(
        "{helper} tiocsti 'touch {dir}/injected\\n'; {helper} tioclinux; \
         read line; echo \"read=$line\" > {answer}",
        helper = scope_escape().display(),
        dir = dir.path().display(),
        answer = answer.display()
    );
    controller.write_all(b"typed by a person\n").unwrap();
    let fd = terminal.as_raw_fd();
    let mut command = Command::new(guard_bin());
    command
        .args(["run", "--rules"])
        .arg(&rules)
        .args(["--", "sh", "-c", &script])
        .env_remove("GUARD_SOCKET")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid, dup2 and ioctl only, async-signal-safe: the pty becomes the controlling
    // terminal and stdin of guard run, as a person's shell would start it.
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0
                || libc::dup2(fd, 0) != 0
                || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let output = wait_output(command.spawn().unwrap(), RUN_TIMEOUT);
    let said = text(&output.stdout);
    assert!(
        said.contains("tiocsti: EPERM") && said.contains("tioclinux: EPERM"),
        "keystroke injection is refused: {said} / {}",
        text(&output.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&answer).unwrap(),
        "read=typed by a person\n",
        "the terminal works as ever"
    );
    // Whatever the command pushed would wait in the terminal's input for the next reader
    // (the shell that started guard): there is nothing.
    // SAFETY: fcntl on a descriptor this test owns.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
    let mut left = [0u8; 64];
    let read = (&terminal).read(&mut left);
    assert!(
        matches!(&read, Err(err) if err.kind() == std::io::ErrorKind::WouldBlock),
        "nothing was left in the terminal's input: {read:?} {:?}",
        String::from_utf8_lossy(&left)
    );
    assert!(!dir.path().join("injected").exists());
}

/// A tmux server started here, outside every scope, on `socket`; killed on drop.
struct TmuxServer {
    socket: PathBuf,
}

impl TmuxServer {
    fn start(socket: &Path) -> TmuxServer {
        let status = Command::new("tmux")
            .arg("-S")
            .arg(socket)
            .args(["new-session", "-d", "-s", "gt", "sleep 120"])
            .status()
            .expect("tmux runs (cargo xtask setup installs it)");
        assert!(
            status.success(),
            "tmux server started at {}",
            socket.display()
        );
        TmuxServer {
            socket: socket.to_path_buf(),
        }
    }
}

impl Drop for TmuxServer {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .status();
    }
}

#[test]
fn a_tmux_server_outside_the_scope_runs_nothing_for_the_command() {
    if !root_or_skip() {
        return;
    }
    let _starting = starting();
    let dir = tempfile::tempdir().unwrap();
    // tmux's own folder for uid 0 is /tmp/tmux-0; any /tmp/tmux-* is on the built-in list.
    let folder = tempfile::Builder::new()
        .prefix("tmux-gt-")
        .tempdir_in("/tmp")
        .unwrap();
    let socket = folder.path().join("default");
    let _server = TmuxServer::start(&socket);
    let marker = dir.path().join("ran-outside");
    let script = format!(
        "tmux -S {socket} new-window 'touch {marker}'; echo tmux-exit=$?",
        socket = socket.display(),
        marker = marker.display()
    );

    let rules = write_rules(dir.path());
    let output = wait_output(spawn_run(&rules, &script), RUN_TIMEOUT);
    let stderr = text(&output.stderr);
    assert!(
        text(&output.stdout).contains("tmux-exit=1"),
        "tmux could not reach its server: {} / {stderr}",
        text(&output.stdout)
    );
    assert!(
        stderr.contains(&format!(
            "refused connect to unix socket {}",
            socket.display()
        )) && stderr.contains("tmux servers run any command they are sent"),
        "the refusal names the socket and why: {stderr}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(!marker.exists(), "the server outside ran nothing");

    // A rule that names the socket lets it through: the same command then works.
    let allowing = dir.path().join("allow.rules");
    std::fs::write(
        &allowing,
        format!(
            "unix_rule(socket=\"{}\", decision=\"allow\")\n",
            socket.display()
        ),
    )
    .unwrap();
    let output = wait_output(spawn_run(&allowing, &script), RUN_TIMEOUT);
    assert!(
        text(&output.stdout).contains("tmux-exit=0"),
        "{} / {}",
        text(&output.stdout),
        text(&output.stderr)
    );
    assert!(
        wait_for(Duration::from_secs(5), || marker.exists()),
        "with the rule, tmux ran the window"
    );
}
