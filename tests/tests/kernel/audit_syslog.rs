//! `guard::audit::syslog` against a real receiver: records sent through `SyslogSender` over UDP
//! and TCP to a private rsyslogd on loopback (`guard_tests::rsyslog`), checked against what
//! rsyslog's RFC 5424 parser made of them.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use guard::audit::record::{
    ApprovalInfo, DestinationInfo, LossInfo, ProcessInfo, RuleRef, SCHEMA_VERSION,
};
use guard::audit::syslog::{Facility, SyslogSender, SyslogTarget, rfc5424};
use guard::audit::{AuditRecord, RecordType};
use guard_tests::rsyslog::{Received, Rsyslog, send_tcp_raw};
use serde_json::Value;

/// The bound on waiting for rsyslogd to write what it received.
const WAIT: Duration = Duration::from_secs(20);

/// A rules file whose name needs every PARAM-VALUE escape but `\` (`"` and `]`), and has `[`.
const ODD_RULES_FILE: &str = "/etc/guard/rules/team \"ops\" [prod].rules";

fn base(seq: u64, kind: RecordType) -> AuditRecord {
    AuditRecord {
        v: SCHEMA_VERSION,
        seq,
        time: format!("2026-12-02T10:11:{:02}.123456789Z", seq % 60),
        host: "box-1.example".into(),
        kind,
        owner: "alice".into(),
        ..Default::default()
    }
}

fn process(exe: &str) -> ProcessInfo {
    ProcessInfo {
        pid: 4242,
        tid: 4243,
        ppid: 1,
        uid: 1000,
        user: "alice".into(),
        gid: 1000,
        cgroup: Some("/guard-daemon/run-1".into()),
        cgroup_id: 77,
        exe: exe.into(),
        argv: vec!["curl".into(), "-d".into(), "{\"a\": \"b\\c\"}".into()],
        argv_truncated: false,
        exe_anonymous: false,
        comm: "curl".into(),
    }
}

/// Records of several types, with `seq` 1.., each with what rsyslog must report as its PRI
/// (facility `auth`, 4).
fn records() -> Vec<(AuditRecord, &'static str)> {
    let mut refusal = base(1, RecordType::Decision);
    refusal.decision = Some("forbidden".into());
    refusal.event = Some("connect".into());
    refusal.action = Some("eperm".into());
    refusal.rule = Some(RuleRef {
        file: ODD_RULES_FILE.into(),
        line: 12,
        text: "forbid(host = \"example.com\")".into(),
        justification: Some("no uploads".into()),
    });
    refusal.process = Some(process("/usr/bin/curl"));
    refusal.destination = Some(DestinationInfo {
        host: Some("example.com".into()),
        hosts: Vec::new(),
        address: "192.0.2.7".into(),
        port: 443,
        transport: "tcp".into(),
        protocol: "https".into(),
    });
    refusal.message = Some("guard: connect to example.com:443 refused".into());

    let mut ask = base(2, RecordType::Ask);
    ask.decision = Some("prompt".into());
    ask.event = Some("exec".into());
    ask.ask = Some(9);
    ask.rule = Some(RuleRef {
        file: "/etc/guard/rules/default.rules".into(),
        line: 3,
        text: "prompt(cmd = \"git push\")".into(),
        justification: None,
    });
    ask.process = Some(process("/usr/bin/git"));

    let mut approval = base(3, RecordType::Approval);
    approval.decision = Some("prompt".into());
    approval.ask = Some(9);
    approval.approval = Some(ApprovalInfo {
        by: "carol".into(),
        uid: 1001,
        mode: "session".into(),
    });

    let mut loss = base(4, RecordType::Loss);
    loss.loss = Some(LossInfo {
        ring_buffer: 3,
        ring_buffer_total: 3,
        ..Default::default()
    });

    let mut refused = base(5, RecordType::ControlRefused);
    refused
        .details
        .insert("request".into(), Value::from("reload"));

    let mut reload = base(6, RecordType::Reload);
    reload.details.insert("ok".into(), Value::Bool(true));

    vec![
        // auth (4) * 8 + severity.
        (refusal, "36"),  // warning
        (ask, "37"),      // notice
        (approval, "38"), // info
        (loss, "35"),     // err
        (refused, "36"),  // warning
        (reload, "38"),   // info
    ]
}

