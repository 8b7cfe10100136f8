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
use crate::audit::{AuditRecord, RecordType};
use crate::compile::kernel_engine::KernelEngine;
use crate::compile::prompts_udp;
use crate::daemon::peer::PeerCredentials;
use crate::daemon::wire::protocol::ErrorCode;
use crate::daemon::wire::responses::{HoldOffer, HoldResponse};
use crate::hold::event::held_event;
pub use crate::hold::sockets::HeldOutcome;
use crate::hold::sockets::HeldSocket;
use crate::hold::{HeldCall, Hold, Reply, Twins};
use crate::kernel::events::KernelEvent;
use crate::policy::approval::ApprovalPolicy;

/// A socket the kernel holds (a prompted connect or send let through with its packets held),
/// waiting for its ask's answer.
pub struct WaitingSocket {
    pub socket: HeldSocket,
    /// The run scope (or other scope) it is in, for the message to its run.
    pub scope: u64,
    /// Its `decision` record (`action: "held"`): the `held_ended` record repeats who and what.
    pub record: Option<AuditRecord>,
}

/// A held call waiting for its ask's answer.
pub struct WaitingCall {
    pub ask: u64,
    pub held: HeldCall,
    /// Its `decision` record (`action: "held"`): the `held_ended` record repeats who and what.
    pub record: Option<AuditRecord>,
}

/// Which calls the daemon would hold for run scope `scope`: what its policy (or the run's
/// overlay) asks about, unless prompts are refused at once (`[asks] approval = "never"`). Sent
/// in the `run` response. An overlay's prompted connects are not held: its program set refuses
/// them at once, and they are asked.
pub fn hold_offer(daemon: &Daemon, scope: u64) -> HoldOffer {
    let policy = daemon.core.policy();
    let overlay_prompts_execs = daemon
        .overlays
        .get(&scope)
        .is_some_and(|o| crate::hold::policy_prompts_execs(o.policy()));
    let asking = daemon.config.asks.approval() != ApprovalPolicy::Never;
    // Connects the kernel holds need no filter.
    let network = asking
        && crate::hold::policy_prompts_destinations(policy)
        && !daemon.core.enforcer().holds_network();
    HoldOffer {
        exec: asking && (crate::hold::policy_prompts_execs(policy) || overlay_prompts_execs),
        network,
        messages: network && prompts_udp(daemon.core.image()),
    }
}

impl Daemon {
    /// A held call's event, named by the image whose rule held it: the run's overlay's when
    /// its rule did (`overlays.rs`), else the daemon's.
    fn held_call_event(&self, scope_id: u64, held: &HeldCall) -> KernelEvent {
        let event = held_event(self.core.image(), scope_id, held);
        match self.overlays.get(&scope_id) {
            Some(overlay) if event.rule.is_none() && held.by_rule() => {
                let mut event = held_event(overlay.image(), scope_id, held);
                event.overlay = event.rule.is_some();
                event
            }
            _ => event,
        }
    }

    /// The twins a hold decides with, for the calls `offer` holds.
    fn hold_twins(&self, exec: bool, network: bool) -> anyhow::Result<Twins> {
        Twins::of_image(self.core.image(), exec, network, self.name_server.is_some())
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
        let pid = super::peer_process(&peer)?;
        let cgroup = peer
            .process
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("no process"))
            .and_then(crate::kernel::peer::PeerProcess::cgroup)
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
        let offer = hold_offer(self, scope_id);
        // Decided for this run's scope: another run's approvals are no approval here.
        let mut twins = self
            .hold_twins(offer.exec, offer.network)
            .map_err(|e| failed(format!("deciding held calls: {e:#}")))?;
        if let Some(overlay) = self.overlays.get(&scope_id)
            && offer.exec
        {
            let overlay = Twins::of_image(overlay.image(), true, false, self.name_server.is_some())
                .map_err(|e| failed(format!("deciding held calls by the overlay: {e:#}")))?;
            twins.overlay = Some(Box::new(overlay));
        }
        let twins = twins.for_scope(Some(scope_id));
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
                .core
                .approvals()
                .list()
                .iter()
                .any(|a| held.approved_by(&a.target))
            {
                self.reply_held(scope_id, &held, Reply::Continue);
                continue;
            }
            let event = self.held_call_event(scope_id, &held);
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

