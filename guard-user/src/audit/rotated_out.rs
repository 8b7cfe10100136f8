//! Whose records a log file holds, so a rotation that deletes one first writes a `rotated_out`
//! record saying whose records go and how many: one scope's flood may push the others' records
//! out of the kept files, never silently. The writer tallies each file as it writes it; a file
//! from before the daemon started is read when it is about to go.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::files::read_records;
use super::record::{AuditRecord, RecordType};

/// Owners and scopes a `rotated_out` record names one by one; the rest are summed.
const MAX_NAMED: usize = 1000;

/// Whose records: the owner and, for a process's record, its scope.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Whose {
    owner: String,
    cgroup_id: Option<u64>,
}

/// The records of one file, by whose they are.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    by_whose: BTreeMap<Whose, (u64, Option<String>)>,
    records: u64,
    first_seq: Option<u64>,
    last_seq: Option<u64>,
}

impl Tally {
    /// Counts `record`, written to the file.
    pub fn count(&mut self, record: &AuditRecord) {
        self.records += 1;
        self.first_seq = Some(self.first_seq.map_or(record.seq, |s| s.min(record.seq)));
        self.last_seq = Some(self.last_seq.map_or(record.seq, |s| s.max(record.seq)));
        let (cgroup_id, cgroup) = scope_of(record);
        let entry = self
            .by_whose
            .entry(Whose {
                owner: record.owner.clone(),
                cgroup_id,
            })
            .or_insert((0, None));
        entry.0 += 1;
        if entry.1.is_none() {
            entry.1 = cgroup;
        }
    }

    /// The tally of a file already on disk (unreadable lines are not counted).
    pub fn of_file(path: &Path) -> Tally {
        let mut tally = Tally::default();
        let _ = read_records(&[path.to_path_buf()], |record| {
            tally.count(&record);
            true
        });
        tally
    }

    pub fn merge(&mut self, other: Tally) {
        self.records += other.records;
        self.first_seq = [self.first_seq, other.first_seq]
            .into_iter()
            .flatten()
            .min();
        self.last_seq = [self.last_seq, other.last_seq].into_iter().flatten().max();
        for (whose, (n, cgroup)) in other.by_whose {
            let entry = self.by_whose.entry(whose).or_insert((0, None));
            entry.0 += n;
            if entry.1.is_none() {
                entry.1 = cgroup;
            }
        }
    }

    /// The `rotated_out` record for `file`, whose records these are (numbered by the caller).
    pub fn record(&self, file: &Path) -> AuditRecord {
        let mut scopes: Vec<(&Whose, &(u64, Option<String>))> = self.by_whose.iter().collect();
        // The largest first: those are the ones a reader looks for.
        scopes.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
        let others: u64 = scopes.iter().skip(MAX_NAMED).map(|(_, (n, _))| n).sum();
        let named: Vec<Value> = scopes
            .iter()
            .take(MAX_NAMED)
            .map(|(whose, (n, cgroup))| {
                json!({"owner": whose.owner, "cgroup_id": whose.cgroup_id, "cgroup": cgroup,
                       "records": n})
            })
            .collect();
        let mut record = AuditRecord {
            kind: RecordType::RotatedOut,
            owner: "root".into(),
            ..Default::default()
        };
        let details = json!({
            "file": file.display().to_string(),
            "records": self.records,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "scopes": named,
            "other_records": others,
        });
        if let Value::Object(details) = details {
            record.details = details;
        }
        record
    }
}

/// The scope a record is about: its process's, or the one a `folded` or `scope_loss` record
/// names.
pub fn scope_of(record: &AuditRecord) -> (Option<u64>, Option<String>) {
    if let Some(process) = &record.process {
        return (Some(process.cgroup_id), process.cgroup.clone());
    }
    let id = record.details.get("cgroup_id").and_then(Value::as_u64);
    let path = record
        .details
        .get("cgroup")
        .and_then(Value::as_str)
        .map(str::to_string);
    (id, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::ProcessInfo;

    fn record(seq: u64, owner: &str, cgroup_id: Option<u64>) -> AuditRecord {
        AuditRecord {
            seq,
            owner: owner.into(),
            process: cgroup_id.map(|id| ProcessInfo {
                cgroup_id: id,
                cgroup: Some(format!("/scope-{id}")),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_rotated_out_record_says_whose_records_go_and_how_many() {
        let mut tally = Tally::default();
        for seq in 10..20 {
            tally.count(&record(seq, "alice", Some(7)));
        }
        tally.count(&record(20, "bob", Some(8)));
        tally.count(&record(21, "root", None));
        let out = tally.record(Path::new("/var/log/guard/audit.jsonl.8"));
        assert_eq!(out.kind, RecordType::RotatedOut);
        let details = Value::Object(out.details);
        assert_eq!(details["records"], 12);
        assert_eq!(
            (details["first_seq"].clone(), details["last_seq"].clone()),
            (json!(10), json!(21))
        );
        let scopes = details["scopes"].as_array().unwrap();
        assert_eq!(
            scopes[0],
            json!({"owner": "alice", "cgroup_id": 7, "cgroup": "/scope-7", "records": 10})
        );
        assert!(scopes.contains(
            &json!({"owner": "bob", "cgroup_id": 8, "cgroup": "/scope-8", "records": 1})
        ));
        assert!(
            scopes.contains(
                &json!({"owner": "root", "cgroup_id": null, "cgroup": null, "records": 1})
            )
        );
        assert_eq!(details["other_records"], 0);
    }
}
