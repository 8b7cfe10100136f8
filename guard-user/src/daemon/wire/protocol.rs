//! The control socket's protocol: line-delimited JSON over a Unix stream socket, version 1.
//!
//! A client writes one request line, `{"v": 1, "op": "<op>", ...}`, and reads one response
//! line, `{"v": 1, "ok": true, "result": ...}` or
//! `{"v": 1, "ok": false, "error": {"code": "...", "message": "..."}}`. The streaming requests
//! (`run`, `watch`) keep the connection open after their response: the daemon then writes one
//! `{"v": 1, "event": "<kind>", ...}` line per event until the client closes. The peer's uid,
//! gid and pid come from the kernel (SO_PEERCRED), never from the request. docs/daemon.md
//! ("The control socket") documents every op; `PROTOCOL_VERSION` changes only when a field
//! changes meaning (new optional fields and ops do not bump it).

use serde::{Deserialize, Serialize};

pub use crate::asks::ApprovalMode;

pub const PROTOCOL_VERSION: u32 = 1;

/// Longest request line the daemon reads (a request is small; this bounds a hostile client).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RequestLine {
    pub v: u32,
    #[serde(flatten)]
    pub request: Request,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The daemon's state: backend, scopes, rules per file, addresses, asks, counters, uptime.
    Status,
    /// The pending asks.
    Prompts,
    /// Streams `ask` events (a new or repeated ask) and `resolved` events.
    Watch,
    /// Approves a pending ask; `prefix`, with `always` for an exec ask: the prefix to allow
    /// instead of the asked argv (accepted only under the reference's rules for a proposed
    /// prefix).
    Approve {
        id: u64,
        mode: ApprovalMode,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<Vec<String>>,
    },
    /// Denies a pending ask; `always` also appends a deny rule.
    Deny {
        id: u64,
        #[serde(default)]
        always: bool,
    },
    /// Appends one amendment line to the amendments file and applies it at once.
    Amend { amendment: Amendment },
    /// Re-reads the policy; a policy that fails to load keeps the old one.
    Reload,
    /// Moves the requesting process into a fresh scope; then streams `blocked` events for it.
    /// `workspace` and `tmpdir` are the client's current folder and `$TMPDIR`: the writable
    /// roots of the daemon's sandbox for this run, so that its refusals can be told apart.
    Run {
        argv: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace: Option<std::path::PathBuf>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tmpdir: Option<std::path::PathBuf>,
        /// Whether the run's prompted calls may wait for their answers (`guard run --no-hold`
        /// says no): the kernel then holds its prompted connects, and `holds` in the answer
        /// says which calls its filter should hold.
        #[serde(default = "holds_by_default")]
        hold: bool,
        /// Rules that tighten the daemon's policy for this run alone (`guard run --overlay`),
        /// read by the client: the daemon reads no file for its caller.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        overlay: Vec<OverlayFile>,
    },
    /// A `guard run` client hands over the seccomp listener of the command it started in its
    /// scope (its descriptor `fd`, which the daemon copies with `pidfd_getfd`): the daemon holds
    /// the command's prompted execs and connects until their asks are answered. `first_exec`:
    /// the command's own exec is still to come (it continues undecided by the hold).
    Hold {
        fd: i32,
        #[serde(default)]
        first_exec: bool,
    },
    /// Streams the audit records the caller may read that match `filter`, oldest first (only
    /// the newest `limit`, if given): `record` events, then `history_end`; with `follow`, then
    /// each new record as it is made (`missed` says how many a slow client lost).
    Audit {
        #[serde(default)]
        filter: crate::audit::filter::AuditFilter,
        #[serde(default)]
        follow: bool,
        #[serde(default)]
        limit: Option<usize>,
    },
    /// A one-time login link to the console's page (`[console] listen`), bound to the caller:
    /// the page then acts as them (`guard console`). Refused from inside a guard scope.
    ConsoleLogin,
    /// The rules in force, each with its file and line.
    Policy,
}

impl Request {
    /// The authorization action (the names `guard authz check --action` takes).
    pub fn action(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Prompts | Request::Watch => "prompts",
            Request::Approve { .. } => "approve",
            Request::Deny { .. } => "deny",
            Request::Amend { .. } => "amend",
            Request::Reload => "reload",
            Request::Run { .. } | Request::Hold { .. } => "run",
            Request::Audit { .. } => "audit",
            // The page shows what its person may list and answer; each of its requests is
            // authorized again as that person.
            Request::ConsoleLogin => "prompts",
            Request::Policy => "status",
        }
    }

    /// What the request is about: the authorization `entity`.
    pub fn entity(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Prompts
            | Request::Watch
            | Request::Approve { .. }
            | Request::Deny { .. }
            | Request::ConsoleLogin => "prompt",
            Request::Amend { .. }
            | Request::Reload
            | Request::Run { .. }
            | Request::Hold { .. }
            | Request::Policy => "policy",
            Request::Audit { .. } => "audit",
        }
    }
}

