//! The audit log's writer: a thread of its own, so a slow disk never holds up the daemon's
//! decisions. Records reach it in batches (one wake-up per batch, not per record) through a
//! queue bounded in records; a batch that finds no room is counted as lost (`writer`), never
//! waited for.
//!
//! Flush policy: the writer writes out (write(2)) whenever its queue is empty, and at least
//! every [`WriterConfig::flush_interval`] while records keep coming, so the records still in
//! the daemon when it is killed are at most those of the last flush interval plus what is
//! queued. What has been written survives a crash of the daemon (it is in the kernel's page
//! cache); `fsync_interval` bounds what a crash of the machine can take.
//!
//! Rotation: before a record would take the file past `max_file_bytes`, the file becomes
//! `PATH.1` (the older ones move up one, the one past `keep_files` is deleted) and a new file
//! starts.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::files::{MAX_ROTATED, last_seq, rotated};
use super::record::AuditRecord;

#[derive(Clone, Debug)]
pub struct WriterConfig {
    pub path: PathBuf,
    /// A file is rotated before it would grow past this.
    pub max_file_bytes: u64,
    /// Rotated files kept besides the current one.
    pub keep_files: usize,
    /// Written out at least this often while records keep coming.
    pub flush_interval: Duration,
    /// fsync at least this often (zero: never; a daemon crash loses nothing written anyway).
    pub fsync_interval: Duration,
    /// Records the queue holds before new ones are counted as lost.
    pub queue_records: usize,
}

/// What the writer has done, shared with the daemon (`guard status`, `loss` records).
#[derive(Debug, Default)]
pub struct WriterStats {
    pub written: AtomicU64,
    pub bytes: AtomicU64,
    pub rotations: AtomicU64,
    /// Records that could not be written (an I/O error); the error is in `last_error`.
    pub write_errors: AtomicU64,
    pub last_error: std::sync::Mutex<Option<String>>,
}

/// Something the writer does once everything queued before it is written.
pub type Barrier = std::sync::mpsc::Sender<()>;

enum Message {
    Records(Vec<AuditRecord>),
    /// Answered once everything before it is written out.
    Barrier(Barrier),
}

