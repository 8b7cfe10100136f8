//! Answers to asks (approve, deny) and amendments: what a person's decision does to the
//! policy, the amendments file and the kernel's approvals.

use std::time::Instant;

use serde_json::{Value, json};

use super::Daemon;
use crate::audit::RecordType;
use crate::audit::record::{AmendmentInfo, ApprovalInfo, AuditRecord};
use crate::daemon::approvals::{Answerer, Approval, ApprovalTarget, Approvals};
use crate::daemon::asks::{Ask, AskState, AskTarget};
use crate::daemon::protocol::{Amendment, ApprovalMode, ErrorCode};
use crate::policy::amend::{
    AmendError, AmendOutcome, address_amendment_line, append_line, network_amendment_line,
    prefix_amendment_line,
};
use crate::policy::{Decision, NetworkProtocol, Transport};

impl Daemon {
    fn pending_ask(&self, id: u64) -> Result<Ask, (ErrorCode, String)> {
        match self.asks.get(id, Instant::now()) {
            Some(ask) if ask.is_pending() => Ok(ask),
            Some(ask) => Err((
                ErrorCode::Failed,
                format!(
                    "ask {id} is not pending any more ({})",
                    serde_json::to_value(&ask.state)
                        .ok()
                        .and_then(|v| v["state"].as_str().map(str::to_string))
                        .unwrap_or_default()
                ),
            )),
            None => Err((
                ErrorCode::NotFound,
                format!("no ask {id} (`guard prompts` lists the pending ones)"),
            )),
        }
    }

    pub(super) async fn approve(
        &mut self,
        id: u64,
        mode: ApprovalMode,
        by: &Answerer,
    ) -> Result<Value, (ErrorCode, String)> {
        let ask = self.pending_ask(id)?;
        let failed = |m: String| (ErrorCode::Failed, m);
        let mut result = json!({"ask": id, "mode": mode.as_str()});
        match (&ask.target, mode) {
            (AskTarget::Exec { by_rule: true, .. }, ApprovalMode::Always) => {
                return Err(failed(format!(
                    "ask {id} comes from a prompt rule ({}); an allow rule cannot override it \
                     (prefix rules combine by strongest decision), so there is no amendment to \
                     write. Approve it --once or --session, or change that rule.",
                    ask.record.rule.as_deref().unwrap_or("?")
                )));
            }
            (AskTarget::Exec { tokens, .. }, ApprovalMode::Always) => {
                let line = prefix_amendment_line(tokens).map_err(|e| failed(e.to_string()))?;
                result["line"] = self.append_and_reload(&line, by).await?;
            }
            (
                AskTarget::Network {
                    host,
                    address,
                    port,
                    transport,
                    ..
                },
                _,
            ) => {
                self.check_not_forbidden(&ask.target)?;
                if mode == ApprovalMode::Always {
                    let line = network_line(&ask.target, Decision::Allow)
                        .map_err(|e| failed(e.to_string()))?;
                    result["line"] = self.append_and_reload(&line, by).await?;
                } else {
                    let target = ApprovalTarget::Network {
                        address: *address,
                        port: *port,
                        transport: Transport::parse(transport).unwrap_or(Transport::Tcp),
                        host: host.clone(),
                    };
                    self.add_approval(&ask, mode, by, target)?;
                }
            }
            (AskTarget::Exec { tokens, .. }, _) => {
                let target = ApprovalTarget::Exec {
                    tokens: tokens.clone(),
                };
                self.add_approval(&ask, mode, by, target)?;
            }
        }
        let state = AskState::Approved {
            mode,
            by: by.name.clone(),
        };
        if let Some(resolved) = self.asks.resolve(id, state, Instant::now()) {
            self.notify_watchers("resolved", json!({"ask": resolved}));
        }
        self.audit.emit(answer_record(
            &ask,
            RecordType::Approval,
            by,
            mode.as_str(),
            &result,
        ));
        Ok(result)
    }

