//! `guard replay`: the kernel decisions an audit log recorded, decided again by a draft policy
//! the way the kernel would decide them, to show what enforcing the draft would change.
//!
//! Reading groups identical requests as it goes (memory grows with distinct requests, not with
//! records); replaying decides each group once. What it can and cannot see:
//!
//! - Only what the kernel recorded: refusals, prompts and audit-only matches, and allowed
//!   requests only when the daemon is set to record them. A request the recording never saw
//!   cannot be newly refused.
//! - Token 0 of an exec is the file name of `process.exe` (the path given to execve); the
//!   kernel uses the executed file's own name, which differs when that path is a symlink.
//! - Host names resolve to the addresses recorded with them (`destination.host`), so a draft
//!   rule naming a host the recording never named matches nothing.
//! - Outcomes are compared as the process met them: an audit-only refusal let the call through,
//!   so it counts as allowed (and enforcing it is "newly refused").

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::record::{AuditRecord, RecordType, RuleRef, SCHEMA_VERSION};
use guard_common::engine::outcome::Outcome as KernelOutcome;
use guard_common::event::flag;
use guard_common::maps::ExecIdentity;

use crate::compile::kernel_engine::KernelEngine;
use crate::compile::{CompileEnv, HostResolver, KernelRule, compile};
use crate::policy::host::{host_covers, is_host_pattern, normalize_network_host};
use crate::policy::rule::canonical_ip;
use crate::policy::{Decision, Policy, RuleKind, Transport, render_example};

/// One request the kernel decided, as the draft is asked about it again.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Request {
    /// `command[0]` is `process.exe`, the rest is `argv[1..]`.
    Exec {
        command: Vec<String>,
        /// The record held only part of argv: the kernel decided on all of it.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        argv_truncated: bool,
    },
    Destination {
        #[serde(skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        address: IpAddr,
        port: u16,
        transport: Transport,
    },
}

impl Request {
    /// A command line shell-quoted as `guard check` shows it, or `host (address):port/transport`.
    pub fn render(&self) -> String {
        match self {
            Request::Exec {
                command,
                argv_truncated,
            } => {
                let rendered = render_example(command);
                if *argv_truncated {
                    format!("{rendered} [argv truncated]")
                } else {
                    rendered
                }
            }
            Request::Destination {
                host,
                address,
                port,
                transport,
            } => match (host, address) {
                (Some(host), address) => format!("{host} ({address}):{port}/{transport}"),
                (None, IpAddr::V6(address)) => format!("[{address}]:{port}/{transport}"),
                (None, address) => format!("{address}:{port}/{transport}"),
            },
        }
    }

    pub fn kind(&self) -> RequestKind {
        match self {
            Request::Exec { .. } => RequestKind::Exec,
            Request::Destination { .. } => RequestKind::Destination,
        }
    }
}

/// Which of the kernel's decisions a request is, and so which unmatched default applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    Exec,
    Destination,
}

/// A decision and whether it was (or would be) enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Outcome {
    pub decision: Decision,
    /// False for audit-only: recorded, and the call went through.
    pub enforced: bool,
}

impl Outcome {
    /// What the process meets: an unenforced refusal lets the call through.
    pub fn effective(self) -> Decision {
        if self.enforced {
            self.decision
        } else {
            Decision::Allow
        }
    }
}

/// What enforcing the draft would change for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Went through; the draft asks or refuses.
    NewlyRefused,
    /// Was asked about or refused; the draft lets it through.
    NewlyAllowed,
    /// Prompt became forbidden, or forbidden became prompt.
    Changed,
    Unchanged,
}

impl Class {
    pub fn classify(recorded: Outcome, draft: Outcome) -> Class {
        match (recorded.effective(), draft.effective()) {
            (was, now) if was == now => Class::Unchanged,
            (Decision::Allow, _) => Class::NewlyRefused,
            (_, Decision::Allow) => Class::NewlyAllowed,
            _ => Class::Changed,
        }
    }

    /// `newly refused`, as section titles and summaries say it.
    pub fn title(self) -> &'static str {
        match self {
            Class::NewlyRefused => "newly refused",
            Class::NewlyAllowed => "newly allowed",
            Class::Changed => "changed",
            Class::Unchanged => "unchanged",
        }
    }
}

