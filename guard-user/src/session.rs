//! One enforcement session: a compiled policy held in the kernel for one scope (a fresh
//! cgroup), with its events and DNS refreshes. `guard run` is one session around one command;
//! the integration tests drive sessions directly.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::asks::messages::describe_event;
use crate::asks::{Approval, Approvals};
use crate::compile::image::EnforcementImage;
use crate::compile::{CompileEnv, host_names};
use crate::confine::sandbox::SandboxPlan;
use crate::confine::{CommandConfinement, WritePlan};
use crate::in_force::{Core, Modes, unstacked};
use crate::kernel::events::{EventReader, KernelEvent};
use crate::kernel::layers::{FileGaps, FrontEndLayers, Layer, LayerState, LayerStatus};
use crate::kernel::scope::{
    AbandonedScope, ScopeCgroup, join_from_pre_exec, remove_abandoned_scopes,
};
use crate::kernel::{Backend, Enforcer};
use crate::policy::Policy;
use crate::resolve::known::KnownNames;
use crate::resolve::lookup::{DnsCache, DnsConfig, DnsResolver};
use crate::resolve::thread::ResolverThread;
use crate::resolve::{NamePolicy, Refusal, ResolverConfig, ResolverNote};

/// How a session is set up.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// `None`: the preferred backend this kernel allows.
    pub backend: Option<Backend>,
    /// Record every decision, enforce none.
    pub audit_only: bool,
    /// Where host names are resolved (`None`: the system's resolver configuration).
    pub nameserver: Option<SocketAddr>,
    /// Folders searched for one-token rules' programs before `$PATH` (tests put their own
    /// programs here instead of changing the process environment).
    pub extra_path_dirs: Vec<std::path::PathBuf>,
    /// Put guard's resolver in the path of the scope's DNS ([`crate::resolve`]), answering a
    /// forbidden name this way. `None`: the scope's DNS goes where it is sent, decided by
    /// address like any other traffic.
    pub resolver: Option<Refusal>,
    /// Hold prompted TCP connects and UDP sends as a slow network would instead of refusing
    /// them ([`Enforcer::hold_network`]); a blocking connect waits up to this long.
    pub hold_network: Option<Duration>,
    /// With `hold_network`: where a held connect to a stand-in address waits
    /// ([`crate::hold::splice::SpliceListener::port`]; `None`: such a connect is refused).
    pub splice_port: Option<u16>,
    /// Load into a kept program set of this store ([`Enforcer::load_kept`]), so the next run
    /// reuses the verified programs (`guard run`'s default); `None`: load afresh, keep nothing.
    pub keep_programs: Option<crate::kernel::program_cache::Store>,
}

/// A DNS matter of the scope, for the person running it.
// A note lives only until the run prints it; boxing the answer would cost an allocation per
// lookup for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum DnsNote {
    /// What guard's resolver said: a name answered, refused, or not answered upstream.
    Resolver(ResolverNote),
    /// guard's resolver could not be put in the path (why).
    NoResolver(String),
    /// Answered addresses could not be put in the maps (why): those queries got SERVFAIL.
    ApplyFailed(String),
}

pub struct Session {
    // Dropped in field order: the scope's processes are killed and the cgroup removed before
    // the programs are detached.
    scope: ScopeCgroup,
    /// The policy, its approvals (`--once`, `--session`) and what is known of its names.
    core: Core,
    events: EventReader,
    /// Where guard resolves names itself, once it has any to resolve.
    dns: Option<DnsLookups>,
    nameserver: Option<SocketAddr>,
    resolver: Option<ResolverThread>,
    names: NamePolicy,
    dns_notes: Vec<DnsNote>,
    abandoned: Vec<AbandonedScope>,
    /// The sandbox mode the command runs under, and where it was chosen, once
    /// [`Session::report_sandbox`] asked for its refusals.
    sandbox: Option<(SandboxPlan, String)>,
    /// How guard's resolver stands in the scope's DNS path, as the start left it.
    dns_layer: LayerStatus,
    /// The command's pidfd ([`Session::wake_on_exit_of`]).
    command_exit: Option<crate::kernel::peer::PeerProcess>,
    /// Released once the scope's processes are gone and the Enforcer dropped.
    _pins: RunPins,
    /// Last: the lease of the kept program set ends once no link of this run is left on it.
    kept: Option<crate::kernel::program_cache::CachedSet>,
}

