//! What the daemon counts itself, for its metrics: the kernel events it read, by kind, decision
//! and scope; the asks it raised and how they ended; control requests it refused. The kernel's
//! own counters (every decision, allowed ones too) are read from its map at each scrape; these
//! are the counts only the daemon can label.
//!
//! Every label comes from a fixed set (event kinds, the three decisions, scope kinds, answer
//! modes), never from a name, path, pid or argv, so the number of series is bounded whatever the
//! traffic: at most 7 kinds × 3 decisions × 4 scopes decisions.

use std::collections::BTreeMap;

use crate::kernel::events::KernelEvent;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Kernel events read: `(kind, decision, scope)` → count.
    pub decisions: BTreeMap<(&'static str, &'static str, &'static str), u64>,
    /// Of those, calls refused (a `prompt` or `forbidden` decision that was enforced, not
    /// audit-only, and not a call held for its answer): `(kind, scope)` → count.
    pub refusals: BTreeMap<(&'static str, &'static str), u64>,
    /// Asks raised (a repeat folded into a pending ask is not a new one).
    pub asks_raised: u64,
    /// Asks ended, by how: `once`, `session`, `always`, `deny`, `deny_always`, `expired`.
    pub asks_answered: BTreeMap<&'static str, u64>,
    /// Control-socket requests the authorization policy refused.
    pub control_refused: u64,
    /// Pinned links found detached (or their pins removed) and attached again.
    pub links_repaired: u64,
}

/// How an ask can end, in the order the metrics list them.
pub const ASK_ENDINGS: [&str; 6] = [
    "once",
    "session",
    "always",
    "deny",
    "deny_always",
    "expired",
];

impl Tally {
    /// One kernel event the daemon took, from a scope of kind `scope`. `held`: the call waits
    /// in its syscall for the ask's answer (a run's hold), so it is not (yet) a refusal.
    pub fn event(&mut self, event: &KernelEvent, scope: &'static str, held: bool) {
        let kind = event.kind.as_str();
        *self
            .decisions
            .entry((kind, event.decision.as_str(), scope))
            .or_default() += 1;
        if event.decision != guard_common::Decision::Allow && !event.audit_only && !held {
            *self.refusals.entry((kind, scope)).or_default() += 1;
        }
    }

    /// An ask ended `how` (one of [`ASK_ENDINGS`]).
    pub fn ask_ended(&mut self, how: &'static str) {
        debug_assert!(ASK_ENDINGS.contains(&how), "{how}");
        *self.asks_answered.entry(how).or_default() += 1;
    }
}
