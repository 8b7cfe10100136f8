//! `guard run --socket S -- CMD`: the command runs in a fresh scope of the running daemon. The
//! daemon moves this process into the scope (it has the peer's pid from SO_PEERCRED), then this
//! process starts CMD, which inherits the scope, and prints the daemon's messages about it.
//! CMD's writes are confined with Landlock by this process (see `confine`), from the write
//! rules the daemon answers with: its protected paths and its rule sets' `write(...)` denials.
//! When the daemon would ask about some exec or destination, CMD's execs and connects are held
//! (see `crate::hold`): this process installs the seccomp filter on CMD and hands its listener
//! to the daemon (`hold`), which keeps each prompted call waiting until its ask is answered.

use std::io::BufRead;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use anstream::eprintln;

use crate::cli::daemon::control::client_error;
use crate::confine::sandbox::SandboxPlan;
use crate::confine::{CommandConfinement, WritePlan};
use crate::daemon::client::{Client, ClientError};
use crate::daemon::wire::protocol::{FLUSH_LINE, OverlayFile, Request};
use crate::daemon::wire::responses::{
    Blocked, HoldOffer, HoldResponse, RunEvent, RunResponse, StatusResponse, StreamLine,
};
use crate::hold::{ChildEnd, HeldSyscalls, filter};

/// How long to wait for the daemon to pass on the last events after CMD ended.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// The overlay's files (`--overlay`: a file, or a folder of `*.rules`), read here: the daemon
/// reads no file for its caller.
fn read_overlay(paths: &[PathBuf]) -> Result<Vec<OverlayFile>, String> {
    let files = crate::policy::load::read_rules_texts(paths)?;
    Ok(files
        .into_iter()
        .map(|(name, text)| OverlayFile { name, text })
        .collect())
}

