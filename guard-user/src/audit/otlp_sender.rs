//! Sending the records to an OTLP/HTTP logs receiver (`[export.otlp]`), from a thread of its
//! own so that a receiver that is slow or down holds up neither enforcement nor the audit log:
//! records wait in a bounded queue (past it they are counted as lost), go out in batches, and a
//! batch the receiver could not take is tried again with backoff; a batch that still fails is
//! counted as failed. The audit log always has every record; `guard status`, the metrics and
//! the log's `loss` records say what the export missed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use prost::Message;

use super::otlp;
use super::record::{AuditRecord, RecordType};

/// How long a batch waits for more records before it is sent.
pub const LINGER: Duration = Duration::from_millis(200);
/// The first wait before a retry; each further one doubles, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
pub const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// How long a stopping daemon gives the queue to drain (one attempt per batch).
pub const DRAIN_WITHIN: Duration = Duration::from_secs(5);

/// Where and how to send.
#[derive(Clone, Debug)]
pub struct OtlpTarget {
    /// The logs URL: the endpoint with `/v1/logs`.
    pub url: String,
    /// Extra request headers (an API key).
    pub headers: Vec<(String, String)>,
    /// Records queued before new ones are counted as lost.
    pub queue_records: usize,
    /// Records per request at most.
    pub batch_records: usize,
    /// One request's bound (connect, send and answer).
    pub timeout: Duration,
    /// Attempts per batch (the first and the retries).
    pub attempts: u32,
}

impl OtlpTarget {
    /// The logs URL for an endpoint as OTLP's exporters take it: `http://HOST:PORT` (the base,
    /// `/v1/logs` is added) or a URL whose path already ends in `/v1/logs`.
    pub fn logs_url(endpoint: &str) -> Result<String> {
        let Some(rest) = endpoint.strip_prefix("http://") else {
            if endpoint.starts_with("https://") {
                bail!(
                    "{endpoint:?}: guard sends OTLP over plain HTTP only; point it at a collector \
                     on this machine (e.g. http://127.0.0.1:4318) that forwards with TLS"
                );
            }
            bail!("{endpoint:?} is not an http:// URL; use e.g. http://127.0.0.1:4318");
        };
        if rest.is_empty() || rest.starts_with('/') {
            bail!("{endpoint:?} has no host; use e.g. http://127.0.0.1:4318");
        }
        let uri: ureq::http::Uri = endpoint
            .parse()
            .with_context(|| format!("{endpoint:?} is not a URL"))?;
        if uri.query().is_some() {
            bail!("{endpoint:?}: a query string is not part of an OTLP endpoint");
        }
        let trimmed = endpoint.trim_end_matches('/');
        Ok(if trimmed.ends_with("/v1/logs") {
            trimmed.to_string()
        } else {
            format!("{trimmed}/v1/logs")
        })
    }
}

/// What the export did, for `guard status`, the metrics and `loss` records.
#[derive(Debug, Default)]
pub struct OtlpStats {
    /// Records the receiver took.
    pub sent: AtomicU64,
    /// Records in batches that failed every attempt, or that the receiver rejected.
    pub failed: AtomicU64,
    /// Records that found the queue full.
    pub lost: AtomicU64,
    /// Attempts that were tried again.
    pub retries: AtomicU64,
    /// Of the failed and lost, the `loss` records: not counted in [`OtlpStats::reportable`],
    /// or a `loss` record about a receiver that is down would report its own loss, and so on
    /// every second it stays down.
    pub missed_loss_records: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

impl OtlpStats {
    /// Records the export did not deliver: failed or lost.
    pub fn missed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed) + self.lost.load(Ordering::Relaxed)
    }

    /// Records missed that a `loss` record reports: all but `loss` records themselves.
    pub fn reportable(&self) -> u64 {
        self.missed()
            .saturating_sub(self.missed_loss_records.load(Ordering::Relaxed))
    }

    /// Counts `records` as missed (`counter`: failed or lost).
    fn miss(&self, counter: &AtomicU64, records: &[AuditRecord]) {
        let loss = records
            .iter()
            .filter(|r| r.kind == RecordType::Loss)
            .count();
        self.missed_loss_records
            .fetch_add(loss as u64, Ordering::Relaxed);
        counter.fetch_add(records.len() as u64, Ordering::Relaxed);
    }

    fn error(&self, error: String) {
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(error);
        }
    }
}

