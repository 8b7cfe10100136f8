//! Prompted execs of a stand-alone `guard run` that wait for the answer (see [`crate::hold`]):
//! each becomes an ask of this run and is put to the person at the terminal (`/dev/tty`), as
//! sudo does, with once / session / always / deny keys; `guard approve` from another terminal
//! answers it too. Approved, the exec continues (the approval is in the kernel maps first);
//! denied or expired (`[asks] timeout_secs`), it fails with EACCES and the program's stderr gets
//! the blocked-request message. Without a terminal nothing is held: a prompt is refused at once.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::SystemTime;

use nix::sys::termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios};

use crate::asks::{Answerer, ApprovalMode, ApprovalTarget, AskState};
use crate::hold::{HeldExec, Hold, Reply};
use crate::kernel::events::{Action, EventKind, KernelEvent};
use crate::policy::Decision;
use crate::policy::approval::{ApprovalPolicy, prompt_rejection};
use crate::session::Session;

use super::run_asks::RunAsks;

/// The terminal the run asks on.
pub struct Terminal {
    file: File,
    /// How it was before a question put it in single-key mode.
    saved: Termios,
    /// The ask being put now, and whether `a` (always) is one of its answers.
    question: Option<(u64, bool)>,
}

impl Terminal {
    /// The run's controlling terminal; `None` without one (a service, a pipe, CI).
    pub fn open() -> Option<Terminal> {
        let file = File::options()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .ok()?;
        let saved = termios::tcgetattr(file.as_fd()).ok()?;
        Some(Terminal {
            file,
            saved,
            question: None,
        })
    }

    fn ask(&mut self, id: u64, message: &str, always: bool) {
        let keys = if always {
            "[o]nce, [s]ession, [a]lways, [d]eny"
        } else {
            "[o]nce, [s]ession, [d]eny"
        };
        let _ = write!(
            self.file,
            "\r\nguard: ask {id}: {message}\r\nguard: allow it? {keys}: "
        );
        // One key at a time, not echoed, and a read that never blocks the run's loop.
        let mut single = self.saved.clone();
        single
            .local_flags
            .remove(LocalFlags::ICANON | LocalFlags::ECHO);
        single.control_chars[SpecialCharacterIndices::VMIN as usize] = 0;
        single.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        let _ = termios::tcsetattr(self.file.as_fd(), SetArg::TCSANOW, &single);
        self.question = Some((id, always));
    }

    /// The answer typed since the last call: `Some(Some(mode))` approves, `Some(None)` denies.
    fn answer(&mut self) -> Option<Option<ApprovalMode>> {
        let (_, always) = self.question?;
        let mut key = [0u8];
        loop {
            match self.file.read(&mut key) {
                Ok(1) => {}
                _ => return None,
            }
            let answer = match key[0].to_ascii_lowercase() {
                b'o' | b'y' => Some(ApprovalMode::Once),
                b's' => Some(ApprovalMode::Session),
                b'a' if always => Some(ApprovalMode::Always),
                b'd' | b'n' => None,
                // Any other key is not an answer.
                _ => continue,
            };
            return Some(answer);
        }
    }

