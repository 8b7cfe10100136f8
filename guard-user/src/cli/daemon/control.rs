//! The control-socket clients: `guard prompts`, `approve`, `deny`, `reload`, `status`.
//! Each talks to the running daemon (`--socket`, default /run/guard/guard.sock or
//! `$GUARD_SOCKET`); the daemon decides whether the caller may (SO_PEERCRED + its
//! authorization policy).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anstream::{eprintln, println};
use anstyle::{AnsiColor, Style};
use clap::Args;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::asks::Ask;
use crate::cli::output::{dim, print_json};
use crate::daemon::client::{Client, ClientError};
use crate::daemon::config::DEFAULT_SOCKET;
use crate::daemon::wire::protocol::{ApprovalMode, Request};
use crate::daemon::wire::responses::{
    AmendmentApplied, ApproveResponse, DenyResponse, ReloadResponse, StatusResponse, to_json,
};
use crate::kernel::layers::LayerState;

#[derive(Args, Debug, Clone)]
pub struct SocketArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", env = "GUARD_SOCKET", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

/// Where asks are answered: `--socket`, else the daemon's socket and each stand-alone
/// `guard run`'s (`guard approve ID` finds the one that holds ask ID).
#[derive(Args, Debug, Clone)]
pub struct AskSocketArgs {
    /// The control socket of the daemon or of a stand-alone `guard run` (default: the daemon's,
    /// /run/guard/guard.sock, and every run's in /run/guard/runs/).
    #[arg(long, value_name = "PATH", env = "GUARD_SOCKET")]
    pub socket: Option<PathBuf>,
}

