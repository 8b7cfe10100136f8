//! The audit log against the real kernel and a real daemon: the records of an ask, its approval
//! and the amendment, each naming the rule's file and line; filters and live following with
//! per-client authorization; rotation; loss accounting; and a kill -9 under load that loses at
//! most the last second, counted attempt by attempt. Traffic goes to loopback addresses only.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use crate::common::{net_probe, run_probe};
use guard::audit::files::{log_files, read_records};
use guard::audit::{AuditRecord, RecordType};
use guard_tests::daemon::{DaemonSetup, NAMES_RESOLVED_BY_THE_DAEMON, TestDaemon, can_run, text};
use guard_tests::dns::TestDns;

/// `guard audit --json ARGS...` as root, parsed.
fn audit(daemon: &TestDaemon, args: &[&str]) -> Vec<AuditRecord> {
    let mut all = vec!["audit", "--json"];
    all.extend_from_slice(args);
    let out = daemon.guard(&all);
    assert!(out.status.success(), "guard audit: {}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| AuditRecord::parse(l).unwrap_or_else(|| panic!("not a record: {l}")))
        .collect()
}

/// Every record in the daemon's log files, read directly.
fn logged(daemon: &TestDaemon) -> Vec<AuditRecord> {
    let mut out = Vec::new();
    read_records(&log_files(&daemon.audit_log), |r| {
        out.push(r);
        true
    })
    .expect("reading the audit log");
    out
}

fn of_type(records: &[AuditRecord], kind: RecordType) -> Vec<&AuditRecord> {
    records.iter().filter(|r| r.kind == kind).collect()
}

/// Waits (bounded) until `done` holds for the records the files hold.
fn wait_for_log(
    daemon: &TestDaemon,
    what: &str,
    done: impl Fn(&[AuditRecord]) -> bool,
) -> Vec<AuditRecord> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let records = logged(daemon);
        if done(&records) {
            return records;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not in the log within 10 s: {records:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_ask_its_approval_and_the_amendment_are_recorded_naming_the_rules_file_and_line() {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    let address = Ipv4Addr::new(127, 78, 1, 1);
    dns.set_a("api.guard.test", &[address], 300);
    let _listener = TcpListener::bind((address, 443)).expect("listening on 127.78.1.1:443");
    // The rule is on line 3, so a wrong line number cannot pass by chance.
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "# The team's rules.\n\nnetwork_rule(host=\"api.guard.test\", protocol=\"https\", \
                decision=\"prompt\", justification=\"ask before talking to the API\")\n"
            .to_string(),
        nameserver: Some(dns.addr()),
        // The daemon resolves the rule's name itself: the probe connects by address.
        extra_config: NAMES_RESOLVED_BY_THE_DAEMON.to_string(),
        ..Default::default()
    });
    let (code, stdout, stderr) = run_probe(&daemon, &["tcp", "127.78.1.1", "443"]);
    assert_eq!((code, stdout.trim()), (1, "errno 1"), "{stderr}");
    let ask = daemon.json(&["prompts", "--json"])[0]["id"]
        .as_u64()
        .expect("an ask");
    let out = daemon.guard(&["approve", &ask.to_string(), "--always"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let records = audit(&daemon, &[]);
    let rules_file = daemon.rules_file.display().to_string();
    let at_rule = |r: &AuditRecord| {
        r.rule.as_ref().map(|rule| (rule.file.clone(), rule.line)) == Some((rules_file.clone(), 3))
    };

    // The kernel's decision: the process, the destination with the host name the address came
    // from, the rule with its text and justification, the message.
    let decisions = of_type(&records, RecordType::Decision);
    assert_eq!(decisions.len(), 1, "{records:#?}");
    let decision = decisions[0];
    assert!(at_rule(decision), "{decision:#?}");
    assert_eq!(decision.decision.as_deref(), Some("prompt"));
    assert_eq!(decision.event.as_deref(), Some("connect"));
    assert_eq!(decision.action.as_deref(), Some("eperm"));
    assert_eq!(decision.ask, Some(ask));
    let rule = decision.rule.as_ref().unwrap();
    assert!(
        rule.text
            .starts_with("network_rule(host=\"api.guard.test\""),
        "{rule:?}"
    );
    assert_eq!(
        rule.justification.as_deref(),
        Some("ask before talking to the API")
    );
    let destination = decision.destination.as_ref().expect("a destination");
    assert_eq!(destination.host.as_deref(), Some("api.guard.test"));
    assert_eq!(destination.address, "127.78.1.1");
    assert_eq!(
        (destination.port, destination.transport.as_str()),
        (443, "tcp")
    );
    assert_eq!(destination.protocol, "https");
    let process = decision.process.as_ref().expect("a process");
    assert!(process.exe.ends_with("net-probe"), "{process:?}");
    assert_eq!(process.argv[1..], ["tcp", "127.78.1.1", "443"]);
    assert_eq!(
        (process.uid, process.user.as_str(), process.gid),
        (0, "root", 0)
    );
    assert!(process.pid > 0 && process.ppid > 0, "{process:?}");
    assert!(
        process
            .cgroup
            .as_deref()
            .is_some_and(|c| c.contains(&daemon.run_cgroup)),
        "the run scope's cgroup: {process:?}"
    );
    assert!(
        decision
            .message
            .as_deref()
            .is_some_and(|m| m.contains("api.guard.test")),
        "{decision:?}"
    );

    // The ask, the approval and the amendment: the same rule; who approved and how; the line
    // written and where.
    let asks = of_type(&records, RecordType::Ask);
    assert_eq!(asks.len(), 1);
    assert!(
        at_rule(asks[0]) && asks[0].ask == Some(ask),
        "{:#?}",
        asks[0]
    );
    let approvals = of_type(&records, RecordType::Approval);
    assert_eq!(approvals.len(), 1, "{records:#?}");
    let approval = approvals[0];
    assert!(at_rule(approval), "{approval:#?}");
    let by = approval.approval.as_ref().expect("who approved");
    assert_eq!(
        (by.by.as_str(), by.uid, by.mode.as_str()),
        ("root", 0, "always")
    );
    let amendments_file = daemon.amendments().display().to_string();
    let expected_line = "network_rule(host=\"api.guard.test\", protocol=\"https\", \
                         decision=\"allow\", justification=\"Allow https_connect access to api.guard.test\")";
    let written = approval
        .amendment
        .as_ref()
        .expect("the approval names its amendment");
    assert_eq!(
        (written.file.as_str(), written.line, written.text.as_str()),
        (amendments_file.as_str(), 1, expected_line)
    );
    let amendments = of_type(&records, RecordType::Amendment);
    assert_eq!(amendments.len(), 1);
    let amendment = amendments[0].amendment.as_ref().unwrap();
    assert_eq!(
        (
            amendment.file.as_str(),
            amendment.line,
            amendment.text.as_str()
        ),
        (amendments_file.as_str(), 1, expected_line)
    );
    assert_eq!(amendments[0].owner, "root");
    assert!(
        of_type(&records, RecordType::Reload)
            .iter()
            .any(|r| r.details["ok"] == true),
        "the amendment's reload: {records:#?}"
    );

    // The schema's common fields: version, host name, RFC 3339 nanosecond times, and a
    // sequence without gaps.
    let host = guard::audit::record::host_name();
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record.v, 1);
        assert_eq!(record.host, host);
        assert!(
            humantime::parse_rfc3339(&record.time).is_ok(),
            "{}",
            record.time
        );
        assert_eq!(
            record.time.len(),
            "2026-12-02T00:00:00.000000000Z".len(),
            "{}",
            record.time
        );
        if i > 0 {
            assert_eq!(record.seq, records[i - 1].seq + 1, "no gap in seq");
        }
    }

    // The same records read from the file directly; and the human form names the rule.
    assert_eq!(
        records,
        audit(&daemon, &["--file", daemon.audit_log.to_str().unwrap()])
    );
    let out = daemon.guard(&["audit", "--type", "approval"]);
    let human = text(&out.stdout);
    assert_eq!(human.lines().count(), 1, "{human}");
    assert!(
        human.contains(&format!("{rules_file}:3")) && human.contains("always by root"),
        "{human}"
    );
}

#[test]
fn filters_narrow_what_guard_audit_prints() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.78.2.1\"], decision=\"forbidden\")\n\
                address_rule(addresses=[\"127.78.2.2\"], decision=\"prompt\")\n"
            .to_string(),
        ..Default::default()
    });
    for address in ["127.78.2.1", "127.78.2.2"] {
        let (code, _, _) = run_probe(&daemon, &["udp-connect", address, "5353"]);
        assert_eq!(code, 1);
    }
    wait_for_log(&daemon, "two decisions", |r| {
        of_type(r, RecordType::Decision).len() == 2
    });
    let decisions = audit(&daemon, &["--type", "decision"]);
    assert_eq!(decisions.len(), 2);
    let forbidden = audit(&daemon, &["--decision", "deny"]);
    assert_eq!(forbidden.len(), 1);
    assert_eq!(
        forbidden[0].destination.as_ref().unwrap().address,
        "127.78.2.1"
    );
    // A prompt is a decision and an ask.
    let prompts = audit(&daemon, &["--decision", "ask"]);
    assert_eq!(
        prompts.iter().map(|r| r.kind).collect::<Vec<_>>(),
        [RecordType::Ask, RecordType::Decision]
    );
    let pid = decisions[1].process.as_ref().unwrap().pid;
    let by_pid = audit(&daemon, &["--pid", &pid.to_string()]);
    assert!(
        !by_pid.is_empty()
            && by_pid
                .iter()
                .all(|r| r.process.as_ref().unwrap().pid == pid)
    );
    assert_eq!(
        audit(&daemon, &["--exe", "net-probe", "--type", "decision"]).len(),
        2
    );
    assert_eq!(audit(&daemon, &["--exe", "/usr/bin/net-probe"]).len(), 0);
    assert_eq!(
        audit(&daemon, &["--since", "2999-01-01T00:00:00Z"]).len(),
        0
    );
    assert_eq!(
        audit(&daemon, &["--since", "1h", "--type", "decision"]).len(),
        2
    );
    let newest = audit(&daemon, &["--limit", "1"]);
    assert_eq!(newest.len(), 1);
    assert_eq!(newest[0].seq, decisions[1].seq.max(newest[0].seq));
    let out = daemon.guard(&["audit", "--decision", "maybe"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("allow, prompt"),
        "{}",
        text(&out.stderr)
    );
}

