//! Nothing inside a scope reaches guard itself: a root command of a `guard run` cannot name
//! guard's pinned links (every bpf file system is hidden in its mount namespace), cannot make a
//! `bpf` call at all, cannot make a user namespace to mount around the binds, and keeps none of
//! the capabilities that move a decided call (`CAP_NET_ADMIN`'s marks, NAT and routes;
//! `chroot`). Each way is tried as the attacker would, as root and as another user, and the
//! run's refusal still holds after it; ordinary work beside it still works. Needs root; without
//! it each test prints `skipped: ...` (and fails when CI=true).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{net_probe, scope_escape};
use guard_tests::daemon::{guard_bin, text};
use guard_tests::kernel::{root_or_skip, starting, wait_output};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Every try, one line each: `NAME=RESULT` with what `scope-escape` (or the shell) said.
fn attempts(helper: &Path, probe: &Path, refused_port: u16, allowed_port: u16) -> String {
    let helper = helper.display();
    let probe = probe.display();
    [
        "echo bpffs_entries=$(ls -A /sys/fs/bpf | wc -l)".to_string(),
        format!("{helper} bpf-obj-get /"),
        format!("{helper} bpf-detach-pins /sys/fs/bpf"),
        format!("{helper} unshare-user"),
        format!("{helper} so-mark"),
        format!("{helper} chroot /"),
        // Another user in the same scope: the same filter, no capabilities at all.
        format!("setpriv --reuid=65534 --regid=65534 --clear-groups {helper} bpf-obj-get /"),
        format!("setpriv --reuid=65534 --regid=65534 --clear-groups {helper} unshare-user"),
        format!("echo refused_connect=$({probe} tcp 127.0.0.1 {refused_port})"),
        format!("echo allowed_connect=$({probe} tcp 127.0.0.1 {allowed_port})"),
    ]
    .join("; ")
}

#[test]
fn a_root_command_cannot_reach_guards_links_make_bpf_calls_or_rewrite_its_traffic() {
    if !root_or_skip() {
        return;
    }
    let _starting = starting();
    let dir = tempfile::tempdir().unwrap();
    let refused = TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
    let (refused_port, allowed_port) = (
        refused.local_addr().unwrap().port(),
        allowed.local_addr().unwrap().port(),
    );
    let rules = dir.path().join("test.rules");
    std::fs::write(
        &rules,
        format!(
            "address_rule(addresses=[\"127.0.0.1\"], ports=[{refused_port}], decision=\"deny\")\n"
        ),
    )
    .unwrap();
    let script = attempts(&scope_escape(), &net_probe(), refused_port, allowed_port);
    let output = wait_output(
        Command::new(guard_bin())
            .args(["run", "--rules"])
            .arg(&rules)
            .args(["--", "sh", "-c", &script])
            .env_remove("GUARD_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting guard run"),
        RUN_TIMEOUT,
    );
    let said = text(&output.stdout);
    let context = format!("{said}\n--- stderr:\n{}", text(&output.stderr));
    // Inside, the bpffs is empty (outside, it holds this run's pins: the detach test below).
    for expected in [
        "bpffs_entries=0",
        "bpf-obj-get: EPERM",
        "bpf-detach-pins: ENOENT",
        "unshare-user: EPERM",
        "so-mark: EPERM",
        "chroot: EPERM",
    ] {
        assert!(said.contains(expected), "{expected}: {context}");
    }
    assert_eq!(
        said.matches("bpf-obj-get: EPERM").count(),
        2,
        "the other user is refused the call too: {context}"
    );
    assert_eq!(said.matches("unshare-user: EPERM").count(), 2, "{context}");
    assert!(
        said.contains("refused_connect=errno 1"),
        "the run's refusal still holds after every try: {context}"
    );
    assert!(
        said.contains("allowed_connect=ok"),
        "and what it allows still connects: {context}"
    );
    assert!(output.status.success(), "{context}");
}