    /// The question ended (answered here or elsewhere): the terminal is as it was.
    fn done(&mut self, said: &str) {
        let _ = termios::tcsetattr(self.file.as_fd(), SetArg::TCSANOW, &self.saved);
        let _ = write!(self.file, "\r\n{said}\r\n");
        self.question = None;
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(self.file.as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

struct Waiting {
    ask: u64,
    held: HeldExec,
    answers_always: bool,
}

/// The held execs of a run, and the terminal they are asked on.
pub struct HeldCalls {
    hold: Hold,
    terminal: Terminal,
    waiting: Vec<Waiting>,
    /// [`RunAsks::policies_applied`] when the hold last took the policy.
    policies_seen: u64,
}

impl HeldCalls {
    pub fn new(hold: Hold, terminal: Terminal) -> HeldCalls {
        HeldCalls {
            hold,
            terminal,
            waiting: Vec::new(),
            policies_seen: 0,
        }
    }

    pub fn hold(&self) -> &Hold {
        &self.hold
    }

    pub fn hold_mut(&mut self) -> &mut Hold {
        &mut self.hold
    }

    /// Takes the execs held since the last call, reads the terminal, and lets each waiting exec
    /// go on or fail as its ask was answered.
    pub fn step(&mut self, session: &mut Session, asks: &mut RunAsks, approval: ApprovalPolicy) {
        for held in self.hold.take_held() {
            self.take(session, asks, approval, held);
        }
        if let Some((id, _)) = self.terminal.question {
            if let Some(answer) = self.terminal.answer() {
                // The person at the terminal: who ran sudo, else the run's own user.
                // SAFETY: getuid has no preconditions.
                let uid = unsafe { libc::getuid() };
                let who = std::env::var("SUDO_USER")
                    .unwrap_or_else(|_| crate::daemon::peer::user_name(uid));
                let by = Answerer {
                    name: format!("{who} at the terminal"),
                    uid,
                };
                let said = asks
                    .answer_here(session, id, answer, &by)
                    .unwrap_or_else(|why| format!("guard: ask {id}: {why}"));
                self.terminal.done(&said);
            } else if !asks.state(id).is_some_and(|s| s == AskState::Pending) {
                self.terminal
                    .done(&format!("guard: ask {id} was answered elsewhere"));
            }
        }
        self.settle(session, asks);
        // An `--always` answer (here or on the socket) wrote a rule: later execs are decided by
        // the new policy, so the exec it allows is not held again.
        if asks.policies_applied() != self.policies_seen {
            self.policies_seen = asks.policies_applied();
            self.hold.set_policy(session.policy().clone());
        }
        if self.terminal.question.is_none()
            && let Some(next) = self
                .waiting
                .iter()
                .find(|w| asks.state(w.ask).is_some_and(|s| s == AskState::Pending))
            && let Some(ask) = asks.ask(next.ask)
        {
            self.terminal.ask(ask.id, &ask.message, next.answers_always);
        }
    }

    fn take(
        &mut self,
        session: &mut Session,
        asks: &mut RunAsks,
        approval: ApprovalPolicy,
        held: HeldExec,
    ) {
        let event = held_event(session, &held);
        let message = session.describe(&event);
        if let Some(reason) = prompt_rejection(approval, held.decision.rule.is_some()) {
            self.fail(&held, &format!("{message}; {reason}"));
            return;
        }
        let tokens = tokens_of(&held);
        let approved = session.approvals().list().iter().any(|a| {
            matches!(&a.target, ApprovalTarget::Exec { tokens: approved } if *approved == tokens)
        });
        if approved {
            let _ = self.hold.reply(held.id, Reply::Continue);
            return;
        }
        let Some(asked) = asks.record(session, &event) else {
            // Nothing can answer it: the kernel decides (and refuses) as without the hold.
            let _ = self.hold.reply(held.id, Reply::Continue);
            return;
        };
        if asked.new {
            // It is not refused (yet): it waits.
            eprintln!(
                "{}",
                message.replacen("guard: refused ", "guard: holding ", 1)
            );
            eprintln!(
                "guard: ask {id}: the command waits for the answer here, or from another \
                 terminal with `sudo guard approve {id} {}` or `sudo guard deny {id}` (it \
                 expires in {}s)",
                asked.answers,
                asked.expires_in,
                id = asked.id
            );
        }
        self.waiting.push(Waiting {
            ask: asked.id,
            held,
            answers_always: asked.answers.contains("always"),
        });
    }

    /// Answers the held execs whose ask was answered (or whose process went).
    fn settle(&mut self, session: &Session, asks: &RunAsks) {
        let mut still = Vec::new();
        for waiting in std::mem::take(&mut self.waiting) {
            match asks.state(waiting.ask) {
                Some(AskState::Pending) => still.push(waiting),
                Some(AskState::Approved { .. }) => {
                    // The approval is in the kernel maps already: the BPF programs allow it.
                    let _ = self.hold.reply(waiting.held.id, Reply::Continue);
                }
                state => {
                    let how = match state {
                        Some(AskState::Expired) => "expired unanswered",
                        _ => "was denied",
                    };
                    let event = held_event(session, &waiting.held);
                    let message =
                        format!("{}; ask {} {how}", session.describe(&event), waiting.ask);
                    self.fail(&waiting.held, &message);
                }
            }
        }
        self.waiting = still;
    }

    /// Fails a held exec with EACCES, and says why on the program's stderr and guard's.
    fn fail(&self, held: &HeldExec, message: &str) {
        let _ = self.hold.reply(held.id, Reply::Fail(libc::EACCES));
        eprintln!("{message}");
        if let Ok(mut stderr) = File::options()
            .append(true)
            .open(format!("/proc/{}/fd/2", held.pid))
        {
            let _ = writeln!(stderr, "{message}");
        }
    }
}

/// What an approval of `held` holds: the executed file's name, then `argv[1..]`.
fn tokens_of(held: &HeldExec) -> Vec<String> {
    let name = held
        .call
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::iter::once(name)
        .chain(held.call.argv.iter().skip(1).cloned())
        .collect()
}

/// The kernel event the exec would have made, had it not been held: the ask, its message and
/// its record are made from it as from any other.
fn held_event(session: &Session, held: &HeldExec) -> KernelEvent {
    let proc = format!("/proc/{}", held.pid);
    let comm = std::fs::read_to_string(format!("{proc}/comm")).unwrap_or_default();
    let ppid = std::fs::read_to_string(format!("{proc}/stat"))
        .ok()
        .and_then(|stat| {
            // After the `(comm)` field, which may hold spaces: state, then ppid.
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0);
    let (uid, gid) = std::fs::metadata(&proc)
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.uid(), m.gid())
        })
        .unwrap_or((0, 0));
    let rule = held.decision.rule.as_ref().and_then(|text| {
        let rules = &session.image().rules;
        rules.iter().position(|r| &r.text == text).map(|i| i as u32)
    });
    KernelEvent {
        time: SystemTime::now(),
        kind: EventKind::Exec,
        decision: Decision::Prompt,
        action: Action::Eacces,
        audit_only: false,
        unmatched: held.decision.rule.is_none(),
        rule,
        pid: held.pid,
        tgid: held.pid,
        ppid,
        uid,
        gid,
        cgroup_id: session.scope().id(),
        comm: comm.trim_end().to_string(),
        exe: held.call.file.to_string_lossy().into_owned(),
        argv: held.call.argv.clone(),
        argv_truncated: false,
        anonymous: false,
        dev: 0,
        ino: 0,
        destination: None,
        path: None,
        socket: None,
        sandbox: None,
    }
}