    /// A connect or send the kernel holds: asked about like a refusal, and it waits for the
    /// answer; one nobody can answer (refused at once under `never`, no room for its ask) is
    /// ended as the refusal it would have been.
    pub(super) fn on_held_socket(&mut self, event: KernelEvent, now: Instant) {
        let (cookie, pid, scope) = (event.ino, event.pid, event.cgroup_id);
        let transport = match event.destination.as_ref().map(|d| d.transport) {
            Some("udp") => guard_common::maps::TRANSPORT_UDP,
            _ => guard_common::maps::TRANSPORT_TCP,
        };
        let refusal = crate::asks::messages::describe_event(self.core.image(), &event, &[]);
        let taken = self.take_event(event, now, true);
        match (taken.rejected, taken.ask) {
            (None, Some(ask)) => self.held_sockets.push(WaitingSocket {
                socket: HeldSocket::new(cookie, ask, pid, transport, refusal),
                scope,
                record: taken.record,
            }),
            _ => {
                let enforcer = self.core.enforcer_mut();
                if let Err(err) = enforcer.end_and_forget_held_socket(cookie) {
                    tracing::warn!("ending a held connect nobody can answer: {err:#}");
                }
            }
        }
    }

    /// Ends each held socket whose ask was denied or expired, lets go of those that went on
    /// or whose program gave up, and records how each ended.
    fn settle_sockets(&mut self) {
        let mut ended = Vec::new();
        for mut waiting in std::mem::take(&mut self.held_sockets) {
            let state = self.asks.state(waiting.socket.ask);
            match waiting
                .socket
                .step(self.core.enforcer_mut(), state, self.splices.as_mut())
            {
                Ok(None) => self.held_sockets.push(waiting),
                Ok(Some(outcome)) => ended.push((waiting, outcome)),
                Err(err) => {
                    // A kernel table that cannot be read: the socket is let go of (its packets
                    // stay held until its own timeout), not retried every turn.
                    tracing::warn!("a held connect: {err:#}");
                }
            }
        }
        for (waiting, outcome) in ended {
            let socket = &waiting.socket;
            if let Some(line) = outcome.refusal_line(&socket.refusal, socket.ask) {
                self.tell_run(waiting.scope, socket.pid, &line);
            }
            let action = match outcome {
                HeldOutcome::Approved => "continue",
                HeldOutcome::GivenUp => "none",
                _ => "ended",
            };
            self.record_held_end(
                waiting.record.as_ref(),
                waiting.socket.ask,
                outcome,
                action,
                waiting.socket.waited(),
            );
        }
    }

    /// Lets each held call whose ask was answered go on, or fail; a call its program gave up
    /// is let go of (its ask stays open).
    pub(super) fn settle_held(&mut self) {
        if !self.held_sockets.is_empty() {
            self.settle_sockets();
        }
        let mut done = Vec::new();
        for scope in self.scopes.by_id.values_mut() {
            let waiting = std::mem::take(&mut scope.waiting);
            for call in waiting {
                let waits = scope
                    .hold
                    .as_ref()
                    .is_some_and(|hold| hold.still_waiting(call.held.id));
                match HeldOutcome::of_answer(self.asks.state(call.ask), waits) {
                    None => scope.waiting.push(call),
                    Some(outcome) => done.push((scope.id, call, outcome)),
                }
            }
        }
        for (scope_id, call, outcome) in done {
            match outcome {
                // The approval is in the kernel maps already: the BPF programs allow it.
                HeldOutcome::Approved => self.reply_held(scope_id, &call.held, Reply::Continue),
                HeldOutcome::Denied | HeldOutcome::Expired => {
                    let event = self.held_call_event(scope_id, &call.held);
                    let image =
                        super::overlays::image_of(self.core.image(), &self.overlays, &event);
                    let refusal = crate::asks::messages::describe_event(image, &event, &[]);
                    if let Some(line) = outcome.refusal_line(&refusal, call.ask) {
                        self.fail_held(scope_id, &call.held, &line);
                    }
                }
                HeldOutcome::GivenUp | HeldOutcome::Released => {}
            }
            self.record_call_end(&call, outcome);
        }
    }