fn sender(target: SyslogTarget) -> SyslogSender {
    SyslogSender::connect(&target, Facility::Auth).expect("connect to the private rsyslogd")
}

fn udp(rsyslog: &Rsyslog) -> SyslogTarget {
    SyslogTarget::Udp(SocketAddr::from((Ipv4Addr::LOCALHOST, rsyslog.udp_port())))
}

fn tcp(rsyslog: &Rsyslog) -> SyslogTarget {
    SyslogTarget::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, rsyslog.tcp_port())))
}

/// The record in a received MSG: rsyslog keeps the BOM, and the JSON after it parses back.
fn record_in(received: &Received) -> AuditRecord {
    let json = received
        .msg
        .strip_prefix('\u{feff}')
        .unwrap_or_else(|| panic!("MSG starts with the BOM: {:?}", received.msg));
    AuditRecord::parse(json).unwrap_or_else(|| panic!("MSG is not a record: {json:?}"))
}

/// The `guard@32473` parameters as rsyslog's `mmpstrucdata` parsed them (values unescaped).
fn guard_params(received: &Received) -> &serde_json::Map<String, Value> {
    received.sd_params["guard@32473"]
        .as_object()
        .unwrap_or_else(|| panic!("no guard@32473 element: {:?}", received.sd_params))
}