pub struct OtlpSender {
    queue: Option<SyncSender<AuditRecord>>,
    stats: Arc<OtlpStats>,
    stopping: Arc<AtomicBool>,
    url: String,
    thread: Option<JoinHandle<()>>,
}

impl OtlpSender {
    /// Starts the thread. Nothing is sent until a record comes, so a receiver that is not up
    /// yet is no error here.
    pub fn start(target: OtlpTarget) -> Result<OtlpSender> {
        let (queue, inbox) = sync_channel::<AuditRecord>(target.queue_records.max(1));
        let stats = Arc::new(OtlpStats::default());
        let stopping = Arc::new(AtomicBool::new(false));
        let url = target.url.clone();
        let (thread_stats, thread_stopping) = (stats.clone(), stopping.clone());
        let thread = std::thread::Builder::new()
            .name("audit-otlp".into())
            .spawn(move || Exporter::new(target, thread_stats, thread_stopping).run(&inbox))
            .context("starting the OTLP export thread")?;
        Ok(OtlpSender {
            queue: Some(queue),
            stats,
            stopping,
            url,
            thread: Some(thread),
        })
    }

    /// Queues copies of `records`, as many as there is room for; never blocks.
    pub fn send(&self, records: &[AuditRecord]) {
        let Some(queue) = &self.queue else { return };
        for (i, record) in records.iter().enumerate() {
            match queue.try_send(record.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    self.stats.miss(&self.stats.lost, &records[i..]);
                    return;
                }
            }
        }
    }

    pub fn stats(&self) -> &OtlpStats {
        &self.stats
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for OtlpSender {
    /// Sends what is queued, once per batch (no retries), for at most [`DRAIN_WITHIN`].
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// The thread's side.
struct Exporter {
    agent: ureq::Agent,
    target: OtlpTarget,
    stats: Arc<OtlpStats>,
    stopping: Arc<AtomicBool>,
    /// Set when stopping starts: past it, what is still queued is counted as failed.
    drain_deadline: Option<Instant>,
}

/// How one attempt ended.
enum Attempt {
    /// Taken; the receiver rejected this many.
    Delivered { rejected: u64 },
    /// Worth trying again (no answer, 429, 502, 503, 504), after at least this long.
    Retry(String, Option<Duration>),
    /// Not worth trying again (400, 401, 404, ...).
    Refused(String),
}

impl Exporter {
    fn new(target: OtlpTarget, stats: Arc<OtlpStats>, stopping: Arc<AtomicBool>) -> Exporter {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(target.timeout))
            .http_status_as_error(false)
            // The receiver is named in the configuration: no proxy from the daemon's
            // environment and no redirect may send the records elsewhere.
            .proxy(None)
            .max_redirects(0)
            .build()
            .new_agent();
        Exporter {
            agent,
            target,
            stats,
            stopping,
            drain_deadline: None,
        }
    }

    fn run(mut self, inbox: &Receiver<AuditRecord>) {
        while let Ok(first) = inbox.recv() {
            let mut batch = vec![first];
            let until = Instant::now() + LINGER;
            while batch.len() < self.target.batch_records.max(1) {
                let left = until.saturating_duration_since(Instant::now());
                match inbox.recv_timeout(left) {
                    Ok(record) => batch.push(record),
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                }
            }
            self.deliver(&batch);
        }
    }

    fn stopping(&mut self) -> bool {
        if self.stopping.load(Ordering::Acquire) && self.drain_deadline.is_none() {
            self.drain_deadline = Some(Instant::now() + DRAIN_WITHIN);
        }
        self.drain_deadline.is_some()
    }

    fn deliver(&mut self, batch: &[AuditRecord]) {
        let count = batch.len() as u64;
        if self.drain_deadline.is_some_and(|d| Instant::now() >= d) {
            self.stats.miss(&self.stats.failed, batch);
            return;
        }
        let host = batch.first().map_or("", |r| r.host.as_str());
        let body = otlp::request(host, batch).encode_to_vec();
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=self.target.attempts.max(1) {
            match self.attempt(&body) {
                Attempt::Delivered { rejected } => {
                    let rejected = rejected.min(count);
                    self.stats
                        .sent
                        .fetch_add(count - rejected, Ordering::Relaxed);
                    self.stats.failed.fetch_add(rejected, Ordering::Relaxed);
                    return;
                }
                Attempt::Refused(why) => {
                    self.stats.error(why);
                    break;
                }
                Attempt::Retry(why, after) => {
                    self.stats.error(why);
                    if attempt == self.target.attempts || self.stopping() {
                        break;
                    }
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    // Parked, so a stopping daemon's unpark ends the wait at once.
                    let wait = after.unwrap_or(backoff).min(MAX_BACKOFF);
                    let until = Instant::now() + wait;
                    while !self.stopping() && Instant::now() < until {
                        std::thread::park_timeout(until.saturating_duration_since(Instant::now()));
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        self.stats.miss(&self.stats.failed, batch);
    }

    fn attempt(&self, body: &[u8]) -> Attempt {
        let mut request = self
            .agent
            .post(&self.target.url)
            .header("Content-Type", "application/x-protobuf");
        for (name, value) in &self.target.headers {
            request = request.header(name, value);
        }
        let mut response = match request.send(body) {
            Ok(response) => response,
            Err(err) => return Attempt::Retry(format!("{}: {err}", self.target.url), None),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let answer = response
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_vec()
            .unwrap_or_default();
        match status {
            200..=299 => {
                let rejected = ExportLogsServiceResponse::decode(answer.as_slice())
                    .ok()
                    .and_then(|r| r.partial_success)
                    .map_or(0, |p| u64::try_from(p.rejected_log_records).unwrap_or(0));
                Attempt::Delivered { rejected }
            }
            429 | 502..=504 => {
                Attempt::Retry(format!("{}: HTTP {status}", self.target.url), retry_after)
            }
            _ => Attempt::Refused(format!(
                "{}: HTTP {status} {}",
                self.target.url,
                String::from_utf8_lossy(&answer[..answer.len().min(200)])
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_become_the_logs_url() {
        let url = |e: &str| OtlpTarget::logs_url(e).map_err(|e| e.to_string());
        assert_eq!(
            url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/logs"
        );
        assert_eq!(
            url("http://[::1]:4318/").unwrap(),
            "http://[::1]:4318/v1/logs"
        );
        assert_eq!(
            url("http://c:4318/v1/logs").unwrap(),
            "http://c:4318/v1/logs"
        );
        assert!(
            url("https://c:4318")
                .unwrap_err()
                .contains("plain HTTP only")
        );
        assert!(
            url("127.0.0.1:4318")
                .unwrap_err()
                .contains("not an http:// URL")
        );
        assert!(url("http:///v1/logs").unwrap_err().contains("no host"));
    }

    #[test]
    fn a_receiver_that_is_down_loses_the_batch_counted_and_a_full_queue_counts_the_rest() {
        // A port nothing listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let sender = OtlpSender::start(OtlpTarget {
            url: format!("http://127.0.0.1:{port}/v1/logs"),
            headers: Vec::new(),
            queue_records: 2,
            batch_records: 10,
            timeout: Duration::from_secs(1),
            attempts: 2,
        })
        .unwrap();
        let records = vec![AuditRecord::default(); 5];
        sender.send(&records);
        let lost = sender.stats().lost.load(Ordering::Relaxed);
        // Two fit in the queue and the thread may hold one more.
        assert!(lost >= 2, "{lost} lost");
        let stats = sender.stats.clone();
        drop(sender);
        assert_eq!(stats.missed(), 5, "every record is counted: {stats:?}");
        assert!(stats.last_error.lock().unwrap().is_some());
    }
}
