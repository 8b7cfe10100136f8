//! Reloading: the rules and the authorization policy read again, all or nothing.

use super::*;

impl Daemon {
    /// After a change of what the daemon's core holds: the holds decide by the new images,
    /// and the allowances the kernel does not hold are logged when they changed.
    pub(super) fn changed(&self, left_out_before: &[crate::compile::patterns::LeftOut]) {
        if self.core.image().patterns.left_out != left_out_before {
            log_unheld_allowances(self.core.image());
        }
        self.refresh_holds();
    }

    /// Re-reads the rules and the authorization policy. A policy that fails to load keeps the old
    /// ones; the error names the file and line.
    pub async fn reload(&mut self, by: &str) -> Result<ReloadResponse, String> {
        // Both policies load, or neither changes.
        let loaded = match load(&self.config)
            .map_err(|e| e.to_string())
            .and_then(|loaded| {
                load_authz(&self.config)
                    .map(|authz| (loaded, authz))
                    .map_err(|e| format!("{e:#}"))
            }) {
            Ok(loaded) => loaded,
            Err(err) => return Err(self.reload_refused(by, &err)),
        };
        let (loaded, (authz, authz_source)) = loaded;
        let unknown = self
            .core
            .unresolved(self.core.names_to_resolve(&loaded.policy));
        if !unknown.is_empty() {
            let fresh = self.resolver.resolve(&unknown).await;
            self.core.names_mut().resolved_mut().merge_new(fresh);
        }
        // The patterns' rules are read again too: all load, or nothing changes.
        let mut pattern_rules = Vec::new();
        for scope in &self.patterns {
            match patterns::load_rules(&scope.rules, self.config.asks.approval()) {
                Ok(rules) => pattern_rules.push((scope.folder_id, rules)),
                Err(err) => {
                    let err = format!("scope.patterns {:?}: {err}", scope.pattern.text);
                    return Err(self.reload_refused(by, &err));
                }
            }
        }
        let LoadedPolicy {
            policy,
            sources,
            overlay_sources,
            ..
        } = loaded;
        let left_out = self.core.image().patterns.left_out.clone();
        if let Err(err) = self
            .core
            .replace_policy(policy, Self::stacked(&mut self.overlays))
        {
            return Err(self.reload_refused(by, &format!("{err:#}")));
        }
        self.sources = sources;
        self.overlay_sources = overlay_sources;
        for (id, (files, policy)) in pattern_rules {
            if let Some(overlay) = self.overlays.get_mut(&id) {
                overlay.files = files;
                let (names, approvals) = (self.core.names(), self.core.approvals());
                if let Err(err) = overlay
                    .in_force_mut()
                    .replace_policy(policy, names, approvals)
                {
                    tracing::error!("pattern scope {id} keeps its previous rules: {err:#}");
                }
            }
        }
        self.changed(&left_out);
        if let Ok(mut names) = self.names.write() {
            *names = NamePolicy::from_policy(self.core.policy());
        }
        self.last_reload_error = None;
        self.audit.set_authz(authz.clone());
        self.authz = authz;
        self.authz_source = authz_source;
        let files: Vec<String> = self
            .sources
            .iter()
            .chain(&self.overlay_sources)
            .map(|s| s.display_name())
            .collect();
        let rules = self.core.image().rules.len();
        let gaps = self.not_enforced();
        self.audit.record(
            RecordType::Reload,
            by,
            json!({"ok": true, "files": files, "rules": rules, "not_enforced": gaps}),
        );
        Ok(ReloadResponse {
            files,
            rules,
            not_enforced: gaps,
        })
    }

    /// The rules of the policy in force that the running backend does not enforce (audited at
    /// start and at every reload, so the log says what was not held).
    pub(super) fn not_enforced(&self) -> Vec<crate::kernel::coverage::NotEnforced> {
        crate::kernel::coverage::not_enforced(self.core.image(), self.core.enforcer().backend())
    }

    /// A reload that keeps the old policy: recorded, kept for `guard status`, and the message.
    pub(super) fn reload_refused(&mut self, by: &str, err: &str) -> String {
        let message = format!("reload refused, the old policy stays: {err}");
        self.audit.record(
            RecordType::Reload,
            by,
            json!({"ok": false, "error": message}),
        );
        self.last_reload_error = Some(message.clone());
        message
    }
}
