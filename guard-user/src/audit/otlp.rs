//! Audit records as OTLP log records (the official protobuf messages of
//! `opentelemetry-proto`): the body is the record in OCSF's shape (`audit::ocsf`), the
//! attributes are what a fleet joins on (host, scope, run, pod, rule, ask), the resource says
//! which guard sent it. `audit::otlp_sender` posts them.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde_json::Value;

use super::ocsf;
use super::record::AuditRecord;
use super::syslog::{Severity, severity};

/// The instrumentation scope of every record.
pub const SCOPE_NAME: &str = "guard.audit";

/// One export request holding `records`, all from `host`'s guard.
pub fn request(host: &str, records: &[AuditRecord]) -> ExportLogsServiceRequest {
    let observed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    string("service.name", "guard"),
                    string("service.version", env!("CARGO_PKG_VERSION")),
                    string("host.name", host),
                ],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                log_records: records.iter().map(|r| log_record(r, observed)).collect(),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// One record as a log record.
pub fn log_record(record: &AuditRecord, observed_unix_nano: u64) -> LogRecord {
    let (class, _, _) = ocsf::classify(record);
    let (number, text) = match severity(record) {
        Severity::Info => (SeverityNumber::Info, "INFO"),
        Severity::Notice => (SeverityNumber::Info2, "INFO2"),
        Severity::Warning => (SeverityNumber::Warn, "WARN"),
        Severity::Err => (SeverityNumber::Error, "ERROR"),
    };
    LogRecord {
        time_unix_nano: ocsf::epoch_nanos(&record.time),
        observed_time_unix_nano: observed_unix_nano,
        severity_number: number as i32,
        severity_text: text.into(),
        body: Some(any_value(&ocsf::event(record))),
        attributes: attributes(record, class),
        event_name: format!("guard.{}", record.kind.as_str()),
        ..Default::default()
    }
}

/// The attributes a fleet joins and filters on, those the record has.
fn attributes(record: &AuditRecord, class: ocsf::Class) -> Vec<KeyValue> {
    let mut out = vec![
        int("guard.seq", record.seq),
        string("guard.type", record.kind.as_str()),
        string("guard.owner", &record.owner),
        int("ocsf.class_uid", u64::from(class.uid)),
        string("ocsf.class_name", class.name),
        string("host.name", &record.host),
    ];
    if let Some(decision) = &record.decision {
        out.push(string("guard.decision", decision));
    }
    if let Some(event) = &record.event {
        out.push(string("guard.event", event));
    }
    let scope = record
        .process
        .as_ref()
        .and_then(|p| p.cgroup.clone())
        .or_else(|| {
            record
                .details
                .get("cgroup")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
    if let Some(scope) = scope {
        // A `guard run` is a cgroup `run-...` of its own: its name is the run's id.
        if let Some(run) = scope.rsplit('/').find(|part| part.starts_with("run-")) {
            out.push(string("guard.run", run));
        }
        // The kubelet names a pod's cgroup after its uid (`pod<uid>`, `-` as `_` under systemd).
        if let Some(pod) = pod_uid(&scope) {
            out.push(string("k8s.pod.uid", &pod));
        }
        out.push(string("guard.scope", &scope));
    }
    if let Some(process) = &record.process {
        out.push(int("process.pid", u64::from(process.pid)));
        out.push(string("process.executable.path", &process.exe));
        out.push(string("user.name", &process.user));
    }
    if let Some(rule) = &record.rule {
        out.push(string("guard.rule.file", &rule.file));
        out.push(int("guard.rule.line", rule.line as u64));
    }
    if let Some(ask) = record.ask {
        out.push(int("guard.ask.id", ask));
    }
    if let Some(dest) = &record.destination {
        out.push(string(
            "server.address",
            dest.host.as_deref().unwrap_or(&dest.address),
        ));
        out.push(int("server.port", u64::from(dest.port)));
    }
    out
}

/// The pod uid in a kubelet cgroup path (`.../pod<uid>/...` or `...-pod<uid>.slice/...`).
fn pod_uid(cgroup: &str) -> Option<String> {
    cgroup.split('/').find_map(|part| {
        let part = part.strip_suffix(".slice").unwrap_or(part);
        let (_, uid) = part.rsplit_once("pod")?;
        let uid = uid.replace('_', "-");
        (uid.len() == 36 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-')).then_some(uid)
    })
}

fn string(key: &str, value: &str) -> KeyValue {
    key_value(key, any_value::Value::StringValue(value.to_string()))
}

fn int(key: &str, value: u64) -> KeyValue {
    key_value(
        key,
        any_value::Value::IntValue(i64::try_from(value).unwrap_or(i64::MAX)),
    )
}

fn key_value(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// A JSON value as an OTLP value: objects become key-value lists (in order), arrays arrays;
/// `null` an empty value.
pub fn any_value(value: &Value) -> AnyValue {
    let value = match value {
        Value::Null => None,
        Value::Bool(b) => Some(any_value::Value::BoolValue(*b)),
        Value::Number(n) => Some(match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => any_value::Value::IntValue(i),
            (None, Some(u)) => any_value::Value::IntValue(i64::try_from(u).unwrap_or(i64::MAX)),
            _ => any_value::Value::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        }),
        Value::String(s) => Some(any_value::Value::StringValue(s.clone())),
        Value::Array(items) => Some(any_value::Value::ArrayValue(ArrayValue {
            values: items.iter().map(any_value).collect(),
        })),
        Value::Object(fields) => Some(any_value::Value::KvlistValue(KeyValueList {
            values: fields
                .iter()
                .map(|(key, value)| KeyValue {
                    key: key.clone(),
                    value: Some(any_value(value)),
                    ..Default::default()
                })
                .collect(),
        })),
    };
    AnyValue { value }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::{ProcessInfo, RecordType};
    use prost::Message;

    #[test]
    fn a_record_round_trips_through_the_wire_format_with_its_attributes() {
        let record = AuditRecord {
            v: 1,
            seq: 9,
            time: "2026-12-07T10:00:00.5Z".into(),
            host: "box".into(),
            kind: RecordType::Ask,
            owner: "alice".into(),
            decision: Some("prompt".into()),
            ask: Some(4),
            process: Some(ProcessInfo {
                cgroup: Some(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_1111_2222_3333_444455556666.slice/run-7".into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = request("box", std::slice::from_ref(&record)).encode_to_vec();
        let back = ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap();
        let log = &back.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(log.time_unix_nano, 1_796_637_600_500_000_000);
        assert_eq!(log.severity_number, SeverityNumber::Info2 as i32);
        let attr = |key: &str| {
            log.attributes
                .iter()
                .find(|kv| kv.key == key)
                .and_then(|kv| kv.value.clone())
                .and_then(|v| v.value)
        };
        assert_eq!(attr("guard.ask.id"), Some(any_value::Value::IntValue(4)));
        assert_eq!(
            attr("guard.run"),
            Some(any_value::Value::StringValue("run-7".into()))
        );
        assert_eq!(
            attr("k8s.pod.uid"),
            Some(any_value::Value::StringValue(
                "0a1b2c3d-1111-2222-3333-444455556666".into()
            ))
        );
        assert_eq!(
            attr("ocsf.class_uid"),
            Some(any_value::Value::IntValue(2004))
        );
    }
}