/// Runs `args.command` in a fresh scope of the daemon at `socket` (the flags that are the
/// daemon's to choose were refused before).
pub fn run(socket: &Path, args: &super::command::RunArgs) -> ExitCode {
    let argv = &args.command;
    let (json, verbose) = (args.json_events, args.verbose);
    let (keep_capabilities, preserve_fds) = (args.keep_capabilities, args.preserve_fds);
    let hold = !args.no_hold;
    let overlay = match read_overlay(&args.rules.overlays) {
        Ok(overlay) => overlay,
        Err(err) => {
            eprintln!("guard: {err}");
            return ExitCode::from(125);
        }
    };
    // The daemon's layers, before anything runs: one this run requires that does not hold
    // there is a refusal to run.
    if !args.require.is_empty() {
        let status =
            match crate::cli::daemon::control::call::<StatusResponse>(socket, Request::Status) {
                Ok(status) => status,
                Err(code) => return code,
            };
        if let Err(code) = super::command::refuse_unmet(&status.layers, &args.require) {
            return code;
        }
    }
    let mut client = match Client::connect(socket) {
        Ok(client) => client,
        Err(err) => {
            client_error(&err);
            return ExitCode::from(125);
        }
    };
    if let Err(err) = super::signals::catch() {
        eprintln!("guard: cannot catch signals to pass them on to the command: {err}");
        return ExitCode::from(125);
    }
    // The connection the hold's listener is handed over on, made now: the run request moves
    // this process into the scope, where the daemon's socket is a unix socket like any other
    // (refused under a policy that does not allow unmatched destinations).
    let hold_client = Client::connect(socket);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    let started: RunResponse = match client.call(Request::Run {
        argv: argv.to_vec(),
        workspace: Some(cwd.clone()),
        tmpdir: tmpdir.clone(),
        hold,
        overlay,
    }) {
        Ok(started) => started,
        Err(err) => {
            eprintln!("guard: cannot run under the daemon: {err}");
            return ExitCode::from(125);
        }
    };
    // The daemon's write rules (its protected paths and rule sets), held here with Landlock:
    // the plan needs this process's current folder and file system.
    let plan = WritePlan::new(&started.writes, &cwd);
    // The daemon's sandbox (its `[sandbox]`, or its rules' `sandbox(...)`), with this run's
    // current folder as the workspace.
    let sandbox = started.sandbox.clone().map(|setting| {
        let plan = SandboxPlan::new(setting.mode, &cwd, tmpdir.as_deref(), &setting.writable);
        (plan, setting.from)
    });
    let restricted = sandbox
        .as_ref()
        .map(|(plan, _)| plan)
        .filter(|s| s.is_restricted());
    let confinement =
        match CommandConfinement::prepare_sandboxed(&plan, restricted, keep_capabilities) {
            Ok(confinement) => confinement,
            Err(err) => {
                eprintln!("guard: cannot confine the command's writes: {err:#}");
                return ExitCode::from(125);
            }
        };
    super::command::report_confinement(&plan, &confinement, verbose);
    if let (Some(sandbox), Some((_, from))) = (restricted, &sandbox) {
        eprintln!(
            "guard: sandbox {} (the daemon's, {from}): {}",
            sandbox.mode.as_str(),
            sandbox.describe()
        );
    }
    let mut writer = match client.writer() {
        Ok(writer) => writer,
        Err(err) => {
            eprintln!("guard: {err}");
            return ExitCode::from(125);
        }
    };
    let (flushed_tx, flushed_rx) = mpsc::channel::<()>();
    let reader = client.into_reader();
    // This process's copy of the listener the daemon holds calls on: once the daemon is gone,
    // this process lets them through (the kernel decides them), so none waits for good.
    let handed_over: Arc<Mutex<Option<OwnedFd>>> = Arc::default();
    let takeover = handed_over.clone();
    std::thread::spawn(move || {
        for line in reader.lines() {
            let Ok(line) = line else { break };
            // A line of a newer daemon this client does not know is skipped.
            let Ok(StreamLine { event, .. }) = serde_json::from_str::<StreamLine<RunEvent>>(&line)
            else {
                continue;
            };
            match event {
                RunEvent::Blocked(_) if json => eprintln!("{line}"),
                RunEvent::Blocked(blocked) => print_blocked(&blocked),
                RunEvent::Repeated { count } => {
                    eprintln!("guard: ... and {count} more like it")
                }
                RunEvent::Message { .. } if json => eprintln!("{line}"),
                RunEvent::Message { line, on_stderr } => {
                    if !on_stderr {
                        eprintln!("{line}")
                    }
                }
                RunEvent::Flushed => {
                    let _ = flushed_tx.send(());
                }
            }
        }
        eprintln!(
            "guard: the daemon closed the connection; enforcement goes on (the programs are pinned), \
             only its messages stop"
        );
        let listener = takeover.lock().ok().and_then(|mut slot| slot.take());
        if let Some(listener) = listener {
            crate::hold::pass_through(listener);
        }
    });
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    super::inherited_fds::pass_only_std_fds(&mut command, preserve_fds);
    let mut steps = confinement.steps();
    let holds = held_syscalls(started.holds).filter(|_| hold);
    let child_socket = match holds.map(|held| hand_over_hold(hold_client, held, handed_over)) {
        Some(Ok((end, socket))) => {
            steps.hold = Some(end);
            Some(socket)
        }
        Some(Err(err)) => {
            eprintln!(
                "guard: warning: prompted execs and connects cannot wait for an answer ({err}); \
                 they are refused at once"
            );
            None
        }
        None => None,
    };
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure makes only the raw syscalls of `PreExecSteps::apply`. The daemon
        // has already moved this process into the scope, so there is no cgroup to join.
        unsafe { command.pre_exec(move || steps.apply()) };
    }
    let spawned = command.spawn();
    // The command started (or failed to): a child that never sent its listener ends the
    // hand-over.
    drop(child_socket);
    let status = match spawned.and_then(wait_passing_signals_on) {
        Ok(status) => status,
        Err(err) => {
            eprintln!("guard: cannot run `{}`: {err}", argv[0]);
            return ExitCode::from(127);
        }
    };
    // The kernel recorded a refusal before the command died; ask the daemon to pass on
    // everything so far before this process exits.
    use std::io::Write;
    if writer
        .write_all(format!("{FLUSH_LINE}\n").as_bytes())
        .is_ok()
    {
        let _ = flushed_rx.recv_timeout(FLUSH_WAIT);
    }
    drop(confinement);
    crate::cli::output::exit_code_of(status)
}

