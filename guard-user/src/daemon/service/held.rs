//! Held calls under the daemon: a `guard run` client installs the seccomp filter on the
//! command it starts in its run scope and hands the listener over (`hold`); the daemon's hold
//! thread passes each prompted exec or connect here, where it becomes an ask like a kernel
//! refusal (message to the run, `guard prompts --watch`, the audit log), except that the call
//! waits. An approval is in the maps before the call continues; a denial or the ask's expiry
//! fails it as the kernel would (EACCES / EPERM) with the message on the program's stderr.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::Daemon;
use crate::asks::AskState;
use crate::audit::{AuditRecord, RecordType};
use crate::compile::kernel_engine::KernelEngine;
use crate::compile::prompts_udp;
use crate::daemon::peer::PeerCredentials;
use crate::daemon::protocol::ErrorCode;
use crate::daemon::responses::{HoldOffer, HoldResponse};
use crate::hold::event::held_event;
pub use crate::hold::sockets::HeldOutcome;
use crate::hold::{HeldCall, Hold, Reply, Twins};
use crate::policy::approval::ApprovalPolicy;

/// A held call waiting for its ask's answer.
pub struct WaitingCall {
    pub ask: u64,
    pub held: HeldCall,
    /// Its `decision` record (`action: "held"`): the `held_ended` record repeats who and what.
    pub record: Option<AuditRecord>,
}

/// Which calls the daemon would hold for a run: what its policy asks about, unless prompts are
/// refused at once (`[asks] approval = "never"`). Sent in the `run` response.
pub fn hold_offer(daemon: &Daemon) -> HoldOffer {
    let policy = &daemon.loaded.policy;
    let asking = daemon.config.asks.approval() != ApprovalPolicy::Never;
    let network = asking && crate::hold::policy_prompts_destinations(policy);
    HoldOffer {
        exec: asking && crate::hold::policy_prompts_execs(policy),
        network,
        messages: network && prompts_udp(daemon.in_force.image()),
    }
}

impl Daemon {
    /// The twins a hold decides with, for the calls `offer` holds.
    fn hold_twins(&self, exec: bool, network: bool) -> anyhow::Result<Twins> {
        Twins::of_image(
            self.in_force.image(),
            exec,
            network,
            self.name_server.is_some(),
        )
    }

    /// `hold`: takes over the listener of the peer's command. The peer must be a `guard run`
    /// client in one of the daemon's run scopes (its own, found by its cgroup).
    pub(super) fn adopt_hold(
        &mut self,
        peer: PeerCredentials,
        fd: i32,
        first_exec: bool,
    ) -> Result<HoldResponse, (ErrorCode, String)> {
        let failed = |message: String| (ErrorCode::Failed, message);
        let pid = peer
            .pid
            .ok_or_else(|| failed("the kernel gave no pid for this connection".into()))?;
        let cgroup = crate::kernel::scope::cgroup_of_pid(pid)
            .map_err(|e| failed(format!("reading pid {pid}'s cgroup: {e:#}")))?;
        let scope_id = self
            .scopes
            .by_id
            .values()
            .find(|s| s.is_run() && s.path == cgroup)
            .map(|s| s.id)
            .ok_or_else(|| {
                failed(format!(
                    "pid {pid} is in no run scope of this daemon ({}): send `run` first",
                    cgroup.display()
                ))
            })?;
        let listener = crate::hold::copy_fd(pid, fd).map_err(|e| {
            failed(format!(
                "copying descriptor {fd} of pid {pid} (pidfd_getfd): {e}"
            ))
        })?;
        let offer = hold_offer(self);
        let twins = self
            .hold_twins(offer.exec, offer.network)
            .map_err(|e| failed(format!("deciding held calls: {e:#}")))?;
        let wake = self.held_wake.clone();
        let hold = Hold::adopt(
            listener,
            first_exec,
            twins,
            Box::new(move || {
                let _ = wake.send(scope_id);
            }),
        )
        .map_err(|e| failed(format!("starting the hold: {e}")))?;
        if let Some(scope) = self.scopes.by_id.get_mut(&scope_id) {
            scope.hold = Some(hold);
        }
        Ok(HoldResponse {
            cgroup_id: scope_id,
            holds: offer,
        })
    }

    /// The calls the hold of run scope `scope_id` passed on: each is asked about (or refused
    /// at once, or let through when nothing can answer it).
    pub fn on_held(&mut self, scope_id: u64) {
        let now = Instant::now();
        let held = match self
            .scopes
            .by_id
            .get(&scope_id)
            .and_then(|s| s.hold.as_ref())
        {
            Some(hold) => hold.take_held(),
            None => return,
        };
        for held in held {
            if self
                .approvals
                .list()
                .iter()
                .any(|a| held.approved_by(&a.target))
            {
                self.reply_held(scope_id, &held, Reply::Continue);
                continue;
            }
            let event = held_event(self.in_force.image(), scope_id, &held);
            let taken = self.take_event(event, now, true);
            match (taken.rejected, taken.ask) {
                (Some(_), _) => {
                    self.fail_held(scope_id, &held, &taken.message);
                }
                // Nothing can answer it: the kernel decides (and refuses) as without the hold.
                (None, None) => self.reply_held(scope_id, &held, Reply::Continue),
                (None, Some(ask)) => {
                    if let Some(scope) = self.scopes.by_id.get_mut(&scope_id) {
                        scope.waiting.push(WaitingCall {
                            ask,
                            held,
                            record: taken.record,
                        });
                    }
                }
            }
        }
    }

