//! `aya::Pod` for the map types, so userspace can read and write them. Every type is
//! `#[repr(C)]`, `Copy`, and has no padding the kernel could read uninitialised (explicit `_pad`).
use crate::dfa::{DfaHeader, DfaRow};
use crate::event::{Event, TaskInfo};
use crate::maps::{
    ArgvEdge, ArgvNode, DnsOriginal, DnsRedirect, ExecIdentity, ExecName, HeldSocket,
    KernelOffsets, LongToken, NetHold, ScopeEvents, ScopedApproval, Settings, UnixKey, Verdict,
};

// SAFETY: plain old data: repr(C), Copy, every bit pattern valid.
unsafe impl aya::Pod for Verdict {}
unsafe impl aya::Pod for Settings {}
unsafe impl aya::Pod for ScopeEvents {}
unsafe impl aya::Pod for DnsRedirect {}
unsafe impl aya::Pod for NetHold {}
unsafe impl aya::Pod for HeldSocket {}
unsafe impl aya::Pod for ScopedApproval {}
unsafe impl aya::Pod for DnsOriginal {}
unsafe impl aya::Pod for ExecIdentity {}
unsafe impl aya::Pod for ExecName {}
unsafe impl aya::Pod for ArgvEdge {}
unsafe impl aya::Pod for ArgvNode {}
unsafe impl aya::Pod for LongToken {}
unsafe impl aya::Pod for KernelOffsets {}
unsafe impl aya::Pod for UnixKey {}
unsafe impl aya::Pod for Event {}
unsafe impl aya::Pod for TaskInfo {}
unsafe impl aya::Pod for DfaHeader {}
unsafe impl aya::Pod for DfaRow {}
