//! Approvals belong to the scope whose ask they answered: an approval mark in the tries says
//! some scope was given that exact request, and `APPROVALS` says which. Looked up only when a
//! mark was found, so calls nobody approved never pay for it.

use guard_common::maps::ScopedApproval;

use crate::maps::APPROVALS;

/// Whether `scope` was given the approval of an argv ending at trie node `node`.
#[inline(always)]
pub fn exec_approved(scope: u64, node: u32) -> bool {
    // SAFETY: lookup of a plain key.
    unsafe { APPROVALS.get(&ScopedApproval::exec(scope, node)) }.is_some()
}

/// Whether `scope` was given the approval of exactly this destination (IPv4 when `v4`, in the
/// first 4 bytes of `addr`).
#[inline(always)]
pub fn destination_approved(
    scope: u64,
    v4: bool,
    addr: &[u8; 16],
    port: u16,
    transport: u8,
) -> bool {
    let key = ScopedApproval::destination(scope, v4, *addr, port, transport);
    // SAFETY: lookup of a plain key.
    unsafe { APPROVALS.get(&key) }.is_some()
}

/// Whether `scope` was given the approval of the unix socket whose exact-table entry names rule
/// `entry_rule`.
#[inline(always)]
pub fn unix_approved(scope: u64, entry_rule: u32) -> bool {
    // SAFETY: lookup of a plain key.
    unsafe { APPROVALS.get(&ScopedApproval::unix(scope, entry_rule)) }.is_some()
}
