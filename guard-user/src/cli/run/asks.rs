//! Asks of a stand-alone `guard run`: each `prompt` the kernel reports becomes an ask, and the
//! run answers `guard prompts`, `guard approve` and `guard deny` on a socket of its own
//! (`/run/guard/runs/PID.sock`, root only), the same protocol as the daemon's. An approval
//! `--once` / `--session` is held in the kernel maps of this run; `--always` appends the
//! amendment line to the run's rules file and puts the new policy in force at once, so the
//! program's retry succeeds.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::asks::answer::{ApprovalPlan, denial_line, plan_approval};
use crate::asks::event::{Asking, Taken};
use crate::asks::{Answerer, Approval, ApprovalMode, Ask, AskBook, AskState};
use crate::daemon::config::AskConfig;
use crate::daemon::peer::user_name;
use crate::daemon::wire::protocol::{
    ErrorCode, MAX_REQUEST_BYTES, Request, RequestLine, ResponseLine,
};
use crate::daemon::wire::responses::to_json;
use crate::daemon::wire::responses::{AmendmentApplied, ApproveResponse, DenyResponse};
use crate::kernel::events::KernelEvent;
use crate::policy::amend::append_line;
use crate::policy::approval::ApprovalPolicy;
use crate::policy::load::load_policy;
use crate::session::Session;

/// Where stand-alone runs put their sockets (`guard approve` looks here too).
pub const RUN_SOCKETS: &str = "/run/guard/runs";
/// How long one client may take to send its request line.
const REQUEST_WAIT: Duration = Duration::from_secs(2);
/// The most connections answered per call of [`RunAsks::serve`] (the rest wait for the next).
const MAX_PER_SERVE: usize = 16;

type Refusal = (ErrorCode, String);

pub struct RunAsks {
    book: AskBook,
    listener: UnixListener,
    path: PathBuf,
    rules: Vec<PathBuf>,
    overlays: Vec<PathBuf>,
    /// Where `--always` writes: the first `--rules` file (`default.rules` in it, for a folder).
    amendments: Option<PathBuf>,
    /// What the kernel holds is this approval policy's view of the rules (reloads keep it).
    approval: ApprovalPolicy,
    config: AskConfig,
    /// How many times an answer put a new policy in force.
    policies_applied: u64,
}

