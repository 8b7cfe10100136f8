//! Unix sockets under `guard run`, as an attacker in the scope would try them: a server outside
//! the scope at a path no rule names (a `tmux -S /any/path`) is refused under the default
//! (`enforcement(unmatched_unix="deny")`) and gets nothing; a rule or the setting lets it
//! through; and a root command cannot put a symlink to a refused server in the place of an
//! allowed socket (the socket is a read-only bind of itself in the command's mount namespace,
//! the folders on the way cannot be moved aside, a symlink's folder is read-only), while the
//! allowed socket itself is still reached. Under the daemon the client confines its command the
//! same way.
//!
//! Every server is this test's own, in its own temp folder; the binds are only the command's.

use std::io::ErrorKind;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{describe, run_guard, scope_escape, step};
use guard_tests::daemon::{DaemonSetup, TestDaemon, guard_bin, text};
use guard_tests::kernel::{enforcer_or_skip, skip};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether this kernel decides unix sockets (6.7+); `skipped: ...` when it does not.
fn unix_hooks_or_skip() -> bool {
    let Some(enforcer) = enforcer_or_skip() else {
        return false;
    };
    if !enforcer.decides_unix_sockets() {
        skip("this kernel has no unix socket hooks (cgroup/connect_unix needs Linux 6.7)");
        return false;
    }
    true
}

/// A listening server outside the scope whose queue can be looked at without waiting.
fn server(path: &Path) -> UnixListener {
    let listener = UnixListener::bind(path).unwrap();
    listener.set_nonblocking(true).unwrap();
    listener
}

/// Whether a connection reached `server` (one is taken off its queue).
fn reached(server: &UnixListener) -> bool {
    match server.accept() {
        Ok(_) => true,
        Err(err) if err.kind() == ErrorKind::WouldBlock => false,
        Err(err) => panic!("accept: {err}"),
    }
}

/// `guard run -v --rules RULES -- COMMAND...` with `rules` written next to the sockets.
fn guard_run(dir: &Path, rules: &str, command: &[&str]) -> Output {
    let file = dir.join("t.rules");
    std::fs::write(&file, rules).unwrap();
    run_guard(
        Command::new(guard_bin())
            .args(["run", "-v", "--rules"])
            .arg(&file)
            .arg("--")
            .args(command)
            .env("ESCAPE", scope_escape())
            .current_dir(dir),
        RUN_TIMEOUT,
    )
}

fn connect(dir: &Path, rules: &str, socket: &Path) -> Output {
    let escape = scope_escape();
    guard_run(
        dir,
        rules,
        &[
            escape.to_str().unwrap(),
            "unix-connect",
            socket.to_str().unwrap(),
        ],
    )
}

fn allow(socket: &Path) -> String {
    format!(
        "unix_rule(socket=\"{}\", decision=\"allow\")\n",
        socket.display()
    )
}

#[test]
fn a_server_no_rule_names_is_refused_by_default_and_the_line_names_the_rule_that_allows_it() {
    if !unix_hooks_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("any.sock");
    let listener = server(&socket);

    let out = connect(dir.path(), "", &socket);
    assert!(
        text(&out.stdout).contains("unix-connect: EPERM"),
        "{}",
        describe(&out)
    );
    let stderr = text(&out.stderr);
    let wanted = format!(
        "refused connect to unix socket {}: no rule names it, and this policy's \
         enforcement(unmatched_unix=...) is `forbidden`; to let it through, add \
         unix_rule(socket=\"{}\", decision=\"allow\")",
        socket.display(),
        socket.display()
    );
    assert!(stderr.contains(&wanted), "{}", describe(&out));
    assert!(!reached(&listener), "the server got nothing");

    // The same server, allowed by a rule, and by the setting.
    let out = connect(dir.path(), &allow(&socket), &socket);
    assert!(
        text(&out.stdout).contains("unix-connect: ok"),
        "{}",
        describe(&out)
    );
    assert!(reached(&listener), "the connect a rule allows arrives");
    let out = connect(
        dir.path(),
        "enforcement(unmatched_unix=\"allow\")\n",
        &socket,
    );
    assert!(
        text(&out.stdout).contains("unix-connect: ok"),
        "{}",
        describe(&out)
    );
    assert!(reached(&listener), "unmatched_unix=allow lets it through");
    // The network default says nothing about unix sockets any more.
    let out = connect(
        dir.path(),
        "enforcement(unmatched_network=\"allow\")\n",
        &socket,
    );
    assert!(
        text(&out.stdout).contains("unix-connect: EPERM"),
        "{}",
        describe(&out)
    );
    assert!(!reached(&listener));
}

