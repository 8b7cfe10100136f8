//! The daemon's state and everything that changes it. One task owns it (see `server.rs`): the
//! policy, the compiled image, the kernel programs and maps, the scopes, asks and approvals.
//! Requests, kernel events and timers reach it one at a time, so no change can interleave with
//! another, and every change to the maps goes through [`Daemon::rebuild`], whose map sync
//! writes new entries before it removes stale ones.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::audit::{AuditTrail, HistoryRead};
use super::config::Config;
use super::peer::{PeerCredentials, subject, user_name};
use super::run_stream::repeat_key;
use super::scopes::{Membership, Scopes, configured_cgroup, own_cgroup};
use super::wire::protocol::{ErrorCode, OverlayFile, Request, ResponseLine, stream_line};
use super::wire::responses::ScopeKind;
use crate::asks::AskBook;
use crate::asks::blocked_request;
use crate::asks::event::Asking;
use crate::audit::filter::AuditFilter;
use crate::audit::{AuditRecord, RecordType};
use crate::authz::{Attributes, AuthzPolicy, REFUSED_IN_SCOPE, Request as AuthzRequest, Subject};
use crate::compile::image::EnforcementImage;
use crate::compile::{CompileEnv, host_names};
use crate::confine::sandbox::SandboxPlan;
use crate::daemon::wire::responses::to_json;
use crate::daemon::wire::responses::{
    Blocked, ReloadResponse, ResolverStatus, RunEvent, RunResponse, WatchEvent,
};
use crate::in_force::{Core, InForce, Modes};
use crate::kernel::events::{EventReader, KernelEvent};
use crate::kernel::scope::{cgroup_id, cgroup2_root};
use crate::kernel::{Backend, Enforcer, pins};
use crate::policy::approval::ApprovalPolicy;
use crate::policy::load::{LoadedPolicy, RulesSource, load_policy_protecting};
use crate::resolve::known::KnownNames;
use crate::resolve::lookup::{DnsCache, DnsConfig, DnsResolver};
use crate::resolve::{NamePolicy, Resolver, ResolverConfig, ResolverEvent, ResolverNote};

mod answers;
mod console;
mod held;
mod layers;
mod metrics;
mod overlays;
mod patterns;
mod pods;
mod status;

pub use held::WaitingCall;
pub use overlays::OverlayEvents;
pub use overlays::parse as parse_overlay;

pub struct Daemon {
    pub config: Config,
    /// The console's links and sessions (`[console] listen`), shared with its page's server.
    pub console_logins: Option<Arc<crate::daemon::console::Logins>>,
    authz: Arc<AuthzPolicy>,
    authz_source: String,
    /// The files the policy was loaded from, and the overlay files.
    sources: Vec<RulesSource>,
    overlay_sources: Vec<RulesSource>,
    /// Where guard resolves names itself.
    resolver: DnsResolver,
    /// What guard's resolver decides by name.
    names: Arc<RwLock<NamePolicy>>,
    name_server: Option<Resolver>,
    /// How `name_server` was started, to start it again on its port if it stops.
    resolver_start: Option<(ResolverConfig, crate::resolve::EventSink)>,
    /// Why guard's resolver is not answering, and the port it is started again on each tick.
    resolver_down: Option<(u16, String)>,
    /// Taken by the server loop, which hands each event to [`Daemon::on_resolver_events`].
    pub resolver_events: Option<UnboundedReceiver<ResolverEvent>>,
    /// The policy in force, its approvals (keyed by scope) and what is known of its names
    /// (answers keyed by scope); the overlays' sets are stacked on it.
    core: Core,
    pub events: EventReader,
    scopes: Scopes,
    asks: AskBook,
    watchers: Vec<Watcher>,
    audit: AuditTrail,
    /// What the metrics count that only the daemon can label.
    tally: crate::daemon::metrics::tally::Tally,
    started: Instant,
    generation: PathBuf,
    /// Why the last reload failed, until one succeeds.
    last_reload_error: Option<String>,
    /// The last pinned link found detached and attached again, as a sentence.
    last_link_repair: Option<String>,
    /// Each layer's state at the last look ([`Daemon::record_layer_changes`]), and when.
    layer_states: Vec<(
        crate::kernel::layers::Layer,
        crate::kernel::layers::LayerState,
    )>,
    layers_looked_at: Instant,
    /// Notes worth saying once at start (e.g. an audit log that cannot be opened).
    pub notes: Vec<String>,
    /// Each run hold says here which scope has a newly held call.
    held_wake: UnboundedSender<u64>,
    /// Taken by the server loop, which hands each to [`Daemon::on_held`].
    pub held_calls: Option<UnboundedReceiver<u64>>,
    /// Connects and sends the kernel holds, waiting for their asks (`held.rs`).
    held_sockets: Vec<held::WaitingSocket>,
    /// Where held connects to stand-in addresses wait.
    splices: Option<crate::hold::splice::SpliceListener>,
    /// The runs' overlays (`guard run --overlay`), by run scope, and the patterns' rules, by
    /// their folder's cgroup id.
    overlays: overlays::Overlays,
    /// `[[scope.patterns]]`: their folders and the cgroups seen there.
    patterns: Vec<patterns::PatternScope>,
    /// `guard node`: the node's pods and what holds each.
    pods: Option<pods::PodScopes>,
    /// Where the overlays' sets send their events.
    overlay_sink: UnboundedSender<OverlayEvents>,
    /// Taken by the server loop, which hands each batch to [`Daemon::on_overlay_events`].
    pub overlay_events: Option<UnboundedReceiver<OverlayEvents>>,
}

