//! The kernel's decision logic, once: the BPF programs call it with their map lookups, and
//! userspace (`guard check --kernel`, the hold, `guard replay`, the tests) calls it with the
//! tables the encoder makes from an image, so both decide with the same code.
//!
//! Each part is generic over how a table is read and keeps no state of its own: the kernel
//! keeps walk state in per-CPU map memory (see `guard-ebpf`'s `argv`), the host on its stack.
//!
//! - [`argv`]: the argv trie walk under every reading of token 0, and its trie keys;
//! - [`exec`]: how identity, name, argv, pattern and default verdicts combine for an exec;
//! - [`destination`]: how the destination tables' classes combine for a connect or send;
//! - [`outcome`]: the tail every decision shares: count, record, audit-only or enforce.

pub mod argv;
pub mod destination;
pub mod exec;
pub mod outcome;

use crate::limits::NO_RULE;
use crate::maps::Verdict;

/// A call's verdict and the event flags that say how it was reached
/// (`crate::event::flag::UNMATCHED`, `ANONYMOUS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decided {
    pub verdict: Verdict,
    pub flags: u8,
}

/// A policy default (a decision code) as a verdict no rule made.
#[inline(always)]
pub const fn default_verdict(decision: u8) -> Verdict {
    Verdict {
        decision,
        flags: 0,
        _pad: 0,
        rule: NO_RULE,
    }
}
