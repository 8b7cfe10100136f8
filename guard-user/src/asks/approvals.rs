//! Approvals that live in memory: `--once` (for a short window) and `--session` (until the
//! daemon stops or the ask's scope ends). They are added to the image each time the policy is
//! compiled, so a reload keeps them and their expiry removes them.
//!
//! Both kinds are exact and held in the kernel: the same argv (in the argv trie), the same
//! address, port and transport (in the destination trie), or the same unix socket address (in
//! the unix exact table). The kernel lets an approval turn that
//! one request's `prompt` into allow and never touches `forbidden` (an allow rule could not do
//! this for execs, whose prefix decisions combine by strongest, nor for a `prompt`
//! `address_rule`).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use std::net::IpAddr;

use super::ApprovalMode;
use crate::compile::image::EnforcementImage;
use crate::policy::Transport;

/// Who answers an ask or asks for an amendment: the peer's user name and uid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answerer {
    pub name: String,
    pub uid: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ApprovalTarget {
    Exec {
        tokens: Vec<String>,
    },
    Network {
        address: IpAddr,
        port: u16,
        transport: Transport,
        /// For people: the host name the address came from, if any.
        host: Option<String>,
    },
    /// A unix socket address as a person reads it (`/path`, `@name`).
    Unix {
        socket: String,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Approval {
    /// The ask it answered.
    pub ask: u64,
    pub mode: ApprovalMode,
    pub by: String,
    pub target: ApprovalTarget,
    /// A run scope it ends with (session approvals of asks from `guard run`).
    pub scope: Option<u64>,
    /// The scope (cgroup id) whose requests it lets through: the one whose ask it answered.
    /// No other scope's request is let through by it, whoever runs there.
    pub for_scope: u64,
    #[serde(skip)]
    pub until: Option<Instant>,
}

impl Approval {
    /// `by`'s approval of `ask` in `mode`, letting `target` through for the ask's scope alone:
    /// `--once` for `once` from `now`, `--session` until the ask's run ends (if a run asked).
    pub fn answering(
        ask: &super::Ask,
        mode: ApprovalMode,
        by: &Answerer,
        target: ApprovalTarget,
        (once, now): (std::time::Duration, Instant),
    ) -> Approval {
        Approval {
            ask: ask.id,
            mode,
            by: by.name.clone(),
            target,
            scope: (mode == ApprovalMode::Session && ask.from_run).then_some(ask.scope),
            for_scope: ask.scope,
            until: (mode == ApprovalMode::Once).then(|| now + once),
        }
    }

    /// What events and `guard` output show as its rule.
    fn rule_text(&self) -> String {
        format!("approval(ask={}, mode={})", self.ask, self.mode.as_str())
    }

    fn justification(&self) -> String {
        format!(
            "approved {} by {} (ask {})",
            self.mode.as_str(),
            self.by,
            self.ask
        )
    }
}

#[derive(Clone, Default)]
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

    /// The names of the stand-in addresses approved: guard resolves them for real, so an
    /// approved connect to a stand-in goes to its name's address (`resolve::stand_ins`).
    pub fn stand_in_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .list
            .iter()
            .filter_map(|a| match &a.target {
                ApprovalTarget::Network {
                    address,
                    host: Some(host),
                    ..
                } if crate::resolve::stand_ins::is_stand_in_ip(*address) => Some(host.clone()),
                _ => None,
            })
            .collect();
        names.sort();
        names.dedup();
        names
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

    /// Adds the approvals to a compiled image. An exec approval the kernel cannot hold exactly
    /// was refused when it was made, so errors here are reported, not fatal.
    pub fn add_to_image(&self, image: &mut EnforcementImage) -> Vec<String> {
        let mut errors = Vec::new();
        for approval in &self.list {
            let how = approval.justification();
            match &approval.target {
                ApprovalTarget::Exec { tokens } => {
                    let shown = shlex::try_join(tokens.iter().map(String::as_str))
                        .unwrap_or_else(|_| tokens.join(" "));
                    if let Err(err) = image.add_exec_approval(
                        approval.for_scope,
                        tokens,
                        approval.rule_text(),
                        format!("`{shown}`, {how}"),
                    ) {
                        errors.push(err.to_string());
                    }
                }
                ApprovalTarget::Network {
                    address,
                    port,
                    transport,
                    host,
                } => {
                    let name = host.as_ref().map(|h| format!(" ({h})")).unwrap_or_default();
                    image.add_destination_approval(
                        approval.for_scope,
                        *address,
                        *port,
                        *transport,
                        approval.rule_text(),
                        format!("{address}:{port}/{}{name}, {how}", transport.as_str()),
                    );
                }
                ApprovalTarget::Unix { socket } => {
                    image.add_unix_approval(
                        approval.for_scope,
                        crate::policy::unix::parse_address(socket),
                        approval.rule_text(),
                        format!("the unix socket {socket}, {how}"),
                    );
                }
            }
        }
        errors
    }
}
