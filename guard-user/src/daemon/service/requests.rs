//! Control requests: who asks (peer, scope, authorization attributes), whether they may, and
//! what each request does.

use super::*;

impl Daemon {
    /// Whether the answer `request` would be allowed if it did not amend the policy.
    pub(super) fn allowed_without_amending(
        &self,
        subject: &Subject,
        request: &Request,
        resource: &Attributes,
    ) -> bool {
        let amends = crate::authz::AMENDS_ATTRIBUTE;
        if resource
            .get(amends)
            .is_none_or(|v| v.as_slice() != ["true"])
        {
            return false;
        }
        let mut plain = resource.clone();
        plain.insert(amends.to_string(), vec!["false".to_string()]);
        self.authz
            .evaluate(&AuthzRequest {
                subject,
                action: request.action(),
                entity: Some(request.entity()),
                resource: &plain,
                env: &Attributes::new(),
            })
            .allowed
    }

    /// The pending asks `subject` may answer (`None`: every pending ask).
    pub(super) fn visible_asks(&self, subject: Option<&Subject>) -> Vec<crate::asks::Ask> {
        let mut asks = self.asks.pending(Instant::now());
        if let Some(subject) = subject {
            asks.retain(|ask| may_answer(&self.authz, subject, ask, false));
        }
        asks
    }

    /// The resource an answer is authorized with: its ask's owner (the user whose run asked),
    /// and whether it would amend the policy every scope holds. Other requests have none.
    pub(super) fn resource_of(&self, request: &Request) -> Attributes {
        let (id, amends) = match request {
            Request::Approve { id, mode, prefix } => (
                *id,
                *mode == crate::asks::ApprovalMode::Always || prefix.is_some(),
            ),
            Request::Deny { id, always } => (*id, *always),
            _ => return Attributes::new(),
        };
        match self.asks.get(id, Instant::now()) {
            Some(ask) => ask_resource(&ask, amends),
            None => Attributes::new(),
        }
    }

    /// The authorization subject of a peer, and the guard scope it runs in.
    pub(super) fn subject_of(&self, peer: &PeerCredentials) -> (Subject, Membership) {
        // A front end inside this process (`guard node`) is in no scope, wherever the
        // process runs (in a DaemonSet its pod's cgroup is below the pods it holds).
        let membership = if peer.is_this_process() {
            Membership::None
        } else {
            self.scopes.membership(peer.process.as_deref())
        };
        (subject(peer, &self.config, membership), membership)
    }

    /// Authorizes and carries out one request. `stream` is where a streaming request's later
    /// lines go. A run with an overlay is answered later ([`Handled::Evaluate`]).
    pub async fn handle(
        &mut self,
        peer: PeerCredentials,
        request: Request,
        stream: Option<UnboundedSender<String>>,
    ) -> Handled {
        let (subject, membership) = self.subject_of(&peer);
        let empty = Attributes::new();
        // An answer is authorized with its ask's owner; `prompts` and `watch` list what the
        // caller may see, ask by ask, when it may not see them all.
        let resource = self.resource_of(&request);
        let per_ask = matches!(
            request,
            Request::Prompts | Request::Watch | Request::ConsoleLogin
        );
        let mut sees_every_ask = true;
        // `audit` is authorized per record (whose processes it is about), in `audit_read`.
        if !matches!(request, Request::Audit { .. }) {
            let decision = self.authz.evaluate(&AuthzRequest {
                subject: &subject,
                action: request.action(),
                entity: Some(request.entity()),
                resource: &resource,
                env: &empty,
            });
            sees_every_ask = decision.allowed;
            if !decision.allowed && !per_ask {
                let message =
                    if membership.is_confined() && REFUSED_IN_SCOPE.contains(&request.action()) {
                        format!(
                            "not authorized: `{}` came from pid {} inside a guard scope ({}): a \
                         guarded process may not answer its own asks or change its policy \
                         (attribute in_guard_scope=true under {}); run it from outside the \
                         scope",
                            request.action(),
                            peer.pid.map_or("?".to_string(), |p| p.to_string()),
                            membership.as_str(),
                            self.authz_source
                        )
                    } else if self.allowed_without_amending(&subject, &request, &resource) {
                        format!(
                            "not authorized: {} (uid {}) may answer this ask once or for the \
                             session, but `--always` (or a prefix) writes to the daemon's \
                             policy, which every scope holds: ask an admin, or answer \
                             `--once`/`--session` (under {})",
                            subject.sub, peer.uid, self.authz_source
                        )
                    } else {
                        format!(
                            "not authorized: {} (uid {}) may not `{}` ({}) under {}; an admin can \
                         allow it there (try a policy with `guard authz check`)",
                            subject.sub,
                            peer.uid,
                            request.action(),
                            request.entity(),
                            self.authz_source
                        )
                    };
                self.tally.control_refused += 1;
                self.audit.record(
                    RecordType::ControlRefused,
                    &subject.sub,
                    json!({"request": request.action(), "entity": request.entity(),
                           "uid": peer.uid, "pid": peer.pid, "scope": membership.as_str(),
                           "authz_rule": decision.rule}),
                );
                return Handled::Answer(ResponseLine::error(ErrorCode::Unauthorized, message));
            }
            // Obligations are the deciding rule's instructions to the enforcement point; the
            // one the daemon knows is `audit`: record the allowed request too.
            if decision.obligations.iter().any(|o| o == "audit") {
                self.audit.record(
                    RecordType::ControlAllowed,
                    &subject.sub,
                    json!({"request": request.action(), "entity": request.entity(),
                           "uid": peer.uid, "pid": peer.pid, "authz_rule": decision.rule}),
                );
            }
        }
        let by = crate::asks::Answerer {
            name: subject.sub.clone(),
            uid: peer.uid,
        };
        // `None`: every ask; else only the asks this subject may answer.
        let visible_to = (!sees_every_ask).then_some(&subject);
        let result = match request {
            Request::Status => Ok(to_json(&self.status())),
            Request::Prompts => Ok(to_json(&self.visible_asks(visible_to))),
            Request::Watch => {
                if let Some(stream) = stream {
                    self.watchers.push(Watcher {
                        subject: visible_to.cloned(),
                        stream,
                    });
                }
                Ok(to_json(&self.visible_asks(visible_to)))
            }
            Request::Approve { id, mode, prefix } => self
                .approve(id, mode, prefix.as_deref(), &by)
                .await
                .map(|r| to_json(&r)),
            Request::Deny { id, always } => self.deny(id, always, &by).await.map(|r| to_json(&r)),
            Request::Amend { amendment } => self.amend(&amendment, &by).await.map(|r| to_json(&r)),
            Request::Reload => self
                .reload(&by.name)
                .await
                .map(|r| to_json(&r))
                .map_err(|m| (ErrorCode::Failed, m)),
            Request::Run {
                argv,
                workspace,
                tmpdir,
                hold,
                overlay,
            } if overlay.is_empty() => self
                .run(peer, argv, (workspace, tmpdir), hold, (&[], None), stream)
                .map(|r| to_json(&r)),
            // Any local user's Starlark: evaluated off the loop, which goes on meanwhile.
            Request::Run {
                argv,
                workspace,
                tmpdir,
                hold,
                overlay,
            } => match self.room_for_overlay() {
                Ok(()) => {
                    return Handled::Evaluate(PendingRun {
                        peer,
                        argv,
                        folders: (workspace, tmpdir),
                        hold,
                        overlay,
                        stream,
                    });
                }
                Err(err) => Err(err),
            },
            Request::Hold { fd, first_exec } => {
                self.adopt_hold(peer, fd, first_exec).map(|r| to_json(&r))
            }
            Request::ConsoleLogin => self.console_login(&peer, membership).map(|r| to_json(&r)),
            Request::Policy => Ok(to_json(&self.policy_view())),
            // Served by `audit_read` (the server sends it there).
            Request::Audit { .. } => Err((
                ErrorCode::BadRequest,
                "audit is a streaming request".to_string(),
            )),
        };
        Handled::Answer(answer(result))
    }

