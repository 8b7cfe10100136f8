//! Audit records in the Open Cybersecurity Schema Framework's shape (OCSF 1.3.0), for the OTLP
//! export (`audit::otlp`): the class a fleet's tools file each record under, with the fields
//! they join and filter on, and the record itself as `raw_data` so nothing guard knows is lost.
//!
//! | record                         | OCSF class                   | activity            |
//! |--------------------------------|------------------------------|---------------------|
//! | decision, event `exec`         | Process Activity (1007)      | Launch              |
//! | decision, `connect`/`sendmsg`  | Network Activity (4001)      | Open/Traffic/Refuse |
//! | decision, `read`/`write`       | File System Activity (1001)  | Read/Update         |
//! | `dns_refused`, `dns_answered`  | DNS Activity (4003)          | Response            |
//! | ask, approval, denial, expiry, held call ended | Detection Finding (2004) | Create/Update/Close |
//! | control allowed / refused      | API Activity (6003)          | Other               |
//! | daemon start / stop            | Application Lifecycle (6002) | Start/Stop          |
//! | anything else                  | Base Event (0)               | Other               |

use serde_json::{Map, Value, json};

use super::record::{AuditRecord, ProcessInfo, RecordType};
use super::syslog::{Severity, severity};

/// The OCSF schema version the events follow.
pub const OCSF_VERSION: &str = "1.3.0";

/// An OCSF class: its number, name and category.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Class {
    pub uid: u32,
    pub name: &'static str,
    pub category_uid: u32,
    pub category_name: &'static str,
}

pub const PROCESS_ACTIVITY: Class = Class {
    uid: 1007,
    name: "Process Activity",
    category_uid: 1,
    category_name: "System Activity",
};
pub const FILE_SYSTEM_ACTIVITY: Class = Class {
    uid: 1001,
    name: "File System Activity",
    category_uid: 1,
    category_name: "System Activity",
};
pub const NETWORK_ACTIVITY: Class = Class {
    uid: 4001,
    name: "Network Activity",
    category_uid: 4,
    category_name: "Network Activity",
};
pub const DNS_ACTIVITY: Class = Class {
    uid: 4003,
    name: "DNS Activity",
    category_uid: 4,
    category_name: "Network Activity",
};
pub const DETECTION_FINDING: Class = Class {
    uid: 2004,
    name: "Detection Finding",
    category_uid: 2,
    category_name: "Findings",
};
pub const API_ACTIVITY: Class = Class {
    uid: 6003,
    name: "API Activity",
    category_uid: 6,
    category_name: "Application Activity",
};
pub const APPLICATION_LIFECYCLE: Class = Class {
    uid: 6002,
    name: "Application Lifecycle",
    category_uid: 6,
    category_name: "Application Activity",
};
pub const BASE_EVENT: Class = Class {
    uid: 0,
    name: "Base Event",
    category_uid: 0,
    category_name: "Uncategorized",
};

/// OCSF's "Other" activity, for what a class has no name for.
const OTHER: u32 = 99;

/// The class of `record` and its activity (id and name).
pub fn classify(record: &AuditRecord) -> (Class, u32, &'static str) {
    let refused = matches!(record.decision(), Some("forbidden" | "prompt"));
    match record.kind {
        RecordType::Decision => match record.event.as_deref() {
            Some("exec") => (PROCESS_ACTIVITY, 1, "Launch"),
            Some("connect" | "sendmsg") if refused => (NETWORK_ACTIVITY, 5, "Refuse"),
            Some("connect") => (NETWORK_ACTIVITY, 1, "Open"),
            Some("sendmsg") => (NETWORK_ACTIVITY, 6, "Traffic"),
            Some("read") => (FILE_SYSTEM_ACTIVITY, 2, "Read"),
            Some("write") => (FILE_SYSTEM_ACTIVITY, 3, "Update"),
            _ => (BASE_EVENT, OTHER, "Other"),
        },
        RecordType::DnsRefused | RecordType::DnsAnswered => (DNS_ACTIVITY, 2, "Response"),
        RecordType::Ask => (DETECTION_FINDING, 1, "Create"),
        RecordType::Approval | RecordType::Denial => (DETECTION_FINDING, 2, "Update"),
        RecordType::AskExpired | RecordType::HeldEnded => (DETECTION_FINDING, 3, "Close"),
        RecordType::ControlAllowed | RecordType::ControlRefused => (API_ACTIVITY, OTHER, "Other"),
        RecordType::DaemonStart => (APPLICATION_LIFECYCLE, 3, "Start"),
        RecordType::DaemonStop => (APPLICATION_LIFECYCLE, 4, "Stop"),
        _ => (BASE_EVENT, OTHER, "Other"),
    }
}

