//! What the daemon tells about itself: `guard status`.

use std::time::Instant;

use serde_json::{Value, json};

use super::Daemon;

impl Daemon {
    pub fn status(&self) -> Value {
        let mut per_file: std::collections::BTreeMap<String, usize> = Default::default();
        for rule in &self.in_force.image().rules {
            let file = rule
                .origin
                .as_ref()
                .map(|o| o.file.to_string())
                .unwrap_or_else(|| "<approvals>".to_string());
            *per_file.entry(file).or_default() += 1;
        }
        let scopes: Vec<Value> = self
            .scopes
            .by_id
            .values()
            .map(|s| {
                json!({"kind": s.kind, "cgroup": s.path.display().to_string(), "cgroup_id": s.id,
                       "streaming": s.listener.is_some()})
            })
            .collect();
        let now = Instant::now();
        let addresses: Vec<Value> = self
            .dns
            .hosts()
            .map(|host| {
                let addrs: Vec<String> = crate::compile::HostResolver::lookup(&self.dns, host)
                    .iter()
                    .map(|a| a.to_string())
                    .collect();
                json!({
                    "host": host,
                    "addresses": addrs,
                    "refresh_in_secs": self.dns.expires(host).map(|e| e.saturating_duration_since(now).as_secs()),
                    "error": self.dns.error(host),
                })
            })
            .collect();
        let summed = self.in_force.enforcer().counters().unwrap_or_default();
        let failed_open: serde_json::Map<String, Value> = crate::kernel::maps::failed_open(&summed)
            .into_iter()
            .map(|(hook, n)| (hook.to_string(), json!(n)))
            .collect();
        let counters: serde_json::Map<String, Value> = summed
            .into_iter()
            .map(|(name, n)| (name.to_string(), json!(n)))
            .collect();
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "backend": self.in_force.enforcer().backend().as_str(),
            "uptime_secs": self.started.elapsed().as_secs(),
            "audit_only": self.in_force.image().settings.audit_only,
            "scopes": scopes,
            "rules": per_file.into_iter().map(|(file, rules)| json!({"file": file, "rules": rules})).collect::<Vec<_>>(),
            "unresolved_hosts": self.in_force.image().unresolved_hosts,
            "addresses": addresses,
            "resolver": self.resolver_status(),
            "asks_pending": self.asks.pending_count(),
            "approvals": self.approvals.list(),
            "counters": counters,
            "events_lost": counters.get("events_lost").cloned().unwrap_or(json!(0)),
            "failed_open": failed_open,
            "audit": self.audit.status(),
            "pinned": self.generation.display().to_string(),
            "last_reload_error": self.last_reload_error,
        })
    }
}
