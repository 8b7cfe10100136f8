//! A name a scope looked up stays usable while the name still answers with that address
//! (`guard::resolve::refresh`): programs keep answers (nginx and HAProxy resolve upstreams once,
//! JVMs cache, pools reconnect), so guard asks for the name again itself while the scope holds
//! it, and lets the address go once the name stops answering with it. A module of its own: its
//! tests wait minutes of real time (the first five, as the issue asks), mostly idle, and the
//! refreshes are userspace work that is the same on both backends, so the VM tier does not run
//! it (xtask/src/vm.rs). The helpers are the resolver module's.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{dns_probe, net_probe};
use crate::resolver::{ASKED, connect_in_scope, listening_on, lookup_in_scope, v4};
use guard::resolve::refresh::REFRESH_FLOOR;
use guard_tests::daemon::{DaemonSetup, RetryingRun, TestDaemon, can_run};
use guard_tests::dns::TestDns;

/// The name the scope looks up, with TTL 1: without refreshes its address would be refused
/// 61 s after the lookup.
const NAME: &str = "kept.refresh.test";

fn rules() -> String {
    format!(
        "enforcement(unmatched_network=\"deny\")\n\
         network_rule(host=\"{NAME}\", protocol=\"socks5_tcp\", decision=\"allow\")\n"
    )
}

/// The time past a change of the name's answer within which the old address is refused: one
/// refresh interval (the floor, for TTL 1), and a few seconds for the question and the map
/// update.
fn within_one_interval() -> Duration {
    REFRESH_FLOOR + Duration::from_secs(5)
}

#[test]
fn standalone_an_address_looked_up_once_with_ttl_1_holds_five_minutes_while_the_name_answers_with_it()
 {
    let dns = TestDns::start();
    let kept = v4("127.0.2.1");
    let moved = v4("127.0.2.2");
    let (port, _listeners) = listening_on(&[kept, moved]);
    dns.set_a(NAME, &[kept], 1);
    let options = guard::session::SessionOptions {
        nameserver: Some(dns.addr()),
        resolver: Some(guard::resolve::Refusal::Refused),
        ..Default::default()
    };
    let Some(mut session) = guard_tests::kernel::session_or_skip(&rules(), options) else {
        return;
    };
    let result = lookup_in_scope(&mut session, NAME, port);
    assert_eq!(result["addresses"], serde_json::json!([kept]), "{result}");
    assert_eq!(result["connected"], 1, "{result}");
    let looked_up = Instant::now();
    // Not looked up: refused, so an "ok" below is the name's doing.
    assert_eq!(connect_in_scope(&session, moved, port), "errno 1");

    // Five minutes, `guard run`'s loop meanwhile (its poll takes the refreshes' answers and
    // asks for what is due); the kept address is tried past the old TTL + 60 s and at the end.
    let mut tried_past_grace = false;
    while looked_up.elapsed() < Duration::from_secs(300) {
        session.poll_events(Duration::from_millis(100));
        if !tried_past_grace && looked_up.elapsed() > Duration::from_secs(65) {
            tried_past_grace = true;
            assert_eq!(
                connect_in_scope(&session, kept, port),
                "ok",
                "refused past TTL + 60 s"
            );
        }
    }
    assert_eq!(
        connect_in_scope(&session, kept, port),
        "ok",
        "refused 5 minutes after its lookup while the name still answers with it"
    );
    // One question per floor interval, not one a second for TTL 1.
    let asked = dns.queries(NAME);
    let most = 300 / REFRESH_FLOOR.as_secs() as usize + 1;
    assert!(
        (most - 3..=most).contains(&asked),
        "{asked} questions in 5 minutes; {:?}",
        session.refresh_counts()
    );
    let counts = session.refresh_counts();
    assert_eq!((counts.failed, counts.gone), (0, 0), "{counts:?}");

    // The name moves: the kept address is refused within one refresh interval, and the new
    // one is in force.
    dns.set_a(NAME, &[moved], 1);
    let changed = Instant::now();
    let refused = until(changed + within_one_interval(), || {
        session.poll_events(Duration::from_millis(200));
        connect_in_scope(&session, kept, port) == "errno 1"
    });
    assert!(
        refused,
        "still reached {kept} {:?} after the name moved; {:?}",
        within_one_interval(),
        session.refresh_counts()
    );
    assert_eq!(connect_in_scope(&session, moved, port), "ok");
}

#[test]
fn under_the_daemon_an_address_looked_up_once_holds_past_its_ttl_and_goes_when_the_name_moves() {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    let kept = v4("127.0.2.3");
    let moved = v4("127.0.2.4");
    let (port, _listeners) = listening_on(&[kept, moved]);
    dns.set_a(NAME, &[kept], 1);
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: rules(),
        nameserver: Some(dns.addr()),
        ..Default::default()
    });
    // One run (one scope: the daemon keeps answers per scope), whose tries run what `next.sh`
    // says when it is told.
    let dir = tempfile::tempdir().unwrap();
    let next = dir.path().join("next.sh");
    let mut run = RetryingRun::start(
        &daemon,
        Path::new("/bin/sh"),
        &[next.to_str().expect("a UTF-8 path")],
    );
    let mut try_in_scope = |command: String| {
        std::fs::write(&next, command).unwrap();
        run.attempt().1
    };
    let port_text = port.to_string();
    let probe = dns_probe();
    let lookup = format!("exec {} {ASKED} {NAME} udp 1 {port_text}", probe.display());
    let out = try_in_scope(lookup);
    assert!(out.contains("\"connected\":1"), "{out}");
    let looked_up = Instant::now();
    let connect = |ip: Ipv4Addr| format!("exec {} tcp {ip} {port_text}", net_probe().display());

    // Past the old TTL + 60 s (the run's loop waits at most a minute between tries).
    while looked_up.elapsed() < Duration::from_secs(75) {
        std::thread::sleep(Duration::from_secs(15));
        try_in_scope("true".into());
    }
    assert_eq!(
        try_in_scope(connect(kept)).trim(),
        "ok",
        "refused past TTL + 60 s"
    );
    assert!(dns.queries(NAME) >= 3, "asked {} times", dns.queries(NAME));

    dns.set_a(NAME, &[moved], 1);
    let deadline = Instant::now() + within_one_interval();
    let refused = until(deadline, || {
        std::thread::sleep(Duration::from_secs(1));
        try_in_scope(connect(kept)).trim() == "errno 1"
    });
    assert!(refused, "still reached {kept} after the name moved");
    assert_eq!(try_in_scope(connect(moved)).trim(), "ok");
}

/// Whether `done` says yes before `deadline` (tried at least once).
fn until(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}
