//! `guard replay` end to end: a week's audit log (as the daemon writes it, torn last line
//! included) replayed against draft policies, in both output forms, and its failures.

use crate::common::{Run, Sandbox};
use serde_json::{Value, json};

/// The policy the recording was made under, as the records name it.
const RECORDED_RULES: &str = "/etc/guard/rules/default.rules";

/// Decides every recorded request as it was decided: replaying it changes nothing.
const RECORDED_POLICY: &str = r#"prefix_rule(pattern=["git", "push"], decision="forbidden")
prefix_rule(pattern=["rm", "-rf"], decision="prompt", audit_only=True)
network_rule(host="evil.example.com", protocol="https", decision="deny")
enforcement(unmatched_exec="prompt")
"#;

/// Changes all but the evil.example.com refusal.
const DRAFT: &str = r#"prefix_rule(pattern=["git", "push"], decision="prompt", justification="pushes are reviewed")
prefix_rule(pattern=["make"], decision="allow")
prefix_rule(pattern=["rm", "-rf"], decision="forbidden")
network_rule(host="api.github.com", protocol="https", decision="deny")
network_rule(host="evil.example.com", protocol="https", decision="deny")
enforcement(unmatched_exec="prompt")
"#;

fn process(exe: &str, argv: &[&str]) -> Value {
    json!({
        "pid": 4242, "tid": 4242, "ppid": 4200, "uid": 1000, "user": "alice", "gid": 1000,
        "cgroup": "/guard-daemon/run-1", "cgroup_id": 77,
        "exe": exe, "argv": argv, "comm": argv[0],
    })
}

fn rule(line: usize, text: &str) -> Value {
    json!({"file": RECORDED_RULES, "line": line, "text": text})
}

/// A kernel decision record; `fields` adds the event's own sections.
fn decision(seq: u64, time: &str, decision: &str, fields: Value) -> Value {
    let mut record = json!({
        "v": 1, "seq": seq, "time": time, "host": "box", "type": "decision", "owner": "alice",
        "decision": decision,
    });
    record
        .as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    record
}