/// A session's pinned links (`pins::RUNS_ROOT/run-PID-N`): its programs outlive this process
/// (a `kill -9`, a crash), so the scope's processes stay enforced, with nobody to answer their
/// asks, until the next `guard run`, `guard daemon` or `guard release` kills them and removes
/// the pins ([`remove_abandoned_scopes`]). A drop releases them (the scope is gone first).
struct RunPins {
    dir: std::path::PathBuf,
}

impl RunPins {
    fn pin(enforcer: &mut Enforcer, name: &str) -> Result<RunPins> {
        crate::kernel::pins::ensure_bpffs(Path::new(crate::kernel::pins::DEFAULT_ROOT))
            .context("a bpffs to pin the run's programs in, so they outlive guard")?;
        let dir = Path::new(crate::kernel::pins::RUNS_ROOT).join(name);
        // Left by an earlier run whose pid this process has now (no live run names it).
        crate::kernel::pins::release(&dir)?;
        enforcer.pin_links(&dir)?;
        Ok(RunPins { dir })
    }
}

impl Drop for RunPins {
    fn drop(&mut self) {
        if let Err(err) = crate::kernel::pins::release(&self.dir) {
            tracing::warn!("releasing the run's pins: {err:#}");
        }
        // The folder of all runs goes with the last (ENOTEMPTY while others remain).
        let _ = std::fs::remove_dir(crate::kernel::pins::RUNS_ROOT);
    }
}

/// A runtime to resolve names on, and the resolver that asks the configured name server.
struct DnsLookups {
    runtime: tokio::runtime::Runtime,
    resolver: DnsResolver,
}

impl DnsLookups {
    fn new(nameserver: Option<SocketAddr>) -> Result<DnsLookups> {
        Ok(DnsLookups {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the DNS runtime")?,
            resolver: DnsResolver::new(&DnsConfig { nameserver })?,
        })
    }

    fn resolve(&self, names: &[String]) -> DnsCache {
        self.runtime.block_on(self.resolver.resolve(names))
    }
}

