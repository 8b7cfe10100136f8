//! Sending the daemon's records to a syslog receiver (`[audit] syslog`), from a thread of its
//! own: a receiver that is slow or gone (a TCP send can block for seconds) must hold up
//! neither the daemon nor the log file. Batches past the queue's bound are counted as lost;
//! sends the receiver refused are counted as failed; both are in `guard status`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

use anyhow::{Context, Result};

use super::record::AuditRecord;
use super::syslog::{Facility, SyslogSender, SyslogTarget};

#[derive(Debug, Default)]
pub struct ForwardStats {
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    /// Records that found the queue full.
    pub lost: AtomicU64,
}

pub struct SyslogForwarder {
    queue: Option<Sender<Vec<AuditRecord>>>,
    queued: Arc<AtomicUsize>,
    capacity: usize,
    stats: Arc<ForwardStats>,
    target: SyslogTarget,
    thread: Option<JoinHandle<()>>,
}

impl SyslogForwarder {
    /// Connects (TCP: now, so a wrong address is an error at start) and starts the thread.
    pub fn start(target: SyslogTarget, facility: Facility, capacity: usize) -> Result<Self> {
        let mut sender = SyslogSender::connect(&target, facility)
            .with_context(|| format!("connecting to the syslog receiver {target}"))?;
        let (queue, inbox) = channel::<Vec<AuditRecord>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let stats = Arc::new(ForwardStats::default());
        let (thread_queued, thread_stats) = (queued.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name("audit-syslog".into())
            .spawn(move || {
                for batch in inbox {
                    for record in &batch {
                        let counter = match sender.send(record) {
                            Ok(()) => &thread_stats.sent,
                            Err(_) => &thread_stats.failed,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    thread_queued.fetch_sub(batch.len(), Ordering::AcqRel);
                }
            })
            .context("starting the syslog thread")?;
        Ok(SyslogForwarder {
            queue: Some(queue),
            queued,
            capacity: capacity.max(1),
            stats,
            target,
            thread: Some(thread),
        })
    }

    /// Queues copies of `records`, as many as there is room for.
    pub fn send(&self, records: &[AuditRecord]) {
        let room = self
            .capacity
            .saturating_sub(self.queued.load(Ordering::Acquire));
        let kept = records.len().min(room);
        self.stats
            .lost
            .fetch_add((records.len() - kept) as u64, Ordering::Relaxed);
        if kept == 0 {
            return;
        }
        self.queued.fetch_add(kept, Ordering::AcqRel);
        let sent = self
            .queue
            .as_ref()
            .is_some_and(|q| q.send(records[..kept].to_vec()).is_ok());
        if !sent {
            self.queued.fetch_sub(kept, Ordering::AcqRel);
            self.stats.lost.fetch_add(kept as u64, Ordering::Relaxed);
        }
    }

    pub fn stats(&self) -> &ForwardStats {
        &self.stats
    }

    pub fn target(&self) -> &SyslogTarget {
        &self.target
    }
}

impl Drop for SyslogForwarder {
    /// Sends what is queued (each send is bounded by the sender's timeouts), then ends.
    fn drop(&mut self) {
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