#[test]
fn outside_any_scope_the_same_calls_reach_the_kernel() {
    // What the run's filter and mounts take away is there without them: the test above is
    // not passing because the calls fail everywhere.
    if !root_or_skip() {
        return;
    }
    let said = |args: &[&str]| {
        let output = Command::new(scope_escape()).args(args).output().unwrap();
        text(&output.stdout)
    };
    // The kernel looks at the path and refuses it as no BPF object (EACCES or EINVAL by
    // version), where the run's filter refuses the call itself (EPERM).
    let obj_get = said(&["bpf-obj-get", "/"]);
    assert!(
        obj_get.contains("bpf-obj-get: EACCES") || obj_get.contains("bpf-obj-get: EINVAL"),
        "the kernel looked at the path: {obj_get}"
    );
    assert!(said(&["so-mark"]).contains("so-mark: ok"));
    assert!(
        std::fs::read_dir(guard::kernel::pins::DEFAULT_ROOT).is_ok(),
        "the host's bpffs is there to read"
    );
}

#[test]
fn a_detached_link_of_a_run_is_noticed_and_attached_again() {
    if !root_or_skip() {
        return;
    }
    let _starting = starting();
    let dir = tempfile::tempdir().unwrap();
    let refused = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = refused.local_addr().unwrap().port();
    let rules = dir.path().join("test.rules");
    std::fs::write(
        &rules,
        format!("address_rule(addresses=[\"127.0.0.1\"], ports=[{port}], decision=\"deny\")\n"),
    )
    .unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let script = format!(
        "touch {ready}; i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); \
         done; echo after=$({probe} tcp 127.0.0.1 {port})",
        ready = ready.display(),
        go = go.display(),
        probe = net_probe().display()
    );
    let child = Command::new(guard_bin())
        .args(["run", "--rules"])
        .arg(&rules)
        .args(["--", "sh", "-c", &script])
        .env_remove("GUARD_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting guard run");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ready.exists(), "the command started");
    // The run's pins, as root outside the scope sees them: `run-PID-N`.
    let prefix = format!("run-{}-", child.id());
    let pins = std::fs::read_dir(guard::kernel::pins::RUNS_ROOT)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .expect("the run's pin folder");
    // What a root process that can name the pins does (the command cannot: see above).
    let detach = Command::new(scope_escape())
        .arg("bpf-detach-pins")
        .arg(&pins)
        .output()
        .unwrap();
    let said = text(&detach.stdout);
    assert!(
        said.contains("bpf-detach-pins: ok") && said.contains("detached "),
        "the links can be detached by whoever names them: {said}"
    );
    // guard looks every 250 ms; give it a few looks, then let the command connect.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&go, "").unwrap();
    let output = wait_output(child, RUN_TIMEOUT);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        stderr.contains("was detached") && stderr.contains("attached and pinned again"),
        "the run says what it found and did: {stderr}"
    );
    assert!(
        stdout.contains("after=errno 1"),
        "the refusal holds again after the detach: {stdout} / {stderr}"
    );
}

/// Asks a stand-alone run's ask socket (argv 1) to approve ask 1 (argv 2: the mode) from a
/// child that connects and exits at once: the peer the kernel names is gone by the time the run
/// reads the request. Prints `answer=` and the run's response line.
const APPROVE_FROM_A_GONE_CHILD: &str = r#"
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
pid = os.fork()
if pid == 0:
    s.connect(sys.argv[1])
    os._exit(0)
os.waitpid(pid, 0)
s.sendall((json.dumps({"v": 1, "op": "approve", "id": 1, "mode": sys.argv[2]}) + "\n").encode())
print("answer=" + s.makefile().readline().strip())
"#;

