//! Asks: each `prompt` decision of the kernel becomes a pending request a person can approve or
//! deny. Identical asks within the dedupe window are one ask (its count grows); an unanswered
//! ask expires after the configured time and is then denied. Nothing here writes a rule: what
//! an answer does to the policy is the daemon's (`approvals.rs`, amendments).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use super::ApprovalMode;
use crate::policy::NetworkProtocol;

/// What was asked for, in the terms an approval needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AskTarget {
    /// An exec: `tokens[0]` is the executed file's name (what the kernel compares), then argv.
    Exec {
        tokens: Vec<String>,
        /// A `prompt` rule decided (not the unmatched default): an allow rule cannot override
        /// it, so `--always` has no amendment to write.
        by_rule: bool,
    },
    /// A connection: the host name when the address came from one the policy names.
    Network {
        host: Option<String>,
        address: IpAddr,
        port: u16,
        transport: String,
        protocol: NetworkProtocol,
        /// A rule asked (else no rule matched: the unmatched-network default).
        by_rule: bool,
    },
    /// A connect or send to a unix socket: its address as a person reads it (`/path`, `@name`),
    /// which reads back as exactly the address the kernel saw.
    Unix {
        socket: String,
        /// A rule asked (else nothing named it: the `unmatched_unix` default).
        by_rule: bool,
        /// The rule that asked names this socket whole: a `unix_rule` allowing it would tie
        /// with it and lose (the stronger decision wins), so `--always` has no line to write.
        by_whole_name: bool,
    },
}

impl AskTarget {
    /// A prompt rule asked (not the unmatched default).
    pub fn by_rule(&self) -> bool {
        match self {
            AskTarget::Exec { by_rule, .. }
            | AskTarget::Network { by_rule, .. }
            | AskTarget::Unix { by_rule, .. } => *by_rule,
        }
    }

    /// The approvals that can answer it, as `guard approve` spells them: an exec a prompt rule
    /// asked has no `--always` (an allow rule cannot override it), nor has what a run's
    /// overlay asked (`by_overlay`: the daemon's policy is not the one that asks).
    pub fn answers(&self, by_overlay: bool) -> &'static str {
        match self {
            AskTarget::Exec { by_rule: true, .. }
            | AskTarget::Unix {
                by_whole_name: true,
                ..
            } => "[--once|--session]",
            _ if by_overlay => "[--once|--session]",
            _ => "[--once|--session|--always]",
        }
    }
}

/// The blocked-request record (`docs/policy-language.md` §7, plus the process).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedRequest {
    /// The host name, or the address when no name is known.
    pub host: String,
    /// `http`, `https`, `socks5_tcp`, `socks5_udp`, `exec`, or `unix` (`host` is then the socket).
    pub protocol: String,
    pub port: Option<u16>,
    /// §7 reason code: `not_allowed` (needs approval), `denied` (explicitly denied).
    pub reason: String,
    /// `ask` or `deny`.
    pub decision: String,
    /// `baseline_policy` (a rule decided) or `mode_guard` (the unmatched default decided).
    pub source: String,
    pub pid: u32,
    pub uid: u32,
    pub executable: String,
    pub argv: Vec<String>,
    /// RFC 3339, nanoseconds.
    pub timestamp: String,
    /// Where the deciding rule is written, when a rule decided.
    pub rule: Option<RulePlace>,
    pub justification: Option<String>,
}

/// Where a rule is written: a file and a line (schema v2 keeps them apart).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RulePlace {
    pub file: String,
    pub line: usize,
}

impl std::fmt::Display for RulePlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum AskState {
    Pending,
    Approved {
        mode: ApprovalMode,
        by: String,
    },
    Denied {
        always: bool,
        by: String,
    },
    /// Expired unanswered, and denied.
    Expired,
}