/// Reads JSON lines from a `guard audit --follow` child until `want` records arrived (bounded).
fn follow_lines(child: &mut std::process::Child, want: usize) -> Vec<AuditRecord> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut out = Vec::new();
    while out.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => out.push(AuditRecord::parse(&line).expect("a record")),
            Err(_) => break,
        }
    }
    out
}

#[test]
fn follow_streams_new_records_live_and_each_client_sees_only_what_it_may() {
    if !can_run() {
        return;
    }
    const UID: u32 = 64322;
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.78.3.1\"], decision=\"forbidden\")\n".to_string(),
        // The user may connect (the socket's group); what it may read is the policy's to say.
        extra_config: format!("socket_group = \"{UID}\"\n"),
        ..Default::default()
    });
    // History first: one refusal before anyone follows.
    assert_eq!(run_probe(&daemon, &["udp-connect", "127.78.3.1", "7"]).0, 1);
    wait_for_log(&daemon, "the first refusal", |r| {
        !of_type(r, RecordType::Decision).is_empty()
    });
    let mut root = daemon
        .guard_command(&["audit", "--follow", "--json", "--type", "decision"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut user = daemon
        .guard_command_as(UID, &["audit", "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Give both followers time to be registered before the live records come.
    std::thread::sleep(Duration::from_millis(500));
    for port in ["8", "9"] {
        assert_eq!(
            run_probe(&daemon, &["udp-connect", "127.78.3.1", port]).0,
            1
        );
    }
    // The user's own refused request: the only record the user may read.
    let refused = daemon.guard_as(UID, &["status"]);
    assert_eq!(refused.status.code(), Some(3));

    let seen = follow_lines(&mut root, 3);
    let ports: Vec<u16> = seen
        .iter()
        .map(|r| r.destination.as_ref().unwrap().port)
        .collect();
    assert_eq!(
        ports,
        [7, 8, 9],
        "history, then the live records in order: {seen:#?}"
    );
    let theirs = follow_lines(&mut user, 1);
    assert_eq!(theirs.len(), 1, "{theirs:#?}");
    assert_eq!(theirs[0].kind, RecordType::ControlRefused);
    assert_eq!(theirs[0].owner, UID.to_string());
    for mut child in [root, user] {
        let _ = child.kill();
        let _ = child.wait();
    }
    // Followers that went away are dropped.
    let deadline = Instant::now() + Duration::from_secs(5);
    while daemon.json(&["status", "--json"])["audit"]["followers"] != 0 {
        assert!(Instant::now() < deadline, "followers were not dropped");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_log_rotates_at_its_size_keeps_a_bounded_number_of_files_and_reads_across_them() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.78.0.0/16\"], decision=\"forbidden\")\n".to_string(),
        extra_config: "[audit]\nmax_file_mb = 1\nkeep_files = 2\n".to_string(),
        ..Default::default()
    });
    // About 1 KiB a record: 6000 refusals are more than the three files can hold. Paced at a
    // rate the daemon keeps up with, so none is lost (a flood would lose the scope's records
    // past its share of a ring buffer the daemon let fill: see `a_flood_past_the_scopes_share`).
    let progress_dir = daemon.dir.path().join("probe");
    std::fs::create_dir(&progress_dir).unwrap();
    let progress = progress_dir.join("progress");
    let (code, stdout, _) = run_probe(
        &daemon,
        &["paced", "127.78", "2000", "3", progress.to_str().unwrap()],
    );
    assert_eq!((code, stdout.trim()), (0, "sent 6000 refused 6000"));
    wait_for_log(&daemon, "rotations", |_| {
        daemon.json(&["status", "--json"])["audit"]["rotations"].as_u64() >= Some(3)
    });
    let files = log_files(&daemon.audit_log);
    assert_eq!(files.len(), 3, "the current file and 2 rotated: {files:?}");
    assert!(!Path::new(&format!("{}.3", daemon.audit_log.display())).exists());
    for file in &files {
        let size = std::fs::metadata(file).unwrap().len();
        assert!(size <= 1024 * 1024, "{} is {size} bytes", file.display());
    }
    // What is kept is whole across the files (a `rotated_out` record is numbered when it is
    // written, a little after records numbered before it and still queued).
    let records = logged(&daemon);
    let mut seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    for pair in seqs.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "no gap across files");
    }
    // Each file that went was first said to go, with whose records it held.
    let gone = of_type(&records, RecordType::RotatedOut);
    assert!(
        !gone.is_empty(),
        "a rotated_out record for each deleted file"
    );
    for record in gone {
        let held = record.details["records"].as_u64().unwrap();
        let by_scope: u64 = record.details["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["records"].as_u64().unwrap())
            .sum();
        assert!(held > 0 && by_scope == held, "{record:?}");
    }
    let through_daemon = audit(&daemon, &["--type", "decision"]);
    assert_eq!(
        through_daemon.len(),
        of_type(&records, RecordType::Decision).len(),
        "the daemon reads the rotated files too"
    );
}

#[test]
fn one_scopes_flood_is_folded_past_its_share_and_the_other_scopes_records_stay() {
    if !can_run() {
        return;
    }
    // A share of 100 records a second per scope, and small files: 20 000 refusals written
    // whole would rotate every file several times over.
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.78.0.0/16\"], decision=\"forbidden\")\n".to_string(),
        extra_config: "[audit]\nmax_file_mb = 1\nkeep_files = 1\nscope_records = 100\n\
                       scope_window_secs = 1\n"
            .to_string(),
        ..Default::default()
    });
    // Scope B: five refusals.
    let script = format!(
        "for i in 1 2 3 4 5; do {} udp-connect 127.78.9.$i 9; done; exit 0",
        net_probe().display()
    );
    let (code, stdout, _) = daemon.run_in_scope(Path::new("/bin/sh"), &["-c", &script]);
    assert_eq!(
        (code, stdout.matches("errno 1").count()),
        (0, 5),
        "{stdout}"
    );
    // Scope A: a flood.
    const SENT: u64 = 20_000;
    let (code, stdout, _) = run_probe(
        &daemon,
        &["udp-flood", "127.78.5.1", "9", &SENT.to_string()],
    );
    assert_eq!(
        (code, stdout.trim()),
        (0, format!("refused {SENT}").as_str())
    );
    let of_a = |r: &AuditRecord| {
        r.destination
            .as_ref()
            .is_some_and(|d| d.address == "127.78.5.1")
    };
    // Every refusal of A is written, folded or counted lost in the kernel (its share of the
    // ring buffer): wait for the last window's folded records.
    let records = wait_for_log(&daemon, "A's refusals written or folded", |records| {
        let lost = daemon.json(&["status", "--json"])["events_lost"]
            .as_u64()
            .unwrap();
        let written = records.iter().filter(|r| of_a(r)).count() as u64;
        let folded: u64 = of_type(records, RecordType::Folded)
            .iter()
            .filter(|r| r.details["folded_decision"] == "forbidden")
            .map(|r| r.details["folded"].as_u64().unwrap())
            .sum();
        written + folded + lost == SENT
    });
    let a_id = records
        .iter()
        .find(|r| of_a(r))
        .and_then(|r| r.process.as_ref())
        .map(|p| p.cgroup_id)
        .expect("A's first refusals are written");
    let written_a = records.iter().filter(|r| of_a(r)).count();
    let folded = of_type(&records, RecordType::Folded);
    assert!(
        !folded.is_empty() && folded.iter().all(|r| r.details["cgroup_id"] == a_id),
        "only A's records are folded: {folded:?}"
    );
    assert!(
        written_a < 2_000,
        "A wrote its share, not its flood: {written_a}"
    );
    let b: Vec<&AuditRecord> = records
        .iter()
        .filter(|r| {
            r.destination
                .as_ref()
                .is_some_and(|d| d.address.starts_with("127.78.9."))
        })
        .collect();
    assert_eq!(b.len(), 5, "B's records are all in the log");
    assert_eq!(
        daemon.json(&["status", "--json"])["audit"]["rotations"].as_u64(),
        Some(0),
        "A's flood rotated nothing out"
    );
}

