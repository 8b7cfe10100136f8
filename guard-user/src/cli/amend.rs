//! The amendment verbs: `guard allow-prefix` and `guard allow-host | ask-host | deny-host`.
//!
//! With `--rules-file` they append to that file directly. Without it they will go through the
//! running daemon (the host-service issue); until then they say so and change nothing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::output::{print_json, say, usage_error};
use crate::policy::amend::{
    AmendOutcome, append_line, network_amendment_line, prefix_amendment_line,
};
use crate::policy::{Decision, NetworkProtocol};

#[derive(Args, Debug)]
pub struct AllowPrefixArgs {
    /// The rules file to append to (created, with its folder, if missing).
    #[arg(long, value_name = "FILE")]
    rules_file: Option<PathBuf>,
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
    /// The rules file to append to (created, with its folder, if missing).
    #[arg(long, value_name = "FILE")]
    rules_file: Option<PathBuf>,
    /// Print `{"line": ..., "outcome": "appended"|"already_present"}`.
    #[arg(long)]
    json: bool,
}

fn require_rules_file(rules_file: &Option<PathBuf>) -> Result<&PathBuf, ExitCode> {
    rules_file.as_ref().ok_or_else(|| {
        usage_error(
            "no --rules-file given. Amending through the guard daemon is not available yet; \
             pass --rules-file FILE to append to a rules file directly.",
        )
    })
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
    let file = match require_rules_file(&args.rules_file) {
        Ok(file) => file,
        Err(code) => return code,
    };
    match prefix_amendment_line(&args.tokens) {
        Ok(line) => append_and_report(file, &line, args.json),
        Err(err) => usage_error(&err.to_string()),
    }
}

pub fn host(args: &HostArgs, decision: Decision) -> ExitCode {
    let file = match require_rules_file(&args.rules_file) {
        Ok(file) => file,
        Err(code) => return code,
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
