//! guard's kernel programs live here: one file per hook family (exec, net, scope, events).
//!
//! Until the kernel-enforcement issue lands this crate only fixes its place in the workspace. It
//! is not a default member, so host builds never compile BPF code.
#![no_std]

pub use guard_common::Decision;