/// `record` as one OCSF event (a JSON object). `raw_data` is the record's JSONL line.
pub fn event(record: &AuditRecord) -> Value {
    let (class, activity_id, activity_name) = classify(record);
    let raw = serde_json::to_string(record).expect("an audit record always serializes");
    let (severity_id, severity_name) = ocsf_severity(severity(record));
    let mut event = json!({
        "class_uid": class.uid,
        "class_name": class.name,
        "category_uid": class.category_uid,
        "category_name": class.category_name,
        "activity_id": activity_id,
        "activity_name": activity_name,
        "type_uid": u64::from(class.uid) * 100 + u64::from(activity_id),
        "type_name": format!("{}: {activity_name}", class.name),
        "time": epoch_millis(&record.time),
        "severity_id": severity_id,
        "severity": severity_name,
        "metadata": {
            "version": OCSF_VERSION,
            "uid": record.seq.to_string(),
            "log_name": "audit",
            "log_provider": "guard",
            "original_time": record.time,
            "event_code": record.kind.as_str(),
            "product": {
                "name": "guard",
                "vendor_name": "guard",
                "version": env!("CARGO_PKG_VERSION"),
            },
        },
        "device": { "hostname": record.host, "type_id": 0 },
        "raw_data": raw,
    });
    let out = event.as_object_mut().expect("an object");
    if let Some(message) = &record.message {
        out.insert("message".into(), message.clone().into());
    }
    if let Some((action_id, action, disposition_id, disposition)) = action(record) {
        out.insert("action_id".into(), action_id.into());
        out.insert("action".into(), action.into());
        out.insert("disposition_id".into(), disposition_id.into());
        out.insert("disposition".into(), disposition.into());
    }
    if let Some(process) = &record.process {
        let user = json!({ "uid": process.uid.to_string(), "name": process.user });
        if class == PROCESS_ACTIVITY {
            out.insert("process".into(), ocsf_process(process));
            out.insert("actor".into(), json!({ "user": user }));
        } else {
            out.insert(
                "actor".into(),
                json!({ "process": ocsf_process(process), "user": user }),
            );
        }
    }
    if let Some(dest) = &record.destination {
        let mut endpoint = json!({ "ip": dest.address, "port": dest.port });
        if let Some(host) = &dest.host {
            endpoint["hostname"] = host.clone().into();
        }
        out.insert("dst_endpoint".into(), endpoint);
        out.insert(
            "connection_info".into(),
            json!({
                "protocol_name": dest.transport,
                "direction_id": 2,
                "direction": "Outbound",
            }),
        );
        out.insert("app_name".into(), dest.protocol.clone().into());
    }
    if let Some(path) = &record.file {
        out.insert("file".into(), ocsf_file(path));
    }
    if class == DNS_ACTIVITY {
        dns_fields(record, out);
    }
    if class == DETECTION_FINDING {
        finding_fields(record, out);
    }
    if class == API_ACTIVITY {
        let operation = record.details.get("action").cloned().unwrap_or(Value::Null);
        out.insert("api".into(), json!({ "operation": operation }));
    }
    if let Some(rule) = &record.rule {
        // OCSF 1.3 has no policy object on activity events; the rule goes in `unmapped`, as
        // the schema asks for attributes it has no place for.
        out.insert(
            "unmapped".into(),
            json!({ "rule": { "file": rule.file, "line": rule.line, "text": rule.text,
                              "justification": rule.justification } }),
        );
    }
    event
}

/// OCSF's severity for a syslog severity: informational, low, medium, high.
fn ocsf_severity(severity: Severity) -> (u32, &'static str) {
    match severity {
        Severity::Info => (1, "Informational"),
        Severity::Notice => (2, "Low"),
        Severity::Warning => (3, "Medium"),
        Severity::Err => (4, "High"),
    }
}

/// What was done with the request: `(action_id, action, disposition_id, disposition)`.
fn action(record: &AuditRecord) -> Option<(u32, &'static str, u32, &'static str)> {
    match record.decision()? {
        "allow" => Some((1, "Allowed", 1, "Allowed")),
        "forbidden" => Some((2, "Denied", 2, "Blocked")),
        // Held for a person's answer: refused unless approved. OCSF has no disposition for it.
        "prompt" => Some((2, "Denied", OTHER, "Held for approval")),
        _ => None,
    }
}

fn ocsf_process(process: &ProcessInfo) -> Value {
    let cmd_line = shlex::try_join(process.argv.iter().map(String::as_str))
        .unwrap_or_else(|_| process.argv.join(" "));
    let mut out = json!({
        "pid": process.pid,
        "tid": process.tid,
        "name": process.comm,
        "cmd_line": cmd_line,
        "file": ocsf_file(&process.exe),
        "user": { "uid": process.uid.to_string(), "name": process.user },
        "parent_process": { "pid": process.ppid },
    });
    if let Some(cgroup) = &process.cgroup {
        out["container"] = json!({ "uid": cgroup });
    }
    out
}

fn ocsf_file(path: &str) -> Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    json!({ "path": path, "name": name, "type_id": 1 })
}

