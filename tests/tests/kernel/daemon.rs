//! `guard daemon` against the real kernel: asks, approvals and amendments that take effect at
//! once, reloads without a gap, restarts that keep enforcing, and who may ask what over the
//! control socket. Each test runs its own daemon (see `guard_tests::daemon`): its own socket,
//! state, pins on a private bpffs, and a cgroup of its own for run scopes; traffic goes to
//! loopback addresses only.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{net_probe, run_probe};
use guard_tests::daemon::{
    DaemonSetup, NAMES_RESOLVED_BY_THE_DAEMON, RetryingRun, TestDaemon, can_run, finish_held, text,
};
use guard_tests::dns::TestDns;
use guard_tests::kernel::{copy_program, touch_program};
use serde_json::Value;

/// `guard audit --json` (JSON lines) as root.
fn audit(daemon: &TestDaemon) -> Vec<Value> {
    let out = daemon.guard(&["audit", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn an_ask_for_a_host_is_approved_always_and_the_retry_succeeds_without_a_restart() {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    let address = Ipv4Addr::new(127, 77, 1, 1);
    dns.set_a("api.guard.test", &[address], 300);
    let _listener = TcpListener::bind((address, 443)).expect("listening on 127.77.1.1:443");
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "network_rule(host=\"api.guard.test\", protocol=\"https\", decision=\"prompt\", \
                justification=\"ask before talking to the API\")\n"
            .to_string(),
        nameserver: Some(dns.addr()),
        // The daemon resolves the rules' names itself (guard's resolver, which would put them
        // in force only as a scope looks them up, is off): the probe connects by address.
        extra_config: NAMES_RESOLVED_BY_THE_DAEMON.to_string(),
        ..Default::default()
    });

    let (code, stdout, stderr) = run_probe(&daemon, &["tcp", "127.77.1.1", "443"]);
    assert_eq!(code, 1, "the connect must be refused: {stdout}{stderr}");
    assert_eq!(stdout.trim(), "errno 1", "EPERM: {stderr}");
    assert!(
        stderr.contains("api.guard.test"),
        "the blocked-request message names the host: {stderr}"
    );

    let asks = daemon.prompts();
    assert_eq!(asks.len(), 1, "one ask: {asks:?}");
    let ask = &asks[0];
    let id = ask["id"].as_u64().expect("the ask has an id");
    assert_eq!(ask["record"]["host"], "api.guard.test");
    assert_eq!(ask["record"]["protocol"], "https");
    assert_eq!(ask["record"]["port"], 443);
    assert_eq!(ask["record"]["decision"], "ask");
    assert_eq!(ask["record"]["reason"], "not_allowed");

    let out = daemon.guard(&["approve", &id.to_string(), "--always"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let written = std::fs::read_to_string(daemon.amendments()).expect("the amendments file");
    assert_eq!(
        written,
        "network_rule(host=\"api.guard.test\", protocol=\"https\", decision=\"allow\", \
         justification=\"Allow https_connect access to api.guard.test\")\n"
    );

    let (code, stdout, stderr) = run_probe(&daemon, &["tcp", "127.77.1.1", "443"]);
    assert_eq!(
        (code, stdout.trim()),
        (0, "ok"),
        "the retry connects: {stderr}"
    );
    assert!(daemon.prompts().is_empty(), "the ask was answered");
}

#[test]
fn sigterm_stops_the_daemon_within_seconds_and_a_broken_reload_keeps_the_old_policy() {
    if !can_run() {
        return;
    }
    let mut daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.2.1\"], decision=\"forbidden\")\n".to_string(),
        ..Default::default()
    });
    let (code, stdout, _) = run_probe(&daemon, &["udp-connect", "127.77.2.1", "9"]);
    assert_eq!((code, stdout.trim()), (1, "errno 1"));

    std::fs::write(
        &daemon.rules_file,
        "address_rule(addresses=[\"127.77.2.1\"],\n  decision=\"nope\")\n",
    )
    .unwrap();
    let out = daemon.guard(&["reload"]);
    assert!(!out.status.success(), "a broken reload fails");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("team.rules:") && stderr.contains("old policy stays"),
        "the error names the file and line and says the old policy stays: {stderr}"
    );
    let (code, stdout, _) = run_probe(&daemon, &["udp-connect", "127.77.2.1", "9"]);
    assert_eq!((code, stdout.trim()), (1, "errno 1"), "still enforced");

    std::fs::write(&daemon.rules_file, "").unwrap();
    // SAFETY: signalling the daemon this test started.
    unsafe { libc::kill(daemon.pid() as i32, libc::SIGHUP) };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.2.1", "9"]);
        if code == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let took = daemon.stop_with(libc::SIGTERM);
    assert!(took < Duration::from_secs(3), "SIGTERM took {took:?}");
    assert!(!daemon.socket.exists(), "the socket file is removed");
}

