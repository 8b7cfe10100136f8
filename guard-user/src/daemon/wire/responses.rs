//! The results of the control socket's requests, one type per request: the daemon serialises
//! them into a response's `result` and the CLI reads the same types back, so the two cannot
//! drift apart field by field. docs/daemon.md documents each; all keys are snake_case.

use std::borrow::Cow;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::asks::{Approval, ApprovalMode, Ask, BlockedRequest};
use crate::audit::AuditRecord;
use crate::confine::WriteRules;
use crate::kernel::coverage::NotEnforced;
use crate::policy::amend::AmendOutcome;
use crate::policy::sandbox::SandboxSetting;

/// `status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusResponse {
    pub version: String,
    pub pid: u32,
    pub backend: String,
    pub uptime_secs: u64,
    pub audit_only: bool,
    pub scopes: Vec<ScopeStatus>,
    /// Rules per file, in load order.
    pub rules: Vec<RulesFile>,
    pub unresolved_hosts: Vec<String>,
    pub addresses: Vec<HostAddresses>,
    /// guard's resolver; `null` when the scopes' DNS is not redirected.
    pub resolver: Option<ResolverStatus>,
    pub asks_pending: usize,
    pub approvals: Vec<Approval>,
    /// The kernel programs' counters, by name, in the kernel's order.
    pub counters: IndexMap<String, u64>,
    pub events_lost: u64,
    /// Decisions that failed open, per hook (`exec`, `net`, `file`): each should stay 0.
    pub failed_open: IndexMap<String, u64>,
    pub audit: AuditStatus,
    /// The pinned programs' folder.
    pub pinned: String,
    pub last_reload_error: Option<String>,
    /// Pinned links found detached (or their pins removed) and attached again since the
    /// daemon started; each has a `link_repaired` audit record.
    #[serde(default)]
    pub links_repaired: u64,
    /// The last of them, as a sentence.
    #[serde(default)]
    pub last_link_repair: Option<String>,
    /// Each layer of enforcement and how it stands now (`guard status --check` fails on a
    /// missing or degraded one).
    #[serde(default)]
    pub layers: Vec<crate::kernel::layers::LayerStatus>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScopeStatus {
    pub kind: ScopeKind,
    pub cgroup: String,
    pub cgroup_id: u64,
    /// A `guard run` client is reading its refusals.
    pub streaming: bool,
    /// Its asks pending (at most `[asks] max_pending_per_scope`).
    #[serde(default)]
    pub asks_pending: usize,
    /// Events its processes put in the kernel's ring buffer, and lost (past the scope's share
    /// of it, or the ring full): one scope's flood loses its own events, not another's.
    #[serde(default)]
    pub events_submitted: u64,
    #[serde(default)]
    pub events_lost: u64,
    /// A run's overlay (`guard run --overlay`): the files that tighten the daemon's policy for
    /// it alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlay: Vec<String>,
    /// The names guard's resolver answered this scope, whose addresses are in force for it
    /// alone (each scope its own book of answers).
    #[serde(default)]
    pub names_answered: usize,
}

/// What a scope is (`status`'s `kind`): the daemon's scopes are of these kinds.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ScopeKind {
    /// Every process of the host (the daemon's own cgroup is exempt).
    Host,
    /// A cgroup from the config, with everything below it.
    Cgroup,
    /// The parent of the run scopes.
    Runs,
    /// A `[[scope.patterns]]` cgroup: one the pattern matches, or (`matched` false) the folder
    /// above them, which holds the pattern's rules for a cgroup from its first moment.
    Pattern { pattern: String, matched: bool },
    /// The parent of a Kubernetes node's pods' cgroups (`guard node`): the node's floor holds
    /// it, and what it holds until a pod's policies are in force.
    Pods,
    /// One pod of the node (`guard node`).
    Pod {
        namespace: String,
        name: String,
        uid: String,
        /// The GuardPolicies holding it (`<namespace>/<name>`); none: the node's floor alone.
        policies: Vec<String>,
    },
    /// One `guard run`.
    Run {
        uid: u32,
        argv: Vec<String>,
        /// A run the daemon found at start (its client talked to an earlier daemon).
        adopted: bool,
    },
}

