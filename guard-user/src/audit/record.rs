//! The audit record: one JSON line per decision the kernel recorded and per control action.
//! This is the schema's one definition; the daemon writes it, and `guard audit`, `guard replay`
//! and the syslog output read it.
//!
//! Schema version 1 (`"v": 1`). Every record has `v`, `seq`, `time`, `host`, `type` and
//! `owner`; the other sections are present when they apply (absent, never `null`). Readers must
//! ignore fields they do not know: new fields may be added without a version change; a field's
//! meaning never changes without one.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `v` of every record this version writes.
pub const SCHEMA_VERSION: u32 = 1;

/// What a record is about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordType {
    /// A kernel event: a refusal, a `prompt`, or an audit-only match.
    #[default]
    Decision,
    /// A `prompt` became a pending ask (once per ask; repeats are counted on the ask).
    Ask,
    /// An ask expired unanswered (and stays denied).
    AskExpired,
    /// A person approved an ask (`approval.mode`: once, session, always).
    Approval,
    /// A person denied an ask.
    Denial,
    /// A line appended to the amendments file (by `approve --always`, `deny --always` or an
    /// amendment verb).
    Amendment,
    /// The policy was re-read (or a reload was refused; `ok` says which).
    Reload,
    /// A `guard run` scope was created.
    Run,
    /// A control request the authorization policy refused.
    ControlRefused,
    /// A control request allowed under a rule with the `audit` obligation.
    ControlAllowed,
    /// Records were lost: the kernel's ring buffer was full, or the writer fell behind.
    Loss,
    /// One scope's kernel events were lost (past its share of a ring buffer more than half
    /// full, or the ring full): `cgroup`, `scope_events_lost`, `scope_events_lost_total`.
    ScopeLoss,
    DaemonStart,
    DaemonStop,
    /// guard's resolver refused a name the policy forbids (it never left the host).
    DnsRefused,
    /// guard's resolver answered a name: forwarded upstream (it left the host), or with a
    /// stand-in address (`details.answered`).
    DnsAnswered,
    /// A held call ended (`details.outcome`: `approved`, `denied`, `expired`, `given_up` by the
    /// program, or `released` by a stopping daemon), with how long it waited.
    HeldEnded,
    /// One of guard's pinned links was found detached (or its pin removed: a process that
    /// could name it), and was attached and pinned again (`details`: `program`, `pin`,
    /// `cgroup`, `detached`, and `failed` when it could not be).
    LinkRepaired,
    /// A layer of enforcement changed state while the daemon ran (`details`: `layer`,
    /// `state`, `was`, `detail`): a link detached, a writer that stopped, and back.
    Layer,
    /// A scope's records past its share of a window (`[audit] scope_records`), folded into one
    /// counted record per kind: `cgroup`, `cgroup_id`, `folded` (how many), `folded_type`,
    /// `decision`, `event`, `rule`, `first_time`, `last_time`.
    Folded,
    /// A rotation is about to delete a file: whose records it held and how many (`file`,
    /// `records`, `first_seq`, `last_seq`, `scopes`: per owner and scope).
    RotatedOut,
    /// A type this version does not know (a newer writer's).
    #[serde(other)]
    Unknown,
}

impl RecordType {
    /// Every type this version writes.
    pub const ALL: [RecordType; 21] = [
        RecordType::Decision,
        RecordType::Ask,
        RecordType::AskExpired,
        RecordType::Approval,
        RecordType::Denial,
        RecordType::Amendment,
        RecordType::Reload,
        RecordType::Run,
        RecordType::ControlRefused,
        RecordType::ControlAllowed,
        RecordType::Loss,
        RecordType::ScopeLoss,
        RecordType::DaemonStart,
        RecordType::DaemonStop,
        RecordType::DnsRefused,
        RecordType::DnsAnswered,
        RecordType::HeldEnded,
        RecordType::LinkRepaired,
        RecordType::Layer,
        RecordType::Folded,
        RecordType::RotatedOut,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecordType::Decision => "decision",
            RecordType::Ask => "ask",
            RecordType::AskExpired => "ask_expired",
            RecordType::Approval => "approval",
            RecordType::Denial => "denial",
            RecordType::Amendment => "amendment",
            RecordType::Reload => "reload",
            RecordType::Run => "run",
            RecordType::ControlRefused => "control_refused",
            RecordType::ControlAllowed => "control_allowed",
            RecordType::Loss => "loss",
            RecordType::ScopeLoss => "scope_loss",
            RecordType::DaemonStart => "daemon_start",
            RecordType::DaemonStop => "daemon_stop",
            RecordType::DnsRefused => "dns_refused",
            RecordType::DnsAnswered => "dns_answered",
            RecordType::HeldEnded => "held_ended",
            RecordType::LinkRepaired => "link_repaired",
            RecordType::Layer => "layer",
            RecordType::Folded => "folded",
            RecordType::RotatedOut => "rotated_out",
            RecordType::Unknown => "unknown",
        }
    }
}

