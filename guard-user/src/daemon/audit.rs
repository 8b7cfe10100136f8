//! The daemon's side of the audit log: it numbers every record, hands it to the writer thread
//! (`audit::writer`), streams it to the clients following the log (each sees only the records
//! its authorization allows), and accounts for every record lost on the way: the kernel's ring
//! buffer full, the writer's queue full, a write that failed, a follower too slow.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use serde_json::Value;
use tokio::sync::mpsc;

use super::audit_budget::ScopeBudget;
use super::peer::user_name;
use super::wire::protocol::stream_line;
use super::wire::responses::{AuditEvent, AuditStatus, OtlpStatus, SyslogStatus};
use crate::asks::messages::destination_host;
use crate::asks::protocol_for;
use crate::audit::files::{Newest, ReadStats, log_files, read_records};
use crate::audit::filter::{AuditFilter, CompiledFilter};
use crate::audit::forward::SyslogForwarder;
use crate::audit::otlp_sender::OtlpSender;
use crate::audit::record::{
    AuditRecord, DestinationInfo, FIELDS, LossInfo, ProcessInfo, RecordType, RuleRef,
    SCHEMA_VERSION, host_name,
};
use crate::audit::writer::{AuditWriter, WriterConfig};
use crate::authz::{Attributes, AuthzPolicy, Request as AuthzRequest, Subject};
use crate::compile::image::EnforcementImage;
use crate::kernel::events::{Action, KernelEvent};
use crate::kernel::layers::{Layer, LayerState, LayerStatus};

/// Who may read which records: the authorization policy's `audit` action on entity `audit`,
/// with the record's `owner` and `type` as `resource.owner` and `resource.type`. Decisions are
/// cached per owner and type (a follower sees thousands of records of a few owners).
pub struct Access {
    subject: Subject,
    authz: Arc<AuthzPolicy>,
    cache: HashMap<(String, RecordType), bool>,
}

impl Access {
    pub fn new(subject: Subject, authz: Arc<AuthzPolicy>) -> Access {
        Access {
            subject,
            authz,
            cache: HashMap::new(),
        }
    }

    pub fn may_read(&mut self, record: &AuditRecord) -> bool {
        let key = (record.owner.clone(), record.kind);
        if let Some(allowed) = self.cache.get(&key) {
            return *allowed;
        }
        let resource = Attributes::from([
            ("owner".to_string(), vec![record.owner.clone()]),
            ("type".to_string(), vec![record.kind.as_str().to_string()]),
        ]);
        let allowed = self
            .authz
            .evaluate(&AuthzRequest {
                subject: &self.subject,
                action: "audit",
                entity: Some("audit"),
                resource: &resource,
                env: &Attributes::new(),
            })
            .allowed;
        self.cache.insert(key, allowed);
        allowed
    }
}

/// The control protocol's line for one record.
pub fn record_line(record: &AuditRecord) -> String {
    stream_line(AuditEvent::Record {
        record: Cow::Borrowed(record),
    })
}

/// A client of `guard audit --follow`.
struct Follower {
    out: mpsc::Sender<String>,
    filter: CompiledFilter,
    access: Access,
    /// Records it missed because its queue was full, not yet told.
    missed: u64,
}

/// What a `guard audit` request reads from the files before it follows (done by the
/// connection's task, off the daemon's loop).
pub struct HistoryRead {
    pub files: Vec<PathBuf>,
    pub filter: CompiledFilter,
    pub access: Access,
    /// Records from this `seq` on are live (the follower gets them), not history.
    pub before_seq: u64,
    /// Answers once the writer has written every record before `before_seq`.
    pub written: Option<std::sync::mpsc::Receiver<()>>,
    /// Only the newest this many.
    pub limit: Option<usize>,
}