impl RunAsks {
    /// Listens on this run's socket. `rules` and `overlays` are what the policy was loaded
    /// from: an `--always` reloads them.
    pub fn open(
        rules: &[PathBuf],
        overlays: &[PathBuf],
        approval: ApprovalPolicy,
    ) -> Result<RunAsks> {
        let dir = Path::new(RUN_SOCKETS);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} root's alone", dir.display()))?;
        let path = dir.join(format!("{}.sock", std::process::id()));
        // A socket left by an earlier process with this pid (it was killed before cleaning up).
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)
            .with_context(|| format!("listening on {}", path.display()))?;
        listener.set_nonblocking(true)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let config = AskConfig::default();
        Ok(RunAsks {
            book: AskBook::new(config.dedupe(), config.timeout()),
            listener,
            path,
            rules: rules.to_vec(),
            overlays: overlays.to_vec(),
            amendments: rules.first().map(|first| {
                if first.is_dir() {
                    first.join("default.rules")
                } else {
                    first.clone()
                }
            }),
            approval,
            config,
            policies_applied: 0,
        })
    }

    /// How many times an answer put a new policy in force (what decides execs changed).
    pub fn policies_applied(&self) -> u64 {
        self.policies_applied
    }

    /// How long an ask waits for an answer before it expires (and is denied).
    pub fn timeout(&self) -> Duration {
        self.config.timeout()
    }

    pub fn socket(&self) -> &Path {
        &self.path
    }

    /// Takes `event` in this run: its line for the terminal, and its ask (see
    /// [`crate::asks::event::take`]).
    pub fn take(&mut self, session: &Session, event: &KernelEvent) -> Taken {
        take_in(session, Some(&mut self.book), self.approval, event)
    }

    /// How long ask `id` has left.
    pub fn expires_in(&self, id: u64) -> u64 {
        self.book
            .get(id, Instant::now())
            .and_then(|a| a.expires_in)
            .unwrap_or(0)
    }

    /// Where ask `id` stands (`None`: not in the book).
    pub fn state(&self, id: u64) -> Option<AskState> {
        self.book.get(id, Instant::now()).map(|ask| ask.state)
    }

    /// The ask `id` itself.
    pub fn ask(&self, id: u64) -> Option<Ask> {
        self.book.get(id, Instant::now())
    }

    /// Answers ask `id` from this run's own terminal: `Some(mode)` approves, `None` denies.
    /// Returns the line for the person, or why the answer cannot be given.
    pub fn answer_here(
        &mut self,
        session: &mut Session,
        id: u64,
        mode: Option<ApprovalMode>,
        by: &Answerer,
    ) -> Result<String, String> {
        let said = match mode {
            Some(mode) => self
                .approve(session, id, mode, None, by)
                .map(|(_, said)| said),
            None => self.deny(session, id, false, by).map(|(_, said)| said),
        };
        said.map_err(|(_, message)| message)
    }

    /// The asks whose time ran out since the last call (they are denied), and the `--once`
    /// approvals whose window closed are dropped from the kernel.
    pub fn expire(&mut self, session: &mut Session) -> Vec<Ask> {
        let now = Instant::now();
        if let Err(err) = session.expire_approvals(now) {
            eprintln!("guard: warning: an expired approval is still in force: {err:#}");
        }
        self.book.expire(now)
    }

    /// Answers the clients waiting on the socket; returns a line for the person running the
    /// command about each answer.
    pub fn serve(&mut self, session: &mut Session) -> Vec<String> {
        let mut said = Vec::new();
        for _ in 0..MAX_PER_SERVE {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(err) => {
                    said.push(format!("guard: warning: the ask socket: {err}"));
                    break;
                }
            };
            if let Some(line) = self.answer_client(session, stream) {
                said.push(line);
            }
        }
        said
    }

    fn answer_client(&mut self, session: &mut Session, stream: UnixStream) -> Option<String> {
        // Blocking with a bound: a request is one short line.
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(REQUEST_WAIT));
        let _ = stream.set_write_timeout(Some(REQUEST_WAIT));
        let mut writer = stream.try_clone().ok()?;
        let mut line = String::new();
        // One more byte than the limit, so a longer line is refused whole, never cut to fit.
        let read = BufReader::new(&stream)
            .take(MAX_REQUEST_BYTES as u64 + 1)
            .read_line(&mut line);
        let (response, said) = match read {
            Ok(_) if line.trim_end_matches('\n').len() > MAX_REQUEST_BYTES => (
                ResponseLine::error(
                    ErrorCode::BadRequest,
                    format!("request longer than {MAX_REQUEST_BYTES} bytes: refused whole"),
                ),
                None,
            ),
            Ok(_) => self.respond(session, &stream, &line),
            Err(err) => (
                ResponseLine::error(ErrorCode::BadRequest, format!("reading the request: {err}")),
                None,
            ),
        };
        let mut text = serde_json::to_string(&response).unwrap_or_default();
        text.push('\n');
        let _ = writer.write_all(text.as_bytes());
        said
    }

    fn respond(
        &mut self,
        session: &mut Session,
        stream: &UnixStream,
        line: &str,
    ) -> (ResponseLine, Option<String>) {
        let request = match serde_json::from_str::<RequestLine>(line) {
            Ok(request) => request.request,
            Err(err) => {
                return (
                    ResponseLine::error(
                        ErrorCode::BadRequest,
                        format!("not a request of this version: {err}"),
                    ),
                    None,
                );
            }
        };
        let by = match peer(stream, session) {
            Ok(by) => by,
            Err((code, message)) => return (ResponseLine::error(code, message), None),
        };
        let now = Instant::now();
        let result = match request {
            Request::Prompts => Ok((to_json(&self.book.pending(now)), None)),
            Request::Approve { id, mode, prefix } => self
                .approve(session, id, mode, prefix.as_deref(), &by)
                .map(|(response, said)| (to_json(&response), Some(said))),
            Request::Deny { id, always } => self
                .deny(session, id, always, &by)
                .map(|(response, said)| (to_json(&response), Some(said))),
            other => Err((
                ErrorCode::BadRequest,
                format!(
                    "a stand-alone `guard run` answers only prompts, approve and deny; `{}` is \
                     the daemon's",
                    other.action()
                ),
            )),
        };
        match result {
            Ok((value, said)) => (ResponseLine::ok(value), said),
            Err((code, message)) => (ResponseLine::error(code, message), None),
        }
    }

    fn pending(&self, id: u64) -> Result<Ask, Refusal> {
        self.book
            .pending_ask(id, Instant::now())
            .map_err(|err| (ErrorCode::from(&err), err.to_string()))
    }

    fn approve(
        &mut self,
        session: &mut Session,
        id: u64,
        mode: ApprovalMode,
        prefix: Option<&[String]>,
        by: &Answerer,
    ) -> Result<(ApproveResponse, String), Refusal> {
        let ask = self.pending(id)?;
        let failed = |m: String| (ErrorCode::Failed, m);
        let mut result = ApproveResponse {
            ask: id,
            mode,
            line: None,
        };
        let proposed = prefix.map(|p| (session.policy(), p));
        let plan = plan_approval(&ask, mode, session.image(), proposed).map_err(failed)?;
        match plan {
            ApprovalPlan::Append(line) => {
                result.line = Some(self.append_and_apply(session, &line)?);
            }
            ApprovalPlan::Hold(target) => {
                let once = (self.config.once(), Instant::now());
                let approval = Approval::answering(&ask, mode, by, target, once);
                session
                    .hold_approval(approval)
                    .map_err(|e| failed(format!("cannot approve ask {id}: {e:#}")))?;
            }
        }
        let state = AskState::Approved {
            mode,
            by: by.name.clone(),
        };
        self.book.resolve(id, state, Instant::now());
        let said = format!(
            "guard: ask {id} approved {} by {}{}",
            mode.as_str(),
            by.name,
            written(result.line.as_ref())
        );
        Ok((result, said))
    }

    fn deny(
        &mut self,
        session: &mut Session,
        id: u64,
        always: bool,
        by: &Answerer,
    ) -> Result<(DenyResponse, String), Refusal> {
        let ask = self.pending(id)?;
        let mut result = DenyResponse {
            ask: id,
            always,
            line: None,
        };
        if let Some(line) = denial_line(&ask, always).map_err(|e| (ErrorCode::Failed, e))? {
            result.line = Some(self.append_and_apply(session, &line)?);
        }
        let state = AskState::Denied {
            always,
            by: by.name.clone(),
        };
        self.book.resolve(id, state, Instant::now());
        let said = format!(
            "guard: ask {id} denied by {}{}",
            by.name,
            written(result.line.as_ref())
        );
        Ok((result, said))
    }

    /// Appends `line` to the run's rules file (under its lock, deduplicated), loads the policy
    /// again and puts it in force. A policy that no longer loads keeps the old one in force.
    fn append_and_apply(
        &mut self,
        session: &mut Session,
        line: &str,
    ) -> Result<AmendmentApplied, Refusal> {
        let Some(file) = &self.amendments else {
            return Err((
                ErrorCode::Failed,
                "this run has no rules file to write an amendment to (its policy is the \
                 default one): approve it --once or --session, or run with --rules FILE"
                    .to_string(),
            ));
        };
        let outcome = append_line(file, line).map_err(|e| (ErrorCode::Failed, e.to_string()))?;
        let applied = load_policy(&self.rules, &self.overlays)
            .map_err(|e| e.to_string())
            .and_then(|loaded| {
                session
                    .replace_policy(self.approval.kernel_policy(loaded.policy))
                    .map_err(|e| format!("{e:#}"))
            });
        if applied.is_ok() {
            self.policies_applied += 1;
        }
        Ok(AmendmentApplied::new(file, line, outcome, applied))
    }
}

