//! `guard run`: one command in a scope of its own, held in the kernel by guard itself or by the
//! daemon (`daemon.rs`), its asks (`asks.rs`) and held calls (`held.rs`); and `guard doctor`,
//! what this kernel allows a run.

pub(super) mod asks;
pub(super) mod command;
pub(super) mod daemon;
pub(super) mod doctor;
pub(super) mod held;
pub(super) mod inherited_fds;
pub(super) mod signals;

pub(super) use command::{RunArgs, run};