impl HistoryRead {
    /// Calls `out` with each line to send, oldest first; stops when it returns false.
    pub fn run(mut self, mut out: impl FnMut(String) -> bool) -> std::io::Result<ReadStats> {
        if let Some(written) = self.written.take() {
            // Bounded: a stuck writer must not hang a reader forever.
            let _ = written.recv_timeout(std::time::Duration::from_secs(10));
        }
        let mut newest = self.limit.map(Newest::new);
        let stats = read_records(&self.files, |record| {
            if record.seq >= self.before_seq
                || !self.filter.matches(&record)
                || !self.access.may_read(&record)
            {
                return true;
            }
            let line = record_line(&record);
            match &mut newest {
                Some(kept) => {
                    kept.push(line);
                    true
                }
                None => out(line),
            }
        })?;
        for line in newest.into_iter().flat_map(Newest::into_items) {
            if !out(line) {
                break;
            }
        }
        Ok(stats)
    }
}

/// Loss counts, in all and as last reported in a `loss` record.
#[derive(Default, Clone, Copy)]
struct LossCounts {
    ring_buffer: u64,
    writer: u64,
    write_errors: u64,
    export: u64,
}

/// How long an export must go without missing a record before its layer reads up again.
pub const EXPORT_RECOVERED_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

pub struct AuditTrail {
    writer: Option<AuditWriter>,
    /// `[audit] syslog`: every record also goes there.
    syslog: Option<SyslogForwarder>,
    /// `[export.otlp]`: and there, as OCSF events in OTLP logs.
    otlp: Option<OtlpSender>,
    /// The exports' misses (failed or lost, syslog and OTLP) at the last look, and when they
    /// last grew: the export layer is degraded while they grow, and up again once a receiver
    /// that came back has taken records for [`EXPORT_RECOVERED_AFTER`].
    export_misses: (u64, Option<std::time::Instant>),
    /// Records made this turn of the daemon's loop, sent to the writer as one batch.
    pending: Vec<AuditRecord>,
    path: PathBuf,
    host: String,
    /// The next record's `seq` (the writer's counter: it numbers its `rotated_out` records).
    next_seq: Arc<AtomicU64>,
    /// Each scope's share of the log.
    budget: ScopeBudget,
    users: HashMap<u32, String>,
    /// The daemon's scopes' cgroup paths, by id.
    cgroups: HashMap<u64, String>,
    followers: Vec<Follower>,
    authz: Arc<AuthzPolicy>,
    cgroup_root: Option<PathBuf>,
    /// Records the writer's queue had no room for.
    writer_lost: u64,
    reported: LossCounts,
    /// Each scope's kernel events lost, as last reported in a `loss` record.
    scope_lost_reported: HashMap<u64, u64>,
    /// Records sent to followers that had no room for them.
    pub follower_missed: u64,
    /// Why the writer could not start, if it could not.
    open_error: Option<String>,
}

impl AuditTrail {
    /// Starts the writer; a log that cannot be opened is reported (the second value) and the
    /// records go only to followers, counted as write errors.
    pub fn open(
        config: WriterConfig,
        budget: ScopeBudget,
        authz: Arc<AuthzPolicy>,
    ) -> (AuditTrail, Option<String>) {
        let path = config.path.clone();
        let (writer, last, error) = match AuditWriter::start(config) {
            Ok((writer, last)) => (Some(writer), last, None),
            Err(err) => (None, None, Some(format!("{err:#}"))),
        };
        let next_seq = writer.as_ref().map_or_else(
            || Arc::new(AtomicU64::new(last.map_or(1, |s| s + 1))),
            AuditWriter::sequence,
        );
        let trail = AuditTrail {
            writer,
            syslog: None,
            otlp: None,
            export_misses: (0, None),
            pending: Vec::new(),
            path,
            host: host_name(),
            next_seq,
            budget,
            users: HashMap::new(),
            cgroups: HashMap::new(),
            followers: Vec::new(),
            authz,
            cgroup_root: crate::kernel::scope::cgroup2_root().ok(),
            writer_lost: 0,
            reported: LossCounts::default(),
            scope_lost_reported: HashMap::new(),
            follower_missed: 0,
            open_error: error.clone(),
        };
        (trail, error)
    }

    /// Sends every record to a syslog receiver too, from now on.
    pub fn forward_to_syslog(&mut self, forwarder: SyslogForwarder) {
        self.syslog = Some(forwarder);
    }

    /// Sends every record to an OTLP receiver too, from now on.
    pub fn export_otlp(&mut self, sender: OtlpSender) {
        self.otlp = Some(sender);
    }