    /// The `held_ended` record of a held call whose `decision` record was `record`: its who and
    /// what, with how the call ended, what the program got (`action`) and how long it waited.
    fn record_held_end(
        &mut self,
        record: Option<&AuditRecord>,
        ask: u64,
        outcome: HeldOutcome,
        action: &str,
        waited: std::time::Duration,
    ) {
        let mut record = record.cloned().unwrap_or_default();
        record.kind = RecordType::HeldEnded;
        record.time = String::new();
        record.ask = Some(ask);
        record.action = Some(action.into());
        record.details.remove("held");
        record
            .details
            .insert("outcome".into(), json!(outcome.as_str()));
        record
            .details
            .insert("waited_ms".into(), json!(waited.as_millis() as u64));
        self.audit.emit(record);
    }

    /// The `held_ended` record of a call held in its syscall.
    fn record_call_end(&mut self, call: &WaitingCall, outcome: HeldOutcome) {
        let action = match outcome {
            HeldOutcome::Approved | HeldOutcome::Released => "continue",
            HeldOutcome::Denied | HeldOutcome::Expired => {
                if call.held.refusal_errno() == libc::EACCES {
                    "eacces"
                } else {
                    "eperm"
                }
            }
            HeldOutcome::GivenUp => "none",
        };
        self.record_held_end(
            call.record.as_ref(),
            call.ask,
            outcome,
            action,
            call.held.since.elapsed(),
        );
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
        let engine = match KernelEngine::new(self.core.image().clone()) {
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
        for (scope, overlay) in &self.overlays {
            let Some(hold) = self.scopes.by_id.get(scope).and_then(|s| s.hold.as_ref()) else {
                continue;
            };
            match KernelEngine::new(overlay.image().clone()) {
                Ok(engine) => hold.set_overlay_engine(&Arc::new(engine), redirected),
                Err(err) => tracing::warn!(
                    "run scope {scope}'s hold keeps deciding by its overlay's previous image: \
                     {err:#}"
                ),
            }
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
            self.record_call_end(&call, HeldOutcome::Released);
        }
        // Sockets the kernel holds are ended: no answer can come any more.
        for waiting in std::mem::take(&mut self.held_sockets) {
            let cookie = waiting.socket.cookie;
            if let Err(err) = self.core.enforcer_mut().end_and_forget_held_socket(cookie) {
                tracing::warn!("ending a held connect as the daemon stops: {err:#}");
            }
            self.record_held_end(
                waiting.record.as_ref(),
                waiting.socket.ask,
                HeldOutcome::Released,
                "ended",
                waiting.socket.waited(),
            );
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

    /// Says `message` on the program's stderr (thread `pid`) and to the `guard run` client of
    /// scope `scope_id`, which prints it when the program's stderr could not be written.
    fn tell_run(&mut self, scope_id: u64, pid: u32, message: &str) {
        let on_stderr = crate::hold::tell_stderr(pid, message);
        if let Some(listener) = self
            .scopes
            .by_id
            .get_mut(&scope_id)
            .and_then(|s| s.listener.as_mut())
        {
            listener.message(message, on_stderr);
        }
    }

    /// Fails a held call as the kernel's refusal would, and says why on the program's stderr
    /// (before its call returns, so the line comes before the program's own) and to its
    /// `guard run` client, which prints it when the program has no stderr to write to.
    fn fail_held(&mut self, scope_id: u64, held: &HeldCall, message: &str) {
        self.tell_run(scope_id, held.pid, message);
        self.reply_held(scope_id, held, Reply::Fail(held.refusal_errno()));
    }
}
