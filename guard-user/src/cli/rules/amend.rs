//! The amendment verbs: `guard allow-prefix` and `guard allow-host | ask-host | deny-host`.
//!
//! With `--rules-file` they append to that file directly. Without it they go through the running
//! daemon, which appends to its amendments file under the lock and applies the rule at once.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use crate::cli::output::{print_json, say, usage_error};
use crate::daemon::wire::protocol::{Amendment, Request};
use crate::daemon::wire::responses::{AmendmentApplied, to_json};
use crate::policy::amend::{
    AmendOutcome, append_line, network_amendment_line, prefix_amendment_line,
    prefix_amendment_refusal,
};
use crate::policy::{Decision, NetworkProtocol};

#[derive(Args, Debug)]
pub struct AllowPrefixArgs {
    /// The rules file to append to (created, with its folder, if missing). Without it the line
    /// goes to the running daemon's amendments file and takes effect at once.
    #[arg(long, value_name = "FILE")]
    rules_file: Option<PathBuf>,
    /// The daemon's control socket (when no --rules-file is given).
    #[arg(long, value_name = "PATH", env = "GUARD_SOCKET", default_value = crate::daemon::config::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Print `{"line": ..., "outcome": "appended"|"already_present"}`.
    #[arg(long)]
    json: bool,
    /// The command prefix to allow (after `--`), e.g. `-- cargo test`.
    #[arg(last = true, value_name = "TOKENS")]
    tokens: Vec<String>,
}

#[derive(Args, Debug)]
pub struct HostArgs {
    /// The host name or IP literal (a port or trailing dot is dropped, case is folded).
    host: String,
    /// http, https (aliases https_connect, http-connect), socks5_tcp or socks5_udp.
    #[arg(long, value_name = "PROTOCOL")]
    protocol: String,
    /// Why; stored with the rule and shown with every match.
    #[arg(long, value_name = "TEXT")]
    justification: Option<String>,
    /// The rules file to append to (created, with its folder, if missing). Without it the line
    /// goes to the running daemon's amendments file and takes effect at once.
    #[arg(long, value_name = "FILE")]
    rules_file: Option<PathBuf>,
    /// The daemon's control socket (when no --rules-file is given).
    #[arg(long, value_name = "PATH", env = "GUARD_SOCKET", default_value = crate::daemon::config::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Print `{"line": ..., "outcome": "appended"|"already_present"}`.
    #[arg(long)]
    json: bool,
}

/// Sends the amendment to the daemon and reports what it wrote and applied.
fn through_daemon(socket: &Path, amendment: Amendment, json: bool) -> ExitCode {
    let appended: AmendmentApplied =
        match crate::cli::daemon::control::call(socket, Request::Amend { amendment }) {
            Ok(appended) => appended,
            Err(code) => return code,
        };
    if json {
        print_json(&to_json(&appended));
    } else {
        let (file, line) = (&appended.file, &appended.line);
        match appended.outcome {
            AmendOutcome::AlreadyPresent => {
                say(&format!("already in {file}, nothing written: {line}"))
            }
            AmendOutcome::Appended => say(&format!("appended to {file}: {line}")),
        }
        if appended.applied {
            say("applied: the daemon enforces it now");
        } else {
            eprintln!(
                "guard: warning: written but not applied: {}",
                appended.error.as_deref().unwrap_or("the reload failed")
            );
        }
    }
    ExitCode::SUCCESS
}

fn append_and_report(file: &Path, line: &str, json: bool) -> ExitCode {
    match append_line(file, line) {
        Ok(outcome) => {
            if json {
                print_json(
                    &json!({"file": file.display().to_string(), "line": line, "outcome": outcome}),
                );
            } else {
                match outcome {
                    AmendOutcome::Appended => {
                        say(&format!("appended to {}: {line}", file.display()))
                    }
                    AmendOutcome::AlreadyPresent => say(&format!(
                        "already in {}, nothing written: {line}",
                        file.display()
                    )),
                }
            }
            ExitCode::SUCCESS
        }
        Err(err) => usage_error(&err.to_string()),
    }
}

pub fn allow_prefix(args: &AllowPrefixArgs) -> ExitCode {
    let Some(file) = &args.rules_file else {
        return through_daemon(
            &args.socket,
            Amendment::Prefix {
                tokens: args.tokens.clone(),
            },
            args.json,
        );
    };
    // An allow that a stronger rule of the same file would outvote changes nothing: say so
    // and write nothing.
    if file.exists()
        && let Ok(loaded) = crate::policy::load::load_policy(std::slice::from_ref(file), &[])
        && let Some(refusal) = prefix_amendment_refusal(&loaded.policy, &args.tokens)
    {
        return usage_error(&format!(
            "{refusal} (nothing was written to {})",
            file.display()
        ));
    }
    match prefix_amendment_line(&args.tokens) {
        Ok(line) => append_and_report(file, &line, args.json),
        Err(err) => usage_error(&err.to_string()),
    }
}

pub fn host(args: &HostArgs, decision: Decision) -> ExitCode {
    let Some(file) = &args.rules_file else {
        let decision = match decision {
            Decision::Allow => "allow",
            Decision::Prompt => "prompt",
            Decision::Forbidden => "deny",
        };
        return through_daemon(
            &args.socket,
            Amendment::Network {
                host: args.host.clone(),
                protocol: args.protocol.clone(),
                decision: decision.to_string(),
                justification: args.justification.clone(),
            },
            args.json,
        );
    };
    let line = NetworkProtocol::parse(&args.protocol)
        .map_err(|err| format!("invalid network rule: {err}"))
        .and_then(|protocol| {
            network_amendment_line(
                &args.host,
                protocol,
                decision,
                args.justification.as_deref(),
            )
            .map_err(|err| err.to_string())
        });
    match line {
        Ok(line) => append_and_report(file, &line, args.json),
        Err(message) => usage_error(&message),
    }
}