    /// A new authorization policy (a reload): followers are judged by it from now on.
    pub fn set_authz(&mut self, authz: Arc<AuthzPolicy>) {
        for follower in &mut self.followers {
            follower.access = Access::new(follower.access.subject.clone(), authz.clone());
        }
        self.authz = authz;
    }

    fn user(&mut self, uid: u32) -> String {
        self.users
            .entry(uid)
            .or_insert_with(|| user_name(uid))
            .clone()
    }

    /// A record of `kind` by `owner`, with `details` (an object) as its type's own fields.
    pub fn record(&mut self, kind: RecordType, owner: &str, details: Value) {
        let mut record = base(kind, owner);
        if let Value::Object(details) = details {
            debug_assert!(
                details.keys().all(|k| !FIELDS.contains(&k.as_str())),
                "{kind:?} details reuse a schema field: {details:?}"
            );
            record.details = details;
        }
        self.emit(record);
    }

    /// Numbers the record and sends it on: to the followers allowed to see it, and to the
    /// writer (or counts it lost).
    pub fn emit(&mut self, record: AuditRecord) {
        if !self.budget.admit(&record) {
            return;
        }
        self.number(record);
    }

    /// Writes the `folded` records of a window that ended.
    pub fn end_window(&mut self, now: std::time::Instant) {
        for record in self.budget.end_window(now) {
            self.number(record);
        }
    }

    fn number(&mut self, mut record: AuditRecord) {
        record.v = SCHEMA_VERSION;
        record.seq = self.next_seq.fetch_add(1, Ordering::AcqRel);
        if record.time.is_empty() {
            record.time = crate::asks::timestamp(SystemTime::now());
        }
        record.host.clone_from(&self.host);
        if !self.followers.is_empty() {
            self.stream(&record);
        }
        self.pending.push(record);
    }