static SESSION_COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Session {
    /// Compiles `policy`, loads the programs, makes a fresh scope cgroup and enforces there.
    pub fn start(policy: Policy, options: &SessionOptions) -> Result<Session> {
        let backend = match options.backend {
            Some(backend) => backend,
            None => Backend::detect_for_boot(),
        };
        let mut env = CompileEnv::from_process();
        env.path_dirs
            .splice(0..0, options.extra_path_dirs.iter().cloned());
        let mut dns_notes = Vec::new();
        let mut dns_layer = LayerStatus::new(
            Layer::Dns,
            LayerState::Off,
            "--no-resolver: the scope's DNS goes where it is sent, decided by address",
        );
        let upstream = match options.resolver {
            Some(refusal) => match crate::resolve::upstream::choose(options.nameserver) {
                Ok(upstream) => Some(ResolverConfig {
                    upstream,
                    refusal,
                    per_scope: false,
                    origins: None,
                }),
                // No upstream to ask: the scope's DNS is decided by address, as without one.
                Err(err) => {
                    let why = format!("{err:#}");
                    dns_layer = LayerStatus::new(
                        Layer::Dns,
                        LayerState::Missing,
                        format!(
                            "guard's resolver could not be put in the path ({why}): names are \
                             decided by address"
                        ),
                    );
                    dns_notes.push(DnsNote::NoResolver(why));
                    None
                }
            },
            None => None,
        };
        // With guard's resolver in the path a rule's name is put in force when the scope asks
        // for it: none is looked up before the command starts. Without it the kernel needs
        // every name's addresses first.
        let on_demand = upstream.is_some();
        let mut dns = None;
        let mut resolved = DnsCache::new();
        let names = host_names(&policy);
        if !on_demand && !names.is_empty() {
            let lookups = DnsLookups::new(options.nameserver)?;
            resolved = lookups.resolve(&names);
            dns = Some(lookups);
        }
        // First, so a set an abandoned scope ran on is free again before one is leased.
        let abandoned = remove_abandoned_scopes();
        let (mut enforcer, kept) = match &options.keep_programs {
            Some(store) => Enforcer::load_kept(backend, store)?,
            None => (Enforcer::load(backend)?, None),
        };
        if let Some(timeout) = options.hold_network {
            enforcer.hold_network(timeout, options.splice_port)?;
        }
        let events = enforcer.events()?;
        let modes = Modes {
            audit_only: options.audit_only,
            record_allowed: false,
        };
        let names = NamePolicy::from_policy(&policy);
        let known = KnownNames::new(resolved, on_demand);
        let mut core = Core::start(enforcer, policy, known, env, modes)?;
        let enforcer = core.enforcer_mut();
        let resolver = match upstream {
            Some(mut config) => {
                // Without it the resolver names who asked by a look through `/proc`.
                config.origins = enforcer.dns_origins().ok().map(std::sync::Arc::new);
                let thread = ResolverThread::start(config, names.clone())?;
                enforcer.redirect_dns(thread.port())?;
                dns_layer = LayerStatus::new(
                    Layer::Dns,
                    LayerState::Up,
                    format!(
                        "guard's resolver on port {}, the scope's DNS redirected to it",
                        thread.port()
                    ),
                );
                Some(thread)
            }
            None => None,
        };
        if let Some(thread) = &resolver {
            core.names_mut().refresh_through(thread.refresher());
        }
        let enforcer = core.enforcer_mut();
        let n = SESSION_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("run-{}-{n}", std::process::id());
        let scope = ScopeCgroup::create(&name)?;
        // Pinned before the scope is listed: whatever ends this process, the programs stay
        // attached for the scope's processes until they are gone (see `RunPins`).
        let pins = RunPins::pin(enforcer, &name)?;
        enforcer.attach_cgroup(scope.path())?;
        enforcer.add_scope(scope.id())?;
        if options.hold_network.is_some() {
            enforcer.hold_scope(scope.id())?;
        }
        // Best effort: a program not kept is loaded again by the next run.
        if let Err(err) = enforcer.keep_programs() {
            tracing::warn!("keeping the loaded programs for the next run: {err:#}");
        }
        Ok(Session {
            scope,
            core,
            events,
            dns,
            nameserver: options.nameserver,
            resolver,
            names,
            dns_notes,
            abandoned,
            sandbox: None,
            dns_layer,
            command_exit: None,
            _pins: pins,
            kept,
        })
    }

    /// The scopes of earlier sessions that died without removing them (a `kill -9` of
    /// `guard run`), removed as this one started.
    pub fn abandoned_scopes(&self) -> &[AbandonedScope] {
        &self.abandoned
    }

    pub fn image(&self) -> &EnforcementImage {
        self.core.image()
    }

    /// The approvals held in the kernel now.
    pub fn approvals(&self) -> &Approvals {
        self.core.approvals()
    }

    /// The policy this session enforces.
    pub fn policy(&self) -> &Policy {
        self.core.policy()
    }

    pub fn backend(&self) -> Backend {
        self.core.enforcer().backend()
    }

    /// The rules of this session's policy the running backend does not enforce.
    pub fn not_enforced(&self) -> Vec<crate::kernel::coverage::NotEnforced> {
        crate::kernel::coverage::not_enforced(self.image(), self.backend())
    }

    /// Every layer of this run as it stands now ([`crate::kernel::layers`]), with `hold` as
    /// the run's front end reports it. A stand-alone run keeps no audit log and sends nothing
    /// on; its write denials are held by read-only binds and Landlock on the cgroup backend.
    pub fn layers(&self, hold: LayerStatus) -> Vec<LayerStatus> {
        let file_gaps = FileGaps::of(&self.not_enforced());
        let kernel = self.core.enforcer().kernel_layers(
            file_gaps,
            Some("guard run holds the write denials that name existing paths with read-only binds and Landlock"),
        );
        crate::kernel::layers::all_layers(
            kernel,
            FrontEndLayers {
                dns: self.dns_layer.clone(),
                hold,
                audit: LayerStatus::new(
                    Layer::Audit,
                    LayerState::Off,
                    "a stand-alone run keeps no audit log (--json-events streams its decisions; \
                     under the daemon every decision is recorded)",
                ),
                export: LayerStatus::new(
                    Layer::Export,
                    LayerState::Off,
                    "a stand-alone run sends no records on (the daemon's [audit] syslog does)",
                ),
            },
        )
    }

    /// Makes [`Session::poll_events`] return as soon as process `pid` (the command) exits: its
    /// pidfd is readable then. Without one (a kernel before 5.3) polls wait their timeout.
    pub fn wake_on_exit_of(&mut self, pid: u32) {
        self.command_exit = crate::kernel::peer::PeerProcess::open(pid as libc::pid_t).ok();
    }

    /// The kept program set this session's programs are in, if any.
    pub fn kept_set(&self) -> Option<&crate::kernel::program_cache::CachedSet> {
        self.kept.as_ref()
    }

    pub fn scope(&self) -> &ScopeCgroup {
        &self.scope
    }

    pub fn enforcer(&self) -> &Enforcer {
        self.core.enforcer()
    }

    /// The Enforcer, e.g. to list more cgroups in or out of scope.
    pub fn enforcer_mut(&mut self) -> &mut Enforcer {
        self.core.enforcer_mut()
    }

    /// Puts `image` in force (the maps are updated with no gap) and keeps it as this session's
    /// image, e.g. the session's own image with exec approvals added.
    pub fn apply_image(
        &mut self,
        image: EnforcementImage,
    ) -> Result<crate::kernel::maps::SyncStats> {
        self.core.apply(image, unstacked())
    }

    /// `(name, kernel program id)` of each of this session's programs that is loaded, so a test
    /// can check that dropping the session unloads exactly these.
    pub fn program_ids(&mut self) -> Vec<(String, u32)> {
        let raw = self.core.enforcer().raw_program_ids();
        self.core
            .enforcer_mut()
            .ebpf_mut()
            .programs()
            .filter_map(|(name, program)| Some((name.to_string(), program.info().ok()?.id())))
            .chain(raw)
            .collect()
    }

    /// Starts `command` inside the scope: it joins the cgroup between fork and exec, so its
    /// very first exec is already decided. Its writes are not confined: see
    /// [`Session::spawn_confined`].
    pub fn spawn(&self, command: &mut Command) -> Result<Child> {
        self.spawn_confined(command, &CommandConfinement::none(), None)
    }

    /// What this session's policy denies for writes (its protected paths and its rule sets'
    /// `write(...)` denials) with `cwd` as the command's current folder, as a plan and the
    /// mount namespace binds and Landlock ruleset that hold it (made here, in the parent:
    /// nothing of it may run between fork and exec), under `sandbox`'s mode when there is one;
    /// `keep_capabilities` keeps the root hardening off. An error is a kernel with Landlock
    /// that refused the ruleset.
    pub fn write_confinement(
        &self,
        cwd: &Path,
        sandbox: Option<&SandboxPlan>,
        keep_capabilities: bool,
    ) -> Result<(WritePlan, CommandConfinement)> {
        let plan = WritePlan::for_policy(self.policy(), cwd);
        let confinement = CommandConfinement::prepare_sandboxed(&plan, sandbox, keep_capabilities)?;
        Ok((plan, confinement))
    }

    /// [`Session::spawn`], with the command's writes confined by `confinement` (see
    /// [`Session::write_confinement`]): between fork and exec the child joins the cgroup, then
    /// puts itself under the Landlock ruleset, so neither its first exec nor its first write
    /// escapes; with `hold`, its execs are then held for the run to decide on (see
    /// [`crate::hold`]). Keep `confinement` alive until this returns.
    pub fn spawn_confined(
        &self,
        command: &mut Command,
        confinement: &CommandConfinement,
        hold: Option<crate::hold::ChildEnd>,
    ) -> Result<Child> {
        use std::os::unix::process::CommandExt;
        let procs = self.scope.procs_path().clone();
        let mut steps = confinement.steps();
        steps.hold = hold;
        // SAFETY: the closure only makes async-signal-safe calls (open/write/close, then the
        // raw syscalls of `PreExecSteps::apply`; its data was made before the fork).
        unsafe {
            command.pre_exec(move || {
                join_from_pre_exec(&procs)?;
                steps.apply()
            })
        };
        command.spawn().context("starting the command")
    }

    /// From now on the writes `plan` refuses are events too ([`Session::poll_events`]): the
    /// kernel reports the scope's writes that failed with EACCES, and those outside the plan's
    /// roots are kept (`from` says where the mode was chosen, for the fix the line names).
    pub fn report_sandbox(&mut self, plan: SandboxPlan, from: &str) -> Result<()> {
        self.core.enforcer_mut().report_sandbox_refusals()?;
        self.sandbox = Some((plan, from.to_string()));
        Ok(())
    }

    /// Events that arrived, waiting up to `timeout` for the first. What guard's resolver
    /// answered meanwhile is put in force here (it waits for that before it answers), and what
    /// it refused is kept for [`Session::take_dns_notes`].
    pub fn poll_events(&mut self, timeout: Duration) -> Vec<KernelEvent> {
        let wake = self.resolver.as_ref().map(ResolverThread::wake_fd);
        let exit = self
            .command_exit
            .as_ref()
            .map(|process| std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(process)));
        let mut events = self.events.poll_or_wake(timeout, [wake, exit]);
        // An EACCES the sandbox did not cause (a file's own permissions) is not a refusal.
        events.retain_mut(|event| {
            if event.sandbox.is_none() {
                return true;
            }
            let Some((plan, from)) = self.sandbox.as_ref() else {
                return false;
            };
            plan.resolve_paths(event);
            plan.refusal(event, from).is_some()
        });
        if let Err(err) = self.serve_resolver() {
            self.dns_notes
                .push(DnsNote::ApplyFailed(format!("{err:#}")));
        }
        events
    }

    /// What guard's resolver refused or could not answer since the last call.
    pub fn take_dns_notes(&mut self) -> Vec<DnsNote> {
        std::mem::take(&mut self.dns_notes)
    }

    /// The port of guard's resolver, when it is in the path of the scope's DNS.
    pub fn resolver_port(&self) -> Option<u16> {
        self.resolver.as_ref().map(ResolverThread::port)
    }

    /// The names the scope looked up that guard asks for again, by outcome so far.
    pub fn refresh_counts(&self) -> crate::resolve::refresh::RefreshCounts {
        self.core.names().refresh_counts()
    }

    /// The names guard's resolver answered `ip` for in this scope.
    pub fn hosts_of(&self, ip: std::net::IpAddr) -> Vec<String> {
        self.core.names_for(ip, 0)
    }

    /// Records the resolver's answers, puts the new addresses of names the policy rules on in
    /// force (one map update for every answer waiting, only their entries), then lets their
    /// queries be answered; takes the refreshes' answers, asks for the names that are due again
    /// and drops the addresses whose time is up.
    fn serve_resolver(&mut self) -> Result<()> {
        let Some(resolver) = &self.resolver else {
            return Ok(());
        };
        // One scope: its answers hold for the whole program set.
        let (notes, applied) = self.core.take_resolver_events(
            resolver.take_events(),
            |_, _| Some(0),
            Instant::now(),
            unstacked(),
        );
        self.dns_notes
            .extend(notes.into_iter().map(DnsNote::Resolver));
        applied
    }

    /// When the next DNS refresh is due.
    pub fn next_dns_refresh(&self) -> Option<Instant> {
        let lookups = self.dns.as_ref()?;
        lookups.resolver.next_refresh(self.core.names().resolved())
    }

    /// Re-resolves names whose TTL ran out; when an answer changed, recompiles and updates the
    /// maps (new addresses are written before old ones are removed). Returns whether anything
    /// changed.
    pub fn refresh_dns(&mut self) -> Result<bool> {
        let Some(lookups) = self.dns.as_ref() else {
            return Ok(false);
        };
        let cache = self.core.names_mut().resolved_mut();
        let changes = lookups
            .runtime
            .block_on(lookups.resolver.refresh(cache, Instant::now()));
        if changes.is_empty() {
            return Ok(false);
        }
        let names: Vec<String> = changes.into_iter().map(|change| change.host).collect();
        self.core.names_changed(&names, unstacked())?;
        Ok(true)
    }

    /// Holds `approval` in the kernel from now on (with the earlier ones); on an error nothing
    /// changes.
    pub fn hold_approval(&mut self, approval: Approval) -> Result<()> {
        let mut approvals = self.core.approvals().clone();
        approvals.add(approval.clone());
        let missing = self.core.unresolved(approvals.stand_in_names());
        self.resolve_more(&missing)?;
        self.core.add_approval(approval, unstacked())
    }

    /// Resolves `names` too (they may now leave the host), keeping what guard resolved.
    fn resolve_more(&mut self, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let lookups = match self.dns.take() {
            Some(lookups) => lookups,
            None => DnsLookups::new(self.nameserver)?,
        };
        let fresh = lookups.resolve(names);
        self.dns = Some(lookups);
        self.core.names_mut().resolved_mut().merge_new(fresh);
        Ok(())
    }

    /// Drops the `--once` approvals whose window closed.
    pub fn expire_approvals(&mut self, now: Instant) -> Result<()> {
        self.core
            .change_approvals(|approvals| approvals.expire(now), unstacked())
            .map(drop)
    }

    /// Enforces `policy` instead (an amendment was written), with its names resolved and the
    /// approvals kept; on an error the old policy stays in force.
    pub fn replace_policy(&mut self, policy: Policy) -> Result<()> {
        let missing = self.core.unresolved(self.core.names_to_resolve(&policy));
        self.resolve_more(&missing)?;
        self.core.replace_policy(policy, unstacked())?;
        self.names = NamePolicy::from_policy(self.core.policy());
        if let Some(resolver) = &self.resolver {
            resolver.set_names(self.names.clone());
        }
        Ok(())
    }

    /// The sandbox's line for `event`, a write it refused ([`Session::report_sandbox`]).
    pub fn sandbox_refusal(&self, event: &KernelEvent) -> Option<String> {
        let (plan, from) = self.sandbox.as_ref()?;
        plan.refusal(event, from)
    }

    /// The one-line message for a refusal or an audit-only match.
    pub fn describe(&self, event: &KernelEvent) -> String {
        if let Some(line) = self.sandbox_refusal(event) {
            return line;
        }
        let hosts = event
            .destination
            .as_ref()
            .map(|d| self.core.names_for(d.address, 0))
            .unwrap_or_default();
        describe_event(self.image(), event, &hosts)
    }
}