#[test]
fn a_connect_loop_sees_no_wrong_decision_during_100_reloads() {
    if !can_run() {
        return;
    }
    // 127.77.3.1 is denied by a rule present before and after every reload; 127.77.3.2 is
    // allowed (the default). Each reload changes the policy (a new, unrelated rule first in the
    // file shifts every rule id), so the maps are rewritten each time.
    let fixed = "address_rule(addresses=[\"127.77.3.1\"], decision=\"forbidden\")\n";
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: fixed.to_string(),
        ..Default::default()
    });
    let stop = daemon.dir.path().join("stop");
    let probe = net_probe();
    let looper = daemon
        .guard_command(&[
            "run",
            "--",
            probe.to_str().unwrap(),
            "udp-loop",
            "127.77.3.2",
            "127.77.3.1",
            "9",
            stop.to_str().unwrap(),
            "120",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for round in 0..100 {
        let mut rules = String::new();
        for i in 0..=(round % 7) {
            rules.push_str(&format!(
                "address_rule(addresses=[\"127.78.{round}.{i}\"], decision=\"prompt\")\n"
            ));
        }
        rules.push_str(fixed);
        std::fs::write(&daemon.rules_file, rules).unwrap();
        let out = daemon.guard(&["reload"]);
        assert!(
            out.status.success(),
            "reload {round}: {}",
            text(&out.stderr)
        );
    }
    std::fs::write(&stop, "").unwrap();
    let out = looper.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    let mut words = stdout.split_whitespace();
    let (rounds, wrong): (u64, u64) = match (words.next(), words.next(), words.next(), words.next())
    {
        (Some("rounds"), Some(r), Some("wrong"), Some(w)) => {
            (r.parse().unwrap(), w.parse().unwrap())
        }
        _ => panic!("unexpected output: {stdout}{}", text(&out.stderr)),
    };
    println!(
        "{rounds} rounds of an allowed and a forbidden connect during 100 reloads: {wrong} wrong"
    );
    assert!(
        rounds > 100,
        "the loop ran through the reloads ({rounds} rounds)"
    );
    assert_eq!(wrong, 0, "wrong decisions during reloads: {stdout}");
}

#[test]
fn a_non_root_user_is_refused_by_the_default_authorization_and_the_refusal_is_audited() {
    if !can_run() {
        return;
    }
    const UID: u32 = 64_321;
    let daemon = TestDaemon::start(&DaemonSetup {
        // The socket is the user's group's, so the connection itself is allowed by the file
        // mode and the authorization policy is what refuses.
        extra_config: format!("socket_group = \"{UID}\"\n"),
        ..Default::default()
    });
    let out = daemon.guard_as(UID, &["status"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "not authorized: {}",
        text(&out.stderr)
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("not authorized")
            && stderr.contains(&format!("uid {UID}"))
            && stderr.contains("`status`"),
        "{stderr}"
    );
    let out = daemon.guard_as(UID, &["allow-host", "example.com", "--protocol", "https"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(!daemon.amendments().exists(), "nothing was written");

    // Root reads the audit: the refusals are there, with who and what.
    let records = audit(&daemon);
    let refused: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "control_refused")
        .collect();
    assert_eq!(refused.len(), 2, "{records:?}");
    assert_eq!(refused[0]["uid"], UID);
    assert_eq!(refused[0]["request"], "status");
    assert_eq!(refused[1]["request"], "amend");

    // The user may read the records about their own processes only: none of root's.
    let out = daemon.guard_as(UID, &["audit", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let own: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        own.iter()
            .all(|r| r["owner"].as_str() == Some(UID.to_string().as_str())),
        "only the user's own records: {own:?}"
    );
    assert_eq!(own.len(), 2, "the user's two refused requests: {own:?}");
}

#[test]
fn a_process_inside_a_guard_scope_cannot_answer_asks_or_change_the_policy_even_as_root() {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    dns.set_a("scoped.guard.test", &[Ipv4Addr::new(127, 77, 2, 1)], 300);
    let daemon = TestDaemon::start(&DaemonSetup {
        rules:
            "network_rule(host=\"scoped.guard.test\", protocol=\"https\", decision=\"prompt\")\n"
                .to_string(),
        nameserver: Some(dns.addr()),
        // The daemon resolves the rules' names itself (guard's resolver, which would put them
        // in force only as a scope looks them up, is off): the probe connects by address.
        extra_config: NAMES_RESOLVED_BY_THE_DAEMON.to_string(),
        ..Default::default()
    });
    let (code, _, _) = run_probe(&daemon, &["tcp", "127.77.2.1", "443"]);
    assert_eq!(code, 1, "the connect is an ask");
    let id = daemon.prompts()[0]["id"].as_u64().unwrap().to_string();
    let guard = guard_tests::daemon::guard_bin();
    let socket = daemon.socket.to_str().unwrap();
    let refused_inside = |out: &(i32, String, String), what: &str| {
        assert_eq!(out.0, 3, "{what} from inside a scope: {out:?}");
        assert!(
            out.2.contains("inside a guard scope") && out.2.contains("in_guard_scope=true"),
            "{what}: {out:?}"
        );
    };

    // Root, inside a run scope of this daemon.
    refused_inside(
        &daemon.run_in_scope(&guard, &["approve", &id, "--once"]),
        "approve",
    );
    refused_inside(
        &daemon.run_in_scope(&guard, &["allow-host", "evil.test", "--protocol", "https"]),
        "allow-host",
    );
    refused_inside(
        &daemon.run_in_scope(&guard, &["allow-prefix", "--", "git", "push"]),
        "allow-prefix",
    );
    refused_inside(&daemon.run_in_scope(&guard, &["reload"]), "reload");
    // Reading is still allowed from inside.
    let (code, stdout, stderr) = daemon.run_in_scope(&guard, &["status", "--json"]);
    assert_eq!(code, 0, "status from inside: {stdout}{stderr}");

    // Root, inside a stand-alone `guard run` (a scope that is not this daemon's).
    let standalone_rules = daemon.dir.path().join("standalone.rules");
    // Its command may reach the daemon's socket (unix sockets nothing names are refused): what
    // is tested here is what the daemon lets it ask.
    std::fs::write(
        &standalone_rules,
        format!(
            "prefix_rule(pattern=[\"git\", \"push\"], decision=\"forbidden\")\n\
             unix_rule(socket=\"{socket}\", decision=\"allow\")\n"
        ),
    )
    .unwrap();
    let mut standalone = std::process::Command::new(&guard);
    standalone
        .args(["run", "--rules"])
        .arg(&standalone_rules)
        .args(["--", guard.to_str().unwrap(), "reload", "--socket", socket])
        .env_remove("GUARD_SOCKET");
    let out = standalone.output().unwrap();
    refused_inside(
        &(
            out.status.code().unwrap_or(-1),
            text(&out.stdout),
            text(&out.stderr),
        ),
        "reload from a stand-alone scope",
    );

    assert!(!daemon.amendments().exists(), "nothing was written");
    assert_eq!(daemon.prompts().len(), 1, "the ask is still pending");
    let refused: Vec<Value> = audit(&daemon)
        .into_iter()
        .filter(|r| r["type"] == "control_refused")
        .collect();
    let scopes: Vec<(&str, &str)> = refused
        .iter()
        .map(|r| (r["request"].as_str().unwrap(), r["scope"].as_str().unwrap()))
        .collect();
    assert_eq!(
        scopes,
        [
            ("approve", "run"),
            ("amend", "run"),
            ("amend", "run"),
            ("reload", "run"),
            ("reload", "standalone")
        ],
        "{refused:?}"
    );

    // The same root from outside every scope answers.
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(
        out.status.success(),
        "approve from outside: {}",
        text(&out.stderr)
    );
}

#[test]
fn a_custom_authorization_policy_lets_a_group_answer_asks() {
    if !can_run() {
        return;
    }
    const UID: u32 = 64_322;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("authz.json");
    std::fs::write(
        &policy,
        format!(
            r#"{{"rules": [
                {{"effect": "allow", "actions": ["*"], "when": {{"uid": ["0"]}}}},
                {{"effect": "allow", "actions": ["prompts", "status"], "when": {{"uid": ["{UID}"]}}, "obligations": ["audit"]}}
            ]}}"#
        ),
    )
    .unwrap();
    let daemon = TestDaemon::start(&DaemonSetup {
        extra_config: format!("socket_group = \"{UID}\"\nauthz_policy = {policy:?}\n"),
        ..Default::default()
    });
    let out = daemon.guard_as(UID, &["prompts", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "[]");
    let out = daemon.guard_as(UID, &["reload"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "reload is not in the user's rule"
    );
    // The deciding rule's `audit` obligation: the allowed request is recorded too.
    let records = audit(&daemon);
    let allowed: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "control_allowed")
        .collect();
    assert_eq!(allowed.len(), 1, "{records:?}");
    assert_eq!(allowed[0]["request"], "prompts");
    assert_eq!(allowed[0]["authz_rule"], 1);
}

#[test]
fn identical_asks_are_one_and_an_unanswered_ask_expires_denied() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.4.1\"], decision=\"prompt\")\n".to_string(),
        extra_config: "[asks]\ntimeout_secs = 2\n".to_string(),
        ..Default::default()
    });
    let mut run = RetryingRun::start(
        &daemon,
        &net_probe(),
        &["udp-connect", "127.77.4.1", "5353"],
    );
    for _ in 0..3 {
        assert_eq!(run.attempt().0, 1);
    }
    let asks = daemon.prompts();
    assert_eq!(asks.len(), 1, "{asks:?}");
    assert_eq!(asks[0]["count"], 3);
    assert_eq!(asks[0]["record"]["protocol"], "socks5_udp");
    // Asks belong to their scope: the same request from another run is another ask.
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.4.1", "5353"]);
    assert_eq!(code, 1);
    let asks = daemon.prompts();
    assert_eq!(asks.len(), 2, "{asks:?}");
    assert_ne!(asks[0]["scope"], asks[1]["scope"], "{asks:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.prompts().is_empty() {
        assert!(Instant::now() < deadline, "the ask did not expire");
        std::thread::sleep(Duration::from_millis(200));
    }
    let records = audit(&daemon);
    assert!(
        records
            .iter()
            .any(|r| r["type"] == "ask_expired" && r["becomes"] == "deny"),
        "{records:?}"
    );
    assert!(
        !daemon.amendments().exists(),
        "an expired ask writes no rule"
    );
    assert_eq!(run.attempt().0, 1, "still refused");
}

