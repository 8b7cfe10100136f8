//! The audit log on disk: the current file and its rotated predecessors (`audit.jsonl`,
//! `audit.jsonl.1` (the newest rotated) ... `audit.jsonl.N`), read oldest first.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::record::AuditRecord;

/// `path.N`: the N-th rotated file (1 is the newest).
pub fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// The log's files that exist, oldest first (the current file last).
pub fn log_files(path: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    // Rotated files are numbered without gaps; the search is bounded by what a rotation keeps.
    for n in 1..=MAX_ROTATED {
        let file = rotated(path, n);
        if !file.exists() {
            break;
        }
        files.push(file);
    }
    files.reverse();
    if path.exists() {
        files.push(path.to_path_buf());
    }
    files
}

/// The most rotated files any configuration keeps.
pub const MAX_ROTATED: usize = 1000;

/// What reading files found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadStats {
    pub records: u64,
    /// Lines that are not records (a torn last line after a crash, or garbage).
    pub bad_lines: u64,
}

/// Calls `each` with every record of `files` in order; stops early when it returns false.
pub fn read_records(
    files: &[PathBuf],
    mut each: impl FnMut(AuditRecord) -> bool,
) -> std::io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    for path in files {
        let file = match File::open(path) {
            Ok(file) => file,
            // Rotated away between listing and opening: its records are in the next file.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => {
                return Err(std::io::Error::new(
                    err.kind(),
                    format!("{}: {err}", path.display()),
                ));
            }
        };
        for line in BufReader::with_capacity(1 << 16, file).split(b'\n') {
            let line = line?;
            if line.is_empty() {
                continue;
            }
            match std::str::from_utf8(&line).ok().and_then(AuditRecord::parse) {
                Some(record) => {
                    stats.records += 1;
                    if !each(record) {
                        return Ok(stats);
                    }
                }
                None => stats.bad_lines += 1,
            }
        }
    }
    Ok(stats)
}

/// Keeps the newest `n` items pushed (`--limit N` over a log read oldest first).
pub struct Newest<T> {
    n: usize,
    items: std::collections::VecDeque<T>,
}

impl<T> Newest<T> {
    pub fn new(n: usize) -> Self {
        Newest {
            n,
            items: std::collections::VecDeque::new(),
        }
    }

    pub fn push(&mut self, item: T) {
        if self.n == 0 {
            return;
        }
        if self.items.len() == self.n {
            self.items.pop_front();
        }
        self.items.push_back(item);
    }

    /// Oldest first.
    pub fn into_items(self) -> impl Iterator<Item = T> {
        self.items.into_iter()
    }
}

/// The `seq` of the last whole record in the log (the current file, else the newest rotated
/// one), so a restarted writer continues the sequence.
pub fn last_seq(path: &Path) -> Option<u64> {
    log_files(path)
        .iter()
        .rev()
        .find_map(|file| highest_seq_in_tail(file))
}

/// The highest `seq` among the whole records of one file's tail: the last record's, or a
/// `rotated_out` record's a little before it (the writer numbers those when it writes them,
/// after records the daemon numbered earlier and had queued).
fn highest_seq_in_tail(path: &Path) -> Option<u64> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    // Records are far smaller than this; a tail this long holds several.
    let tail = len.min(256 * 1024);
    file.seek(SeekFrom::Start(len - tail)).ok()?;
    let mut bytes = Vec::with_capacity(tail as usize);
    file.read_to_end(&mut bytes).ok()?;
    bytes
        .split(|b| *b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .filter_map(AuditRecord::parse)
        .map(|r| r.seq)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::{RecordType, SCHEMA_VERSION};

    fn line(seq: u64) -> String {
        let record = AuditRecord {
            v: SCHEMA_VERSION,
            seq,
            kind: RecordType::Reload,
            ..Default::default()
        };
        serde_json::to_string(&record).unwrap() + "\n"
    }

    #[test]
    fn files_are_read_oldest_first_and_torn_lines_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(rotated(&path, 2), line(1) + &line(2)).unwrap();
        std::fs::write(rotated(&path, 1), line(3)).unwrap();
        std::fs::write(&path, line(4) + "{\"v\":1,\"se").unwrap();
        let files = log_files(&path);
        assert_eq!(files.last().unwrap(), &path);
        let mut seqs = Vec::new();
        let stats = read_records(&files, |r| {
            seqs.push(r.seq);
            true
        })
        .unwrap();
        assert_eq!(seqs, [1, 2, 3, 4]);
        assert_eq!(
            stats,
            ReadStats {
                records: 4,
                bad_lines: 1
            }
        );
        assert_eq!(last_seq(&path), Some(4));
    }

    #[test]
    fn the_sequence_continues_from_a_rotated_file_when_the_current_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        assert_eq!(last_seq(&path), None);
        std::fs::write(rotated(&path, 1), line(41)).unwrap();
        std::fs::write(&path, "").unwrap();
        assert_eq!(last_seq(&path), Some(41));
    }

    #[test]
    fn newest_keeps_the_last_n_in_order() {
        let mut kept = Newest::new(2);
        for i in 1..=5 {
            kept.push(i);
        }
        assert_eq!(kept.into_items().collect::<Vec<_>>(), [4, 5]);
        let mut none = Newest::new(0);
        none.push(1);
        assert_eq!(none.into_items().count(), 0);
    }
}
