//! Approvals that live in memory: `--once` (for a short window) and `--session` (until the
//! daemon stops or the ask's scope ends). They are applied on top of the loaded policy each time
//! it is compiled, so a reload keeps them and their expiry removes them.
//!
//! - Network: an approval is an allow `network_rule` for the host appended after the policy's
//!   own, which overrides a `prompt` host (§2.4: the last allow/deny of a host decides). An
//!   explicitly denied host or a forbidden address stays forbidden: the daemon checks the
//!   compiled result before it accepts an approval.
//! - Exec: an exact-argv approval in the kernel's argv trie, which turns that argv's `prompt`
//!   into allow and never touches `forbidden` (an allow prefix rule could not: prefix
//!   decisions combine by strongest).

use std::time::Instant;

use serde::Serialize;

use super::protocol::ApprovalMode;
use crate::compile::image::EnforcementImage;
use crate::policy::{Decision, NetworkProtocol, Policy};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ApprovalTarget {
    Exec {
        tokens: Vec<String>,
    },
    Network {
        host: String,
        protocol: NetworkProtocol,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct Approval {
    /// The ask it answered.
    pub ask: u64,
    pub mode: ApprovalMode,
    pub by: String,
    pub target: ApprovalTarget,
    /// A run scope it ends with (session approvals of asks from `guard run`).
    pub scope: Option<u64>,
    #[serde(skip)]
    pub until: Option<Instant>,
}

impl Approval {
    fn justification(&self) -> String {
        format!(
            "approved {} by {} (ask {})",
            self.mode.as_str(),
            self.by,
            self.ask
        )
    }
}

#[derive(Default)]
pub struct Approvals {
    list: Vec<Approval>,
}

impl Approvals {
    pub fn add(&mut self, approval: Approval) {
        self.list.push(approval);
    }

    pub fn list(&self) -> &[Approval] {
        &self.list
    }

    /// Drops once-approvals whose window closed; whether any went.
    pub fn expire(&mut self, now: Instant) -> bool {
        let before = self.list.len();
        self.list
            .retain(|a| a.until.is_none_or(|until| until > now));
        self.list.len() != before
    }

    /// Drops the approvals tied to a scope that ended; whether any went.
    pub fn end_scope(&mut self, scope: u64) -> bool {
        let before = self.list.len();
        self.list.retain(|a| a.scope != Some(scope));
        self.list.len() != before
    }

    /// `policy` with the network approvals appended as allow rules.
    pub fn policy_with_approvals(&self, policy: &Policy) -> Policy {
        let mut out = policy.clone();
        for approval in &self.list {
            if let ApprovalTarget::Network { host, protocol } = &approval.target {
                // The host was normalised when the ask was made; a failure here would only
                // mean the approval holds nothing, which is the safe side.
                let _ = out.add_network_rule(
                    host,
                    *protocol,
                    Decision::Allow,
                    Some(approval.justification()),
                );
            }
        }
        out
    }

    /// Adds the exec approvals to a compiled image. An approval the kernel cannot hold exactly
    /// was refused when it was made, so errors here are reported, not fatal.
    pub fn add_to_image(&self, image: &mut EnforcementImage) -> Vec<String> {
        let mut errors = Vec::new();
        for approval in &self.list {
            if let ApprovalTarget::Exec { tokens } = &approval.target {
                let shown = shlex::try_join(tokens.iter().map(String::as_str))
                    .unwrap_or_else(|_| tokens.join(" "));
                if let Err(err) = image.add_exec_approval(
                    tokens,
                    format!(
                        "approval(ask={}, mode={})",
                        approval.ask,
                        approval.mode.as_str()
                    ),
                    format!("`{shown}`, {}", approval.justification()),
                ) {
                    errors.push(err.to_string());
                }
            }
        }
        errors
    }
}
