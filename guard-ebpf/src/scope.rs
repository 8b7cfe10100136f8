//! Which processes the policy applies to: those whose cgroup, or one of its ancestors, is in
//! `SCOPES`. Children stay in their parent's cgroup, so they are covered too.

use aya_ebpf::helpers::generated::bpf_get_current_ancestor_cgroup_id;
use guard_common::limits::MAX_SCOPE_DEPTH;

use crate::maps::SCOPES;

#[inline(always)]
pub fn current_in_scope() -> bool {
    let mut level = 0;
    while level <= MAX_SCOPE_DEPTH {
        // SAFETY: helper call with a plain integer argument.
        let id = unsafe { bpf_get_current_ancestor_cgroup_id(level as i32) };
        if id == 0 {
            // Past the current cgroup's depth.
            return false;
        }
        // SAFETY: lookup of a plain u64 key.
        if unsafe { SCOPES.get(&id) }.is_some() {
            return true;
        }
        level += 1;
    }
    false
}