#[test]
fn a_writer_that_falls_behind_is_counted_in_loss_records_and_status() {
    if !can_run() {
        return;
    }
    // A queue of one record: a flood must overflow it.
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.78.5.1\"], decision=\"forbidden\")\n".to_string(),
        // No share per scope: every record of the flood goes to the writer's queue.
        extra_config: "[audit]\nqueue_records = 1\nscope_records = 0\n".to_string(),
        ..Default::default()
    });
    const SENT: u64 = 20_000;
    let (code, stdout, _) = run_probe(
        &daemon,
        &["udp-flood", "127.78.5.1", "9", &SENT.to_string()],
    );
    assert_eq!(
        (code, stdout.trim()),
        (0, format!("refused {SENT}").as_str())
    );
    // Quiet now: the counts settle and a loss record reports them.
    let status_lost = || {
        let status = daemon.json(&["status", "--json"]);
        (
            status["events_lost"].as_u64().unwrap(),
            status["audit"]["writer_lost"].as_u64().unwrap(),
        )
    };
    let records = wait_for_log(&daemon, "a loss record with the final counts", |records| {
        let (ring, writer) = status_lost();
        of_type(records, RecordType::Loss).last().is_some_and(|r| {
            let loss = r.loss.as_ref().unwrap();
            (loss.ring_buffer_total, loss.writer_total) == (ring, writer)
        })
    });
    let (ring, writer) = status_lost();
    assert!(writer > 0, "a one-record queue must overflow under a flood");
    let losses = of_type(&records, RecordType::Loss);
    let summed: u64 = losses.iter().map(|r| r.loss.as_ref().unwrap().writer).sum();
    assert_eq!(summed, writer, "the loss records add up to the total");
    let written = of_type(&records, RecordType::Decision)
        .iter()
        .filter(|r| {
            r.destination
                .as_ref()
                .is_some_and(|d| d.address == "127.78.5.1")
        })
        .count() as u64;
    assert!(
        written + ring <= SENT && SENT <= written + ring + writer,
        "every refusal is written or counted lost: {written} written, {ring} ring buffer, {writer} writer, of {SENT}"
    );
    // People read the same counts in `guard status`.
    let shown = text(&daemon.guard(&["status"]).stdout);
    assert!(
        shown.contains(&format!("lost: {writer} (writer behind)")),
        "{shown}"
    );
    // The gaps in the sequence are the records the writer lost.
    let first = records.first().unwrap().seq;
    let last = records.last().unwrap().seq;
    let gaps = (last - first + 1) - records.len() as u64;
    assert!(gaps <= writer, "{gaps} gaps, {writer} lost");
}

