//! Which records a reader wants: `guard audit --since --decision --pid --exe --type`. The same
//! filter runs in the daemon (history and live records over the socket) and in the CLI (files
//! read directly).

use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::record::{AuditRecord, RecordType};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditFilter {
    /// Records at or after this time (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// `allow`, `prompt` or `forbidden` (`ask` and `deny` are accepted too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// An absolute path matches `process.exe` exactly; a bare name matches its file name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Record types (`decision`, `ask`, `approval`, ...); empty: all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
}

/// The decision names a filter accepts, to the ones records hold.
pub fn canonical_decision(name: &str) -> Option<&'static str> {
    match name {
        "allow" | "allowed" => Some("allow"),
        "prompt" | "ask" => Some("prompt"),
        "forbidden" | "deny" | "denied" => Some("forbidden"),
        _ => None,
    }
}

/// A filter checked once, for many records.
pub struct CompiledFilter {
    filter: AuditFilter,
    since: Option<SystemTime>,
    decision: Option<&'static str>,
}

impl AuditFilter {
    pub fn compile(&self) -> Result<CompiledFilter, String> {
        let since = self
            .since
            .as_deref()
            .map(|t| {
                humantime::parse_rfc3339_weak(t)
                    .map_err(|e| format!("--since {t:?} is not an RFC 3339 time: {e}"))
            })
            .transpose()?;
        let decision = self
            .decision
            .as_deref()
            .map(|d| {
                canonical_decision(d).ok_or_else(|| {
                    format!("--decision {d:?}: give allow, prompt (ask) or forbidden (deny)")
                })
            })
            .transpose()?;
        if let Some(unknown) = self
            .types
            .iter()
            .find(|t| !RecordType::ALL.iter().any(|k| k.as_str() == t.as_str()))
        {
            let known: Vec<&str> = RecordType::ALL.iter().map(|k| k.as_str()).collect();
            return Err(format!(
                "--type {unknown:?} is not a record type: give one of {}",
                known.join(", ")
            ));
        }
        Ok(CompiledFilter {
            filter: self.clone(),
            since,
            decision,
        })
    }
}

impl CompiledFilter {
    pub fn matches(&self, record: &AuditRecord) -> bool {
        let f = &self.filter;
        if !f.types.is_empty() && !f.types.iter().any(|t| t == record.kind.as_str()) {
            return false;
        }
        if let Some(decision) = self.decision
            && record.decision.as_deref() != Some(decision)
        {
            return false;
        }
        if let Some(pid) = f.pid
            && record.process.as_ref().is_none_or(|p| p.pid != pid)
        {
            return false;
        }
        if let Some(exe) = &f.exe {
            let Some(process) = &record.process else {
                return false;
            };
            let matched = if exe.contains('/') {
                process.exe == *exe
            } else {
                Path::new(&process.exe)
                    .file_name()
                    .is_some_and(|n| n == exe.as_str())
            };
            if !matched {
                return false;
            }
        }
        if let Some(since) = self.since {
            // A record whose time does not parse is kept: a filter must not hide what it cannot
            // read.
            if let Ok(time) = humantime::parse_rfc3339(&record.time)
                && time < since
            {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::ProcessInfo;

    fn record(
        kind: RecordType,
        decision: Option<&str>,
        pid: u32,
        exe: &str,
        time: &str,
    ) -> AuditRecord {
        AuditRecord {
            kind,
            decision: decision.map(str::to_string),
            time: time.to_string(),
            process: Some(ProcessInfo {
                pid,
                exe: exe.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn every_field_narrows_and_aliases_are_understood() {
        let git = record(
            RecordType::Decision,
            Some("forbidden"),
            10,
            "/usr/bin/git",
            "2026-12-02T10:00:00.5Z",
        );
        let curl = record(
            RecordType::Ask,
            Some("prompt"),
            11,
            "/usr/bin/curl",
            "2026-12-02T09:00:00Z",
        );
        let check = |filter: AuditFilter| -> Vec<bool> {
            let f = filter.compile().unwrap();
            vec![f.matches(&git), f.matches(&curl)]
        };
        assert_eq!(check(AuditFilter::default()), [true, true]);
        let deny = AuditFilter {
            decision: Some("deny".into()),
            ..Default::default()
        };
        assert_eq!(check(deny), [true, false]);
        let pid = AuditFilter {
            pid: Some(11),
            ..Default::default()
        };
        assert_eq!(check(pid), [false, true]);
        let by_name = AuditFilter {
            exe: Some("git".into()),
            ..Default::default()
        };
        assert_eq!(check(by_name), [true, false]);
        let by_path = AuditFilter {
            exe: Some("/usr/bin/curl".into()),
            ..Default::default()
        };
        assert_eq!(check(by_path), [false, true]);
        let since = AuditFilter {
            since: Some("2026-12-02T09:30:00Z".into()),
            ..Default::default()
        };
        assert_eq!(check(since), [true, false]);
        let types = AuditFilter {
            types: vec!["ask".into()],
            ..Default::default()
        };
        assert_eq!(check(types), [false, true]);
    }

    #[test]
    fn bad_filters_say_what_is_accepted() {
        let bad = AuditFilter {
            decision: Some("maybe".into()),
            ..Default::default()
        };
        assert!(bad.compile().err().unwrap().contains("allow, prompt"));
        let bad = AuditFilter {
            since: Some("yesterday".into()),
            ..Default::default()
        };
        assert!(bad.compile().err().unwrap().contains("RFC 3339"));
        let bad = AuditFilter {
            types: vec!["decisions".into()],
            ..Default::default()
        };
        assert!(
            bad.compile()
                .err()
                .unwrap()
                .contains("decision, ask, ask_expired")
        );
    }
}