/// What the daemon made of one event (see [`Daemon::take_event`]).
struct TakenEvent {
    message: String,
    ask: Option<u64>,
    /// Why a prompt was refused at once instead of asked (`never`, a granular category off).
    rejected: Option<&'static str>,
    /// The event's audit record (`None`: the daemon kept nothing of it).
    record: Option<AuditRecord>,
}

impl TakenEvent {
    /// An event the daemon kept nothing of (a permission error that is not the sandbox's).
    fn none() -> TakenEvent {
        TakenEvent {
            message: String::new(),
            ask: None,
            rejected: None,
            record: None,
        }
    }
}

/// A `guard watch` stream, and whose asks it is shown (`None`: every ask).
struct Watcher {
    subject: Option<Subject>,
    stream: UnboundedSender<String>,
}

/// The authorization resource of `ask`: its owner, if a run's user owns it, and whether the
/// answer would amend the policy.
fn ask_resource(ask: &crate::asks::Ask, amends: bool) -> Attributes {
    let mut resource = Attributes::from([(
        crate::authz::AMENDS_ATTRIBUTE.to_string(),
        vec![amends.to_string()],
    )]);
    if let Some(owner) = &ask.owner {
        resource.insert(
            crate::authz::OWNER_ATTRIBUTE.to_string(),
            vec![owner.clone()],
        );
    }
    resource
}

/// Whether `subject` may answer `ask` once or for the session (or list it, which the same rule
/// decides).
fn may_answer(
    authz: &AuthzPolicy,
    subject: &Subject,
    ask: &crate::asks::Ask,
    amends: bool,
) -> bool {
    authz
        .evaluate(&AuthzRequest {
            subject,
            action: "prompts",
            entity: Some("prompt"),
            resource: &ask_resource(ask, amends),
            env: &Attributes::new(),
        })
        .allowed
}

/// The peer's process, for a request that acts on it (`run` moves it into a scope, `hold` copies
/// a descriptor from it). Its pid is the kernel's from when it connected, and any local user
/// may connect: a process of another user that took the pid since is never acted on (the
/// peer's own processes it could confine anyway).
fn peer_process(peer: &PeerCredentials) -> Result<u32, (ErrorCode, String)> {
    let process = peer.process.as_deref().ok_or((
        ErrorCode::Failed,
        "the kernel gave no process for this connection".to_string(),
    ))?;
    process
        .read(|pid| match super::peer::uid_of_pid(pid) {
            Some(uid) if uid == peer.uid => Ok(pid),
            _ => Err(anyhow!("it is another user's now")),
        })
        .map_err(|err| {
            (
                ErrorCode::Failed,
                format!(
                    "the process that connected as uid {} is gone or cannot be acted on \
                     ({err:#}): nothing was done to it",
                    peer.uid
                ),
            )
        })
}