    /// Hands this turn's records to the writer (the daemon's loop calls it after each turn).
    pub fn send_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        if let Some(syslog) = &self.syslog {
            syslog.send(&batch);
        }
        if let Some(otlp) = &self.otlp {
            otlp.send(&batch);
        }
        let lost = match &self.writer {
            Some(writer) => writer.send(batch),
            None => batch.len(),
        };
        self.writer_lost += lost as u64;
    }

    fn stream(&mut self, record: &AuditRecord) {
        let mut line: Option<String> = None;
        let mut missed = 0;
        self.followers.retain_mut(|follower| {
            if follower.out.is_closed() {
                return false;
            }
            if !follower.filter.matches(record) || !follower.access.may_read(record) {
                return true;
            }
            if follower.missed > 0 {
                let notice = stream_line(AuditEvent::Missed {
                    records: follower.missed,
                });
                if follower.out.try_send(notice).is_ok() {
                    follower.missed = 0;
                }
            }
            let text = line.get_or_insert_with(|| record_line(record)).clone();
            if follower.out.try_send(text).is_err() {
                follower.missed += 1;
                missed += 1;
            }
            true
        });
        self.follower_missed += missed;
    }

    /// Starts following for a client: live records from now on go to `out`; the history up to
    /// now is what the returned read gives.
    pub fn follow(
        &mut self,
        subject: Subject,
        filter: &AuditFilter,
        out: Option<mpsc::Sender<String>>,
        limit: Option<usize>,
    ) -> Result<HistoryRead, String> {
        // What is made so far is history: it must be in the files before the read.
        self.send_pending();
        if let Some(out) = out {
            self.followers.push(Follower {
                out,
                filter: filter.compile()?,
                access: Access::new(subject.clone(), self.authz.clone()),
                missed: 0,
            });
        }
        Ok(HistoryRead {
            files: log_files(&self.path),
            filter: filter.compile()?,
            access: Access::new(subject, self.authz.clone()),
            before_seq: self.next_seq.load(Ordering::Acquire),
            written: self.writer.as_ref().map(|w| w.barrier()),
            limit,
        })
    }

    /// A `loss` record when anything was lost since the last one (`ring_buffer_total` is the
    /// kernel's count of events that did not fit).
    pub fn account_losses(&mut self, ring_buffer_total: u64) {
        self.look_at_export_misses();
        let now = LossCounts {
            ring_buffer: ring_buffer_total,
            writer: self.writer_lost,
            write_errors: self
                .writer
                .as_ref()
                .map_or(0, |w| w.stats().write_errors.load(Ordering::Relaxed)),
            export: self.export_missed(),
        };
        let before = self.reported;
        if now.ring_buffer <= before.ring_buffer
            && now.writer <= before.writer
            && now.write_errors <= before.write_errors
            && now.export <= before.export
        {
            return;
        }
        let mut record = base(RecordType::Loss, "root");
        record.loss = Some(LossInfo {
            ring_buffer: now.ring_buffer.saturating_sub(before.ring_buffer),
            writer: now.writer - before.writer,
            write_errors: now.write_errors.saturating_sub(before.write_errors),
            ring_buffer_total: now.ring_buffer,
            writer_total: now.writer,
            write_errors_total: now.write_errors,
            export: now.export.saturating_sub(before.export),
            export_total: now.export,
        });
        let lost_before = self.writer_lost;
        self.emit(record);
        self.send_pending();
        // Reported only if the report itself got through; else the next tick tries again.
        if self.writer_lost == lost_before {
            self.reported = now;
        }
    }

    /// Notes when the exports' misses last grew (the daemon's tick calls it, through
    /// [`AuditTrail::account_losses`]).
    fn look_at_export_misses(&mut self) {
        let status = self.status();
        let syslog = status.syslog.as_ref().map_or(0, |s| s.failed + s.lost);
        let otlp = status.otlp.as_ref().map_or(0, |o| o.failed + o.lost);
        let missed = syslog + otlp;
        if missed > self.export_misses.0 {
            self.export_misses = (missed, Some(std::time::Instant::now()));
        }
    }

    /// Records the OTLP export did not deliver, in all (but `loss` records: see
    /// [`crate::audit::otlp_sender::OtlpStats::reportable`]).
    fn export_missed(&self) -> u64 {
        self.otlp.as_ref().map_or(0, |o| o.stats().reportable())
    }

    /// A `scope_loss` record for each scope that lost kernel events since the last report (past its
    /// share of the ring buffer, or the ring full): `(cgroup id, cgroup path, lost in all)`.
    /// It says whose events were lost, so one scope's flood is not read as another's silence.
    pub fn account_scope_losses(&mut self, scopes: &[(u64, &std::path::Path, u64)]) {
        for &(id, path, total) in scopes {
            let before = self.scope_lost_reported.get(&id).copied().unwrap_or(0);
            if total <= before {
                continue;
            }
            let mut record = base(RecordType::ScopeLoss, "root");
            let cgroup = self.cgroup_name(id, path);
            record.details.insert("cgroup".into(), cgroup.into());
            record.details.insert("cgroup_id".into(), id.into());
            record
                .details
                .insert("scope_events_lost".into(), (total - before).into());
            record
                .details
                .insert("scope_events_lost_total".into(), total.into());
            self.emit(record);
            self.scope_lost_reported.insert(id, total);
        }
        let live: std::collections::HashSet<u64> = scopes.iter().map(|s| s.0).collect();
        self.scope_lost_reported.retain(|id, _| live.contains(id));
    }

    /// For `guard status`.
    pub fn status(&self) -> AuditStatus {
        let stats = self.writer.as_ref().map(|w| w.stats());
        let load = |f: fn(&crate::audit::writer::WriterStats) -> u64| stats.map_or(0, f);
        AuditStatus {
            path: self.path.display().to_string(),
            next_seq: self.next_seq.load(Ordering::Acquire),
            written: load(|s| s.written.load(Ordering::Relaxed)),
            bytes: load(|s| s.bytes.load(Ordering::Relaxed)),
            rotations: load(|s| s.rotations.load(Ordering::Relaxed)),
            write_errors: load(|s| s.write_errors.load(Ordering::Relaxed)),
            last_error: stats.and_then(|s| s.last_error.lock().ok().and_then(|e| e.clone())),
            writer_lost: self.writer_lost,
            followers: self.followers.len(),
            follower_missed: self.follower_missed,
            syslog: self.syslog.as_ref().map(|s| SyslogStatus {
                target: s.target().to_string(),
                sent: s.stats().sent.load(Ordering::Relaxed),
                failed: s.stats().failed.load(Ordering::Relaxed),
                lost: s.stats().lost.load(Ordering::Relaxed),
            }),
            otlp: self.otlp.as_ref().map(|o| OtlpStatus {
                url: o.url().to_string(),
                sent: o.stats().sent.load(Ordering::Relaxed),
                failed: o.stats().failed.load(Ordering::Relaxed),
                lost: o.stats().lost.load(Ordering::Relaxed),
                retries: o.stats().retries.load(Ordering::Relaxed),
                last_error: o.stats().last_error.lock().ok().and_then(|e| e.clone()),
            }),
        }
    }

    /// How the audit log stands: written, written with errors or losses, or not at all.
    pub fn layer(&self) -> LayerStatus {
        let status = self.status();
        if self.writer.is_none() {
            let why = self.open_error.as_deref().unwrap_or("its writer stopped");
            return LayerStatus::new(
                Layer::Audit,
                LayerState::Missing,
                format!("the audit log {} is not written: {why}", status.path),
            );
        }
        if status.write_errors > 0 || status.writer_lost > 0 {
            return LayerStatus::new(
                Layer::Audit,
                LayerState::Degraded,
                format!(
                    "{}: {} write errors, {} records lost{}",
                    status.path,
                    status.write_errors,
                    status.writer_lost,
                    status
                        .last_error
                        .map(|err| format!(" (last: {err})"))
                        .unwrap_or_default()
                ),
            );
        }
        LayerStatus::new(
            Layer::Audit,
            LayerState::Up,
            format!("every decision written to {}", status.path),
        )
    }

    /// How sending the records on stands: degraded when an export missed records within
    /// [`EXPORT_RECOVERED_AFTER`], up when they all deliver, off when none is set.
    pub fn export_layer(&self) -> LayerStatus {
        let status = self.status();
        let mut parts = Vec::new();
        // Degraded while records are being missed; up again once a receiver that came back has
        // had a while without a miss (the counts stay in the detail).
        let degraded = self
            .export_misses
            .1
            .is_some_and(|at| at.elapsed() < EXPORT_RECOVERED_AFTER);
        if let Some(syslog) = &status.syslog {
            parts.push(format!(
                "syslog to {}: {} sent, {} failed, {} lost",
                syslog.target, syslog.sent, syslog.failed, syslog.lost
            ));
        }
        if let Some(otlp) = &status.otlp {
            let last = otlp
                .last_error
                .as_ref()
                .filter(|_| otlp.failed > 0 || otlp.retries > 0)
                .map(|err| format!(" (last error: {err})"))
                .unwrap_or_default();
            parts.push(format!(
                "OTLP to {}: {} sent, {} failed, {} lost{last}",
                otlp.url, otlp.sent, otlp.failed, otlp.lost
            ));
        }
        if parts.is_empty() {
            return LayerStatus::new(
                Layer::Export,
                LayerState::Off,
                "no [audit] syslog or [export.otlp] endpoint: records stay in the audit log",
            );
        }
        let state = if degraded {
            LayerState::Degraded
        } else {
            LayerState::Up
        };
        LayerStatus::new(Layer::Export, state, parts.join("; "))
    }

    /// Followers whose clients went away.
    pub fn prune(&mut self) {
        self.followers.retain(|f| !f.out.is_closed());
    }

    /// Writes out everything queued and stops the writer (and the syslog thread).
    pub fn close(&mut self) {
        self.send_pending();
        self.writer = None;
        self.syslog = None;
        self.otlp = None;
    }

    /// A kernel event's record: the process, the destination, the deciding rule and the
    /// message. Takes the event: its strings move into the record. `scope` is the path of the
    /// daemon's scope the event came from, if it came from one.
    pub fn kernel_record(
        &mut self,
        image: &EnforcementImage,
        event: KernelEvent,
        message: String,
        scope: Option<&std::path::Path>,
        answered: Vec<String>,
    ) -> AuditRecord {
        let user = self.user(event.uid);
        let cgroup = scope.map(|path| self.cgroup_name(event.cgroup_id, path));
        let mut record = base(RecordType::Decision, &user);
        record.time = crate::asks::timestamp(event.time);
        record.decision = Some(event.decision.as_str().to_string());
        record.event = Some(event.kind.as_str().to_string());
        record.action = Some(
            match event.action {
                Action::None => "none",
                Action::Eperm => "eperm",
                Action::Sigkill => "sigkill",
                Action::Eacces => "eacces",
                Action::Held => "held",
            }
            .to_string(),
        );
        record.file = event.path.clone();
        if let Some(socket) = &event.socket {
            record
                .details
                .insert("socket_kind".into(), socket.kind.into());
            record
                .details
                .insert("socket_protocol".into(), socket.protocol.into());
            record
                .details
                .insert("socket_type".into(), socket.socket_type.into());
        }
        if let Some(unix) = &event.unix {
            record
                .details
                .insert("unix_socket".into(), unix.address.clone().into());
            record.details.insert("unix_call".into(), unix.call.into());
        }
        record.audit_only = Some(event.audit_only);
        record.unmatched = event.unmatched.then_some(true);
        record.rule = event
            .rule
            .and_then(|id| image.rules.get(id as usize))
            .and_then(|rule| {
                let origin = rule.origin.as_ref()?;
                Some(RuleRef {
                    file: origin.file.to_string(),
                    line: origin.line,
                    text: rule.text.clone(),
                    justification: rule.justification.clone(),
                })
            });
        record.destination = event.destination.as_ref().map(|d| DestinationInfo {
            host: destination_host(image, &event).map(str::to_string),
            hosts: answered,
            address: d.address.to_string(),
            port: d.port,
            transport: d.transport.to_string(),
            protocol: protocol_for(d.port, d.transport).as_str().to_string(),
        });
        record.process = Some(ProcessInfo {
            pid: event.tgid,
            tid: event.pid,
            ppid: event.ppid,
            uid: event.uid,
            user,
            gid: event.gid,
            cgroup,
            cgroup_id: event.cgroup_id,
            exe: event.exe,
            argv: event.argv,
            argv_truncated: event.argv_truncated,
            exe_anonymous: event.anonymous,
            comm: event.comm,
        });
        record.message = Some(message);
        record
    }

    /// Scope `id`'s path relative to the cgroup2 mount, worked out once per scope.
    fn cgroup_name(&mut self, id: u64, path: &std::path::Path) -> String {
        let root = &self.cgroup_root;
        self.cgroups
            .entry(id)
            .or_insert_with(|| match root {
                Some(root) => path
                    .strip_prefix(root)
                    .map(|p| format!("/{}", p.display()))
                    .unwrap_or_else(|_| path.display().to_string()),
                None => path.display().to_string(),
            })
            .clone()
    }
}

