//! Holding a prompted exec until someone answers, instead of killing it.
//!
//! A seccomp filter ([`filter`]) hands each `execve`/`execveat` of the command to a supervisor
//! thread before the kernel runs it. The thread reads the call ([`call`]) and asks the
//! userspace twin of the kernel's exec decision ([`ExecTwin`]): a call that is not a `prompt`
//! continues at once; a prompted one is passed to the run ([`Hold::take_held`]), which raises an
//! ask and answers the call when the ask is answered ([`Hold::reply`]). An approval is put in
//! the kernel maps before the call continues, so the BPF programs still decide what really
//! runs, from the kernel's own copy of the arguments (a call changed after it was read is
//! decided on what it became).
//!
//! Fails open to the kernel: a call the thread cannot read, or one it finds not prompted,
//! continues and the BPF programs decide it as they always do (a prompt the twin missed is
//! refused there, as without the hold).

pub mod call;
pub mod filter;
pub mod listener;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::compile::{ExecTwin, KernelExecDecision};
use crate::policy::rule_set::Tool;
use crate::policy::{Decision, Policy};

pub use call::ExecCall;
pub use filter::ChildEnd;
pub use listener::Reply;
use listener::{Listener, Notification};

/// A prompted exec, waiting in its syscall for an answer.
#[derive(Clone, Debug)]
pub struct HeldExec {
    /// The seccomp notification id (what [`Hold::reply`] answers).
    pub id: u64,
    pub pid: u32,
    pub call: ExecCall,
    /// The twin's decision: a `prompt`, and the rule that made it (`None`: the unmatched
    /// default).
    pub decision: KernelExecDecision,
    pub since: Instant,
}

/// The run's side of the hold.
pub struct Hold {
    listener: Arc<OnceLock<Listener>>,
    twin: Arc<RwLock<ExecTwin>>,
    held: Receiver<HeldExec>,
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    child_socket: Option<OwnedFd>,
}

impl Hold {
    /// Starts the supervisor; give [`Hold::child_end`] to the command's `pre_exec`, and call
    /// [`Hold::started`] once it runs.
    pub fn start(policy: Policy) -> io::Result<Hold> {
        let (guard_end, child_socket) = filter::socket_pair()?;
        // SAFETY: a new eventfd, owned here alone.
        let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if stop < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just made.
        let stop = unsafe { OwnedFd::from_raw_fd(stop) };
        let listener = Arc::new(OnceLock::new());
        let twin = Arc::new(RwLock::new(ExecTwin::new(policy)));
        let (sender, held) = channel();
        let supervisor = Supervisor {
            listener: listener.clone(),
            twin: twin.clone(),
            held: sender,
            stop: stop.as_raw_fd(),
        };
        let thread = std::thread::Builder::new()
            .name("guard-hold".into())
            .spawn(move || supervisor.run(guard_end))?;
        Ok(Hold {
            listener,
            twin,
            held,
            stop,
            thread: Some(thread),
            child_socket: Some(child_socket),
        })
    }

    /// What the command's `pre_exec` runs (see [`ChildEnd::install_from_pre_exec`]).
    pub fn child_end(&self) -> Option<ChildEnd> {
        self.child_socket.as_ref().map(ChildEnd::new)
    }

    /// The command started (or failed to): guard's copy of the child's end closes, so a child
    /// that never sent its listener ends the supervisor.
    pub fn started(&mut self) {
        self.child_socket = None;
    }

    /// The prompted execs that arrived since the last call.
    pub fn take_held(&self) -> Vec<HeldExec> {
        self.held.try_iter().collect()
    }

    /// Answers a held exec.
    pub fn reply(&self, id: u64, reply: Reply) -> io::Result<()> {
        match self.listener.get() {
            Some(listener) => listener.reply(id, reply),
            None => Ok(()),
        }
    }

    /// The policy changed (an amendment): later execs are decided by it.
    pub fn set_policy(&self, policy: Policy) {
        let twin = ExecTwin::new(policy);
        if let Ok(mut slot) = self.twin.write() {
            *slot = twin;
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let one = 1u64;
        // SAFETY: an eventfd takes an 8-byte write.
        unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        self.child_socket = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether holding is worth a filter: the policy asks about some exec (a `prompt` rule or
/// the unmatched default).
pub fn policy_prompts_execs(policy: &Policy) -> bool {
    policy.enforcement().unmatched_exec == Decision::Prompt
        || policy
            .prefix_rules()
            .iter()
            .any(|rule| rule.decision == Decision::Prompt)
        || policy.rule_sets().iter().any(|set| {
            set.tiers().iter().any(|(decision, patterns)| {
                *decision == Decision::Prompt && patterns.iter().any(|p| p.covers_tool(Tool::Exec))
            })
        })
}

struct Supervisor {
    listener: Arc<OnceLock<Listener>>,
    twin: Arc<RwLock<ExecTwin>>,
    held: Sender<HeldExec>,
    stop: i32,
}

impl Supervisor {
    fn run(self, end: filter::GuardEnd) {
        let listener = match end.receive() {
            Ok(Some(fd)) => Listener::new(fd),
            // The child failed before its exec (and said why) or guard's end went.
            Ok(None) | Err(_) => return,
        };
        let listener = self.listener.get_or_init(|| listener);
        // The first held call is the command's own exec, made while guard waits in its spawn
        // and cannot ask: it continues, and the kernel decides it as without the hold.
        let mut first = true;
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: listener.raw(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.stop,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if ready < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return;
            }
            if fds[1].revents != 0 {
                return;
            }
            if fds[0].revents & libc::POLLIN == 0 {
                // POLLHUP: no process is left under the filter.
                return;
            }
            match listener.receive() {
                Ok(Some(notification)) if first => {
                    first = false;
                    let _ = listener.reply(notification.id, Reply::Continue);
                }
                Ok(Some(notification)) => self.decide(listener, notification),
                Ok(None) => {}
                Err(_) => return,
            }
        }
    }

    /// Continues a call that is not prompted; passes a prompted one to the run.
    fn decide(&self, listener: &Listener, notification: Notification) {
        let exec = call::read_exec(&notification).ok().flatten();
        // Read from a process that is gone: its pid may name another one now.
        if !listener.still_waiting(notification.id) {
            return;
        }
        let decision = exec.as_ref().and_then(|exec| {
            let twin = self.twin.read().ok()?;
            let decision = twin.decide(&exec.file, &exec.argv);
            (decision.decision == Decision::Prompt).then_some(decision)
        });
        let (Some(exec), Some(decision)) = (exec, decision) else {
            let _ = listener.reply(notification.id, Reply::Continue);
            return;
        };
        let held = HeldExec {
            id: notification.id,
            pid: notification.pid,
            call: exec,
            decision,
            since: Instant::now(),
        };
        if self.held.send(held).is_err() {
            // The run is ending: the kernel decides (and refuses the prompt) as without a hold.
            let _ = listener.reply(notification.id, Reply::Continue);
        }
    }
}