    /// Lets each held call whose ask was answered go on, or fail; a call its program gave up
    /// is let go of (its ask stays open).
    pub(super) fn settle_held(&mut self) {
        let mut done = Vec::new();
        for scope in self.scopes.by_id.values_mut() {
            let waiting = std::mem::take(&mut scope.waiting);
            for call in waiting {
                let state = self.asks.state(call.ask);
                if matches!(state, Some(AskState::Pending)) {
                    let waits = scope
                        .hold
                        .as_ref()
                        .is_some_and(|hold| hold.still_waiting(call.held.id));
                    if waits {
                        scope.waiting.push(call);
                    } else {
                        done.push((scope.id, call, None));
                    }
                } else {
                    done.push((scope.id, call, Some(state.cloned())));
                }
            }
        }
        for (scope_id, call, state) in done {
            let outcome = match state {
                None => HeldOutcome::GivenUp,
                // The approval is in the kernel maps already: the BPF programs allow it.
                Some(Some(AskState::Approved { .. })) => {
                    self.reply_held(scope_id, &call.held, Reply::Continue);
                    HeldOutcome::Approved
                }
                Some(state) => {
                    let (outcome, how) = match state {
                        Some(AskState::Expired) => (HeldOutcome::Expired, "expired unanswered"),
                        _ => (HeldOutcome::Denied, "was denied"),
                    };
                    let event = held_event(self.in_force.image(), scope_id, &call.held);
                    let message = format!(
                        "{}; ask {} {how}",
                        crate::session::describe_event(self.in_force.image(), &event, &[]),
                        call.ask
                    );
                    self.fail_held(scope_id, &call.held, &message);
                    outcome
                }
            };
            self.record_held_end(&call, outcome);
        }
    }

    /// The `held_ended` record of `call`: its `decision` record's who and what, with how the
    /// call ended, what the program got and how long it waited.
    fn record_held_end(&mut self, call: &WaitingCall, outcome: HeldOutcome) {
        let mut record = call.record.clone().unwrap_or_default();
        record.kind = RecordType::HeldEnded;
        record.time = String::new();
        record.ask = Some(call.ask);
        record.action = Some(
            match outcome {
                HeldOutcome::Approved | HeldOutcome::Released => "continue",
                HeldOutcome::Denied | HeldOutcome::Expired => {
                    if call.held.refusal_errno() == libc::EACCES {
                        "eacces"
                    } else {
                        "eperm"
                    }
                }
                HeldOutcome::GivenUp => "none",
            }
            .into(),
        );
        record.details.remove("held");
        record
            .details
            .insert("outcome".into(), json!(outcome.as_str()));
        record.details.insert(
            "waited_ms".into(),
            json!(call.held.since.elapsed().as_millis() as u64),
        );
        self.audit.emit(record);
    }

    /// The policy or the destination tables changed: the holds decide later calls by them.
    pub(super) fn refresh_holds(&self) {
        let mut holds = self
            .scopes
            .by_id
            .values()
            .filter_map(|s| s.hold.as_ref())
            .peekable();
        if holds.peek().is_none() {
            return;
        }
        // One engine for every hold: the image is encoded once.
        let engine = match KernelEngine::new(self.in_force.image().clone()) {
            Ok(engine) => Arc::new(engine),
            Err(err) => {
                tracing::warn!("the holds keep deciding by the previous image: {err:#}");
                return;
            }
        };
        let redirected = self.name_server.is_some();
        for hold in holds {
            hold.set_engine(&engine, redirected);
        }
    }

    /// The daemon stops: every waiting call continues, and the kernel decides it (a prompt is
    /// refused there), so none waits for an answer that can no longer come.
    pub(super) fn release_held(&mut self) {
        let mut released = Vec::new();
        for scope in self.scopes.by_id.values_mut() {
            for call in std::mem::take(&mut scope.waiting) {
                if let Some(hold) = scope.hold.as_ref() {
                    let _ = hold.reply(call.held.id, Reply::Continue);
                }
                released.push(call);
            }
            scope.hold = None;
        }
        for call in released {
            self.record_held_end(&call, HeldOutcome::Released);
        }
    }

    fn reply_held(&self, scope_id: u64, held: &HeldCall, reply: Reply) {
        if let Some(hold) = self
            .scopes
            .by_id
            .get(&scope_id)
            .and_then(|s| s.hold.as_ref())
        {
            let _ = hold.reply(held.id, reply);
        }
    }

    /// Fails a held call as the kernel's refusal would, and says why on the program's stderr
    /// (before its call returns, so the line comes before the program's own) and to its
    /// `guard run` client, which prints it when the program has no stderr to write to.
    fn fail_held(&mut self, scope_id: u64, held: &HeldCall, message: &str) {
        let on_stderr = crate::hold::tell_stderr(held.pid, message);
        self.reply_held(scope_id, held, Reply::Fail(held.refusal_errno()));
        if let Some(listener) = self
            .scopes
            .by_id
            .get_mut(&scope_id)
            .and_then(|s| s.listener.as_mut())
        {
            listener.message(message, on_stderr);
        }
    }
}