/// The draft rule that decides a request, as a person finds it in the files.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct DecidingRule {
    pub kind: RuleKind,
    /// Where it was written; absent for a rule added in memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The rule as it would be written.
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub justification: Option<String>,
}

impl DecidingRule {
    /// `file:line`, or what the rule is when it has no place.
    pub fn location(&self) -> String {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => format!("{file}:{line}"),
            _ => format!("{} (added in memory)", self.kind),
        }
    }

    /// The kernel rule that decided, as the image holds it.
    fn kernel(rule: &KernelRule) -> Self {
        DecidingRule {
            kind: rule.kind,
            file: rule.origin.as_ref().map(|origin| origin.file.to_string()),
            line: rule.origin.as_ref().map(|origin| origin.line),
            text: rule.text.clone(),
            justification: rule.justification.clone(),
        }
    }
}

/// What the draft decides for a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DraftVerdict {
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The deciding rule; absent when the draft's unmatched default decides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<DecidingRule>,
}

/// What the recording says was decided for a group of identical requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecordedVerdict {
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The rule that decided, in the policy of the latest of these records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleRef>,
}

/// Identical requests with one recorded outcome, replayed against the draft.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayedRequest {
    pub class: Class,
    pub request: Request,
    /// [`Request::render`].
    pub text: String,
    /// How many records it was.
    pub count: u64,
    pub first_time: String,
    pub last_time: String,
    pub recorded: RecordedVerdict,
    pub draft: DraftVerdict,
}

/// Counts from reading the audit files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReadTotals {
    pub files: usize,
    /// Non-blank lines.
    pub lines: u64,
    /// Lines that are records.
    pub records: u64,
    /// Lines that are not records (a torn last line after a crash, garbage).
    pub skipped_lines: u64,
    pub decision_records: u64,
    /// Decision records that cannot be replayed: another schema version, no process or
    /// destination, an unknown decision, event, address or transport.
    pub unusable_decision_records: u64,
    /// Decision records of allowed requests (the daemon writes them only when set to).
    pub allowed_records: u64,
}

/// How many requests (groups) and records fell in one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClassTotals {
    pub requests: usize,
    pub records: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    #[serde(flatten)]
    pub read: ReadTotals,
    /// Distinct requests replayed.
    pub requests: usize,
    pub newly_refused: ClassTotals,
    pub newly_allowed: ClassTotals,
    pub changed: ClassTotals,
    pub unchanged: ClassTotals,
}

impl Totals {
    /// Requests whose outcome the draft changes.
    pub fn changes(&self) -> usize {
        self.newly_refused.requests + self.newly_allowed.requests + self.changed.requests
    }

    fn class_mut(&mut self, class: Class) -> &mut ClassTotals {
        match class {
            Class::NewlyRefused => &mut self.newly_refused,
            Class::NewlyAllowed => &mut self.newly_allowed,
            Class::Changed => &mut self.changed,
            Class::Unchanged => &mut self.unchanged,
        }
    }
}

/// The draft's decisions where no rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct UnmatchedDefaults {
    pub exec: Decision,
    pub network: Decision,
    /// The draft is in audit-only mode: it enforces nothing.
    pub audit_only: bool,
}

/// One request a draft rule (or unmatched default) now decides differently.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleRequest {
    pub class: Class,
    pub count: u64,
    pub text: String,
}

/// The changes one draft rule makes; `rule` absent: the draft's unmatched default for `kind`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RuleChanges {
    pub kind: RequestKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<DecidingRule>,
    /// The decision the rule (or default) gives these requests.
    pub decision: Decision,
    pub requests: Vec<RuleRequest>,
}

impl RuleChanges {
    /// `file:line`, or `unmatched default`.
    pub fn location(&self) -> String {
        self.rule
            .as_ref()
            .map_or_else(|| "unmatched default".to_string(), DecidingRule::location)
    }
}

/// What enforcing the draft would change, request by request and rule by rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    pub totals: Totals,
    pub unmatched_defaults: UnmatchedDefaults,
    /// Each list: most records first.
    pub newly_refused: Vec<ReplayedRequest>,
    pub newly_allowed: Vec<ReplayedRequest>,
    pub changed: Vec<ReplayedRequest>,
    pub unchanged: Vec<ReplayedRequest>,
    /// The draft rules that decide a changed request, in file and line order; unmatched
    /// defaults last.
    pub by_rule: Vec<RuleChanges>,
}