fn git_push_refused(seq: u64, time: &str) -> Value {
    decision(
        seq,
        time,
        "forbidden",
        json!({
            "event": "exec", "action": "eperm",
            "rule": rule(1, r#"prefix_rule(pattern=["git", "push"], decision="forbidden")"#),
            "process": process("/usr/bin/git", &["git", "push", "origin", "main"]),
        }),
    )
}

/// The older, rotated file: a daemon start and the first git push.
fn rotated_log() -> String {
    let start = json!({"v": 1, "seq": 1, "time": "2026-03-02T09:00:00.000000000Z", "host": "box",
        "type": "daemon_start", "owner": "root"});
    lines(&[start, git_push_refused(2, "2026-03-02T09:15:00.000000000Z")])
}

/// The current file, ending in a record the crash tore in half.
fn current_log() -> String {
    let records = [
        git_push_refused(3, "2026-03-03T10:00:00.000000000Z"),
        decision(
            4,
            "2026-03-03T11:00:00.000000000Z",
            "prompt",
            json!({"event": "exec", "action": "eperm", "unmatched": true,
                "process": process("/usr/bin/make", &["make", "deploy"])}),
        ),
        json!({"v": 1, "seq": 5, "time": "2026-03-03T11:00:00.100000000Z", "host": "box",
            "type": "ask", "owner": "alice", "decision": "prompt", "ask": 1}),
        decision(
            6,
            "2026-03-03T12:00:00.000000000Z",
            "allow",
            json!({"event": "connect", "action": "none", "unmatched": true,
                "process": process("/usr/bin/curl", &["curl", "https://api.github.com"]),
                "destination": {"host": "api.github.com", "address": "140.82.112.6", "port": 443,
                    "transport": "tcp", "protocol": "https"}}),
        ),
        decision(
            7,
            "2026-03-03T12:30:00.000000000Z",
            "forbidden",
            json!({"event": "connect", "action": "eperm",
                "rule": rule(3, r#"network_rule(host="evil.example.com", protocol="https", decision="deny")"#),
                "process": process("/usr/bin/curl", &["curl", "https://evil.example.com"]),
                "destination": {"host": "evil.example.com", "address": "198.51.100.66", "port": 443,
                    "transport": "tcp", "protocol": "https"}}),
        ),
        decision(
            8,
            "2026-03-03T13:00:00.000000000Z",
            "prompt",
            json!({"event": "exec", "action": "none", "audit_only": true,
                "rule": rule(2, r#"prefix_rule(pattern=["rm", "-rf"], decision="prompt", audit_only=True)"#),
                "process": process("/usr/bin/rm", &["rm", "-rf", "build dir"])}),
        ),
    ];
    let torn = git_push_refused(9, "2026-03-03T14:00:00.000000000Z").to_string();
    format!("{}{}", lines(&records), &torn[..torn.len() / 2])
}

fn lines(records: &[Value]) -> String {
    records.iter().map(|record| format!("{record}\n")).collect()
}

impl Sandbox {
    /// The two audit files and both policies, written into the sandbox.
    fn with_recording() -> Sandbox {
        let sandbox = Sandbox::new();
        sandbox.write("audit.jsonl.1", &rotated_log());
        sandbox.write("audit.jsonl", &current_log());
        sandbox.write("draft.rules", DRAFT);
        sandbox.write("recorded.rules", RECORDED_POLICY);
        sandbox
    }

    /// `guard replay --rules <rules> [options...] audit.jsonl.1 audit.jsonl`.
    fn replay(&self, rules: &str, options: &[&str]) -> Run {
        let mut args = vec!["replay", "--rules", rules];
        args.extend_from_slice(options);
        args.extend_from_slice(&["audit.jsonl.1", "audit.jsonl"]);
        self.run(&args)
    }
}

/// `(text, count, draft rule file:line)` of each request in a JSON list.
fn listed(report: &Value, class: &str) -> Vec<(String, u64, String)> {
    report[class]
        .as_array()
        .unwrap_or_else(|| panic!("no {class} list in {report}"))
        .iter()
        .map(|request| {
            let rule = &request["draft"]["rule"];
            let place = match rule["file"].as_str() {
                Some(file) => format!("{file}:{}", rule["line"]),
                None => "unmatched".to_string(),
            };
            (
                request["text"].as_str().unwrap().to_string(),
                request["count"].as_u64().unwrap(),
                place,
            )
        })
        .collect()
}

fn entry(text: &str, count: u64, place: &str) -> (String, u64, String) {
    (text.to_string(), count, place.to_string())
}

#[test]
fn people_see_each_change_with_its_count_decisions_and_the_rule_that_now_decides() {
    let sandbox = Sandbox::with_recording();
    let run = sandbox.replay("draft.rules", &[]);
    run.assert_success();
    assert_eq!(
        run.stdout,
        r#"6 decision records (5 requests) against draft.rules: 2 newly refused, 1 newly allowed, 1 changed, 1 unchanged
skipped: 1 line that is not a record

newly refused (2)
  1  allow → forbidden                api.github.com (140.82.112.6):443/tcp  draft.rules:4
  1  prompt (audit only) → forbidden  /usr/bin/rm -rf 'build dir'            draft.rules:3

newly allowed (1)
  1  prompt → allow                   /usr/bin/make deploy                   draft.rules:2

changed (1)
  2  forbidden → prompt               /usr/bin/git push origin main          draft.rules:1

by draft rule
  draft.rules:1  1 changed        prefix_rule(pattern=["git", "push"], decision="prompt", justification="pushes are reviewed")
  draft.rules:2  1 newly allowed  prefix_rule(pattern=["make"], decision="allow")
  draft.rules:3  1 newly refused  prefix_rule(pattern=["rm", "-rf"], decision="forbidden")
  draft.rules:4  1 newly refused  network_rule(host="api.github.com", protocol="https", decision="deny")
"#
    );
    assert_eq!(run.stderr, "");
}

#[test]
fn the_json_report_has_the_classes_counts_and_deciding_rules() {
    let sandbox = Sandbox::with_recording();
    let report = sandbox.replay("draft.rules", &["--json"]).json();
    let totals = &report["totals"];
    assert_eq!(totals["files"], 2);
    assert_eq!(totals["records"], 8);
    assert_eq!(totals["skipped_lines"], 1);
    assert_eq!(totals["decision_records"], 6);
    assert_eq!(totals["allowed_records"], 1);
    assert_eq!(totals["requests"], 5);
    assert_eq!(
        totals["newly_refused"],
        json!({"requests": 2, "records": 2})
    );
    assert_eq!(totals["changed"], json!({"requests": 1, "records": 2}));
    assert_eq!(
        listed(&report, "newly_refused"),
        [
            entry("api.github.com (140.82.112.6):443/tcp", 1, "draft.rules:4"),
            entry("/usr/bin/rm -rf 'build dir'", 1, "draft.rules:3"),
        ]
    );
    assert_eq!(
        listed(&report, "newly_allowed"),
        [entry("/usr/bin/make deploy", 1, "draft.rules:2")]
    );
    assert_eq!(
        listed(&report, "changed"),
        [entry("/usr/bin/git push origin main", 2, "draft.rules:1")]
    );
    assert_eq!(
        listed(&report, "unchanged"),
        [entry(
            "evil.example.com (198.51.100.66):443/tcp",
            1,
            "draft.rules:5"
        )]
    );

    let push = &report["changed"][0];
    assert_eq!(
        push["request"],
        json!({"kind": "exec", "command": ["/usr/bin/git", "push", "origin", "main"]})
    );
    assert_eq!(push["first_time"], "2026-03-02T09:15:00.000000000Z");
    assert_eq!(push["last_time"], "2026-03-03T10:00:00.000000000Z");
    assert_eq!(push["recorded"]["decision"], "forbidden");
    assert_eq!(
        push["recorded"]["rule"]["file"], RECORDED_RULES,
        "the recorded rule is kept beside the draft's"
    );
    assert_eq!(push["draft"]["decision"], "prompt");
    assert_eq!(
        push["draft"]["rule"]["justification"],
        "pushes are reviewed"
    );
    let rm = &report["newly_refused"][1];
    assert_eq!(rm["recorded"]["enforced"], false);
    assert_eq!(rm["draft"]["enforced"], true);

    let by_rule: Vec<(String, Value)> = report["by_rule"]
        .as_array()
        .unwrap()
        .iter()
        .map(|changes| {
            (
                format!(
                    "{}:{}",
                    changes["rule"]["file"].as_str().unwrap(),
                    changes["rule"]["line"]
                ),
                changes["requests"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["class"].clone())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        by_rule,
        [
            ("draft.rules:1".to_string(), json!(["changed"])),
            ("draft.rules:2".to_string(), json!(["newly_allowed"])),
            ("draft.rules:3".to_string(), json!(["newly_refused"])),
            ("draft.rules:4".to_string(), json!(["newly_refused"])),
        ]
    );
}

#[test]
fn unmatched_requests_are_attributed_to_the_drafts_unmatched_default() {
    let sandbox = Sandbox::with_recording();
    sandbox.write(
        "strict.rules",
        "enforcement(unmatched_exec=\"forbidden\", unmatched_network=\"prompt\")\n",
    );
    let report = sandbox.replay("strict.rules", &["--json"]).json();
    assert_eq!(
        report["unmatched_defaults"],
        json!({"exec": "forbidden", "network": "prompt", "audit_only": false})
    );
    assert_eq!(
        listed(&report, "changed"),
        [
            entry("/usr/bin/make deploy", 1, "unmatched"),
            entry("evil.example.com (198.51.100.66):443/tcp", 1, "unmatched"),
        ]
    );
    let defaults: Vec<(&str, &str, usize)> = report["by_rule"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|changes| changes.get("rule").is_none())
        .map(|changes| {
            (
                changes["kind"].as_str().unwrap(),
                changes["decision"].as_str().unwrap(),
                changes["requests"].as_array().unwrap().len(),
            )
        })
        .collect();
    // exec: git push (forbidden → forbidden) is unchanged; make and rm change. network: the
    // allowed connect is newly asked about, the refused one only asked about.
    assert_eq!(
        defaults,
        [("exec", "forbidden", 2), ("destination", "prompt", 2)]
    );

    let run = sandbox.replay("strict.rules", &[]);
    assert!(
        run.stdout.contains(
            "  1  prompt → forbidden               /usr/bin/make deploy                      unmatched default\n"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("  unmatched default  1 newly refused, 1 changed  enforcement(unmatched_network=\"prompt\")\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn exit_code_says_whether_anything_would_change() {
    let sandbox = Sandbox::with_recording();
    sandbox
        .replay("draft.rules", &["--exit-code"])
        .assert_code(1);
    sandbox
        .replay("draft.rules", &["--exit-code", "--json"])
        .assert_code(1);
    // Without --exit-code a change is not a failure.
    sandbox.replay("draft.rules", &[]).assert_success();
    let same = sandbox.replay("recorded.rules", &["--exit-code", "--show", "unchanged"]);
    same.assert_success();
    assert!(
        same.stdout
            .starts_with("6 decision records (5 requests) against recorded.rules: 0 newly refused, 0 newly allowed, 0 changed, 5 unchanged\n"),
        "{}",
        same.stdout
    );
    assert!(
        same.stdout.contains(
            "\nunchanged (5)\n  2  forbidden → forbidden                      /usr/bin/git push origin main "
        ),
        "{}",
        same.stdout
    );
    assert!(
        same.stdout.contains("\nNothing would change.\n"),
        "{}",
        same.stdout
    );
    assert!(!same.stdout.contains("by draft rule"), "{}", same.stdout);
}

#[test]
fn without_allowed_records_the_output_says_what_newly_refused_cannot_see() {
    let sandbox = Sandbox::new();
    sandbox.write("audit.jsonl.1", &rotated_log());
    sandbox.write("audit.jsonl", "");
    sandbox.write("draft.rules", DRAFT);
    let run = sandbox.replay("draft.rules", &[]);
    run.assert_success();
    assert!(
        run.stdout.ends_with(
            "note: the recording holds no allowed requests (the daemon records them only when \
             set to), so newly refused can only come from prompts and audit-only records.\n"
        ),
        "{}",
        run.stdout
    );
    // With an allowed record there is nothing to warn about.
    let recorded = Sandbox::with_recording().replay("draft.rules", &[]);
    assert!(!recorded.stdout.contains("note:"), "{}", recorded.stdout);
}

#[test]
fn an_audit_file_that_cannot_be_read_is_named_and_exits_2() {
    let sandbox = Sandbox::with_recording();
    let run = sandbox.run([
        "replay",
        "--rules",
        "draft.rules",
        "--exit-code",
        "audit.jsonl",
        "missing.jsonl",
    ]);
    run.assert_code(2);
    assert_eq!(run.stdout, "");
    assert!(
        run.first_stderr_line()
            .starts_with("error: cannot read the audit file missing.jsonl: "),
        "{}",
        run.stderr
    );
}

#[test]
fn a_draft_that_does_not_load_names_its_file_and_line_and_exits_2() {
    let sandbox = Sandbox::with_recording();
    sandbox.write(
        "broken.rules",
        "prefix_rule(pattern=[\"git\"], decision=\"allow\")\nprefix_rule(pattern=[\"rm\"], decision=\"maybe\")\n",
    );
    let run = sandbox.replay("broken.rules", &["--json"]);
    run.assert_code(2);
    // Under --json the error is also one object on stdout, for programs.
    let printed: Value = serde_json::from_str(&run.stdout).expect("one JSON error");
    assert_eq!(
        (&printed["error"]["file"], &printed["error"]["line"]),
        (&json!("broken.rules"), &json!(2)),
        "{printed}"
    );
    assert!(
        run.first_stderr_line().starts_with("broken.rules:2: "),
        "{}",
        run.stderr
    );
    assert!(
        run.first_stderr_line().contains("invalid decision: maybe"),
        "{}",
        run.stderr
    );
}

#[test]
fn help_explains_the_classes_and_what_newly_refused_cannot_see() {
    let run = Sandbox::new().run(["replay", "--help"]);
    run.assert_success();
    for text in [
        "guard replay --rules draft.rules /var/log/guard/audit.jsonl.1 /var/log/guard/audit.jsonl",
        "newly refused   it went through",
        "only the requests the kernel recorded",
        "unless the daemon also records allowed decisions",
    ] {
        assert!(run.stdout.contains(text), "{text:?} in\n{}", run.stdout);
    }
}