/// Where a run that `peer` asks for is made: below the caller's own cgroup when the caller
/// runs inside a guard scope (a run's, a stand-alone run's, a configured or matched cgroup's),
/// so that every program set that holds the caller holds the new run too (cgroup programs of
/// an ancestor run for its descendants, and the others find the caller's scope on the way
/// down), as do the caller's overlay, mount namespace, Landlock domain and seccomp filter, which
/// the new run's client inherits; root is no exception. From the host-wide scope or no scope:
/// the runs' parent. A caller whose cgroup cannot be read is refused (fails closed).
fn run_within(
    scopes: &super::scopes::Scopes,
    peer: &PeerCredentials,
) -> Result<Option<PathBuf>, (ErrorCode, String)> {
    let cgroup = peer
        .process
        .as_deref()
        .ok_or_else(|| anyhow!("the kernel named no process for this connection"))
        .and_then(crate::kernel::peer::PeerProcess::cgroup)
        .map_err(|err| {
            (
                ErrorCode::Unauthorized,
                format!(
                    "not authorized: the caller's scope cannot be told ({err:#}), so no run \
                     can be made that holds at least what holds it"
                ),
            )
        })?;
    Ok(match scopes.membership_of(&cgroup) {
        Membership::None | Membership::Host => None,
        _ => Some(cgroup),
    })
}

