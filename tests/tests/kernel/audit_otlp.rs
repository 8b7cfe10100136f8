//! `[export.otlp]` against a receiver built from the official OTLP protobuf definitions
//! (`guard_tests::otlp`, PyPI's opentelemetry-proto): every record of real decisions arrives
//! as an OTLP log record whose OCSF body matches the JSONL record of the same decision, line
//! for line; a receiver that is down loses nothing from the JSONL, and what it missed is
//! counted in `guard status` and a `loss` record.

use std::time::{Duration, Instant};

use crate::common::{net_probe, run_probe};
use guard_tests::daemon::{DaemonSetup, RetryingRun, TestDaemon, can_run, text};
use guard_tests::kernel::touch_program;
use guard_tests::otlp::OtlpReceiver;
use serde_json::Value;

const RULES: &str = "\
prefix_rule(pattern=[\"touch\"], decision=\"forbidden\", justification=\"no touching\")
address_rule(addresses=[\"127.77.20.1\"], decision=\"forbidden\")
address_rule(addresses=[\"127.77.20.2\"], decision=\"prompt\")
";

/// The audit log's lines as written, each with its record.
fn log_lines(daemon: &TestDaemon) -> Vec<(String, Value)> {
    std::fs::read_to_string(&daemon.audit_log)
        .unwrap_or_default()
        .lines()
        .map(|line| (line.to_string(), serde_json::from_str(line).expect("JSON")))
        .collect()
}

fn otlp_status(daemon: &TestDaemon) -> Value {
    daemon.json(&["status", "--json"])["audit"]["otlp"].clone()
}

#[test]
fn every_record_reaches_the_receiver_as_an_ocsf_event_and_a_receiver_down_is_counted() {
    if !can_run() {
        return;
    }
    let Some(receiver) = OtlpReceiver::start_or_skip() else {
        return;
    };
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: RULES.to_string(),
        extra_config: format!(
            "[export.otlp]\nendpoint = \"{}\"\nattempts = 2\ntimeout_secs = 1\n",
            receiver.endpoint()
        ),
        ..Default::default()
    });

    // A refused exec, a refused connect, an ask and its approval.
    let (code, _, stderr) = daemon.run_in_scope(&touch_program(), &["/tmp/guard-otlp-touch"]);
    assert_ne!(code, 0, "touch is forbidden: {stderr}");
    let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.20.1", "9"]);
    assert_eq!(code, 1, "the connect is refused");
    let mut run = RetryingRun::start(&daemon, &net_probe(), &["udp-connect", "127.77.20.2", "9"]);
    assert_eq!(run.attempt().0, 1, "held for an answer, refused");
    let id = daemon.prompts()[0]["id"].as_u64().unwrap();
    let out = daemon.guard(&["approve", &id.to_string(), "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(run.attempt().0, 0, "approved once");

    // Every line of the log arrives, and its OCSF event carries the line itself.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (lines, received) = loop {
        let lines = log_lines(&daemon);
        let received = receiver.received();
        let has_all = lines.iter().all(|(_, record)| {
            received
                .iter()
                .any(|r| r["attributes"]["guard.seq"] == record["seq"])
        });
        let has_approval = lines.iter().any(|(_, r)| r["type"] == "approval");
        if (has_all && has_approval) || Instant::now() >= deadline {
            break (lines, received);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let event_of = |record: &Value| -> &Value {
        received
            .iter()
            .find(|r| r["attributes"]["guard.seq"] == record["seq"])
            .unwrap_or_else(|| panic!("no log record for {record}: {received:#?}"))
    };
    for (line, record) in &lines {
        let got = event_of(record);
        let body = &got["body"];
        assert_eq!(
            body["raw_data"],
            line.as_str(),
            "the JSONL line, byte for byte"
        );
        assert_eq!(body["metadata"]["uid"], record["seq"].to_string());
        assert_eq!(got["resource"]["service.name"], "guard");
        assert_eq!(got["resource"]["host.name"], record["host"]);
        assert_eq!(got["attributes"]["guard.type"], record["type"]);
        assert_eq!(
            got["event_name"],
            format!("guard.{}", record["type"].as_str().unwrap())
        );
        assert_eq!(
            got["time_unix_nano"].as_u64().unwrap() / 1_000_000,
            body["time"].as_u64().unwrap(),
            "{got}"
        );
        if let Some(rule) = record.get("rule") {
            assert_eq!(got["attributes"]["guard.rule.file"], rule["file"]);
            assert_eq!(got["attributes"]["guard.rule.line"], rule["line"]);
        }
        if let Some(ask) = record.get("ask") {
            assert_eq!(got["attributes"]["guard.ask.id"], *ask);
        }
    }
    let find = |what: &dyn Fn(&Value) -> bool| -> &Value {
        &lines
            .iter()
            .find(|(_, r)| what(r))
            .unwrap_or_else(|| panic!("no such record in {lines:#?}"))
            .1
    };
    let exec = find(&|r| r["type"] == "decision" && r["event"] == "exec");
    let body = &event_of(exec)["body"];
    assert_eq!(
        (body["class_uid"].clone(), body["type_uid"].clone()),
        (1007.into(), 100701.into())
    );
    assert_eq!(body["action"], "Denied");
    assert_eq!(body["process"]["file"]["path"], exec["process"]["exe"]);
    assert_eq!(body["process"]["pid"], exec["process"]["pid"]);
    assert_eq!(body["unmapped"]["rule"]["justification"], "no touching");

    let connect =
        find(&|r| r["type"] == "decision" && r["destination"]["address"] == "127.77.20.1");
    let body = &event_of(connect)["body"];
    assert_eq!(
        (body["class_uid"].clone(), body["activity_name"].clone()),
        (4001.into(), "Refuse".into())
    );
    assert_eq!(body["dst_endpoint"]["ip"], "127.77.20.1");
    assert_eq!(body["dst_endpoint"]["port"], 9);
    assert_eq!(body["actor"]["process"]["pid"], connect["process"]["pid"]);
    assert_eq!(body["connection_info"]["protocol_name"], "udp");

    let ask = find(&|r| r["type"] == "ask");
    let body = &event_of(ask)["body"];
    assert_eq!(body["class_uid"], 2004);
    assert_eq!(body["finding_info"]["uid"], format!("ask-{id}"));
    assert_eq!(body["status"], "New");
    let approval = find(&|r| r["type"] == "approval");
    let body = &event_of(approval)["body"];
    assert_eq!(body["finding_info"]["uid"], format!("ask-{id}"));
    assert_eq!(body["resolution"]["mode"], "once");

    let status = otlp_status(&daemon);
    assert_eq!(status["failed"], 0, "{status}");
    assert_eq!(status["lost"], 0, "{status}");

    // The receiver goes away: the log keeps every record, the export counts what it missed.
    drop(receiver);
    let before = log_lines(&daemon).len();
    let mut refused = 0;
    for _ in 0..5 {
        let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.20.1", "9"]);
        assert_eq!(code, 1);
        refused += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, lines) = loop {
        let status = otlp_status(&daemon);
        let lines = log_lines(&daemon);
        let loss = lines
            .iter()
            .filter_map(|(_, r)| r["loss"]["export"].as_u64())
            .sum::<u64>();
        let missed = status["failed"].as_u64().unwrap() + status["lost"].as_u64().unwrap();
        if (missed >= refused && loss >= refused) || Instant::now() >= deadline {
            break (status, lines);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let after: Vec<_> = lines[before..]
        .iter()
        .filter(|(_, r)| r["type"] == "decision" && r["destination"]["address"] == "127.77.20.1")
        .collect();
    assert_eq!(after.len() as u64, refused, "the log has every refusal");
    let missed = status["failed"].as_u64().unwrap() + status["lost"].as_u64().unwrap();
    assert!(missed >= refused, "counted as missed: {status}");
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("/v1/logs")),
        "{status}"
    );
    let loss: u64 = lines
        .iter()
        .filter_map(|(_, r)| r["loss"]["export"].as_u64())
        .sum();
    assert!(loss >= refused, "a loss record says so: {lines:#?}");
    let layer = daemon.json(&["status", "--json"])["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == "export")
        .cloned()
        .unwrap();
    assert_eq!(layer["state"], "degraded", "{layer}");
}

#[test]
fn a_receiver_slower_than_the_timeout_costs_the_log_nothing_and_its_misses_are_counted() {
    if !can_run() {
        return;
    }
    // Every answer comes after 3 s; the daemon waits 1 s for one.
    let Some(receiver) = OtlpReceiver::start_with_or_skip(&["--delay", "3"]) else {
        return;
    };
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: RULES.to_string(),
        extra_config: format!(
            "[export.otlp]\nendpoint = \"{}\"\nattempts = 1\ntimeout_secs = 1\n",
            receiver.endpoint()
        ),
        ..Default::default()
    });
    let started = Instant::now();
    for _ in 0..3 {
        let (code, _, _) = run_probe(&daemon, &["udp-connect", "127.77.20.1", "9"]);
        assert_eq!(code, 1, "refused at once, whatever the receiver does");
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the refusals did not wait for the receiver: {:?}",
        started.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let status = otlp_status(&daemon);
        let missed = status["failed"].as_u64().unwrap() + status["lost"].as_u64().unwrap();
        if missed >= 3 || Instant::now() >= deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let missed = status["failed"].as_u64().unwrap() + status["lost"].as_u64().unwrap();
    assert!(missed >= 3, "the timed-out batches are counted: {status}");
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("/v1/logs")),
        "{status}"
    );
    let refusals = log_lines(&daemon)
        .iter()
        .filter(|(_, r)| r["type"] == "decision" && r["destination"]["address"] == "127.77.20.1")
        .count();
    assert_eq!(refusals, 3, "the log has every refusal");
}
