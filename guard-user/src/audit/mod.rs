//! The audit log's format and what reads it: the record schema, the rotated files and their
//! filters, the writer thread, the syslog (RFC 5424) output, the OTLP export (OCSF events) and `guard replay`. The daemon
//! makes the records (`daemon/audit.rs`).

pub mod files;
pub mod filter;
pub mod forward;
pub mod ocsf;
pub mod otlp;
pub mod otlp_sender;
pub mod record;
pub mod replay;
pub mod rotated_out;
pub mod syslog;
pub mod writer;

pub use record::{AuditRecord, RecordType, SCHEMA_VERSION};