#[test]
fn a_root_command_cannot_approve_its_own_ask_through_a_peer_that_is_gone() {
    if !root_or_skip() {
        return;
    }
    let _starting = starting();
    let dir = tempfile::tempdir().unwrap();
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let rules = dir.path().join("test.rules");
    // The run's ask socket is let through (unix sockets nothing names are refused): this is
    // about who answers, not whether the socket can be reached.
    let rules_text = format!(
        "address_rule(addresses=[\"127.0.0.1\"], ports=[{port}], decision=\"prompt\")\n\
         unix_rule(socket=\"{}/*\", decision=\"allow\")\n",
        guard::cli::RUN_SOCKETS
    );
    std::fs::write(&rules, &rules_text).unwrap();
    let script_file = dir.path().join("approve.py");
    std::fs::write(&script_file, APPROVE_FROM_A_GONE_CHILD).unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let probe = format!("{} tcp 127.0.0.1 {port}", net_probe().display());
    let socket = format!("{}/$PPID.sock", guard::cli::RUN_SOCKETS);
    let script = format!(
        "echo first=$({probe}); \
         python3 {py} {socket} always; python3 {py} {socket} once; \
         echo second=$({probe}); \
         touch {ready}; i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); \
         done; echo third=$({probe})",
        py = script_file.display(),
        ready = ready.display(),
        go = go.display(),
    );
    let child = Command::new(guard_bin())
        .args(["run", "--rules"])
        .arg(&rules)
        .args(["--", "sh", "-c", &script])
        .env_remove("GUARD_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting guard run");
    let socket = Path::new(guard::cli::RUN_SOCKETS).join(format!("{}.sock", child.id()));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ready.exists(), "the command got past its tries");
    // From outside the scope, root answers as ever.
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    use std::io::{BufRead, Write};
    stream
        .write_all(b"{\"v\":1,\"op\":\"approve\",\"id\":1,\"mode\":\"once\"}\n")
        .unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(&stream)
        .read_line(&mut answer)
        .unwrap();
    assert!(
        answer.contains("\"ok\":true"),
        "root outside answers: {answer}"
    );
    std::fs::write(&go, "").unwrap();
    let output = wait_output(child, RUN_TIMEOUT);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    let context = format!("{stdout}\n--- stderr:\n{stderr}");
    assert!(stdout.contains("first=errno 1"), "asked: {context}");
    assert_eq!(
        stdout.matches("answer=").count(),
        2,
        "both tries got an answer: {context}"
    );
    for line in stdout.lines().filter(|l| l.starts_with("answer=")) {
        assert!(
            line.contains("not authorized") && line.contains("\"ok\":false"),
            "refused, failing closed on a peer that is gone: {line}"
        );
    }
    assert!(
        stdout.contains("second=errno 1"),
        "its own approval did nothing: {context}"
    );
    assert_eq!(
        std::fs::read_to_string(&rules).unwrap(),
        rules_text,
        "--always appended nothing to the run's rules"
    );
    assert!(
        stdout.contains("third=ok"),
        "the approval from outside lets it through: {context}"
    );
}

/// A script that asks the daemon (at `socket`, else `GUARD_SOCKET` as inherited) for a run of
/// `touch FORBIDDEN` (which the outer scope's policy forbids), then for a run of `touch
/// ALLOWED`.
fn nested_runs(guard: &Path, socket: Option<&Path>, forbidden: &Path, allowed: &Path) -> String {
    let guard = match socket {
        Some(socket) => format!("GUARD_SOCKET={} {}", socket.display(), guard.display()),
        None => guard.display().to_string(),
    };
    format!(
        "{guard} run -- {touch} {forbidden}; echo nested_forbidden=$?; \
         {guard} run -- {touch} {allowed}; echo nested_allowed=$?",
        touch = guard_tests::kernel::touch_program().display(),
        forbidden = forbidden.display(),
        allowed = allowed.display(),
    )
}

