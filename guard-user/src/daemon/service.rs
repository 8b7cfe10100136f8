//! The daemon's state and everything that changes it. One task owns it (see `server.rs`): the
//! policy, the compiled image, the kernel programs and maps, the scopes, asks and approvals.
//! Requests, kernel events and timers reach it one at a time, so no change can interleave with
//! another, and every change to the maps goes through [`Daemon::rebuild`], whose map sync
//! writes new entries before it removes stale ones.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use super::approvals::{Approval, ApprovalTarget, Approvals};
use super::asks::{AskBook, AskState, AskTarget, Recorded};
use super::audit::AuditLog;
use super::config::Config;
use super::messages::describe;
use super::peer::{PeerCredentials, subject, user_name};
use super::protocol::{Amendment, ApprovalMode, ErrorCode, Request, ResponseLine, event_line};
use super::scopes::{ScopeKind, Scopes, configured_cgroup, own_cgroup};
use crate::authz::{Attributes, AuthzPolicy, Request as AuthzRequest};
use crate::compile::dns::{DnsCache, DnsConfig, DnsResolver};
use crate::compile::image::EnforcementImage;
use crate::compile::{CompileEnv, compile, host_names};
use crate::kernel::events::{EventReader, KernelEvent};
use crate::kernel::scope::{cgroup_id, cgroup2_root};
use crate::kernel::{Backend, Enforcer, pins};
use crate::policy::amend::{
    AmendOutcome, append_line, network_amendment_line, prefix_amendment_line,
};
use crate::policy::load::{LoadedPolicy, load_policy_with};
use crate::policy::{Decision, NetworkProtocol, Transport};
use crate::session::describe_event;

pub struct Daemon {
    pub config: Config,
    authz: AuthzPolicy,
    authz_source: String,
    loaded: LoadedPolicy,
    env: CompileEnv,
    resolver: DnsResolver,
    dns: DnsCache,
    image: EnforcementImage,
    enforcer: Enforcer,
    pub events: EventReader,
    scopes: Scopes,
    asks: AskBook,
    approvals: Approvals,
    watchers: Vec<UnboundedSender<String>>,
    audit: AuditLog,
    started: Instant,
    generation: PathBuf,
    /// Why the last reload failed, until one succeeds.
    last_reload_error: Option<String>,
    /// Notes worth saying once at start (e.g. an audit log that cannot be opened).
    pub notes: Vec<String>,
}

/// Loads the rules, the amendments file, then the overlays.
fn load(config: &Config) -> Result<LoadedPolicy, crate::policy::LoadError> {
    load_policy_with(&config.rules, &[config.amendments_file()], &config.overlays)
}

