//! Run scopes: a `guard run` under the daemon made below the caller's scope, its overlay
//! evaluated off the loop, its refusal stream.

use super::*;

impl Daemon {
    /// Finishes a run whose overlay was evaluated off the loop: `policy` is what its files
    /// say, or why they were refused (nothing is made then).
    pub fn run_evaluated(
        &mut self,
        pending: PendingRun,
        policy: Result<crate::policy::Policy, String>,
    ) -> ResponseLine {
        let PendingRun {
            peer,
            argv,
            folders,
            hold,
            overlay,
            stream,
        } = pending;
        let result = policy
            .map_err(|message| (ErrorCode::BadRequest, message))
            .and_then(|policy| {
                // Other runs may have taken the last room while it was evaluated.
                self.room_for_overlay()?;
                let policy = self.config.asks.approval().kernel_policy(policy);
                self.run(peer, argv, folders, hold, (&overlay, Some(policy)), stream)
            })
            .map(|r| to_json(&r));
        answer(result)
    }

    /// Whether another run's overlay may be put in force ([`overlays::MAX_OVERLAYS`]).
    pub(super) fn room_for_overlay(&self) -> Result<(), (ErrorCode, String)> {
        if self.run_overlays() >= overlays::MAX_OVERLAYS {
            return Err((
                ErrorCode::Failed,
                format!(
                    "the daemon holds {} overlays already, its most: run without --overlay, or \
                     when one of those runs has ended",
                    overlays::MAX_OVERLAYS
                ),
            ));
        }
        Ok(())
    }

    /// Starts a run's scope; with `overlay`, its files and their policy (evaluated already: an
    /// overlay that does not parse changes nothing) are put in force there.
    pub(super) fn run(
        &mut self,
        peer: PeerCredentials,
        argv: Vec<String>,
        (workspace, tmpdir): (Option<PathBuf>, Option<PathBuf>),
        hold: bool,
        (overlay, overlay_policy): (&[OverlayFile], Option<crate::policy::Policy>),
        stream: Option<UnboundedSender<String>>,
    ) -> Result<RunResponse, (ErrorCode, String)> {
        let pid = peer_process(&peer)?;
        let within = run_within(&self.scopes, &peer)?;
        let id = self
            .scopes
            .create_run(peer.uid, argv.clone(), pid, within.as_deref())
            .map_err(|e| (ErrorCode::Failed, format!("{e:#}")))?;
        // Nested in a scope the daemon's cgroup hooks do not reach (a stand-alone run's): they
        // are attached to the new run's own cgroup, so the daemon's policy holds its connects
        // too. Fails closed: no run without them.
        if let Some(path) = self.scopes.by_id.get(&id).map(|s| s.path.clone())
            && !self.scopes.hooks_hold(&path)
            && let Err(err) = self.core.enforcer_mut().attach_cgroup(&path)
        {
            return Err((
                ErrorCode::Failed,
                format!(
                    "the daemon's hooks could not be attached to the nested run's cgroup \
                     ({err:#}); the command was not started"
                ),
            ));
        }
        self.list_run_scope(id);
        if let Some(policy) = overlay_policy
            && let Err(err) = self.start_overlay(overlay, policy, id)
        {
            // Fails closed: the client starts nothing, and the scope ends with it.
            return Err((
                ErrorCode::Failed,
                format!(
                    "the overlay could not be put in force ({err:#}); the command was not started"
                ),
            ));
        }
        // Its prompted connects wait in the kernel for their answers, unless it asked not to.
        if hold
            && self.core.enforcer().holds_network()
            && let Err(err) = self.core.enforcer_mut().hold_scope(id)
        {
            tracing::warn!("run scope {id}'s prompted connects are refused at once: {err:#}");
        }
        let scope = self.scopes.by_id.get_mut(&id).expect("just inserted");
        scope.listener = stream.map(crate::daemon::run_stream::RunStream::new);
        let path = scope.path.display().to_string();
        self.audit.record(
            RecordType::Run,
            &user_name(peer.uid),
            json!({
                "pid": pid,
                "argv": argv,
                "scope": path,
                "cgroup_id": id,
                "overlay": overlay.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
                "nested_in": within.as_ref().map(|p| p.display().to_string()),
            }),
        );
        // The client holds the policy's write rules with Landlock on the command it starts
        // (it knows its own current folder and file system; the daemon's kernel programs do
        // not decide writes).
        let writes = crate::confine::WriteRules::of_policy(self.core.policy());
        // The sandbox is the client's to hold too: `[sandbox]`, else the rules' `sandbox(...)`.
        let sandbox = self
            .config
            .sandbox
            .setting()
            .ok()
            .flatten()
            .or_else(|| self.core.policy().sandbox().cloned());
        // Its refusals are reported when the client said where its roots are.
        if let (Some(setting), Some(workspace)) = (&sandbox, &workspace)
            && setting.mode.is_restricted()
        {
            let plan = SandboxPlan::new(
                setting.mode,
                workspace,
                tmpdir.as_deref(),
                &setting.writable,
            );
            match self.core.enforcer_mut().report_sandbox_refusals() {
                Ok(()) => {
                    if let Some(scope) = self.scopes.by_id.get_mut(&id) {
                        scope.sandbox = Some((plan, setting.from.clone()));
                    }
                }
                Err(err) => tracing::warn!(
                    "the writes the sandbox refuses cannot be reported: {err:#}; they still \
                     fail with EACCES"
                ),
            }
        }
        Ok(RunResponse {
            scope: path,
            cgroup_id: id,
            writes,
            sandbox,
            holds: held::hold_offer(self, id),
        })
    }