impl ReplayReport {
    pub fn requests(&self, class: Class) -> &[ReplayedRequest] {
        match class {
            Class::NewlyRefused => &self.newly_refused,
            Class::NewlyAllowed => &self.newly_allowed,
            Class::Changed => &self.changed,
            Class::Unchanged => &self.unchanged,
        }
    }
}

/// An audit file that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the audit file {}: {source}", path.display())]
pub struct ReadError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Identical requests with one recorded outcome, as read so far.
#[derive(Clone, Debug)]
struct Group {
    request: Request,
    recorded: Outcome,
    count: u64,
    first_time: String,
    last_time: String,
    /// The rule of the latest record.
    recorded_rule: Option<RuleRef>,
}

/// Every host name the recording names, with the addresses recorded for it: the draft's host
/// names resolve to what they resolved to when the kernel decided.
#[derive(Clone, Debug, Default)]
pub struct RecordedAddresses {
    by_host: HashMap<String, Vec<IpAddr>>,
}

impl RecordedAddresses {
    fn add(&mut self, host: &str, address: IpAddr) {
        let addresses = self.by_host.entry(host.to_string()).or_default();
        if !addresses.contains(&address) {
            addresses.push(address);
        }
    }
}

impl HostResolver for RecordedAddresses {
    /// A host pattern (`*.example.com`) has the addresses of every recorded name it covers.
    fn lookup(&self, host: &str) -> Vec<IpAddr> {
        if is_host_pattern(host) {
            let mut out: Vec<IpAddr> = self
                .by_host
                .iter()
                .filter(|(name, _)| host_covers(host, name))
                .flat_map(|(_, addrs)| addrs.iter().copied())
                .collect();
            out.sort();
            out.dedup();
            return out;
        }
        self.by_host.get(host).cloned().unwrap_or_default()
    }
}

fn normalised_host(host: &str) -> String {
    normalize_network_host(host).unwrap_or_else(|_| host.to_string())
}

/// The decision records of one or more audit files, grouped into requests.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    groups: Vec<Group>,
    index: HashMap<(Request, Outcome), usize>,
    addresses: RecordedAddresses,
    pub totals: ReadTotals,
}

impl Recording {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads every file, in order.
    pub fn read_files(paths: &[PathBuf]) -> Result<Recording, ReadError> {
        let mut recording = Recording::new();
        for path in paths {
            recording.read_file(path)?;
        }
        Ok(recording)
    }

    /// Reads one file's lines (JSON lines; other lines are counted and skipped).
    pub fn read_file(&mut self, path: &Path) -> Result<(), ReadError> {
        let error = |source| ReadError {
            path: path.to_path_buf(),
            source,
        };
        let mut reader = BufReader::new(File::open(path).map_err(error)?);
        let mut line = Vec::new();
        // Bytes, not `lines()`: one line of invalid UTF-8 is a skipped line, not a failed file.
        while reader.read_until(b'\n', &mut line).map_err(error)? > 0 {
            self.add_line(&line);
            line.clear();
        }
        self.totals.files += 1;
        Ok(())
    }

    /// One line of an audit file; blank lines are not counted.
    pub fn add_line(&mut self, raw: &[u8]) {
        let Ok(text) = std::str::from_utf8(raw) else {
            self.totals.lines += 1;
            self.totals.skipped_lines += 1;
            return;
        };
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        self.totals.lines += 1;
        match AuditRecord::parse(text) {
            Some(record) => self.add_record(&record),
            None => self.totals.skipped_lines += 1,
        }
    }

    pub fn add_record(&mut self, record: &AuditRecord) {
        self.totals.records += 1;
        if record.kind != RecordType::Decision {
            return;
        }
        self.totals.decision_records += 1;
        let Some((request, recorded)) = replayable(record) else {
            self.totals.unusable_decision_records += 1;
            return;
        };
        if recorded.decision == Decision::Allow {
            self.totals.allowed_records += 1;
        }
        if let Request::Destination {
            host: Some(host),
            address,
            ..
        } = &request
        {
            self.addresses.add(host, *address);
            // Every name guard's resolver answered the address for: a draft's rule (or host
            // pattern) for any of them decides the connect as the kernel would have.
            for name in record.destination.iter().flat_map(|d| &d.hosts) {
                self.addresses.add(&normalised_host(name), *address);
            }
        }
        self.add_to_group(request, recorded, record);
    }