    /// An approval must not be the way around an explicit `forbidden`: the kernel would not let
    /// it through anyway, so say which rule stands in the way instead of approving in vain.
    fn check_not_forbidden(&self, target: &AskTarget) -> Result<(), (ErrorCode, String)> {
        let AskTarget::Network {
            address,
            port,
            transport,
            ..
        } = target
        else {
            return Ok(());
        };
        let transport = Transport::parse(transport).unwrap_or(Transport::Tcp);
        match self.image.destination_verdict(*address, *port, transport) {
            Some(v) if v.decision == Decision::Forbidden => {
                let rule = self.image.rule(&v);
                let at = rule
                    .origin
                    .as_ref()
                    .map(|o| format!(" ({}:{})", o.file, o.line))
                    .unwrap_or_default();
                Err((
                    ErrorCode::Failed,
                    format!(
                        "{address}:{port} is forbidden by `{}`{at}; an approval never overrides a forbidden rule",
                        rule.text
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    fn add_approval(
        &mut self,
        ask: &Ask,
        mode: ApprovalMode,
        by: &Answerer,
        target: ApprovalTarget,
    ) -> Result<(), (ErrorCode, String)> {
        let run_scope = ask.from_run.then_some(ask.scope);
        if mode == ApprovalMode::Session
            && ask.from_run
            && !self.scopes.by_id.contains_key(&ask.scope)
        {
            return Err((
                ErrorCode::Failed,
                format!(
                    "ask {} came from a `guard run` that has ended, so there is no session to approve it for: approve it --once (retry within {} s) or --always",
                    ask.id, self.config.asks.once_secs
                ),
            ));
        }
        let approval = Approval {
            ask: ask.id,
            mode,
            by: by.name.clone(),
            target,
            scope: if mode == ApprovalMode::Session {
                run_scope
            } else {
                None
            },
            until: (mode == ApprovalMode::Once).then(|| Instant::now() + self.config.asks.once()),
        };
        let mut trial = Approvals::default();
        for a in self.approvals.list() {
            trial.add(a.clone());
        }
        trial.add(approval);
        let image = self.compile_with(&trial).map_err(|e| {
            (
                ErrorCode::Failed,
                format!("cannot approve ask {}: {e:#}", ask.id),
            )
        })?;
        self.enforcer
            .apply(&image)
            .map_err(|e| (ErrorCode::Failed, format!("{e:#}")))?;
        self.image = image;
        self.approvals = trial;
        Ok(())
    }

    pub(super) async fn deny(
        &mut self,
        id: u64,
        always: bool,
        by: &Answerer,
    ) -> Result<Value, (ErrorCode, String)> {
        let ask = self.pending_ask(id)?;
        let mut result = json!({"ask": id, "always": always});
        if always {
            let line = match &ask.target {
                AskTarget::Exec { tokens, .. } => prefix_amendment_line(tokens)
                    .map(|l| l.replace("decision=\"allow\")", "decision=\"forbidden\")")),
                AskTarget::Network { .. } => network_line(&ask.target, Decision::Forbidden),
            }
            .map_err(|e| (ErrorCode::Failed, e.to_string()))?;
            result["line"] = self.append_and_reload(&line, by).await?;
        }
        let state = AskState::Denied {
            always,
            by: by.name.clone(),
        };
        if let Some(resolved) = self.asks.resolve(id, state, Instant::now()) {
            self.notify_watchers("resolved", json!({"ask": resolved}));
        }
        let mode = if always { "always" } else { "once" };
        self.audit
            .emit(answer_record(&ask, RecordType::Denial, by, mode, &result));
        Ok(result)
    }

    pub(super) async fn amend(
        &mut self,
        amendment: &Amendment,
        by: &Answerer,
    ) -> Result<Value, (ErrorCode, String)> {
        let bad = |m: String| (ErrorCode::BadRequest, m);
        let line = match amendment {
            Amendment::Prefix { tokens } => {
                prefix_amendment_line(tokens).map_err(|e| bad(e.to_string()))?
            }
            Amendment::Network {
                host,
                protocol,
                decision,
                justification,
            } => {
                let protocol = NetworkProtocol::parse(protocol)
                    .map_err(|e| bad(format!("invalid network rule: {e}")))?;
                let decision = crate::policy::rule::parse_network_decision(decision)
                    .map_err(|e| bad(e.to_string()))?;
                network_amendment_line(host, protocol, decision, justification.as_deref())
                    .map_err(|e| bad(e.to_string()))?
            }
        };
        let outcome = self.append_and_reload(&line, by).await?;
        Ok(outcome)
    }

    /// Appends one line to the amendments file (under its lock, deduplicated) and reloads, so
    /// it takes effect at once.
    async fn append_and_reload(
        &mut self,
        line: &str,
        by: &Answerer,
    ) -> Result<Value, (ErrorCode, String)> {
        let file = self.config.amendments_file();
        let outcome = append_line(&file, line).map_err(|e| (ErrorCode::Failed, e.to_string()))?;
        let mut record = crate::daemon::audit::base(RecordType::Amendment, &by.name);
        record.amendment = Some(AmendmentInfo {
            file: file.display().to_string(),
            line: line_number(&file, line).unwrap_or(0),
            text: line.to_string(),
        });
        record.details.insert("outcome".into(), json!(outcome));
        record.details.insert("uid".into(), json!(by.uid));
        self.audit.emit(record);
        let applied = self.reload(&by.name).await;
        let mut value = json!({
            "file": file.display().to_string(),
            "line": line,
            "outcome": outcome,
            "applied": applied.is_ok(),
        });
        if let Err(error) = applied {
            value["error"] = error.into();
        }
        if outcome == AmendOutcome::AlreadyPresent {
            value["note"] = "the line was already there; nothing was written".into();
        }
        Ok(value)
    }
}

/// The amendment an `--always` answer to a network ask writes, covering exactly what was asked:
/// the host (the name the program asked for, else the address) and what the connection used.
/// `http` (80/tcp) and `https` (443) are the reference's `network_rule`; so is an ask a
/// `network_rule` made (only the host's own later allow or deny can answer it, §2.4). Any other
/// port of an unmatched destination is guard's `address_rule` for that port and transport alone
/// (the reference's `socks5_tcp` would be every TCP port).
fn network_line(target: &AskTarget, decision: Decision) -> Result<String, AmendError> {
    let AskTarget::Network {
        host,
        address,
        port,
        transport,
        protocol,
        by_rule,
    } = target
    else {
        return Err(AmendError::InvalidNetworkRule("not a network ask".into()));
    };
    let host = host.clone().unwrap_or_else(|| address.to_string());
    let verb = if decision == Decision::Allow {
        "Allow"
    } else {
        "Deny"
    };
    if *by_rule || matches!(protocol, NetworkProtocol::Http | NetworkProtocol::Https) {
        let justification = format!("{verb} {} access to {host}", label(*protocol));
        return network_amendment_line(&host, *protocol, decision, Some(&justification));
    }
    let transport = Transport::parse(transport).unwrap_or(Transport::Tcp);
    let justification = format!("{verb} {transport} port {port} access to {host}");
    address_amendment_line(&host, *port, transport, decision, Some(&justification))
}

/// The reference's label in amendment justifications (`Allow https_connect access to <host>`).
fn label(protocol: NetworkProtocol) -> &'static str {
    match protocol {
        NetworkProtocol::Http => "http",
        NetworkProtocol::Https => "https_connect",
        NetworkProtocol::Socks5Tcp => "socks5_tcp",
        NetworkProtocol::Socks5Udp => "socks5_udp",
    }
}

/// The record of an answer to an ask: the ask's request (process, destination, deciding rule)
/// with who answered and how, and the amendment line it wrote, if any.
fn answer_record(
    ask: &Ask,
    kind: RecordType,
    by: &Answerer,
    mode: &str,
    result: &Value,
) -> AuditRecord {
    let mut record = ask.origin.clone().unwrap_or_default();
    record.kind = kind;
    record.time = String::new();
    record.ask = Some(ask.id);
    record.approval = Some(ApprovalInfo {
        by: by.name.clone(),
        uid: by.uid,
        mode: mode.to_string(),
    });
    if let (Some(file), Some(text)) = (
        result["line"]["file"].as_str(),
        result["line"]["line"].as_str(),
    ) {
        record.amendment = Some(AmendmentInfo {
            file: file.to_string(),
            line: line_number(std::path::Path::new(file), text).unwrap_or(0),
            text: text.to_string(),
        });
    }
    record
}

/// The (last) line of `file` that is `text`, 1-based: where an amendment now stands.
fn line_number(file: &std::path::Path, text: &str) -> Option<usize> {
    let content = std::fs::read_to_string(file).ok()?;
    content
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_end() == text)
        .map(|(i, _)| i + 1)
        .last()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_the_references() {
        assert_eq!(label(NetworkProtocol::Https), "https_connect");
        assert_eq!(label(NetworkProtocol::Http), "http");
    }
}