#[test]
fn a_kill_9_under_load_loses_at_most_the_last_second_of_records() {
    if !can_run() {
        return;
    }
    let mut daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.88.0.0/16\"], decision=\"forbidden\")\n".to_string(),
        ..Default::default()
    });
    // A steady load the test's (debug) build of the daemon keeps up with while other tests of
    // this binary load guard's programs beside it (2 cores); `cargo xtask bench`
    // measures what the release build takes.
    const RATE: u64 = 2_000;
    const SECS: u64 = 6;
    let (load, progress) = daemon.paced_load(&net_probe(), "127.88", RATE, SECS);
    std::thread::sleep(Duration::from_secs(3));
    let killed_at = SystemTime::now();
    daemon.stop_with(libc::SIGKILL);
    let out = load.wait_with_output().unwrap();
    let summary = text(&out.stdout);
    let total = RATE * SECS;
    assert_eq!(
        summary.trim(),
        format!("sent {total} refused {total}"),
        "refused throughout"
    );

    // Attempts made more than a second before the kill: every one must be in the log.
    let cutoff = killed_at - Duration::from_secs(1);
    let cutoff_ns = cutoff
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let before_cutoff = std::fs::read_to_string(&progress)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (count, at) = l.split_once(' ')?;
            Some((count.parse::<u64>().ok()?, at.parse::<u128>().ok()?))
        })
        .take_while(|(_, at)| *at < cutoff_ns)
        .last()
        .map(|(count, _)| count)
        .expect("progress before the cutoff");
    assert!(
        before_cutoff >= RATE,
        "at least a second of load before the cutoff"
    );
    let attempt = |record: &AuditRecord| -> Option<u64> {
        let d = record.destination.as_ref()?;
        let ip: Ipv4Addr = d.address.parse().ok()?;
        let [a, b, c, e] = ip.octets();
        ((a, b) == (127, 88)).then(|| (d.port as u64 - 1) * 65536 + c as u64 * 256 + e as u64)
    };
    let recorded: HashSet<u64> = logged(&daemon).iter().filter_map(attempt).collect();
    let missing: Vec<u64> = (0..before_cutoff)
        .filter(|i| !recorded.contains(i))
        .collect();
    let after = recorded.iter().filter(|i| **i >= before_cutoff).count();
    eprintln!(
        "kill -9 at {RATE}/s: {} of the {before_cutoff} attempts older than 1 s are in the log; \
         {after} later ones made it too",
        before_cutoff - missing.len() as u64
    );
    assert!(
        missing.is_empty(),
        "{} attempts older than a second before the kill are not in the log (first: {:?})",
        missing.len(),
        missing.first()
    );
}

