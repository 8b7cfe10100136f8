//! Holding a prompted exec or connect until someone answers, instead of refusing it.
//!
//! A seccomp filter ([`filter`]) hands each `execve`/`execveat`, and each call that names a
//! destination (`connect`, `sendmsg`, `sendmmsg`, an addressed `sendto`), of the command to a
//! supervisor thread before the kernel runs it. The thread reads the call ([`call`],
//! [`connect`]) and asks the userspace twin of the kernel's decision ([`Twins`]): a call that
//! is not a `prompt` continues at once; a prompted one is passed on ([`Hold::take_held`]) to
//! the run (stand-alone) or the daemon, which raises an ask and answers the call when the ask
//! is answered ([`Hold::reply`]). An approval is put in the kernel maps before the call
//! continues, so the BPF programs still decide what really runs or connects, from the kernel's
//! own copy of the arguments (a call changed after it was read is decided on what it became).
//!
//! Fails open to the kernel: a call the thread cannot read, or one it finds not prompted,
//! continues and the BPF programs decide it as they always do (a prompt the twin missed is
//! refused there, as without the hold).
//!
//! Connects and sends are cheaper to hold in the kernel, which `guard run` and the daemon do:
//! the call goes on as on a slow network and only its packets wait ([`sockets`]; a connect to a
//! stand-in waits at [`splice`]). So their filters hold execs alone; holding connects here is
//! kept for a caller that has no kernel hold.

pub mod call;
pub mod connect;
pub mod event;
pub mod filter;
pub mod listener;
pub mod sockets;
pub mod splice;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::asks::ApprovalTarget;
use crate::compile::kernel_engine::KernelEngine;
use crate::compile::{
    DestinationTwin, EnforcementImage, ExecTwin, KernelDestinationDecision, KernelExecDecision,
};
use crate::policy::rule_set::Tool;
use crate::policy::{Decision, Policy, Transport};

pub use call::ExecCall;
pub use connect::ConnectCall;
pub use filter::{ChildEnd, HeldSyscalls};
pub use listener::Reply;
use listener::{Listener, Notification};

/// What a held call asks for, and the twin's decision on it (a `prompt`).
#[derive(Clone, Debug)]
pub enum HeldRequest {
    Exec {
        call: ExecCall,
        /// The rule that made it (`None`: the unmatched default).
        decision: KernelExecDecision,
    },
    Connect {
        call: ConnectCall,
        decision: KernelDestinationDecision,
    },
}

/// A prompted call, waiting in its syscall for an answer.
#[derive(Clone, Debug)]
pub struct HeldCall {
    /// The seccomp notification id (what [`Hold::reply`] answers).
    pub id: u64,
    pub pid: u32,
    pub request: HeldRequest,
    pub since: Instant,
}

impl HeldCall {
    /// What the call fails with when its ask is denied or expires: what the kernel's refusal
    /// of the same call gives (EACCES for an exec, EPERM for a connect or send).
    pub fn refusal_errno(&self) -> i32 {
        match self.request {
            HeldRequest::Exec { .. } => libc::EACCES,
            HeldRequest::Connect { .. } => libc::EPERM,
        }
    }

    /// Whether an approval already allows this call (an exec approved with the same tokens, a
    /// destination approved exactly): the kernel lets it through, so it is not asked.
    pub fn approved_by(&self, target: &ApprovalTarget) -> bool {
        match (target, &self.request) {
            (ApprovalTarget::Exec { tokens }, HeldRequest::Exec { call, .. }) => {
                *tokens == call.tokens()
            }
            (
                ApprovalTarget::Network {
                    address,
                    port,
                    transport,
                    ..
                },
                HeldRequest::Connect { call, .. },
            ) => {
                *address == crate::policy::rule::canonical_ip(call.address)
                    && *port == call.port
                    && transport.covers(call.transport)
            }
            _ => false,
        }
    }

    /// A prompt rule decided (not the unmatched default).
    pub fn by_rule(&self) -> bool {
        match &self.request {
            HeldRequest::Exec { decision, .. } => decision.rule.is_some(),
            HeldRequest::Connect { decision, .. } => decision.rule.is_some(),
        }
    }
}

