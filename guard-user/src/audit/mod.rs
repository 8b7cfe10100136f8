//! The audit log's format and what reads it: the record schema, the rotated files and their
//! filters, the syslog (RFC 5424) output and `guard replay`. The daemon writes the log
//! (`daemon/audit.rs`).

pub mod record;
pub mod syslog;

pub use record::{AuditRecord, RecordType, SCHEMA_VERSION};