impl AskState {
    /// Its name, as `guard prompts --json` gives it (`state`).
    pub fn name(&self) -> &'static str {
        match self {
            AskState::Pending => "pending",
            AskState::Approved { .. } => "approved",
            AskState::Denied { .. } => "denied",
            AskState::Expired => "expired",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ask {
    pub id: u64,
    pub target: AskTarget,
    pub record: BlockedRequest,
    /// The sentence a person reads.
    pub message: String,
    /// How many identical requests this ask stands for.
    pub count: u64,
    #[serde(flatten)]
    pub state: AskState,
    /// Seconds until it expires (pending asks only).
    pub expires_in: Option<u64>,
    /// The scope (cgroup id) the first request came from.
    pub scope: u64,
    /// That scope was a `guard run` (a session approval ends with it).
    pub from_run: bool,
    /// Who may answer it besides the daemon's admins: the user who started the run it came
    /// from (`None`: no run, only admins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// A run's overlay (`guard run --overlay`) asked it, not the daemon's policy: an answer
    /// that amends the daemon's policy would not change what the overlay asks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_overlay: bool,
    /// The Kubernetes pod it came from (`guard node`): namespace, pod, uid, node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s: Option<serde_json::Value>,
    #[serde(skip, default = "Instant::now")]
    first_seen: Instant,
    #[serde(skip, default = "Instant::now")]
    last_seen: Instant,
    #[serde(skip)]
    resolved_at: Option<Instant>,
    /// The audit record of the request that made the ask: its answers' records repeat its
    /// process, destination and rule.
    #[serde(skip)]
    pub origin: Option<crate::audit::AuditRecord>,
}

impl Ask {
    /// The approvals that can answer it (`[--once|--session|--always]`).
    pub fn answers(&self) -> &'static str {
        self.target.answers(self.by_overlay)
    }

    pub fn is_pending(&self) -> bool {
        self.state == AskState::Pending
    }
}

/// What makes two asks the same: the target without the process.
fn key(target: &AskTarget) -> String {
    match target {
        AskTarget::Exec { tokens, .. } => format!("exec\0{}", tokens.join("\0")),
        AskTarget::Network {
            host,
            address,
            port,
            transport,
            ..
        } => format!(
            "net\0{}\0{address}\0{port}\0{transport}",
            host.as_deref().unwrap_or("")
        ),
        AskTarget::Unix { socket, .. } => format!("unix\0{socket}"),
    }
}

/// How long resolved asks stay listed (so `guard prompts` can show what just happened).
const KEEP_RESOLVED: Duration = Duration::from_secs(600);
/// The most asks kept; the oldest resolved ones go first.
const MAX_ASKS: usize = 10_000;
/// The most asks one scope may have pending at once (`[asks] max_pending_per_scope`): past it
/// a new prompt of that scope is refused at once, so one flooding scope cannot bury the asks
/// of the others.
pub const PENDING_PER_SCOPE: usize = 64;

pub struct AskBook {
    asks: BTreeMap<u64, Ask>,
    next_id: u64,
    dedupe: Duration,
    timeout: Duration,
    pending_per_scope: usize,
}

/// Why an ask cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum NotPending {
    #[error("ask {id} is not pending any more ({state})")]
    Answered { id: u64, state: &'static str },
    #[error("no ask {id} here (`guard prompts` lists the pending ones)")]
    Unknown { id: u64 },
}

/// What [`AskBook::record`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    New(u64),
    /// An identical ask is pending (or was answered within the dedupe window): counted there.
    Repeat(u64),
    /// Not asked: the scope has as many asks pending as it may (the prompt is refused at once).
    Full {
        pending: usize,
    },
}

impl Recorded {
    /// The ask it became, if it became one.
    pub fn id(self) -> Option<u64> {
        match self {
            Recorded::New(id) | Recorded::Repeat(id) => Some(id),
            Recorded::Full { .. } => None,
        }
    }
}

impl AskBook {
    pub fn new(dedupe: Duration, timeout: Duration) -> Self {
        AskBook {
            asks: BTreeMap::new(),
            next_id: 1,
            dedupe,
            timeout,
            pending_per_scope: PENDING_PER_SCOPE,
        }
    }