impl ScopeKind {
    /// Its `kind` in JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            ScopeKind::Host => "host",
            ScopeKind::Cgroup => "cgroup",
            ScopeKind::Runs => "runs",
            ScopeKind::Pattern { matched: false, .. } => "pattern",
            ScopeKind::Pattern { matched: true, .. } => "matched",
            ScopeKind::Pods => "pods",
            ScopeKind::Pod { .. } => "pod",
            ScopeKind::Run { .. } => "run",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RulesFile {
    pub file: String,
    pub rules: usize,
}

/// A host name of the policy and what it resolved to.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostAddresses {
    pub host: String,
    pub addresses: Vec<String>,
    pub refresh_in_secs: Option<u64>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResolverStatus {
    pub port: u16,
    pub names: usize,
    pub addresses: usize,
}

/// The audit trail: where it goes and what it lost.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AuditStatus {
    pub path: String,
    pub next_seq: u64,
    pub written: u64,
    pub bytes: u64,
    pub rotations: u64,
    pub write_errors: u64,
    pub last_error: Option<String>,
    pub writer_lost: u64,
    pub followers: usize,
    pub follower_missed: u64,
    pub syslog: Option<SyslogStatus>,
    /// `[export.otlp]`, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpStatus>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SyslogStatus {
    pub target: String,
    pub sent: u64,
    pub failed: u64,
    pub lost: u64,
}

/// The OTLP export: records the receiver took, failed (every attempt) and lost (queue full).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OtlpStatus {
    pub url: String,
    pub sent: u64,
    pub failed: u64,
    pub lost: u64,
    pub retries: u64,
    pub last_error: Option<String>,
}

/// `console_login`: the link to open, once, within `expires_in_secs`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConsoleLink {
    pub url: String,
    pub expires_in_secs: u64,
    /// Who the page will act as.
    pub user: String,
}

/// `policy`: one rule in force.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PolicyRuleView {
    /// The file it is written in and its line (absent for a rule guard made itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub text: String,
    pub decision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub justification: Option<String>,
}

/// A response's `result` as JSON: every type here serialises (plain structs of strings,
/// numbers and lists).
pub fn to_json(response: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(response).expect("a response always serialises")
}

/// A line appended to the amendments file, and whether the policy with it was put in force.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AmendmentApplied {
    pub file: String,
    /// The line as written.
    pub line: String,
    pub outcome: AmendOutcome,
    pub applied: bool,
    /// Why the policy with the line did not load (it stays in the file; the old policy holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl AmendmentApplied {
    /// `line`, appended to `file` with `outcome`; `applied` says whether the policy with it was
    /// put in force (the daemon's reload, or a stand-alone run's), or why not.
    pub fn new(
        file: &std::path::Path,
        line: &str,
        outcome: AmendOutcome,
        applied: Result<(), String>,
    ) -> AmendmentApplied {
        AmendmentApplied {
            file: file.display().to_string(),
            line: line.to_string(),
            outcome,
            applied: applied.is_ok(),
            error: applied.err(),
            note: (outcome == AmendOutcome::AlreadyPresent)
                .then(|| "the line was already there; nothing was written".to_string()),
        }
    }
}

/// `approve`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApproveResponse {
    pub ask: u64,
    pub mode: ApprovalMode,
    /// The amendment line an `always` wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<AmendmentApplied>,
}

/// `deny`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DenyResponse {
    pub ask: u64,
    pub always: bool,
    /// The deny rule an `always` wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<AmendmentApplied>,
}

/// `reload`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReloadResponse {
    pub files: Vec<String>,
    pub rules: usize,
    /// The rules the running backend does not hold.
    pub not_enforced: Vec<NotEnforced>,
}

/// Which calls of a run the daemon would hold while their asks wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldOffer {
    pub exec: bool,
    pub network: bool,
    /// `sendmsg`-family calls (only when some UDP datagram could be prompted).
    pub messages: bool,
}

/// `run`: the scope the client was moved into, and what it holds itself.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResponse {
    pub scope: String,
    pub cgroup_id: u64,
    /// The policy's write rules, which the client holds with Landlock.
    pub writes: WriteRules,
    /// The sandbox the client holds (`[sandbox]`, else the rules' `sandbox(...)`).
    pub sandbox: Option<SandboxSetting>,
    pub holds: HoldOffer,
}

/// `hold`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct HoldResponse {
    pub cgroup_id: u64,
    pub holds: HoldOffer,
}

/// `audit`: the log files the history is read from, before the stream of [`AuditEvent`]s.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuditResponse {
    pub files: Vec<String>,
    pub follow: bool,
}

