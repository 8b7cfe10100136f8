//! `guard daemon`, the host service, and `guard release`, its break-glass counterpart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli::output::usage_error;
use crate::daemon::config::{Config, DEFAULT_CONFIG};

#[derive(Args, Debug)]
#[command(
    after_help = "The daemon loads the policy (the --rules paths, then the amendments file \
<state-dir>/rules/default.rules, then the --overlay paths), holds it in the kernel for its scopes \
(the host with `scope.host = true`, the cgroups in `scope.cgroups`, and every `guard run` it \
starts), and answers on the control socket. Flags override the config file; every key of the \
file and its default is in packaging/guard.toml. With `[metrics] listen = \"IP:PORT\"` (or
--metrics) it serves Prometheus metrics at http://IP:PORT/metrics (docs/daemon.md, \"Metrics\").

Signals: SIGHUP re-reads the policy (a policy that fails to load keeps the old one); SIGTERM
stops the daemon within a second. The programs stay pinned in the kernel after it stops, so
enforcement goes on until the next daemon takes over; `guard release` detaches them.

Examples:
  sudo guard daemon                                   # /etc/guard/guard.toml, or the defaults
  sudo guard daemon --rules /etc/guard/rules --socket /run/guard/guard.sock
  sudo guard daemon --metrics 127.0.0.1:9477          # then: curl -s 127.0.0.1:9477/metrics
  sudo systemctl enable --now guard                   # packaging/guard.service"
)]
pub struct DaemonArgs {
    /// The config file (TOML). Default: /etc/guard/guard.toml if it exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A rules file or folder; repeat for several (replaces the config's `rules`).
    #[arg(long = "rules", value_name = "PATH")]
    rules: Vec<PathBuf>,
    /// Rules merged on top (replaces the config's `overlays`).
    #[arg(long = "overlay", value_name = "PATH")]
    overlays: Vec<PathBuf>,
    /// Where the amendments file lives (default /var/lib/guard).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The control socket (default /run/guard/guard.sock).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Where the programs are pinned, on a bpffs (default /sys/fs/bpf/guard).
    #[arg(long, value_name = "DIR")]
    pin_dir: Option<PathBuf>,
    /// The audit log (default /var/log/guard/audit.jsonl).
    #[arg(long, value_name = "FILE")]
    audit_log: Option<PathBuf>,
    /// Resolve host names with this DNS server (IP:PORT) instead of the system's.
    #[arg(long, value_name = "IP:PORT")]
    nameserver: Option<SocketAddr>,
    /// Serve Prometheus metrics at http://IP:PORT/metrics (replaces the config's
    /// `[metrics] listen`; no authentication: use loopback or a management interface).
    #[arg(long, value_name = "IP:PORT")]
    metrics: Option<SocketAddr>,
}

/// The config file and the flags over it.
pub(in crate::cli) fn config_from(args: &DaemonArgs) -> anyhow::Result<Config> {
    let (path, required) = match &args.config {
        Some(path) => (path.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG), false),
    };
    let mut config = Config::load(&path, required)?;
    if !args.rules.is_empty() {
        config.rules = args.rules.clone();
    }
    if !args.overlays.is_empty() {
        config.overlays = args.overlays.clone();
    }
    if let Some(dir) = &args.state_dir {
        config.state_dir = dir.clone();
    }
    if let Some(socket) = &args.socket {
        config.socket = socket.clone();
    }
    if let Some(dir) = &args.pin_dir {
        config.pin_dir = dir.clone();
    }
    if let Some(log) = &args.audit_log {
        config.audit.path = log.clone();
    }
    if args.nameserver.is_some() {
        config.nameserver = args.nameserver;
    }
    if args.metrics.is_some() {
        config.metrics.listen = args.metrics;
    }
    config.validate()?;
    Ok(config)
}

