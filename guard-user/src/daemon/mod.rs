//! The host service (`guard daemon`): the policy held in the kernel for its scopes, the control
//! socket, asks and approvals, amendments that take effect at once.
//!
//! Data flow: `service/` owns the state (and answers asks and amendments, and reports status);
//! `server.rs` feeds it requests, kernel events and timers; `crate::asks` turns events into
//! asks and answers into approvals and amendment lines (shared with a stand-alone `guard run`);
//! `audit.rs` numbers, streams and accounts for the audit records (`audit_budget.rs`: each
//! scope's share of them) (`crate::audit` writes and
//! reads the log), `run_stream.rs` tells a `guard run` client its refusals; `peer.rs` and
//! `crate::authz` decide who may ask what; `wire/` types what travels on the socket (requests,
//! results, stream lines; it uses no other daemon module); `connections.rs` bounds each user's
//! connections; `overlay_eval.rs` evaluates a run's overlay in a bounded child, off the loop;
//! `client.rs` is the other end of the socket, for the CLI; `control_port.rs` is the loop's
//! door for requests made inside the daemon, which `console/` (the approval page, `guard
//! console`) uses with the same authorization as the socket.

pub mod audit;
pub mod audit_budget;
pub mod client;
pub mod config;
pub mod connections;
pub mod console;
pub mod control_port;
pub mod metrics;
pub mod overlay_eval;
pub mod peer;
pub mod pods;
pub mod run_stream;
pub mod scopes;
pub mod server;
pub mod service;
pub mod wire;
