//! Destination decisions in the real kernel: connect (TCP and UDP) and UDP sendto, IPv4, IPv6 and
//! IPv4-mapped IPv6, by address, CIDR, `network_rule` IP literal and host name (resolved by a
//! test DNS server and refreshed as its TTL runs out), with the events that name the rule and the
//! process, `prompt` refusing, and processes outside the scope untouched.
//!
//! Every call under test is made by `net-probe`, spawned into the session's scope: the test's own
//! threads are outside it. All traffic stays on loopback (127.0.0.0/8, ::1). Refusals are EPERM
//! on both backends. Needs root; without it, or where the kernel cannot run the programs, each
//! test prints `skipped: ...` (and fails when CI=true).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{dns_probe, net_probe};
use guard::kernel::events::{Action, EventKind, KernelEvent};
use guard::policy::Decision;
use guard::session::SessionOptions;
use guard_tests::dns::TestDns;
use guard_tests::kernel::{TestSession, session_or_skip};

const PROBE_TIMEOUT: Duration = Duration::from_secs(15);
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a probe call came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Errno(i32),
}

const EPERM: Outcome = Outcome::Errno(libc::EPERM);
const ECONNREFUSED: Outcome = Outcome::Errno(libc::ECONNREFUSED);

/// Runs `net-probe CALL ADDR PORT` in the scope; its outcome and pid.
fn probe_with_pid(session: &TestSession, call: &str, addr: &str, port: u16) -> (Outcome, u32) {
    probe_args(Some(session), &[call, addr, &port.to_string()])
}

fn probe(session: &TestSession, call: &str, addr: &str, port: u16) -> Outcome {
    probe_with_pid(session, call, addr, port).0
}

#[track_caller]
fn expect(session: &TestSession, call: &str, addr: &str, port: u16, want: Outcome) {
    let got = probe(session, call, addr, port);
    assert_eq!(got, want, "net-probe {call} {addr} {port}");
}

/// Not refused by guard: connected, or refused by the network itself (nothing listening).
#[track_caller]
fn expect_not_refused(session: &TestSession, call: &str, addr: &str, port: u16) {
    let got = probe(session, call, addr, port);
    assert!(
        got == Outcome::Ok || got == ECONNREFUSED,
        "net-probe {call} {addr} {port}: expected it through guard (ok or ECONNREFUSED), got {got:?}"
    );
}

/// A TCP listener on `ip` at an ephemeral port.
fn listener(ip: &str) -> (TcpListener, u16) {
    let listener = TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0))
        .unwrap_or_else(|err| panic!("listening on {ip}: {err}"));
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A port on `ip` that nothing listens on (bound, then let go).
fn free_port(ip: &str) -> u16 {
    listener(ip).1
}

