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
//! starts. A file is deleted only after a `rotated_out` record (`rotated_out.rs`) saying whose
//! records it held and how many is written to the new file: the file is renamed to
//! `PATH.dropping` first, and one a crash left there is counted by the next rotation.

use std::collections::VecDeque;
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
use super::record::{AuditRecord, host_name};
use super::rotated_out::Tally;

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
    /// The next record's `seq`, shared with the daemon, which numbers its records; the writer
    /// numbers its own `rotated_out` records from it when it writes them.
    seq: Arc<AtomicU64>,
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
        let next = Arc::new(AtomicU64::new(seq.map_or(1, |s| s + 1)));
        let mut log = LogFile {
            seq: next.clone(),
            // The files from before are counted when they are about to go.
            tally: Tally::default(),
            rotated_tallies: VecDeque::new(),
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
                seq: next,
            },
            seq,
        ))
    }

    /// The counter the records' `seq` come from.
    pub fn sequence(&self) -> Arc<AtomicU64> {
        self.seq.clone()
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
    seq: Arc<AtomicU64>,
    /// Whose records the current file holds.
    tally: Tally,
    /// The same for `PATH.1`, `PATH.2`, ... as far as this writer wrote them.
    rotated_tallies: VecDeque<Tally>,
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
                        self.tally.count(record);
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

    /// `PATH` → `PATH.1` → ... ; the oldest past `keep_files` goes, after a `rotated_out`
    /// record says whose records it held.
    fn rotate(&mut self) {
        self.flush();
        let path = self.config.path.clone();
        let keep = self.config.keep_files.min(MAX_ROTATED);
        let victim = if keep == 0 {
            path.clone()
        } else {
            rotated(&path, keep)
        };
        let dropping = dropping(&path);
        // What goes: the victim, and a file a rotation cut short by a crash left behind.
        let mut gone: Option<Tally> = dropping.exists().then(|| Tally::of_file(&dropping));
        if victim.exists() {
            let known = if keep == 0 {
                Some(std::mem::take(&mut self.tally))
            } else {
                self.rotated_tallies.get(keep - 1).cloned()
            };
            let tally = known.unwrap_or_else(|| Tally::of_file(&victim));
            gone.get_or_insert_with(Tally::default).merge(tally);
        }
        let result = (|| -> std::io::Result<()> {
            if victim.exists() {
                std::fs::rename(&victim, &dropping)?;
            }
            if keep > 0 {
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
            Err(err) => {
                self.failed(format!("{err:#}"));
                return;
            }
        }
        let current = std::mem::take(&mut self.tally);
        if keep > 0 {
            self.rotated_tallies.push_front(current);
            self.rotated_tallies.truncate(keep);
        }
        if let Some(gone) = gone {
            self.write_rotated_out(&gone, &victim, &dropping);
        }
    }

    /// Writes (and syncs) the record of what `victim`, now at `dropping`, held; deletes it
    /// only then.
    fn write_rotated_out(&mut self, gone: &Tally, victim: &Path, dropping: &Path) {
        let mut record = gone.record(victim);
        record.v = super::record::SCHEMA_VERSION;
        record.seq = self.seq.fetch_add(1, Ordering::AcqRel);
        record.time = humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string();
        record.host = host_name();
        let Ok(mut line) = serde_json::to_vec(&record) else {
            self.failed("a rotated_out record could not be serialized".into());
            return;
        };
        line.push(b'\n');
        let errors = self.stats.write_errors.load(Ordering::Relaxed);
        self.write(&line);
        self.tally.count(&record);
        self.flush();
        let _ = self.out.get_ref().sync_data();
        if self.stats.write_errors.load(Ordering::Relaxed) != errors {
            // Not written: the file stays at `dropping` for the next rotation to count.
            return;
        }
        if let Err(err) = std::fs::remove_file(dropping)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            self.failed(format!("removing {}: {err}", dropping.display()));
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

/// Where a file waits between its rotation and the record of what it held.
fn dropping(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".dropping");
    PathBuf::from(name)
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
        // Numbered as the daemon numbers them, one at a time (so the writer's own
        // `rotated_out` records come in a known order).
        let sequence = writer.sequence();
        for _ in 1..=40 {
            let seq = sequence.fetch_add(1, Ordering::AcqRel);
            assert_eq!(writer.send(vec![record(seq)]), 0);
            writer
                .barrier()
                .recv_timeout(Duration::from_secs(5))
                .unwrap();
        }
        drop(writer);
        let files = log_files(&path);
        assert_eq!(files.len(), 3, "the current file and 2 rotated: {files:?}");
        for file in &files {
            // A file may pass its size by the `rotated_out` record that opens it.
            assert!(std::fs::metadata(file).unwrap().len() <= 1500);
        }
        assert!(!rotated(&path, 3).exists());
        assert!(
            !dropping(&path).exists(),
            "deleted once its record was written"
        );
        let mut kept = Vec::new();
        read_records(&log_files(&path), |r| {
            kept.push(r);
            true
        })
        .unwrap();
        let mut seqs: Vec<u64> = kept.iter().map(|r| r.seq).collect();
        seqs.sort_unstable();
        let (first, last) = (seqs[0], *seqs.last().unwrap());
        assert_eq!(seqs, (first..=last).collect::<Vec<_>>(), "nothing missing");
        // The last file deleted held exactly the records before the first kept one, and its
        // record says so, and whose they were.
        let gone = kept
            .iter()
            .rfind(|r| r.kind == RecordType::RotatedOut)
            .expect("a rotated_out record");
        assert_eq!(gone.details["last_seq"].as_u64(), Some(first - 1));
        let held = gone.details["records"].as_u64().unwrap();
        assert_eq!(gone.details["scopes"][0]["owner"], "root");
        assert_eq!(gone.details["scopes"][0]["records"].as_u64(), Some(held));
        assert!(held > 0);
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
