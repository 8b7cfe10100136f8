//! Prompted execs and connects of a stand-alone `guard run` that wait for the answer (see
//! [`crate::hold`]): each becomes an ask of this run and is put to the person at the terminal
//! (`/dev/tty`), as sudo does, with once / session / always / deny keys; `guard approve` from
//! another terminal answers it too. Approved, the call continues (the approval is in the kernel
//! maps first); denied or expired (`[asks] timeout_secs`), it fails as the kernel's refusal
//! would (EACCES for an exec, EPERM for a connect) and the program's stderr gets the
//! blocked-request message. Without a terminal nothing is held: a prompt is refused at once.
//!
//! Connects and sends the kernel holds ([`crate::kernel::Enforcer::hold_network`]) are asked
//! here too: the program waits as on a slow network, with its own timeouts; an approval lets
//! its next SYN out, a denial or expiry ends its socket ([`HeldSocket::step`]).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::Arc;

use nix::sys::termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios};

use crate::asks::{Answerer, ApprovalMode, AskState};
use crate::compile::kernel_engine::KernelEngine;
use crate::hold::event::held_event;
use crate::hold::sockets::{HeldOutcome, HeldSocket};
use crate::hold::splice::SpliceListener;
use crate::hold::{HeldCall, Hold, Reply};
use crate::session::Session;

use super::asks::RunAsks;

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
    held: HeldCall,
}

/// The held calls of a run, and the terminal they are asked on.
pub struct HeldCalls {
    /// The seccomp hold of prompted execs (and connects, where the kernel does not hold them).
    hold: Option<Hold>,
    terminal: Terminal,
    waiting: Vec<Waiting>,
    /// Connects and sends the kernel holds.
    sockets: Vec<HeldSocket>,
    /// Where held connects to stand-in addresses wait.
    splices: Option<SpliceListener>,
    /// [`RunAsks::policies_applied`] when the hold last took the policy.
    policies_seen: u64,
}

impl HeldCalls {
    pub fn new(hold: Option<Hold>, terminal: Terminal) -> HeldCalls {
        HeldCalls {
            hold,
            terminal,
            waiting: Vec::new(),
            sockets: Vec::new(),
            splices: None,
            policies_seen: 0,
        }
    }

    pub fn hold(&self) -> Option<&Hold> {
        self.hold.as_ref()
    }

    pub fn hold_mut(&mut self) -> Option<&mut Hold> {
        self.hold.as_mut()
    }

    /// The splice listener held connects to stand-in addresses wait at.
    pub fn take_splices(&mut self, splices: SpliceListener) {
        self.splices = Some(splices);
    }

    /// Connects the kernel holds, each with its ask (from the run's events).
    pub fn take_sockets(&mut self, sockets: Vec<HeldSocket>) {
        self.sockets.extend(sockets);
    }

