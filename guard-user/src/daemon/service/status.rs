//! What the daemon tells about itself: `guard status`.

use std::time::Instant;

use super::Daemon;
use crate::daemon::wire::responses::{HostAddresses, RulesFile, ScopeStatus, StatusResponse};

impl Daemon {
    pub fn status(&self) -> StatusResponse {
        let mut per_file: std::collections::BTreeMap<String, usize> = Default::default();
        for rule in &self.core.image().rules {
            let file = rule
                .origin
                .as_ref()
                .map(|o| o.file.to_string())
                .unwrap_or_else(|| "<approvals>".to_string());
            *per_file.entry(file).or_default() += 1;
        }
        let events = self.core.enforcer().scope_events().unwrap_or_default();
        let scopes = self
            .scopes
            .by_id
            .values()
            .map(|s| {
                let counted = events.get(&s.id).copied().unwrap_or_default();
                ScopeStatus {
                    kind: s.kind.clone(),
                    cgroup: s.path.display().to_string(),
                    cgroup_id: s.id,
                    streaming: s.listener.is_some(),
                    asks_pending: self.asks.pending_in_scope(s.id),
                    events_submitted: counted.submitted,
                    events_lost: counted.lost,
                    overlay: super::overlays::holding(&self.overlays, s.id)
                        .map(|o| o.files.clone())
                        .unwrap_or_default(),
                    names_answered: self.core.names().answers().name_count_in(s.id),
                }
            })
            .collect();
        let now = Instant::now();
        let resolved = self.core.names().resolved();
        let addresses = resolved
            .hosts()
            .map(|host| HostAddresses {
                host: host.to_string(),
                addresses: crate::compile::HostResolver::lookup(resolved, host)
                    .iter()
                    .map(|a| a.to_string())
                    .collect(),
                refresh_in_secs: resolved
                    .expires(host)
                    .map(|e| e.saturating_duration_since(now).as_secs()),
                error: resolved.error(host).map(str::to_string),
            })
            .collect();
        let summed = self.core.enforcer().counters().unwrap_or_default();
        let events_lost = crate::kernel::maps::events_lost(&summed);
        let failed_open = crate::kernel::maps::failed_open(&summed)
            .into_iter()
            .map(|(hook, n)| (hook.to_string(), n))
            .collect();
        let counters: indexmap::IndexMap<String, u64> = summed
            .into_iter()
            .map(|(name, n)| (name.to_string(), n))
            .collect();
        StatusResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            backend: self.core.enforcer().backend().as_str().to_string(),
            uptime_secs: self.started.elapsed().as_secs(),
            audit_only: self.core.image().settings.audit_only,
            scopes,
            rules: per_file
                .into_iter()
                .map(|(file, rules)| RulesFile { file, rules })
                .collect(),
            unresolved_hosts: self.core.image().unresolved_hosts(),
            addresses,
            resolver: self.resolver_status(),
            asks_pending: self.asks.pending_count(),
            approvals: self.core.approvals().list().to_vec(),
            events_lost,
            counters,
            failed_open,
            audit: self.audit.status(),
            pinned: self.generation.display().to_string(),
            last_reload_error: self.last_reload_error.clone(),
            links_repaired: self.tally.links_repaired,
            last_link_repair: self.last_link_repair.clone(),
            layers: self.layers(),
        }
    }
}