#[test]
fn a_run_asked_for_from_inside_an_overlay_run_keeps_the_overlay() {
    use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
    use std::os::unix::fs::PermissionsExt;
    if !can_run() {
        return;
    }
    const USER: u32 = 64_351;
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "prefix_rule(pattern=[\"gt-never-run\"], decision=\"forbidden\")\n".into(),
        ..DaemonSetup::default()
    });
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let overlay = work.path().join("tight.rules");
    let (forbidden, allowed) = (work.path().join("forbidden"), work.path().join("allowed"));
    std::fs::write(
        &overlay,
        format!(
            "prefix_rule(pattern=[\"touch\", \"{}\"], decision=\"forbidden\")\n",
            forbidden.display()
        ),
    )
    .unwrap();
    // The user's guard binary, which the nested `guard run` inside the scope runs too.
    let bin = daemon.dir.path().join("guard-for-another-user");
    let _ = daemon.guard_as(USER, &["--version"]);
    let script = nested_runs(&bin, None, &forbidden, &allowed);
    let out = daemon
        .guard_command_as(
            USER,
            &[
                "run",
                "--overlay",
                overlay.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                &script,
            ],
        )
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !forbidden.exists(),
        "the nested run is held by the overlay it was asked for from: {stdout} / {stderr}"
    );
    assert!(
        stdout.contains("nested_forbidden=137"),
        "killed: {stdout} / {stderr}"
    );
    assert!(
        allowed.exists() && stdout.contains("nested_allowed=0"),
        "a nested run of what the policy allows works: {stdout} / {stderr}"
    );
    // Records are written by the daemon's writer thread: give it a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let nested = loop {
        let log = std::fs::read_to_string(&daemon.audit_log).unwrap_or_default();
        let nested = log
            .lines()
            .filter(|l| l.contains("\"type\":\"run\"") && l.contains("\"nested_in\":\"/"))
            .count();
        if nested >= 2 || std::time::Instant::now() > deadline {
            break nested;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(nested, 2, "both nested runs are recorded as nested");
}

#[test]
fn a_root_command_of_a_stand_alone_run_cannot_leave_its_policy_through_the_daemon() {
    use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
    if !can_run() {
        return;
    }
    // The daemon refuses a connect the stand-alone run's policy does not name.
    let refused = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = refused.local_addr().unwrap().port();
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: format!(
            "address_rule(addresses=[\"127.0.0.1\"], ports=[{port}], decision=\"deny\")\n"
        ),
        ..DaemonSetup::default()
    });
    let work = tempfile::tempdir().unwrap();
    let (forbidden, allowed) = (work.path().join("forbidden"), work.path().join("allowed"));
    let rules = work.path().join("strict.rules");
    std::fs::write(
        &rules,
        // Its command may reach the daemon (unix sockets nothing names are refused).
        format!(
            "prefix_rule(pattern=[\"touch\", \"{}\"], decision=\"forbidden\")\n\
             unix_rule(socket=\"{}\", decision=\"allow\")\n",
            forbidden.display(),
            daemon.socket.display()
        ),
    )
    .unwrap();
    // Both policies hold the nested run: the stand-alone run's (its exec) and the daemon's (its
    // connect, although the daemon's hooks are not attached above a stand-alone run).
    let script = format!(
        "{}; echo nested_connect=$(GUARD_SOCKET={} {} run -- {} tcp 127.0.0.1 {port})",
        nested_runs(&guard_bin(), Some(&daemon.socket), &forbidden, &allowed),
        daemon.socket.display(),
        guard_bin().display(),
        net_probe().display()
    );
    // A stand-alone run (root, its own policy) whose command knows the daemon's socket.
    let out = Command::new(guard_bin())
        .args(["run", "--rules"])
        .arg(&rules)
        .args(["--", "sh", "-c", &script])
        .env_remove("GUARD_SOCKET")
        .env("GUARD_NO_HOLD", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !forbidden.exists() && stdout.contains("nested_forbidden=137"),
        "the daemon's run is nested in the stand-alone run's scope: {stdout} / {stderr}"
    );
    assert!(
        allowed.exists() && stdout.contains("nested_allowed=0"),
        "{stdout} / {stderr}"
    );
    assert!(
        stdout.contains("nested_connect=errno 1"),
        "the daemon's policy holds the nested run's connects: {stdout} / {stderr}"
    );
}