fn load_authz(config: &Config) -> Result<(AuthzPolicy, String)> {
    let admin = (!config.admin_group.is_empty()).then_some(config.admin_group.as_str());
    match &config.authz_policy {
        Some(path) => Ok((
            AuthzPolicy::load(path).map_err(|err| anyhow!("{err}"))?,
            path.display().to_string(),
        )),
        None => Ok((
            AuthzPolicy::builtin(admin),
            "the built-in authorization policy".to_string(),
        )),
    }
}

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
        let dns = resolver.resolve(&host_names(&loaded.policy)).await;
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
        let mut image = compile(&loaded.policy, &dns, &env);
        image.settings.audit_only |= config.audit_only;
        enforcer.apply(&image)?;
        let (audit, audit_error) = AuditLog::open(&config.audit_log);
        let mut daemon = Daemon {
            authz,
            authz_source,
            env,
            image,
            resolver,
            dns,
            loaded,
            enforcer,
            events,
            scopes: Scopes::new(&config.run_cgroup)?,
            asks: AskBook::new(config.asks.dedupe(), config.asks.timeout()),
            approvals: Approvals::default(),
            watchers: Vec::new(),
            audit,
            started: Instant::now(),
            generation: PathBuf::new(),
            last_reload_error: None,
            notes: audit_error.into_iter().collect(),
            config,
        };
        daemon.enforce_scopes()?;
        daemon.generation = pins::next_generation(&daemon.config.pin_dir);
        daemon.enforcer.pin_links(&daemon.generation)?;
        // Only now, with this daemon's programs attached and holding the policy, let the
        // earlier daemon's go.
        for old in earlier {
            if old != daemon.generation {
                pins::release(&old)?;
            }
        }
        let sources: Vec<String> = daemon
            .loaded
            .sources
            .iter()
            .map(|s| s.display_name())
            .collect();
        daemon.audit.record(
            "daemon_start",
            "root",
            json!({"backend": backend.as_str(), "rules": sources, "pid": std::process::id()}),
        );
        Ok(daemon)
    }

    /// Host, configured cgroups, the run scopes' parent, and run scopes left by an earlier
    /// daemon; the daemon's own cgroup is exempt (it must never block itself).
    fn enforce_scopes(&mut self) -> Result<()> {
        let mut targets: Vec<(ScopeKind, PathBuf)> = Vec::new();
        if self.config.scope.host {
            targets.push((ScopeKind::Host, cgroup2_root()?));
        }
        for path in &self.config.scope.cgroups {
            targets.push((ScopeKind::Cgroup, configured_cgroup(path)?));
        }
        targets.push((ScopeKind::Runs, self.scopes.runs_parent().to_path_buf()));
        for (kind, path) in targets {
            self.enforcer.attach_cgroup(&path)?;
            let id = self.scopes.insert(kind, path)?;
            self.enforcer.add_scope(id)?;
        }
        if let Ok(own) = own_cgroup() {
            let id = cgroup_id(&own)?;
            self.enforcer.exempt_scope(id)?;
        }
        for path in self.scopes.leftover_runs() {
            let _ = self.scopes.insert(
                ScopeKind::Run {
                    uid: 0,
                    argv: Vec::new(),
                    adopted: true,
                },
                path,
            );
        }
        Ok(())
    }

    /// Compiles the policy with the approvals on top and updates the maps.
    fn rebuild(&mut self) -> Result<()> {
        let image = self.compile_with(&self.approvals)?;
        self.enforcer.apply(&image)?;
        self.image = image;
        Ok(())
    }

    fn compile_with(&self, approvals: &Approvals) -> Result<EnforcementImage> {
        let mut image = compile(&self.loaded.policy, &self.dns, &self.env);
        image.settings.audit_only |= self.config.audit_only;
        if let Some(error) = approvals.add_to_image(&mut image).into_iter().next() {
            return Err(anyhow!(error));
        }
        Ok(image)
    }

    /// Re-reads the policy. A policy that fails to load keeps the old one; the error names the
    /// file and line.
    pub async fn reload(&mut self, by: &str) -> Result<Value, String> {
        let loaded = match load(&self.config) {
            Ok(loaded) => loaded,
            Err(err) => {
                let message = format!("reload refused, the old policy stays: {err}");
                self.audit
                    .record("reload", by, json!({"ok": false, "error": message}));
                self.last_reload_error = Some(message.clone());
                return Err(message);
            }
        };
        let names = host_names(&loaded.policy);
        let unknown: Vec<String> = names
            .iter()
            .filter(|n| self.dns.expires(n).is_none())
            .cloned()
            .collect();
        if !unknown.is_empty() {
            let fresh = self.resolver.resolve(&unknown).await;
            self.dns.merge_new(fresh);
        }
        self.dns.retain_hosts(&names);
        let previous = std::mem::replace(&mut self.loaded, loaded);
        if let Err(err) = self.rebuild() {
            self.loaded = previous;
            let message = format!("reload refused, the old policy stays: {err:#}");
            self.last_reload_error = Some(message.clone());
            return Err(message);
        }
        self.last_reload_error = None;
        let files: Vec<String> = self
            .loaded
            .sources
            .iter()
            .chain(&self.loaded.overlay_sources)
            .map(|s| s.display_name())
            .collect();
        let rules = self.image.rules.len();
        self.audit.record(
            "reload",
            by,
            json!({"ok": true, "files": files, "rules": rules}),
        );
        Ok(json!({"files": files, "rules": rules}))
    }

    /// Re-resolves names whose TTL ran out; recompiles when an answer changed.
    async fn refresh_dns(&mut self) -> Result<()> {
        if self
            .dns
            .next_refresh()
            .is_none_or(|due| due > Instant::now())
        {
            return Ok(());
        }
        let changes = self.resolver.refresh(&mut self.dns, Instant::now()).await;
        if !changes.is_empty() {
            self.rebuild()?;
        }
        Ok(())
    }

    /// Timers: expired asks and once-approvals, finished run scopes, DNS.
    pub async fn tick(&mut self) {
        let now = Instant::now();
        for ask in self.asks.expire(now) {
            self.audit.record(
                "ask_expired",
                "root",
                json!({"ask": ask.id, "decision": self.config.asks.expire}),
            );
            self.notify_watchers("resolved", json!({"ask": ask}));
        }
        let mut changed = self.approvals.expire(now);
        for id in self.scopes.end_finished_runs() {
            changed |= self.approvals.end_scope(id);
        }
        if changed && let Err(err) = self.rebuild() {
            tracing_note(&format!("applying expired approvals failed: {err:#}"));
        }
        if let Err(err) = self.refresh_dns().await {
            tracing_note(&format!("DNS refresh failed: {err:#}"));
        }
        self.watchers.retain(|w| !w.is_closed());
        self.audit.flush();
    }

    /// Each kernel event: an ask for a `prompt`, the message to the run it came from, an audit
    /// record.
    pub fn on_events(&mut self, events: Vec<KernelEvent>) {
        let now = Instant::now();
        for event in events {
            let described = describe(&self.image, &event);
            let line = describe_event(&self.image, &event);
            let mut ask_id = None;
            if let Some(target) = described.target.clone()
                && !event.audit_only
            {
                let from_run = self
                    .scopes
                    .by_id
                    .get(&event.cgroup_id)
                    .is_some_and(|s| s.is_run());
                let recorded = self.asks.record(
                    target,
                    described.record.clone(),
                    described.message.clone(),
                    (event.cgroup_id, from_run),
                    now,
                );
                ask_id = Some(recorded.id());
                if let Recorded::New(id) = recorded
                    && let Some(ask) = self.asks.get(id, now)
                {
                    self.audit.record(
                        "ask",
                        &user_name(event.uid),
                        json!({"ask": id, "request": ask.record, "message": ask.message}),
                    );
                    self.notify_watchers("ask", json!({"ask": ask}));
                }
            }
            self.audit.record(
                "decision",
                &user_name(event.uid),
                json!({"event": event, "message": described.message, "ask": ask_id}),
            );
            if let Some(listener) = self
                .scopes
                .by_id
                .get(&event.cgroup_id)
                .and_then(|s| s.listener.as_ref())
            {
                let _ = listener.send(event_line(
                    "blocked",
                    json!({
                        "line": line,
                        "message": described.message,
                        "ask": ask_id,
                        "request": described.record,
                    }),
                ));
            }
        }
    }

    fn notify_watchers(&mut self, kind: &str, body: Value) {
        let line = event_line(kind, body);
        self.watchers.retain(|w| w.send(line.clone()).is_ok());
    }

    /// Authorizes and carries out one request. `stream` is where a streaming request's later
    /// lines go.
    pub async fn handle(
        &mut self,
        peer: PeerCredentials,
        request: Request,
        stream: Option<UnboundedSender<String>>,
    ) -> ResponseLine {
        let subject = subject(&peer, &self.config);
        let empty = Attributes::new();
        // `audit` is authorized per record (whose processes it is about), below.
        if !matches!(request, Request::Audit { .. }) {
            let decision = self.authz.evaluate(&AuthzRequest {
                subject: &subject,
                action: request.action(),
                entity: Some(request.entity()),
                resource: &empty,
                env: &empty,
            });
            if !decision.allowed {
                let message = format!(
                    "not authorized: {} (uid {}) may not `{}` ({}) under {}; an admin can \
                     allow it there (try a policy with `guard authz check`)",
                    subject.sub,
                    peer.uid,
                    request.action(),
                    request.entity(),
                    self.authz_source
                );
                self.audit.record(
                    "control_refused",
                    &subject.sub,
                    json!({"action": request.action(), "entity": request.entity(),
                           "uid": peer.uid, "pid": peer.pid, "rule": decision.rule}),
                );
                return ResponseLine::error(ErrorCode::Unauthorized, message);
            }
            // Obligations are the deciding rule's instructions to the enforcement point; the
            // one the daemon knows is `audit`: record the allowed request too.
            if decision.obligations.iter().any(|o| o == "audit") {
                self.audit.record(
                    "control_allowed",
                    &subject.sub,
                    json!({"action": request.action(), "entity": request.entity(),
                           "uid": peer.uid, "pid": peer.pid, "rule": decision.rule}),
                );
            }
        }
        let by = subject.sub.clone();
        let result = match request {
            Request::Status => Ok(self.status()),
            Request::Prompts => Ok(json!(self.asks.pending(Instant::now()))),
            Request::Watch => {
                if let Some(stream) = stream {
                    self.watchers.push(stream);
                }
                Ok(json!(self.asks.pending(Instant::now())))
            }
            Request::Approve { id, mode } => self.approve(id, mode, &by).await,
            Request::Deny { id, always } => self.deny(id, always, &by).await,
            Request::Amend { amendment } => self.amend(&amendment, &by).await,
            Request::Reload => self.reload(&by).await.map_err(|m| (ErrorCode::Failed, m)),
            Request::Run { argv } => self.run(peer, argv, stream),
            Request::Audit { limit } => Ok(self.audit_records(&subject, limit)),
        };
        match result {
            Ok(value) => ResponseLine::ok(value),
            Err((code, message)) => ResponseLine::error(code, message),
        }
    }

    fn run(
        &mut self,
        peer: PeerCredentials,
        argv: Vec<String>,
        stream: Option<UnboundedSender<String>>,
    ) -> Result<Value, (ErrorCode, String)> {
        let pid = peer.pid.ok_or((
            ErrorCode::Failed,
            "the kernel gave no pid for this connection".to_string(),
        ))?;
        let id = self
            .scopes
            .create_run(peer.uid, argv.clone(), pid)
            .map_err(|e| (ErrorCode::Failed, format!("{e:#}")))?;
        let scope = self.scopes.by_id.get_mut(&id).expect("just inserted");
        scope.listener = stream;
        let path = scope.path.display().to_string();
        self.audit.record(
            "run",
            &user_name(peer.uid),
            json!({"pid": pid, "argv": argv, "scope": path, "cgroup_id": id}),
        );
        Ok(json!({"scope": path, "cgroup_id": id}))
    }

    /// Drains the kernel's events now, then says so on `stream` (after any `blocked` lines the
    /// drain produced, which go to the same stream).
    pub fn flush(&mut self, stream: &UnboundedSender<String>) {
        let events = self.events.drain();
        self.on_events(events);
        let _ = stream.send(event_line("flushed", json!({})));
    }

    /// Ends a run's stream (its client closed); the scope itself ends when its processes are
    /// gone.
    pub fn detach_listener(&mut self, stream: &UnboundedSender<String>) {
        for scope in self.scopes.by_id.values_mut() {
            if scope
                .listener
                .as_ref()
                .is_some_and(|l| l.same_channel(stream))
            {
                scope.listener = None;
            }
        }
    }

    fn pending_ask(&self, id: u64) -> Result<super::asks::Ask, (ErrorCode, String)> {
        match self.asks.get(id, Instant::now()) {
            Some(ask) if ask.is_pending() => Ok(ask),
            Some(ask) => Err((
                ErrorCode::Failed,
                format!(
                    "ask {id} is not pending any more ({})",
                    serde_json::to_value(&ask.state)
                        .ok()
                        .and_then(|v| v["state"].as_str().map(str::to_string))
                        .unwrap_or_default()
                ),
            )),
            None => Err((
                ErrorCode::NotFound,
                format!("no ask {id} (`guard prompts` lists the pending ones)"),
            )),
        }
    }

    async fn approve(
        &mut self,
        id: u64,
        mode: ApprovalMode,
        by: &str,
    ) -> Result<Value, (ErrorCode, String)> {
        let ask = self.pending_ask(id)?;
        let failed = |m: String| (ErrorCode::Failed, m);
        let mut result = json!({"ask": id, "mode": mode.as_str()});
        match (&ask.target, mode) {
            (AskTarget::Exec { by_rule: true, .. }, ApprovalMode::Always) => {
                return Err(failed(format!(
                    "ask {id} comes from a prompt rule ({}); an allow rule cannot override it \
                     (prefix rules combine by strongest decision), so there is no amendment to \
                     write. Approve it --once or --session, or change that rule.",
                    ask.record.rule.as_deref().unwrap_or("?")
                )));
            }
            (AskTarget::Exec { tokens, .. }, ApprovalMode::Always) => {
                let line = prefix_amendment_line(tokens).map_err(|e| failed(e.to_string()))?;
                result["line"] = self.append_and_reload(&line, by).await?;
            }
            (
                AskTarget::Network {
                    host,
                    address,
                    port,
                    transport,
                    ..
                },
                _,
            ) => {
                self.check_not_forbidden(&ask.target)?;
                if mode == ApprovalMode::Always {
                    let (host, protocol) = network_target(&ask.target);
                    let justification = format!("Allow {} access to {host}", label(protocol));
                    let line = network_amendment_line(
                        &host,
                        protocol,
                        Decision::Allow,
                        Some(&justification),
                    )
                    .map_err(|e| failed(e.to_string()))?;
                    result["line"] = self.append_and_reload(&line, by).await?;
                } else {
                    let target = ApprovalTarget::Network {
                        address: *address,
                        port: *port,
                        transport: Transport::parse(transport).unwrap_or(Transport::Tcp),
                        host: host.clone(),
                    };
                    self.add_approval(&ask, mode, by, target)?;
                }
            }
            (AskTarget::Exec { tokens, .. }, _) => {
                let target = ApprovalTarget::Exec {
                    tokens: tokens.clone(),
                };
                self.add_approval(&ask, mode, by, target)?;
            }
        }
        let state = AskState::Approved {
            mode,
            by: by.to_string(),
        };
        if let Some(resolved) = self.asks.resolve(id, state, Instant::now()) {
            self.notify_watchers("resolved", json!({"ask": resolved}));
        }
        self.audit.record(
            "approval",
            by,
            json!({"ask": id, "mode": mode.as_str(), "request": ask.record,
                   "line": result.get("line")}),
        );
        Ok(result)
    }

    /// An approval must not be the way around an explicit `forbidden`: the kernel would not let
    /// it through anyway, so say which rule stands in the way instead of approving in vain.
    fn check_not_forbidden(&self, target: &AskTarget) -> Result<(), (ErrorCode, String)> {
        let AskTarget::Network {
            address,
            port,
            transport,
            ..
        } = target
        else {
            return Ok(());
        };
        let transport = Transport::parse(transport).unwrap_or(Transport::Tcp);
        match self.image.destination_verdict(*address, *port, transport) {
            Some(v) if v.decision == Decision::Forbidden => {
                let rule = self.image.rule(&v);
                let at = rule
                    .origin
                    .as_ref()
                    .map(|o| format!(" ({}:{})", o.file, o.line))
                    .unwrap_or_default();
                Err((
                    ErrorCode::Failed,
                    format!(
                        "{address}:{port} is forbidden by `{}`{at}; an approval never overrides a forbidden rule",
                        rule.text
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    fn add_approval(
        &mut self,
        ask: &super::asks::Ask,
        mode: ApprovalMode,
        by: &str,
        target: ApprovalTarget,
    ) -> Result<(), (ErrorCode, String)> {
        let run_scope = ask.from_run.then_some(ask.scope);
        if mode == ApprovalMode::Session
            && ask.from_run
            && !self.scopes.by_id.contains_key(&ask.scope)
        {
            return Err((
                ErrorCode::Failed,
                format!(
                    "ask {} came from a `guard run` that has ended, so there is no session to approve it for: approve it --once (retry within {} s) or --always",
                    ask.id, self.config.asks.once_secs
                ),
            ));
        }
        let approval = Approval {
            ask: ask.id,
            mode,
            by: by.to_string(),
            target,
            scope: if mode == ApprovalMode::Session {
                run_scope
            } else {
                None
            },
            until: (mode == ApprovalMode::Once).then(|| Instant::now() + self.config.asks.once()),
        };
        let mut trial = Approvals::default();
        for a in self.approvals.list() {
            trial.add(a.clone());
        }
        trial.add(approval);
        let image = self.compile_with(&trial).map_err(|e| {
            (
                ErrorCode::Failed,
                format!("cannot approve ask {}: {e:#}", ask.id),
            )
        })?;
        self.enforcer
            .apply(&image)
            .map_err(|e| (ErrorCode::Failed, format!("{e:#}")))?;
        self.image = image;
        self.approvals = trial;
        Ok(())
    }

    async fn deny(
        &mut self,
        id: u64,
        always: bool,
        by: &str,
    ) -> Result<Value, (ErrorCode, String)> {
        let ask = self.pending_ask(id)?;
        let mut result = json!({"ask": id, "always": always});
        if always {
            let line = match &ask.target {
                AskTarget::Exec { tokens, .. } => prefix_amendment_line(tokens)
                    .map(|l| l.replace("decision=\"allow\")", "decision=\"forbidden\")")),
                AskTarget::Network { .. } => {
                    let (host, protocol) = network_target(&ask.target);
                    let justification = format!("Deny {} access to {host}", label(protocol));
                    network_amendment_line(
                        &host,
                        protocol,
                        Decision::Forbidden,
                        Some(&justification),
                    )
                }
            }
            .map_err(|e| (ErrorCode::Failed, e.to_string()))?;
            result["line"] = self.append_and_reload(&line, by).await?;
        }
        let state = AskState::Denied {
            always,
            by: by.to_string(),
        };
        if let Some(resolved) = self.asks.resolve(id, state, Instant::now()) {
            self.notify_watchers("resolved", json!({"ask": resolved}));
        }
        self.audit.record(
            "denial",
            by,
            json!({"ask": id, "always": always, "request": ask.record, "line": result.get("line")}),
        );
        Ok(result)
    }

    async fn amend(
        &mut self,
        amendment: &Amendment,
        by: &str,
    ) -> Result<Value, (ErrorCode, String)> {
        let bad = |m: String| (ErrorCode::BadRequest, m);
        let line = match amendment {
            Amendment::Prefix { tokens } => {
                prefix_amendment_line(tokens).map_err(|e| bad(e.to_string()))?
            }
            Amendment::Network {
                host,
                protocol,
                decision,
                justification,
            } => {
                let protocol = NetworkProtocol::parse(protocol)
                    .map_err(|e| bad(format!("invalid network rule: {e}")))?;
                let decision = crate::policy::rule::parse_network_decision(decision)
                    .map_err(|e| bad(e.to_string()))?;
                network_amendment_line(host, protocol, decision, justification.as_deref())
                    .map_err(|e| bad(e.to_string()))?
            }
        };
        let outcome = self.append_and_reload(&line, by).await?;
        Ok(outcome)
    }

    /// Appends one line to the amendments file (under its lock, deduplicated) and reloads, so
    /// it takes effect at once.
    async fn append_and_reload(
        &mut self,
        line: &str,
        by: &str,
    ) -> Result<Value, (ErrorCode, String)> {
        let file = self.config.amendments_file();
        let outcome = append_line(&file, line).map_err(|e| (ErrorCode::Failed, e.to_string()))?;
        self.audit.record(
            "amendment",
            by,
            json!({"file": file.display().to_string(), "line": line, "outcome": outcome}),
        );
        let applied = self.reload(by).await;
        let mut value = json!({
            "file": file.display().to_string(),
            "line": line,
            "outcome": outcome,
            "applied": applied.is_ok(),
        });
        if let Err(error) = applied {
            value["error"] = error.into();
        }
        if outcome == AmendOutcome::AlreadyPresent {
            value["note"] = "the line was already there; nothing was written".into();
        }
        Ok(value)
    }

    fn audit_records(&self, subject: &crate::authz::Subject, limit: Option<usize>) -> Value {
        let empty = Attributes::new();
        let visible: Vec<&Value> = self
            .audit
            .recent()
            .filter(|record| {
                let owner = record["owner"].as_str().unwrap_or("").to_string();
                let resource = Attributes::from([("owner".to_string(), vec![owner])]);
                self.authz
                    .evaluate(&AuthzRequest {
                        subject,
                        action: "audit",
                        entity: Some("audit"),
                        resource: &resource,
                        env: &empty,
                    })
                    .allowed
            })
            .collect();
        let skip = limit.map_or(0, |n| visible.len().saturating_sub(n));
        json!(visible.into_iter().skip(skip).collect::<Vec<_>>())
    }

    pub fn status(&self) -> Value {
        let mut per_file: std::collections::BTreeMap<String, usize> = Default::default();
        for rule in &self.image.rules {
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
        let counters: serde_json::Map<String, Value> = self
            .enforcer
            .counters()
            .unwrap_or_default()
            .into_iter()
            .map(|(name, n)| (name.to_string(), json!(n)))
            .collect();
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "backend": self.enforcer.backend().as_str(),
            "uptime_secs": self.started.elapsed().as_secs(),
            "audit_only": self.image.settings.audit_only,
            "scopes": scopes,
            "rules": per_file.into_iter().map(|(file, rules)| json!({"file": file, "rules": rules})).collect::<Vec<_>>(),
            "unresolved_hosts": self.image.unresolved_hosts,
            "addresses": addresses,
            "asks_pending": self.asks.pending_count(),
            "approvals": self.approvals.list(),
            "counters": counters,
            "events_lost": counters.get("events_lost").cloned().unwrap_or(json!(0)),
            "audit_log": self.audit.path().display().to_string(),
            "audit_write_errors": self.audit.write_errors,
            "pinned": self.generation.display().to_string(),
            "last_reload_error": self.last_reload_error,
        })
    }

    /// The last words before a clean stop: the programs stay pinned (enforcement goes on until
    /// the next daemon takes over, or `guard release`).
    pub fn stop(&mut self) {
        let events = self.events.drain();
        self.on_events(events);
        self.audit.record(
            "daemon_stop",
            "root",
            json!({"pinned": self.generation.display().to_string()}),
        );
        self.audit.flush();
    }
}

/// The host and protocol an approval of a network ask is for: the name the address came from
/// (or the address itself) and the protocol whose endpoints cover the port.
fn network_target(target: &AskTarget) -> (String, NetworkProtocol) {
    match target {
        AskTarget::Network {
            host,
            address,
            protocol,
            ..
        } => (
            host.clone().unwrap_or_else(|| address.to_string()),
            *protocol,
        ),
        AskTarget::Exec { .. } => (String::new(), NetworkProtocol::Https),
    }
}

/// The reference's label in amendment justifications (`Allow https_connect access to <host>`).
fn label(protocol: NetworkProtocol) -> &'static str {
    match protocol {
        NetworkProtocol::Http => "http",
        NetworkProtocol::Https => "https_connect",
        NetworkProtocol::Socks5Tcp => "socks5_tcp",
        NetworkProtocol::Socks5Udp => "socks5_udp",
    }
}

/// Daemon notes go to stderr (the journal, under systemd).
pub fn tracing_note(message: &str) {
    eprintln!("guard daemon: {message}");
}

/// How long the daemon waits between housekeeping rounds.
pub const TICK: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_the_references() {
        assert_eq!(label(NetworkProtocol::Https), "https_connect");
        assert_eq!(label(NetworkProtocol::Http), "http");
    }
}
