//! Held calls under the daemon: `guard run` installs the hold's filter on its command and
//! hands the listener to the daemon, so a prompted connect (or exec) waits in its syscall
//! while the ask is out, and goes on the moment `guard approve` answers it from another
//! terminal, or fails with the blocked-request message after `guard deny` or the ask's
//! timeout. A held connect to a stand-in is held on its way to guard's splice listener (its
//! SYNs dropped until the approval, so its program's own connect timeout applies and a denial
//! fails it), only that connection is spliced once approved (never another socket at its port
//! on another loopback address), and its `getpeername` names the stand-in. Needs root; without
//! it each test prints `skipped: ...` (a failure when CI=true).

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{dns_probe, net_probe};
use guard_tests::daemon::{DaemonSetup, RetryingRun, TestDaemon, can_run, finish_held, text};
use guard_tests::dns::TestDns;
use guard_tests::kernel::{http_server, touch_program};
use guard_tests::sockets;
fn daemon_asking_about(ports: &[u16], extra_config: &str) -> TestDaemon {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let ports = ports.join(", ");
    TestDaemon::start(&DaemonSetup {
        rules: format!(
            "address_rule(addresses=[\"127.0.0.1\"], ports=[{ports}], decision=\"prompt\", \
             justification=\"ask before the test server\")\n\
             prefix_rule(pattern=[\"touch\"], decision=\"prompt\", justification=\"asks first\")\n"
        ),
        extra_config: extra_config.to_string(),
        ..Default::default()
    })
}

fn curl_args(port: u16) -> Vec<String> {
    ["curl", "-sS", "--max-time", "60"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("http://127.0.0.1:{port}/")])
        .collect()
}

