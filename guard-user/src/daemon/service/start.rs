//! Starting the daemon: the policy and the authorization policy loaded, the programs loaded and
//! attached to the configured scopes, an earlier daemon's pins taken over without a gap.

use super::*;

impl Daemon {
    /// Loads the policy and the programs, takes over from an earlier daemon's pinned programs
    /// (without a moment where neither holds), and puts the configured scopes under enforcement.
    pub async fn start(config: Config) -> Result<Daemon> {
        // The amendments file's folder is created one level deep (as the reference does); the
        // state folder above it is the daemon's to make.
        std::fs::create_dir_all(&config.state_dir)
            .map_err(|err| anyhow!("creating {}: {err}", config.state_dir.display()))?;
        let loaded = load(&config).map_err(|err| anyhow!("{}", err))?;
        let (authz, authz_source) = load_authz(&config)?;
        let resolver = DnsResolver::new(&DnsConfig {
            nameserver: config.nameserver,
        })?;
        let mut notes = Vec::new();
        let upstream = if config.resolver.enabled {
            crate::resolve::upstream::choose(config.nameserver)
                .map_err(|err| {
                    notes.push(format!(
                        "guard's resolver is not in the path of the scopes' DNS \
                         ({err:#}); their lookups are decided by address"
                    ))
                })
                .ok()
        } else {
            None
        };
        // With guard's resolver in the path a rule's name is put in force when a scope asks for
        // it: none is looked up at start. Without it the kernel needs every name's addresses.
        let on_demand = upstream.is_some();
        let dns = if on_demand {
            DnsCache::new()
        } else {
            resolver.resolve(&host_names(&loaded.policy)).await
        };
        let backend = match config.backend.as_str() {
            "lsm" => Backend::Lsm,
            "cgroup" => Backend::Cgroup,
            _ => Backend::detect().0,
        };
        if let Some(root) = config.pin_dir.parent() {
            pins::ensure_bpffs(root)?;
        }
        let earlier = pins::generations(&config.pin_dir);
        let mut enforcer = Enforcer::load(backend)?;
        let events = enforcer.events()?;
        let env = CompileEnv::from_process();
        let modes = Modes {
            audit_only: config.audit_only,
            record_allowed: config.audit.record_allowed,
        };
        let LoadedPolicy {
            policy,
            sources,
            overlay_sources,
            ..
        } = loaded;
        let names = Arc::new(RwLock::new(NamePolicy::from_policy(&policy)));
        let known = KnownNames::new(dns, on_demand);
        let mut core = Core::start(enforcer, policy, known, env, modes)?;
        log_unheld_allowances(core.image());
        let enforcer = core.enforcer_mut();
        // Before the scopes are attached: on the lsm backend only cgroups attached after the
        // redirect get the redirecting hooks.
        let (name_server, resolver_events, resolver_start) = match upstream {
            Some(upstream) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let refusal = config.resolver.refusal;
                let resolver_config = ResolverConfig {
                    upstream,
                    refusal,
                    per_scope: true,
                    // Without it the resolver names who asked by a look through `/proc`.
                    origins: enforcer.dns_origins().ok().map(Arc::new),
                };
                let sink = crate::resolve::EventSink::Tokio(tx);
                let server =
                    Resolver::start(resolver_config.clone(), names.clone(), sink.clone()).await?;
                enforcer.redirect_dns(server.port())?;
                (Some(server), Some(rx), Some((resolver_config, sink)))
            }
            None => (None, None, None),
        };
        if let Some(server) = &name_server {
            core.names_mut().refresh_through(server.refresher());
        }
        let enforcer = core.enforcer_mut();
        // Prompted connects wait in the kernel, as on a slow network, when someone may answer;
        // one to a stand-in address waits at guard's splice listener.
        let mut splices = None;
        if config.asks.approval() != ApprovalPolicy::Never {
            splices = crate::hold::splice::SpliceListener::start()
                .map_err(|err| {
                    notes.push(format!(
                        "a prompted connect to a name no rule names is refused at once, not held \
                         (no splice listener: {err})"
                    ))
                })
                .ok();
            enforcer.hold_network(
                config.asks.timeout() + crate::hold::sockets::KERNEL_BOUND_GRACE,
                splices
                    .as_ref()
                    .map(crate::hold::splice::SpliceListener::port),
            )?;
        }
        let (mut audit, audit_error) = AuditTrail::open(
            config.audit.writer_config(),
            config.audit.scope_budget(),
            authz.clone(),
        );
        if let Some(forwarder) = config.audit.syslog_forwarder()? {
            audit.forward_to_syslog(forwarder);
        }
        if let Some(sender) = config.export.otlp.sender()? {
            audit.export_otlp(sender);
        }
        let (held_wake, held_calls) = tokio::sync::mpsc::unbounded_channel();
        let (overlay_sink, overlay_events) = tokio::sync::mpsc::unbounded_channel();
        let (spare_sink, spare_sets) = tokio::sync::mpsc::unbounded_channel();
        let mut daemon = Daemon {
            console_logins: config.console.listen.map(|_| Arc::default()),
            overlays: Default::default(),
            patterns: Vec::new(),
            pods: None,
            overlay_sink,
            overlay_events: Some(overlay_events),
            pod_cgroups: None,
            spare_sink,
            spare_sets: Some(spare_sets),
            held_wake,
            held_calls: Some(held_calls),
            held_sockets: Vec::new(),
            splices,
            authz,
            authz_source,
            resolver,
            names,
            name_server,
            resolver_start,
            resolver_down: None,
            resolver_events,
            sources,
            overlay_sources,
            core,
            events,
            scopes: Scopes::new(&config.run_cgroup)?,
            asks: AskBook::new(config.asks.dedupe(), config.asks.timeout())
                .with_pending_per_scope(config.asks.max_pending_per_scope),
            watchers: Vec::new(),
            audit,
            tally: Default::default(),
            started: Instant::now(),
            generation: PathBuf::new(),
            last_reload_error: None,
            last_link_repair: None,
            layer_states: Vec::new(),
            layers_looked_at: Instant::now(),
            notes: audit_error.into_iter().chain(notes).collect(),
            config,
        };
        // A node agent lets an earlier agent's pins go only once the pods are in force.
        let mut earlier = earlier;
        if daemon.config.node_agent.is_some() {
            daemon.start_pods(std::mem::take(&mut earlier))?;
        }
        daemon.enforce_scopes()?;
        daemon.generation = pins::next_generation(&daemon.config.pin_dir);
        daemon.core.enforcer_mut().pin_links(&daemon.generation)?;
        daemon.pin_pods_parent()?;
        // With every scope attached and pinned: a layer `[require]` names that does not hold
        // ends the start, before an earlier daemon's pins go (they go on enforcing), and this
        // one's go with it.
        if let Err(err) = daemon.check_required_layers() {
            let _ = pins::release(&daemon.generation);
            return Err(err);
        }
        daemon.record_layer_changes();
        // Only now, with this daemon's programs attached and holding the policy, let the
        // earlier daemon's go.
        for old in earlier {
            if old != daemon.generation {
                pins::release(&old)?;
            }
        }
        let sources: Vec<String> = daemon.sources.iter().map(|s| s.display_name()).collect();
        let gaps = daemon.not_enforced();
        daemon.audit.record(
            RecordType::DaemonStart,
            "root",
            json!({
                "backend": backend.as_str(),
                "rules": sources,
                "pid": std::process::id(),
                "not_enforced": gaps,
            }),
        );
        Ok(daemon)
    }

    /// Host, configured cgroups, the run scopes' parent, and run scopes left by an earlier
    /// daemon; the daemon's own cgroup is exempt (it must never block itself).
    pub(super) fn enforce_scopes(&mut self) -> Result<()> {
        // A stand-alone `guard run` killed with SIGKILL leaves its scope, with whatever it ran
        // now unenforced: end both before enforcing (its own runs the daemon adopts below).
        for abandoned in crate::kernel::scope::remove_abandoned_scopes() {
            tracing::warn!("{abandoned}");
        }
        // First: where a pattern's set and the daemon's are attached to one folder, the
        // pattern's programs must run first (a cgroup's run in the order they were attached),
        // to see each call as the program made it.
        for pattern in self.config.scope.patterns.clone() {
            self.start_pattern(&pattern)?;
        }
        let mut targets: Vec<(ScopeKind, PathBuf)> = Vec::new();
        if self.config.scope.host {
            targets.push((ScopeKind::Host, cgroup2_root()?));
        }
        for path in &self.config.scope.cgroups {
            targets.push((ScopeKind::Cgroup, configured_cgroup(path)?));
        }
        targets.push((ScopeKind::Runs, self.scopes.runs_parent().to_path_buf()));
        for (kind, path) in targets {
            self.core.enforcer_mut().attach_cgroup(&path)?;
            let id = self.scopes.insert(kind, path)?;
            self.core.enforcer_mut().add_scope(id)?;
        }
        if let Ok(own) = own_cgroup() {
            let id = cgroup_id(&own)?;
            self.core.enforcer_mut().exempt_scope(id)?;
        }
        for path in self.scopes.leftover_runs() {
            if let Ok(id) = self.scopes.insert(
                ScopeKind::Run {
                    uid: 0,
                    argv: Vec::new(),
                    adopted: true,
                },
                path,
            ) {
                self.list_run_scope(id);
            }
        }
        Ok(())
    }

    /// Lists a run's own cgroup in scope (its parent, listed already, keeps it enforced): the
    /// kernel then counts its events under its own id, so its share of the event ring buffer
    /// is its own ([`guard_common::maps::ScopeEvents`]).
    pub(super) fn list_run_scope(&mut self, id: u64) {
        if let Err(err) = self.core.enforcer_mut().add_scope(id) {
            tracing::warn!("run scope {id} shares its parent's event budget: {err:#}");
        }
    }
}

