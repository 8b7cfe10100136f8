//! guard's userspace library: the `.rules` policy engine and the `guard` command line.
pub mod asks;
pub mod audit;
pub mod authz;
pub mod cli;
pub mod compile;
pub mod confine;
pub mod daemon;
pub mod doctor;
pub mod hold;
pub mod in_force;
pub mod kernel;
pub mod legacy;
pub mod node;
pub mod policy;
pub mod resolve;
pub mod session;