#[test]
fn a_held_curl_completes_after_guard_approve_from_another_terminal() {
    if !can_run() {
        return;
    }
    let port = http_server(2);
    let daemon = daemon_asking_about(&[port], "");
    let args = curl_args(port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut run = daemon.held_run(&args);
    let ask = daemon.pending_ask(&mut run);
    assert_eq!(ask["record"]["port"], port, "{ask}");
    assert!(
        run.try_wait().unwrap().is_none(),
        "curl waits for the answer"
    );
    let id = ask["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    assert_eq!(code, 0, "the held connect went on: {stdout}{stderr}");
    assert_eq!(stdout, "held-ok", "{stderr}");
    assert!(
        stderr.contains("guard: holding") && stderr.contains(&format!("guard: ask {id}:")),
        "the run said it holds the connect and how to answer: {stderr}"
    );
}

#[test]
fn a_held_curl_fails_with_the_message_after_guard_deny_or_the_timeout() {
    if !can_run() {
        return;
    }
    // A denied ask stays denied for its request, so the timeout is shown on a second port.
    let (port, unanswered_port) = (http_server(0), http_server(0));
    let daemon = daemon_asking_about(&[port, unanswered_port], "[asks]\ntimeout_secs = 2\n");
    let args = curl_args(port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let mut run = daemon.held_run(&args);
    let id = daemon.pending_ask(&mut run)["id"].as_u64().unwrap();
    let out = daemon.guard(&["deny", &id.to_string()]);
    assert!(out.status.success(), "deny: {}", text(&out.stderr));
    let (code, _, stderr) = finish_held(run);
    assert_eq!(code, 7, "curl: could not connect: {stderr}");
    assert!(
        stderr.contains(&format!("ask {id} was denied")) && stderr.contains("127.0.0.1"),
        "the blocked-request message with the ask: {stderr}"
    );

    // Unanswered: it expires after two seconds and fails the same way.
    let args = curl_args(unanswered_port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let run = daemon.held_run(&args);
    let (code, _, stderr) = finish_held(run);
    // Ended by guard as the ask expires (the kernel's own bound on a held connect is later).
    assert_eq!(code, 7, "{stderr}");
    assert!(stderr.contains("expired unanswered"), "{stderr}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it waited for the timeout"
    );
    // One record each for how the held calls ended.
    let ended = records_until(&daemon, "held_ended", |r| r.len() >= 2);
    let outcomes: Vec<(&str, &str)> = ended
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap_or_default(),
                r["action"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    // The kernel held them (a socket ended, not a refused call).
    assert_eq!(
        outcomes,
        [("denied", "ended"), ("expired", "ended")],
        "{ended:?}"
    );
    assert!(
        ended.iter().all(|r| r["process"]["argv"][0] == "curl"),
        "{ended:?}"
    );
}

#[test]
fn a_held_exec_runs_after_guard_approve_and_only_prompted_calls_wait() {
    if !can_run() {
        return;
    }
    let daemon = daemon_asking_about(&[9], "");
    let made = daemon.dir.path().join("made");
    let script = format!(
        "true; {} {}; echo rc=$?",
        touch_program().display(),
        made.display()
    );
    let mut run = daemon.held_run(&["sh", "-c", &script]);
    let ask = daemon.pending_ask(&mut run);
    assert_eq!(daemon.prompts().len(), 1, "`true` and `sh` were not held");
    let id = ask["id"].as_u64().unwrap().to_string();
    assert!(!made.exists(), "touch waits");
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    assert_eq!((code, stdout.trim()), (0, "rc=0"), "{stderr}");
    assert!(made.exists(), "touch ran, with no re-run");
}

#[test]
fn a_held_connect_to_a_stand_in_goes_to_the_real_host_once_approved() {
    if !can_run() {
        return;
    }
    // The name's real address is a loopback listener; the name reaches guard's resolver only
    // through the redirect of the command's DNS (127.0.0.153:53: nothing listens there).
    let dns = TestDns::start();
    let real = std::net::Ipv4Addr::new(127, 0, 1, 23);
    let listener = std::net::TcpListener::bind((real, 0)).expect("a loopback listener");
    let port = listener.local_addr().unwrap().port().to_string();
    dns.set_a("held.example.test", &[real], 60);
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_network=\"prompt\")\n".to_string(),
        nameserver: Some(dns.addr()),
        ..Default::default()
    });
    let probe = dns_probe();
    let probe = probe.to_string_lossy();
    let mut run = daemon.held_run(&[
        &probe,
        "127.0.0.153:53",
        "held.example.test",
        "udp",
        "1",
        &port,
    ]);
    let ask = daemon.pending_ask(&mut run);
    assert_eq!(ask["record"]["host"], "held.example.test", "{ask}");
    assert_eq!(
        dns.queries("held.example.test"),
        0,
        "the name stays on the host while its connect is held"
    );
    let id = ask["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let result: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}; {stderr}"));
    assert!(
        result["addresses"][0]
            .as_str()
            .is_some_and(|a| a.starts_with("198.18.")),
        "answered with a stand-in: {result}"
    );
    assert_eq!(
        result["connected"], 1,
        "the held connect went on to {real}: {result}; {stderr}"
    );
    // Resolved on approval (its A and AAAA records).
    assert!(dns.queries("held.example.test") > 0, "resolved on approval");
}

#[test]
fn a_held_connect_to_a_stand_in_waits_at_the_splice_listener_and_its_request_reaches_the_real_host_once_approved()
 {
    if !can_run() {
        return;
    }
    // curl looks the name up as any program does (its DNS is redirected to guard's resolver,
    // which answers a stand-in), connects, sends its request and waits for the reply: the
    // connect waits at guard's splice listener until the approval, then goes to the real host.
    let dns = TestDns::start();
    let port = http_server(1);
    dns.set_a("spliced.example.test", &[std::net::Ipv4Addr::LOCALHOST], 60);
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_network=\"prompt\")\n".to_string(),
        nameserver: Some(dns.addr()),
        ..Default::default()
    });
    let url = format!("http://spliced.example.test:{port}/");
    let mut run = daemon.held_run(&["curl", "-sS", "--max-time", "60", &url]);
    let ask = daemon.pending_ask(&mut run);
    assert_eq!(ask["record"]["host"], "spliced.example.test", "{ask}");
    assert_eq!(
        dns.queries("spliced.example.test"),
        0,
        "the name stays on the host while its connect is held"
    );
    let id = ask["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    assert_eq!(
        (code, stdout.as_str()),
        (0, "held-ok"),
        "the request went through the splice to the real host: {stderr}"
    );
    let ended = records_until(&daemon, "held_ended", |r| !r.is_empty());
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(
        (ended[0]["outcome"].as_str(), ended[0]["action"].as_str()),
        (Some("approved"), Some("continue")),
        "{}",
        ended[0]
    );
}

