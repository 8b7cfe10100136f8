//! Shared helpers for guard's integration tests (the tests themselves live in `tests/`).
pub mod daemon;
pub mod dns;
pub mod kernel;
pub mod prometheus;
pub mod rsyslog;
pub mod unit;