    fn add_to_group(&mut self, request: Request, recorded: Outcome, record: &AuditRecord) {
        let key = (request, recorded);
        let Some(&slot) = self.index.get(&key) else {
            self.index.insert(key.clone(), self.groups.len());
            self.groups.push(Group {
                request: key.0,
                recorded,
                count: 1,
                first_time: record.time.clone(),
                last_time: record.time.clone(),
                recorded_rule: record.rule.clone(),
            });
            return;
        };
        let group = &mut self.groups[slot];
        group.count += 1;
        // RFC 3339 UTC times of one width compare as text; files may come in any order.
        if record.time < group.first_time {
            group.first_time = record.time.clone();
        }
        if record.time >= group.last_time {
            group.last_time = record.time.clone();
            group.recorded_rule = record.rule.clone();
        }
    }
}

/// The request and recorded outcome of a decision record, if it can be replayed.
fn replayable(record: &AuditRecord) -> Option<(Request, Outcome)> {
    if record.v != SCHEMA_VERSION {
        return None;
    }
    let recorded = Outcome {
        decision: Decision::from_rules_str(record.decision.as_deref()?)?,
        enforced: !record.audit_only.unwrap_or(false),
    };
    let request = match record.event.as_deref()? {
        "exec" => exec_request(record)?,
        "connect" | "sendmsg" => destination_request(record)?,
        _ => return None,
    };
    Some((request, recorded))
}

fn exec_request(record: &AuditRecord) -> Option<Request> {
    let process = record.process.as_ref()?;
    if process.exe.is_empty() {
        return None;
    }
    // Token 0 is the executed file, never argv[0], which the caller chooses.
    let command = std::iter::once(process.exe.clone())
        .chain(process.argv.iter().skip(1).cloned())
        .collect();
    Some(Request::Exec {
        command,
        argv_truncated: process.argv_truncated,
    })
}

fn destination_request(record: &AuditRecord) -> Option<Request> {
    let destination = record.destination.as_ref()?;
    let address = canonical_ip(destination.address.parse().ok()?);
    let transport = match Transport::parse(&destination.transport)? {
        Transport::Any => return None,
        transport => transport,
    };
    // The policy's name for the address, else the first name the program asked for; normalised
    // the way the draft's rules are, so that lookups by their names find it.
    let host = destination
        .host
        .as_deref()
        .or(destination.hosts.first().map(String::as_str))
        .map(normalised_host);
    Some(Request::Destination {
        host,
        address,
        port: destination.port,
        transport,
    })
}

/// Decides every recorded request again with `draft`, as the kernel would: the kernel's own
/// decision code ([`KernelEngine`]) over the draft's image, its names resolved to the
/// recorded addresses. `Err` for a draft the kernel would refuse to hold.
pub fn replay(draft: &Policy, recording: &Recording) -> anyhow::Result<ReplayReport> {
    // A recorded exec is known by its path: take it to be the file its name resolves to.
    let env = CompileEnv {
        names_are_their_files: true,
        ..CompileEnv::default()
    };
    let image = compile(draft, &recording.addresses, &env);
    let engine = KernelEngine::new(image)?;
    let replayed: Vec<ReplayedRequest> = recording
        .groups
        .iter()
        .map(|group| replay_group(&engine, group))
        .collect();
    Ok(build_report(draft, recording.totals, replayed))
}

fn replay_group(engine: &KernelEngine, group: &Group) -> ReplayedRequest {
    let verdict = draft_verdict(engine, &group.request);
    ReplayedRequest {
        class: Class::classify(group.recorded, verdict.outcome),
        text: group.request.render(),
        request: group.request.clone(),
        count: group.count,
        first_time: group.first_time.clone(),
        last_time: group.last_time.clone(),
        recorded: RecordedVerdict {
            outcome: group.recorded,
            rule: group.recorded_rule.clone(),
        },
        draft: verdict,
    }
}