    /// At most `limit` asks pending per scope (at least one).
    pub fn with_pending_per_scope(mut self, limit: usize) -> Self {
        self.pending_per_scope = limit.max(1);
        self
    }

    /// The asks pending for scope `scope`.
    pub fn pending_in_scope(&self, scope: u64) -> usize {
        self.asks
            .values()
            .filter(|a| a.scope == scope && a.is_pending())
            .count()
    }

    pub fn record(
        &mut self,
        target: AskTarget,
        record: BlockedRequest,
        message: String,
        (scope, from_run): (u64, bool),
        now: Instant,
    ) -> Recorded {
        let k = key(&target);
        let dedupe = self.dedupe;
        // An ask belongs to its scope: the same request from another scope is another ask,
        // answered by whoever answers for that scope.
        if let Some(ask) = self.asks.values_mut().rev().find(|ask| {
            ask.scope == scope
                && key(&ask.target) == k
                && (ask.is_pending()
                    || ask
                        .resolved_at
                        .is_some_and(|at| now.saturating_duration_since(at) < dedupe)
                    || now.saturating_duration_since(ask.last_seen) < dedupe)
        }) {
            ask.count += 1;
            ask.last_seen = now;
            return Recorded::Repeat(ask.id);
        }
        let pending = self.pending_in_scope(scope);
        if pending >= self.pending_per_scope {
            return Recorded::Full { pending };
        }
        let id = self.next_id;
        self.next_id += 1;
        self.asks.insert(
            id,
            Ask {
                id,
                target,
                record,
                message,
                count: 1,
                state: AskState::Pending,
                expires_in: None,
                scope,
                from_run,
                owner: None,
                by_overlay: false,
                k8s: None,
                first_seen: now,
                last_seen: now,
                resolved_at: None,
                origin: None,
            },
        );
        self.prune(now);
        Recorded::New(id)
    }

    /// Says who may answer ask `id` besides the admins: the user whose run it came from.
    pub fn set_owner(&mut self, id: u64, owner: String) {
        if let Some(ask) = self.asks.get_mut(&id) {
            ask.owner = Some(owner);
        }
    }

    /// Ask `id` came from a Kubernetes pod (`guard node`): which one.
    pub fn set_k8s(&mut self, id: u64, pod: serde_json::Value) {
        if let Some(ask) = self.asks.get_mut(&id) {
            ask.k8s = Some(pod);
        }
    }

    /// Ask `id` was asked by a run's overlay.
    pub fn set_by_overlay(&mut self, id: u64) {
        if let Some(ask) = self.asks.get_mut(&id) {
            ask.by_overlay = true;
        }
    }

    /// Keeps the audit record of the request that made ask `id`.
    pub fn set_origin(&mut self, id: u64, record: crate::audit::AuditRecord) {
        if let Some(ask) = self.asks.get_mut(&id) {
            ask.origin = Some(record);
        }
    }

    /// The ask `id` with `expires_in` filled in.
    pub fn get(&self, id: u64, now: Instant) -> Option<Ask> {
        self.asks.get(&id).map(|ask| self.view(ask, now))
    }

    /// Ask `id`, to answer: it must be pending.
    pub fn pending_ask(&self, id: u64, now: Instant) -> Result<Ask, NotPending> {
        match self.get(id, now) {
            Some(ask) if ask.is_pending() => Ok(ask),
            Some(ask) => Err(NotPending::Answered {
                id,
                state: ask.state.name(),
            }),
            None => Err(NotPending::Unknown { id }),
        }
    }

    fn view(&self, ask: &Ask, now: Instant) -> Ask {
        let mut ask = ask.clone();
        if ask.is_pending() {
            let left = (ask.first_seen + self.timeout).saturating_duration_since(now);
            ask.expires_in = Some(left.as_secs());
        }
        ask
    }

