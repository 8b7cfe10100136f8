//! Kernel events: each refusal, prompt or record taken once, into its line, ask and audit record.

use super::*;

impl Daemon {
    /// Each kernel event: an ask for a `prompt`, the message to the run it came from, an audit
    /// record. Under a flood this runs for every event, so what only an ask or a message needs
    /// is made only for them.
    pub fn on_events(&mut self, events: Vec<KernelEvent>) {
        let now = Instant::now();
        for event in events {
            if event.action == crate::kernel::events::Action::Held {
                self.on_held_socket(event, now);
            } else {
                self.take_event(event, now, false);
            }
        }
    }

    /// One event: its ask, its message to the run, its audit record. `held`: the call waits
    /// for the answer in its syscall (see `held.rs`), the run is told so.
    pub(super) fn take_event(
        &mut self,
        mut event: KernelEvent,
        now: Instant,
        held: bool,
    ) -> TakenEvent {
        // A write that failed with EACCES is the sandbox's only outside the run's roots.
        let sandbox = match &event.sandbox {
            Some(_) => {
                let sandbox = self
                    .scopes
                    .by_id
                    .get(&event.cgroup_id)
                    .and_then(|s| s.sandbox.as_ref());
                let Some((plan, from)) = sandbox else {
                    return TakenEvent::none();
                };
                plan.resolve_paths(&mut event);
                let Some(line) = plan.refusal(&event, from) else {
                    return TakenEvent::none();
                };
                // The record says which mode and roots refused it, and through which call.
                let roots: Vec<String> = plan
                    .roots
                    .iter()
                    .map(|r| r.root.display().to_string())
                    .collect();
                let syscall = event.sandbox.as_ref().map_or("", |w| w.syscall);
                let details = [
                    ("sandbox_mode", Value::from(plan.mode.as_str())),
                    ("writable_roots", Value::from(roots)),
                    ("syscall", Value::from(syscall)),
                ];
                Some((line, details))
            }
            None => None,
        };
        let (sandbox_line, sandbox_details) = sandbox.unzip();
        let scope = self.scopes.label_of(event.cgroup_id);
        self.tally.event(&event, scope, held);
        let answered = self.answered_names(&event);
        let from_run = self
            .scopes
            .by_id
            .get(&event.scope)
            .is_some_and(|s| s.is_run());
        let image = overlays::image_of(self.core.image(), &self.overlays, &event);
        let asking = Asking {
            book: Some(&mut self.asks),
            approval: self.config.asks.approval(),
            scope: (event.scope, from_run),
        };
        let taken = crate::asks::event::take(image, &event, &answered, sandbox_line, asking, now);
        let new_ask = taken.ask.filter(|_| taken.new_ask);
        let pod = self.pod_identity(event.scope, event.cgroup_id);
        if let Some(id) = new_ask {
            self.tally.asks_raised += 1;
            if let Some(pod) = &pod {
                self.asks.set_k8s(id, pod.clone());
            }
            // A run's asks are its user's to answer too (the built-in authorization).
            if let Some(ScopeKind::Run { uid, .. }) =
                self.scopes.by_id.get(&event.scope).map(|s| &s.kind)
            {
                self.asks.set_owner(id, user_name(*uid));
            }
        }
        let timeout_secs = self.config.asks.timeout().as_secs();
        if let Some(listener) = self
            .scopes
            .by_id
            .get_mut(&event.scope)
            .and_then(|s| s.listener.as_mut())
        {
            let held = held && taken.rejected.is_none();
            listener.blocked(
                repeat_key(&event),
                || Blocked {
                    line: if held {
                        taken.line.replacen("guard: refused ", "guard: holding ", 1)
                    } else {
                        taken.line.clone()
                    },
                    message: taken.message.clone(),
                    ask: taken.ask,
                    answers: taken.answers.map(str::to_string),
                    held,
                    expires_in: timeout_secs,
                    request: blocked_request(image, &event, &answered),
                },
                now,
            );
        }
        let scope = self
            .scopes
            .by_id
            .get(&event.scope)
            .map(|s| s.path.as_path());
        let mut record =
            self.audit
                .kernel_record(image, event, taken.message.clone(), scope, answered);
        record.ask = taken.ask;
        if let Some(pod) = pod {
            record.details.insert("k8s".into(), pod);
        }
        if held {
            record.details.insert("held".into(), Value::Bool(true));
            if taken.rejected.is_none() && taken.ask.is_some() {
                // It waits for the answer; its `held_ended` record says how it went on.
                record.action = Some("held".into());
            }
        }
        for (key, value) in sandbox_details.into_iter().flatten() {
            record.details.insert(key.into(), value);
        }
        if let Some(id) = new_ask {
            let mut ask_record = record.clone();
            ask_record.kind = RecordType::Ask;
            self.asks.set_origin(id, ask_record.clone());
            self.audit.emit(ask_record);
            if let Some(ask) = self.asks.get(id, now) {
                self.notify_watchers(WatchEvent::Ask { ask });
            }
        }
        self.audit.emit(record.clone());
        TakenEvent {
            message: taken.message,
            ask: taken.ask,
            rejected: taken.rejected,
            record: Some(record),
        }
    }

    pub(super) fn notify_watchers(&mut self, event: WatchEvent) {
        let (WatchEvent::Ask { ask } | WatchEvent::Resolved { ask }) = &event;
        let line = stream_line(&event);
        let authz = self.authz.clone();
        self.watchers.retain(|w| {
            let sees = w
                .subject
                .as_ref()
                .is_none_or(|subject| may_answer(&authz, subject, ask, false));
            !sees || w.stream.send(line.clone()).is_ok()
        });
    }
}

/// What the daemon made of one event (see [`Daemon::take_event`]).
pub(super) struct TakenEvent {
    pub(super) message: String,
    pub(super) ask: Option<u64>,
    /// Why a prompt was refused at once instead of asked (`never`, a granular category off).
    pub(super) rejected: Option<&'static str>,
    /// The event's audit record (`None`: the daemon kept nothing of it).
    pub(super) record: Option<AuditRecord>,
}

impl TakenEvent {
    /// An event the daemon kept nothing of (a permission error that is not the sandbox's).
    pub(super) fn none() -> TakenEvent {
        TakenEvent {
            message: String::new(),
            ask: None,
            rejected: None,
            record: None,
        }
    }
}