/// `guard run` under `rules` of a command that connects to `socket`, says so in `ready`, waits
/// for `go`, and connects again; `answer` (one line of the run's ask protocol, for ask 1) is
/// sent from this test, outside the scope, once the first connect was asked about. The run's
/// output, and the answer's reply.
fn asked_then_answered(dir: &Path, rules: &str, socket: &Path, answer: &str) -> (Output, String) {
    use std::io::{BufRead, Write};
    let file = dir.join("t.rules");
    std::fs::write(&file, rules).unwrap();
    let (ready, go) = (dir.join("ready"), dir.join("go"));
    // Left by an earlier run in the same folder.
    let _ = std::fs::remove_file(&ready);
    let _ = std::fs::remove_file(&go);
    let script = format!(
        "\"$ESCAPE\" unix-connect {s}; : > {ready}; i=0; \
         while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
         \"$ESCAPE\" unix-connect {s}",
        s = socket.display(),
        ready = ready.display(),
        go = go.display(),
    );
    let _starting = guard_tests::kernel::starting();
    let child = Command::new(guard_bin())
        .args(["run", "--rules"])
        .arg(&file)
        .args(["--", "sh", "-c", &script])
        .env("ESCAPE", scope_escape())
        .env_remove("GUARD_SOCKET")
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting guard run");
    let asks = Path::new(guard::cli::RUN_SOCKETS).join(format!("{}.sock", child.id()));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The ask is made when the run reads the refusal's event: answered as soon as it is there.
    let mut reply = String::new();
    while std::time::Instant::now() < deadline {
        reply.clear();
        if let Ok(mut stream) = std::os::unix::net::UnixStream::connect(&asks) {
            stream.write_all(answer.as_bytes()).unwrap();
            std::io::BufReader::new(&stream)
                .read_line(&mut reply)
                .unwrap();
            if reply.contains("\"ok\":true") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(&go, "").unwrap();
    (guard_tests::kernel::wait_output(child, RUN_TIMEOUT), reply)
}

/// Each `unix-connect` line's outcome (`unix-connect: EPERM`), without the error's text.
fn outcomes(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .map(|line| line.split(" (").next().unwrap_or(line))
        .collect()
}

#[test]
fn under_prompt_a_connect_is_refused_and_asked_and_only_an_approval_lets_the_retry_through() {
    if !unix_hooks_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("asked.sock");
    let listener = server(&socket);
    let rules = "enforcement(unmatched_unix=\"prompt\")\n";

    // Approved once from outside the scope: the retry reaches the server.
    let approve = "{\"v\":1,\"op\":\"approve\",\"id\":1,\"mode\":\"once\"}\n";
    let (out, reply) = asked_then_answered(dir.path(), rules, &socket, approve);
    assert!(
        reply.contains("\"ok\":true"),
        "approved: {reply}\n{}",
        describe(&out)
    );
    assert_eq!(
        outcomes(&text(&out.stdout)),
        ["unix-connect: EPERM", "unix-connect: ok"],
        "{}",
        describe(&out)
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("connect to unix socket {}", socket.display()))
            && stderr.contains("guard: ask 1: answer from another terminal")
            && stderr.contains("--once|--session|--always"),
        "{}",
        describe(&out)
    );
    assert!(reached(&listener), "the approved retry arrives");
    assert!(!reached(&listener), "and only it");

    // Denied: the retry is refused too, and the server gets nothing.
    let deny = "{\"v\":1,\"op\":\"deny\",\"id\":1}\n";
    let (out, reply) = asked_then_answered(dir.path(), rules, &socket, deny);
    assert!(
        reply.contains("\"ok\":true"),
        "denied: {reply}\n{}",
        describe(&out)
    );
    assert_eq!(
        outcomes(&text(&out.stdout)),
        ["unix-connect: EPERM", "unix-connect: EPERM"],
        "{}",
        describe(&out)
    );
    assert!(!reached(&listener));

    // --always writes the rule that allows exactly this socket into the run's rules.
    let always = "{\"v\":1,\"op\":\"approve\",\"id\":1,\"mode\":\"always\"}\n";
    let (out, reply) = asked_then_answered(dir.path(), rules, &socket, always);
    assert!(
        reply.contains("\"ok\":true"),
        "approved: {reply}\n{}",
        describe(&out)
    );
    assert_eq!(
        outcomes(&text(&out.stdout)),
        ["unix-connect: EPERM", "unix-connect: ok"],
        "{reply}\n{}",
        describe(&out)
    );
    let written = std::fs::read_to_string(dir.path().join("t.rules")).unwrap();
    assert!(
        written.contains(&format!(
            "unix_rule(socket=\"{}\", decision=\"allow\")",
            socket.display()
        )),
        "{written}"
    );
    assert!(reached(&listener));
}

/// The steps a root command in the scope takes against the allowed socket `$A` (a server's,
/// outside the scope) to put `$R` (a refused server) in its place, then the connect to `$A`.
fn replacement_script() -> String {
    [
        step("unlink", "rm -f \"$A\""),
        step("symlink_over", "ln -sf \"$R\" \"$A\""),
        step(
            "rename_over",
            "ln -s \"$R\" \"$D/planted\" && mv -f \"$D/planted\" \"$A\"",
        ),
        step("move_folder_aside", "mv \"$D\" \"$D.aside\""),
        step("beside", "touch \"$D/beside\""),
        step(
            "connect",
            "\"$ESCAPE\" unix-connect \"$A\" | grep -q ': ok'",
        ),
    ]
    .concat()
}

const REPLACEMENT_STEPS: [&str; 6] = [
    "unlink=refused",
    "symlink_over=refused",
    "rename_over=refused",
    "move_folder_aside=refused",
    "beside=ok",
    "connect=ok",
];

/// The `name=...` lines of `output`.
fn steps(output: &Output) -> Vec<String> {
    text(&output.stdout)
        .lines()
        .filter(|l| l.contains('='))
        .map(str::to_string)
        .collect()
}

/// After the run: the allowed socket is still the server's, which took the one connect, and
/// the refused server got nothing.
fn assert_untouched(allowed: &Path, allowed_server: &UnixListener, refused: &UnixListener) {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::symlink_metadata(allowed).unwrap();
    assert!(meta.file_type().is_socket(), "still the server's socket");
    assert!(
        reached(allowed_server),
        "the connect reached the allowed server"
    );
    assert!(!reached(refused), "the refused server got nothing");
}

#[test]
fn a_root_command_cannot_put_a_refused_server_in_an_allowed_sockets_place() {
    if !unix_hooks_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let (allowed, refused) = (d.join("allowed.sock"), d.join("refused.sock"));
    let (allowed_server, refused_server) = (server(&allowed), server(&refused));
    let file = d.join("t.rules");
    std::fs::write(&file, allow(&allowed)).unwrap();
    let out = run_guard(
        Command::new(guard_bin())
            .args(["run", "-v", "--rules"])
            .arg(&file)
            .args(["--", "sh", "-c", &replacement_script()])
            .env("ESCAPE", scope_escape())
            .env("D", &d)
            .env("A", &allowed)
            .env("R", &refused)
            .current_dir(&d),
        RUN_TIMEOUT,
    );
    assert_eq!(steps(&out), REPLACEMENT_STEPS, "{}", describe(&out));
    assert_untouched(&allowed, &allowed_server, &refused_server);
}

#[test]
fn a_symlink_on_the_way_to_an_allowed_socket_cannot_be_pointed_elsewhere() {
    if !unix_hooks_or_skip() {
        return;
    }
    // /dev/log's shape: an allowed name that is a symlink to the socket.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let (real, links) = (d.join("real"), d.join("links"));
    std::fs::create_dir(&real).unwrap();
    std::fs::create_dir(&links).unwrap();
    let socket = real.join("log.sock");
    let refused = real.join("refused.sock");
    let (socket_server, refused_server) = (server(&socket), server(&refused));
    let link = links.join("log");
    std::os::unix::fs::symlink(&socket, &link).unwrap();
    let file = d.join("t.rules");
    std::fs::write(&file, allow(&link)).unwrap();
    let script = [
        step("repoint", "ln -sfn \"$R\" \"$L\""),
        step("unlink", "rm -f \"$L\""),
        step("new_in_links", "touch \"$D/links/new\""),
        step("beside_the_socket", "touch \"$D/real/beside\""),
        step(
            "connect",
            "\"$ESCAPE\" unix-connect \"$L\" | grep -q ': ok'",
        ),
    ]
    .concat();
    let out = run_guard(
        Command::new(guard_bin())
            .args(["run", "-v", "--rules"])
            .arg(&file)
            .args(["--", "sh", "-c", &script])
            .env("ESCAPE", scope_escape())
            .env("D", &d)
            .env("L", &link)
            .env("R", &refused)
            .current_dir(&d),
        RUN_TIMEOUT,
    );
    assert_eq!(
        steps(&out),
        [
            "repoint=refused",
            "unlink=refused",
            "new_in_links=refused",
            "beside_the_socket=ok",
            "connect=ok",
        ],
        "{}",
        describe(&out)
    );
    assert_eq!(std::fs::read_link(&link).unwrap(), socket);
    assert!(reached(&socket_server));
    assert!(!reached(&refused_server));
}

#[test]
fn under_the_daemon_the_client_holds_the_allowed_socket_the_same_way() {
    if !unix_hooks_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let (allowed, refused) = (d.join("allowed.sock"), d.join("refused.sock"));
    let (allowed_server, refused_server) = (server(&allowed), server(&refused));
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: allow(&allowed),
        ..Default::default()
    });
    let out = run_guard(
        daemon
            .guard_command(&["run", "-v", "--", "sh", "-c", &replacement_script()])
            .env("ESCAPE", scope_escape())
            .env("D", &d)
            .env("A", &allowed)
            .env("R", &refused)
            .current_dir(&d),
        RUN_TIMEOUT,
    );
    assert_eq!(steps(&out), REPLACEMENT_STEPS, "{}", describe(&out));
    assert_untouched(&allowed, &allowed_server, &refused_server);
}