    /// Pending asks, oldest first.
    pub fn pending(&self, now: Instant) -> Vec<Ask> {
        self.asks
            .values()
            .filter(|a| a.is_pending())
            .map(|a| self.view(a, now))
            .collect()
    }

    pub fn pending_count(&self) -> usize {
        self.asks.values().filter(|a| a.is_pending()).count()
    }

    /// Marks a pending ask answered; `None` if there is no pending ask `id`.
    pub fn resolve(&mut self, id: u64, state: AskState, now: Instant) -> Option<Ask> {
        let ask = self.asks.get_mut(&id).filter(|a| a.is_pending())?;
        ask.state = state;
        ask.resolved_at = Some(now);
        Some(ask.clone())
    }

    /// Whether `id` exists at all (to tell "answered already" from "no such ask").
    pub fn state(&self, id: u64) -> Option<&AskState> {
        self.asks.get(&id).map(|a| &a.state)
    }

    /// Expires pending asks older than the timeout (they become denied); returns them.
    pub fn expire(&mut self, now: Instant) -> Vec<Ask> {
        let timeout = self.timeout;
        let mut expired = Vec::new();
        for ask in self.asks.values_mut() {
            if ask.is_pending() && now.saturating_duration_since(ask.first_seen) >= timeout {
                ask.state = AskState::Expired;
                ask.resolved_at = Some(now);
                expired.push(ask.clone());
            }
        }
        self.prune(now);
        expired
    }

    fn prune(&mut self, now: Instant) {
        self.asks.retain(|_, ask| {
            ask.resolved_at
                .is_none_or(|at| now.saturating_duration_since(at) < KEEP_RESOLVED)
        });
        while self.asks.len() > MAX_ASKS {
            let oldest = self
                .asks
                .values()
                .find(|a| !a.is_pending())
                .or_else(|| self.asks.values().next())
                .map(|a| a.id);
            match oldest {
                Some(id) => self.asks.remove(&id),
                None => break,
            };
        }
    }
}

