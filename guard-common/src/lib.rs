//! Types shared by guard's kernel programs and its userspace.
//!
//! Everything here is `#![no_std]` and `#[repr(C)]`/`#[repr(u8)]` so the same definitions are
//! compiled into the BPF object and into the `guard` binary. Logic that must agree on both sides
//! (how decisions combine) lives here, so host unit tests cover what the kernel runs.
#![no_std]

pub mod decision;
pub mod dfa;
pub mod engine;
pub mod event;
pub mod limits;
pub mod maps;
#[cfg(feature = "user")]
mod pod;
pub mod sockets;

pub use decision::Decision;