#[test]
fn allowed_decisions_are_recorded_when_the_config_asks_for_them() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.78.6.1\"], decision=\"allow\")\n".to_string(),
        extra_config: "[audit]\nrecord_allowed = true\n".to_string(),
        ..Default::default()
    });
    let (code, stdout, _) = run_probe(&daemon, &["udp-connect", "127.78.6.1", "9"]);
    assert_eq!((code, stdout.trim()), (0, "ok"));
    let records = wait_for_log(&daemon, "the allowed connect", |r| {
        r.iter().any(|r| {
            r.decision.as_deref() == Some("allow")
                && r.destination
                    .as_ref()
                    .is_some_and(|d| d.address == "127.78.6.1")
        })
    });
    let allowed: Vec<&AuditRecord> = records
        .iter()
        .filter(|r| {
            r.destination
                .as_ref()
                .is_some_and(|d| d.address == "127.78.6.1")
        })
        .collect();
    assert_eq!(allowed[0].action.as_deref(), Some("none"));
    assert_eq!(allowed[0].rule.as_ref().unwrap().line, 1);
    // And the execs: the probe itself ran, allowed by the unmatched default.
    assert!(
        records.iter().any(|r| r.event.as_deref() == Some("exec")
            && r.decision.as_deref() == Some("allow")
            && r.process
                .as_ref()
                .is_some_and(|p| p.exe.ends_with("net-probe"))),
        "{records:#?}"
    );
}

