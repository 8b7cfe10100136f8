//! `guard run --socket S -- CMD`: the command runs in a fresh scope of the running daemon. The
//! daemon moves this process into the scope (it has the peer's pid from SO_PEERCRED), then this
//! process starts CMD, which inherits the scope, and prints the daemon's messages about it.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::sync::mpsc;
use std::time::Duration;

use anstream::eprintln;
use serde_json::Value;

use super::control::client_error;
use crate::daemon::client::Client;
use crate::daemon::protocol::{FLUSH_LINE, Request};

/// How long to wait for the daemon to pass on the last events after CMD ended.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

pub fn run(socket: &Path, argv: &[String], json: bool) -> ExitCode {
    let mut client = match Client::connect(socket) {
        Ok(client) => client,
        Err(err) => {
            client_error(&err);
            return ExitCode::from(125);
        }
    };
    if let Err(err) = client.request(Request::Run {
        argv: argv.to_vec(),
    }) {
        eprintln!("guard: cannot run under the daemon: {err}");
        return ExitCode::from(125);
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
                            "guard: ask {id}: {} (approve: guard approve {id} [--once|--session|--always])",
                            event["message"].as_str().unwrap_or("")
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
    super::output::exit_code_of(status)
}
