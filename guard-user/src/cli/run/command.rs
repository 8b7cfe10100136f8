//! `guard run`: run one command under the policy, enforced by the kernel, in a fresh scope.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use clap::Args;

use super::asks::{RunAsks, take_in};
use super::held::{HeldCalls, Terminal};
use crate::cli::RulesArgs;
use crate::confine::landlock::Confinement;
use crate::confine::sandbox::SandboxPlan;
use crate::confine::{CommandConfinement, Holding, WritePlan, capabilities};
use crate::hold::sockets::HeldSocket;
use crate::hold::splice::SpliceListener;
use crate::hold::{Hold, Twins};
use crate::kernel::Backend;
use crate::kernel::events::Action;
use crate::kernel::layers::{Layer, LayerState, LayerStatus};
use crate::policy::approval::ApprovalPolicy;
use crate::policy::sandbox::SandboxMode;
use crate::resolve::{Refusal, ResolverNote};
use crate::session::{DnsNote, Session, SessionOptions};

/// How often a run looks whether its pinned links are still attached.
const LINK_CHECK_EVERY: Duration = Duration::from_millis(250);

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  guard run -- git push origin main                     # the embedded default policy
  guard run --rules team.rules -- make deploy
  guard run --audit-only --rules draft.rules -- ./ci.sh  # record, refuse nothing

Each refusal prints one line to stderr as it happens:
  guard: refused exec of `git push origin main`: policy forbids commands starting with `git push` (team.rules:3)

On a terminal, a prompted exec waits: guard asks there ([o]nce, [s]ession, [a]lways, [d]eny),
and the exec goes on when approved or fails with EACCES when denied. Otherwise (and for a
connect) a `prompt` refuses the call and raises an ask, with its id on stderr. Answer it from another
terminal (`sudo guard prompts`, `sudo guard approve ID [--once|--session|--always]`, `sudo guard
deny ID`), then retry in the same run: --once lets the same request through for 60 s, --session
until the run ends, and --always appends the amendment line to the first --rules file
(`default.rules` inside it, for a folder) and enforces it at once. A process inside the run
cannot answer its own asks.

With --socket (or, without --rules, when a guard daemon listens on /run/guard/guard.sock) the
command runs in a fresh scope of the daemon instead: the daemon's policy applies, asks can be
approved (`guard prompts`, `guard approve ID`) and the retry succeeds.

Writes are confined: the command runs in a private mount namespace where the protected paths
(guard's configuration, the rules files the policy was loaded from, the daemon's state) and the
concrete paths of `write(...)` denials are read-only binds, so a write, chmod, chown or xattr
change there fails with EROFS and everything else is written as usual. Without root (a daemon
client), Landlock alone holds them (EACCES). A root command also loses CAP_SYS_ADMIN and the
other capabilities that could undo this (see --keep-capabilities); -v says which write rules are
held only in part or not at all.