/// One line of a stream that follows a response (`run`, `watch`, `audit`): the protocol's
/// version beside the event's own fields, `event` naming it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StreamLine<E> {
    pub v: u32,
    #[serde(flatten)]
    pub event: E,
}

/// A line of the `watch` stream: an ask was raised (or repeated), or answered.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WatchEvent {
    Ask { ask: Ask },
    Resolved { ask: Ask },
}

/// A line of the `run` stream: what the daemon tells a `guard run` client about its scope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// A call of the run's processes was refused, or is held while its ask waits.
    Blocked(Box<Blocked>),
    /// This many more lines like the last `blocked` one came within a second: counted, not sent.
    Repeated { count: u64 },
    /// A line about the run that is not a kernel refusal (a held call that failed).
    Message {
        line: String,
        /// The program's stderr has the line already; the client need not print it again.
        on_stderr: bool,
    },
    /// Every event the daemon had when the client asked for a flush has been sent.
    Flushed,
}

/// A `blocked` event of the `run` stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Blocked {
    /// The blocked-request line, as people read it.
    pub line: String,
    /// The approval prompt's text.
    pub message: String,
    /// The ask raised for it; `null` when nothing can approve it (a denial, audit-only).
    pub ask: Option<u64>,
    /// The answers `guard approve` takes for this ask (`[--once|--session|--always]`).
    pub answers: Option<String>,
    /// The call waits for the answer instead of failing at once.
    pub held: bool,
    /// Seconds until an unanswered ask is denied.
    pub expires_in: u64,
    pub request: BlockedRequest,
}

/// A line of the `audit` stream.
// Each value lives only while its line is written or read; boxing the record would cost an
// allocation per line for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent<'a> {
    /// A record (borrowed when written: one serialisation serves every follower).
    Record { record: Cow<'a, AuditRecord> },
    /// The history asked for has been sent; with `--follow`, new records come next.
    HistoryEnd(HistoryEnd),
    /// This follower read too slowly and missed this many records (they are in the log).
    Missed { records: u64 },
}