/// RFC 3339 with nanoseconds, UTC.
pub fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_nanos(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(argv: &[&str]) -> AskTarget {
        AskTarget::Exec {
            tokens: argv.iter().map(|s| s.to_string()).collect(),
            by_rule: true,
        }
    }

    fn record() -> BlockedRequest {
        BlockedRequest {
            host: String::new(),
            protocol: "exec".into(),
            port: None,
            reason: "not_allowed".into(),
            decision: "ask".into(),
            source: "baseline_policy".into(),
            pid: 1,
            uid: 0,
            executable: "/usr/bin/git".into(),
            argv: vec![],
            timestamp: timestamp(SystemTime::now()),
            rule: None,
            justification: None,
        }
    }

    #[test]
    fn only_a_pending_ask_can_be_answered_and_the_refusal_says_why() {
        let t0 = Instant::now();
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(300));
        book.record(exec(&["git", "push"]), record(), "m".into(), (7, true), t0);
        assert_eq!(book.pending_ask(1, t0).unwrap().id, 1);
        let denied = AskState::Denied {
            always: false,
            by: "root".into(),
        };
        assert_eq!(denied.name(), "denied");
        book.resolve(1, denied, t0);
        let answered = book.pending_ask(1, t0).unwrap_err();
        assert_eq!(
            answered.to_string(),
            "ask 1 is not pending any more (denied)"
        );
        let unknown = book.pending_ask(9, t0).unwrap_err();
        assert!(
            matches!(unknown, NotPending::Unknown { id: 9 }),
            "{unknown}"
        );
        assert!(unknown.to_string().contains("guard prompts"));
    }

    #[test]
    fn identical_asks_within_the_window_are_one() {
        let t0 = Instant::now();
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(300));
        let a = book.record(exec(&["git", "push"]), record(), "m".into(), (7, true), t0);
        let b = book.record(exec(&["git", "push"]), record(), "m".into(), (7, true), t0);
        let c = book.record(exec(&["git", "pull"]), record(), "m".into(), (7, true), t0);
        assert_eq!(a, Recorded::New(1));
        assert_eq!(b, Recorded::Repeat(1));
        assert_eq!(c, Recorded::New(2));
        assert_eq!(book.get(1, t0).unwrap().count, 2);
        // Denied, then asked again within the window: the same (answered) ask, no new prompt.
        book.resolve(
            1,
            AskState::Denied {
                always: false,
                by: "root".into(),
            },
            t0,
        );
        let again = book.record(
            exec(&["git", "push"]),
            record(),
            "m".into(),
            (7, true),
            t0 + Duration::from_secs(10),
        );
        assert_eq!(again, Recorded::Repeat(1));
        // Past the window: a new ask.
        let later = book.record(
            exec(&["git", "push"]),
            record(),
            "m".into(),
            (7, true),
            t0 + Duration::from_secs(200),
        );
        assert_eq!(later, Recorded::New(3));
    }

    #[test]
    fn a_flooding_scope_fills_only_its_own_share_of_pending_asks() {
        let t0 = Instant::now();
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(300))
            .with_pending_per_scope(3);
        let tokens: Vec<String> = (0..20).map(|i| format!("cmd{i}")).collect();
        let flood: Vec<Recorded> = tokens
            .iter()
            .map(|t| book.record(exec(&[t]), record(), "m".into(), (7, true), t0))
            .collect();
        assert_eq!(flood.iter().filter_map(|r| r.id()).count(), 3);
        assert_eq!(flood[3], Recorded::Full { pending: 3 });
        // A repeat of a pending ask is still counted on it; another scope still asks.
        assert_eq!(
            book.record(exec(&["cmd0"]), record(), "m".into(), (7, true), t0),
            Recorded::Repeat(1)
        );
        assert_eq!(
            book.record(exec(&["other"]), record(), "m".into(), (9, true), t0),
            Recorded::New(4)
        );
        // An answer makes room in its scope.
        book.resolve(
            1,
            AskState::Denied {
                always: false,
                by: "root".into(),
            },
            t0,
        );
        assert_eq!(
            book.record(exec(&["cmd5"]), record(), "m".into(), (7, true), t0),
            Recorded::New(5)
        );
        assert_eq!(book.pending_in_scope(7), 3);
    }

    #[test]
    fn unanswered_asks_expire_denied_and_cannot_be_answered_after() {
        let t0 = Instant::now();
        let mut book = AskBook::new(Duration::from_secs(5), Duration::from_secs(30));
        book.record(exec(&["curl"]), record(), "m".into(), (7, true), t0);
        assert_eq!(book.get(1, t0).unwrap().expires_in, Some(30));
        assert!(book.expire(t0 + Duration::from_secs(29)).is_empty());
        let expired = book.expire(t0 + Duration::from_secs(30));
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].state, AskState::Expired);
        assert_eq!(book.pending_count(), 0);
        assert!(
            book.resolve(
                1,
                AskState::Approved {
                    mode: ApprovalMode::Always,
                    by: "root".into()
                },
                t0
            )
            .is_none()
        );
        assert_eq!(book.state(1), Some(&AskState::Expired));
    }

    #[test]
    fn timestamps_are_rfc3339_with_nanoseconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        assert_eq!(timestamp(t), "2023-11-14T22:13:20.000000005Z");
    }

    #[test]
    fn the_same_request_from_another_scope_is_another_ask() {
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(300));
        let t0 = Instant::now();
        let mine = book.record(exec(&["git", "push"]), record(), "m".into(), (7, true), t0);
        let theirs = book.record(exec(&["git", "push"]), record(), "m".into(), (9, true), t0);
        assert_ne!(mine.id(), theirs.id(), "asks belong to their scope");
        let again = book.record(exec(&["git", "push"]), record(), "m".into(), (7, true), t0);
        assert_eq!(again, Recorded::Repeat(mine.id().unwrap()));
        let scopes: Vec<u64> = book.pending(t0).iter().map(|a| a.scope).collect();
        assert_eq!(scopes, [7, 9]);
    }
}