/// Whether `listener` gets a connection within 5 s.
fn accepts(listener: &TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if listener.accept().is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Whether ::1 is configured (an IPv6 loopback the allowed-side checks can use).
fn has_ipv6_loopback() -> bool {
    TcpListener::bind("[::1]:0").is_ok()
}

fn rule_origin(session: &TestSession, event: &KernelEvent) -> (String, usize) {
    let id = event
        .rule
        .unwrap_or_else(|| panic!("the event names no rule: {event:#?}"));
    let origin = session.image().rules[id as usize]
        .origin
        .clone()
        .unwrap_or_else(|| panic!("rule {id} has no origin"));
    (origin.file.to_string(), origin.line)
}

#[test]
fn a_forbidden_address_is_refused_over_tcp_udp_and_mapped_ipv6_while_others_connect() {
    let (allowed, allowed_port) = listener("127.0.0.1");
    // A listener on the forbidden address itself: without guard these calls would succeed.
    let (_blocked_listener, blocked_port) = listener("127.0.0.2");
    let (other_listener, other_port) = listener("127.0.0.2");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let rules = format!(
        "address_rule(addresses=[\"127.0.0.2\"], ports=[{blocked_port}], decision=\"deny\")\n"
    );
    let Some(session) = session_or_skip(&rules, SessionOptions::default()) else {
        return;
    };

    expect(&session, "tcp", "127.0.0.1", allowed_port, Outcome::Ok);
    assert!(
        accepts(&allowed),
        "the allowed listener got the probe's connection"
    );
    expect(&session, "tcp", "127.0.0.2", other_port, Outcome::Ok);
    assert!(
        accepts(&other_listener),
        "another port of the same address is allowed"
    );
    expect(&session, "udp-sendto", "127.0.0.1", udp_port, Outcome::Ok);
    let mut buf = [0u8; 16];
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (n, _) = udp
        .recv_from(&mut buf)
        .expect("the allowed datagram arrives");
    assert_eq!(&buf[..n], b"guard");

    expect(&session, "tcp", "127.0.0.2", blocked_port, EPERM);
    expect(&session, "udp-connect", "127.0.0.2", blocked_port, EPERM);
    expect(&session, "udp-sendto", "127.0.0.2", blocked_port, EPERM);
    // IPv4-mapped IPv6 is looked up as IPv4.
    expect(&session, "tcp", "::ffff:127.0.0.2", blocked_port, EPERM);
    expect(
        &session,
        "udp-connect",
        "::ffff:127.0.0.2",
        blocked_port,
        EPERM,
    );
    expect(
        &session,
        "udp-sendto",
        "::ffff:127.0.0.2",
        blocked_port,
        EPERM,
    );
    expect(
        &session,
        "tcp",
        "::ffff:127.0.0.1",
        allowed_port,
        Outcome::Ok,
    );
    assert!(accepts(&allowed), "a mapped allowed address connects");

    // Through guard, a port with nothing on it is the network's refusal, not guard's.
    let free = free_port("127.0.0.1");
    expect(&session, "tcp", "127.0.0.1", free, ECONNREFUSED);
}

#[test]
fn a_connect_to_the_unspecified_address_is_decided_as_the_local_address_it_reaches() {
    // Linux sends 0.0.0.0 to the socket's own address (127.0.0.1 when unbound) and `::` to ::1.
    let (bound_listener, bound_port) = listener("127.0.0.3");
    let bound_udp = UdpSocket::bind("127.0.0.3:0").unwrap();
    let bound_udp_port = bound_udp.local_addr().unwrap().port();
    let (loopback_listener, loopback_port) = listener("127.0.0.1");
    let (allowed_listener, allowed_port) = listener("127.0.0.4");
    let v6 = has_ipv6_loopback().then(|| listener("::1"));
    let v6_rule = match &v6 {
        Some((_, port)) => {
            format!("address_rule(addresses=[\"::1\"], ports=[{port}], decision=\"deny\")\n")
        }
        None => String::new(),
    };
    let rules = format!(
        "address_rule(addresses=[\"127.0.0.3\"], decision=\"deny\")\n\
         address_rule(addresses=[\"127.0.0.1\"], ports=[{loopback_port}], decision=\"deny\")\n\
         {v6_rule}"
    );
    let Some(session) = session_or_skip(&rules, SessionOptions::default()) else {
        return;
    };
    let from = |source: &str, call: &str, addr: &str, port: u16| {
        probe_args(
            Some(&session),
            &["from", source, call, addr, &port.to_string()],
        )
        .0
    };

    // From a socket bound to the forbidden address: refused, and nothing arrives there.
    assert_eq!(from("127.0.0.3", "tcp", "0.0.0.0", bound_port), EPERM);
    assert_eq!(
        from("127.0.0.3", "udp-connect", "0.0.0.0", bound_port),
        EPERM
    );
    assert_eq!(
        from("127.0.0.3", "udp-sendto", "0.0.0.0", bound_udp_port),
        EPERM
    );
    assert_eq!(
        from("::ffff:127.0.0.3", "tcp", "::ffff:0.0.0.0", bound_port),
        EPERM,
        "a dual-stack socket bound to the IPv4-mapped address"
    );
    assert_eq!(
        from(
            "::ffff:127.0.0.3",
            "udp-sendto",
            "::ffff:0.0.0.0",
            bound_udp_port
        ),
        EPERM
    );
    assert!(!accepts(&bound_listener), "no connection reached 127.0.0.3");
    bound_udp
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 16];
    assert!(
        bound_udp.recv_from(&mut buf).is_err(),
        "no datagram reached 127.0.0.3"
    );

    // Unbound: 0.0.0.0 (also IPv4-mapped) is 127.0.0.1, whose port is forbidden.
    expect(&session, "tcp", "0.0.0.0", loopback_port, EPERM);
    expect(&session, "tcp", "::ffff:0.0.0.0", loopback_port, EPERM);
    expect(&session, "udp-connect", "0.0.0.0", loopback_port, EPERM);
    assert!(
        !accepts(&loopback_listener),
        "no connection reached 127.0.0.1"
    );

    // Decided as the address reached, not refused as such: an allowed one connects.
    assert_eq!(
        from("127.0.0.4", "tcp", "0.0.0.0", allowed_port),
        Outcome::Ok
    );
    assert!(accepts(&allowed_listener), "127.0.0.4 got the connection");

    match v6 {
        Some((listener, port)) => {
            expect(&session, "tcp", "::", port, EPERM);
            expect(&session, "udp-sendto", "::", port, EPERM);
            assert!(!accepts(&listener), "no connection reached ::1");
        }
        None => println!("note: ::1 is not configured here; `::` was not checked"),
    }
}

#[test]
fn a_cidr_covers_its_addresses_and_no_others() {
    let (_listener, port) = listener("127.0.0.9");
    let rules = "address_rule(addresses=[\"127.0.0.8/29\"], decision=\"deny\")\n";
    let Some(session) = session_or_skip(rules, SessionOptions::default()) else {
        return;
    };
    expect(&session, "tcp", "127.0.0.9", port, EPERM);
    for addr in ["127.0.0.8", "127.0.0.15"] {
        expect(&session, "tcp", addr, free_port(addr), EPERM);
        expect(&session, "udp-sendto", addr, 9, EPERM);
    }
    for addr in ["127.0.0.7", "127.0.0.16"] {
        expect(&session, "tcp", addr, free_port(addr), ECONNREFUSED);
        expect(&session, "udp-sendto", addr, 9, Outcome::Ok);
    }
}