/// Loads the rules, the amendments file, then the overlays; the daemon's own files (state
/// folder, socket, audit log, configuration) are protected paths besides the rules.
/// Files in the rules folders that look like rules but are skipped are logged.
fn load(config: &Config) -> Result<LoadedPolicy, crate::policy::LoadError> {
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
fn control_socket_rule(socket: &std::path::Path) -> crate::policy::unix::UnixRule {
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

fn load_authz(config: &Config) -> Result<(Arc<AuthzPolicy>, String)> {
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
        let mut daemon = Daemon {
            console_logins: config.console.listen.map(|_| Arc::default()),
            overlays: Default::default(),
            patterns: Vec::new(),
            pods: None,
            overlay_sink,
            overlay_events: Some(overlay_events),
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
    fn enforce_scopes(&mut self) -> Result<()> {
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
    fn list_run_scope(&mut self, id: u64) {
        if let Err(err) = self.core.enforcer_mut().add_scope(id) {
            tracing::warn!("run scope {id} shares its parent's event budget: {err:#}");
        }
    }

    /// The program sets stacked on the daemon's core: the overlays' and patterns'.
    fn stacked(overlays: &mut overlays::Overlays) -> impl Iterator<Item = (u64, &mut InForce)> {
        overlays
            .iter_mut()
            .map(|(scope, overlay)| (*scope, overlay.in_force_mut()))
    }

    /// After a change of what the daemon's core holds: the holds decide by the new images,
    /// and the allowances the kernel does not hold are logged when they changed.
    fn changed(&self, left_out_before: &[crate::compile::patterns::LeftOut]) {
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
    fn not_enforced(&self) -> Vec<crate::kernel::coverage::NotEnforced> {
        crate::kernel::coverage::not_enforced(self.core.image(), self.core.enforcer().backend())
    }

    /// A reload that keeps the old policy: recorded, kept for `guard status`, and the message.
    fn reload_refused(&mut self, by: &str, err: &str) -> String {
        let message = format!("reload refused, the old policy stays: {err}");
        self.audit.record(
            RecordType::Reload,
            by,
            json!({"ok": false, "error": message}),
        );
        self.last_reload_error = Some(message.clone());
        message
    }

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
                        self.audit.emit(super::audit::dns_answered(&answer));
                    }
                }
                ResolverNote::Refused(refused) => {
                    self.audit.emit(super::audit::dns_refused(&refused));
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
    fn resolver_status(&self) -> Option<ResolverStatus> {
        self.name_server.as_ref().map(|server| ResolverStatus {
            port: server.port(),
            names: self.core.names().answers().name_count(),
            addresses: self.core.names().answers().address_count(),
        })
    }

    /// The names guard's resolver answered `event`'s destination address for.
    fn answered_names(&self, event: &KernelEvent) -> Vec<String> {
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
    async fn refresh_dns(&mut self) -> Result<()> {
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
    fn repair_links(&mut self) {
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
    fn account_scope_losses(&mut self) {
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
    fn take_event(&mut self, mut event: KernelEvent, now: Instant, held: bool) -> TakenEvent {
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
        let pod = self.pod_identity(event.scope);
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

    fn notify_watchers(&mut self, event: WatchEvent) {
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

    /// Whether the answer `request` would be allowed if it did not amend the policy.
    fn allowed_without_amending(
        &self,
        subject: &Subject,
        request: &Request,
        resource: &Attributes,
    ) -> bool {
        let amends = crate::authz::AMENDS_ATTRIBUTE;
        if resource
            .get(amends)
            .is_none_or(|v| v.as_slice() != ["true"])
        {
            return false;
        }
        let mut plain = resource.clone();
        plain.insert(amends.to_string(), vec!["false".to_string()]);
        self.authz
            .evaluate(&AuthzRequest {
                subject,
                action: request.action(),
                entity: Some(request.entity()),
                resource: &plain,
                env: &Attributes::new(),
            })
            .allowed
    }

    /// The pending asks `subject` may answer (`None`: every pending ask).
    fn visible_asks(&self, subject: Option<&Subject>) -> Vec<crate::asks::Ask> {
        let mut asks = self.asks.pending(Instant::now());
        if let Some(subject) = subject {
            asks.retain(|ask| may_answer(&self.authz, subject, ask, false));
        }
        asks
    }

    /// The resource an answer is authorized with: its ask's owner (the user whose run asked),
    /// and whether it would amend the policy every scope holds. Other requests have none.
    fn resource_of(&self, request: &Request) -> Attributes {
        let (id, amends) = match request {
            Request::Approve { id, mode, prefix } => (
                *id,
                *mode == crate::asks::ApprovalMode::Always || prefix.is_some(),
            ),
            Request::Deny { id, always } => (*id, *always),
            _ => return Attributes::new(),
        };
        match self.asks.get(id, Instant::now()) {
            Some(ask) => ask_resource(&ask, amends),
            None => Attributes::new(),
        }
    }

    /// The authorization subject of a peer, and the guard scope it runs in.
    fn subject_of(&self, peer: &PeerCredentials) -> (Subject, Membership) {
        // A front end inside this process (`guard node`) is in no scope, wherever the
        // process runs (in a DaemonSet its pod's cgroup is below the pods it holds).
        let membership = if peer.is_this_process() {
            Membership::None
        } else {
            self.scopes.membership(peer.process.as_deref())
        };
        (subject(peer, &self.config, membership), membership)
    }

    /// Authorizes and carries out one request. `stream` is where a streaming request's later
    /// lines go. A run with an overlay is answered later ([`Handled::Evaluate`]).
    pub async fn handle(
        &mut self,
        peer: PeerCredentials,
        request: Request,
        stream: Option<UnboundedSender<String>>,
    ) -> Handled {
        let (subject, membership) = self.subject_of(&peer);
        let empty = Attributes::new();
        // An answer is authorized with its ask's owner; `prompts` and `watch` list what the
        // caller may see, ask by ask, when it may not see them all.
        let resource = self.resource_of(&request);
        let per_ask = matches!(
            request,
            Request::Prompts | Request::Watch | Request::ConsoleLogin
        );
        let mut sees_every_ask = true;
        // `audit` is authorized per record (whose processes it is about), in `audit_read`.
        if !matches!(request, Request::Audit { .. }) {
            let decision = self.authz.evaluate(&AuthzRequest {
                subject: &subject,
                action: request.action(),
                entity: Some(request.entity()),
                resource: &resource,
                env: &empty,
            });
            sees_every_ask = decision.allowed;
            if !decision.allowed && !per_ask {
                let message =
                    if membership.is_confined() && REFUSED_IN_SCOPE.contains(&request.action()) {
                        format!(
                            "not authorized: `{}` came from pid {} inside a guard scope ({}): a \
                         guarded process may not answer its own asks or change its policy \
                         (attribute in_guard_scope=true under {}); run it from outside the \
                         scope",
                            request.action(),
                            peer.pid.map_or("?".to_string(), |p| p.to_string()),
                            membership.as_str(),
                            self.authz_source
                        )
                    } else if self.allowed_without_amending(&subject, &request, &resource) {
                        format!(
                            "not authorized: {} (uid {}) may answer this ask once or for the \
                             session, but `--always` (or a prefix) writes to the daemon's \
                             policy, which every scope holds: ask an admin, or answer \
                             `--once`/`--session` (under {})",
                            subject.sub, peer.uid, self.authz_source
                        )
                    } else {
                        format!(
                            "not authorized: {} (uid {}) may not `{}` ({}) under {}; an admin can \
                         allow it there (try a policy with `guard authz check`)",
                            subject.sub,
                            peer.uid,
                            request.action(),
                            request.entity(),
                            self.authz_source
                        )
                    };
                self.tally.control_refused += 1;
                self.audit.record(
                    RecordType::ControlRefused,
                    &subject.sub,
                    json!({"request": request.action(), "entity": request.entity(),
                           "uid": peer.uid, "pid": peer.pid, "scope": membership.as_str(),
                           "authz_rule": decision.rule}),
                );
                return Handled::Answer(ResponseLine::error(ErrorCode::Unauthorized, message));
            }
            // Obligations are the deciding rule's instructions to the enforcement point; the
            // one the daemon knows is `audit`: record the allowed request too.
            if decision.obligations.iter().any(|o| o == "audit") {
                self.audit.record(
                    RecordType::ControlAllowed,
                    &subject.sub,
                    json!({"request": request.action(), "entity": request.entity(),
                           "uid": peer.uid, "pid": peer.pid, "authz_rule": decision.rule}),
                );
            }
        }
        let by = crate::asks::Answerer {
            name: subject.sub.clone(),
            uid: peer.uid,
        };
        // `None`: every ask; else only the asks this subject may answer.
        let visible_to = (!sees_every_ask).then_some(&subject);
        let result = match request {
            Request::Status => Ok(to_json(&self.status())),
            Request::Prompts => Ok(to_json(&self.visible_asks(visible_to))),
            Request::Watch => {
                if let Some(stream) = stream {
                    self.watchers.push(Watcher {
                        subject: visible_to.cloned(),
                        stream,
                    });
                }
                Ok(to_json(&self.visible_asks(visible_to)))
            }
            Request::Approve { id, mode, prefix } => self
                .approve(id, mode, prefix.as_deref(), &by)
                .await
                .map(|r| to_json(&r)),
            Request::Deny { id, always } => self.deny(id, always, &by).await.map(|r| to_json(&r)),
            Request::Amend { amendment } => self.amend(&amendment, &by).await.map(|r| to_json(&r)),
            Request::Reload => self
                .reload(&by.name)
                .await
                .map(|r| to_json(&r))
                .map_err(|m| (ErrorCode::Failed, m)),
            Request::Run {
                argv,
                workspace,
                tmpdir,
                hold,
                overlay,
            } if overlay.is_empty() => self
                .run(peer, argv, (workspace, tmpdir), hold, (&[], None), stream)
                .map(|r| to_json(&r)),
            // Any local user's Starlark: evaluated off the loop, which goes on meanwhile.
            Request::Run {
                argv,
                workspace,
                tmpdir,
                hold,
                overlay,
            } => match self.room_for_overlay() {
                Ok(()) => {
                    return Handled::Evaluate(PendingRun {
                        peer,
                        argv,
                        folders: (workspace, tmpdir),
                        hold,
                        overlay,
                        stream,
                    });
                }
                Err(err) => Err(err),
            },
            Request::Hold { fd, first_exec } => {
                self.adopt_hold(peer, fd, first_exec).map(|r| to_json(&r))
            }
            Request::ConsoleLogin => self.console_login(&peer, membership).map(|r| to_json(&r)),
            Request::Policy => Ok(to_json(&self.policy_view())),
            // Served by `audit_read` (the server sends it there).
            Request::Audit { .. } => Err((
                ErrorCode::BadRequest,
                "audit is a streaming request".to_string(),
            )),
        };
        Handled::Answer(answer(result))
    }

    /// Finishes a run whose overlay was evaluated off the loop: `policy` is what its files
    /// say, or why they were refused (nothing is made then).
    pub fn run_evaluated(
        &mut self,
        pending: PendingRun,
        policy: Result<crate::policy::Policy, String>,
    ) -> ResponseLine {
        let PendingRun {
            peer,
            argv,
            folders,
            hold,
            overlay,
            stream,
        } = pending;
        let result = policy
            .map_err(|message| (ErrorCode::BadRequest, message))
            .and_then(|policy| {
                // Other runs may have taken the last room while it was evaluated.
                self.room_for_overlay()?;
                let policy = self.config.asks.approval().kernel_policy(policy);
                self.run(peer, argv, folders, hold, (&overlay, Some(policy)), stream)
            })
            .map(|r| to_json(&r));
        answer(result)
    }

    /// Whether another run's overlay may be put in force ([`overlays::MAX_OVERLAYS`]).
    fn room_for_overlay(&self) -> Result<(), (ErrorCode, String)> {
        if self.run_overlays() >= overlays::MAX_OVERLAYS {
            return Err((
                ErrorCode::Failed,
                format!(
                    "the daemon holds {} overlays already, its most: run without --overlay, or \
                     when one of those runs has ended",
                    overlays::MAX_OVERLAYS
                ),
            ));
        }
        Ok(())
    }

    /// Starts a run's scope; with `overlay`, its files and their policy (evaluated already: an
    /// overlay that does not parse changes nothing) are put in force there.
    fn run(
        &mut self,
        peer: PeerCredentials,
        argv: Vec<String>,
        (workspace, tmpdir): (Option<PathBuf>, Option<PathBuf>),
        hold: bool,
        (overlay, overlay_policy): (&[OverlayFile], Option<crate::policy::Policy>),
        stream: Option<UnboundedSender<String>>,
    ) -> Result<RunResponse, (ErrorCode, String)> {
        let pid = peer_process(&peer)?;
        let within = run_within(&self.scopes, &peer)?;
        let id = self
            .scopes
            .create_run(peer.uid, argv.clone(), pid, within.as_deref())
            .map_err(|e| (ErrorCode::Failed, format!("{e:#}")))?;
        // Nested in a scope the daemon's cgroup hooks do not reach (a stand-alone run's): they
        // are attached to the new run's own cgroup, so the daemon's policy holds its connects
        // too. Fails closed: no run without them.
        if let Some(path) = self.scopes.by_id.get(&id).map(|s| s.path.clone())
            && !self.scopes.hooks_hold(&path)
            && let Err(err) = self.core.enforcer_mut().attach_cgroup(&path)
        {
            return Err((
                ErrorCode::Failed,
                format!(
                    "the daemon's hooks could not be attached to the nested run's cgroup \
                     ({err:#}); the command was not started"
                ),
            ));
        }
        self.list_run_scope(id);
        if let Some(policy) = overlay_policy
            && let Err(err) = self.start_overlay(overlay, policy, id)
        {
            // Fails closed: the client starts nothing, and the scope ends with it.
            return Err((
                ErrorCode::Failed,
                format!(
                    "the overlay could not be put in force ({err:#}); the command was not started"
                ),
            ));
        }
        // Its prompted connects wait in the kernel for their answers, unless it asked not to.
        if hold
            && self.core.enforcer().holds_network()
            && let Err(err) = self.core.enforcer_mut().hold_scope(id)
        {
            tracing::warn!("run scope {id}'s prompted connects are refused at once: {err:#}");
        }
        let scope = self.scopes.by_id.get_mut(&id).expect("just inserted");
        scope.listener = stream.map(super::run_stream::RunStream::new);
        let path = scope.path.display().to_string();
        self.audit.record(
            RecordType::Run,
            &user_name(peer.uid),
            json!({
                "pid": pid,
                "argv": argv,
                "scope": path,
                "cgroup_id": id,
                "overlay": overlay.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
                "nested_in": within.as_ref().map(|p| p.display().to_string()),
            }),
        );
        // The client holds the policy's write rules with Landlock on the command it starts
        // (it knows its own current folder and file system; the daemon's kernel programs do
        // not decide writes).
        let writes = crate::confine::WriteRules::of_policy(self.core.policy());
        // The sandbox is the client's to hold too: `[sandbox]`, else the rules' `sandbox(...)`.
        let sandbox = self
            .config
            .sandbox
            .setting()
            .ok()
            .flatten()
            .or_else(|| self.core.policy().sandbox().cloned());
        // Its refusals are reported when the client said where its roots are.
        if let (Some(setting), Some(workspace)) = (&sandbox, &workspace)
            && setting.mode.is_restricted()
        {
            let plan = SandboxPlan::new(
                setting.mode,
                workspace,
                tmpdir.as_deref(),
                &setting.writable,
            );
            match self.core.enforcer_mut().report_sandbox_refusals() {
                Ok(()) => {
                    if let Some(scope) = self.scopes.by_id.get_mut(&id) {
                        scope.sandbox = Some((plan, setting.from.clone()));
                    }
                }
                Err(err) => tracing::warn!(
                    "the writes the sandbox refuses cannot be reported: {err:#}; they still \
                     fail with EACCES"
                ),
            }
        }
        Ok(RunResponse {
            scope: path,
            cgroup_id: id,
            writes,
            sandbox,
            holds: held::hold_offer(self, id),
        })
    }

    /// Drains the kernel's events now, then says so on `stream` (after any `blocked` lines the
    /// drain produced, which go to the same stream).
    pub fn flush(&mut self, stream: &UnboundedSender<String>) {
        let events = self.events.drain();
        self.on_events(events);
        let now = Instant::now();
        for scope in self.scopes.by_id.values_mut() {
            if let Some(listener) = scope.listener.as_mut().filter(|l| l.is(stream)) {
                listener.settle(now, true);
            }
        }
        let _ = stream.send(stream_line(RunEvent::Flushed));
    }

    /// Ends a run's stream (its client closed); the scope itself ends when its processes are
    /// gone.
    pub fn detach_listener(&mut self, stream: &UnboundedSender<String>) {
        for scope in self.scopes.by_id.values_mut() {
            if scope.listener.as_ref().is_some_and(|l| l.is(stream)) {
                scope.listener = None;
            }
        }
    }

    /// After each turn of the loop: the turn's audit records go to the writer as one batch.
    pub fn end_turn(&mut self) {
        self.settle_held();
        self.audit.send_pending();
    }

    /// The last words before a clean stop: the programs stay pinned (enforcement goes on until
    /// the next daemon takes over, or `guard release`).
    pub fn stop(&mut self) {
        self.release_held();
        let events = self.events.drain();
        self.on_events(events);
        self.audit.record(
            RecordType::DaemonStop,
            "root",
            json!({"pinned": self.generation.display().to_string()}),
        );
        self.audit.close();
    }

    /// `guard audit`: the caller's history read (done by its connection's task) and, with
    /// `live`, its place among the followers. Every record is checked against the caller's
    /// authorization as it is read or sent.
    pub fn audit_read(
        &mut self,
        peer: PeerCredentials,
        filter: &AuditFilter,
        live: Option<tokio::sync::mpsc::Sender<String>>,
        limit: Option<usize>,
    ) -> Result<HistoryRead, ResponseLine> {
        let (subject, _) = self.subject_of(&peer);
        self.audit
            .follow(subject, filter, live, limit)
            .map_err(|message| ResponseLine::error(ErrorCode::BadRequest, message))
    }
}

/// What [`Daemon::handle`] made of a request.
pub enum Handled {
    /// Its answer.
    Answer(ResponseLine),
    /// A run whose overlay is to be evaluated off the loop ([`super::overlay_eval::evaluate`]);
    /// [`Daemon::run_evaluated`] answers it then.
    Evaluate(PendingRun),
}

/// A run waiting for its overlay's evaluation.
pub struct PendingRun {
    peer: PeerCredentials,
    argv: Vec<String>,
    folders: (Option<PathBuf>, Option<PathBuf>),
    hold: bool,
    /// The overlay's files, as the client sent them.
    pub overlay: Vec<OverlayFile>,
    stream: Option<UnboundedSender<String>>,
}

fn answer(result: Result<Value, (ErrorCode, String)>) -> ResponseLine {
    match result {
        Ok(value) => ResponseLine::ok(value),
        Err((code, message)) => ResponseLine::error(code, message),
    }
}

/// The allow and ask patterns the kernel does not hold, in the daemon's log.
fn log_unheld_allowances(image: &EnforcementImage) {
    for warning in crate::kernel::coverage::unheld_allowances(image) {
        tracing::warn!("{warning}");
    }
}

/// How long the daemon waits between housekeeping rounds.
pub const TICK: Duration = Duration::from_millis(250);
