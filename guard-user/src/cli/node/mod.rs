//! `guard node`, the Kubernetes node agent (see `crate::node`), and `guard node crds`.

pub(super) mod agent;

pub(super) use agent::{NodeArgs, node};