/// The userspace twins of the kernel's decisions the supervisor asks; `None`: calls of that
/// kind are not held (the filter does not catch them).
#[derive(Default)]
pub struct Twins {
    pub exec: Option<ExecTwin>,
    pub destinations: Option<DestinationTwin>,
    /// The scope whose calls they decide: only its approvals count, as in the kernel (`None`:
    /// every approval, for a session's one scope).
    pub scope: Option<u64>,
    /// The twins of the run's overlay (`guard run --overlay`), decided beside these as its
    /// program set is beside the daemon's: an exec is held when the stronger decision of the
    /// two is `prompt`.
    pub overlay: Option<Box<Twins>>,
}

impl Twins {
    /// The twins of `image`, for execs (`exec`) and destinations (`network`); DNS is decided by
    /// guard's resolver when `dns_redirected`. `Err` for an image the kernel would refuse.
    pub fn of_image(
        image: &EnforcementImage,
        exec: bool,
        network: bool,
        dns_redirected: bool,
    ) -> anyhow::Result<Twins> {
        if !exec && !network {
            return Ok(Twins::default());
        }
        let engine = Arc::new(KernelEngine::new(image.clone())?);
        Ok(Twins::of_engine(&engine, exec, network, dns_redirected))
    }

    /// [`Twins::of_image`] over an engine already made (one engine serves every hold).
    pub fn of_engine(
        engine: &Arc<KernelEngine>,
        exec: bool,
        network: bool,
        dns_redirected: bool,
    ) -> Twins {
        Twins {
            exec: exec.then(|| ExecTwin::new(engine.clone())),
            destinations: network.then(|| DestinationTwin::new(engine.clone(), dns_redirected)),
            scope: None,
            overlay: None,
        }
    }

    /// The same twins deciding for `scope` (a cgroup id) alone.
    pub fn for_scope(self, scope: Option<u64>) -> Twins {
        Twins {
            exec: self.exec.map(|twin| twin.for_scope(scope)),
            destinations: self.destinations.map(|twin| twin.for_scope(scope)),
            scope,
            overlay: self.overlay.map(|twins| Box::new(twins.for_scope(scope))),
        }
    }

    /// The decision for an exec: the stronger of these twins' and the overlay's, when either
    /// decides execs.
    fn decide_exec(&self, call: &call::ExecCall) -> Option<KernelExecDecision> {
        let own = self
            .exec
            .as_ref()
            .map(|twin| twin.decide(&call.file, &call.argv));
        let overlay = self.overlay.as_ref().and_then(|o| o.decide_exec(call));
        match (own, overlay) {
            (Some(own), Some(overlay))
                if overlay.decision != own.decision
                    && overlay.decision.strongest(own.decision) == overlay.decision =>
            {
                Some(overlay)
            }
            (own, overlay) => own.or(overlay),
        }
    }

    /// The calls a filter for these twins holds.
    pub fn held_syscalls(&self) -> HeldSyscalls {
        HeldSyscalls {
            exec: self.exec.is_some() || self.overlay.as_ref().is_some_and(|o| o.exec.is_some()),
            connect: self.destinations.is_some(),
            messages: self
                .destinations
                .as_ref()
                .is_some_and(DestinationTwin::prompts_udp),
        }
    }

    /// The prompted request `notification` makes, if it is one.
    fn prompted(&self, notification: &Notification) -> Option<HeldRequest> {
        let nr = notification.nr as libc::c_long;
        if filter::EXEC_SYSCALLS.contains(&nr) {
            // No twin decides execs: not read at all.
            if !self.held_syscalls().exec {
                return None;
            }
            let call = call::read_exec(notification).ok()??;
            let decision = self.decide_exec(&call)?;
            (decision.decision == Decision::Prompt).then_some(HeldRequest::Exec { call, decision })
        } else {
            let twin = self.destinations.as_ref()?;
            let destination = connect::read_destination(notification).ok()??;
            let prompts = |transport| {
                let decision = twin.decide(destination.address, destination.port, transport);
                (decision.decision == Decision::Prompt && !decision.audit_only).then_some(decision)
            };
            // Most calls are prompted for neither transport: no need to read the socket's.
            prompts(Transport::Tcp).or_else(|| prompts(Transport::Udp))?;
            let call = destination.with_transport()?;
            let decision = prompts(call.transport)?;
            Some(HeldRequest::Connect { call, decision })
        }
    }
}