#[test]
fn an_attacker_at_a_held_connects_port_on_another_loopback_address_never_takes_its_splice() {
    if !can_run() {
        return;
    }
    // An attacker on the host (here the test itself, which no scope holds: more than another
    // scope may do) binds the held connect's port on other loopback addresses and connects to
    // the splice listener, once before the held connect comes and once while it waits, each
    // sending bytes of its own. The approval splices the held connect alone: the real server
    // gets curl's request and nothing else, curl gets the reply, the attackers get nothing.
    let dns = TestDns::start();
    let real = Ipv4Addr::new(127, 0, 1, 41);
    let server = RecordingServer::start(real);
    dns.set_a("taken.example.test", &[real], 60);
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_network=\"prompt\")\n".to_string(),
        nameserver: Some(dns.addr()),
        ..Default::default()
    });
    let splice_port = splice_listener_port(&daemon);
    // First: the port is the attacker's pick (the kernel's for it), which the held program
    // then binds on 127.0.0.1, so this connection waits at the listener before the held one.
    let (early, port) = attacker(Ipv4Addr::new(127, 0, 0, 2), 0, splice_port, b"hijack-early");
    let url = format!("http://taken.example.test:{}/", server.port);
    let port_text = port.to_string();
    let mut run = daemon.held_run(&[
        "curl",
        "-sS",
        "--max-time",
        "20",
        "--interface",
        "127.0.0.1",
        "--local-port",
        &port_text,
        &url,
    ]);
    let ask = daemon.pending_ask(&mut run);
    assert_eq!(ask["record"]["host"], "taken.example.test", "{ask}");
    let held = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    // Held on its way: its SYNs to the listener are dropped until the approval.
    wait_for_connection(
        held,
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, splice_port),
        sockets::SYN_SENT,
    );
    // Then: one that comes while the held connect waits, from the same port on 127.0.0.3.
    let (late, _) = attacker(
        Ipv4Addr::new(127, 0, 0, 3),
        port,
        splice_port,
        b"hijack-late",
    );

    let id = ask["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    // Anything spliced by mistake has reached the server by now (it was sent before).
    std::thread::sleep(Duration::from_millis(500));
    let received = server.received();
    assert_eq!(
        received.len(),
        1,
        "one connection reached the real server: {received:?}"
    );
    let request = String::from_utf8_lossy(&received[0]);
    assert!(
        request.starts_with("GET / HTTP/1.1\r\nHost: taken.example.test:")
            && !request.contains("hijack"),
        "the held program's request, none of the attackers' bytes: {request:?}"
    );
    assert_eq!(
        (code, stdout.as_str()),
        (0, "spliced-ok"),
        "the held program got the reply: {stderr}"
    );
    for (name, stream) in [("early", early), ("late", late)] {
        assert_no_reply(name, stream);
    }
}

/// A daemon that answers names no rule names with stand-ins and asks about their connects,
/// its upstream `dns`, with `extra_config`.
fn daemon_with_stand_ins(dns: &TestDns, extra_config: &str) -> TestDaemon {
    TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_network=\"prompt\")\n".to_string(),
        nameserver: Some(dns.addr()),
        extra_config: extra_config.to_string(),
        ..Default::default()
    })
}

#[test]
fn a_held_connect_to_an_unknown_name_gives_up_on_its_own_timeout_and_its_retry_reaches_the_host_once_approved()
 {
    if !can_run() {
        return;
    }
    // The program looks the name up (guard's resolver answers a stand-in) and connects with
    // its own 2 s timeout, as `curl --connect-timeout 2` does: the connect is held on its way
    // to guard's splice listener, so it gives up on its own schedule, not at once and not
    // after a successful connect.
    let dns = TestDns::start();
    let real = Ipv4Addr::new(127, 0, 1, 52);
    let server = RecordingServer::start(real);
    let name = "timed.example.test";
    dns.set_a(name, &[real], 60);
    let daemon = daemon_with_stand_ins(&dns, "[asks]\ntimeout_secs = 60\n");
    let probe = net_probe().to_string_lossy().into_owned();
    let port = server.port.to_string();
    // Its retry comes from the same run: an approval answers the scope that asked.
    let mut run =
        RetryingRun::start_holding(&daemon, Path::new(&probe), &["name", "2", name, &port]);
    let (code, stdout) = run.attempt();
    let ms: u64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("timeout "))
        .and_then(|ms| ms.trim().parse().ok())
        .unwrap_or_else(|| panic!("the connect gave up on its own timeout: {code} {stdout}"));
    assert!(
        (1700..=3000).contains(&ms),
        "it gave up after about its own 2 s: {ms} ms"
    );
    assert!(
        server.received().is_empty(),
        "the given-up connect never reached the host: {:?}",
        server.received()
    );
    assert_eq!(dns.queries(name), 0, "the name stayed on the host");
    let ask = daemon
        .prompts()
        .into_iter()
        .find(|a| a["record"]["host"] == name)
        .unwrap_or_else(|| panic!("its ask stays open: {:?}", daemon.prompts()));
    let id = ask["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));

    let (code, stdout) = run.attempt();
    assert!(
        code == 0
            && stdout
                .lines()
                .any(|line| line.ends_with("reply spliced-ok")),
        "the retry reached the host and got its reply: {code} {stdout}"
    );
    let received = server.received();
    assert_eq!(
        received.len(),
        1,
        "one connection reached the host: {received:?}"
    );
    let request = String::from_utf8_lossy(&received[0]);
    assert!(
        request.starts_with(&format!("GET / HTTP/1.0\r\nHost: {name}\r\n")),
        "the program's request reached the host: {request:?}"
    );
}

