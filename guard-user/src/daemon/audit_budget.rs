//! Each scope's share of the audit log: at most `[audit] scope_records` records of a scope's
//! processes (decisions, its resolver's names) per `scope_window_secs`. Past it, the scope's
//! records are folded: counted by kind (type, decision, event, rule) and written as one `folded`
//! record per kind when the window ends. So a scope that floods refusals while the daemon keeps
//! up fills the log with its share, not with every other scope's records rotated out.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::json;

use super::audit::base;
use crate::audit::record::{AuditRecord, RecordType, RuleRef};

/// What one folded record counts: a scope's records of one kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Kind {
    cgroup_id: u64,
    kind: &'static str,
    decision: Option<String>,
    event: Option<String>,
    rule: Option<(String, usize, String)>,
}

/// The records of one kind folded in this window.
struct Folded {
    count: u64,
    owner: String,
    cgroup: Option<String>,
    first_time: String,
    last_time: String,
}

pub struct ScopeBudget {
    /// Records a scope may have written per window; 0: no budget.
    share: u64,
    window: Duration,
    started: Instant,
    used: HashMap<u64, u64>,
    folded: BTreeMap<Kind, Folded>,
}

impl ScopeBudget {
    pub fn new(share: u64, window: Duration, now: Instant) -> ScopeBudget {
        ScopeBudget {
            share,
            window: window.max(Duration::from_millis(100)),
            started: now,
            used: HashMap::new(),
            folded: BTreeMap::new(),
        }
    }

    /// Whether `record` is written; false when it is folded (past its scope's share).
    pub fn admit(&mut self, record: &AuditRecord) -> bool {
        if self.share == 0 {
            return true;
        }
        let Some(process) = record.process.as_ref().filter(|_| budgeted(record.kind)) else {
            return true;
        };
        let used = self.used.entry(process.cgroup_id).or_insert(0);
        if *used < self.share {
            *used += 1;
            return true;
        }
        let kind = Kind {
            cgroup_id: process.cgroup_id,
            kind: record.kind.as_str(),
            decision: record.decision.clone(),
            event: record.event.clone(),
            rule: record
                .rule
                .as_ref()
                .map(|r| (r.file.clone(), r.line, r.text.clone())),
        };
        let folded = self.folded.entry(kind).or_insert_with(|| Folded {
            count: 0,
            owner: record.owner.clone(),
            cgroup: process.cgroup.clone(),
            first_time: record.time.clone(),
            last_time: String::new(),
        });
        folded.count += 1;
        folded.last_time.clone_from(&record.time);
        false
    }

    /// At the end of a window, its `folded` records (to be numbered and written); the next
    /// window starts.
    pub fn end_window(&mut self, now: Instant) -> Vec<AuditRecord> {
        if now.duration_since(self.started) < self.window {
            return Vec::new();
        }
        self.started = now;
        self.used.clear();
        let window_secs = self.window.as_secs_f64();
        std::mem::take(&mut self.folded)
            .into_iter()
            .map(|(kind, folded)| {
                let mut record = base(RecordType::Folded, &folded.owner);
                record.rule = kind.rule.map(|(file, line, text)| RuleRef {
                    file,
                    line,
                    text,
                    justification: None,
                });
                let details = json!({
                    "cgroup": folded.cgroup,
                    "cgroup_id": kind.cgroup_id,
                    "folded": folded.count,
                    "folded_type": kind.kind,
                    "folded_decision": kind.decision,
                    "folded_event": kind.event,
                    "first_time": folded.first_time,
                    "last_time": folded.last_time,
                    "share": self.share,
                    "window_secs": window_secs,
                });
                if let serde_json::Value::Object(details) = details {
                    record.details = details;
                }
                record
            })
            .collect()
    }
}

/// The records a scope's processes make by the thousand: what its share bounds.
fn budgeted(kind: RecordType) -> bool {
    matches!(
        kind,
        RecordType::Decision | RecordType::DnsRefused | RecordType::DnsAnswered
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::ProcessInfo;

    fn refusal(cgroup_id: u64, line: usize) -> AuditRecord {
        let mut record = base(RecordType::Decision, "alice");
        record.decision = Some("forbidden".into());
        record.event = Some("connect".into());
        record.time = "t".into();
        record.rule = Some(RuleRef {
            file: "team.rules".into(),
            line,
            text: "address_rule(...)".into(),
            justification: None,
        });
        record.process = Some(ProcessInfo {
            cgroup_id,
            cgroup: Some(format!("/s{cgroup_id}")),
            ..Default::default()
        });
        record
    }

    #[test]
    fn a_scope_past_its_share_is_folded_by_kind_and_the_others_keep_theirs() {
        let start = Instant::now();
        let mut budget = ScopeBudget::new(3, Duration::from_secs(1), start);
        let flood: Vec<bool> = (0..10)
            .map(|i| budget.admit(&refusal(1, 1 + i % 2)))
            .collect();
        assert_eq!(flood.iter().filter(|w| **w).count(), 3);
        // Another scope's records are its own share's.
        assert!((0..3).all(|_| budget.admit(&refusal(2, 1))));
        // A control record is never folded.
        assert!(budget.admit(&base(RecordType::Run, "alice")));
        assert!(
            budget
                .end_window(start + Duration::from_millis(500))
                .is_empty()
        );
        let folded = budget.end_window(start + Duration::from_secs(1));
        let counts: Vec<(u64, u64, usize)> = folded
            .iter()
            .map(|r| {
                (
                    r.details["cgroup_id"].as_u64().unwrap(),
                    r.details["folded"].as_u64().unwrap(),
                    r.rule.as_ref().unwrap().line,
                )
            })
            .collect();
        // Of the 7 folded, lines 1 and 2 alternate: 3 admitted (1, 2, 1), then 2,1,2,1,2,1,2.
        assert_eq!(counts, vec![(1, 3, 1), (1, 4, 2)]);
        assert_eq!(folded[0].kind, RecordType::Folded);
        assert_eq!(folded[0].owner, "alice");
        // A new window: the share again.
        assert!(budget.admit(&refusal(1, 1)));
        assert!(ScopeBudget::new(0, Duration::from_secs(1), start).admit(&refusal(1, 1)));
    }
}