#[test]
fn a_network_rule_for_an_ip_literal_covers_https_over_tcp_and_udp() {
    let rules = "network_rule(host=\"127.0.0.3\", protocol=\"https\", decision=\"deny\")\n";
    let Some(session) = session_or_skip(rules, SessionOptions::default()) else {
        return;
    };
    // EPERM comes before any listener would be needed.
    expect(&session, "tcp", "127.0.0.3", 443, EPERM);
    expect(&session, "udp-sendto", "127.0.0.3", 443, EPERM);
    expect(&session, "udp-connect", "127.0.0.3", 443, EPERM);
    // https is port 443 only.
    expect(
        &session,
        "tcp",
        "127.0.0.3",
        free_port("127.0.0.3"),
        ECONNREFUSED,
    );
    expect(&session, "udp-sendto", "127.0.0.3", 80, Outcome::Ok);
    expect_not_refused(&session, "tcp", "127.0.0.4", 443);
}

#[test]
fn ipv6_loopback_is_refused_by_an_address_rule() {
    let v6 = has_ipv6_loopback();
    let (blocked_port, allowed) = if v6 {
        let (blocked, port) = listener("::1");
        drop(blocked);
        (port, Some(listener("::1")))
    } else {
        (4434, None)
    };
    let rules =
        format!("address_rule(addresses=[\"::1\"], ports=[{blocked_port}], decision=\"deny\")\n");
    let Some(session) = session_or_skip(&rules, SessionOptions::default()) else {
        return;
    };
    expect(&session, "tcp", "::1", blocked_port, EPERM);
    expect(&session, "udp-sendto", "::1", blocked_port, EPERM);
    expect(&session, "udp-connect", "::1", blocked_port, EPERM);
    match allowed {
        Some((listener, port)) => {
            expect(&session, "tcp", "::1", port, Outcome::Ok);
            assert!(accepts(&listener), "another port of ::1 is allowed");
        }
        None => println!("note: ::1 is not configured here; only the refusals were checked"),
    }
}

#[test]
fn a_host_name_rule_follows_its_dns_answer() {
    let dns = TestDns::start();
    let five: Ipv4Addr = "127.0.0.5".parse().unwrap();
    let six: Ipv4Addr = "127.0.0.6".parse().unwrap();
    dns.set_a("blocked.test", &[five], 1);
    let rules = "network_rule(host=\"blocked.test\", protocol=\"https\", decision=\"deny\")\n";
    let options = SessionOptions {
        nameserver: Some(dns.addr()),
        ..SessionOptions::default()
    };
    let Some(mut session) = session_or_skip(rules, options) else {
        return;
    };
    assert!(
        session.image().unresolved_hosts().is_empty(),
        "blocked.test resolved at start: {:?}",
        session.image().unresolved_hosts()
    );
    expect(&session, "tcp", "127.0.0.5", 443, EPERM);
    expect(&session, "udp-sendto", "127.0.0.5", 443, EPERM);
    expect(&session, "tcp", "127.0.0.6", 443, ECONNREFUSED);

    dns.set_a("blocked.test", &[six], 1);
    std::thread::sleep(Duration::from_millis(1500));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match session.refresh_dns() {
            Ok(true) => break,
            Ok(false) => {}
            Err(err) => panic!("refreshing DNS: {err:#}"),
        }
        assert!(
            Instant::now() < deadline,
            "10 s after the answer changed, refresh_dns never reported a change ({} queries)",
            dns.queries("blocked.test")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    expect(&session, "tcp", "127.0.0.6", 443, EPERM);
    expect(&session, "udp-sendto", "127.0.0.6", 443, EPERM);
    expect(&session, "tcp", "127.0.0.5", 443, ECONNREFUSED);
}

#[test]
fn events_for_refused_destinations_name_the_rule_and_the_process() {
    let (_listener, port) = listener("127.0.0.2");
    let rules = format!(
        "# kernel_net: events\n\
         \n\
         address_rule(addresses=[\"127.0.0.2\"], ports=[{port}], decision=\"deny\")\n"
    );
    let Some(mut session) = session_or_skip(&rules, SessionOptions::default()) else {
        return;
    };
    let probe = net_probe();
    let probe_exe = probe.to_str().unwrap().to_string();
    let line = session.line_of("address_rule");
    let rules_file = session.rules_file.display().to_string();
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };

    let cases: [(&str, &str, EventKind, &str); 3] = [
        ("tcp", "127.0.0.2", EventKind::Connect, "tcp"),
        ("udp-sendto", "127.0.0.2", EventKind::Sendmsg, "udp"),
        ("udp-connect", "::ffff:127.0.0.2", EventKind::Connect, "udp"),
    ];
    for (call, addr, kind, transport) in cases {
        let (outcome, pid) = probe_with_pid(&session, call, addr, port);
        assert_eq!(outcome, EPERM, "net-probe {call} {addr} {port}");
        let event =
            session.expect_event(&format!("{call} {addr}"), EVENT_TIMEOUT, |e| e.pid == pid);
        assert_eq!(event.kind, kind, "{event:#?}");
        let destination = event
            .destination
            .clone()
            .unwrap_or_else(|| panic!("no destination: {event:#?}"));
        // A mapped address is reported as the IPv4 address it was looked up as.
        assert_eq!(
            destination.address,
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            "{event:#?}"
        );
        assert_eq!(
            (destination.port, destination.transport),
            (port, transport),
            "{event:#?}"
        );
        assert_eq!(event.decision, Decision::Forbidden, "{event:#?}");
        assert_eq!(event.action, Action::Eperm, "{event:#?}");
        assert!(!event.audit_only && !event.unmatched, "{event:#?}");
        assert_eq!(rule_origin(&session, &event), (rules_file.clone(), line));
        assert_eq!(event.cgroup_id, session.scope().id(), "{event:#?}");
        assert_eq!((event.pid, event.tgid), (pid, pid), "{event:#?}");
        assert_eq!(event.ppid, std::process::id(), "{event:#?}");
        assert_eq!((event.uid, event.gid), (uid, gid), "{event:#?}");
        assert_eq!(event.exe, probe_exe, "the probe's exec: {event:#?}");
        assert_eq!(
            event.argv,
            [probe_exe.as_str(), call, addr, &port.to_string()],
            "{event:#?}"
        );
        let verb = if kind == EventKind::Connect {
            "connect to"
        } else {
            "send to"
        };
        assert_eq!(
            session.describe(&event),
            format!(
                "guard: refused {verb} 127.0.0.2:{port}/{transport}: policy forbids addresses 127.0.0.2 port {port} (test.rules:{line})"
            )
        );
    }
}