#[test]
fn an_approved_held_connect_to_an_unknown_name_goes_through_the_splice_and_its_peer_is_the_stand_in()
 {
    if !can_run() {
        return;
    }
    // A connect that still waits when the approval comes: its next SYN reaches guard's splice
    // listener, which splices it to the real host; its getpeername names the stand-in it
    // connected to (IPv4, and IPv4-mapped from an IPv6 socket), not the listener. A name of
    // its own each time: once approved, a name's stand-in goes to its real address directly.
    let dns = TestDns::start();
    let real = Ipv4Addr::new(127, 0, 1, 53);
    let server = RecordingServer::start(real);
    for name in ["peer4.example.test", "peer6.example.test"] {
        dns.set_a(name, &[real], 60);
    }
    let daemon = daemon_with_stand_ins(&dns, "");
    let splice_port = splice_listener_port(&daemon);
    let probe = net_probe().to_string_lossy().into_owned();
    let port = server.port.to_string();
    for (family, name) in [("v4", "peer4.example.test"), ("v6", "peer6.example.test")] {
        let before = server.received().len();
        let mut run = daemon.held_run(&[&probe, "name", "30", name, &port, family]);
        let ask = daemon.pending_ask(&mut run);
        assert_eq!(ask["record"]["host"], name, "{ask}");
        if family == "v4" {
            // Held on its way: a SYN to the listener that is dropped, no connection there.
            let listener = SocketAddrV4::new(Ipv4Addr::LOCALHOST, splice_port);
            wait_for_peer(listener, sockets::SYN_SENT);
        }
        std::thread::sleep(Duration::from_millis(1000));
        assert!(
            run.try_wait().unwrap().is_none(),
            "{family}: the connect waits for the answer"
        );
        assert_eq!(
            server.received().len(),
            before,
            "{family}: nothing reached the host yet"
        );
        let id = ask["id"].as_u64().unwrap().to_string();
        let out = daemon.guard(&["approve", &id, "--once"]);
        assert!(out.status.success(), "approve: {}", text(&out.stderr));
        let (code, stdout, stderr) = finish_held(run);
        let fields: Vec<&str> = stdout.split_whitespace().collect();
        let [ok, ms, peer_word, peer, reply_word, body] = fields[..] else {
            panic!("{family}: one connect and its reply: {code} {stdout} {stderr}");
        };
        assert_eq!(
            (code, ok, peer_word, reply_word, body),
            (0, "ok", "peer", "reply", "spliced-ok"),
            "{family}: {stdout} {stderr}"
        );
        assert!(
            ms.parse::<u64>().is_ok_and(|ms| ms >= 1000),
            "{family}: the connect completed only after the approval: {stdout}"
        );
        let stand_in_prefix = if family == "v4" {
            "198.18."
        } else {
            "[::ffff:198.18."
        };
        assert!(
            peer.starts_with(stand_in_prefix) && peer.ends_with(&format!(":{port}")),
            "{family}: getpeername names the stand-in the program connected to, not guard's \
             listener at 127.0.0.1:{splice_port}: {peer}"
        );
        let received = server.received();
        assert_eq!(received.len(), before + 1, "{family}: {received:?}");
        let request = String::from_utf8_lossy(&received[before]);
        assert!(
            request.starts_with(&format!("GET / HTTP/1.0\r\nHost: {name}\r\n")),
            "{family}: the program's request went through the splice: {request:?}"
        );
    }
}

