//! Answers to asks (approve, deny) and amendments: what a person's decision does to the
//! policy, the amendments file and the kernel's approvals.

use std::time::Instant;

use serde_json::json;

use super::Daemon;
use crate::asks::answer::{ApprovalPlan, denial_line, plan_approval};
use crate::asks::approvals::{Answerer, Approval, ApprovalTarget};
use crate::asks::book::{Ask, AskState};
use crate::audit::RecordType;
use crate::audit::record::{AmendmentInfo, ApprovalInfo, AuditRecord};
use crate::daemon::wire::protocol::{Amendment, ApprovalMode, ErrorCode};
use crate::daemon::wire::responses::{AmendmentApplied, ApproveResponse, DenyResponse, WatchEvent};
use crate::policy::NetworkProtocol;
use crate::policy::amend::{
    append_line, network_amendment_line, prefix_amendment_line, prefix_amendment_refusal,
};

impl Daemon {
    fn pending_ask(&self, id: u64) -> Result<Ask, (ErrorCode, String)> {
        self.asks
            .pending_ask(id, Instant::now())
            .map_err(|err| (ErrorCode::from(&err), err.to_string()))
    }

    pub(super) async fn approve(
        &mut self,
        id: u64,
        mode: ApprovalMode,
        prefix: Option<&[String]>,
        by: &Answerer,
    ) -> Result<ApproveResponse, (ErrorCode, String)> {
        let ask = self.pending_ask(id)?;
        let failed = |m: String| (ErrorCode::Failed, m);
        let mut result = ApproveResponse {
            ask: id,
            mode,
            line: None,
        };
        let proposed = prefix.map(|p| (self.core.policy(), p));
        match plan_approval(&ask, mode, self.core.image(), proposed).map_err(failed)? {
            ApprovalPlan::Append(line) => {
                result.line = Some(self.append_and_reload(&line, by).await?);
            }
            ApprovalPlan::Hold(target) => {
                self.resolve_stand_in_name(&target).await;
                self.add_approval(&ask, mode, by, target)?
            }
        }
        let state = AskState::Approved {
            mode,
            by: by.name.clone(),
        };
        if let Some(resolved) = self.asks.resolve(id, state, Instant::now()) {
            self.notify_watchers(WatchEvent::Resolved { ask: resolved });
        }
        self.tally.ask_ended(mode.as_str());
        self.audit.emit(answer_record(
            &ask,
            RecordType::Approval,
            by,
            mode.as_str(),
            result.line.as_ref(),
        ));
        Ok(result)
    }

    /// An approval of a connect to a stand-in: its name is resolved for real now (and only
    /// now leaves the host), so the approved connect goes to the name's address.
    async fn resolve_stand_in_name(&mut self, target: &ApprovalTarget) {
        let ApprovalTarget::Network {
            address,
            host: Some(name),
            ..
        } = target
        else {
            return;
        };
        if !crate::resolve::stand_ins::is_stand_in_ip(*address) {
            return;
        }
        let missing = self.core.unresolved([name.clone()]);
        if !missing.is_empty() {
            let fresh = self.resolver.resolve(&missing).await;
            self.core.names_mut().resolved_mut().merge_new(fresh);
        }
    }

    fn add_approval(
        &mut self,
        ask: &Ask,
        mode: ApprovalMode,
        by: &Answerer,
        target: ApprovalTarget,
    ) -> Result<(), (ErrorCode, String)> {
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
        let once = (self.config.asks.once(), Instant::now());
        let approval = Approval::answering(ask, mode, by, target, once);
        self.core
            .add_approval(approval, Daemon::stacked(&mut self.overlays))
            .map_err(|e| {
                (
                    ErrorCode::Failed,
                    format!("cannot approve ask {}: {e:#}", ask.id),
                )
            })?;
        self.refresh_holds();
        Ok(())
    }

    pub(super) async fn deny(
        &mut self,
        id: u64,
        always: bool,
        by: &Answerer,
    ) -> Result<DenyResponse, (ErrorCode, String)> {
        let ask = self.pending_ask(id)?;
        let mut result = DenyResponse {
            ask: id,
            always,
            line: None,
        };
        if let Some(line) = denial_line(&ask, always).map_err(|e| (ErrorCode::Failed, e))? {
            result.line = Some(self.append_and_reload(&line, by).await?);
        }
        let state = AskState::Denied {
            always,
            by: by.name.clone(),
        };
        if let Some(resolved) = self.asks.resolve(id, state, Instant::now()) {
            self.notify_watchers(WatchEvent::Resolved { ask: resolved });
        }
        let mode = if always { "always" } else { "once" };
        self.tally
            .ask_ended(if always { "deny_always" } else { "deny" });
        self.audit.emit(answer_record(
            &ask,
            RecordType::Denial,
            by,
            mode,
            result.line.as_ref(),
        ));
        Ok(result)
    }

    pub(super) async fn amend(
        &mut self,
        amendment: &Amendment,
        by: &Answerer,
    ) -> Result<AmendmentApplied, (ErrorCode, String)> {
        let bad = |m: String| (ErrorCode::BadRequest, m);
        let line = match amendment {
            Amendment::Prefix { tokens } => {
                if let Some(refusal) = prefix_amendment_refusal(self.core.policy(), tokens) {
                    return Err((ErrorCode::Failed, refusal));
                }
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
    ) -> Result<AmendmentApplied, (ErrorCode, String)> {
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
        let applied = self.reload(&by.name).await.map(|_| ());
        Ok(AmendmentApplied::new(&file, line, outcome, applied))
    }
}

/// The record of an answer to an ask: the ask's request (process, destination, deciding rule)
/// with who answered and how, and the amendment line it wrote, if any.
fn answer_record(
    ask: &Ask,
    kind: RecordType,
    by: &Answerer,
    mode: &str,
    appended: Option<&AmendmentApplied>,
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
    if let Some(appended) = appended {
        record.amendment = Some(AmendmentInfo {
            file: appended.file.clone(),
            line: line_number(std::path::Path::new(&appended.file), &appended.line).unwrap_or(0),
            text: appended.line.clone(),
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