#[test]
fn once_approvals_expire_and_session_approvals_hold_while_the_run_lives() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.5.1\"], decision=\"prompt\")\n".to_string(),
        extra_config: "[asks]\nonce_secs = 2\ndedupe_secs = 1\n".to_string(),
        ..Default::default()
    });
    // Once: the retry within the window succeeds, after it the request is refused again.
    let mut run = RetryingRun::start(
        &daemon,
        &net_probe(),
        &["udp-connect", "127.77.5.1", "5353"],
    );
    assert_eq!(run.attempt().0, 1);
    let id = daemon.prompts()[0]["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, stdout) = run.attempt();
    assert_eq!(
        (code, stdout.trim()),
        (0, "ok"),
        "retried within the window"
    );
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.5.1", "5353"]);
    assert_eq!(code, 1, "another run's request is not the one approved");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _) = run.attempt();
        if code == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the once approval did not expire"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The refusal that showed the window closed made an ask of its own: answer it, and let
    // the dedupe window pass, so the next ask is the session run's.
    for ask in daemon.prompts() {
        let id = ask["id"].as_u64().unwrap().to_string();
        assert!(daemon.guard(&["deny", &id]).status.success());
    }
    std::thread::sleep(Duration::from_millis(1100));

    // Session: a run that asks, waits for the approval, and retries.
    let go = daemon.dir.path().join("go");
    let probe = net_probe();
    let script = format!(
        "{p} udp-connect 127.77.5.1 5353; i=0; while [ ! -e {go} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; {p} udp-connect 127.77.5.1 5353",
        p = probe.display(),
        go = go.display()
    );
    let run = daemon
        .guard_command(&["run", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let id = loop {
        if let Some(ask) = daemon.prompts().first() {
            break ask["id"].as_u64().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no ask from the run");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = daemon.guard(&["approve", &id, "--session"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(&go, "").unwrap();
    let out = run.wait_with_output().unwrap();
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(lines, ["errno 1", "ok"], "{}", text(&out.stderr));
    // The run ended, and its session approval with it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = daemon.json(&["status", "--json"]);
        if status["approvals"].as_array().is_some_and(|a| a.is_empty()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the session approval outlived its run: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.5.1", "5353"]);
    assert_eq!(code, 1, "refused again in a new run");
}

#[test]
fn prompts_watch_answers_with_one_key_and_deny_always_writes_a_deny_rule() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "network_rule(host=\"127.77.6.1\", protocol=\"socks5_udp\", decision=\"prompt\")\n"
            .to_string(),
        ..Default::default()
    });
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.6.1", "5353"]);
    assert_eq!(code, 1);
    // Without a terminal, --watch reads one key per line: D = deny always.
    let mut watch = daemon
        .guard_command(&["prompts", "--watch"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = watch.stdin.as_mut().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        stdin.write_all(b"D\n").unwrap();
        std::thread::sleep(Duration::from_millis(500));
        stdin.write_all(b"q\n").unwrap();
    }
    let out = watch.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert!(stdout.contains("127.77.6.1"), "the ask is shown: {stdout}");
    assert!(
        stdout.contains("done"),
        "answered: {stdout}{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(daemon.amendments()).unwrap(),
        "network_rule(host=\"127.77.6.1\", protocol=\"socks5_udp\", decision=\"deny\", \
         justification=\"Deny socks5_udp access to 127.77.6.1\")\n"
    );
    assert!(daemon.prompts().is_empty());
    // Denied now, and no longer an ask: nothing to approve.
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.6.1", "5353"]);
    assert_eq!(code, 1);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        daemon.prompts().is_empty(),
        "a denied host does not ask again"
    );
}

#[test]
fn status_reports_backend_scopes_rules_addresses_asks_counters_and_uptime() {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    dns.set_a("status.guard.test", &[Ipv4Addr::new(127, 77, 7, 1)], 300);
    let daemon = TestDaemon::start(&DaemonSetup {
        rules:
            "network_rule(host=\"status.guard.test\", protocol=\"https\", decision=\"prompt\")\n\
                prefix_rule(pattern=[\"git\", \"push\"], decision=\"forbidden\")\n"
                .to_string(),
        nameserver: Some(dns.addr()),
        // The daemon resolves the rules' names itself (guard's resolver, which would put them
        // in force only as a scope looks them up, is off): the probe connects by address.
        extra_config: NAMES_RESOLVED_BY_THE_DAEMON.to_string(),
        ..Default::default()
    });
    let (code, _, _) = run_probe(&daemon, &["tcp", "127.77.7.1", "443"]);
    assert_eq!(code, 1);
    let status = daemon.json(&["status", "--json"]);
    assert_eq!(status["backend"], "cgroup");
    assert!(status["uptime_secs"].is_u64());
    assert!(
        status["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["kind"]["kind"] == "runs"),
        "{status}"
    );
    let rules = status["rules"].as_array().unwrap();
    assert!(
        rules
            .iter()
            .any(|r| r["file"].as_str().unwrap().ends_with("team.rules") && r["rules"] == 2),
        "{status}"
    );
    assert_eq!(status["addresses"][0]["host"], "status.guard.test");
    assert_eq!(status["addresses"][0]["addresses"][0], "127.77.7.1");
    assert_eq!(status["asks_pending"], 1);
    assert_eq!(status["counters"]["net_prompt"], 1);
    assert_eq!(status["events_lost"], 0);
    // Every hook's fail-open count is reported (none happened).
    assert_eq!(
        status["failed_open"],
        serde_json::json!({"exec": 0, "net": 0, "file": 0}),
        "{status}"
    );
    let human = daemon.guard(&["status"]);
    let human = text(&human.stdout);
    assert!(
        human.contains("backend cgroup")
            && human.contains("status.guard.test → 127.77.7.1")
            && human.contains("failed open exec=0 net=0 file=0"),
        "{human}"
    );
}

/// The cgroup folder of the first `guard run` scope the daemon lists.
fn run_scope(daemon: &TestDaemon) -> PathBuf {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = daemon.json(&["status", "--json"]);
        if let Some(scope) = status["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["kind"]["kind"] == "run")
        {
            return PathBuf::from(scope["cgroup"].as_str().unwrap());
        }
        assert!(Instant::now() < deadline, "no run scope: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A UDP connect to 127.77.8.1 from a fresh process in `scope`: refused (`errno 1`) or not.
fn refused_in(scope: &std::path::Path) -> bool {
    let out = TestDaemon::in_cgroup(scope, &net_probe(), &["udp-connect", "127.77.8.1", "9"]);
    match text(&out.stdout).trim() {
        "errno 1" => true,
        "ok" => false,
        other => panic!("net-probe said {other:?}: {}", text(&out.stderr)),
    }
}

#[test]
fn enforcement_survives_kill_9_and_a_clean_restart_and_release_detaches_it() {
    if !can_run() {
        return;
    }
    let mut daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.8.1\"], decision=\"forbidden\")\n".to_string(),
        ..Default::default()
    });
    let mut long_run = daemon
        .guard_command(&["run", "--", "sleep", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let scope = run_scope(&daemon);
    assert!(refused_in(&scope), "enforced while the daemon runs");
    let generations = |d: &TestDaemon| -> usize {
        std::fs::read_dir(&d.pin_dir).map_or(0, |e| e.filter_map(Result::ok).count())
    };
    assert_eq!(generations(&daemon), 1);

    daemon.stop_with(libc::SIGKILL);
    assert!(
        refused_in(&scope),
        "still enforced with the daemon killed (-9)"
    );
    daemon.spawn();
    assert!(refused_in(&scope), "enforced by the restarted daemon");
    assert_eq!(
        generations(&daemon),
        1,
        "the new daemon released the old pins"
    );
    let status = daemon.json(&["status", "--json"]);
    assert!(
        status["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["kind"]["kind"] == "run"
                && s["kind"]["adopted"] == true
                && s["cgroup"] == scope.display().to_string()),
        "the run scope was adopted: {status}"
    );

    let took = daemon.stop_with(libc::SIGTERM);
    assert!(took < Duration::from_secs(3), "SIGTERM took {took:?}");
    assert!(refused_in(&scope), "still enforced after a clean stop");
    daemon.spawn();
    assert!(refused_in(&scope), "enforced after a clean restart");

    // A live daemon's pins are its own: release refuses, and nothing is detached.
    let out = daemon.guard(&["release", "--pin-dir", daemon.pin_dir.to_str().unwrap()]);
    assert!(!out.status.success(), "release while the daemon runs");
    assert!(
        text(&out.stderr).contains("stop it first"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        refused_in(&scope),
        "still enforced after the refused release"
    );

    // Break glass: with the daemon stopped, `guard release` detaches everything.
    daemon.stop_with(libc::SIGTERM);
    let out = daemon.guard(&["release", "--pin-dir", daemon.pin_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!refused_in(&scope), "nothing enforces after release");
    let _ = long_run.kill();
    let _ = long_run.wait();
}

#[test]
fn an_amendment_interrupted_by_kill_9_leaves_the_file_parseable() {
    use std::io::{BufRead, BufReader, Write};
    if !can_run() {
        return;
    }
    let mut daemon = TestDaemon::start(&DaemonSetup::default());
    let mut total_lines = 0;
    for round in 0..6u32 {
        if round > 0 {
            daemon.spawn();
        }
        let socket = daemon.socket.clone();
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let answered_here = answered.clone();
        let writer = std::thread::spawn(move || {
            // As fast as the daemon takes them, until it dies (bounded: 5 000 requests).
            let Ok(stream) = std::os::unix::net::UnixStream::connect(&socket) else {
                return 0;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut stream = stream;
            let mut done = 0;
            for i in 0..5_000 {
                let line = format!(
                    "{{\"v\":1,\"op\":\"amend\",\"amendment\":{{\"kind\":\"network\",\"host\":\"h{round}-{i}.test\",\"protocol\":\"https\",\"decision\":\"allow\"}}}}\n"
                );
                if stream.write_all(line.as_bytes()).is_err() {
                    break;
                }
                let mut response = String::new();
                if reader.read_line(&mut response).unwrap_or(0) == 0 {
                    break;
                }
                done += 1;
                answered_here.store(done, std::sync::atomic::Ordering::Relaxed);
            }
            done
        });
        // Killed mid-stream: once the first amendment is in (a loaded machine starts slowly;
        // at most 10 s), then a little later each round.
        let deadline = Instant::now() + Duration::from_secs(10);
        while answered.load(std::sync::atomic::Ordering::Relaxed) == 0 && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(20 + 70 * round as u64));
        daemon.stop_with(libc::SIGKILL);
        let done = writer.join().unwrap();
        assert!(
            done > 0,
            "round {round}: no amendment got through before the kill"
        );
        let file = daemon.amendments();
        let out = daemon.guard(&["policy", "validate", file.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "round {round}: the amendments file does not parse after kill -9: {}",
            text(&out.stderr)
        );
        let contents = std::fs::read_to_string(&file).unwrap();
        assert!(
            contents.ends_with(")\n"),
            "round {round}: a whole last line"
        );
        total_lines = contents.lines().count();
        assert!(
            total_lines >= done,
            "every answered amendment is in the file"
        );
    }
    assert!(total_lines > 6, "amendments were written ({total_lines})");
}

/// A copy of `true` named `name` in `dir` (a program whose file name the rules can name).
fn program(dir: &std::path::Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::copy("/bin/true", &path).expect("copying /bin/true");
    path
}

#[test]
fn an_exec_ask_approved_once_runs_exactly_that_argv_and_a_prompt_rule_has_no_always() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "prefix_rule(pattern=[\"deploytool\", \"push\"], decision=\"prompt\", \
                justification=\"deploys need a person\")\n"
            .to_string(),
        ..Default::default()
    });
    let tool = program(daemon.dir.path(), "deploytool");
    let tool = tool.to_str().unwrap();
    let out = daemon.guard(&["run", "--", tool, "push", "prod"]);
    assert_eq!(out.status.code(), Some(137), "killed before it ran");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("requires approval: deploys need a person"),
        "the §5.2 message: {stderr}"
    );
    let asks = daemon.prompts();
    assert_eq!(asks.len(), 1, "{asks:?}");
    assert_eq!(
        asks[0]["target"]["tokens"],
        serde_json::json!(["deploytool", "push", "prod"])
    );
    let id = asks[0]["id"].as_u64().unwrap().to_string();

    let out = daemon.guard(&["approve", &id, "--always"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot override it"),
        "says why there is no amendment: {}",
        text(&out.stderr)
    );
    assert!(!daemon.amendments().exists(), "nothing written");

    // The retry comes from a run that asked the same (an approval answers its own scope's ask).
    let mut run = RetryingRun::start(&daemon, Path::new(tool), &["push", "prod"]);
    assert_eq!(run.attempt().0, 137, "killed before it ran");
    let ask = daemon
        .prompts()
        .into_iter()
        .find(|a| a["id"].as_u64().unwrap().to_string() != id)
        .expect("the run's own ask");
    let out = daemon.guard(&["approve", &ask["id"].to_string(), "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        run.attempt().0,
        0,
        "the approved argv runs in the scope that asked"
    );
    assert_eq!(
        daemon
            .guard(&["run", "--", tool, "push", "prod"])
            .status
            .code(),
        Some(137),
        "another run asks for itself"
    );
    assert_eq!(
        daemon
            .guard(&["run", "--", tool, "push", "prod", "--force"])
            .status
            .code(),
        Some(137),
        "a longer argv is not what was approved"
    );
    assert_eq!(
        daemon
            .guard(&["run", "--", tool, "push", "staging"])
            .status
            .code(),
        Some(137)
    );
}

#[test]
fn an_unmatched_exec_approved_always_becomes_the_references_prefix_rule() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_exec=\"prompt\")\n".to_string(),
        ..Default::default()
    });
    let tool = program(daemon.dir.path(), "buildtool");
    let tool = tool.to_str().unwrap();
    assert_eq!(
        daemon.guard(&["run", "--", tool, "all"]).status.code(),
        Some(137)
    );
    let asks = daemon.prompts();
    assert_eq!(asks.len(), 1, "{asks:?}");
    assert_eq!(
        asks[0]["record"]["source"], "mode_guard",
        "the unmatched default decided"
    );
    let id = asks[0]["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--always", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(daemon.amendments()).unwrap(),
        "prefix_rule(pattern=[\"buildtool\", \"all\"], decision=\"allow\")\n"
    );
    assert_eq!(
        daemon.guard(&["run", "--", tool, "all"]).status.code(),
        Some(0)
    );
    assert_eq!(
        daemon.guard(&["run", "--", tool, "other"]).status.code(),
        Some(137),
        "only the approved prefix"
    );
}

#[test]
fn amendment_verbs_without_a_rules_file_go_through_the_daemon_and_apply_at_once() {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    dns.set_a("deny.guard.test", &[Ipv4Addr::new(127, 77, 9, 1)], 300);
    let daemon = TestDaemon::start(&DaemonSetup {
        nameserver: Some(dns.addr()),
        // The daemon resolves the rules' names itself (guard's resolver, which would put them
        // in force only as a scope looks them up, is off): the probe connects by address.
        extra_config: NAMES_RESOLVED_BY_THE_DAEMON.to_string(),
        ..Default::default()
    });
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.9.1", "443"]);
    assert_eq!(code, 0, "allowed by default");
    let out = daemon.guard(&["deny-host", "Deny.Guard.Test.", "--protocol", "https"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("applied"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(daemon.amendments()).unwrap(),
        "network_rule(host=\"deny.guard.test\", protocol=\"https\", decision=\"deny\")\n"
    );
    let (code, stdout, _) = run_probe(&daemon, &["udp-connect", "127.77.9.1", "443"]);
    assert_eq!(
        (code, stdout.trim()),
        (1, "errno 1"),
        "denied at once, no restart"
    );
    // A bad amendment changes nothing and says why.
    let out = daemon.guard(&["allow-host", "*.guard.test", "--protocol", "https"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("wildcards are not allowed"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(daemon.amendments())
            .unwrap()
            .lines()
            .count(),
        1
    );
}

#[test]
fn an_approval_never_overrides_a_forbidden_rule() {
    if !can_run() {
        return;
    }
    // The host asks, but one of its addresses is forbidden outright.
    let dns = TestDns::start();
    dns.set_a(
        "mixed.guard.test",
        &[Ipv4Addr::new(127, 77, 10, 1), Ipv4Addr::new(127, 77, 10, 2)],
        300,
    );
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "network_rule(host=\"mixed.guard.test\", protocol=\"socks5_udp\", decision=\"prompt\")\n\
                address_rule(addresses=[\"127.77.10.2\"], decision=\"forbidden\")\n"
            .to_string(),
        nameserver: Some(dns.addr()),
        // The daemon resolves the rules' names itself (guard's resolver, which would put them
        // in force only as a scope looks them up, is off): the probe connects by address.
        extra_config: NAMES_RESOLVED_BY_THE_DAEMON.to_string(),
        ..Default::default()
    });
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.10.2", "5353"]);
    assert_eq!(code, 1);
    assert!(
        daemon.prompts().is_empty(),
        "a forbidden destination is no ask"
    );
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.10.1", "5353"]);
    assert_eq!(code, 1);
    let id = daemon.prompts()[0]["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--always"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.10.1", "5353"]);
    assert_eq!(code, 0, "the approved address connects");
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.10.2", "5353"]);
    assert_eq!(
        code, 1,
        "the forbidden address of the same host stays forbidden"
    );
}

#[test]
fn a_live_once_approval_does_not_let_through_what_a_reload_made_forbidden() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.12.1\"], decision=\"prompt\")\n".to_string(),
        ..Default::default()
    });
    let mut run = RetryingRun::start(
        &daemon,
        &net_probe(),
        &["udp-connect", "127.77.12.1", "5353"],
    );
    assert_eq!(run.attempt().0, 1);
    let id = daemon.prompts()[0]["id"].as_u64().unwrap().to_string();
    assert!(daemon.guard(&["approve", &id, "--once"]).status.success());
    assert_eq!(run.attempt().0, 0, "approved");
    std::fs::write(
        &daemon.rules_file,
        "address_rule(addresses=[\"127.77.12.0/24\"], decision=\"forbidden\")\n",
    )
    .unwrap();
    assert!(daemon.guard(&["reload"]).status.success());
    let status = daemon.json(&["status", "--json"]);
    assert_eq!(
        status["approvals"].as_array().unwrap().len(),
        1,
        "the approval still lives"
    );
    assert_eq!(run.attempt().0, 1, "forbidden wins over the live approval");
}

/// A cgroup of the test's own under the cgroup2 root, removed (processes killed) on drop.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(name: &str) -> TestCgroup {
        let path = guard::kernel::scope::cgroup2_root()
            .unwrap()
            .join(format!("guard-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TestCgroup(path)
    }
    fn child(&self, name: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::create_dir_all(&path).unwrap();
        path
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&self.0)
            .map(|e| {
                e.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        dirs.push(self.0.clone());
        for dir in dirs {
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            for _ in 0..100 {
                if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn a_configured_cgroup_is_enforced_and_the_daemon_inside_it_is_exempt() {
    if !can_run() {
        return;
    }
    // Everything in `scope` is enforced except the daemon's own cgroup: its DNS queries to the
    // name server that the policy forbids keep working.
    let dns = TestDns::start();
    dns.set_a("exempt.guard.test", &[Ipv4Addr::new(127, 77, 11, 1)], 1);
    let ns = dns.addr();
    let scope = TestCgroup::new("scope");
    let daemon_cgroup = scope.child("daemon");
    let others = scope.child("others");
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: format!(
            "network_rule(host=\"exempt.guard.test\", protocol=\"https\", decision=\"allow\")\n\
             address_rule(addresses=[\"{}\"], ports=[{}], transport=\"udp\", decision=\"forbidden\")\n",
            ns.ip(),
            ns.port()
        ),
        // The daemon resolves the rule's name itself (the point here: its own queries).
        extra_config: format!(
            "{NAMES_RESOLVED_BY_THE_DAEMON}[scope]\ncgroups = [{:?}]\n",
            scope.0
        ),
        nameserver: Some(ns),
        daemon_cgroup: Some(daemon_cgroup.clone()),
        ..Default::default()
    });
    let port = ns.port().to_string();
    let ip = ns.ip().to_string();
    let out = TestDaemon::in_cgroup(&others, &net_probe(), &["udp-sendto", &ip, &port]);
    assert_eq!(
        text(&out.stdout).trim(),
        "errno 1",
        "a process in the configured cgroup is enforced"
    );
    // The exemption is the daemon's cgroup as a whole (under systemd, guard.service holds the
    // daemon alone).
    let out = TestDaemon::in_cgroup(&daemon_cgroup, &net_probe(), &["udp-sendto", &ip, &port]);
    assert_eq!(
        text(&out.stdout).trim(),
        "ok",
        "the daemon's cgroup is exempt"
    );
    // The 1 s TTL runs out: the daemon re-resolves through the forbidden server.
    let before = dns.queries("exempt.guard.test");
    let deadline = Instant::now() + Duration::from_secs(10);
    while dns.queries("exempt.guard.test") <= before {
        assert!(
            Instant::now() < deadline,
            "the daemon's own DNS queries were blocked:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = daemon.json(&["status", "--json"]);
    assert!(
        status["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["kind"]["kind"] == "cgroup"),
        "{status}"
    );
}

#[test]
fn the_systemd_unit_verifies_and_the_daemon_tells_systemd_when_it_is_ready() {
    if !can_run() {
        return;
    }
    // `systemd-analyze verify` on the shipped unit, pointed at the binary under test.
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../packaging/guard.service"
    ))
    .expect("packaging/guard.service");
    assert!(
        unit.contains("Type=notify") && unit.contains("Restart=on-failure"),
        "{unit}"
    );
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("guard.service");
    let bin = guard_tests::daemon::guard_bin();
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/guard", bin.to_str().unwrap()),
    )
    .unwrap();
    match std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
    {
        Ok(out) => assert!(
            out.status.success() && out.stderr.is_empty(),
            "systemd-analyze verify: {}",
            text(&out.stderr)
        ),
        Err(_) => guard_tests::kernel::skip("systemd-analyze is not installed"),
    }

    // Type=notify: READY=1 arrives on $NOTIFY_SOCKET once the socket answers.
    let notify_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut daemon = TestDaemon::start_with_env(
        &DaemonSetup::default(),
        &[("NOTIFY_SOCKET", notify_path.to_str().unwrap())],
    );
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).expect("a notification within 30 s");
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(message.contains("READY=1"), "{message}");
    daemon.stop_with(libc::SIGTERM);
    let n = notify.recv(&mut buf).expect("STOPPING=1");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
}

#[test]
fn prompts_watch_on_a_terminal_takes_a_key_without_enter() {
    use std::io::Write;
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.13.1\"], decision=\"prompt\")\n".to_string(),
        ..Default::default()
    });
    let mut run = RetryingRun::start(
        &daemon,
        &net_probe(),
        &["udp-connect", "127.77.13.1", "5353"],
    );
    assert_eq!(run.attempt().0, 1);
    // `script` gives the watcher a real terminal (a pty), as ssh does.
    let watch = format!(
        "{} prompts --watch",
        guard_tests::daemon::guard_bin().display()
    );
    let mut terminal = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &watch, "/dev/null"])
        .env("GUARD_SOCKET", &daemon.socket)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script (bsdutils) runs");
    std::thread::sleep(Duration::from_millis(500));
    // One key, no Enter: on a terminal in canonical mode this would wait for a newline.
    terminal.stdin.as_mut().unwrap().write_all(b"o").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.prompts().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the key was not taken without Enter"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    terminal.stdin.as_mut().unwrap().write_all(b"q").unwrap();
    let out = terminal.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = daemon.json(&["status", "--json"]);
    assert_eq!(status["approvals"][0]["mode"], "once", "{status}");
    assert_eq!(run.attempt().0, 0, "approved once from the terminal");
}

#[test]
fn the_daemon_loads_a_legacy_policy_beside_its_rules_and_audits_what_it_cannot_hold() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().expect("making a temporary folder");
    let evil = copy_program(&touch_program(), dir.path(), "gd-evil-tool");
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "rule_set(deny=[\"write(.git/**)\"])\n".to_string(),
        legacy_policy: Some(
            "# legacy\nforbid_program_regex(\"^gd-evil\", \"no evil tools\")\n".to_string(),
        ),
        ..Default::default()
    });
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let marker = work.join("made");
    let (code, _, stderr) = daemon.run_in_scope(&evil, &[marker.to_str().unwrap()]);
    assert_eq!(code, 137, "killed before it ran: {stderr}");
    assert!(!marker.exists(), "gd-evil-tool ran");
    assert!(
        stderr.contains("team.policy:2"),
        "the refusal names the legacy file and line: {stderr}"
    );

    // The audit log says which rules the cgroup backend does not hold: the write rule and the
    // protected paths, from the start and at every reload.
    let out = daemon.guard(&["audit", "--json", "--type", "daemon_start"]);
    let start: Value = serde_json::from_str(
        text(&out.stdout)
            .lines()
            .last()
            .expect("a daemon_start record"),
    )
    .unwrap();
    let gaps = start["not_enforced"].as_array().expect("not_enforced");
    assert!(
        gaps.iter()
            .any(|g| g["rule"].as_str().unwrap().contains("write(.git/**)")),
        "{start:#}"
    );
    let reload = daemon.json(&["reload", "--json"]);
    assert_eq!(reload["not_enforced"], start["not_enforced"], "{reload:#}");
}

