//! Amendments: one rule line appended to a rules file (an approval that outlives the session).
//!
//! The line formats are the reference's, byte for byte, so files stay shared with other tools.
//! The append is made under an exclusive advisory lock, skipped when the same line is already
//! there, and never rewrites what the file holds: a failure leaves the file as it was.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::error::PolicyError;
use super::host::normalize_network_host;
use super::rule::{Decision, NetworkProtocol, Transport};

#[derive(Debug, thiserror::Error)]
pub enum AmendError {
    #[error("prefix rule requires at least one token")]
    EmptyPrefix,
    #[error("invalid network rule: {0}")]
    InvalidNetworkRule(String),
    #[error("invalid unix rule: {0}")]
    InvalidUnixRule(String),
    #[error("cannot create the folder {dir} for the amendments file: {source}")]
    CreateDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the amendments file {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot lock the amendments file {path}: {source}")]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the amendments file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot append to the amendments file {path} (it was left as it was): {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What an append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmendOutcome {
    Appended,
    /// The identical line was already in the file; nothing was written.
    AlreadyPresent,
}

/// A JSON string literal: quotes, backslashes and control characters escaped, non-ASCII raw.
fn json_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string always serialises")
}

/// Why appending `allow` for `prefix` to `policy` would change no decision, if it would not:
/// a stronger rule (prompt or forbidden) matches the prefix itself, and under strongest-wins it
/// still decides. The refusal names that rule and what to change instead.
pub fn prefix_amendment_refusal(policy: &super::Policy, prefix: &[String]) -> Option<String> {
    let options = super::MatchOptions {
        resolve_host_executables: true,
    };
    let evaluation = policy.check_with_options(prefix, None, options);
    let decision = evaluation.decision.filter(|d| *d != Decision::Allow)?;
    let shown = super::render_example(prefix);
    let winner = evaluation
        .matched_rules
        .iter()
        .rev()
        .find(|m| m.is_policy_match() && m.decision() == decision)
        .map(|m| match m {
            super::RuleMatch::PrefixRuleMatch {
                matched_prefix,
                origin,
                ..
            } => format!(
                "the {} prefix_rule for `{}`{}",
                decision.as_str(),
                super::render_example(matched_prefix),
                origin
                    .as_ref()
                    .map(|o| format!(" at {o}"))
                    .unwrap_or_default()
            ),
            super::RuleMatch::RuleSetMatch {
                pattern, origin, ..
            } => format!(
                "the rule_set pattern `{pattern}`{}",
                origin
                    .as_ref()
                    .map(|o| format!(" at {o}"))
                    .unwrap_or_default()
            ),
            super::RuleMatch::LegacyMatch { rule, .. } => format!("the legacy rule `{rule}`"),
            super::RuleMatch::HeuristicsRuleMatch { .. } => "the fallback".to_string(),
        })
        .unwrap_or_else(|| "another rule".to_string());
    Some(format!(
        "allowing `{shown}` would change nothing: {winner} still decides `{}` for it (the \
         strongest decision wins, and an allow rule never overrides it); change or remove that \
         rule instead",
        decision.as_str()
    ))
}

/// `prefix_rule(pattern=["a", "b"], decision="allow")`.
pub fn prefix_amendment_line(prefix: &[String]) -> Result<String, AmendError> {
    if prefix.is_empty() {
        return Err(AmendError::EmptyPrefix);
    }
    let tokens: Vec<String> = prefix.iter().map(|token| json_string(token)).collect();
    Ok(format!(
        "prefix_rule(pattern=[{}], decision=\"allow\")",
        tokens.join(", ")
    ))
}

/// `network_rule(host="h", protocol="https", decision="allow|prompt|deny"[, justification="…"])`,
/// with the host normalised and forbidden written as `deny`.
pub fn network_amendment_line(
    host: &str,
    protocol: NetworkProtocol,
    decision: Decision,
    justification: Option<&str>,
) -> Result<String, AmendError> {
    let host = normalize_network_host(host)
        .map_err(|err: PolicyError| AmendError::InvalidNetworkRule(err.to_string()))?;
    let (decision, justification) = decision_and_justification(decision, justification)?;
    Ok(format!(
        "network_rule(host={}, protocol=\"{}\", decision=\"{decision}\"{justification})",
        json_string(&host),
        protocol.as_str()
    ))
}