/// DNS Activity's query, answers and response code.
fn dns_fields(record: &AuditRecord, out: &mut Map<String, Value>) {
    let detail = |key: &str| record.details.get(key).cloned().unwrap_or(Value::Null);
    out.insert(
        "query".into(),
        json!({ "hostname": detail("name"), "type": detail("query_type") }),
    );
    if record.kind == RecordType::DnsRefused {
        out.insert("rcode_id".into(), 5.into());
        out.insert("rcode".into(), "Refused".into());
    } else {
        out.insert("rcode_id".into(), 0.into());
        out.insert("rcode".into(), "NoError".into());
        let answers: Vec<Value> = record
            .details
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|address| json!({ "rdata": address }))
            .collect();
        out.insert("answers".into(), answers.into());
    }
}

/// A finding per ask: its id, what it is about, and where it stands.
fn finding_fields(record: &AuditRecord, out: &mut Map<String, Value>) {
    let uid = record
        .ask
        .map_or_else(|| format!("seq-{}", record.seq), |id| format!("ask-{id}"));
    let title = record
        .message
        .clone()
        .unwrap_or_else(|| format!("guard {}", record.kind.as_str()));
    let mut info = json!({ "uid": uid, "title": title, "types": ["guard ask"] });
    if let Some(justification) = record.rule.as_ref().and_then(|r| r.justification.clone()) {
        info["desc"] = justification.into();
    }
    out.insert("finding_info".into(), info);
    let (status_id, status) = match record.kind {
        RecordType::Ask => (1, "New"),
        RecordType::Approval | RecordType::Denial => (4, "Resolved"),
        _ => (5, "Archived"),
    };
    out.insert("status_id".into(), status_id.into());
    out.insert("status".into(), status.into());
    if let Some(approval) = &record.approval {
        out.insert(
            "resolution".into(),
            json!({ "by": approval.by, "uid": approval.uid.to_string(), "mode": approval.mode,
                    "answer": record.kind.as_str() }),
        );
    }
}

/// Milliseconds since the epoch of an RFC 3339 time; 0 when it does not parse.
pub fn epoch_millis(time: &str) -> u64 {
    epoch_nanos(time) / 1_000_000
}

/// Nanoseconds since the epoch of an RFC 3339 time; 0 when it does not parse.
pub fn epoch_nanos(time: &str) -> u64 {
    humantime::parse_rfc3339_weak(time)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::{DestinationInfo, RuleRef};

    fn refused_connect() -> AuditRecord {
        AuditRecord {
            v: 1,
            seq: 41,
            time: "2026-12-07T10:00:00.123456789Z".into(),
            host: "box".into(),
            kind: RecordType::Decision,
            owner: "alice".into(),
            decision: Some("forbidden".into()),
            event: Some("connect".into()),
            rule: Some(RuleRef {
                file: "/etc/guard/rules/net.rules".into(),
                line: 3,
                text: "forbid(host = \"example.com\")".into(),
                justification: Some("no uploads".into()),
            }),
            process: Some(ProcessInfo {
                pid: 10,
                uid: 1000,
                user: "alice".into(),
                exe: "/usr/bin/curl".into(),
                argv: vec!["curl".into(), "a b".into()],
                comm: "curl".into(),
                ..Default::default()
            }),
            destination: Some(DestinationInfo {
                host: Some("example.com".into()),
                address: "192.0.2.7".into(),
                port: 443,
                transport: "tcp".into(),
                protocol: "https".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_refused_connect_is_a_network_refusal_with_its_endpoint_and_rule() {
        let event = event(&refused_connect());
        assert_eq!(event["class_uid"], 4001);
        assert_eq!(event["type_uid"], 400105);
        assert_eq!(event["action"], "Denied");
        assert_eq!(event["time"], 1_796_637_600_123u64);
        assert_eq!(event["dst_endpoint"]["hostname"], "example.com");
        assert_eq!(event["dst_endpoint"]["port"], 443);
        assert_eq!(event["actor"]["process"]["cmd_line"], "curl 'a b'");
        assert_eq!(event["unmapped"]["rule"]["line"], 3);
        let raw: AuditRecord = serde_json::from_str(event["raw_data"].as_str().unwrap()).unwrap();
        assert_eq!(raw, refused_connect());
    }

    #[test]
    fn each_record_type_has_a_class() {
        for kind in RecordType::ALL {
            let record = AuditRecord {
                kind,
                event: Some("exec".into()),
                ..Default::default()
            };
            let (class, activity, _) = classify(&record);
            let event = event(&record);
            assert_eq!(event["class_uid"], class.uid, "{kind:?}");
            assert_eq!(
                event["type_uid"],
                u64::from(class.uid) * 100 + u64::from(activity)
            );
        }
        let ask = AuditRecord {
            kind: RecordType::Ask,
            ask: Some(7),
            ..Default::default()
        };
        assert_eq!(event(&ask)["finding_info"]["uid"], "ask-7");
    }
}
