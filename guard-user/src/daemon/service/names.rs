//! What guard's resolver answered and the DNS refreshes: names put in force per scope.

use super::*;

impl Daemon {
    /// What guard's resolver answered or refused: answers are recorded, the new addresses of
    /// names the policy rules on put in force (one map update for every answer waiting, only
    /// their entries), and only then are their queries let go; refusals are audited.
    pub fn on_resolver_events(&mut self, events: Vec<ResolverEvent>) {
        // Each answer is put in force for the scope that asked: the one the kernel's redirect
        // recorded for the query's socket, else (no sock_diag to name the socket, a query
        // sent to the resolver itself) the one the asking process's cgroup is in. One whose
        // scope is unknown (the process look-up's rate bound) is attributed to none: fails
        // closed.
        let scopes = &self.scopes;
        let scope_of = |enforcer: &Enforcer, answer: &crate::resolve::Answered| {
            let process = answer.process.as_ref();
            let recorded = process.and_then(|p| p.scope).or_else(|| {
                process
                    .and_then(|p| p.cookie)
                    .and_then(|cookie| enforcer.dns_query_scope(cookie).ok().flatten())
            });
            recorded.or_else(|| scopes.scope_of_pid(process?.pid?))
        };
        let (notes, applied) = self.core.take_resolver_events(
            events,
            scope_of,
            Instant::now(),
            Self::stacked(&mut self.overlays),
        );
        for note in notes {
            match note {
                // The name left the host when its answer was first forwarded (recorded then).
                ResolverNote::Answered(answer) => {
                    if answer.source != crate::resolve::AnswerSource::Cached {
                        self.audit.emit(crate::daemon::audit::dns_answered(&answer));
                    }
                }
                ResolverNote::Refused(refused) => {
                    self.audit.emit(crate::daemon::audit::dns_refused(&refused));
                }
                ResolverNote::UpstreamFailed { name, error } => {
                    tracing::warn!("DNS lookup of {name} failed: {error}");
                }
            }
        }
        if let Err(err) = applied {
            // The programs get SERVFAIL, never an address that might not be allowed.
            tracing::error!("putting answered addresses in force failed: {err:#}");
        }
    }

    /// `{"port": P, "names": N, "addresses": M}` of guard's resolver, or null when the scopes'
    /// DNS is not redirected.
    pub(super) fn resolver_status(&self) -> Option<ResolverStatus> {
        self.name_server.as_ref().map(|server| ResolverStatus {
            port: server.port(),
            names: self.core.names().answers().name_count(),
            addresses: self.core.names().answers().address_count(),
        })
    }

    /// The names guard's resolver answered `event`'s destination address for.
    pub(super) fn answered_names(&self, event: &KernelEvent) -> Vec<String> {
        event
            .destination
            .as_ref()
            .map(|d| self.core.names_for(d.address, event.scope))
            .unwrap_or_default()
    }

    /// What guard's resolver answered scope `id` goes, and its names are asked for no more
    /// (the scope ended).
    pub(super) fn end_scope_names(&mut self, id: u64) {
        if let Err(err) = self.core.end_scope(id, Self::stacked(&mut self.overlays)) {
            tracing::error!("dropping the DNS answers of ended scope {id} failed: {err:#}");
        }
    }

    /// Re-resolves names whose TTL ran out; recompiles when an answer changed.
    pub(super) async fn refresh_dns(&mut self) -> Result<()> {
        let cache = self.core.names_mut().resolved_mut();
        if cache.next_refresh().is_none_or(|due| due > Instant::now()) {
            return Ok(());
        }
        let changes = self.resolver.refresh(cache, Instant::now()).await;
        if !changes.is_empty() {
            let names: Vec<String> = changes.into_iter().map(|change| change.host).collect();
            self.core
                .names_changed(&names, Self::stacked(&mut self.overlays))?;
            self.refresh_holds();
        }
        Ok(())
    }
}