/// The draft's decision as the kernel makes it; the draft's audit-only mode or an audit-only
/// deciding rule means it would not be enforced.
fn draft_verdict(engine: &KernelEngine, request: &Request) -> DraftVerdict {
    let decided = match request {
        Request::Exec { command, .. } => {
            let exe = Path::new(&command[0]);
            let name = exe
                .file_name()
                .map_or(command[0].clone(), |n| n.to_string_lossy().into_owned());
            // Recorded elsewhere, maybe: the file is known by its name only.
            engine.exec(ExecIdentity { dev: 0, ino: 0 }, &name, command)
        }
        Request::Destination {
            address,
            port,
            transport,
            ..
        } => engine.destination(*address, *port, *transport),
    };
    let verdict = decided.verdict;
    let rule = (decided.flags & flag::UNMATCHED == 0)
        .then(|| engine.image.rules.get(verdict.rule as usize))
        .flatten()
        .map(DecidingRule::kernel);
    DraftVerdict {
        outcome: Outcome {
            // Not a code the encoder writes: the strongest answer.
            decision: Decision::from_code(verdict.decision).unwrap_or(Decision::Forbidden),
            enforced: !KernelOutcome::of(engine.settings(), verdict).audit_only,
        },
        rule,
    }
}

fn build_report(
    draft: &Policy,
    read: ReadTotals,
    mut replayed: Vec<ReplayedRequest>,
) -> ReplayReport {
    // Most records first; then the oldest, then by text, so the order is stable.
    replayed.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.first_time.cmp(&b.first_time))
            .then_with(|| a.text.cmp(&b.text))
    });
    let mut totals = Totals {
        read,
        requests: replayed.len(),
        ..Totals::default()
    };
    for request in &replayed {
        let class = totals.class_mut(request.class);
        class.requests += 1;
        class.records += request.count;
    }
    let by_rule = changes_by_rule(&replayed);
    let mut lists: HashMap<Class, Vec<ReplayedRequest>> = HashMap::new();
    for request in replayed {
        lists.entry(request.class).or_default().push(request);
    }
    let mut take = |class| lists.remove(&class).unwrap_or_default();
    let enforcement = draft.enforcement();
    ReplayReport {
        totals,
        unmatched_defaults: UnmatchedDefaults {
            exec: enforcement.unmatched_exec,
            network: enforcement.unmatched_network,
            audit_only: enforcement.audit_only,
        },
        newly_refused: take(Class::NewlyRefused),
        newly_allowed: take(Class::NewlyAllowed),
        changed: take(Class::Changed),
        unchanged: take(Class::Unchanged),
        by_rule,
    }
}

/// The changed requests under the draft rule (or unmatched default) that decides them.
fn changes_by_rule(replayed: &[ReplayedRequest]) -> Vec<RuleChanges> {
    let mut by_rule: Vec<RuleChanges> = Vec::new();
    let mut index: HashMap<(RequestKind, Option<DecidingRule>), usize> = HashMap::new();
    for request in replayed.iter().filter(|r| r.class != Class::Unchanged) {
        let key = (request.request.kind(), request.draft.rule.clone());
        let slot = *index.entry(key).or_insert_with(|| {
            by_rule.push(RuleChanges {
                kind: request.request.kind(),
                rule: request.draft.rule.clone(),
                decision: request.draft.outcome.decision,
                requests: Vec::new(),
            });
            by_rule.len() - 1
        });
        by_rule[slot].requests.push(RuleRequest {
            class: request.class,
            count: request.count,
            text: request.text.clone(),
        });
    }
    by_rule.sort_by(|a, b| rule_order(a).cmp(&rule_order(b)));
    by_rule
}