pub struct AuditWriter {
    queue: Sender<Message>,
    /// Records sent and not yet written; the queue's bound is on this.
    queued: Arc<AtomicUsize>,
    capacity: usize,
    stats: Arc<WriterStats>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl AuditWriter {
    /// Opens the log (creating its folder), mends a torn last line, and starts the thread.
    /// Returns the writer and the `seq` of the last record already in the log.
    pub fn start(config: WriterConfig) -> Result<(AuditWriter, Option<u64>)> {
        if let Some(dir) = config.path.parent()
            && !dir.exists()
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir)
                .with_context(|| format!("creating {}", dir.display()))?;
        }
        let seq = last_seq(&config.path);
        let file = open_append(&config.path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let (queue, inbox) = channel();
        let stats = Arc::new(WriterStats::default());
        let queued = Arc::new(AtomicUsize::new(0));
        let capacity = config.queue_records.max(1);
        let path = config.path.clone();
        let mut log = LogFile {
            queued: queued.clone(),
            out: BufWriter::with_capacity(1 << 16, file),
            size,
            config,
            stats: stats.clone(),
            dirty: false,
            last_flush: Instant::now(),
            last_fsync: Instant::now(),
        };
        let thread = std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || log.run(inbox))
            .context("starting the audit writer thread")?;
        Ok((
            AuditWriter {
                queue,
                queued,
                capacity,
                stats,
                thread: Some(thread),
                path,
            },
            seq,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// Queues a batch of records; returns how many did not fit (they are lost, the caller
    /// counts them).
    pub fn send(&self, mut records: Vec<AuditRecord>) -> usize {
        let room = self
            .capacity
            .saturating_sub(self.queued.load(Ordering::Acquire));
        let lost = records.len().saturating_sub(room);
        records.truncate(room);
        if records.is_empty() {
            return lost;
        }
        let n = records.len();
        self.queued.fetch_add(n, Ordering::AcqRel);
        if self.queue.send(Message::Records(records)).is_err() {
            self.queued.fetch_sub(n, Ordering::AcqRel);
            return lost + n;
        }
        lost
    }

    /// A channel that answers once every record queued so far is written out.
    pub fn barrier(&self) -> Receiver<()> {
        let (done, wait) = channel();
        let _ = self.queue.send(Message::Barrier(done));
        wait
    }
}

impl Drop for AuditWriter {
    /// Writes out everything queued, then ends the thread.
    fn drop(&mut self) {
        let wait = self.barrier();
        let _ = wait.recv_timeout(Duration::from_secs(10));
        // Closing the queue ends the thread's loop.
        let (closed, _) = channel();
        drop(std::mem::replace(&mut self.queue, closed));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Opens for appending; a file whose last line is torn (a crash mid-write) gets a newline, so
/// the torn line stays one bad line instead of spoiling the next record. A new file is 0640:
/// records hold every user's command lines, which are not for every user to read (`guard
/// audit` through the daemon shows each user their own).
fn open_append(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o640)
        .open(path)
        .with_context(|| format!("opening the audit log {}", path.display()))?;
    let len = file.metadata()?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            file.write_all(b"\n")?;
        }
    }
    Ok(file)
}

struct LogFile {
    queued: Arc<AtomicUsize>,
    out: BufWriter<File>,
    size: u64,
    config: WriterConfig,
    stats: Arc<WriterStats>,
    /// Bytes buffered or written since the last flush.
    dirty: bool,
    last_flush: Instant,
    last_fsync: Instant,
}

impl LogFile {
    fn run(&mut self, inbox: Receiver<Message>) {
        let mut line = Vec::with_capacity(4096);
        loop {
            let message = match inbox.try_recv() {
                Ok(message) => message,
                // Nothing queued: write out now, then wait.
                Err(_) => {
                    self.flush();
                    match inbox.recv_timeout(self.config.flush_interval) {
                        Ok(message) => message,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            };
            match message {
                Message::Records(records) => {
                    for record in &records {
                        line.clear();
                        if serde_json::to_writer(&mut line, record).is_err() {
                            self.failed("a record could not be serialized".into());
                            continue;
                        }
                        line.push(b'\n');
                        self.write(&line);
                    }
                    self.queued.fetch_sub(records.len(), Ordering::AcqRel);
                }
                Message::Barrier(done) => {
                    self.flush();
                    let _ = done.send(());
                }
            }
            if self.last_flush.elapsed() >= self.config.flush_interval {
                self.flush();
            }
        }
        self.flush();
    }

    fn write(&mut self, line: &[u8]) {
        if self.size > 0 && self.size + line.len() as u64 > self.config.max_file_bytes {
            self.rotate();
        }
        match self.out.write_all(line) {
            Ok(()) => {
                self.size += line.len() as u64;
                self.dirty = true;
                self.stats.written.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .bytes
                    .fetch_add(line.len() as u64, Ordering::Relaxed);
            }
            Err(err) => self.failed(format!("writing {}: {err}", self.config.path.display())),
        }
    }

    fn flush(&mut self) {
        self.last_flush = Instant::now();
        if !self.dirty {
            return;
        }
        if let Err(err) = self.out.flush() {
            self.failed(format!("writing {}: {err}", self.config.path.display()));
            return;
        }
        self.dirty = false;
        let fsync = self.config.fsync_interval;
        if !fsync.is_zero() && self.last_fsync.elapsed() >= fsync {
            let _ = self.out.get_ref().sync_data();
            self.last_fsync = Instant::now();
        }
    }

    /// `PATH` → `PATH.1` → ... ; the oldest past `keep_files` goes.
    fn rotate(&mut self) {
        self.flush();
        let path = self.config.path.clone();
        let keep = self.config.keep_files.min(MAX_ROTATED);
        let result = (|| -> std::io::Result<()> {
            if keep == 0 {
                std::fs::remove_file(&path)?;
            } else {
                let _ = std::fs::remove_file(rotated(&path, keep));
                for n in (1..keep).rev() {
                    let from = rotated(&path, n);
                    if from.exists() {
                        std::fs::rename(&from, rotated(&path, n + 1))?;
                    }
                }
                std::fs::rename(&path, rotated(&path, 1))?;
            }
            Ok(())
        })();
        if let Err(err) = result {
            // Keep appending to the file we have: losing records is worse than a big file.
            self.failed(format!("rotating {}: {err}", path.display()));
            return;
        }
        match open_append(&path) {
            Ok(file) => {
                self.out = BufWriter::with_capacity(1 << 16, file);
                self.size = 0;
                self.stats.rotations.fetch_add(1, Ordering::Relaxed);
            }
            Err(err) => self.failed(format!("{err:#}")),
        }
    }

    fn failed(&mut self, message: String) {
        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
        *self
            .stats
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::files::{log_files, read_records};
    use crate::audit::record::{RecordType, SCHEMA_VERSION};

    fn config(path: &Path, max_file_bytes: u64, keep_files: usize) -> WriterConfig {
        WriterConfig {
            path: path.to_path_buf(),
            max_file_bytes,
            keep_files,
            flush_interval: Duration::from_millis(50),
            fsync_interval: Duration::ZERO,
            queue_records: 1024,
        }
    }

    fn record(seq: u64) -> AuditRecord {
        AuditRecord {
            v: SCHEMA_VERSION,
            seq,
            kind: RecordType::Decision,
            owner: "root".into(),
            message: Some("x".repeat(100)),
            ..Default::default()
        }
    }

    fn seqs(path: &Path) -> Vec<u64> {
        let mut out = Vec::new();
        read_records(&log_files(path), |r| {
            out.push(r.seq);
            true
        })
        .unwrap();
        out
    }

    #[test]
    fn rotation_keeps_a_bounded_number_of_files_and_never_splits_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log").join("audit.jsonl");
        let (writer, last) = AuditWriter::start(config(&path, 1000, 2)).unwrap();
        assert_eq!(last, None);
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o640, "not for every user to read");
        assert_eq!(mode(path.parent().unwrap()), 0o750);
        for seq in 1..=40 {
            assert_eq!(writer.send(vec![record(seq)]), 0);
        }
        drop(writer);
        let files = log_files(&path);
        assert_eq!(files.len(), 3, "the current file and 2 rotated: {files:?}");
        for file in &files {
            assert!(std::fs::metadata(file).unwrap().len() <= 1000);
        }
        let kept = seqs(&path);
        // The newest records, in order, with nothing missing between the first kept and 40.
        assert_eq!(*kept.last().unwrap(), 40);
        assert_eq!(kept, (kept[0]..=40).collect::<Vec<_>>());
        assert!(!rotated(&path, 3).exists());
    }

    #[test]
    fn a_barrier_answers_after_the_records_before_it_are_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (writer, _) = AuditWriter::start(config(&path, 1 << 20, 1)).unwrap();
        writer.send((1..=100).map(record).collect());
        writer
            .barrier()
            .recv_timeout(Duration::from_secs(5))
            .unwrap();
        assert_eq!(seqs(&path).len(), 100);
        assert_eq!(writer.stats().written.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn a_restart_continues_the_sequence_and_mends_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let first = serde_json::to_string(&record(7)).unwrap();
        std::fs::write(&path, format!("{first}\n{{\"v\":1,\"seq\":8,\"ti")).unwrap();
        let (writer, last) = AuditWriter::start(config(&path, 1 << 20, 1)).unwrap();
        assert_eq!(last, Some(7));
        writer.send(vec![record(8)]);
        drop(writer);
        assert_eq!(seqs(&path), [7, 8]);
    }

    #[test]
    fn a_batch_past_the_queues_bound_is_lost_and_counted_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut small = config(&path, 1 << 20, 1);
        small.queue_records = 10;
        let (writer, _) = AuditWriter::start(small).unwrap();
        // However fast the thread is, one batch of 25 cannot fit a queue of 10.
        let lost = writer.send((1..=25).map(record).collect());
        assert_eq!(lost, 15);
        drop(writer);
        assert_eq!(seqs(&path), (1..=10).collect::<Vec<_>>());
    }
}