/// Waits for the command, passing on the signals that would end this process. The scope is
/// the daemon's and stays enforced whatever happens here; a command that outlives its grace
/// (or a second signal) is killed, and what it started is left to the daemon's scope.
fn wait_passing_signals_on(mut child: std::process::Child) -> std::io::Result<ExitStatus> {
    let mut signals = super::signals::PassOn::default();
    let mut killed = false;
    // Readable once the command exits, so a wait ends then, not at the end of its 50 ms.
    let exit = crate::kernel::peer::PeerProcess::open(child.id() as libc::pid_t).ok();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if let Some(why) = signals.step(child.id()).ending()
            && !killed
        {
            eprintln!("guard: killing the command: {why}");
            child.kill()?;
            killed = true;
        }
        match &exit {
            Some(process) => {
                use std::os::fd::{AsFd, AsRawFd};
                let mut poll = libc::pollfd {
                    fd: process.as_fd().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd. A signal cuts it short (EINTR): looked at above.
                unsafe { libc::poll(&mut poll, 1, 50) };
            }
            None => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

/// A refusal of the run, for people: the blocked-request line, then how to answer its ask.
fn print_blocked(blocked: &Blocked) {
    eprintln!("{}", blocked.line);
    let Some(id) = blocked.ask else { return };
    let answers = blocked
        .answers
        .as_deref()
        .unwrap_or("[--once|--session|--always]");
    if blocked.held {
        eprintln!(
            "guard: ask {id}: the command waits for the answer: `guard approve {id} \
             {answers}` or `guard deny {id}` from another terminal, as you or an admin \
             (`--always` is an admin's: it changes every scope's policy; it expires in {}s)",
            blocked.expires_in
        );
    } else {
        eprintln!(
            "guard: ask {id}: {} (approve: guard approve {id} {answers})",
            blocked.message
        );
    }
}

/// The calls the daemon offers to hold (`holds` in its `run` answer), when this process can
/// install the filter: with CAP_SYS_ADMIN (root), so the command needs no no-new-privileges.
fn held_syscalls(offer: HoldOffer) -> Option<HeldSyscalls> {
    let held = HeldSyscalls {
        exec: offer.exec,
        connect: offer.network,
        messages: offer.messages,
    };
    // Without root the filter is installed with no-new-privileges (as Landlock is).
    held.any().then_some(held)
}

/// Prepares the hold: the filter for the command's `pre_exec`, and a thread that receives its
/// listener and hands it to the daemon (`hold`), keeping a copy in `handed_over`. Returns the
/// child's end of the socket pair, to close once the command has started. If the daemon does
/// not take the listener, the thread lets every call through (the kernel decides them).
fn hand_over_hold(
    client: Result<Client, ClientError>,
    held: HeldSyscalls,
    handed_over: Arc<Mutex<Option<OwnedFd>>>,
) -> std::io::Result<(ChildEnd, OwnedFd)> {
    let (guard_end, child_socket) = filter::socket_pair()?;
    let end = ChildEnd::new(&child_socket, held);
    std::thread::Builder::new()
        .name("guard-hold-handover".into())
        .spawn(move || {
            let Ok(Some(listener)) = guard_end.receive() else {
                return;
            };
            let request = Request::Hold {
                fd: listener.as_raw_fd(),
                first_exec: held.exec,
            };
            let adopted = client.map_err(|e| e.to_string()).and_then(|mut client| {
                client
                    .call::<HoldResponse>(request)
                    .map_err(|e| e.to_string())
            });
            match adopted {
                Ok(_) => {
                    if let Ok(mut slot) = handed_over.lock() {
                        *slot = Some(listener);
                    }
                }
                Err(err) => {
                    eprintln!(
                        "guard: warning: the daemon does not hold this run's prompted calls \
                         ({err}); they are refused at once"
                    );
                    crate::hold::pass_through(listener);
                }
            }
        })?;
    Ok((end, child_socket))
}
