//! The host service, `guard daemon` and `guard release` (`service.rs`), and the verbs that
//! talk to it over its control socket: `prompts`, `approve`, `deny`, `reload`, `status`
//! (`control.rs`, `watch.rs`), `console`, `audit`.

pub(super) mod audit;
pub(super) mod console;
pub(super) mod control;
pub(super) mod service;
pub(super) mod watch;

pub(super) use service::{DaemonArgs, ReleaseArgs, daemon, release};