#[test]
fn a_prompt_destination_is_refused_and_asks() {
    let (_listener, port) = listener("127.0.0.7");
    let rules = format!(
        "address_rule(addresses=[\"127.0.0.7\"], ports=[{port}], transport=\"tcp\", decision=\"prompt\")\n"
    );
    let Some(mut session) = session_or_skip(&rules, SessionOptions::default()) else {
        return;
    };
    let (outcome, pid) = probe_with_pid(&session, "tcp", "127.0.0.7", port);
    assert_eq!(outcome, EPERM, "prompt refuses now");
    let event = session.expect_event("the prompt", EVENT_TIMEOUT, |e| e.pid == pid);
    assert_eq!(
        (event.kind, event.decision, event.action),
        (EventKind::Connect, Decision::Prompt, Action::Eperm),
        "{event:#?}"
    );
    let said = session.describe(&event);
    assert!(
        said.contains("approv") && !said.contains("forbids"),
        "a prompt asks for approval: {said}"
    );
    // transport="tcp": UDP to the same place is not this rule's.
    expect(&session, "udp-sendto", "127.0.0.7", port, Outcome::Ok);

    // Approvals belong to the scope whose ask they answered: another scope's approval of
    // exactly this destination lets nothing through here.
    let scope = session.scope().id();
    assert_eq!(event.scope, scope, "the event names the scope that decided");
    let approval = |for_scope: u64| approval_of("127.0.0.7", port, for_scope);
    session
        .hold_approval(approval(scope + 1))
        .expect("holding another scope's approval");
    expect(&session, "tcp", "127.0.0.7", port, EPERM);
    session
        .hold_approval(approval(scope))
        .expect("holding this scope's approval");
    expect(&session, "tcp", "127.0.0.7", port, Outcome::Ok);
}

/// A session approval of TCP to `address` at `port`, for the scope `for_scope`, as an answered
/// ask would make it.
fn approval_of(address: &str, port: u16, for_scope: u64) -> guard::asks::Approval {
    guard::asks::Approval {
        ask: 1,
        mode: guard::asks::ApprovalMode::Session,
        by: "test".into(),
        target: guard::asks::ApprovalTarget::Network {
            address: address.parse().unwrap(),
            port,
            transport: guard::policy::Transport::Tcp,
            host: None,
        },
        scope: None,
        for_scope,
        until: None,
    }
}

/// A session that holds prompted connects (a blocking one waits up to 60 s), over a rule that
/// prompts TCP to 127.0.0.9 at `port`.
fn holding_session(port: u16) -> Option<TestSession> {
    let rules = format!(
        "address_rule(addresses=[\"127.0.0.9\"], ports=[{port}], transport=\"tcp\", decision=\"prompt\")\n"
    );
    session_or_skip(
        &rules,
        SessionOptions {
            hold_network: Some(Duration::from_secs(60)),
            ..SessionOptions::default()
        },
    )
}

