//! What travels on the control socket, typed once for both ends: the requests and their
//! envelope (`protocol.rs`) and each request's result and stream lines (`responses.rs`). The
//! daemon writes these types and the CLI reads them back (`super::client`).
//!
//! They stand on their own: plain data of the layers below (the policy's amendments, asks and
//! approvals, audit records) and each other, nothing of the daemon's state, service or server,
//! which convert to them at their edge (`guard-user/tests/cli/module_graph.rs` checks it).

pub mod protocol;
pub mod responses;