/// Whether holding execs is worth a filter: the policy asks about some exec (a `prompt` rule
/// or the unmatched default).
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

/// Whether holding connects is worth a filter: the policy asks about some destination (a
/// network or address rule, or the unmatched default).
pub fn policy_prompts_destinations(policy: &Policy) -> bool {
    policy.enforcement().unmatched_network == Decision::Prompt
        || policy
            .network_rules()
            .iter()
            .any(|rule| rule.decision == Decision::Prompt)
        || policy
            .address_rules()
            .iter()
            .any(|rule| rule.decision == Decision::Prompt)
}

/// The run's (or the daemon's) side of the hold.
pub struct Hold {
    listener: Arc<OnceLock<Listener>>,
    twins: Arc<RwLock<Twins>>,
    held: Receiver<HeldCall>,
    stop: OwnedFd,
    thread: Option<JoinHandle<()>>,
    child_socket: Option<OwnedFd>,
    syscalls: HeldSyscalls,
}

/// Where the supervisor gets its listener.
enum Source {
    /// From the child, over the socket pair; its first exec is the command's own.
    Child(filter::GuardEnd),
    /// Handed over (the daemon took it from its `guard run` client); `first_exec` says whether
    /// the command's own exec is still to come.
    Adopted { listener: OwnedFd, first_exec: bool },
}

impl Hold {
    /// Starts the supervisor of a command guard starts: give [`Hold::child_end`] to its
    /// `pre_exec`, and call [`Hold::started`] once it runs.
    pub fn start(twins: Twins) -> io::Result<Hold> {
        let (guard_end, child_socket) = filter::socket_pair()?;
        let mut hold = Hold::spawn(twins, Source::Child(guard_end), Box::new(|| {}))?;
        hold.child_socket = Some(child_socket);
        Ok(hold)
    }

    /// Supervises a listener another process installed (a `guard run` client of the daemon);
    /// `wake` is called after each held call is queued.
    pub fn adopt(
        listener: OwnedFd,
        first_exec: bool,
        twins: Twins,
        wake: Box<dyn Fn() + Send>,
    ) -> io::Result<Hold> {
        Hold::spawn(
            twins,
            Source::Adopted {
                listener,
                first_exec,
            },
            wake,
        )
    }

    fn spawn(twins: Twins, source: Source, wake: Box<dyn Fn() + Send>) -> io::Result<Hold> {
        // SAFETY: a new eventfd, owned here alone.
        let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if stop < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just made.
        let stop = unsafe { OwnedFd::from_raw_fd(stop) };
        let syscalls = twins.held_syscalls();
        let listener = Arc::new(OnceLock::new());
        let twins = Arc::new(RwLock::new(twins));
        let (sender, held) = channel();
        let supervisor = Supervisor {
            listener: listener.clone(),
            twins: twins.clone(),
            held: sender,
            wake,
            stop: stop.as_raw_fd(),
        };
        let thread = std::thread::Builder::new()
            .name("guard-hold".into())
            .spawn(move || supervisor.run(source))?;
        Ok(Hold {
            listener,
            twins,
            held,
            stop,
            thread: Some(thread),
            child_socket: None,
            syscalls,
        })
    }

    /// What the command's `pre_exec` runs (see [`ChildEnd::install_from_pre_exec`]).
    pub fn child_end(&self) -> Option<ChildEnd> {
        self.child_socket
            .as_ref()
            .map(|socket| ChildEnd::new(socket, self.syscalls))
    }

    /// The command started (or failed to): guard's copy of the child's end closes, so a child
    /// that never sent its listener ends the supervisor.
    pub fn started(&mut self) {
        self.child_socket = None;
    }

    /// The prompted calls that arrived since the last call.
    pub fn take_held(&self) -> Vec<HeldCall> {
        self.held.try_iter().collect()
    }

    /// Answers a held call.
    pub fn reply(&self, id: u64, reply: Reply) -> io::Result<()> {
        match self.listener.get() {
            Some(listener) => listener.reply(id, reply),
            None => Ok(()),
        }
    }

