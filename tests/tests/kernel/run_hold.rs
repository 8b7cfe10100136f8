//! A prompted exec waits for the answer: `guard run` on a terminal (a pty here) holds the
//! exec, asks on the terminal, and the exec goes on when it is approved (`o`: once) or fails
//! with EACCES and the blocked-request message when it is denied (`d`), with no re-run.
//! Needs root (`guard run` loads the programs); without it each test prints `skipped: ...`
//! (and fails when CI=true).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use guard_tests::daemon::guard_bin;
use guard_tests::kernel::{http_server, pty, root_or_skip, shell_program, starting, wait_status};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

const RULES: &str =
    "prefix_rule(pattern=[\"touch\"], decision=\"prompt\", justification=\"asks first\")\n";

/// Runs `guard run --rules R -- sh -c SCRIPT` in `dir` on a terminal; when the terminal shows
/// the question, types `key`. Returns everything the terminal showed.
fn run_on_terminal(dir: &Path, script: &str, key: u8) -> String {
    run_on_terminal_with(dir, RULES, script, key)
}

/// [`run_on_terminal`] with these rules.
fn run_on_terminal_with(dir: &Path, rules_text: &str, script: &str, key: u8) -> String {
    let _starting = starting();
    let rules = dir.join("hold.rules");
    std::fs::write(&rules, rules_text).unwrap();
    let (master, slave) = pty();
    let io = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
    let mut command = Command::new(guard_bin());
    command
        .args(["run", "--rules"])
        .arg(&rules)
        .arg("--")
        .arg(shell_program())
        .args(["-c", script])
        .current_dir(dir)
        .stdin(io(&slave))
        .stdout(io(&slave))
        .stderr(io(&slave));
    // SAFETY: setsid and ioctl are async-signal-safe: the terminal becomes guard's own.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("starting guard run");
    drop(slave);
    let mut reader = File::from(master.try_clone().unwrap());
    let (sender, shown) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        // Ends with EIO once every holder of the terminal's other side has gone.
        while let Ok(n) = reader.read(&mut buffer) {
            if n == 0 || sender.send(buffer[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut writer = File::from(master);
    let mut output = String::new();
    let mut typed = false;
    let deadline = Instant::now() + RUN_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(bytes) = shown.recv_timeout(Duration::from_millis(100)) {
            output.push_str(&String::from_utf8_lossy(&bytes));
        }
        if !typed && output.contains("allow it?") {
            writer.write_all(&[key]).unwrap();
            typed = true;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
    }
    wait_status(&mut child, Duration::from_secs(5));
    // What the terminal still held when guard ended.
    while let Ok(bytes) = shown.recv_timeout(Duration::from_millis(200)) {
        output.push_str(&String::from_utf8_lossy(&bytes));
    }
    let _ = writer.as_raw_fd();
    output
}

#[test]
fn an_exec_approved_once_on_the_terminal_runs_with_no_re_run() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shown = run_on_terminal(dir.path(), "touch made; echo rc=$?", b'o');
    assert!(
        shown.contains("`touch made` requires approval: asks first"),
        "the question names the command and the justification: {shown}"
    );
    assert!(
        shown.contains("[o]nce, [s]ession, [d]eny"),
        "a prompt rule's exec has no always: {shown}"
    );
    assert!(shown.contains("guard: ask 1 approved once"), "{shown}");
    assert!(shown.contains("rc=0"), "the held exec went on: {shown}");
    assert!(dir.path().join("made").exists(), "touch ran");
}

#[test]
fn an_exec_denied_on_the_terminal_fails_with_eacces_and_the_message() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shown = run_on_terminal(dir.path(), "touch made; echo rc=$?", b'd');
    assert!(shown.contains("guard: ask 1 denied"), "{shown}");
    assert!(
        shown.contains("Permission denied"),
        "the exec failed with EACCES: {shown}"
    );
    assert!(
        shown.contains("rc=126"),
        "sh: found but not executable: {shown}"
    );
    assert!(
        shown.contains("`touch made` requires approval: asks first")
            && shown.contains("ask 1 was denied"),
        "the program's stderr has the blocked request: {shown}"
    );
    assert!(!dir.path().join("made").exists(), "touch did not run");
}

#[test]
fn an_exec_approved_always_writes_its_rule_and_is_not_held_again() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The kernel compares the executed file's name: /bin/sh is often a link to dash.
    let shell = std::fs::canonicalize(shell_program()).unwrap();
    let shell = shell.file_name().unwrap().to_string_lossy();
    let rules = format!(
        "enforcement(unmatched_exec=\"prompt\")\nprefix_rule(pattern=[\"{shell}\"], decision=\"allow\")\n"
    );
    let rules = rules.as_str();
    // The second touch is the same exec: the rule the answer wrote allows it, with no question.
    let shown = run_on_terminal_with(
        dir.path(),
        rules,
        "touch made; touch made; echo rc=$?",
        b'a',
    );
    assert!(
        shown.contains("[o]nce, [s]ession, [a]lways, [d]eny"),
        "{shown}"
    );
    assert!(shown.contains("guard: ask 1 approved always"), "{shown}");
    assert!(!shown.contains("guard: ask 2"), "asked again: {shown}");
    assert!(shown.contains("rc=0"), "{shown}");
    let written = std::fs::read_to_string(dir.path().join("hold.rules")).unwrap();
    assert!(
        written.contains("prefix_rule(pattern=[\"touch\", \"made\"], decision=\"allow\""),
        "{written}"
    );
}