#[test]
fn under_approval_never_a_prompt_is_refused_at_once_with_the_reason_and_raises_no_ask() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.4.2\"], decision=\"prompt\")\n".to_string(),
        extra_config: "[asks]\napproval = \"never\"\n".to_string(),
        ..Default::default()
    });
    let (code, _, stderr) = run_probe(&daemon, &["udp-connect", "127.77.4.2", "5353"]);
    assert_eq!(code, 1, "refused: {stderr}");
    assert!(
        stderr.contains("approval required by policy, but AskForApproval is set to Never"),
        "{stderr}"
    );
    assert!(daemon.prompts().is_empty(), "no ask under never");
    let records = audit(&daemon);
    assert!(
        records.iter().all(|r| r["type"] != "ask"),
        "no ask record: {records:?}"
    );
}

#[test]
fn allow_prefix_that_a_stronger_rule_outvotes_is_refused_by_the_daemon_and_writes_nothing() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n".to_string(),
        ..Default::default()
    });
    let out = daemon.guard(&["allow-prefix", "--", "git", "push", "origin"]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "allowing `git push origin` would change nothing: the prompt prefix_rule for `git push`"
        ),
        "{stderr}"
    );
    assert!(!daemon.amendments().exists(), "nothing was written");
    let out = daemon.guard(&["allow-prefix", "--", "git", "status"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn approve_always_with_a_proposed_prefix_takes_it_only_under_the_references_rules() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_exec=\"prompt\")\n".to_string(),
        ..Default::default()
    });
    let tool = program(daemon.dir.path(), "buildtool");
    let tool = tool.to_str().unwrap();
    assert_eq!(
        daemon.guard(&["run", "--", tool, "all"]).status.code(),
        Some(137)
    );
    let id = daemon.prompts()[0]["id"].as_u64().unwrap().to_string();
    // A banned prefix, and one that does not cover what was asked, are refused; nothing is
    // written and the ask stays pending.
    for (prefix, why) in [
        ("env", "banned prefix"),
        ("buildtool other", "would not allow"),
    ] {
        let out = daemon.guard(&["approve", &id, "--always", "--prefix", prefix]);
        assert!(!out.status.success(), "{prefix}: {}", text(&out.stdout));
        assert!(
            text(&out.stderr).contains(why),
            "{prefix}: {}",
            text(&out.stderr)
        );
    }
    assert!(!daemon.amendments().exists());
    let out = daemon.guard(&["approve", &id, "--always", "--prefix", "buildtool"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(daemon.amendments()).unwrap(),
        "prefix_rule(pattern=[\"buildtool\"], decision=\"allow\")\n"
    );
    assert_eq!(
        daemon.guard(&["run", "--", tool, "other"]).status.code(),
        Some(0),
        "the prefix allows every argv below it"
    );
}