/// Rules by file and line (then text: one line's first-token expansions), defaults last.
fn rule_order(changes: &RuleChanges) -> (bool, Option<&str>, Option<usize>, &str, RequestKind) {
    let rule = changes.rule.as_ref();
    (
        rule.is_none(),
        rule.and_then(|rule| rule.file.as_deref()),
        rule.and_then(|rule| rule.line),
        rule.map_or("", |rule| rule.text.as_str()),
        changes.kind,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::{DestinationInfo, ProcessInfo};
    use crate::policy::PolicyParser;

    fn draft(src: &str) -> Policy {
        let mut parser = PolicyParser::new();
        parser.parse("draft.rules", src).expect("the draft parses");
        parser.build()
    }

    fn decision_record(time: &str, decision: &str, audit_only: bool) -> AuditRecord {
        AuditRecord {
            v: SCHEMA_VERSION,
            seq: 1,
            time: time.into(),
            host: "box".into(),
            kind: RecordType::Decision,
            owner: "alice".into(),
            decision: Some(decision.into()),
            action: Some(
                if audit_only || decision == "allow" {
                    "none"
                } else {
                    "eperm"
                }
                .into(),
            ),
            audit_only: audit_only.then_some(true),
            ..Default::default()
        }
    }

    fn exec(time: &str, exe: &str, argv: &[&str], decision: &str, audit_only: bool) -> AuditRecord {
        AuditRecord {
            event: Some("exec".into()),
            process: Some(ProcessInfo {
                exe: exe.into(),
                argv: argv.iter().map(|arg| arg.to_string()).collect(),
                comm: "x".into(),
                ..Default::default()
            }),
            ..decision_record(time, decision, audit_only)
        }
    }

    fn connect(
        time: &str,
        host: Option<&str>,
        address: &str,
        port: u16,
        decision: &str,
    ) -> AuditRecord {
        AuditRecord {
            event: Some("connect".into()),
            destination: Some(DestinationInfo {
                host: host.map(str::to_string),
                hosts: Vec::new(),
                address: address.into(),
                port,
                transport: "tcp".into(),
                protocol: "https".into(),
            }),
            ..decision_record(time, decision, false)
        }
    }

    fn recording(records: &[AuditRecord]) -> Recording {
        let mut recording = Recording::new();
        for record in records {
            recording.add_record(record);
        }
        recording
    }

    const ALLOW: Outcome = Outcome {
        decision: Decision::Allow,
        enforced: true,
    };
    const PROMPT: Outcome = Outcome {
        decision: Decision::Prompt,
        enforced: true,
    };
    const FORBIDDEN: Outcome = Outcome {
        decision: Decision::Forbidden,
        enforced: true,
    };
    const FORBIDDEN_AUDIT_ONLY: Outcome = Outcome {
        decision: Decision::Forbidden,
        enforced: false,
    };

    #[test]
    fn classes_compare_what_the_process_met() {
        for (recorded, draft, want) in [
            (ALLOW, PROMPT, Class::NewlyRefused),
            (ALLOW, FORBIDDEN, Class::NewlyRefused),
            (FORBIDDEN_AUDIT_ONLY, FORBIDDEN, Class::NewlyRefused),
            (PROMPT, ALLOW, Class::NewlyAllowed),
            (FORBIDDEN, ALLOW, Class::NewlyAllowed),
            (FORBIDDEN, FORBIDDEN_AUDIT_ONLY, Class::NewlyAllowed),
            (PROMPT, FORBIDDEN, Class::Changed),
            (FORBIDDEN, PROMPT, Class::Changed),
            (FORBIDDEN, FORBIDDEN, Class::Unchanged),
            (ALLOW, FORBIDDEN_AUDIT_ONLY, Class::Unchanged),
            (ALLOW, ALLOW, Class::Unchanged),
        ] {
            assert_eq!(
                Class::classify(recorded, draft),
                want,
                "{recorded:?} -> {draft:?}"
            );
        }
    }

    #[test]
    fn identical_requests_group_by_the_executed_file_and_the_recorded_outcome() {
        let recording = recording(&[
            exec(
                "2026-01-02T00:00:00.000000000Z",
                "/usr/bin/git",
                &["git", "push"],
                "prompt",
                false,
            ),
            // argv[0] is the caller's choice: the same request.
            exec(
                "2026-01-01T00:00:00.000000000Z",
                "/usr/bin/git",
                &["/usr/bin/git", "push"],
                "prompt",
                false,
            ),
            exec(
                "2026-01-03T00:00:00.000000000Z",
                "/usr/bin/git",
                &["git", "push"],
                "prompt",
                false,
            ),
            // Another outcome, another file: groups of their own.
            exec(
                "2026-01-04T00:00:00.000000000Z",
                "/usr/bin/git",
                &["git", "push"],
                "forbidden",
                false,
            ),
            exec(
                "2026-01-04T00:00:00.000000000Z",
                "/opt/git",
                &["git", "push"],
                "prompt",
                false,
            ),
        ]);
        let report = replay(&draft(""), &recording).unwrap();
        assert_eq!(report.totals.requests, 3);
        let first = &report.newly_allowed[0];
        assert_eq!(first.text, "/usr/bin/git push");
        assert_eq!(first.count, 3);
        assert_eq!(first.recorded.outcome, PROMPT);
        assert_eq!(first.first_time, "2026-01-01T00:00:00.000000000Z");
        assert_eq!(first.last_time, "2026-01-03T00:00:00.000000000Z");
        assert_eq!(
            report.totals.newly_allowed,
            ClassTotals {
                requests: 3,
                records: 5
            }
        );
    }

    #[test]
    fn a_connect_is_decided_for_the_names_guards_resolver_answered_its_address_for() {
        let policy = draft(
            r#"enforcement(unmatched_network="deny")
address_rule(addresses=["*.cdn.test"], ports=[443], decision="allow")
"#,
        );
        let mut answered = connect("t1", None, "192.0.2.7", 443, "prompt");
        answered.destination.as_mut().unwrap().hosts = vec!["img.cdn.test".into()];
        let unknown = connect("t2", None, "192.0.2.8", 443, "prompt");
        let report = replay(&policy, &recording(&[answered, unknown])).unwrap();
        let allowed: Vec<(String, Option<String>)> = report
            .newly_allowed
            .iter()
            .map(|r| {
                (
                    r.text.clone(),
                    r.draft.rule.as_ref().map(DecidingRule::location),
                )
            })
            .collect();
        assert_eq!(allowed.len(), 1, "{allowed:?}");
        assert!(allowed[0].0.contains("img.cdn.test"), "{allowed:?}");
        assert_eq!(allowed[0].1.as_deref(), Some("draft.rules:2"));
        // No name answered for the other address: the draft's default refuses it.
        assert_eq!(report.changed.len(), 1);
    }

    #[test]
    fn the_draft_decides_as_the_kernel_and_names_its_rule() {
        let policy = draft(
            r#"prefix_rule(pattern=["git", "push"], decision="forbidden")
prefix_rule(pattern=["curl"], decision="allow")
prefix_rule(pattern=["rm"], decision="prompt", audit_only=True)
enforcement(unmatched_exec="prompt")
"#,
        );
        let recording = recording(&[
            // Audit-only before, enforced by the draft.
            exec(
                "t1",
                "/usr/bin/git",
                &["git", "push", "origin"],
                "forbidden",
                true,
            ),
            exec(
                "t1",
                "/usr/bin/git",
                &["git", "push", "origin"],
                "forbidden",
                true,
            ),
            exec("t2", "/usr/bin/curl", &["curl", "-s", "x"], "prompt", false),
            exec("t3", "/usr/bin/make", &["make"], "forbidden", false),
            exec("t4", "/usr/bin/rm", &["rm", "-rf", "b"], "allow", false),
            exec("t5", "/usr/bin/ls", &["ls"], "prompt", false),
        ]);
        let report = replay(&policy, &recording).unwrap();
        let summary = |list: &[ReplayedRequest]| -> Vec<(String, u64, Option<String>)> {
            list.iter()
                .map(|r| {
                    (
                        r.text.clone(),
                        r.count,
                        r.draft.rule.as_ref().map(DecidingRule::location),
                    )
                })
                .collect()
        };
        assert_eq!(
            summary(&report.newly_refused),
            [(
                "/usr/bin/git push origin".to_string(),
                2,
                Some("draft.rules:1".to_string())
            )]
        );
        assert_eq!(
            summary(&report.newly_allowed),
            [(
                "/usr/bin/curl -s x".to_string(),
                1,
                Some("draft.rules:2".to_string())
            )]
        );
        assert_eq!(
            summary(&report.changed),
            [("/usr/bin/make".to_string(), 1, None)]
        );
        // The audit-only rm rule lets it through, as before; ls prompts, as before.
        assert_eq!(report.unchanged.len(), 2);
        let rm = report
            .unchanged
            .iter()
            .find(|r| r.text.contains("rm"))
            .unwrap();
        assert_eq!(
            rm.draft.outcome,
            Outcome {
                decision: Decision::Prompt,
                enforced: false
            }
        );
        assert_eq!(report.totals.changes(), 3);
        assert_eq!(report.unmatched_defaults.exec, Decision::Prompt);

        let rules: Vec<(String, Decision, Vec<Class>)> = report
            .by_rule
            .iter()
            .map(|changes| {
                (
                    changes.location(),
                    changes.decision,
                    changes.requests.iter().map(|r| r.class).collect(),
                )
            })
            .collect();
        assert_eq!(
            rules,
            [
                (
                    "draft.rules:1".to_string(),
                    Decision::Forbidden,
                    vec![Class::NewlyRefused]
                ),
                (
                    "draft.rules:2".to_string(),
                    Decision::Allow,
                    vec![Class::NewlyAllowed]
                ),
                (
                    "unmatched default".to_string(),
                    Decision::Prompt,
                    vec![Class::Changed]
                ),
            ]
        );
    }

    #[test]
    fn names_resolve_to_the_addresses_recorded_with_them() {
        let policy = draft(
            r#"network_rule(host="api.example.com", protocol="https", decision="allow")
network_rule(host="never.example.com", protocol="https", decision="deny")
address_rule(addresses=["198.51.100.0/24"], decision="deny", ports=[22])
"#,
        );
        let recording = recording(&[
            connect(
                "t1",
                Some("API.example.com"),
                "203.0.113.5",
                443,
                "forbidden",
            ),
            // The same address without its name: the name's rule still reaches it.
            connect("t2", None, "::ffff:203.0.113.5", 443, "prompt"),
            // Nothing recorded never.example.com's addresses: its rule cannot match.
            connect("t3", None, "192.0.2.1", 443, "allow"),
            connect("t4", None, "198.51.100.7", 22, "allow"),
        ]);
        let report = replay(&policy, &recording).unwrap();
        let texts =
            |list: &[ReplayedRequest]| list.iter().map(|r| r.text.clone()).collect::<Vec<_>>();
        assert_eq!(
            texts(&report.newly_allowed),
            [
                "api.example.com (203.0.113.5):443/tcp",
                "203.0.113.5:443/tcp"
            ]
        );
        assert!(
            report
                .newly_allowed
                .iter()
                .all(|r| r.draft.rule.as_ref().unwrap().line == Some(1))
        );
        assert_eq!(texts(&report.newly_refused), ["198.51.100.7:22/tcp"]);
        assert_eq!(
            report.newly_refused[0].draft.rule.as_ref().unwrap().kind,
            RuleKind::Address
        );
        assert_eq!(texts(&report.unchanged), ["192.0.2.1:443/tcp"]);
        assert_eq!(report.totals.read.allowed_records, 2);
    }

    #[test]
    fn every_file_is_read_and_what_is_not_a_replayable_decision_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let line = |record: &AuditRecord| serde_json::to_string(record).unwrap();
        let reload = AuditRecord {
            v: SCHEMA_VERSION,
            kind: RecordType::Reload,
            ..Default::default()
        };
        let newer = AuditRecord {
            v: SCHEMA_VERSION + 1,
            ..exec("t0", "/usr/bin/git", &["git"], "prompt", false)
        };
        let no_process = decision_record("t0", "prompt", false);
        let first = dir.path().join("audit.jsonl.1");
        std::fs::write(
            &first,
            format!(
                "{}\n{}\n\n{}\n{}\n",
                line(&exec(
                    "t1",
                    "/usr/bin/git",
                    &["git", "push"],
                    "prompt",
                    false
                )),
                line(&reload),
                line(&newer),
                line(&no_process),
            ),
        )
        .unwrap();
        let second = dir.path().join("audit.jsonl");
        let torn = line(&exec(
            "t3",
            "/usr/bin/git",
            &["git", "push"],
            "prompt",
            false,
        ));
        let mut bytes = format!(
            "{}\n",
            line(&exec(
                "t2",
                "/usr/bin/git",
                &["git", "push"],
                "prompt",
                false
            ))
        )
        .into_bytes();
        bytes.extend_from_slice(b"\xff\xfe not text\n");
        bytes.extend_from_slice(&torn.as_bytes()[..torn.len() / 2]);
        std::fs::write(&second, bytes).unwrap();

        let recording = Recording::read_files(&[first.clone(), second]).unwrap();
        assert_eq!(
            recording.totals,
            ReadTotals {
                files: 2,
                lines: 7,
                records: 5,
                skipped_lines: 2,
                decision_records: 4,
                unusable_decision_records: 2,
                allowed_records: 0,
            }
        );
        let report = replay(&draft(""), &recording).unwrap();
        assert_eq!(report.totals.requests, 1);
        assert_eq!(report.newly_allowed[0].count, 2);
        assert_eq!(report.newly_allowed[0].last_time, "t2");

        let missing = dir.path().join("gone.jsonl");
        let err = Recording::read_files(&[first, missing.clone()]).unwrap_err();
        assert_eq!(err.path, missing);
        assert!(
            err.to_string().starts_with(&format!(
                "cannot read the audit file {}: ",
                missing.display()
            )),
            "{err}"
        );
    }
}
