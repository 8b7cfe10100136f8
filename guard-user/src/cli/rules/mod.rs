//! The verbs over rules files alone, with no kernel and no daemon: `check`, `execpolicy` (the
//! Codex CLI's), `hook`, `policy`, `authz`, the amendment verbs, `legacy`, `replay`.

pub(super) mod amend;
pub(super) mod authz;
pub(super) mod check;
pub mod execpolicy;
pub(super) mod hook;
pub(super) mod legacy;
pub(super) mod policy;
pub(super) mod replay;