#[test]
fn an_approved_held_connect_to_an_unknown_name_that_sends_and_closes_at_once_still_delivers() {
    if !can_run() {
        return;
    }
    // The program sends its request and closes its socket the moment its connect completes,
    // before guard takes the connection at its splice listener: what it sent still reaches the
    // host (`echo data | nc host port` does this).
    let dns = TestDns::start();
    let real = Ipv4Addr::new(127, 0, 1, 55);
    let server = RecordingServer::start(real);
    let name = "hasty.example.test";
    dns.set_a(name, &[real], 60);
    let daemon = daemon_with_stand_ins(&dns, "");
    let probe = net_probe().to_string_lossy().into_owned();
    let port = server.port.to_string();
    let mut run = daemon.held_run(&[&probe, "name", "30", name, &port, "send-close"]);
    let id = daemon.pending_ask(&mut run)["id"].as_u64().unwrap();
    let out = daemon.guard(&["approve", &id.to_string(), "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    assert!(
        code == 0 && stdout.trim().ends_with(" sent"),
        "{code} {stdout} {stderr}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while server
        .received()
        .first()
        .is_none_or(|r| !r.ends_with(b"\r\n\r\n"))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let received = server.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(
        String::from_utf8_lossy(&received[0]),
        format!("GET / HTTP/1.0\r\nHost: {name}\r\n\r\n"),
        "the request the program sent before it closed reached the host"
    );
}

#[test]
fn a_denied_held_connect_to_an_unknown_name_fails_its_connect() {
    if !can_run() {
        return;
    }
    // Denied: the connect fails (ECONNABORTED), as any held connect's does, never a connect
    // that succeeds and is then closed.
    let dns = TestDns::start();
    let real = Ipv4Addr::new(127, 0, 1, 54);
    let server = RecordingServer::start(real);
    let name = "denied.example.test";
    dns.set_a(name, &[real], 60);
    let daemon = daemon_with_stand_ins(&dns, "");
    let probe = net_probe().to_string_lossy().into_owned();
    let port = server.port.to_string();
    let mut run = daemon.held_run(&[&probe, "name", "30", name, &port]);
    let id = daemon.pending_ask(&mut run)["id"].as_u64().unwrap();
    let out = daemon.guard(&["deny", &id.to_string()]);
    assert!(out.status.success(), "deny: {}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    assert!(
        code == 1
            && stdout
                .trim()
                .starts_with(&format!("errno {} ", libc::ECONNABORTED)),
        "the connect itself failed: {code} {stdout} {stderr}"
    );
    assert!(
        stderr.contains(&format!("ask {id} was denied")),
        "the blocked-request message with the ask: {stderr}"
    );
    assert!(server.received().is_empty(), "{:?}", server.received());
    assert_eq!(dns.queries(name), 0, "the name never left the host");
    let ended = records_until(&daemon, "held_ended", |r| !r.is_empty());
    let outcomes: Vec<(&str, &str)> = ended
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap_or_default(),
                r["action"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(outcomes, [("denied", "ended")], "{ended:?}");
}

/// Waits (at most 10 s) until this host has a TCP connection to `remote` in `state`.
fn wait_for_peer(remote: SocketAddrV4, state: u8) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tcp = sockets::rows(std::process::id(), "tcp");
        if tcp.iter().any(|r| r.remote == remote && r.state == state) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no connection to {remote} in state {state:#x} within 10 s: {tcp:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The port of the daemon's splice listener, as anyone on the host can find it: the daemon's
/// TCP listener on 127.0.0.1 whose port is not also its resolver's (which listens on UDP and
/// TCP at one port).
fn splice_listener_port(daemon: &TestDaemon) -> u16 {
    let pid = daemon.pid();
    let ours = sockets::socket_inodes(pid);
    let resolver: Vec<u16> = sockets::rows(pid, "udp")
        .into_iter()
        .filter(|r| ours.contains(&r.inode))
        .map(|r| r.local.port())
        .collect();
    let listeners: Vec<u16> = sockets::rows(pid, "tcp")
        .into_iter()
        .filter(|r| r.state == sockets::LISTEN && ours.contains(&r.inode))
        .filter(|r| *r.local.ip() == Ipv4Addr::LOCALHOST && !resolver.contains(&r.local.port()))
        .map(|r| r.local.port())
        .collect();
    assert_eq!(
        listeners.len(),
        1,
        "one TCP listener of the daemon besides its resolver: {listeners:?}"
    );
    listeners[0]
}

/// Waits (at most 10 s) until this host has a TCP connection from `local` to `remote` in
/// `state` (`/proc/net/tcp`'s).
fn wait_for_connection(local: SocketAddrV4, remote: SocketAddrV4, state: u8) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tcp = sockets::rows(std::process::id(), "tcp");
        if tcp
            .iter()
            .any(|r| r.local == local && r.remote == remote && r.state == state)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no connection from {local} to {remote} in state {state:#x} within 10 s: {tcp:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP connection from `ip`:`port` (0: the kernel picks) to the splice listener at
/// 127.0.0.1:`splice_port` that has sent `bytes`; the port it came from.
fn attacker(ip: Ipv4Addr, port: u16, splice_port: u16, bytes: &[u8]) -> (TcpStream, u16) {
    use std::io::Write;
    use std::os::fd::{FromRawFd, OwnedFd};
    let address = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a socket made here, owned at once; bind and connect get a sockaddr_in of `size`.
    let stream = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let fd = OwnedFd::from_raw_fd(fd);
        use std::os::fd::AsRawFd;
        let from = address(ip, port);
        let to = address(Ipv4Addr::LOCALHOST, splice_port);
        assert_eq!(
            libc::bind(fd.as_raw_fd(), (&raw const from).cast(), size),
            0,
            "bind {ip}:{port}: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(
            libc::connect(fd.as_raw_fd(), (&raw const to).cast(), size),
            0,
            "connect from {ip}:{port} to the splice listener: {}",
            std::io::Error::last_os_error()
        );
        TcpStream::from(fd)
    };
    (&stream)
        .write_all(bytes)
        .expect("sending to the splice listener");
    let port = stream.local_addr().unwrap().port();
    (stream, port)
}

/// Nothing came back on an attacker's connection: no byte within half a second (it waits
/// unmatched, or was closed).
fn assert_no_reply(name: &str, mut stream: TcpStream) {
    use std::io::Read;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut got = [0u8; 256];
    match stream.read(&mut got) {
        Ok(0) => {}
        Ok(n) => panic!(
            "the {name} attacker got the server's bytes: {:?}",
            String::from_utf8_lossy(&got[..n])
        ),
        Err(e) => assert!(
            matches!(
                e.kind(),
                ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::ConnectionReset
            ),
            "the {name} attacker's read: {e}"
        ),
    }
}

/// A server on `ip` that keeps every byte each connection sends it (for 60 s at most) and
/// answers a request (once it ends, or after 2 s) with `spliced-ok`.
struct RecordingServer {
    port: u16,
    connections: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl RecordingServer {
    fn start(ip: Ipv4Addr) -> RecordingServer {
        let listener = TcpListener::bind((ip, 0)).expect("a loopback listener");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let kept = connections.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let kept = kept.clone();
                        std::thread::spawn(move || Self::serve(stream, &kept));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        RecordingServer { port, connections }
    }

    fn serve(mut stream: TcpStream, kept: &Mutex<Vec<Vec<u8>>>) {
        use std::io::{Read, Write};
        let at = {
            let mut all = kept.lock().unwrap();
            all.push(Vec::new());
            all.len() - 1
        };
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut buffer = [0u8; 4096];
        // Bounded: 64 reads of at most 2 s each.
        for _ in 0..64 {
            let Ok(n @ 1..) = stream.read(&mut buffer) else {
                break;
            };
            let mut all = kept.lock().unwrap();
            all[at].extend_from_slice(&buffer[..n]);
            if all[at].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nspliced-ok");
    }

    /// What each connection sent so far, in the order they came.
    fn received(&self) -> Vec<Vec<u8>> {
        self.connections.lock().unwrap().clone()
    }
}

/// The daemon's audit records (`guard audit --json`) of `kind`, once `ready` holds for them
/// (at most 10 s: records reach the log in batches).
fn records_until(
    daemon: &TestDaemon,
    kind: &str,
    ready: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = daemon.guard(&["audit", "--json"]);
        let records: Vec<serde_json::Value> = text(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .filter(|r: &serde_json::Value| r["type"] == kind)
            .collect();
        if ready(&records) || Instant::now() >= deadline {
            return records;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_held_connect_from_a_worker_thread_waits_goes_on_when_approved_and_is_recorded_with_its_argv() {
    if !can_run() {
        return;
    }
    let port = http_server(1);
    let daemon = daemon_asking_about(&[port], "");
    let probe = net_probe().to_string_lossy().into_owned();
    let port_text = port.to_string();
    let mut run = daemon.held_run(&[&probe, "thread", "tcp", "127.0.0.1", &port_text]);
    let ask = daemon.pending_ask(&mut run);
    assert_eq!(ask["record"]["port"], port, "{ask}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        run.try_wait().unwrap().is_none(),
        "the worker thread's connect waits for the answer, it is not refused at once"
    );
    let id = ask["id"].as_u64().unwrap();
    let out = daemon.guard(&["approve", &id.to_string(), "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    assert_eq!((code, stdout.trim()), (0, "ok"), "{stderr}");

    let held = records_until(&daemon, "decision", |r| !r.is_empty());
    let held = held
        .iter()
        .find(|r| r["ask"] == id)
        .unwrap_or_else(|| panic!("a decision record for ask {id}: {held:?}"));
    assert_eq!(held["action"], "held", "{held}");
    assert_eq!(held["held"], true, "{held}");
    let argv = &held["process"]["argv"];
    assert_eq!(argv[0], probe.as_str(), "the process's argv: {held}");
    assert_eq!(argv[1], "thread", "{held}");
    assert_ne!(
        held["process"]["pid"], held["process"]["tid"],
        "the record names the process and its worker thread: {held}"
    );
    let ended = records_until(&daemon, "held_ended", |r| !r.is_empty());
    assert_eq!(ended.len(), 1, "one record for how it ended: {ended:?}");
    let ended = &ended[0];
    assert_eq!(ended["outcome"], "approved", "{ended}");
    assert_eq!(ended["action"], "continue", "{ended}");
    assert_eq!(ended["ask"], id, "{ended}");
    assert_eq!(ended["process"]["argv"], *argv, "{ended}");
    assert_eq!(ended["destination"]["port"], port, "{ended}");
}

#[test]
fn a_held_connect_its_program_gives_up_never_connects_and_its_retry_connects_after_approval() {
    if !can_run() {
        return;
    }
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let daemon = daemon_asking_about(&[port], "[asks]\ntimeout_secs = 60\n");
    let probe = net_probe().to_string_lossy().into_owned();
    let port_text = port.to_string();
    // The program's own timeout: a connect that gives up after 2 s (a non-blocking connect and
    // a poll, as `curl --connect-timeout 2`).
    // Its retry comes from the same run: an approval answers the scope that asked.
    let started = Instant::now();
    let mut run = RetryingRun::start_holding(
        &daemon,
        Path::new(&probe),
        &["timed", "2", "127.0.0.1", &port_text],
    );
    let (code, stdout) = run.attempt();
    let took = started.elapsed();
    assert!(
        code == 1 && stdout.trim().starts_with("timeout "),
        "the program gave up its connect on its own timeout: {code} {stdout}"
    );
    let id = daemon.prompts()[0]["id"].as_u64().unwrap();
    assert!(
        took < Duration::from_secs(10),
        "on its own schedule, not the ask's 60 s: {took:?}"
    );
    assert!(
        listener.accept().is_err(),
        "the given-up connect never reached the listener"
    );
    let ended = records_until(&daemon, "held_ended", |r| !r.is_empty());
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0]["outcome"], "given_up", "{}", ended[0]);
    assert_eq!(ended[0]["action"], "none", "{}", ended[0]);
    let prompts = daemon.prompts();
    assert!(
        prompts.iter().any(|a| a["id"] == id),
        "the ask stays open after the program gave up: {prompts:?}"
    );
    let out = daemon.guard(&["approve", &id.to_string(), "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (code, stdout) = run.attempt();
    assert!(
        code == 0 && stdout.trim().starts_with("ok "),
        "the retry connects: {code} {stdout}"
    );
    listener.set_nonblocking(false).unwrap();
    assert!(listener.accept().is_ok(), "the retry reached the listener");
}