/// Loads the rules, the amendments file, then the overlays; the daemon's own files (state
/// folder, socket, audit log, configuration) are protected paths besides the rules.
/// Files in the rules folders that look like rules but are skipped are logged.
pub(super) fn load(config: &Config) -> Result<LoadedPolicy, crate::policy::LoadError> {
    let mut loaded = load_policy_protecting(
        &config.rules,
        &[config.amendments_file()],
        &config.overlays,
        &config.protected_paths(),
    )?;
    for skipped in &loaded.skipped {
        tracing::warn!("{skipped}");
    }
    loaded.policy = config.asks.approval().kernel_policy(loaded.policy);
    loaded
        .policy
        .add_unix_rule(control_socket_rule(&config.socket));
    Ok(loaded)
}

/// Where the rule that lets scopes reach the daemon's control socket says it comes from.
pub const CONTROL_SOCKET_ORIGIN: &str = "<guard's control socket>";

/// The daemon's scopes reach its control socket (a nested `guard run`, `guard prompts`) under
/// any `unmatched_unix` default: what a process in a scope may ask there is the authorization
/// policy's to decide (it may not approve, amend or reload), and a run it asks for is nested in
/// its own scope. A rule of the policy that forbids the socket still wins (the stronger decision).
pub(super) fn control_socket_rule(socket: &std::path::Path) -> crate::policy::unix::UnixRule {
    use std::os::unix::ffi::OsStrExt;
    crate::policy::unix::UnixRule {
        id: crate::policy::RuleId(0),
        socket: crate::policy::unix::UnixSocket {
            bytes: socket.as_os_str().as_bytes().to_vec(),
            prefix: false,
        },
        decision: crate::policy::Decision::Allow,
        justification: Some(
            "guard's own control socket: the authorization policy decides what a scope may ask"
                .to_string(),
        ),
        origin: Some(crate::policy::RuleOrigin {
            file: CONTROL_SOCKET_ORIGIN.into(),
            line: 1,
        }),
    }
}

pub(super) fn load_authz(config: &Config) -> Result<(Arc<AuthzPolicy>, String)> {
    let admin = (!config.admin_group.is_empty()).then_some(config.admin_group.as_str());
    match &config.authz_policy {
        Some(path) => Ok((
            Arc::new(AuthzPolicy::load(path).map_err(|err| anyhow!("{err}"))?),
            path.display().to_string(),
        )),
        None => Ok((
            Arc::new(AuthzPolicy::builtin(admin)),
            "the built-in authorization policy".to_string(),
        )),
    }
}

/// The allow and ask patterns the kernel does not hold, in the daemon's log.
pub(super) fn log_unheld_allowances(image: &EnforcementImage) {
    for warning in crate::kernel::coverage::unheld_allowances(image) {
        tracing::warn!("{warning}");
    }
}
