//! Which processes the policy applies to, decided by the deepest of the current cgroup and its
//! ancestors that is listed in `SCOPES`: a value of 1 puts it (and what is below it) in scope,
//! 0 exempts it. So a daemon can scope the root cgroup (host-wide) and exempt its own cgroup,
//! and a scope inside an exempt cgroup is enforced again. Children stay in their parent's
//! cgroup, so they are covered too.

use aya_ebpf::helpers::generated::bpf_get_current_ancestor_cgroup_id;
use guard_common::limits::MAX_SCOPE_DEPTH;

use crate::maps::SCOPES;

#[inline(always)]
pub fn current_in_scope() -> bool {
    current_scope() != 0
}

/// The cgroup id of the current process's scope: the deepest listed cgroup on its way down, if
/// that listing puts it in scope; 0 when it is not in scope.
#[inline(always)]
pub fn current_scope() -> u64 {
    // Nothing listed on the way down: not in scope (fails open; processes outside every scope
    // are none of guard's business).
    let mut scope = 0;
    let mut level = 0;
    // Levels past MAX_SCOPE_DEPTH are not looked at: a listing that deep is ignored, so a scope
    // there fails open and an exemption there fails closed (the shallower listing decides).
    while level <= MAX_SCOPE_DEPTH {
        // SAFETY: helper call with a plain integer argument.
        let id = unsafe { bpf_get_current_ancestor_cgroup_id(level as i32) };
        if id == 0 {
            // Past the current cgroup's depth: the deepest listing seen decides.
            break;
        }
        // SAFETY: lookup of a plain u64 key.
        if let Some(value) = unsafe { SCOPES.get(&id) } {
            scope = if *value != 0 { id } else { 0 };
        }
        level += 1;
    }
    scope
}