#[test]
fn under_the_daemon_a_unix_approval_is_the_asking_runs_and_not_another_runs() {
    if !unix_hooks_or_skip() {
        return;
    }
    use guard_tests::daemon::RetryingRun;
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_unix=\"prompt\")\n".into(),
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("asked.sock");
    let listener = server(&socket);
    let args = ["unix-connect", socket.to_str().unwrap()];
    let mut asker = RetryingRun::start(&daemon, &scope_escape(), &args);
    let mut other = RetryingRun::start(&daemon, &scope_escape(), &args);
    assert_eq!(outcomes(&asker.attempt().1), ["unix-connect: EPERM"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let ask = loop {
        if let Some(ask) = daemon.prompts().into_iter().next() {
            break ask;
        }
        assert!(std::time::Instant::now() < deadline, "no ask from the run");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ask["target"]["kind"], "unix", "{ask}");
    assert_eq!(ask["target"]["socket"], socket.to_str().unwrap(), "{ask}");
    let id = ask["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--session"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    assert_eq!(
        outcomes(&other.attempt().1),
        ["unix-connect: EPERM"],
        "another run's connect is not the one approved"
    );
    assert!(!reached(&listener), "the other run got nothing through");
    assert_eq!(
        outcomes(&asker.attempt().1),
        ["unix-connect: ok"],
        "the asking run's retry goes through"
    );
    assert!(reached(&listener));
    assert!(!reached(&listener), "one connect arrived, the asking run's");
}