#[test]
fn a_control_line_longer_than_the_limit_is_refused_whole_and_its_tail_never_runs() {
    use std::io::{BufRead, BufReader, Write};
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup::default());
    let stream = std::os::unix::net::UnixStream::connect(&daemon.socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    // Leading whitespace is valid JSON: cut after the limit, the tail alone is a whole request.
    let amend = r#"{"v":1,"op":"amend","amendment":{"kind":"network","host":"tail-ran.test","protocol":"https","decision":"allow"}}"#;
    let line = format!("{}{amend}\n", " ".repeat(64 * 1024 + 1));
    stream.write_all(line.as_bytes()).unwrap();
    stream.write_all(b"{\"v\":1,\"op\":\"prompts\"}\n").unwrap();
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first["ok"], false, "the long line is refused: {first}");
    assert!(
        first["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("longer than 65536 bytes"),
        "the refusal says why: {first}"
    );
    let mut second = String::new();
    reader.read_line(&mut second).unwrap();
    let second: Value = serde_json::from_str(&second).unwrap();
    assert!(
        second["ok"] == true && second.get("result").is_some(),
        "the next response answers the next request, not the long line's tail: {second}"
    );
    let amendments = std::fs::read_to_string(daemon.amendments()).unwrap_or_default();
    assert!(
        !amendments.contains("tail-ran.test"),
        "the tail of the refused line did not run: {amendments}"
    );
}