/// `net-probe timed SECS 127.0.0.9 PORT` started in the scope: its child, to wait for.
fn spawn_timed(session: &TestSession, secs: u64, port: u16) -> std::process::Child {
    let mut command = Command::new(net_probe());
    command
        .args(["timed", &secs.to_string(), "127.0.0.9", &port.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    session
        .spawn(&mut command)
        .unwrap_or_else(|err| panic!("net-probe timed did not start: {err:#}"))
}

/// What `net-probe timed` printed: its outcome word(s) and the milliseconds the connect took.
fn timed_outcome(child: std::process::Child) -> (String, u64) {
    let output = guard_tests::kernel::wait_output(child, Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let (outcome, ms) = stdout
        .rsplit_once(' ')
        .unwrap_or_else(|| panic!("net-probe timed printed {stdout:?} ({})", output.status));
    (outcome.to_string(), ms.parse().expect("milliseconds"))
}

/// Approves `transport` to 127.0.0.9 at `port` for the session, as an answered ask would.
fn approve_127_0_0_9(session: &mut TestSession, port: u16, transport: guard::policy::Transport) {
    let mut approval = approval_of("127.0.0.9", port, session.scope().id());
    if let guard::asks::ApprovalTarget::Network { transport: t, .. } = &mut approval.target {
        *t = transport;
    }
    session
        .hold_approval(approval)
        .expect("holding the approval");
}

#[test]
fn a_held_connect_times_out_on_the_programs_schedule_never_reaches_the_listener_and_its_retry_connects_once_approved()
 {
    let (listener, port) = listener("127.0.0.9");
    let Some(mut session) = holding_session(port) else {
        return;
    };
    // A 2 s connect timeout, as `curl --connect-timeout 2`: the program's own schedule.
    let (outcome, ms) = timed_outcome(spawn_timed(&session, 2, port));
    assert_eq!(
        outcome, "timeout",
        "a held connect times out as a slow network would"
    );
    assert!(
        (1_700..=3_000).contains(&ms),
        "the program's 2 s timeout decides when it gives up, took {ms} ms"
    );
    let event = session.expect_event("the held connect", EVENT_TIMEOUT, |e| {
        e.kind == EventKind::Connect
    });
    assert_eq!(
        (event.decision, event.action),
        (Decision::Prompt, Action::Held),
        "{event:#?}"
    );
    assert_ne!(
        event.ino, 0,
        "a held connect's event carries its socket's cookie"
    );
    assert!(
        !accepts(&listener),
        "no SYN of the held connect reached the listener"
    );
    let held = session
        .enforcer()
        .held_sockets()
        .expect("reading the held sockets");
    let (_, entry) = held
        .iter()
        .find(|(cookie, _)| *cookie == event.ino)
        .unwrap_or_else(|| panic!("the held socket is listed: {held:?}"));
    assert_eq!(
        entry.state,
        guard_common::maps::held::CLOSED,
        "the program gave up: its socket closed while held"
    );

    // Approved while a blocking connect waits: it connects within about a second.
    let waiting = spawn_timed(&session, 0, port);
    std::thread::sleep(Duration::from_millis(1_500));
    let approved = Instant::now();
    approve_127_0_0_9(&mut session, port, guard::policy::Transport::Tcp);
    let (outcome, ms) = timed_outcome(waiting);
    let latency = approved.elapsed();
    assert_eq!(
        outcome, "ok",
        "the waiting connect goes through once approved"
    );
    assert!(ms >= 1_400, "it waited for the approval ({ms} ms)");
    assert!(
        latency < Duration::from_millis(2_500),
        "from the approval to connected took {latency:?}"
    );
    assert!(
        accepts(&listener),
        "the approved connect reached the listener"
    );
    // And a retry after approval connects at once.
    let (outcome, ms) = timed_outcome(spawn_timed(&session, 2, port));
    assert_eq!((outcome.as_str(), ms < 1_000), ("ok", true), "{ms} ms");
}

#[test]
fn a_denied_held_connect_fails_at_once_and_a_held_connect_from_any_thread_waits() {
    let (listener, port) = listener("127.0.0.9");
    let Some(mut session) = holding_session(port) else {
        return;
    };
    let waiting = spawn_timed(&session, 0, port);
    let event = session.expect_event("the held connect", EVENT_TIMEOUT, |e| {
        e.kind == EventKind::Connect
    });
    assert_eq!(event.action, Action::Held, "{event:#?}");
    std::thread::sleep(Duration::from_millis(500));
    let held = session
        .enforcer()
        .held_sockets()
        .expect("reading the held sockets");
    let (cookie, entry) = *held
        .iter()
        .find(|(cookie, _)| *cookie == event.ino)
        .unwrap_or_else(|| panic!("the held socket is listed: {held:?}"));
    assert_eq!(entry.state, guard_common::maps::held::HELD);
    assert_ne!(entry.local_port, 0, "sock_ops noted the socket's own port");
    let denied = Instant::now();
    session
        .enforcer_mut()
        .end_held_socket(cookie)
        .expect("ending the held socket");
    let (outcome, _) = timed_outcome(waiting);
    // Ended at once by sock_diag (ECONNABORTED), or at the next SYN retry by the kernel's
    // programs where the kernel has no sock_diag for TCP (ETIMEDOUT).
    assert!(
        outcome == format!("errno {}", libc::ECONNABORTED)
            || outcome == format!("errno {}", libc::ETIMEDOUT),
        "a denial ends the waiting connect: {outcome}"
    );
    assert!(
        denied.elapsed() < Duration::from_secs(3),
        "{:?}",
        denied.elapsed()
    );
    assert!(
        !accepts(&listener),
        "the denied connect never reached the listener"
    );

    // From a worker thread (Go, Java and Node connect there): held the same way, not refused.
    let mut command = Command::new(net_probe());
    command
        .args(["thread", "tcp", "127.0.0.9", &port.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = session.spawn(&mut command).expect("net-probe thread");
    let pid = child.id();
    let output = guard_tests::kernel::wait_output(child, PROBE_TIMEOUT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("timed out"),
        "the worker's 5 s connect timed out waiting, not refused: {stderr:?} {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
    let event = session.expect_event("the worker's held connect", EVENT_TIMEOUT, |e| {
        e.tgid == pid && e.pid != pid
    });
    assert_eq!(event.action, Action::Held, "{event:#?}");
}

#[test]
fn a_held_udp_datagram_is_dropped_as_a_lossy_network_would_until_its_destination_is_approved() {
    let receiver = UdpSocket::bind("127.0.0.9:0").unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_millis(1_500)))
        .unwrap();
    let port = receiver.local_addr().unwrap().port();
    let rules = format!(
        "address_rule(addresses=[\"127.0.0.9\"], ports=[{port}], transport=\"udp\", decision=\"prompt\")\n"
    );
    let Some(mut session) = session_or_skip(
        &rules,
        SessionOptions {
            hold_network: Some(Duration::from_secs(60)),
            ..SessionOptions::default()
        },
    ) else {
        return;
    };
    // No error for the program, as on a lossy link; nothing arrives.
    expect(&session, "udp-sendto", "127.0.0.9", port, Outcome::Ok);
    let event = session.expect_event("the held datagram", EVENT_TIMEOUT, |e| {
        e.kind == EventKind::Sendmsg
    });
    assert_eq!(
        (event.decision, event.action),
        (Decision::Prompt, Action::Held),
        "{event:#?}"
    );
    let mut buffer = [0u8; 16];
    assert!(
        receiver.recv(&mut buffer).is_err(),
        "the held datagram never arrived"
    );
    approve_127_0_0_9(&mut session, port, guard::policy::Transport::Udp);
    expect(&session, "udp-sendto", "127.0.0.9", port, Outcome::Ok);
    let got = receiver
        .recv(&mut buffer)
        .expect("the approved datagram arrives");
    assert_eq!(&buffer[..got], b"guard");
}

#[test]
fn processes_outside_the_scope_are_untouched() {
    let (listener, port) = listener("127.0.0.1");
    let rules =
        format!("address_rule(addresses=[\"127.0.0.1\"], ports=[{port}], decision=\"deny\")\n");
    let Some(session) = session_or_skip(&rules, SessionOptions::default()) else {
        return;
    };
    expect(&session, "tcp", "127.0.0.1", port, EPERM);
    // This test's own thread is not in the scope.
    let target = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&target, Duration::from_secs(5))
        .unwrap_or_else(|err| panic!("a connect from outside the scope to {target} failed: {err}"));
    assert!(
        accepts(&listener),
        "the listener got the connection from outside the scope"
    );
    drop(session);
}

#[test]
fn a_flood_past_the_scopes_share_of_the_ring_buffer_is_counted_so_every_refusal_is_accounted_for() {
    // About four times what the 4 MiB ring buffer holds, sent while nobody reads it: the
    // scope's share of the ring (`SCOPE_EVENTS_PER_SECOND` a CPU) runs out first.
    const SENDS: u64 = 20_000;
    let rules = "address_rule(addresses=[\"127.0.0.9\"], ports=[9], transport=\"udp\", decision=\"deny\")\n";
    let Some(mut session) = session_or_skip(rules, SessionOptions::default()) else {
        return;
    };
    let output = session
        .run(
            Command::new(net_probe()).args(["udp-flood", "127.0.0.9", "9", &SENDS.to_string()]),
            PROBE_TIMEOUT,
        )
        .expect("the flood starts");
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        said.trim(),
        format!("refused {SENDS}"),
        "every send is refused"
    );
    let received = session
        .drain_events(Duration::from_millis(300), Duration::from_secs(20))
        .iter()
        .filter(|e| e.kind == EventKind::Sendmsg)
        .count() as u64;
    let counters = session.enforcer().counters().expect("reading the counters");
    let counter = |name: &str| {
        counters
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no counter {name}"))
    };
    assert_eq!(counter("net_forbidden"), SENDS, "every refusal is counted");
    let lost = counter("events_lost") + counter("events_over_budget");
    assert!(
        counter("events_over_budget") > 0,
        "the burst must go past the scope's share ({received} events arrived)"
    );
    assert_eq!(
        received + lost,
        SENDS,
        "each refusal is either an event or counted as lost ({received} received, {lost} lost)"
    );
    // The same, counted under the scope's own cgroup id.
    let shares = session
        .enforcer()
        .scope_events()
        .expect("reading SCOPE_EVENTS");
    let share = shares
        .get(&session.scope().id())
        .unwrap_or_else(|| panic!("the scope's share is counted: {shares:?}"));
    assert_eq!(
        (share.submitted, share.lost),
        (received, lost),
        "the scope's own count"
    );
}

// --- socket kinds no connect hook sees (`cgroup/sock_create`) -----------------------------------

/// Runs `net-probe ARGS...` in the scope (`Some`) or outside it (`None`, this test's own cgroup).
fn probe_args(session: Option<&TestSession>, args: &[&str]) -> (Outcome, u32) {
    let mut command = Command::new(net_probe());
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = match session {
        Some(session) => session.spawn(&mut command),
        None => command.spawn().map_err(anyhow::Error::from),
    }
    .unwrap_or_else(|err| panic!("net-probe {args:?} did not start: {err:#}"));
    let pid = child.id();
    let output = guard_tests::kernel::wait_output(child, PROBE_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let outcome = match stdout.trim() {
        "ok" => Outcome::Ok,
        line => match line.strip_prefix("errno ").and_then(|n| n.parse().ok()) {
            Some(errno) => Outcome::Errno(errno),
            None => panic!(
                "net-probe {args:?}: {} (stdout {stdout:?}, stderr {:?})",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ),
        },
    };
    (outcome, pid)
}

/// A UDP-Lite socket on 127.0.0.1 made by the test (outside the scope), to receive on.
struct UdpLiteListener {
    fd: std::os::fd::OwnedFd,
    port: u16,
}

impl UdpLiteListener {
    fn bind() -> UdpLiteListener {
        use std::os::fd::FromRawFd;
        // SAFETY: plain integer arguments; the descriptor is owned below.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_UDPLITE) };
        assert!(
            raw >= 0,
            "a UDP-Lite socket outside the scope: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        let mut sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: a valid sockaddr_in and its length.
        unsafe {
            assert_eq!(
                libc::bind(raw, (&sa as *const libc::sockaddr_in).cast(), len),
                0
            );
            assert_eq!(
                libc::getsockname(raw, (&mut sa as *mut libc::sockaddr_in).cast(), &mut len),
                0
            );
        }
        UdpLiteListener {
            fd,
            port: u16::from_be(sa.sin_port),
        }
    }

    /// Whether a datagram arrives within `wait`.
    fn received(&self, wait: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) };
        if ready <= 0 {
            return false;
        }
        let mut buf = [0u8; 16];
        // SAFETY: a valid buffer of that length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        n > 0
    }
}

#[test]
fn raw_ping_and_udplite_sockets_are_refused_in_scope_and_made_outside_it() {
    let udplite = UdpLiteListener::bind();
    let port = udplite.port.to_string();
    let Some(mut session) = session_or_skip("", SessionOptions::default()) else {
        return;
    };
    // Outside the scope (this test runs as root): every kind is made, and UDP-Lite arrives.
    for kind in ["raw", "ping"] {
        assert_eq!(
            probe_args(None, &["socket", kind]).0,
            Outcome::Ok,
            "a {kind} socket outside the scope"
        );
    }
    assert_eq!(
        probe_args(None, &["socket", "udplite", "127.0.0.1", &port]).0,
        Outcome::Ok
    );
    assert!(
        udplite.received(Duration::from_secs(5)),
        "the UDP-Lite datagram from outside the scope arrives"
    );

    for kind in ["raw", "ping"] {
        let (outcome, pid) = probe_args(Some(&session), &["socket", kind]);
        assert_eq!(outcome, EPERM, "a {kind} socket in scope");
        let event = session.expect_event(kind, EVENT_TIMEOUT, |e| e.pid == pid);
        assert_eq!(event.kind, EventKind::Socket, "{event:#?}");
        assert_eq!(event.action, Action::Eperm, "{event:#?}");
        let socket = event
            .socket
            .clone()
            .expect("a socket event names its socket");
        assert_eq!(socket.kind, kind, "{event:#?}");
        assert_eq!(
            session.describe(&event),
            format!(
                "guard: refused a {kind} socket (IPPROTO_ICMP): enforcement(socket_kinds=...) \
                 does not allow \"{kind}\""
            )
        );
    }
    assert_eq!(
        probe_args(Some(&session), &["socket", "udplite", "127.0.0.1", &port]).0,
        EPERM,
        "a UDP-Lite socket in scope"
    );
    assert!(
        !udplite.received(Duration::from_secs(1)),
        "no UDP-Lite datagram from the scope arrives"
    );
    let counters = session.enforcer().counters().expect("reading the counters");
    let refused = counters
        .iter()
        .find(|(name, _)| *name == "socket_refused")
        .map(|(_, v)| *v);
    assert_eq!(refused, Some(3), "every refused socket is counted");
}

#[test]
fn socket_kinds_the_policy_allows_are_made_in_scope() {
    let udplite = UdpLiteListener::bind();
    let port = udplite.port.to_string();
    let rules = "enforcement(socket_kinds=[\"raw\", \"ping\", \"udplite\"])\n";
    let Some(session) = session_or_skip(rules, SessionOptions::default()) else {
        return;
    };
    for kind in ["raw", "ping"] {
        assert_eq!(
            probe_args(Some(&session), &["socket", kind]).0,
            Outcome::Ok,
            "an allowed {kind} socket in scope"
        );
    }
    assert_eq!(
        probe_args(Some(&session), &["socket", "udplite", "127.0.0.1", &port]).0,
        Outcome::Ok
    );
    assert!(
        udplite.received(Duration::from_secs(5)),
        "an allowed UDP-Lite datagram arrives"
    );
    // SCTP was not allowed: still refused (where the kernel has it).
    match probe_args(None, &["socket", "sctp"]).0 {
        Outcome::Errno(libc::EPROTONOSUPPORT) => {
            println!(
                "note: this kernel has no SCTP (EPROTONOSUPPORT outside the scope too); the SCTP case is skipped"
            )
        }
        Outcome::Ok => assert_eq!(probe_args(Some(&session), &["socket", "sctp"]).0, EPERM),
        other => panic!("an SCTP socket outside the scope: {other:?}"),
    }
}

#[test]
fn audit_only_records_a_socket_kind_instead_of_refusing_it() {
    let rules = "enforcement(audit_only=True)\n";
    let Some(mut session) = session_or_skip(rules, SessionOptions::default()) else {
        return;
    };
    let (outcome, pid) = probe_args(Some(&session), &["socket", "raw"]);
    assert_eq!(
        outcome,
        Outcome::Ok,
        "audit-only lets the raw socket be made"
    );
    let event = session.expect_event("raw", EVENT_TIMEOUT, |e| e.pid == pid);
    assert_eq!(
        (event.kind, event.action, event.audit_only),
        (EventKind::Socket, Action::None, true),
        "{event:#?}"
    );
}

#[test]
fn mptcp_connects_are_decided_as_tcp() {
    let (allowed, allowed_port) = listener("127.0.0.1");
    let (denied, denied_port) = listener("127.0.0.2");
    let rules = format!(
        "address_rule(addresses=[\"127.0.0.2\"], ports=[{denied_port}], decision=\"deny\")\n"
    );
    let Some(session) = session_or_skip(&rules, SessionOptions::default()) else {
        return;
    };
    let (allowed_port, denied_port) = (allowed_port.to_string(), denied_port.to_string());
    match probe_args(None, &["socket", "mptcp", "127.0.0.1", &allowed_port]).0 {
        Outcome::Ok => assert!(accepts(&allowed), "the MPTCP connect from outside arrived"),
        Outcome::Errno(libc::EPROTONOSUPPORT | libc::ENOPROTOOPT) => {
            println!("note: MPTCP is off on this kernel; nothing to check");
            return;
        }
        other => panic!("an MPTCP connect outside the scope: {other:?}"),
    }
    assert_eq!(
        probe_args(
            Some(&session),
            &["socket", "mptcp", "127.0.0.1", &allowed_port]
        )
        .0,
        Outcome::Ok,
        "an MPTCP socket is made and connects where TCP may"
    );
    assert!(
        accepts(&allowed),
        "the MPTCP connect from the scope arrived"
    );
    assert_eq!(
        probe_args(
            Some(&session),
            &["socket", "mptcp", "127.0.0.2", &denied_port]
        )
        .0,
        EPERM,
        "connect4 decides MPTCP as TCP"
    );
    assert!(!accepts(&denied), "the denied listener got nothing");
}

/// `dns-probe ARGS` in the scope, the session polled (it puts the resolver's answers in force)
/// until the probe exits: its JSON line, and the DNS notes of the session meanwhile.
fn dns_probe_in(
    session: &mut TestSession,
    args: &[&str],
) -> (serde_json::Value, Vec<guard::session::DnsNote>) {
    let mut command = Command::new(dns_probe());
    command
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    let mut child = session.spawn(&mut command).expect("starting dns-probe");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut notes = Vec::new();
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "dns-probe {args:?} did not finish"
        );
        session.poll_events(Duration::from_millis(20));
        notes.extend(session.take_dns_notes());
    }
    notes.extend(session.take_dns_notes());
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    (value, notes)
}