The exit status is the command's (128+N when a signal N ended it; a refused exec on the cgroup
backend is SIGKILL, so 137). guard needs root; `guard doctor` says which backend this kernel allows.")]
pub struct RunArgs {
    #[command(flatten)]
    pub rules: RulesArgs,
    /// Record every decision, enforce none.
    #[arg(long)]
    pub audit_only: bool,
    /// `lsm` or `cgroup`; default: the preferred one this kernel allows.
    #[arg(long, value_parser = parse_backend)]
    pub backend: Option<Backend>,
    /// Resolve `network_rule` host names with this DNS server (IP:PORT, over UDP) instead of
    /// the system's resolver configuration.
    #[arg(long, value_name = "IP:PORT")]
    pub nameserver: Option<std::net::SocketAddr>,
    /// How guard's resolver answers a name the policy forbids: `refused` (RCODE 5) or
    /// `nxdomain` (the name does not exist).
    #[arg(long, value_enum, default_value_t = Refusal::Refused, value_name = "ANSWER")]
    pub dns_refusal: Refusal,
    /// Let the command's DNS go where it is sent, decided by address like any other traffic,
    /// instead of through guard's resolver (then names the command resolves itself may get
    /// addresses guard never saw, and asks name addresses, not hosts).
    #[arg(long)]
    pub no_resolver: bool,
    /// Set from the global `-v` (notes about rules the kernel can only partly hold, and the
    /// kernel's decision counters at exit).
    #[arg(skip)]
    pub verbose: bool,
    /// Print each refusal as a JSON line on stderr instead of a sentence, and each name guard's
    /// resolver answered (`"kind":"dns"`: forwarded, or a stand-in) with the process that asked.
    #[arg(long)]
    pub json_events: bool,
    /// Run in a fresh scope of the guard daemon listening here: its policy applies (tightened
    /// by --overlay, for this run alone) and its messages are printed as they happen. Without
    /// --rules the daemon's default socket is used when a daemon is running there.
    #[arg(long, value_name = "PATH", env = "GUARD_SOCKET")]
    pub socket: Option<std::path::PathBuf>,
    /// The approval policy (the Codex CLI's): `on-request` (the default: prompts are asked),
    /// `on-failure` (the same here), `never` (a prompt is refused at once, with no ask),
    /// `granular[:sandbox_approval=BOOL,rules=BOOL]` (a `false` category is refused at once:
    /// `rules` for prompt rules, `sandbox_approval` for the others) or `untrusted` (every exec
    /// that is not known-safe asks; see `guard check --approval`).
    #[arg(long, value_name = "MODE", value_parser = parse_approval)]
    pub approval: Option<ApprovalPolicy>,
    /// Confine the command's writes to a sandbox mode (the Codex CLI's), held by Landlock and
    /// read-only binds: `read-only` (no writes but to /dev/null and the terminal),
    /// `workspace-write` (only below the workspace, /tmp, $TMPDIR and each --writable; the
    /// workspace's .git and .codex stay read-only) or `danger-full-access` (only the policy's
    /// own write denials, as without --sandbox). A refused write fails with EACCES. Without it,
    /// the rules' `sandbox(mode=...)` decides, if they have one.
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<RunSandbox>,
    /// Under workspace-write (--sandbox, or the rules' `sandbox(...)`): the workspace
    /// [default: the current folder].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Under workspace-write: another folder the command may write below (repeatable; added
    /// to the rules' `sandbox(writable=[...])`).
    #[arg(long, value_name = "DIR")]
    pub writable: Vec<PathBuf>,
    /// Keep every capability of a root command (by default CAP_SYS_ADMIN, CAP_NET_RAW,
    /// CAP_SYS_PTRACE, CAP_LINUX_IMMUTABLE, CAP_BPF and the others that could undo guard are
    /// dropped from all its sets).
    #[arg(long)]
    pub keep_capabilities: bool,
    /// Refuse a prompted exec or connect at once (answer its ask, then retry) instead of
    /// holding the call until the ask is answered. Stand-alone, calls are held only on a
    /// terminal (guard asks there); under the daemon, always (anyone allowed to answer may, with
    /// `guard approve`). Also set by GUARD_NO_HOLD=1 (or true, yes, on).
    #[arg(
        long,
        env = "GUARD_NO_HOLD",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub no_hold: bool,
    /// Load and verify guard's programs afresh, as the first run after a boot does, instead of
    /// reusing the set an earlier stand-alone run kept loaded on the bpffs
    /// (/sys/fs/bpf/guard-cache, emptied before each reuse; `guard release` removes it). A
    /// fresh load costs the kernel's verifier about a second; a kept set, milliseconds.
    #[arg(long)]
    pub fresh_programs: bool,
    /// Refuse to start the command unless these layers of enforcement hold, naming each one
    /// that does not and why, instead of running with less protection: exec, network, unix,
    /// devices, dns, hold, files, audit, export (comma-separated or repeated). Under the daemon,
    /// the daemon's layers, as `guard status` lists them.
    #[arg(long, value_name = "LAYER,...", value_delimiter = ',')]
    pub require: Vec<Layer>,
    /// Pass N descriptors beyond stdin, stdout and stderr to the command (3..3+N); every other
    /// inherited descriptor is closed at its exec.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub preserve_fds: u32,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

/// The sandbox modes `guard run` can hold.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum RunSandbox {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

impl RunSandbox {
    fn mode(self) -> SandboxMode {
        match self {
            RunSandbox::ReadOnly => SandboxMode::ReadOnly,
            RunSandbox::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            RunSandbox::DangerFullAccess => SandboxMode::DangerFullAccess,
        }
    }
}

fn parse_approval(raw: &str) -> Result<ApprovalPolicy, String> {
    raw.parse()
}

fn parse_backend(raw: &str) -> Result<Backend, String> {
    match raw {
        "lsm" => Ok(Backend::Lsm),
        "cgroup" => Ok(Backend::Cgroup),
        _ => Err(format!("unknown backend `{raw}`: use lsm or cgroup")),
    }
}

pub fn run(args: &RunArgs) -> ExitCode {
    // An overlay alone tightens the daemon's policy when one runs; --rules makes a policy of
    // its own, enforced here.
    let standalone = !args.rules.rules.is_empty();
    let socket = match &args.socket {
        Some(socket) => Some(socket.clone()),
        None => {
            let default = std::path::Path::new(crate::daemon::config::DEFAULT_SOCKET);
            (!standalone && default.exists()).then(|| default.to_path_buf())
        }
    };
    if let Some(socket) = socket {
        if !args.rules.rules.is_empty()
            || args.audit_only
            || args.backend.is_some()
            || args.nameserver.is_some()
            || args.no_resolver
            || args.approval.is_some()
            || args.sandbox.is_some()
        {
            return crate::cli::output::usage_error(
                "--rules, --audit-only, --backend, --nameserver, --no-resolver, --approval and --sandbox are the daemon's to choose; drop them to run under the daemon (--overlay FILE tightens its policy for this run), or drop --socket to enforce on your own",
            );
        }
        return super::daemon::run(&socket, args);
    }
    let loaded = match args.rules.load() {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    // From here on a signal that would end guard goes to the command instead.
    if let Err(err) = super::signals::catch() {
        eprintln!("guard: cannot catch signals to pass them on to the command: {err}");
        return ExitCode::from(125);
    }
    let approval = args.approval.unwrap_or_default();
    let policy = approval.kernel_policy(loaded.policy);
    // Audit-only runs refuse nothing, so they have nothing to ask.
    let mut asks = if args.audit_only {
        None
    } else {
        match RunAsks::open(&args.rules.rules, &args.rules.overlays, approval) {
            Ok(asks) => Some(asks),
            Err(err) => {
                eprintln!(
                    "guard: warning: prompts cannot be answered in this run (no ask socket: \
                     {err:#}); they are refused"
                );
                None
            }
        }
    };
    // Prompted connects and sends wait in the kernel, as on a slow network, when someone is
    // there to answer them (as for held execs, below).
    let hold_network = asks.as_ref().filter(|_| {
        !args.no_hold
            && approval != ApprovalPolicy::Never
            && Terminal::open().is_some()
            && crate::hold::policy_prompts_destinations(&policy)
    });
    // Where a held connect to a stand-in address waits for its answer.
    let splices = hold_network.and_then(|_| match SpliceListener::start() {
        Ok(splices) => Some(splices),
        Err(err) => {
            eprintln!(
                "guard: note: a prompted connect to a name no rule names is refused at once, not \
                 held (no splice listener: {err})"
            );
            None
        }
    });
    let options = SessionOptions {
        backend: args.backend,
        audit_only: args.audit_only,
        nameserver: args.nameserver,
        extra_path_dirs: Vec::new(),
        resolver: (!args.no_resolver).then_some(args.dns_refusal),
        hold_network: hold_network
            .map(|asks| asks.timeout() + crate::hold::sockets::KERNEL_BOUND_GRACE),
        splice_port: splices.as_ref().map(SpliceListener::port),
        keep_programs: (!args.fresh_programs).then(Default::default),
    };
    let mut session = match Session::start(policy, &options) {
        Ok(session) => session,
        Err(err) => {
            eprintln!("guard: cannot enforce: {err:#}");
            eprintln!(
                "guard: run `guard doctor` to see what this kernel allows (guard needs root)."
            );
            return ExitCode::from(125);
        }
    };
    for abandoned in session.abandoned_scopes() {
        eprintln!("guard: warning: {abandoned}");
    }
    for warning in session.image().warnings.iter().filter(|_| args.verbose) {
        eprintln!("guard: note: {warning}");
    }
    for warning in crate::kernel::coverage::unheld_allowances(session.image()) {
        eprintln!("guard: warning: {warning}");
    }
    // Writes are the confinement report's (below); reads have nothing on this backend.
    let unread: Vec<_> = session
        .not_enforced()
        .into_iter()
        .filter(|gap| gap.reads)
        .collect();
    if !unread.is_empty() {
        eprintln!(
            "guard: note: {} read(...) rules are not enforced on the {} backend{}",
            unread.len(),
            session.backend().as_str(),
            if args.verbose {
                ":"
            } else {
                " (-v lists them)"
            }
        );
        for gap in unread.iter().filter(|_| args.verbose) {
            eprintln!("  {}", gap.rule);
        }
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    // --sandbox, else the rules' `sandbox(...)`; --writable adds to the rules' roots.
    let chosen = match (args.sandbox, session.policy().sandbox()) {
        (Some(mode), _) => Some((mode.mode(), Vec::new(), "--sandbox".to_string())),
        (None, Some(set)) => Some((set.mode, set.writable.clone(), set.from.clone())),
        (None, None) => None,
    };
    let sandbox = chosen.map(|(mode, mut writable, from)| {
        writable.extend(args.writable.iter().cloned());
        let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
        let workspace = args.workspace.as_deref().unwrap_or(&cwd);
        (
            SandboxPlan::new(mode, workspace, tmpdir.as_deref(), &writable),
            from,
        )
    });
    let restricted = sandbox
        .as_ref()
        .map(|(plan, _)| plan)
        .filter(|s| s.is_restricted());
    let confinement = match session.write_confinement(&cwd, restricted, args.keep_capabilities) {
        Ok((plan, confinement)) => {
            report_confinement(&plan, &confinement, args.verbose);
            confinement
        }
        Err(err) => {
            eprintln!("guard: cannot confine the command's writes: {err:#}");
            return ExitCode::from(125);
        }
    };
    // Each write the sandbox refuses is a line (and a --json-events record) of this run.
    let mut unreported = None;
    if let (Some(plan), Some((_, from))) = (restricted, &sandbox) {
        let shown = if from == "--sandbox" {
            String::new()
        } else {
            format!(" (sandbox(...) at {from})")
        };
        eprintln!(
            "guard: sandbox {}{shown}: {}",
            plan.mode.as_str(),
            plan.describe()
        );
        if let Err(err) = session.report_sandbox(plan.clone(), from) {
            eprintln!(
                "guard: note: the writes the sandbox refuses cannot be reported here ({err:#}); \
                 they still fail with EACCES"
            );
            unreported = Some(plan);
        }
    }
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    super::inherited_fds::pass_only_std_fds(&mut command, args.preserve_fds);
    let mut held = start_hold(
        &session,
        asks.is_some() && !args.no_hold,
        approval,
        args.verbose,
    );
    if let (Some(held), Some(splices)) = (held.as_mut(), splices) {
        held.take_splices(splices);
    }
    // Before the command starts: a layer it requires that does not hold is a refusal to run.
    let hold_layer = hold_layer(args, asks.is_some(), approval, held.is_some(), &session);
    if let Err(code) = refuse_unmet(&session.layers(hold_layer), &args.require) {
        return code;
    }
    let child_end = held
        .as_ref()
        .and_then(HeldCalls::hold)
        .and_then(|h| h.child_end());
    let spawned = session.spawn_confined(&mut command, &confinement, child_end);
    if let Some(hold) = held.as_mut().and_then(HeldCalls::hold_mut) {
        hold.started();
    }
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            eprintln!("guard: cannot run `{}`: {err:#}", args.command[0]);
            return ExitCode::from(127);
        }
    };
    // The loop's waits end when the command does, not 50 ms later.
    session.wake_on_exit_of(child.id());
    let mut signals = super::signals::PassOn::default();
    let mut scope_ended = false;
    let mut links_looked_at = Instant::now();
    let status = loop {
        // The run's pinned links, put back where someone detached them (not from inside: the
        // command can neither see the pins nor make a bpf call).
        if links_looked_at.elapsed() >= LINK_CHECK_EVERY {
            links_looked_at = Instant::now();
            for repair in session.enforcer_mut().repair_links() {
                eprintln!("guard: {repair}");
            }
        }
        if let Some(why) = signals.step(child.id()).ending()
            && !scope_ended
        {
            eprintln!(
                "guard: killing everything in the scope of `{}`: {why}",
                args.command[0]
            );
            session.scope().kill();
            scope_ended = true;
        }
        let sockets = report(
            &mut session,
            asks.as_mut(),
            approval,
            Duration::from_millis(50),
            args.json_events,
            args.verbose,
        );
        match (held.as_mut(), asks.as_mut()) {
            (Some(held), Some(asks)) => {
                held.take_sockets(sockets);
                held.step(&mut session, asks);
            }
            // No terminal to ask on after all: refused at once, as without a hold.
            _ => {
                for socket in sockets {
                    let ended = session
                        .enforcer_mut()
                        .end_and_forget_held_socket(socket.cookie);
                    if let Err(err) = ended {
                        eprintln!("guard: ending a held connect: {err:#}");
                    }
                }
            }
        }
        if session
            .next_dns_refresh()
            .is_some_and(|due| due <= Instant::now())
        {
            match session.refresh_dns() {
                Ok(true) => {
                    if let Some(held) = held.as_ref() {
                        held.image_changed(&session);
                    }
                }
                Ok(false) => {}
                Err(err) => eprintln!("guard: DNS refresh failed: {err:#}"),
            }
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(err) => {
                eprintln!("guard: waiting for the command: {err}");
                return ExitCode::from(125);
            }
        }
    };
    // Events of the last moments (a refused exec is reported right before the exit).
    let _ = report(
        &mut session,
        asks.as_mut(),
        approval,
        Duration::from_millis(20),
        args.json_events,
        args.verbose,
    );
    // Refusals that reach no event: say where they may come from when the command failed.
    if let Some(sandbox) = unreported.filter(|_| !status.success()) {
        eprintln!(
            "guard: note: the command ran under sandbox {} ({}): a write it reported as \
             `Permission denied` elsewhere was refused by the sandbox; add --writable DIR, or \
             choose another --sandbox",
            sandbox.mode.as_str(),
            sandbox.describe()
        );
    }
    if let Ok(counters) = session.enforcer().counters() {
        let lost = crate::kernel::maps::events_lost(&counters);
        if lost > 0 {
            eprintln!(
                "guard: warning: {lost} kernel events were lost to a full ring buffer or past \
                 the run's share of it (the decisions were enforced; only their messages are \
                 missing)"
            );
        }
        for (hook, n) in crate::kernel::maps::failed_open(&counters) {
            if n > 0 {
                eprintln!(
                    "guard: warning: {n} {hook} decisions failed open: the kernel programs could \
                     not read the memory they needed and let the call through (counter \
                     {hook}_failed_open)"
                );
            }
        }
        if args.verbose {
            let line: Vec<String> = counters
                .iter()
                .map(|(name, n)| format!("{name}={n}"))
                .collect();
            eprintln!("guard: kernel counters: {}", line.join(" "));
        }
    }
    drop(held);
    drop(asks);
    drop(session);
    crate::cli::output::exit_code_of(status)
}

/// How the hold of prompted calls stands for this run.
fn hold_layer(
    args: &RunArgs,
    asking: bool,
    approval: ApprovalPolicy,
    holding: bool,
    session: &Session,
) -> LayerStatus {
    let off = |why: &str| LayerStatus::new(Layer::Hold, LayerState::Off, why);
    let policy = session.policy();
    if args.audit_only {
        off("--audit-only: nothing is refused, so nothing is held")
    } else if args.no_hold {
        off("--no-hold (or GUARD_NO_HOLD): a prompt is refused at once; answer its ask, then retry")
    } else if approval == ApprovalPolicy::Never {
        off("--approval never: a prompt is refused at once, with no ask")
    } else if !crate::hold::policy_prompts_execs(policy)
        && !crate::hold::policy_prompts_destinations(policy)
    {
        off("the policy prompts for nothing")
    } else if !asking {
        LayerStatus::new(
            Layer::Hold,
            LayerState::Missing,
            "no ask socket could be made: a prompt is refused",
        )
    } else if holding {
        LayerStatus::new(
            Layer::Hold,
            LayerState::Up,
            "a prompted exec or connect waits for its answer (on the terminal, or `guard approve`)",
        )
    } else {
        off(
            "no terminal to ask on: a prompted exec or connect is refused at once (answer its \
             ask, then retry)",
        )
    }
}

/// Says why, and fails with 125, when a layer in `required` does not hold in `layers`.
pub(super) fn refuse_unmet(layers: &[LayerStatus], required: &[Layer]) -> Result<(), ExitCode> {
    let unmet = crate::kernel::layers::unmet(layers, required);
    if unmet.is_empty() {
        return Ok(());
    }
    for status in &unmet {
        eprintln!("guard: refusing to run: the required layer {status}");
    }
    let names: Vec<&str> = unmet.iter().map(|s| s.layer.as_str()).collect();
    eprintln!(
        "guard: the command was not started. Drop {} from --require to run without {}, or fix \
         what is said above (`guard doctor` says what this kernel allows).",
        names.join(", "),
        if unmet.len() == 1 { "it" } else { "them" }
    );
    Err(ExitCode::from(125))
}

/// The hold of prompted execs and connects, when this run can ask about them: asks are on, a
/// prompt is not refused at once (`--approval never`), the policy asks about some exec or
/// destination, and the run is on a terminal (its stdin or stderr is one) to ask on. Execs wait
/// in the syscall (a seccomp filter, [`Hold`]); connects and sends wait in the kernel when it
/// holds them ([`crate::kernel::Enforcer::hold_network`]), else in the syscall too.
fn start_hold(
    session: &Session,
    asking: bool,
    approval: ApprovalPolicy,
    verbose: bool,
) -> Option<HeldCalls> {
    if !asking || approval == ApprovalPolicy::Never {
        return None;
    }
    let policy = session.policy();
    let kernel_holds_network = session.enforcer().holds_network();
    let twins = match Twins::of_image(
        session.image(),
        crate::hold::policy_prompts_execs(policy),
        !kernel_holds_network && crate::hold::policy_prompts_destinations(policy),
        session.resolver_port().is_some(),
    ) {
        Ok(twins) => twins,
        // The kernel still holds connects: only execs are refused at once.
        Err(err) if kernel_holds_network => {
            eprintln!("guard: note: prompted execs are refused at once, not held: {err:#}");
            Twins::default()
        }
        Err(err) => {
            eprintln!("guard: note: prompted calls are refused at once, not held: {err:#}");
            return None;
        }
    };
    let seccomp = twins.exec.is_some() || twins.destinations.is_some();
    if !seccomp && !kernel_holds_network {
        return None;
    }
    let Some(terminal) = on_terminal().then(Terminal::open).flatten() else {
        if verbose {
            eprintln!(
                "guard: note: no terminal to ask on: a prompted exec or connect is refused at \
                 once (answer its ask, then retry)"
            );
        }
        return None;
    };
    if !seccomp {
        return Some(HeldCalls::new(None, terminal));
    }
    match Hold::start(twins) {
        Ok(hold) => Some(HeldCalls::new(Some(hold), terminal)),
        Err(err) => {
            eprintln!(
                "guard: warning: prompted execs cannot wait for an answer ({err}); they are \
                 refused at once"
            );
            kernel_holds_network.then(|| HeldCalls::new(None, terminal))
        }
    }
}

/// Whether the run has a terminal to ask on (its stdin or stderr is one).
fn on_terminal() -> bool {
    // SAFETY: isatty only reads the descriptor's kind.
    unsafe { libc::isatty(0) == 1 || libc::isatty(2) == 1 }
}

/// What the command's writes get, on stderr: one line when Landlock is absent (writes are not
/// confined), one line when some `write(...)` rule is held only in part or not at all (`-v`
/// lists each, the denied paths and the folders on the way), and every folder that could not be
/// listed.
pub(super) fn report_confinement(
    plan: &WritePlan,
    confinement: &CommandConfinement,
    verbose: bool,
) {
    if let Holding::Mounts(mounts) = &confinement.holding {
        report_mounts(mounts, confinement, verbose);
    } else {
        report_landlock(plan, &confinement.landlock, verbose);
    }
    report_unheld(plan, verbose);
}

/// The mount namespace's binds (`-v`), and a warning when nothing stops the command from
/// unmounting them (no Landlock, capabilities kept).
fn report_mounts(
    mounts: &crate::confine::namespace::MountPlan,
    confinement: &CommandConfinement,
    verbose: bool,
) {
    let locked = matches!(confinement.landlock, Confinement::Landlock(_));
    if !locked && !confinement.drop_capabilities {
        eprintln!(
            "guard: warning: no Landlock here and the capabilities are kept: the command can \
             unmount the read-only binds that hold its protected paths"
        );
    }
    if verbose {
        let read_only: Vec<String> = mounts
            .binds
            .iter()
            .filter(|b| b.read_only && !b.hidden)
            .map(|b| b.path.display().to_string())
            .collect();
        let hidden: Vec<String> = mounts
            .binds
            .iter()
            .filter(|b| b.hidden)
            .map(|b| b.path.display().to_string())
            .collect();
        eprintln!(
            "guard: note: writes held in a private mount namespace: read-only {}; hidden (bpf \
             file systems, guard's pins among them) {}; the folders on the way are mount points \
             (they cannot be removed or renamed; a rename across one fails with EXDEV){}",
            read_only.join(", "),
            if hidden.is_empty() {
                "none".to_string()
            } else {
                hidden.join(", ")
            },
            if locked {
                "; Landlock refuses mount and umount"
            } else {
                ""
            }
        );
        if confinement.drop_capabilities {
            let names: Vec<&str> = capabilities::DROPPED.iter().map(|(_, n)| *n).collect();
            eprintln!(
                "guard: note: capabilities dropped: {} (--keep-capabilities keeps them)",
                names.join(" ")
            );
        }
    }
}

/// The Landlock plan's report, when no mount namespace could be made.
fn report_landlock(plan: &WritePlan, confinement: &Confinement, verbose: bool) {
    if verbose {
        eprintln!(
            "guard: note: no mount namespace (not root): writes are held by Landlock alone, \
             which refuses new entries in every folder on the way to a protected path"
        );
    }
    match confinement {
        Confinement::Unavailable(why) => {
            eprintln!(
                "guard: warning: writes are not confined: {why}; the protected paths and \
                write(...) denials are not held for this command"
            );
        }
        Confinement::Landlock(ruleset) => {
            for error in &ruleset.errors {
                eprintln!("guard: warning: {error}: nothing below it is writable");
            }
            if verbose {
                let denied: Vec<String> = plan
                    .denied
                    .iter()
                    .map(|d| d.path.display().to_string())
                    .collect();
                let ways: Vec<String> = plan
                    .ways()
                    .iter()
                    .map(|w| w.display().to_string())
                    .collect();
                eprintln!(
                    "guard: note: writes confined by Landlock (ABI {}): denied below {}; {} \
                    hierarchies writable; no new entry can be made, removed or renamed directly \
                    in {}",
                    ruleset.abi,
                    denied.join(", "),
                    ruleset.granted,
                    ways.join(", ")
                );
            }
        }
        Confinement::Nothing => {}
    }
}

/// `write(...)` rules and allowed unix sockets held only in part or not at all.
fn report_unheld(plan: &WritePlan, verbose: bool) {
    if verbose {
        for not_held in &plan.not_held {
            eprintln!(
                "guard: note: {} is not held: {}",
                not_held.rule, not_held.why
            );
        }
        for partly in &plan.partly {
            eprintln!("guard: note: {} is {}", partly.rule, partly.why);
        }
        for rule in &plan.not_enforced {
            eprintln!(
                "guard: note: {rule} asks, and Landlock cannot ask: not enforced on this backend"
            );
        }
    } else {
        let unheld = plan.unheld_written_rules();
        if unheld > 0 {
            eprintln!(
                "guard: note: {unheld} write(...) or unix_rule(...) rule{} held only in part or \
                not at all for this command (-v says which)",
                if unheld == 1 { " is" } else { "s are" }
            );
        }
    }
}

/// Prints what happened since the last call: refusals (and the asks they made), answers to
/// asks, expired asks, DNS matters.
fn report(
    session: &mut Session,
    mut asks: Option<&mut RunAsks>,
    approval: ApprovalPolicy,
    wait: Duration,
    json: bool,
    verbose: bool,
) -> Vec<HeldSocket> {
    let mut held = Vec::new();
    for event in session.poll_events(wait) {
        let taken = match asks.as_deref_mut() {
            Some(asks) => asks.take(session, &event),
            None => take_in(session, None, approval, &event),
        };
        let asked = taken.ask.zip(taken.answers);
        let mut line = taken.line;
        // A connect the kernel holds waits for the answer; one nobody can answer is ended.
        let holding = event.action == Action::Held;
        if holding {
            match asked {
                Some((id, _)) => {
                    held.push(HeldSocket::new(
                        event.ino,
                        id,
                        event.pid,
                        match event.destination.as_ref().map(|d| d.transport) {
                            Some("udp") => guard_common::maps::TRANSPORT_UDP,
                            _ => guard_common::maps::TRANSPORT_TCP,
                        },
                        session.describe(&event),
                    ));
                    line = line.replacen("guard: refused ", "guard: holding ", 1);
                }
                None => {
                    if let Err(err) = session.enforcer_mut().end_and_forget_held_socket(event.ino) {
                        eprintln!("guard: ending a held connect: {err:#}");
                    }
                }
            }
        }
        if json {
            let mut value = serde_json::to_value(&event).unwrap_or_default();
            if let Some(destination) = &event.destination {
                value["hosts"] = session.hosts_of(destination.address).into();
            }
            value["message"] = line.into();
            if let (Some((id, _)), Some(asks)) = (asked, asks.as_deref()) {
                value["ask"] = id.into();
                value["socket"] = asks.socket().display().to_string().into();
            }
            eprintln!("{value}");
            continue;
        }
        eprintln!("{line}");
        let (Some((id, answers)), Some(asks), true) = (asked, asks.as_deref(), taken.new_ask)
        else {
            continue;
        };
        let expires_in = asks.expires_in(id);
        if holding {
            eprintln!(
                "guard: ask {id}: the connect waits for the answer here, as on a slow network \
                 (its own timeouts apply), or from another terminal with `sudo guard approve \
                 {id} {answers}` or `sudo guard deny {id}` (it expires in {expires_in}s)"
            );
        } else {
            eprintln!(
                "guard: ask {id}: answer from another terminal with `sudo guard approve {id} \
                 {answers}` or `sudo guard deny {id}`, then retry (it expires in {expires_in}s)"
            );
        }
    }
    if let Some(asks) = asks {
        for said in asks.serve(session) {
            eprintln!("{said}");
        }
        for expired in asks.expire(session) {
            eprintln!(
                "guard: ask {} expired unanswered: denied ({})",
                expired.id, expired.message
            );
        }
    }
    for note in session.take_dns_notes() {
        match note {
            DnsNote::Resolver(ResolverNote::Refused(refused)) => {
                let message = refused_name_message(&refused);
                if json {
                    let mut value = serde_json::to_value(&refused).unwrap_or_default();
                    value["kind"] = "dns".into();
                    value["decision"] = "forbidden".into();
                    value["message"] = message.into();
                    eprintln!("{value}");
                } else {
                    eprintln!("{message}");
                }
            }
            // Every name answered is a record with --json-events, a note with --verbose.
            DnsNote::Resolver(ResolverNote::Answered(answered)) if json || verbose => {
                let message = answered_name_message(&answered);
                if json {
                    let value = serde_json::json!({
                        "kind": "dns",
                        "name": answered.name,
                        "query_type": answered.query_type,
                        "answered": answered.source.as_str(),
                        "addresses": answered.addrs,
                        "process": answered.process,
                        "message": message,
                    });
                    eprintln!("{value}");
                } else {
                    eprintln!("{message}");
                }
            }
            DnsNote::Resolver(ResolverNote::Answered(_)) => {}
            DnsNote::Resolver(ResolverNote::UpstreamFailed { name, error }) if verbose => {
                eprintln!("guard: note: DNS lookup of {name} failed: {error}");
            }
            DnsNote::Resolver(ResolverNote::UpstreamFailed { .. }) => {}
            DnsNote::ApplyFailed(why) => eprintln!(
                "guard: warning: answered addresses could not be put in force ({why}); those \
                 lookups got SERVFAIL"
            ),
            DnsNote::NoResolver(why) => eprintln!(
                "guard: warning: guard's resolver is not in the path of the command's DNS ({why}); \
                 its lookups are decided by address like any other traffic"
            ),
        }
    }
    held
}

/// `guard: note: DNS lookup of api.example.com (A) by curl (pid 42) forwarded: 203.0.113.7`.
fn answered_name_message(answered: &crate::resolve::Answered) -> String {
    let how = match answered.source {
        crate::resolve::AnswerSource::Forwarded => "forwarded",
        crate::resolve::AnswerSource::Cached => "answered from guard's cache",
        crate::resolve::AnswerSource::StandIn => "kept on the host, answered with a stand-in",
    };
    let addresses = answered
        .addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "guard: note: DNS lookup of {} ({}){} {how}: {}",
        answered.name,
        answered.query_type,
        asked_by(answered.process.as_ref()),
        if addresses.is_empty() {
            "no addresses"
        } else {
            &addresses
        }
    )
}

/// ` by curl (pid 42)`, ` by uid 1000`, or nothing: who sent a query.
fn asked_by(process: Option<&crate::resolve::peer::QueryProcess>) -> String {
    match process {
        Some(process) => match process.pid {
            Some(pid) => format!(" by {} (pid {pid})", process.comm),
            None => format!(" by uid {}", process.uid),
        },
        None => String::new(),
    }
}

/// `guard: refused DNS lookup of evil.test (A): policy forbids network_rule(...) (t.rules:2),
/// answered REFUSED`.
pub fn refused_name_message(refused: &crate::resolve::RefusedName) -> String {
    let location = match (&refused.file, refused.line) {
        (Some(file), Some(line)) => format!(
            " ({}:{line})",
            std::path::Path::new(file)
                .file_name()
                .map_or(file.clone(), |n| n.to_string_lossy().into_owned())
        ),
        _ => String::new(),
    };
    let by = asked_by(refused.process.as_ref());
    format!(
        "guard: refused DNS lookup of {} ({}){by}: policy forbids {}{location}; answered {}",
        refused.name, refused.query_type, refused.rule, refused.answer
    )
}