/// One `.rules` file of a run's overlay: the name it is known by (its path, as the client
/// gave it) and its text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayFile {
    pub name: String,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Amendment {
    /// `prefix_rule(pattern=[...], decision="allow")`.
    Prefix { tokens: Vec<String> },
    /// `network_rule(host=..., protocol=..., decision=..., justification=...?)`.
    Network {
        host: String,
        protocol: String,
        /// `allow`, `prompt` or `deny`.
        decision: String,
        #[serde(default)]
        justification: Option<String>,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResponseLine {
    pub v: u32,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The line is not a request of this version.
    BadRequest,
    /// The authorization policy refuses the request.
    Unauthorized,
    /// No pending ask has that id.
    NotFound,
    /// The request was understood but cannot be done (the message says why).
    Failed,
}

impl From<&crate::asks::book::NotPending> for ErrorCode {
    /// An ask that is not in the book is not found; one answered already cannot be answered.
    fn from(err: &crate::asks::book::NotPending) -> ErrorCode {
        match err {
            crate::asks::book::NotPending::Answered { .. } => ErrorCode::Failed,
            crate::asks::book::NotPending::Unknown { .. } => ErrorCode::NotFound,
        }
    }
}

impl ResponseLine {
    pub fn ok(result: serde_json::Value) -> Self {
        ResponseLine {
            v: PROTOCOL_VERSION,
            ok: true,
            result: Some(result),
            error: None,
        }
    }

    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        ResponseLine {
            v: PROTOCOL_VERSION,
            ok: false,
            result: None,
            error: Some(ErrorBody {
                code,
                message: message.into(),
            }),
        }
    }
}

/// What a `run` client writes on its stream to get every event so far (then `flushed`).
pub const FLUSH_LINE: &str = r#"{"v":1,"op":"flush"}"#;

/// Whether a line a streaming client wrote is [`FLUSH_LINE`] (any spelling of it).
pub fn is_flush(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .is_ok_and(|v| v["v"] == PROTOCOL_VERSION && v["op"] == "flush")
}

/// One line of a stream that follows a response: `event` (a tagged type of
/// [`super::responses`]) with the protocol's version.
pub fn stream_line<E: Serialize>(event: E) -> String {
    let line = super::responses::StreamLine {
        v: PROTOCOL_VERSION,
        event,
    };
    serde_json::to_string(&line).expect("an event always serialises")
}

/// A `run` request that does not say holds its calls (as `guard run` does by default).
fn holds_by_default() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_documented() {
        let line: RequestLine =
            serde_json::from_str(r#"{"v":1,"op":"approve","id":3,"mode":"always"}"#).unwrap();
        assert_eq!(
            line.request,
            Request::Approve {
                id: 3,
                mode: ApprovalMode::Always,
                prefix: None
            }
        );
        let line: RequestLine = serde_json::from_str(
            r#"{"v":1,"op":"amend","amendment":{"kind":"network","host":"a.b","protocol":"https","decision":"allow"}}"#,
        )
        .unwrap();
        assert_eq!(line.request.action(), "amend");
        assert_eq!(line.request.entity(), "policy");
        let written = serde_json::to_string(&RequestLine {
            v: 1,
            request: Request::Deny {
                id: 9,
                always: true,
            },
        })
        .unwrap();
        assert_eq!(written, r#"{"v":1,"op":"deny","id":9,"always":true}"#);
    }

    #[test]
    fn a_run_carries_its_overlays_text_and_an_older_clients_run_has_none() {
        let line: RequestLine =
            serde_json::from_str(r#"{"v":1,"op":"run","argv":["make"]}"#).unwrap();
        assert!(matches!(line.request, Request::Run { ref overlay, .. } if overlay.is_empty()));
        let run = RequestLine {
            v: 1,
            request: Request::Run {
                argv: vec!["make".into()],
                workspace: None,
                tmpdir: None,
                hold: true,
                overlay: vec![OverlayFile {
                    name: "tight.rules".into(),
                    text: "prefix_rule(pattern=[\"curl\"], decision=\"forbidden\")\n".into(),
                }],
            },
        };
        let written = serde_json::to_string(&run).unwrap();
        assert!(
            written.contains(r#""overlay":[{"name":"tight.rules","text":"prefix_rule("#),
            "{written}"
        );
        let read: RequestLine = serde_json::from_str(&written).unwrap();
        assert_eq!(read.request, run.request);
    }

    #[test]
    fn the_flush_line_is_recognised_and_nothing_else_is() {
        assert!(is_flush(FLUSH_LINE));
        assert!(is_flush(r#"{ "op": "flush", "v": 1 }"#));
        assert!(!is_flush(r#"{"v":1,"op":"status","note":"flush"}"#));
        assert!(!is_flush("flush"));
    }

    #[test]
    fn stream_lines_carry_the_version_and_kind() {
        use super::super::responses::RunEvent;
        let line = stream_line(RunEvent::Repeated { count: 3 });
        assert_eq!(line, r#"{"v":1,"event":"repeated","count":3}"#);
        assert_eq!(
            stream_line(RunEvent::Flushed),
            r#"{"v":1,"event":"flushed"}"#
        );
    }
}
