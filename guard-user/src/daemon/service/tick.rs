//! The housekeeping round every [`TICK`]: expired asks and approvals, links repaired, finished
//! runs, the layers looked at, pattern folders and pods looked through, DNS refreshed.

use super::*;

impl Daemon {
    /// Timers: expired asks and once-approvals, finished run scopes, DNS.
    pub async fn tick(&mut self) {
        let now = Instant::now();
        for ask in self.asks.expire(now) {
            let mut record = ask.origin.clone().unwrap_or_default();
            record.kind = RecordType::AskExpired;
            self.tally.ask_ended("expired");
            record.time = String::new();
            record.ask = Some(ask.id);
            record
                .details
                .insert("becomes".into(), json!(self.config.asks.expire));
            self.audit.emit(record);
            self.notify_watchers(WatchEvent::Resolved { ask });
        }
        self.repair_links();
        self.revive_resolver().await;
        // Once a second: a look at every link costs a syscall each.
        if self.layers_looked_at.elapsed() >= Duration::from_secs(1) {
            self.layers_looked_at = Instant::now();
            self.record_layer_changes();
        }
        // Before a finished run's scope goes: its last losses are said under its name.
        self.account_scope_losses();
        self.watch_patterns();
        self.watch_pods();
        let ended = self.scopes.end_finished_runs();
        for id in &ended {
            let _ = self.core.enforcer_mut().remove_scope(*id);
            self.overlays.remove(id);
            self.end_scope_names(*id);
        }
        let left_out = self.core.image().patterns.left_out.clone();
        let expire = |approvals: &mut crate::asks::Approvals| {
            let mut changed = approvals.expire(now);
            for id in &ended {
                changed |= approvals.end_scope(*id);
            }
            changed
        };
        match self
            .core
            .change_approvals(expire, Self::stacked(&mut self.overlays))
        {
            Ok(true) => self.changed(&left_out),
            Ok(false) => {}
            Err(err) => tracing::error!("applying expired approvals failed: {err:#}"),
        }
        if let Err(err) = self.refresh_dns().await {
            tracing::warn!("DNS refresh failed: {err:#}");
        }
        let stacked = Self::stacked(&mut self.overlays);
        if let Err(err) = self.core.take_answers(&[], now, stacked) {
            tracing::error!("dropping expired DNS answers failed: {err:#}");
        }
        self.watchers.retain(|w| !w.stream.is_closed());
        for scope in self.scopes.by_id.values_mut() {
            if let Some(listener) = scope.listener.as_mut() {
                listener.settle(now, false);
            }
        }
        self.audit.prune();
        // Events lost in the kernel: the ring full, or a scope past its share of it.
        let ring_lost = self
            .core
            .enforcer()
            .counters()
            .map(|counters| crate::kernel::maps::events_lost(&counters))
            .unwrap_or(0);
        self.audit.account_losses(ring_lost);
        // A window of the scopes' shares that ended: what each folded.
        self.audit.end_window(now);
    }

    /// The daemon's pinned links that a process detached (or whose pins it removed): attached
    /// and pinned again, each recorded, counted and said in the log and `guard status`.
    pub(super) fn repair_links(&mut self) {
        for repair in self.core.enforcer_mut().repair_links() {
            let what = repair.to_string();
            match &repair.failed {
                None => tracing::warn!("{what}"),
                Some(_) => tracing::error!("{what}"),
            }
            self.tally.links_repaired += 1;
            self.audit.record(
                RecordType::LinkRepaired,
                "root",
                json!({
                    "program": repair.program,
                    "pin": repair.pin.display().to_string(),
                    "cgroup": repair.cgroup.as_ref().map(|c| c.display().to_string()),
                    "detached": repair.detached,
                    "failed": repair.failed,
                }),
            );
            self.last_link_repair = Some(what);
        }
    }

    /// A `scope_loss` record for each scope that lost kernel events since the last.
    pub(super) fn account_scope_losses(&mut self) {
        if let Ok(events) = self.core.enforcer().scope_events() {
            let scopes: Vec<(u64, &std::path::Path, u64)> = self
                .scopes
                .by_id
                .values()
                .filter_map(|s| Some((s.id, s.path.as_path(), events.get(&s.id)?.lost)))
                .collect();
            self.audit.account_scope_losses(&scopes);
        }
    }
}