/// A record with only the fields every record has (the trail fills in `v`, `seq`, `host`).
pub fn base(kind: RecordType, owner: &str) -> AuditRecord {
    AuditRecord {
        kind,
        owner: owner.to_string(),
        ..Default::default()
    }
}

/// A name guard's resolver refused (it never left the host).
pub fn dns_refused(refused: &crate::resolve::RefusedName) -> AuditRecord {
    let mut record = dns_record(
        RecordType::DnsRefused,
        &refused.name,
        &refused.query_type,
        refused.process.as_ref(),
    );
    record.decision = Some("forbidden".to_string());
    record.rule = Some(crate::audit::record::RuleRef {
        file: refused.file.clone().unwrap_or_default(),
        line: refused.line.unwrap_or(0),
        text: refused.rule.clone(),
        justification: None,
    });
    record
        .details
        .insert("answer".into(), serde_json::json!(refused.answer));
    record
}

/// A name guard's resolver answered: forwarded upstream, or held on the host with a stand-in.
pub fn dns_answered(answer: &crate::resolve::Answered) -> AuditRecord {
    let mut record = dns_record(
        RecordType::DnsAnswered,
        &answer.name,
        &answer.query_type,
        answer.process.as_ref(),
    );
    record
        .details
        .insert("answered".into(), serde_json::json!(answer.source.as_str()));
    record
        .details
        .insert("addresses".into(), serde_json::json!(answer.addrs));
    record
}