/// One audit record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// [`SCHEMA_VERSION`].
    pub v: u32,
    /// Increases by one per record on this host, across daemon restarts (a daemon continues
    /// from the last record in its log); a gap means records were lost, and a `loss` record says
    /// how many and why.
    pub seq: u64,
    /// When it happened (for a kernel event, when the kernel decided): RFC 3339, UTC,
    /// nanoseconds.
    pub time: String,
    /// The machine's host name.
    pub host: String,
    #[serde(rename = "type")]
    pub kind: RecordType,
    /// The user whose process or request it is: the authorization policy's `resource.owner`
    /// (a user may read their own records).
    pub owner: String,
    /// The decision: `allow`, `prompt` or `forbidden` (decision, ask, approval, denial).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// What the kernel saw: `exec`, `connect` or `sendmsg`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// What the kernel did: `eperm` (the call failed), `sigkill` (the exec's process was
    /// killed before the new image ran), `none` (recorded only: audit-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_only: Option<bool>,
    /// No rule matched: the policy's unmatched default decided (`rule` is absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmatched: Option<bool>,
    /// The deciding rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<DestinationInfo>,
    /// A file decision's path (events `read` and `write`, `lsm` backend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The blocked-request message, as the process's user saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The ask this record belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ask: Option<u64>,
    /// Approvals and denials: who answered and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalInfo>,
    /// The line an amendment appended, and where.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amendment: Option<AmendmentInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<LossInfo>,
    /// Details particular to one type (a reload's files, a refused request's action, ...).
    #[serde(flatten)]
    pub details: Map<String, Value>,
}

/// The rule that decided.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleRef {
    /// The rules file (as loaded), e.g. `/etc/guard/rules/default.rules` or
    /// `<embedded default>`.
    pub file: String,
    /// 1-based line of the rule's call in `file`.
    pub line: usize,
    /// The rule as it would be written.
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub justification: Option<String>,
}

impl RuleRef {
    /// `file:line`.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The process a kernel event is about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// The process id (the thread group's).
    pub pid: u32,
    /// The thread that made the call.
    pub tid: u32,
    pub ppid: u32,
    pub uid: u32,
    /// `uid`'s name, or the number when it has none.
    pub user: String,
    pub gid: u32,
    /// The cgroup path below the cgroup2 mount, e.g. `/guard-daemon/run-...`, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    pub cgroup_id: u64,
    /// Exec: the path given to execve; connect: the path of the process's last exec.
    pub exe: String,
    pub argv: Vec<String>,
    /// argv was longer than the kernel's event holds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub argv_truncated: bool,
    /// Exec: the executed file has no path (a memfd, a deleted file), so
    /// `enforcement(anonymous_exec=...)` decided with the rules.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exe_anonymous: bool,
    pub comm: String,
}

/// Where a connection or datagram was going.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationInfo {
    /// The host name, when the resolver's answers say which name of the policy the address came
    /// from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The names guard's resolver answered the address for (the names the program asked for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    pub address: String,
    pub port: u16,
    /// `tcp` or `udp`.
    pub transport: String,
    /// `http`, `https`, `socks5_tcp` or `socks5_udp`: the protocol an amendment would name.
    pub protocol: String,
}

/// Who answered an ask, and how.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalInfo {
    /// The user name of the person who answered.
    pub by: String,
    pub uid: u32,
    /// `once`, `session` or `always` for an approval; `once` or `always` for a denial
    /// (`always` also appended a deny rule).
    pub mode: String,
}

/// An appended amendment line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmendmentInfo {
    /// The amendments file.
    pub file: String,
    /// The line the amendment now holds in it.
    pub line: usize,
    pub text: String,
}

/// Records lost since the previous `loss` record, and in all since the daemon started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossInfo {
    /// Kernel events that did not fit in the ring buffer (the decision still stood).
    pub ring_buffer: u64,
    /// Records the writer could not keep up with (its queue was full).
    pub writer: u64,
    /// Records that could not be written to the file (an I/O error).
    pub write_errors: u64,
    pub ring_buffer_total: u64,
    pub writer_total: u64,
    pub write_errors_total: u64,
    /// Records the OTLP export (`[export.otlp]`) did not deliver: its queue was full, or the
    /// receiver failed every attempt (the log has them). `loss` records themselves are not
    /// counted, so a receiver that stays down is reported once, not every second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub export: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub export_total: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl AuditRecord {
    /// The decision's name for people and filters: `ask` for a prompt.
    pub fn decision(&self) -> Option<&str> {
        self.decision.as_deref()
    }

    /// Parses one line; `None` for a line that is not a record (a torn last line after a
    /// crash, or garbage).
    pub fn parse(line: &str) -> Option<AuditRecord> {
        serde_json::from_str(line).ok()
    }
}

/// The schema's own field names: a type's `details` must not use them (the record would not
/// read back).
pub const FIELDS: [&str; 20] = [
    "v",
    "seq",
    "time",
    "host",
    "type",
    "owner",
    "decision",
    "event",
    "action",
    "audit_only",
    "unmatched",
    "rule",
    "process",
    "destination",
    "file",
    "message",
    "ask",
    "approval",
    "amendment",
    "loss",
];

/// This machine's host name.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_leave_out_what_does_not_apply() {
        let mut record = AuditRecord {
            v: SCHEMA_VERSION,
            seq: 7,
            time: "2026-12-02T00:00:00.000000001Z".into(),
            host: "box".into(),
            kind: RecordType::Reload,
            owner: "root".into(),
            ..Default::default()
        };
        record.details.insert("ok".into(), Value::Bool(true));
        let line = serde_json::to_string(&record).unwrap();
        assert_eq!(
            line,
            r#"{"v":1,"seq":7,"time":"2026-12-02T00:00:00.000000001Z","host":"box","type":"reload","owner":"root","ok":true}"#
        );
        assert_eq!(AuditRecord::parse(&line), Some(record));
    }

    #[test]
    fn unknown_types_and_fields_are_read_not_refused() {
        let record = AuditRecord::parse(
            r#"{"v":1,"seq":1,"time":"t","host":"h","type":"from_the_future","owner":"o","new":1}"#,
        )
        .unwrap();
        assert_eq!(record.kind, RecordType::Unknown);
        assert_eq!(record.details["new"], 1);
        assert!(AuditRecord::parse(r#"{"v":1,"seq":1,"ti"#).is_none());
    }
}