    /// `guard audit`: the caller's history read (done by its connection's task) and, with
    /// `live`, its place among the followers. Every record is checked against the caller's
    /// authorization as it is read or sent.
    pub fn audit_read(
        &mut self,
        peer: PeerCredentials,
        filter: &AuditFilter,
        live: Option<tokio::sync::mpsc::Sender<String>>,
        limit: Option<usize>,
    ) -> Result<HistoryRead, ResponseLine> {
        let (subject, _) = self.subject_of(&peer);
        self.audit
            .follow(subject, filter, live, limit)
            .map_err(|message| ResponseLine::error(ErrorCode::BadRequest, message))
    }
}

/// The authorization resource of `ask`: its owner, if a run's user owns it, and whether the
/// answer would amend the policy.
pub(super) fn ask_resource(ask: &crate::asks::Ask, amends: bool) -> Attributes {
    let mut resource = Attributes::from([(
        crate::authz::AMENDS_ATTRIBUTE.to_string(),
        vec![amends.to_string()],
    )]);
    if let Some(owner) = &ask.owner {
        resource.insert(
            crate::authz::OWNER_ATTRIBUTE.to_string(),
            vec![owner.clone()],
        );
    }
    resource
}

/// Whether `subject` may answer `ask` once or for the session (or list it, which the same rule
/// decides).
pub(super) fn may_answer(
    authz: &AuthzPolicy,
    subject: &Subject,
    ask: &crate::asks::Ask,
    amends: bool,
) -> bool {
    authz
        .evaluate(&AuthzRequest {
            subject,
            action: "prompts",
            entity: Some("prompt"),
            resource: &ask_resource(ask, amends),
            env: &Attributes::new(),
        })
        .allowed
}

/// The peer's process, for a request that acts on it (`run` moves it into a scope, `hold` copies
/// a descriptor from it). Its pid is the kernel's from when it connected, and any local user
/// may connect: a process of another user that took the pid since is never acted on (the
/// peer's own processes it could confine anyway).
pub(super) fn peer_process(peer: &PeerCredentials) -> Result<u32, (ErrorCode, String)> {
    let process = peer.process.as_deref().ok_or((
        ErrorCode::Failed,
        "the kernel gave no process for this connection".to_string(),
    ))?;
    process
        .read(|pid| match crate::daemon::peer::uid_of_pid(pid) {
            Some(uid) if uid == peer.uid => Ok(pid),
            _ => Err(anyhow!("it is another user's now")),
        })
        .map_err(|err| {
            (
                ErrorCode::Failed,
                format!(
                    "the process that connected as uid {} is gone or cannot be acted on \
                     ({err:#}): nothing was done to it",
                    peer.uid
                ),
            )
        })
}

/// What [`Daemon::handle`] made of a request.
pub enum Handled {
    /// Its answer.
    Answer(ResponseLine),
    /// A run whose overlay is to be evaluated off the loop ([`crate::daemon::overlay_eval::evaluate`]);
    /// [`Daemon::run_evaluated`] answers it then.
    Evaluate(PendingRun),
}

pub(super) fn answer(result: Result<Value, (ErrorCode, String)>) -> ResponseLine {
    match result {
        Ok(value) => ResponseLine::ok(value),
        Err((code, message)) => ResponseLine::error(code, message),
    }
}