impl AskSocketArgs {
    /// The sockets to ask: the one named, else every one that exists (the daemon's first), else
    /// the daemon's (to say that no daemon runs).
    fn candidates(&self) -> Vec<PathBuf> {
        if let Some(socket) = &self.socket {
            return vec![socket.clone()];
        }
        let mut found: Vec<PathBuf> = Path::new(DEFAULT_SOCKET)
            .exists()
            .then(|| PathBuf::from(DEFAULT_SOCKET))
            .into_iter()
            .collect();
        let mut runs: Vec<PathBuf> = std::fs::read_dir(crate::cli::run::asks::RUN_SOCKETS)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == "sock"))
            .collect();
        runs.sort();
        found.extend(runs);
        if found.is_empty() {
            found.push(PathBuf::from(DEFAULT_SOCKET));
        }
        found
    }

    /// The socket that holds pending ask `id`.
    fn holding(&self, id: u64) -> Result<PathBuf, ExitCode> {
        let candidates = self.candidates();
        if let [only] = candidates.as_slice() {
            return Ok(only.clone());
        }
        let holding: Vec<PathBuf> = candidates
            .iter()
            .filter(|socket| pending_asks(socket).is_ok_and(|asks| asks.iter().any(|a| a.id == id)))
            .cloned()
            .collect();
        match holding.as_slice() {
            [one] => Ok(one.clone()),
            [] => {
                eprintln!(
                    "{}error:{} no pending ask {id} in the daemon or the stand-alone runs \
                     (`guard prompts` lists them)",
                    red().render(),
                    red().render_reset()
                );
                Err(ExitCode::from(1))
            }
            many => Err(crate::cli::output::usage_error(&format!(
                "ask {id} is pending in more than one place: pass --socket with one of {}",
                many.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

fn red() -> Style {
    Style::new().fg_color(Some(AnsiColor::Red.into())).bold()
}

/// The pending asks at `socket`.
fn pending_asks(socket: &Path) -> Result<Vec<Ask>, ClientError> {
    Client::connect(socket).and_then(|mut client| client.call(Request::Prompts))
}

/// Prints a client error and gives its exit status (3 not authorized, 4 no daemon, 1 other).
pub fn client_error(err: &ClientError) -> ExitCode {
    let kind = match err.exit_code() {
        3 => "unauthorized",
        4 => "unreachable",
        _ => "refused",
    };
    crate::cli::output::error(kind, &err.to_string(), err.exit_code())
}

/// One request, its result or the error.
pub fn call<R: DeserializeOwned>(socket: &Path, request: Request) -> Result<R, ExitCode> {
    Client::connect(socket)
        .and_then(|mut client| client.call(request))
        .map_err(|err| client_error(&err))
}

/// Sends an answer (`approve` or `deny`) and gives the amendment line it wrote, if any.
pub fn answer(socket: &Path, request: Request) -> Result<Option<AmendmentApplied>, ExitCode> {
    match request {
        Request::Approve { .. } => call::<ApproveResponse>(socket, request).map(|r| r.line),
        Request::Deny { .. } => call::<DenyResponse>(socket, request).map(|r| r.line),
        other => unreachable!("an answer is approve or deny, not {other:?}"),
    }
}

#[derive(Args, Debug)]
#[command(
    after_help = "Without --watch, lists the pending asks. With --watch, shows each ask as \
it arrives and takes one key:
  o  approve once     (the same request succeeds when retried within asks.once_secs)
  s  approve for this session (until the daemon stops or the run it came from ends)
  a  approve always   (appends the amendment line to <state-dir>/rules/default.rules)
  d  deny             D  deny always (appends a deny rule)
  n  leave it for later, q  quit
It works over ssh (any terminal); without a terminal it reads one key per line from stdin."
)]
pub struct PromptsArgs {
    #[command(flatten)]
    socket: AskSocketArgs,
    /// An array of asks (objects with at least `id`, `message`, `kind`, `count`, `state`).
    #[arg(long)]
    json: bool,
    /// Answer asks interactively as they arrive.
    #[arg(long)]
    watch: bool,
}

pub fn prompts(args: &PromptsArgs) -> ExitCode {
    if args.watch {
        let socket = args
            .socket
            .socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
        return super::watch::watch(&socket);
    }
    let candidates = args.socket.candidates();
    let mut list = Vec::new();
    let mut first_error = None;
    let mut reached = 0;
    for socket in &candidates {
        match pending_asks(socket) {
            Ok(asks) => {
                reached += 1;
                list.extend(asks.into_iter().map(|ask| (ask, socket.clone())));
            }
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    if let (0, Some(err)) = (reached, &first_error) {
        return client_error(err);
    }
    if args.json {
        // Each ask as the daemon gave it, with the socket that holds it.
        let asks = list
            .iter()
            .map(|(ask, socket)| {
                let mut value = serde_json::to_value(ask).expect("an ask always serialises");
                value["socket"] = socket.display().to_string().into();
                value
            })
            .collect();
        print_json(&Value::Array(asks));
        return ExitCode::SUCCESS;
    }
    if list.is_empty() {
        println!("no pending asks");
        return ExitCode::SUCCESS;
    }
    for (ask, socket) in &list {
        if reached > 1 {
            println!(
                "{}",
                ask_line(ask) + &format!("  [--socket {}]", socket.display())
            );
        } else {
            println!("{}", ask_line(ask));
        }
    }
    println!(
        "{}answer with `guard approve ID [--once|--session|--always]` or `guard deny ID [--always]`{}",
        dim().render(),
        dim().render_reset()
    );
    ExitCode::SUCCESS
}

/// `  3  ×2  expires in 280s  Network access to "api.github.com" requires approval: ...`
pub fn ask_line(ask: &Ask) -> String {
    let yellow = Style::new().fg_color(Some(AnsiColor::Yellow.into())).bold();
    let (id, count) = (ask.id, ask.count);
    let expires = ask
        .expires_in
        .map(|s| format!("expires in {s}s"))
        .unwrap_or_default();
    let mut who = format!("pid {} {}", ask.record.pid, ask.record.executable);
    // A run's ask: whose run it is (they may answer it too).
    if let Some(owner) = &ask.owner {
        who.push_str(&format!(", {owner}'s run"));
    }
    format!(
        "{yellow}{id:>4}{yellow:#}  ×{count:<3} {:<16} {}  {}({who}){}",
        expires,
        ask.message,
        dim().render(),
        dim().render_reset()
    )
}

#[derive(Args, Debug)]
pub struct ApproveArgs {
    /// The ask's id (`guard prompts`).
    id: u64,
    /// The same request succeeds when retried within asks.once_secs (the default).
    #[arg(long, conflicts_with_all = ["session", "always"])]
    once: bool,
    /// Until the daemon stops or the run the ask came from ends.
    #[arg(long, conflicts_with = "always")]
    session: bool,
    /// Append the amendment line to the amendments file (a rule from then on).
    #[arg(long)]
    always: bool,
    /// With --always, for an exec ask: allow this prefix (shell words, e.g. "cargo test")
    /// instead of the exact argv. Refused when it is a banned prefix (`python3 -c`, `bash -lc`,
    /// `git`, ...) or when allowing it would not allow what was asked.
    #[arg(long, value_name = "TOKENS", requires = "always")]
    prefix: Option<String>,
    #[command(flatten)]
    socket: AskSocketArgs,
    /// Print the daemon's answer as JSON.
    #[arg(long)]
    json: bool,
}

pub fn approve(args: &ApproveArgs) -> ExitCode {
    let mode = if args.always {
        ApprovalMode::Always
    } else if args.session {
        ApprovalMode::Session
    } else {
        ApprovalMode::Once
    };
    let prefix = match args.prefix.as_deref().map(shlex::split) {
        Some(None) => {
            return crate::cli::output::usage_error(
                "--prefix is not shell words (an unclosed quote?)",
            );
        }
        Some(Some(tokens)) => Some(tokens),
        None => None,
    };
    let socket = match args.socket.holding(args.id) {
        Ok(socket) => socket,
        Err(code) => return code,
    };
    let result = call::<ApproveResponse>(
        &socket,
        Request::Approve {
            id: args.id,
            mode,
            prefix,
        },
    );
    answered(
        result,
        |r| r.line.as_ref(),
        args.json,
        &format!("approved ask {} ({})", args.id, mode.as_str()),
    )
}

#[derive(Args, Debug)]
pub struct DenyArgs {
    /// The ask's id (`guard prompts`).
    id: u64,
    /// Also append a deny rule for it to the amendments file.
    #[arg(long)]
    always: bool,
    #[command(flatten)]
    socket: AskSocketArgs,
    /// Print the daemon's answer as JSON.
    #[arg(long)]
    json: bool,
}

pub fn deny(args: &DenyArgs) -> ExitCode {
    let socket = match args.socket.holding(args.id) {
        Ok(socket) => socket,
        Err(code) => return code,
    };
    let result = call::<DenyResponse>(
        &socket,
        Request::Deny {
            id: args.id,
            always: args.always,
        },
    );
    answered(
        result,
        |r| r.line.as_ref(),
        args.json,
        &format!("denied ask {}", args.id),
    )
}

/// Prints an answer: JSON, or the sentence and the line it wrote (`line` finds it).
fn answered<R: Serialize>(
    result: Result<R, ExitCode>,
    line: fn(&R) -> Option<&AmendmentApplied>,
    json: bool,
    sentence: &str,
) -> ExitCode {
    let response = match result {
        Ok(response) => response,
        Err(code) => return code,
    };
    if json {
        print_json(&to_json(&response));
    } else {
        println!("{sentence}");
        if let Some(appended) = line(&response) {
            println!("appended to {}: {}", appended.file, appended.line);
            if let Some(error) = &appended.error {
                eprintln!("guard: warning: {error}");
            }
        }
    }
    ExitCode::SUCCESS
}

#[derive(Args, Debug)]
pub struct ReloadArgs {
    #[command(flatten)]
    socket: SocketArgs,
    #[arg(long)]
    json: bool,
}

pub fn reload(args: &ReloadArgs) -> ExitCode {
    match call::<ReloadResponse>(&args.socket.socket, Request::Reload) {
        Ok(reloaded) if args.json => {
            print_json(&to_json(&reloaded));
            ExitCode::SUCCESS
        }
        Ok(reloaded) => {
            println!(
                "reloaded: {} rules from {} files",
                reloaded.rules,
                reloaded.files.len()
            );
            let gaps = &reloaded.not_enforced;
            if !gaps.is_empty() {
                eprintln!(
                    "guard: note: {} rules are not enforced by the kernel on this backend:",
                    gaps.len()
                );
                let mut reasons: Vec<&str> = gaps.iter().map(|g| g.reason.as_str()).collect();
                reasons.dedup();
                for reason in reasons {
                    for gap in gaps.iter().filter(|g| g.reason == reason) {
                        eprintln!("  {}", gap.rule);
                    }
                    eprintln!("  ({reason})");
                }
            }
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `guard status --check`: one line a layer that is missing or degraded, and exit 1 if any.
fn check_layers(status: &StatusResponse) -> ExitCode {
    if status.layers.is_empty() {
        eprintln!(
            "guard: the daemon (pid {}, {}) reports no layers: it is older than this guard; \
             restart it to check its layers",
            status.pid, status.version
        );
        return ExitCode::from(1);
    }
    let failing: Vec<_> = status.layers.iter().filter(|l| l.is_failing()).collect();
    for layer in &failing {
        eprintln!("guard: layer {layer}");
    }
    if failing.is_empty() {
        let up: Vec<&str> = status
            .layers
            .iter()
            .filter(|l| l.state == LayerState::Up)
            .map(|l| l.layer.as_str())
            .collect();
        println!("guard: every layer holds ({} up)", up.join(", "));
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    socket: SocketArgs,
    /// The whole status as one JSON object.
    #[arg(long)]
    json: bool,
    /// Exit 1, naming each, when a layer of enforcement (exec, network, unix, devices, dns,
    /// hold, files, audit, export) is missing or degraded; 0 when every layer is up or off.
    /// For monitors and start-up scripts that must not go on unprotected.
    #[arg(long)]
    check: bool,
}

pub fn status(args: &StatusArgs) -> ExitCode {
    let status = match call::<StatusResponse>(&args.socket.socket, Request::Status) {
        Ok(status) => status,
        Err(code) => return code,
    };
    if args.check {
        return check_layers(&status);
    }
    if args.json {
        print_json(&to_json(&status));
        return ExitCode::SUCCESS;
    }
    let bold = Style::new().bold();
    println!(
        "{bold}guard daemon{bold:#} pid {} · backend {} · up {}s{}",
        status.pid,
        status.backend,
        status.uptime_secs,
        if status.audit_only {
            " · audit-only"
        } else {
            ""
        }
    );
    println!("{bold}scopes{bold:#}");
    for scope in &status.scopes {
        let lost = if scope.events_lost > 0 {
            format!(", {} lost", scope.events_lost)
        } else {
            String::new()
        };
        let overlay = if scope.overlay.is_empty() {
            String::new()
        } else {
            format!(", tightened by {}", scope.overlay.join(", "))
        };
        let names = if scope.names_answered > 0 {
            format!(", {} names answered", scope.names_answered)
        } else {
            String::new()
        };
        println!(
            "  {:<8} {}  ({} events{lost}, {} asks pending{names}{overlay})",
            scope.kind.as_str(),
            scope.cgroup,
            scope.events_submitted,
            scope.asks_pending
        );
    }
    println!("{bold}rules{bold:#}");
    for file in &status.rules {
        println!("  {:>6}  {}", file.rules, file.file);
    }
    // With guard's resolver in the path the policy's names are not resolved by guard: say so,
    // or the names missing below read as names that failed.
    if let Some(resolver) = &status.resolver {
        println!(
            "{bold}names{bold:#} put in force as the scopes look them up (guard's resolver on \
             port {}: {} names, {} addresses answered)",
            resolver.port, resolver.names, resolver.addresses
        );
    }
    if !status.addresses.is_empty() {
        println!("{bold}resolved{bold:#}");
        for host in &status.addresses {
            println!(
                "  {} → {}",
                host.host,
                if host.addresses.is_empty() {
                    "(none)".to_string()
                } else {
                    host.addresses.join(", ")
                }
            );
        }
    }
    println!(
        "{bold}asks{bold:#} {} pending · {bold}events lost{bold:#} {}",
        status.asks_pending, status.events_lost
    );
    let counters: Vec<String> = status
        .counters
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!("{bold}counters{bold:#} {}", counters.join(" "));
    let any_failed = status.failed_open.values().any(|n| *n > 0);
    let warn = if any_failed {
        Style::new().fg_color(Some(AnsiColor::Yellow.into())).bold()
    } else {
        bold
    };
    println!(
        "{warn}failed open{warn:#} {}{}",
        status
            .failed_open
            .iter()
            .map(|(hook, n)| format!("{hook}={n}"))
            .collect::<Vec<_>>()
            .join(" "),
        if any_failed {
            " (calls let through undecided: kernel memory the programs could not read)"
        } else {
            ""
        }
    );
    println!("{bold}layers{bold:#}");
    for layer in &status.layers {
        let style = match layer.state {
            LayerState::Up => Style::new().fg_color(Some(AnsiColor::Green.into())),
            LayerState::Off => Style::new().dimmed(),
            LayerState::Degraded | LayerState::Missing => {
                Style::new().fg_color(Some(AnsiColor::Yellow.into())).bold()
            }
        };
        println!(
            "  {:<8} {style}{:<8}{style:#} {}",
            layer.layer.as_str(),
            layer.state.as_str(),
            layer.detail
        );
    }
    let audit = &status.audit;
    println!(
        "{bold}audit log{bold:#} {} · {} written · lost: {} (writer behind), {} (write errors), \
         {} (slow followers){}{}",
        audit.path,
        audit.written,
        audit.writer_lost,
        audit.write_errors,
        audit.follower_missed,
        match &audit.syslog {
            Some(s) => format!(
                " · syslog {}: {} sent, {} failed, {} lost",
                s.target, s.sent, s.failed, s.lost
            ),
            None => String::new(),
        },
        match &audit.otlp {
            Some(o) => format!(
                " · OTLP {}: {} sent, {} failed, {} lost, {} retries",
                o.url, o.sent, o.failed, o.lost, o.retries
            ),
            None => String::new(),
        }
    );
    if let Some(error) = &audit.last_error {
        eprintln!("guard: the audit log: {error}");
    }
    if let Some(error) = &status.last_reload_error {
        eprintln!("guard: the last reload failed: {error}");
    }
    if let Some(repair) = &status.last_link_repair {
        eprintln!(
            "guard: {} pinned link(s) were found detached or unpinned and attached again; the \
             last: {repair} (see `guard audit --type link_repaired`)",
            status.links_repaired
        );
    }
    ExitCode::SUCCESS
}