/// What every record of a query has: the name, its type and the process that asked.
fn dns_record(
    kind: RecordType,
    name: &str,
    query_type: &str,
    process: Option<&crate::resolve::peer::QueryProcess>,
) -> AuditRecord {
    let owner = process.map_or_else(
        || "root".to_string(),
        |p| crate::daemon::peer::user_name(p.uid),
    );
    let mut record = base(kind, &owner);
    record.event = Some("dns".to_string());
    record
        .details
        .insert("name".into(), serde_json::json!(name));
    record
        .details
        .insert("query_type".into(), serde_json::json!(query_type));
    if let Some(process) = process {
        record.process = Some(crate::audit::record::ProcessInfo {
            pid: process.pid.unwrap_or(0),
            tid: process.pid.unwrap_or(0),
            uid: process.uid,
            user: crate::daemon::peer::user_name(process.uid),
            exe: process.exe.clone(),
            comm: process.comm.clone(),
            ..Default::default()
        });
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::files::read_records;
    use serde_json::json;
    use std::time::Duration;

    fn config(path: &std::path::Path, queue_records: usize) -> WriterConfig {
        WriterConfig {
            path: path.to_path_buf(),
            max_file_bytes: 1 << 20,
            keep_files: 1,
            flush_interval: Duration::from_millis(20),
            fsync_interval: Duration::ZERO,
            queue_records,
        }
    }

    fn logged(path: &std::path::Path) -> Vec<AuditRecord> {
        let mut out = Vec::new();
        read_records(&log_files(path), |r| {
            out.push(r);
            true
        })
        .unwrap();
        out
    }

    fn no_budget() -> ScopeBudget {
        ScopeBudget::new(
            0,
            std::time::Duration::from_secs(1),
            std::time::Instant::now(),
        )
    }

    #[test]
    fn records_are_numbered_across_restarts_and_carry_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let authz = Arc::new(AuthzPolicy::builtin(None));
        for _ in 0..2 {
            let (mut trail, error) =
                AuditTrail::open(config(&path, 100), no_budget(), authz.clone());
            assert!(error.is_none());
            trail.record(RecordType::DaemonStart, "root", json!({"pid": 1}));
            trail.record(RecordType::DaemonStop, "root", json!({}));
            trail.close();
        }
        let records = logged(&path);
        assert_eq!(
            records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert!(
            records
                .iter()
                .all(|r| r.v == SCHEMA_VERSION && r.host == host_name())
        );
    }

    #[test]
    fn a_loss_record_reports_what_was_lost_since_the_last_one_and_in_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (mut trail, _) = AuditTrail::open(
            config(&path, 1000),
            no_budget(),
            Arc::new(AuthzPolicy::builtin(None)),
        );
        trail.account_losses(0);
        trail.account_losses(5);
        trail.account_losses(5);
        trail.account_losses(7);
        trail.close();
        let losses: Vec<LossInfo> = logged(&path).into_iter().filter_map(|r| r.loss).collect();
        assert_eq!(losses.len(), 2, "nothing new, no record: {losses:?}");
        assert_eq!((losses[0].ring_buffer, losses[0].ring_buffer_total), (5, 5));
        assert_eq!((losses[1].ring_buffer, losses[1].ring_buffer_total), (2, 7));
    }

    #[test]
    fn a_follower_gets_only_the_records_its_subject_may_read_that_match_its_filter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (mut trail, _) = AuditTrail::open(
            config(&path, 100),
            no_budget(),
            Arc::new(AuthzPolicy::builtin(None)),
        );
        let alice = Subject::from_json(r#"{"sub": "alice", "attrs": {"uid": ["1000"]}}"#).unwrap();
        let (tx, mut rx) = mpsc::channel(10);
        let filter = AuditFilter {
            types: vec!["control_refused".into()],
            ..Default::default()
        };
        trail.follow(alice, &filter, Some(tx), None).unwrap();
        trail.record(
            RecordType::ControlRefused,
            "root",
            json!({"request": "status"}),
        );
        trail.record(RecordType::Reload, "alice", json!({"ok": true}));
        trail.record(
            RecordType::ControlRefused,
            "alice",
            json!({"request": "reload"}),
        );
        let line = rx.try_recv().expect("alice's refused request");
        assert!(
            line.contains("\"owner\":\"alice\"") && line.contains("control_refused"),
            "{line}"
        );
        assert!(
            rx.try_recv().is_err(),
            "root's record and the reload are not alice's to see"
        );
    }
}