/// Takes `event` in `session`'s scope, asked in `book` (`None`: nothing can answer it).
pub fn take_in(
    session: &Session,
    book: Option<&mut AskBook>,
    approval: ApprovalPolicy,
    event: &KernelEvent,
) -> Taken {
    let answered = event
        .destination
        .as_ref()
        .map(|d| session.hosts_of(d.address))
        .unwrap_or_default();
    let asking = Asking {
        book,
        approval,
        scope: (session.scope().id(), true),
    };
    let sandbox_line = session.sandbox_refusal(event);
    crate::asks::event::take(
        session.image(),
        event,
        &answered,
        sandbox_line,
        asking,
        Instant::now(),
    )
}

impl Drop for RunAsks {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `; appended to R: LINE` when an answer wrote a line.
fn written(line: Option<&AmendmentApplied>) -> String {
    line.map(|l| format!("; appended to {}: {}", l.file, l.line))
        .unwrap_or_default()
}

/// Who is asking, from the kernel (SO_PEERCRED, and the peer process by its pidfd): root, from
/// outside this run's scope (a guarded process may not answer its own asks). A peer whose
/// cgroup cannot be read (it exited, say, right after it connected) is taken as inside.
fn peer(stream: &UnixStream, session: &Session) -> Result<Answerer, Refusal> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    use std::os::fd::AsFd;
    let refused = |m: String| (ErrorCode::Unauthorized, m);
    let cred = getsockopt(stream, PeerCredentials)
        .map_err(|e| refused(format!("no credentials for the peer: {e}")))?;
    if cred.uid() != 0 {
        return Err(refused(format!(
            "not authorized: uid {} may not answer a `guard run`'s asks (run it as root)",
            cred.uid()
        )));
    }
    let cgroup = crate::kernel::peer::PeerProcess::of(stream.as_fd())
        .map_err(anyhow::Error::from)
        .and_then(|process| process.cgroup());
    match cgroup {
        Ok(cgroup) if !cgroup.starts_with(session.scope().path()) => {}
        Ok(_) => {
            return Err(refused(format!(
                "not authorized: pid {} runs inside this run's scope: a guarded process may \
                 not answer its own asks; answer from outside it",
                cred.pid()
            )));
        }
        Err(err) => {
            return Err(refused(format!(
                "not authorized: pid {} cannot be told to be outside this run's scope ({err:#}): \
                 answer from a process that stays connected",
                cred.pid()
            )));
        }
    }
    Ok(Answerer {
        name: user_name(cred.uid()),
        uid: cred.uid(),
    })
}