/// Checks every record arrived once, parsed as RFC 5424 with the fields it should have.
fn check_parsed(sent: &[(AuditRecord, &str)], received: &[Received], input: &str) {
    assert_eq!(
        received.len(),
        sent.len(),
        "one message per record: {received:#?}"
    );
    for got in received {
        let record = record_in(got);
        let (expected, pri) = sent
            .iter()
            .find(|(r, _)| r.seq == record.seq)
            .unwrap_or_else(|| panic!("a record that was not sent: {record:?}"));
        assert_eq!(&record, expected, "the JSON in MSG is the whole record");
        let what = format!("seq {}", record.seq);
        assert_eq!(got.version, "1", "{what}: parsed as RFC 5424");
        assert_eq!(got.pri, *pri, "{what}");
        assert_eq!(
            got.timestamp,
            format!("2026-12-02T10:11:{:02}.123456Z", record.seq % 60),
            "{what}: microseconds"
        );
        assert_eq!(got.hostname, "box-1.example", "{what}");
        assert_eq!(got.app_name, "guard", "{what}");
        assert_eq!(got.procid, std::process::id().to_string(), "{what}");
        assert_eq!(got.msgid, expected.kind.as_str(), "{what}");
        assert_eq!(got.input, input, "{what}");
        let params = guard_params(got);
        assert_eq!(params["v"], "1", "{what}");
        assert_eq!(params["seq"], record.seq.to_string(), "{what}");
        assert_eq!(params["owner"], "alice", "{what}");
        if let Some(rule) = &expected.rule {
            assert_eq!(
                params["rule"],
                rule.location(),
                "{what}: unescaped by rsyslog"
            );
        }
        assert_eq!(
            params.get("decision").and_then(Value::as_str),
            expected.decision.as_deref(),
            "{what}"
        );
    }
    let refusal = received
        .iter()
        .find(|got| got.msgid == "decision")
        .expect("the refusal");
    // As sent: `"` and `]` escaped, `[` not.
    assert!(
        refusal
            .structured_data
            .contains(r#"rule="/etc/guard/rules/team \"ops\" [prod\].rules:12""#),
        "{}",
        refusal.structured_data
    );
    let params = guard_params(refusal);
    assert_eq!(params["rule"], format!("{ODD_RULES_FILE}:12"));
    assert_eq!(params["event"], "connect");
    assert_eq!(params["action"], "eperm");
    assert_eq!(params["pid"], "4242");
    assert_eq!(params["uid"], "1000");
    assert_eq!(params["exe"], "/usr/bin/curl");
    assert_eq!(params["dest"], "example.com:443/tcp");
    let approval = received
        .iter()
        .find(|got| got.msgid == "approval")
        .expect("the approval");
    let params = guard_params(approval);
    assert_eq!(params["ask"], "9");
    assert_eq!(params["by"], "carol");
    assert_eq!(params["mode"], "session");
    assert!(params.get("rule").is_none(), "only the fields a record has");
}

#[test]
fn records_over_udp_are_parsed_as_rfc5424() {
    let Some(rsyslog) = Rsyslog::start_or_skip() else {
        return;
    };
    let sent = records();
    let mut sender = sender(udp(&rsyslog));
    for (record, _) in &sent {
        sender.send(record).expect("send over UDP");
    }
    assert_eq!((sender.sent(), sender.failed()), (sent.len() as u64, 0));
    let received = rsyslog.wait_for(sent.len(), WAIT);
    check_parsed(&sent, &received, "udp");
}

#[test]
fn records_over_tcp_are_parsed_as_rfc5424() {
    let Some(rsyslog) = Rsyslog::start_or_skip() else {
        return;
    };
    let sent = records();
    let mut sender = sender(tcp(&rsyslog));
    for (record, _) in &sent {
        sender.send(record).expect("send over TCP");
    }
    assert_eq!((sender.sent(), sender.failed()), (sent.len() as u64, 0));
    let received = rsyslog.wait_for(sent.len(), WAIT);
    check_parsed(&sent, &received, "tcp");
}

#[test]
fn a_newline_inside_a_field_stays_inside_its_tcp_message() {
    let Some(rsyslog) = Rsyslog::start_or_skip() else {
        return;
    };
    let mut odd = base(1, RecordType::Decision);
    odd.decision = Some("forbidden".into());
    odd.process = Some(process("/tmp/evil\nname"));
    let next = base(2, RecordType::Reload);
    let mut sender = sender(tcp(&rsyslog));
    sender.send(&odd).unwrap();
    sender.send(&next).unwrap();
    let received = rsyslog.wait_for(2, WAIT);
    // Give a wrongly split message time to show up as a third line.
    let lines = rsyslog.wait_for_lines(3, Duration::from_millis(500));
    assert_eq!(lines.len(), 2, "two records, two messages: {lines:#?}");
    assert_eq!(record_in(&received[0]), odd);
    assert_eq!(record_in(&received[1]), next);
    // rsyslog escapes the control character it received inside the value (#012).
    assert_eq!(guard_params(&received[0])["exe"], "/tmp/evil#012name");

    // The control: the same message framed by a line end instead of its octet count is split
    // where the newline is, so the count is what kept it whole above.
    let mut framed_by_lf = rfc5424(&odd, Facility::Auth).into_bytes();
    framed_by_lf.push(b'\n');
    send_tcp_raw(rsyslog.tcp_port(), &framed_by_lf).unwrap();
    let lines = rsyslog.wait_for_lines(4, WAIT);
    assert_eq!(lines.len(), 4, "split in two: {lines:#?}");
}

#[test]
fn two_hundred_records_over_tcp_all_arrive() {
    let Some(rsyslog) = Rsyslog::start_or_skip() else {
        return;
    };
    let mut sender = sender(tcp(&rsyslog));
    for seq in 1..=200 {
        let mut record = base(seq, RecordType::Decision);
        record.decision = Some("allow".into());
        record.process = Some(process("/usr/bin/true"));
        sender.send(&record).expect("send over TCP");
    }
    assert_eq!((sender.sent(), sender.failed()), (200, 0));
    let received = rsyslog.wait_for(200, WAIT);
    let seqs: BTreeSet<u64> = received.iter().map(|got| record_in(got).seq).collect();
    assert_eq!(received.len(), 200, "each record once");
    assert_eq!(seqs, (1..=200).collect::<BTreeSet<u64>>());
    assert!(
        received
            .iter()
            .all(|got| got.version == "1" && got.pri == "38")
    );
}

/// `guard run -- net-probe udp-connect ADDR 9` under `daemon`: refused.
fn refused_connect(daemon: &guard_tests::daemon::TestDaemon, address: &str) {
    let probe = crate::common::net_probe();
    let out = daemon.guard(&[
        "run",
        "--",
        probe.to_str().unwrap(),
        "udp-connect",
        address,
        "9",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "errno 1");
}

#[test]
fn the_daemon_sends_every_record_to_a_syslog_receiver_over_tcp() {
    use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
    if !can_run() {
        return;
    }
    let Some(rsyslog) = Rsyslog::start_or_skip() else {
        return;
    };
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.78.9.1\"], decision=\"forbidden\")\n".to_string(),
        extra_config: format!(
            "[audit]\nsyslog = \"tcp://127.0.0.1:{}\"\nsyslog_facility = \"local3\"\n",
            rsyslog.tcp_port()
        ),
        ..Default::default()
    });
    refused_connect(&daemon, "127.78.9.1");
    // daemon_start, run, decision: what the log file holds, rsyslog holds.
    let received = rsyslog.wait_for(3, WAIT);
    let decision = received
        .iter()
        .find(|r| r.msgid == "decision")
        .unwrap_or_else(|| panic!("no decision message: {received:#?}"));
    // local3 (19) * 8 + warning (4): a forbidden decision.
    assert_eq!(decision.pri, (19 * 8 + 4).to_string());
    assert_eq!(decision.app_name, "guard");
    let params = guard_params(decision);
    assert_eq!(params["rule"], format!("{}:1", daemon.rules_file.display()));
    assert_eq!(params["decision"], "forbidden");
    let sent = record_in(decision);
    let logged = daemon.json(&["status", "--json"]);
    assert!(
        logged["audit"]["syslog"]["sent"].as_u64() >= Some(3),
        "{logged}"
    );
    let out = daemon.guard(&["audit", "--json", "--type", "decision"]);
    let in_file = AuditRecord::parse(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(
        sent, in_file,
        "the message carries the record exactly as logged"
    );
}

#[test]
fn guard_audit_forwards_a_log_file_over_udp_and_prints_rfc5424() {
    use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
    if !can_run() {
        return;
    }
    let Some(rsyslog) = Rsyslog::start_or_skip() else {
        return;
    };
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.78.9.2\"], decision=\"forbidden\")\n".to_string(),
        ..Default::default()
    });
    for _ in 0..3 {
        refused_connect(&daemon, "127.78.9.2");
    }
    let log = daemon.audit_log.to_str().unwrap().to_string();
    let url = format!("udp://127.0.0.1:{}", rsyslog.udp_port());
    // Bounded: the daemon writes within its flush interval.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let out = daemon.guard(&["audit", "--file", &log, "--type", "decision", "--json"]);
        if String::from_utf8_lossy(&out.stdout).lines().count() == 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "three decisions not logged"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = daemon.guard(&[
        "audit", "--file", &log, "--type", "decision", "--syslog", &url,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sent 3 record(s)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let received = rsyslog.wait_for(3, WAIT);
    assert_eq!(received.len(), 3);
    assert!(
        received
            .iter()
            .all(|r| r.msgid == "decision" && r.input == "udp"),
        "{received:#?}"
    );
    // The printed form is the same message, one per line.
    let out = daemon.guard(&[
        "audit", "--file", &log, "--type", "decision", "--format", "rfc5424",
    ]);
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(printed.lines().count(), 3, "{printed}");
    // authpriv (10) * 8 + warning (4).
    assert!(
        printed.lines().all(|l| l.starts_with("<84>1 ")),
        "{printed}"
    );
}