    /// Whether held call `id` still waits in its syscall: `false` once the program gave it up
    /// (a signal interrupted it, or the process ended).
    pub fn still_waiting(&self, id: u64) -> bool {
        self.listener
            .get()
            .is_some_and(|listener| listener.still_waiting(id))
    }

    /// The kernel's image changed (a policy, an amendment, DNS answers, an approval): later
    /// calls are decided by `engine`, the new image's, by the kinds of twins this hold has.
    pub fn set_engine(&self, engine: &Arc<KernelEngine>, dns_redirected: bool) {
        if let Ok(mut twins) = self.twins.write() {
            let (exec, network) = (twins.exec.is_some(), twins.destinations.is_some());
            let overlay = twins.overlay.take();
            *twins = Twins::of_engine(engine, exec, network, dns_redirected).for_scope(twins.scope);
            twins.overlay = overlay;
        }
    }

    /// The run's overlay's image changed (an approval, DNS answers): its later calls are
    /// decided by `engine` too.
    pub fn set_overlay_engine(&self, engine: &Arc<KernelEngine>, dns_redirected: bool) {
        if let Ok(mut twins) = self.twins.write() {
            let scope = twins.scope;
            twins.overlay = Some(Box::new(
                Twins::of_engine(engine, true, false, dns_redirected).for_scope(scope),
            ));
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

/// A copy of descriptor `fd` of process `pid` (`pidfd_getfd`: the descriptor the process has
/// now, which a pid reused meanwhile could not pass off as its own).
/// `pid` may be any thread's id (a held call's is its thread's): the descriptor table is the
/// process's.
pub fn copy_fd(pid: u32, fd: i32) -> io::Result<OwnedFd> {
    let pidfd = open_pidfd(pid)?;
    // SAFETY: a raw syscall that returns a new descriptor (or -1), owned at once.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made.
    Ok(unsafe { OwnedFd::from_raw_fd(copy as i32) })
}

/// A pidfd for task `tid`, a process or one of its threads.
fn open_pidfd(tid: u32) -> io::Result<OwnedFd> {
    /// `PIDFD_THREAD` (Linux 6.9): a pidfd for a thread that does not lead its process.
    const PIDFD_THREAD: libc::c_long = libc::O_EXCL as libc::c_long;
    let open = |pid: u32, flags: libc::c_long| {
        // SAFETY: a raw syscall that returns a new descriptor (or -1), owned at once.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            // SAFETY: just made.
            Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
        }
    };
    match open(tid, PIDFD_THREAD) {
        Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
            // An older kernel: its leader's pidfd (the held call keeps the thread, and so its
            // process, alive while it is read).
            let tgid = event::thread_group(tid).ok_or(err)?;
            open(tgid, 0)
        }
        result => result,
    }
}

/// Writes `message` on the stderr of process `pid` (a held program), through its own open
/// file: a copy of the descriptor, not a reopening of `/proc/PID/fd/2`, which would write
/// with guard's rights to whatever file the program put there (read-only `/etc/passwd`, say).
/// Whether it was written.
pub fn tell_stderr(pid: u32, message: &str) -> bool {
    use std::io::Write;
    let Ok(stderr) = copy_fd(pid, libc::STDERR_FILENO) else {
        return false;
    };
    writeln!(std::fs::File::from(stderr), "{message}").is_ok()
}

/// Lets every call on `listener` continue, until no process is left under its filter: what a
/// `guard run` client does with the calls the daemon held for it once the daemon is gone (the
/// kernel still decides them; a prompt is refused at once, as without the hold).
pub fn pass_through(listener: OwnedFd) {
    let (held, _) = channel();
    let supervisor = Supervisor {
        listener: Arc::new(OnceLock::new()),
        twins: Arc::new(RwLock::new(Twins::default())),
        held,
        wake: Box::new(|| {}),
        stop: -1,
    };
    supervisor.run(Source::Adopted {
        listener,
        first_exec: false,
    });
}

struct Supervisor {
    listener: Arc<OnceLock<Listener>>,
    twins: Arc<RwLock<Twins>>,
    held: Sender<HeldCall>,
    wake: Box<dyn Fn() + Send>,
    /// An eventfd that ends the loop (-1: none, poll ignores it).
    stop: i32,
}

impl Supervisor {
    fn run(self, source: Source) {
        let (listener, mut first_exec) = match source {
            Source::Child(end) => match end.receive() {
                Ok(Some(fd)) => (Listener::new(fd), true),
                // The child failed before its exec (and said why) or guard's end went.
                Ok(None) | Err(_) => return,
            },
            Source::Adopted {
                listener,
                first_exec,
            } => (Listener::new(listener), first_exec),
        };
        let listener = self.listener.get_or_init(|| listener);
        // Bounded by the command's life: the listener hangs up when no process is left under
        // the filter, and the run's end writes `stop`.
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
            // SAFETY: two valid pollfds (a negative fd is skipped).
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
                Ok(Some(notification)) => {
                    let exec = filter::EXEC_SYSCALLS.contains(&(notification.nr as libc::c_long));
                    if exec && first_exec {
                        // The command's own exec, made while guard waits in its spawn and
                        // cannot ask: it continues, and the kernel decides it as ever.
                        first_exec = false;
                        let _ = listener.reply(notification.id, Reply::Continue);
                    } else {
                        self.decide(listener, notification);
                    }
                }
                Ok(None) => {}
                Err(_) => return,
            }
        }
    }

    /// Continues a call that is not prompted; passes a prompted one on.
    fn decide(&self, listener: &Listener, notification: Notification) {
        let request = self
            .twins
            .read()
            .ok()
            .and_then(|twins| twins.prompted(&notification));
        // Read from a process that is gone: its pid may name another one now.
        let Some(request) = request.filter(|_| listener.still_waiting(notification.id)) else {
            let _ = listener.reply(notification.id, Reply::Continue);
            return;
        };
        let held = HeldCall {
            id: notification.id,
            pid: notification.pid,
            request,
            since: Instant::now(),
        };
        if self.held.send(held).is_err() {
            // The run is ending: the kernel decides (and refuses the prompt) as without a hold.
            let _ = listener.reply(notification.id, Reply::Continue);
            return;
        }
        (self.wake)();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{CompileEnv, NoResolver, compile};
    use crate::policy::PolicyParser;

    fn twins_of(rules: &str) -> Twins {
        let mut parser = PolicyParser::new();
        parser.parse("t.rules", rules).unwrap();
        let image = compile(&parser.build(), &NoResolver, &CompileEnv::default());
        Twins::of_image(&image, true, false, false).unwrap()
    }

    fn decision(twins: &Twins, program: &str) -> Decision {
        let call = ExecCall {
            file: program.into(),
            argv: vec![program.to_string()],
        };
        twins
            .decide_exec(&call)
            .expect("execs are decided")
            .decision
    }

    #[test]
    fn a_run_with_an_overlay_holds_an_exec_by_the_stronger_of_both_decisions() {
        let daemon = "prefix_rule(pattern=[\"deploy\"], decision=\"prompt\")\n\
                      prefix_rule(pattern=[\"wipe\"], decision=\"forbidden\")\n";
        let mut twins = twins_of(daemon);
        twins.overlay = Some(Box::new(twins_of(
            "prefix_rule(pattern=[\"curl\"], decision=\"prompt\")\n\
             prefix_rule(pattern=[\"deploy\"], decision=\"forbidden\")\n\
             prefix_rule(pattern=[\"wipe\"], decision=\"allow\")\n",
        )));
        assert_eq!(
            decision(&twins, "curl"),
            Decision::Prompt,
            "the overlay asks"
        );
        assert_eq!(
            decision(&twins, "deploy"),
            Decision::Forbidden,
            "not held: refused"
        );
        assert_eq!(
            decision(&twins, "wipe"),
            Decision::Forbidden,
            "its allow is no say"
        );
        assert_eq!(decision(&twins, "ls"), Decision::Allow);
        assert!(twins.held_syscalls().exec);
        let alone = twins_of(daemon);
        assert_eq!(decision(&alone, "curl"), Decision::Allow);
        assert_eq!(decision(&alone, "deploy"), Decision::Prompt);
    }
}