/// The `decision="..."` word of a destination amendment (forbidden written as `deny`), and its
/// `, justification="..."` part (empty without one; a blank one is refused).
fn decision_and_justification(
    decision: Decision,
    justification: Option<&str>,
) -> Result<(&'static str, String), AmendError> {
    let word = match decision {
        Decision::Allow => "allow",
        Decision::Prompt => "prompt",
        Decision::Forbidden => "deny",
    };
    let justification = match justification {
        Some(text) if text.trim().is_empty() => {
            return Err(AmendError::InvalidNetworkRule(
                "justification cannot be empty".to_string(),
            ));
        }
        Some(text) => format!(", justification={}", json_string(text)),
        None => String::new(),
    };
    Ok((word, justification))
}

/// `address_rule(addresses=["h"], ports=[8080], transport="tcp", decision="allow"[,
/// justification="…"])`: guard's form for one port of one host (or address), which no
/// `network_rule` protocol names on its own (`socks5_tcp` would be every TCP port).
pub fn address_amendment_line(
    host: &str,
    port: u16,
    transport: Transport,
    decision: Decision,
    justification: Option<&str>,
) -> Result<String, AmendError> {
    let target = super::address::parse_address_target(host)
        .map_err(|err: PolicyError| AmendError::InvalidNetworkRule(err.to_string()))?;
    let (decision, justification) = decision_and_justification(decision, justification)?;
    Ok(format!(
        "address_rule(addresses=[{}], ports=[{port}], transport=\"{transport}\", decision=\"{decision}\"{justification})",
        json_string(&target.to_string()),
    ))
}

/// `unix_rule(socket="/path", decision="allow|deny")`: exactly the address asked. An address
/// the rule language would read as another one (a prefix, a relative path) is refused.
pub fn unix_amendment_line(socket: &str, decision: Decision) -> Result<String, AmendError> {
    let parsed = super::unix::UnixSocket::parse(socket).map_err(AmendError::InvalidUnixRule)?;
    if parsed.prefix || parsed.bytes != super::unix::parse_address(socket) {
        return Err(AmendError::InvalidUnixRule(format!(
            "{socket:?} would name more than this one socket in a unix_rule"
        )));
    }
    let (decision, _) = decision_and_justification(decision, None)?;
    Ok(format!(
        "unix_rule(socket={}, decision=\"{decision}\")",
        json_string(socket)
    ))
}

/// Appends an "always allow" prefix amendment to `path`.
pub fn append_prefix_amendment(path: &Path, prefix: &[String]) -> Result<AmendOutcome, AmendError> {
    append_line(path, &prefix_amendment_line(prefix)?)
}

/// Appends a network amendment to `path`.
pub fn append_network_amendment(
    path: &Path,
    host: &str,
    protocol: NetworkProtocol,
    decision: Decision,
    justification: Option<&str>,
) -> Result<AmendOutcome, AmendError> {
    append_line(
        path,
        &network_amendment_line(host, protocol, decision, justification)?,
    )
}

/// Appends `line` unless the file already has it, creating the file and (one level of) its
/// folder. The lock is held from before the read until after the write, so two approvals
/// racing for the same line write it once.
pub fn append_line(path: &Path, line: &str) -> Result<AmendOutcome, AmendError> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty())
        && !dir.exists()
    {
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(AmendError::CreateDir {
                    dir: dir.to_path_buf(),
                    source,
                });
            }
        }
    }
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .map_err(|source| AmendError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    file.lock().map_err(|source| AmendError::Lock {
        path: path.to_path_buf(),
        source,
    })?;
    let outcome = append_locked(&mut file, path, line);
    // Closing the file releases the lock; an explicit unlock makes the order obvious.
    let _ = file.unlock();
    outcome
}

fn append_locked(file: &mut File, path: &Path, line: &str) -> Result<AmendOutcome, AmendError> {
    let read_error = |source| AmendError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut contents = String::new();
    file.seek(SeekFrom::Start(0)).map_err(read_error)?;
    file.read_to_string(&mut contents).map_err(read_error)?;
    if contents.lines().any(|existing| existing == line) {
        return Ok(AmendOutcome::AlreadyPresent);
    }
    let mut addition = String::with_capacity(line.len() + 2);
    if !contents.is_empty() && !contents.ends_with('\n') {
        addition.push('\n');
    }
    addition.push_str(line);
    addition.push('\n');
    let original_len = contents.len() as u64;
    if let Err(source) = file
        .write_all(addition.as_bytes())
        .and_then(|()| file.sync_data())
    {
        // Take back a partial line so the file parses as it did before.
        let _ = file.set_len(original_len);
        return Err(AmendError::Write {
            path: path.to_path_buf(),
            source,
        });
    }
    Ok(AmendOutcome::Appended)
}

#[cfg(test)]
#[path = "amend_tests.rs"]
mod tests;