fn connect_rules(port: u16) -> String {
    format!(
        "address_rule(addresses=[\"127.0.0.1\"], ports=[{port}], decision=\"prompt\", \
         justification=\"ask before the test server\")\n"
    )
}

#[test]
fn a_connect_approved_once_on_the_terminal_completes_with_no_re_run() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = http_server(1);
    let script = format!("curl -sS --max-time 30 http://127.0.0.1:{port}/; echo rc=$?");
    let shown = run_on_terminal_with(dir.path(), &connect_rules(port), &script, b'o');
    assert!(
        shown.contains(&format!("connect to 127.0.0.1:{port}/tcp"))
            && shown.contains("ask before the test server"),
        "the question names the destination and the justification: {shown}"
    );
    assert!(shown.contains("guard: ask 1 approved once"), "{shown}");
    assert!(
        shown.contains("held-okrc=0"),
        "the held connect went on: {shown}"
    );
}

#[test]
fn a_connect_denied_on_the_terminal_fails_at_once_with_the_message() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = http_server(0);
    let script = format!("curl -sS --max-time 30 http://127.0.0.1:{port}/; echo rc=$?");
    let shown = run_on_terminal_with(dir.path(), &connect_rules(port), &script, b'd');
    assert!(shown.contains("guard: ask 1 denied"), "{shown}");
    assert!(shown.contains("rc=7"), "curl could not connect: {shown}");
    assert!(
        shown.contains(&format!("refused connect to 127.0.0.1:{port}/tcp"))
            && shown.contains("ask 1 was denied"),
        "the program's stderr has the blocked request: {shown}"
    );
}

#[test]
fn a_held_connect_with_its_own_two_second_timeout_times_out_on_its_schedule() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = http_server(0);
    // `curl --connect-timeout 2`: a non-blocking connect and a poll, as a slow network makes
    // it wait. Nobody answers (`x` is no answer): the program's own timeout decides.
    let script = format!(
        "start=$(date +%s%N); curl -sS --connect-timeout 2 http://127.0.0.1:{port}/; rc=$?; \
         echo rc=$rc ms=$(( ($(date +%s%N) - start) / 1000000 ))"
    );
    let shown = run_on_terminal_with(dir.path(), &connect_rules(port), &script, b'x');
    assert!(
        shown.contains(&format!("guard: holding connect to 127.0.0.1:{port}/tcp")),
        "{shown}"
    );
    assert!(
        shown.contains("rc=28"),
        "curl's own connect timeout: {shown}"
    );
    let ms: u64 = shown
        .split("ms=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no time in {shown}"));
    assert!(
        (1_700..=3_500).contains(&ms),
        "the 2 s timeout decided when it gave up: {ms} ms; {shown}"
    );
}