#[test]
fn the_daemon_attaches_a_detached_link_again_and_records_it() {
    use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
    if !can_run() {
        return;
    }
    // The repair is sent on too: to an OTLP receiver.
    let Some(receiver) = guard_tests::otlp::OtlpReceiver::start_or_skip() else {
        return;
    };
    let refused = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = refused.local_addr().unwrap().port();
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: format!(
            "address_rule(addresses=[\"127.0.0.1\"], ports=[{port}], decision=\"deny\")\n"
        ),
        extra_config: format!("[export.otlp]\nendpoint = \"{}\"\n", receiver.endpoint()),
        ..DaemonSetup::default()
    });
    // Every link the daemon pinned, detached by a root process that can name them.
    let detach = Command::new(scope_escape())
        .arg("bpf-detach-pins")
        .arg(&daemon.pin_dir)
        .output()
        .unwrap();
    let said = text(&detach.stdout);
    assert!(said.contains("bpf-detach-pins: ok"), "{said}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = daemon.json(&["status", "--json"]);
        if status["links_repaired"].as_u64().unwrap_or(0) > 0
            || std::time::Instant::now() > deadline
        {
            break status;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let repaired = status["links_repaired"].as_u64().unwrap_or(0);
    assert!(
        repaired > 0 && status["last_link_repair"].is_string(),
        "guard status says so: {status}\n{}",
        daemon.log()
    );
    let (code, stdout, stderr) =
        daemon.run_in_scope(&net_probe(), &["tcp", "127.0.0.1", &port.to_string()]);
    assert!(
        stdout.contains("errno 1"),
        "a run's connect is refused again: {code} {stdout} {stderr}"
    );
    let log = std::fs::read_to_string(&daemon.audit_log).unwrap_or_default();
    assert!(
        log.lines()
            .filter(|l| l.contains("\"type\":\"link_repaired\""))
            .count()
            >= 1,
        "each repair is an audit record"
    );
    let sent = receiver.wait_for(Duration::from_secs(10), |received| {
        received
            .iter()
            .any(|r| r["attributes"]["guard.type"] == "link_repaired")
    });
    assert!(
        sent.iter()
            .any(|r| r["attributes"]["guard.type"] == "link_repaired"),
        "and sent on: {sent:?}"
    );
    let shown = text(&daemon.guard(&["status"]).stderr);
    assert!(
        shown.contains("found detached or unpinned and attached again"),
        "{shown}"
    );
}

#[test]
fn under_the_daemon_a_root_run_cannot_name_or_detach_the_daemons_pins() {
    use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "prefix_rule(pattern=[\"gt-never-run\"], decision=\"forbidden\")\n".into(),
        ..DaemonSetup::default()
    });
    let helper = scope_escape();
    let script = format!(
        "echo pins=$(ls -A {pins} | wc -l); {helper} bpf-detach-pins {pins}; \
         {helper} bpf-obj-get /; {helper} unshare-user",
        pins = daemon.pin_dir.display(),
        helper = helper.display(),
    );
    assert!(
        std::fs::read_dir(&daemon.pin_dir).is_ok_and(|mut d| d.next().is_some()),
        "the daemon's pins are there outside its runs"
    );
    let out = daemon.guard(&["run", "--", "sh", "-c", &script]);
    let said = text(&out.stdout);
    for expected in [
        "pins=0",
        "bpf-detach-pins: ENOENT",
        "bpf-obj-get: EPERM",
        "unshare-user: EPERM",
    ] {
        assert!(
            said.contains(expected),
            "{expected}: {said} / {}",
            text(&out.stderr)
        );
    }
    let status = daemon.json(&["status", "--json"]);
    assert_eq!(
        status["links_repaired"], 0,
        "nothing was detached: {status}"
    );
}