/// How reading the history ended: the counts, or why it stopped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryEnd {
    /// Records sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<u64>,
    /// Lines of the log that are not records (a torn line after a crash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad_lines: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::asks::ApprovalTarget;
    use crate::policy::amend::AmendOutcome;

    /// Every key in `value` is snake_case (schema v2).
    fn assert_snake_case(value: &Value) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    assert!(
                        key.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                        "{key:?} is not snake_case in {value}"
                    );
                    assert_snake_case(inner);
                }
            }
            Value::Array(items) => items.iter().for_each(assert_snake_case),
            _ => {}
        }
    }

    /// Serialises `response`, checks its keys, reads it back and serialises it again: the same
    /// JSON both times, so the client reads exactly what the daemon wrote.
    fn round_trip<R: Serialize + serde::de::DeserializeOwned>(response: &R) -> Value {
        let written = serde_json::to_value(response).unwrap();
        assert_snake_case(&written);
        let read: R = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), written);
        written
    }

    #[test]
    fn every_response_reads_back_as_written() {
        let appended = AmendmentApplied {
            file: "/var/lib/guard/rules/default.rules".into(),
            line: "prefix_rule(pattern=[\"ls\"], decision=\"allow\")".into(),
            outcome: AmendOutcome::Appended,
            applied: false,
            error: Some("does not load".into()),
            note: None,
        };
        let approved = round_trip(&ApproveResponse {
            ask: 3,
            mode: ApprovalMode::Always,
            line: Some(appended.clone()),
        });
        assert_eq!(approved["line"]["outcome"], "appended");
        let denied = round_trip(&DenyResponse {
            ask: 4,
            always: false,
            line: None,
        });
        assert!(denied.get("line").is_none(), "absent, never null: {denied}");
        let mut counters = IndexMap::new();
        counters.insert("exec_allow".to_string(), 7);
        counters.insert("audit_only".to_string(), 0);
        let status = round_trip(&StatusResponse {
            version: "0.1.0".into(),
            pid: 1,
            backend: "cgroup".into(),
            uptime_secs: 2,
            audit_only: false,
            scopes: vec![ScopeStatus {
                kind: ScopeKind::Run {
                    uid: 1000,
                    argv: vec!["make".into()],
                    adopted: false,
                },
                cgroup: "/sys/fs/cgroup/guard/run-1".into(),
                cgroup_id: 9,
                streaming: true,
                asks_pending: 1,
                events_submitted: 12,
                events_lost: 0,
                overlay: Vec::new(),
                names_answered: 2,
            }],
            rules: vec![RulesFile {
                file: "team.rules".into(),
                rules: 2,
            }],
            unresolved_hosts: vec![],
            addresses: vec![HostAddresses {
                host: "api.example.com".into(),
                addresses: vec!["127.0.0.1".into()],
                refresh_in_secs: Some(30),
                error: None,
            }],
            resolver: Some(ResolverStatus {
                port: 5353,
                names: 1,
                addresses: 1,
            }),
            asks_pending: 0,
            approvals: vec![Approval {
                ask: 3,
                mode: ApprovalMode::Session,
                by: "root".into(),
                target: ApprovalTarget::Exec {
                    tokens: vec!["git".into(), "push".into()],
                },
                scope: None,
                for_scope: 9,
                until: None,
            }],
            counters,
            events_lost: 0,
            failed_open: IndexMap::new(),
            audit: AuditStatus::default(),
            pinned: "/sys/fs/bpf/guard/1".into(),
            last_reload_error: None,
            links_repaired: 0,
            last_link_repair: None,
            layers: Vec::new(),
        });
        let order: Vec<&String> = status["counters"].as_object().unwrap().keys().collect();
        assert_eq!(
            order,
            ["exec_allow", "audit_only"],
            "the kernel's order is kept"
        );
        round_trip(&RunResponse {
            scope: "/sys/fs/cgroup/guard/run-1".into(),
            cgroup_id: 9,
            writes: WriteRules::default(),
            sandbox: None,
            holds: HoldOffer {
                exec: true,
                network: false,
                messages: false,
            },
        });
        round_trip(&ReloadResponse {
            files: vec!["team.rules".into()],
            rules: 2,
            not_enforced: vec![],
        });
        round_trip(&AuditResponse {
            files: vec!["/var/log/guard/audit.jsonl".into()],
            follow: true,
        });
    }

    /// Reads `line` as a stream line of `E`, checking its version and key case.
    fn read_stream_line<E: serde::de::DeserializeOwned>(line: &str) -> E {
        let value: Value = serde_json::from_str(line).unwrap();
        assert_snake_case(&value);
        assert_eq!(value["v"], 1, "{line}");
        serde_json::from_str::<StreamLine<E>>(line).unwrap().event
    }

    #[test]
    fn every_stream_event_reads_back_as_written() {
        use crate::daemon::wire::protocol::stream_line;

        let blocked = Blocked {
            line: "guard: refused exec of /usr/bin/curl".into(),
            message: "curl is not allowed".into(),
            ask: Some(7),
            answers: Some("[--once|--session]".into()),
            held: true,
            expires_in: 60,
            request: BlockedRequest {
                host: "api.example.com".into(),
                protocol: "https".into(),
                port: Some(443),
                reason: "not_allowed".into(),
                decision: "ask".into(),
                source: "baseline_policy".into(),
                pid: 42,
                uid: 1000,
                executable: "/usr/bin/curl".into(),
                argv: vec!["curl".into(), "https://api.example.com".into()],
                timestamp: "2026-12-05T17:00:00.000000000Z".into(),
                rule: Some(crate::asks::book::RulePlace {
                    file: "team.rules".into(),
                    line: 3,
                }),
                justification: None,
            },
        };
        for event in [
            RunEvent::Blocked(Box::new(blocked)),
            RunEvent::Repeated { count: 3 },
            RunEvent::Message {
                line: "guard: the held connect failed".into(),
                on_stderr: true,
            },
            RunEvent::Flushed,
        ] {
            let line = stream_line(&event);
            assert_eq!(read_stream_line::<RunEvent>(&line), event, "{line}");
        }

        let record = AuditRecord {
            event: Some("connect".into()),
            decision: Some("forbidden".into()),
            ..AuditRecord::default()
        };
        for event in [
            AuditEvent::Record {
                record: Cow::Borrowed(&record),
            },
            AuditEvent::HistoryEnd(HistoryEnd {
                read: Some(10),
                bad_lines: Some(0),
                error: None,
            }),
            AuditEvent::HistoryEnd(HistoryEnd {
                error: Some("permission denied".into()),
                ..HistoryEnd::default()
            }),
            AuditEvent::Missed { records: 5 },
        ] {
            let line = stream_line(&event);
            assert_eq!(read_stream_line::<AuditEvent>(&line), event, "{line}");
        }
    }
}
