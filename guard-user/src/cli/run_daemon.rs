//! `guard run --socket S -- CMD`: the command runs in a fresh scope of the running daemon. The
//! daemon moves this process into the scope (it has the peer's pid from SO_PEERCRED), then this
//! process starts CMD, which inherits the scope, and prints the daemon's messages about it.
//! CMD's writes are confined with Landlock by this process (see `confine`), from the write
//! rules the daemon answers with: its protected paths and its rule sets' `write(...)` denials.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::mpsc;
use std::time::Duration;

use anstream::eprintln;
use serde_json::Value;

use super::control::client_error;
use crate::confine::sandbox::SandboxPlan;
use crate::confine::{CommandConfinement, WritePlan, WriteRules};
use crate::daemon::client::Client;
use crate::daemon::protocol::{FLUSH_LINE, Request};
use crate::policy::sandbox::SandboxSetting;

/// How long to wait for the daemon to pass on the last events after CMD ended.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

pub fn run(
    socket: &Path,
    argv: &[String],
    json: bool,
    verbose: bool,
    keep_capabilities: bool,
    preserve_fds: u32,
) -> ExitCode {
    let mut client = match Client::connect(socket) {
        Ok(client) => client,
        Err(err) => {
            client_error(&err);
            return ExitCode::from(125);
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    let started = match client.request(Request::Run {
        argv: argv.to_vec(),
        workspace: Some(cwd.clone()),
        tmpdir: tmpdir.clone(),
    }) {
        Ok(started) => started,
        Err(err) => {
            eprintln!("guard: cannot run under the daemon: {err}");
            return ExitCode::from(125);
        }
    };
    // The daemon's write rules (its protected paths and rule sets), held here with Landlock:
    // the plan needs this process's current folder and file system.
    let rules = match serde_json::from_value::<WriteRules>(started["writes"].clone()) {
        Ok(rules) => rules,
        Err(_) => {
            eprintln!(
                "guard: note: the daemon did not say which write rules it has (an older \
                 daemon?): only guard's fixed protected paths and its socket are held"
            );
            WriteRules::fixed(&[socket.to_path_buf()])
        }
    };
    let plan = WritePlan::new(&rules, &cwd);
    // The daemon's sandbox (its `[sandbox]`, or its rules' `sandbox(...)`), with this run's
    // current folder as the workspace.
    let sandbox = serde_json::from_value::<Option<SandboxSetting>>(started["sandbox"].clone())
        .ok()
        .flatten()
        .map(|setting| {
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
    super::run::report_confinement(&plan, &confinement, verbose);
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
    std::thread::spawn(move || {
        for line in reader.lines() {
            let Ok(line) = line else { break };
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            match event["event"].as_str() {
                Some("blocked") if json => eprintln!("{line}"),
                Some("blocked") => {
                    eprintln!("{}", event["line"].as_str().unwrap_or(""));
                    if let Some(id) = event["ask"].as_u64() {
                        eprintln!(
                            "guard: ask {id}: {} (approve: guard approve {id} {})",
                            event["message"].as_str().unwrap_or(""),
                            event["answers"]
                                .as_str()
                                .unwrap_or("[--once|--session|--always]")
                        );
                    }
                }
                Some("repeated") => eprintln!(
                    "guard: ... and {} more like it",
                    event["count"].as_u64().unwrap_or(0)
                ),
                Some("flushed") => {
                    let _ = flushed_tx.send(());
                }
                _ => {}
            }
        }
        eprintln!(
            "guard: the daemon closed the connection; enforcement goes on (the programs are pinned), \
             only its messages stop"
        );
    });
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    super::inherited_fds::pass_only_std_fds(&mut command, preserve_fds);
    let steps = confinement.steps();
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure makes only the raw syscalls of `PreExecSteps::apply`. The daemon
        // has already moved this process into the scope, so there is no cgroup to join.
        unsafe { command.pre_exec(move || steps.apply()) };
    }
    let status = match command.status() {
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
    super::output::exit_code_of(status)
}