#[test]
fn guard_replay_tries_a_draft_policy_on_what_the_daemon_recorded() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.78.7.1\"], decision=\"allow\")\n\
                address_rule(addresses=[\"127.78.7.2\"], decision=\"forbidden\")\n"
            .to_string(),
        extra_config: "[audit]\nrecord_allowed = true\n".to_string(),
        ..Default::default()
    });
    assert_eq!(run_probe(&daemon, &["udp-connect", "127.78.7.1", "9"]).0, 0);
    assert_eq!(run_probe(&daemon, &["udp-connect", "127.78.7.2", "9"]).0, 1);
    wait_for_log(&daemon, "both connects", |r| {
        ["127.78.7.1", "127.78.7.2"].iter().all(|a| {
            r.iter()
                .any(|r| r.destination.as_ref().is_some_and(|d| d.address == *a))
        })
    });
    // The draft turns both around; line 2 and 3 decide.
    let draft = daemon.dir.path().join("draft.rules");
    std::fs::write(
        &draft,
        "# draft\naddress_rule(addresses=[\"127.78.7.1\"], decision=\"forbidden\")\n\
         address_rule(addresses=[\"127.78.7.2\"], decision=\"allow\")\n",
    )
    .unwrap();
    let out = daemon.guard(&[
        "replay",
        "--rules",
        draft.to_str().unwrap(),
        "--json",
        "--exit-code",
        daemon.audit_log.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "something changes: {}",
        text(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let draft_at = |list: &str| -> Vec<(String, u64)> {
        report[list]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["text"].as_str().is_some_and(|t| t.contains("127.78.7.")))
            .map(|r| {
                (
                    r["text"].as_str().unwrap().to_string(),
                    r["draft"]["rule"]["line"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let refused = draft_at("newly_refused");
    let allowed = draft_at("newly_allowed");
    assert_eq!(refused.len(), 1, "{report}");
    assert!(
        refused[0].0.contains("127.78.7.1") && refused[0].1 == 2,
        "{refused:?}"
    );
    assert_eq!(allowed.len(), 1, "{report}");
    assert!(
        allowed[0].0.contains("127.78.7.2") && allowed[0].1 == 3,
        "{allowed:?}"
    );
}