#[test]
fn a_flooding_scope_loses_only_its_own_events_and_asks_and_another_scope_keeps_every_one() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_network=\"prompt\")\n".to_string(),
        extra_config: "[asks]\nmax_pending_per_scope = 16\n".to_string(),
        ..Default::default()
    });
    // One scope sends to 100 000 destinations of its own as fast as it can (each a new ask):
    // faster than the daemon reads, so the ring buffer fills past half and the scope's share
    // runs out.
    let (flood, _) = daemon.paced_load(&net_probe(), "127.88", 100_000, 1);
    // Meanwhile another scope makes five refused connects, each to a port of its own.
    std::thread::sleep(Duration::from_millis(300));
    let ports: Vec<u64> = (42_100..42_105).collect();
    for port in &ports {
        let port = port.to_string();
        let (code, stdout, stderr) = run_probe(&daemon, &["udp-connect", "127.0.0.1", &port]);
        assert_eq!((code, stdout.trim()), (1, "errno 1"), "{stderr}");
    }
    let flooded = guard_tests::kernel::wait_output(flood, Duration::from_secs(60));
    let flooded = text(&flooded.stdout);
    assert!(flooded.starts_with("sent 100000"), "{flooded}");

    // The quiet scope's five asks are there, and every one of its refusals is recorded.
    let prompts = daemon.prompts();
    let quiet_asks = prompts
        .iter()
        .filter(|a| ports.iter().any(|p| a["record"]["port"] == *p))
        .count();
    assert_eq!(quiet_asks, 5, "the quiet scope's asks: {prompts:?}");
    assert!(
        prompts.len() <= 16 + 5,
        "the flooding scope has at most its 16 asks pending: {} in all",
        prompts.len()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (quiet_records, scope_losses) = loop {
        let records = audit(&daemon);
        let quiet = records
            .iter()
            .filter(|r| {
                r["type"] == "decision" && ports.iter().any(|p| r["destination"]["port"] == *p)
            })
            .count();
        let losses: Vec<Value> = records
            .into_iter()
            .filter(|r| r["type"] == "scope_loss")
            .collect();
        if (quiet == 5 && !losses.is_empty()) || std::time::Instant::now() >= deadline {
            break (quiet, losses);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(quiet_records, 5, "no event of the quiet scope was lost");
    assert!(
        !scope_losses.is_empty(),
        "the flood's losses are recorded under its scope"
    );
    let cgroups: std::collections::HashSet<&str> = scope_losses
        .iter()
        .filter_map(|r| r["cgroup"].as_str())
        .collect();
    assert_eq!(cgroups.len(), 1, "one scope lost events: {scope_losses:?}");
    let lost: u64 = scope_losses
        .iter()
        .map(|r| r["scope_events_lost"].as_u64().unwrap_or(0))
        .sum();
    let status = daemon.json(&["status", "--json"]);
    assert_eq!(
        Some(lost),
        status["events_lost"].as_u64(),
        "every event lost was the flooding scope's"
    );
}

#[test]
fn a_user_runs_in_a_scope_without_sudo_and_answers_their_own_runs_asks_and_no_one_elses() {
    if !can_run() {
        return;
    }
    const ALICE: u32 = 64_341;
    const BOB: u32 = 64_342;
    // The built-in authorization, and no socket group: every local user may connect.
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.20.1\"], decision=\"prompt\")\n".to_string(),
        ..Default::default()
    });
    let mode = std::fs::metadata(&daemon.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o666, "any local user may connect");
    let mut run = RetryingRun::start_as(
        &daemon,
        ALICE,
        &net_probe(),
        &["udp-connect", "127.77.20.1", "5353"],
    );
    assert_eq!(run.attempt().0, 1, "refused: it asks");
    let asks = daemon.prompts();
    assert_eq!(asks.len(), 1, "{asks:?}");
    assert_eq!(asks[0]["owner"], ALICE.to_string(), "{asks:?}");
    let id = asks[0]["id"].to_string();
    let listed = |uid: u32| -> Vec<Value> {
        let out = daemon.guard_as(uid, &["prompts", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_str(&text(&out.stdout)).unwrap()
    };
    assert_eq!(listed(ALICE).len(), 1, "Alice sees her run's ask");
    assert!(listed(BOB).is_empty(), "Bob sees no one else's ask");

    let out = daemon.guard_as(BOB, &["approve", &id, "--once"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not authorized"),
        "{}",
        text(&out.stderr)
    );
    let out = daemon.guard_as(ALICE, &["approve", &id, "--always"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "--always would amend everyone's policy: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("`--once`/`--session`"),
        "says what she may do: {}",
        text(&out.stderr)
    );
    assert!(!daemon.amendments().exists(), "nothing was written");
    assert_eq!(run.attempt().0, 1, "still asked");

    let out = daemon.guard_as(ALICE, &["approve", &id, "--session"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(run.attempt().0, 0, "her approval lets her run through");
    // Her approval holds for her run's scope alone: Bob's run of the same request asks anew.
    let mut bobs = RetryingRun::start_as(
        &daemon,
        BOB,
        &net_probe(),
        &["udp-connect", "127.77.20.1", "5353"],
    );
    assert_eq!(bobs.attempt().0, 1, "Bob's run is not answered by Alice");
    let bobs_ask = listed(BOB);
    assert_eq!(bobs_ask.len(), 1, "{bobs_ask:?}");
    let out = daemon.guard_as(ALICE, &["deny", &bobs_ask[0]["id"].to_string()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));

    let records = audit(&daemon);
    let answered: Vec<&Value> = records.iter().filter(|r| r["type"] == "approval").collect();
    assert_eq!(answered.len(), 1, "{records:?}");
    assert_eq!(answered[0]["approval"]["uid"], ALICE, "{}", answered[0]);
    assert_eq!(
        answered[0]["approval"]["mode"], "session",
        "{}",
        answered[0]
    );
}

#[test]
fn a_users_prompted_exec_waits_in_her_run_for_her_own_answer() {
    if !can_run() {
        return;
    }
    const ALICE: u32 = 64_343;
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "prefix_rule(pattern=[\"touch\"], decision=\"prompt\")\n".to_string(),
        ..Default::default()
    });
    // A folder of hers, outside the daemon's (whose protected paths her run may not write).
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let made = work.path().join("mine");
    std::os::unix::fs::chown(work.path(), Some(ALICE), Some(ALICE)).unwrap();
    let script = format!("touch {}; echo rc=$?", made.display());
    // Without root the hold's filter goes in with no-new-privileges, as Landlock does.
    let mut run = daemon
        .guard_command_as(ALICE, &["run", "--", "sh", "-c", &script])
        .env_remove("GUARD_NO_HOLD")
        .current_dir(work.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ask = daemon.pending_ask(&mut run);
    assert_eq!(ask["owner"], ALICE.to_string(), "{ask}");
    let out = daemon.guard_as(ALICE, &["approve", &ask["id"].to_string(), "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    assert_eq!(
        (code, stdout.trim()),
        (0, "rc=0"),
        "the held exec went on: {stderr}"
    );
    assert!(stderr.contains("holding exec of `touch"), "{stderr}");
    assert!(made.exists(), "touch ran");
}

#[test]
fn one_user_holds_at_most_64_connections_and_another_user_is_not_held_up() {
    if !can_run() {
        return;
    }
    const MALLORY: u32 = 64_346;
    const BOB: u32 = 64_347;
    let daemon = TestDaemon::start(&DaemonSetup::default());
    // Python opens 65 connections as the user and prints what the last one is answered.
    let script = format!(
        "import socket\n\
         held = []\n\
         for _ in range(65):\n\
         \x20   s = socket.socket(socket.AF_UNIX)\n\
         \x20   s.connect({:?})\n\
         \x20   held.append(s)\n\
         held[-1].settimeout(10)\n\
         print(held[-1].recv(4096).decode().strip())\n",
        daemon.socket.display().to_string()
    );
    let as_user = |id: u32, script: &str| {
        let mut command = std::process::Command::new("python3");
        command.arg("-c").arg(script).current_dir(daemon.dir.path());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(id) != 0
                    || libc::setuid(id) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command.output().expect("running python3")
    };
    let out = as_user(MALLORY, &script);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("\"ok\":false") && stdout.contains("64 connections to the daemon already"),
        "the 65th connection is refused, naming the limit: {stdout}{}",
        text(&out.stderr)
    );
    // Another user is served; so is she once the daemon has seen her connections close
    // (with her process: bounded wait).
    let out = daemon.guard_as(BOB, &["prompts", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = daemon.guard_as(MALLORY, &["prompts", "--json"]);
        if out.status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "her closed connections still count after 10 s: {}",
            text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
