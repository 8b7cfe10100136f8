//! The daemon's audit records: one JSON line per kernel decision it is told about and per
//! control action (approvals, denials, amendments, reloads, refused requests), appended to the
//! audit log and kept in memory for `guard audit`. Every record names its `owner` (the user
//! whose process or request it is), which the authorization policy's `resource.owner` sees.
//!
//! Flush policy: records are buffered and written out at every housekeeping tick (a quarter of a
//! second) and at a clean stop, so a crash loses at most the last tick's records.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::{Value, json};

use super::asks::timestamp;

/// Records kept in memory for `guard audit`.
const RECENT: usize = 10_000;

pub struct AuditLog {
    path: PathBuf,
    file: Option<BufWriter<File>>,
    recent: VecDeque<Value>,
    /// Records that could not be written to the file (counted, reported in `guard status`).
    pub write_errors: u64,
}

impl AuditLog {
    /// Opens (creating it and one missing folder level) the log for appending. A log that
    /// cannot be opened is reported and the records are kept in memory only.
    pub fn open(path: &Path) -> (AuditLog, Option<String>) {
        let opened = path
            .parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .and_then(|_| OpenOptions::new().create(true).append(true).open(path));
        let (file, error) = match opened {
            Ok(file) => (Some(BufWriter::with_capacity(1 << 16, file)), None),
            Err(err) => (
                None,
                Some(format!(
                    "cannot open the audit log {}: {err}",
                    path.display()
                )),
            ),
        };
        (
            AuditLog {
                path: path.to_path_buf(),
                file,
                recent: VecDeque::new(),
                write_errors: 0,
            },
            error,
        )
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record: `{"time", "type", "owner", ...fields}`.
    pub fn record(&mut self, kind: &str, owner: &str, fields: Value) {
        let mut record = json!({
            "time": timestamp(SystemTime::now()),
            "type": kind,
            "owner": owner,
        });
        if let (Some(out), Value::Object(fields)) = (record.as_object_mut(), fields) {
            out.extend(fields);
        }
        if let Some(file) = self.file.as_mut() {
            let mut line = record.to_string();
            line.push('\n');
            if file.write_all(line.as_bytes()).is_err() {
                self.write_errors += 1;
            }
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(record);
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) {
        if let Some(file) = self.file.as_mut()
            && file.flush().is_err()
        {
            self.write_errors += 1;
        }
    }

    /// The newest records, oldest first.
    pub fn recent(&self) -> impl DoubleEndedIterator<Item = &Value> {
        self.recent.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_whole_json_lines_with_time_type_and_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log").join("audit.jsonl");
        let (mut log, error) = AuditLog::open(&path);
        assert!(error.is_none());
        log.record("reload", "root", json!({"ok": true}));
        log.record("control_refused", "alice", json!({"action": "status"}));
        log.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["type"], "control_refused");
        assert_eq!(lines[1]["owner"], "alice");
        assert_eq!(lines[0]["ok"], true);
        assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'));
        assert_eq!(log.recent().count(), 2);
    }
}