    /// Drains the kernel's events now, then says so on `stream` (after any `blocked` lines the
    /// drain produced, which go to the same stream).
    pub fn flush(&mut self, stream: &UnboundedSender<String>) {
        let events = self.events.drain();
        self.on_events(events);
        let now = Instant::now();
        for scope in self.scopes.by_id.values_mut() {
            if let Some(listener) = scope.listener.as_mut().filter(|l| l.is(stream)) {
                listener.settle(now, true);
            }
        }
        let _ = stream.send(stream_line(RunEvent::Flushed));
    }

    /// Ends a run's stream (its client closed); the scope itself ends when its processes are
    /// gone.
    pub fn detach_listener(&mut self, stream: &UnboundedSender<String>) {
        for scope in self.scopes.by_id.values_mut() {
            if scope.listener.as_ref().is_some_and(|l| l.is(stream)) {
                scope.listener = None;
            }
        }
    }
}

/// Where a run that `peer` asks for is made: below the caller's own cgroup when the caller
/// runs inside a guard scope (a run's, a stand-alone run's, a configured or matched cgroup's),
/// so that every program set that holds the caller holds the new run too (cgroup programs of
/// an ancestor run for its descendants, and the others find the caller's scope on the way
/// down), as do the caller's overlay, mount namespace, Landlock domain and seccomp filter, which
/// the new run's client inherits; root is no exception. From the host-wide scope or no scope:
/// the runs' parent. A caller whose cgroup cannot be read is refused (fails closed).
pub(super) fn run_within(
    scopes: &crate::daemon::scopes::Scopes,
    peer: &PeerCredentials,
) -> Result<Option<PathBuf>, (ErrorCode, String)> {
    let cgroup = peer
        .process
        .as_deref()
        .ok_or_else(|| anyhow!("the kernel named no process for this connection"))
        .and_then(crate::kernel::peer::PeerProcess::cgroup)
        .map_err(|err| {
            (
                ErrorCode::Unauthorized,
                format!(
                    "not authorized: the caller's scope cannot be told ({err:#}), so no run \
                     can be made that holds at least what holds it"
                ),
            )
        })?;
    Ok(match scopes.membership_of(&cgroup) {
        Membership::None | Membership::Host => None,
        _ => Some(cgroup),
    })
}

/// A run waiting for its overlay's evaluation.
pub struct PendingRun {
    pub(super) peer: PeerCredentials,
    pub(super) argv: Vec<String>,
    pub(super) folders: (Option<PathBuf>, Option<PathBuf>),
    pub(super) hold: bool,
    /// The overlay's files, as the client sent them.
    pub overlay: Vec<OverlayFile>,
    pub(super) stream: Option<UnboundedSender<String>>,
}