    /// Takes the calls held since the last call, reads the terminal, and lets each waiting
    /// call go on or fail as its ask was answered.
    pub fn step(&mut self, session: &mut Session, asks: &mut RunAsks) {
        let taken = self.hold.as_ref().map(Hold::take_held).unwrap_or_default();
        for held in taken {
            self.take(session, asks, held);
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
        self.settle_sockets(session, asks);
        // An `--always` answer (here or on the socket) wrote a rule: later calls are decided by
        // the new policy, so the call it allows is not held again.
        if asks.policies_applied() != self.policies_seen {
            self.policies_seen = asks.policies_applied();
            self.image_changed(session);
        }
        let pending = |id: &u64| asks.state(*id).is_some_and(|s| s == AskState::Pending);
        if self.terminal.question.is_none()
            && let Some(next) = self
                .waiting
                .iter()
                .map(|w| w.ask)
                .chain(self.sockets.iter().map(|s| s.ask))
                .find(pending)
            && let Some(ask) = asks.ask(next)
        {
            let always = ask.answers().contains("always");
            self.terminal.ask(ask.id, &ask.message, always);
        }
    }

    fn take(&mut self, session: &mut Session, asks: &mut RunAsks, held: HeldCall) {
        let approved = session
            .approvals()
            .list()
            .iter()
            .any(|a| held.approved_by(&a.target));
        if approved {
            self.reply(held.id, Reply::Continue);
            return;
        }
        let event = held_event(session.image(), session.scope().id(), &held);
        let taken = asks.take(session, &event);
        if taken.rejected.is_some() {
            self.fail(&held, &taken.line);
            return;
        }
        let (Some(id), Some(answers)) = (taken.ask, taken.answers) else {
            // Nothing can answer it: the kernel decides (and refuses) as without the hold.
            self.reply(held.id, Reply::Continue);
            return;
        };
        if taken.new_ask {
            // It is not refused (yet): it waits.
            eprintln!(
                "{}",
                taken.line.replacen("guard: refused ", "guard: holding ", 1)
            );
            eprintln!(
                "guard: ask {id}: the command waits for the answer here, or from another \
                 terminal with `sudo guard approve {id} {answers}` or `sudo guard deny {id}` \
                 (it expires in {}s)",
                asks.expires_in(id),
            );
        }
        self.waiting.push(Waiting { ask: id, held });
    }

    /// Answers the held execs whose ask was answered, and lets go of those whose program gave
    /// up (their ask stays open).
    fn settle(&mut self, session: &Session, asks: &RunAsks) {
        let mut still = Vec::new();
        for waiting in std::mem::take(&mut self.waiting) {
            let waits = self
                .hold
                .as_ref()
                .is_some_and(|hold| hold.still_waiting(waiting.held.id));
            match HeldOutcome::of_answer(asks.state(waiting.ask).as_ref(), waits) {
                None => still.push(waiting),
                Some(HeldOutcome::GivenUp) => {}
                // The approval is in the kernel maps already: the BPF programs allow it.
                Some(HeldOutcome::Approved) => self.reply(waiting.held.id, Reply::Continue),
                Some(outcome) => {
                    let event = held_event(session.image(), session.scope().id(), &waiting.held);
                    let refusal = session.describe(&event);
                    if let Some(line) = outcome.refusal_line(&refusal, waiting.ask) {
                        self.fail(&waiting.held, &line);
                    }
                }
            }
        }
        self.waiting = still;
    }

    /// The connects the kernel holds whose ask was answered (or whose program gave up): an
    /// approved one goes on by itself, a denied or expired one is ended, with the message on
    /// the program's stderr.
    fn settle_sockets(&mut self, session: &mut Session, asks: &RunAsks) {
        let mut still = Vec::new();
        for mut socket in std::mem::take(&mut self.sockets) {
            let state = asks.state(socket.ask);
            match socket.step(
                session.enforcer_mut(),
                state.as_ref(),
                self.splices.as_mut(),
            ) {
                Ok(None) => still.push(socket),
                Ok(Some(outcome)) => {
                    if let Some(line) = outcome.refusal_line(&socket.refusal, socket.ask)
                        && !crate::hold::tell_stderr(socket.pid, &line)
                    {
                        eprintln!("{line}");
                    }
                }
                Err(err) => eprintln!("guard: a held connect: {err:#}"),
            }
        }
        self.sockets = still;
    }

    /// The kernel's image changed (a policy, DNS answers): later calls are decided by it.
    pub fn image_changed(&self, session: &Session) {
        let Some(hold) = &self.hold else {
            return;
        };
        match KernelEngine::new(session.image().clone()) {
            Ok(engine) => hold.set_engine(&Arc::new(engine), session.resolver_port().is_some()),
            Err(err) => {
                eprintln!(
                    "guard: note: held calls are still decided by the previous policy: {err:#}"
                )
            }
        }
    }

    /// Fails a held call as the kernel's refusal would, and says why on the program's stderr,
    /// or on guard's when the program's cannot be written.
    fn fail(&self, held: &HeldCall, message: &str) {
        if !crate::hold::tell_stderr(held.pid, message) {
            eprintln!("{message}");
        }
        self.reply(held.id, Reply::Fail(held.refusal_errno()));
    }

    /// Answers held call `id` (only the seccomp hold holds calls that wait in their syscall).
    fn reply(&self, id: u64, reply: Reply) {
        if let Some(hold) = &self.hold {
            let _ = hold.reply(id, reply);
        }
    }
}