#[test]
fn dns_goes_to_guards_resolver_which_refuses_forbidden_names_and_puts_answers_in_force_first() {
    let dns = TestDns::start();
    let pool: Vec<Ipv4Addr> = (1..=4).map(|i| Ipv4Addr::new(127, 0, 2, i)).collect();
    dns.set_a_rotating("api.example.test", &pool, 2, 1..=3);
    dns.set_a("evil.example.test", &[Ipv4Addr::new(127, 0, 2, 9)], 60);
    let (_first, port) = listener("127.0.2.1");
    let _rest: Vec<TcpListener> = pool[1..]
        .iter()
        .map(|ip| TcpListener::bind((*ip, port)).expect("the same port on the pool"))
        .collect();
    let rules = "enforcement(unmatched_network=\"deny\")\n\
                 network_rule(host=\"api.example.test\", protocol=\"socks5_tcp\", decision=\"allow\")\n\
                 address_rule(addresses=[\"**.evil.example.test\"], decision=\"deny\")\n";
    let options = SessionOptions {
        nameserver: Some(dns.addr()),
        resolver: Some(guard::resolve::Refusal::Refused),
        ..SessionOptions::default()
    };
    let Some(mut session) = session_or_skip(rules, options) else {
        return;
    };
    assert!(session.resolver_port().is_some());
    let port = port.to_string();
    // Asked of an address nothing listens on: only the redirect can answer.
    let (result, _) = dns_probe_in(
        &mut session,
        &["127.0.0.153:53", "api.example.test", "udp", "20", &port],
    );
    assert_eq!(result["answers"], 20, "{result}");
    assert_eq!(
        result["connected"], 40,
        "every rotated answer connects: {result}"
    );
    assert_eq!(result["refused"], 0, "{result}");
    assert_eq!(result["wrong_source"], 0, "{result}");
    let (result, _) = dns_probe_in(
        &mut session,
        &["127.0.0.153:53", "api.example.test", "tcp", "2", &port],
    );
    assert_eq!(result["connected"], 4, "over TCP too: {result}");
    // What the program was answered is attributed to the name it asked for.
    for ip in result["addresses"].as_array().unwrap() {
        let ip: IpAddr = ip.as_str().unwrap().parse().unwrap();
        assert_eq!(
            session.hosts_of(ip),
            vec!["api.example.test".to_string()],
            "{ip}: {result}"
        );
    }

    let (result, notes) = dns_probe_in(
        &mut session,
        &["127.0.0.153:53", "evil.example.test", "udp", "1"],
    );
    assert_eq!(result["rcode"], "Refused", "{result}");
    assert!(
        notes.iter().any(|n| matches!(
            n,
            guard::session::DnsNote::Resolver(guard::resolve::ResolverNote::Refused(r)) if r.name == "evil.example.test" && r.line == Some(3)
        )),
        "{notes:?}"
    );
    assert_eq!(
        dns.queries("evil.example.test"),
        0,
        "the refused query left the host"
    );
}