pub fn daemon(args: &DaemonArgs) -> ExitCode {
    let config = match config_from(args) {
        Ok(config) => config,
        Err(err) => return usage_error(&format!("{err:#}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return usage_error(&format!("starting the runtime: {err}")),
    };
    match runtime.block_on(crate::daemon::server::serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("guard daemon: cannot start: {err:#}");
            ExitCode::from(1)
        }
    }
}

#[derive(Args, Debug)]
#[command(
    after_help = "Break glass: with the daemon stopped (`systemctl stop guard`), \
`guard release` detaches guard's programs from the kernel, so nothing is enforced until a daemon \
starts again. By hand, the same is `rm -r /sys/fs/bpf/guard` (the pins are the only thing that \
keeps the programs attached). Without --pin-dir it also removes the program sets stand-alone runs \
keep loaded (/sys/fs/bpf/guard-cache) that no run uses."
)]
pub struct ReleaseArgs {
    /// The config file whose `pin_dir` to release. Default: /etc/guard/guard.toml if it exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The pin folder (overrides the config).
    #[arg(long, value_name = "DIR")]
    pin_dir: Option<PathBuf>,
    /// The socket of a daemon to ask whether it holds these pins (default: the config's).
    #[arg(long, value_name = "PATH", env = "GUARD_SOCKET")]
    socket: Option<PathBuf>,
    /// Release even while a daemon answers and says the pins are its own (it keeps enforcing
    /// through its own file descriptors until it stops, and its next update pins again).
    #[arg(long)]
    force: bool,
}

pub fn release(args: &ReleaseArgs) -> ExitCode {
    let (path, required) = match &args.config {
        Some(path) => (path.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG), false),
    };
    let config = match Config::load(&path, required) {
        Ok(config) => config,
        Err(err) => return usage_error(&format!("{err:#}")),
    };
    let dir = args.pin_dir.clone().unwrap_or(config.pin_dir);
    let socket = args.socket.clone().unwrap_or(config.socket);
    let daemon_answers = crate::daemon::client::Client::connect(&socket).is_ok();
    if let Some(pinned) = live_daemon_pins(&socket)
        && pinned.starts_with(&dir)
    {
        if !args.force {
            eprintln!(
                "guard: refusing to release {}: the daemon answering at {} holds these pins \
                 ({}); stop it first (`systemctl stop guard`), or pass --force to detach them \
                 anyway",
                dir.display(),
                socket.display(),
                pinned.display()
            );
            return ExitCode::from(1);
        }
        eprintln!(
            "guard: note: a daemon answers at {}; it keeps enforcing through its own file \
             descriptors until it stops",
            socket.display()
        );
    }
    // The scopes of stand-alone runs that died (kill -9) go first: their processes, then the
    // pins that still enforced on them.
    for abandoned in crate::kernel::scope::remove_abandoned_scopes() {
        println!("{abandoned}");
    }
    // The program sets stand-alone runs kept loaded (only the ones no run uses), unless one
    // daemon's pin folder was named: they are no daemon's, and the next run would load again.
    if args.pin_dir.is_none() {
        match crate::kernel::program_cache::release_unused(&Default::default()) {
            Ok(0) => {}
            Ok(n) => println!(
                "released {n} kept program set(s) under {}",
                crate::kernel::program_cache::CACHE_ROOT
            ),
            Err(err) => eprintln!("guard: note: the kept program sets: {err:#}"),
        }
    }
    match crate::kernel::pins::release(&dir) {
        Ok(n) => {
            println!("released {n} pinned links under {}", dir.display());
            // The configured daemon's empty run scopes go too, unless it is running (it needs
            // their parent) or another pin folder was named.
            if !daemon_answers && args.pin_dir.is_none() {
                remove_empty_run_scopes(&config.run_cgroup);
            }
            ExitCode::SUCCESS
        }
        Err(err) => usage_error(&format!("{err:#}")),
    }
}

/// The pin generation a daemon answering at `socket` says it holds (`None`: no daemon answers,
/// or it does not say).
fn live_daemon_pins(socket: &std::path::Path) -> Option<PathBuf> {
    let mut client = crate::daemon::client::Client::connect(socket).ok()?;
    let status: crate::daemon::wire::responses::StatusResponse = client
        .call(crate::daemon::wire::protocol::Request::Status)
        .ok()?;
    Some(PathBuf::from(status.pinned))
}

/// The run scopes' cgroups that no process uses any more, and their parent if it is empty.
fn remove_empty_run_scopes(run_cgroup: &str) {
    let Ok(root) = crate::kernel::scope::cgroup2_root() else {
        return;
    };
    let parent = root.join(run_cgroup);
    if let Ok(entries) = std::fs::read_dir(&parent) {
        for entry in entries.filter_map(Result::ok) {
            if !crate::daemon::scopes::populated(&entry.path()) {
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(&parent);
}
