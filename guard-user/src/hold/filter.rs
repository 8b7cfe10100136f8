//! The seccomp filter that hands the command's `execve`/`execveat` calls, and the calls that
//! name a destination (`connect`, `sendmsg`, `sendmmsg`, `sendto` with an address), to guard
//! before the kernel runs them (`SECCOMP_RET_USER_NOTIF`), installed between fork and exec, and the
//! listener it makes, sent back to guard over a socket pair.
//!
//! The filter is a handful of classic-BPF instructions written here: seccompiler has no
//! user-notification action, and libseccomp would be a C library for a dozen instructions. It
//! is not what enforces the policy (the BPF programs are): a call it does not hold (another
//! architecture's ABI, x32) simply runs and the kernel decides it as ever.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// `offsetof(struct seccomp_data, nr)`, `arch` and `args`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const DATA_ARGS: u32 = 16;

/// The two calls that start a program.
pub const EXEC_SYSCALLS: [libc::c_long; 2] = [libc::SYS_execve, libc::SYS_execveat];
/// The call that names a destination for a socket.
pub const CONNECT_SYSCALLS: [libc::c_long; 1] = [libc::SYS_connect];
/// The calls whose message may name a destination (a UDP datagram's; the supervisor looks).
/// `sendto` is held only when its address argument is set, so the sends of a connected socket
/// (`send` is `sendto` with no address) never wait.
pub const MESSAGE_SYSCALLS: [libc::c_long; 2] = [libc::SYS_sendmsg, libc::SYS_sendmmsg];

/// Which calls a filter holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeldSyscalls {
    pub exec: bool,
    pub connect: bool,
    /// `sendmsg`, `sendmmsg` and addressed `sendto`: only when some UDP destination is
    /// prompted, since every held call pays a round trip to guard (see the bench).
    pub messages: bool,
}

impl HeldSyscalls {
    pub fn any(&self) -> bool {
        self.exec || self.connect || self.messages
    }
}

/// Where a jump goes: the next instruction, or one of the two returns at the end.
#[derive(Clone, Copy)]
enum Target {
    Next,
    Allow,
    Notify,
}

struct Assembler {
    code: Vec<(libc::sock_filter, Target, Target)>,
}

impl Assembler {
    fn load(&mut self, offset: u32) {
        let insn = libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: offset,
        };
        self.code.push((insn, Target::Next, Target::Next));
    }

    fn jump_eq(&mut self, k: u32, yes: Target, no: Target) {
        let insn = libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k,
        };
        self.code.push((insn, yes, no));
    }

    /// The program, its jumps resolved, ending in `allow` then `notify`.
    fn finish(self) -> Vec<libc::sock_filter> {
        let allow = self.code.len();
        let notify = allow + 1;
        let offset = |at: usize, target: Target| -> u8 {
            let to = match target {
                Target::Next => at + 1,
                Target::Allow => allow,
                Target::Notify => notify,
            };
            (to - at - 1) as u8
        };
        let mut program: Vec<libc::sock_filter> = self
            .code
            .iter()
            .enumerate()
            .map(|(at, (insn, yes, no))| libc::sock_filter {
                jt: offset(at, *yes),
                jf: offset(at, *no),
                ..*insn
            })
            .collect();
        let ret = (libc::BPF_RET | libc::BPF_K) as u16;
        for k in [libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_USER_NOTIF] {
            program.push(libc::sock_filter {
                code: ret,
                jt: 0,
                jf: 0,
                k,
            });
        }
        program
    }
}

/// Notify for the held calls of this architecture, allow everything else.
pub fn program(held: HeldSyscalls) -> Vec<libc::sock_filter> {
    let mut asm = Assembler { code: Vec::new() };
    asm.load(DATA_ARCH);
    // Another architecture's call: allowed, past the number checks.
    asm.jump_eq(AUDIT_ARCH, Target::Next, Target::Allow);
    asm.load(DATA_NR);
    let mut every_call: Vec<libc::c_long> = Vec::new();
    if held.exec {
        every_call.extend(EXEC_SYSCALLS);
    }
    if held.connect {
        every_call.extend(CONNECT_SYSCALLS);
    }
    if held.messages {
        every_call.extend(MESSAGE_SYSCALLS);
    }
    for nr in &every_call {
        asm.jump_eq(*nr as u32, Target::Notify, Target::Next);
    }
    if held.messages {
        // sendto(fd, buf, len, flags, dest_addr, addrlen): held when dest_addr (argument 4,
        // both 32-bit halves) is not NULL.
        asm.jump_eq(libc::SYS_sendto as u32, Target::Next, Target::Allow);
        asm.load(DATA_ARGS + 8 * 4);
        asm.jump_eq(0, Target::Next, Target::Notify);
        asm.load(DATA_ARGS + 8 * 4 + 4);
        asm.jump_eq(0, Target::Allow, Target::Notify);
    }
    asm.finish()
}

/// What the child needs between fork and exec: the filter, and its end of the socket pair.
/// Made before the fork; [`ChildEnd::install_from_pre_exec`] makes only raw syscalls.
#[derive(Clone, Debug)]
pub struct ChildEnd {
    program: Vec<libc::sock_filter>,
    socket: RawFd,
}

/// guard's end: where the listener arrives.
pub struct GuardEnd(OwnedFd);

/// A socket pair for the listener; both ends close on exec, so the command inherits neither.
pub fn socket_pair() -> io::Result<(GuardEnd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just made and are owned here alone.
    Ok(unsafe {
        (
            GuardEnd(OwnedFd::from_raw_fd(fds[0])),
            OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

impl ChildEnd {
    /// The child end stays open in guard until the command has started (then drop it, so
    /// [`GuardEnd::receive`] sees the end if the child never sent a listener).
    pub fn new(socket: &OwnedFd, held: HeldSyscalls) -> ChildEnd {
        ChildEnd {
            program: program(held),
            socket: socket.as_raw_fd(),
        }
    }

    /// Installs the filter and lets guard copy its listener. Fails closed: an error stops the
    /// command from starting. Needs `CAP_SYS_ADMIN` (guard's root) or no-new-privileges, so it
    /// runs before the capabilities are dropped.
    ///
    /// The listener is not sent with SCM_RIGHTS: once the filter is in, this process's own
    /// `sendmsg` would be held on a listener nobody reads yet. It writes its pid and the
    /// listener's number instead (`write` and `read` are never held), guard takes a copy with
    /// `pidfd_getfd`, and says so.
    pub fn install_from_pre_exec(&self) -> io::Result<()> {
        let fprog = libc::sock_fprog {
            len: self.program.len() as u16,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        let listener =
            seccomp_from_pre_exec(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32, &fprog)? as RawFd;
        let copied = self.wait_for_copy(listener);
        // SAFETY: the listener is ours; guard has its own copy now (or never will).
        unsafe { libc::close(listener) };
        copied
    }

    fn wait_for_copy(&self, listener: RawFd) -> io::Result<()> {
        // SAFETY: getpid has no preconditions; write and read get buffers of their length.
        unsafe {
            let offer = ListenerOffer {
                pid: libc::getpid(),
                fd: listener,
            };
            let wrote = libc::write(
                self.socket,
                (&offer as *const ListenerOffer).cast(),
                std::mem::size_of::<ListenerOffer>(),
            );
            if wrote < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut answer = 0u8;
            let got = libc::read(self.socket, (&mut answer as *mut u8).cast(), 1);
            if got < 0 {
                return Err(io::Error::last_os_error());
            }
            if got == 0 || answer != COPIED {
                // Nobody would answer the held calls: the command must not start.
                return Err(io::Error::other("guard could not take the hold's listener"));
            }
        }
        Ok(())
    }
}

/// What the child writes to guard: where to copy the listener from.
#[repr(C)]
#[derive(Clone, Copy)]
struct ListenerOffer {
    pid: libc::pid_t,
    fd: RawFd,
}

/// guard's answer once it holds its copy of the listener (anything else: it does not).
const COPIED: u8 = 1;

impl GuardEnd {
    /// A copy of the child's listener; `None` when the child ended without offering one (it
    /// failed before its exec, and said so there). Blocks until the child offers it.
    pub fn receive(&self) -> io::Result<Option<OwnedFd>> {
        let mut offer = ListenerOffer { pid: 0, fd: -1 };
        // SAFETY: read gets a buffer of its length; write gets one byte.
        let got = unsafe {
            libc::read(
                self.0.as_raw_fd(),
                (&mut offer as *mut ListenerOffer).cast(),
                std::mem::size_of::<ListenerOffer>(),
            )
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        if got as usize != std::mem::size_of::<ListenerOffer>() {
            return Ok(None);
        }
        let copy = super::copy_fd(offer.pid as u32, offer.fd);
        let answer = if copy.is_ok() { COPIED } else { 0 };
        // SAFETY: as above. A failed write leaves the child's read at end of file: it fails
        // closed.
        unsafe { libc::write(self.0.as_raw_fd(), (&answer as *const u8).cast(), 1) };
        copy.map(Some)
    }
}

/// Installs the seccomp filter `fprog` with `flags` on the calling process; what the call
/// returned (a listener's descriptor, with `SECCOMP_FILTER_FLAG_NEW_LISTENER`). Only raw
/// syscalls: usable between fork and exec. Tried first without `no_new_privs` (guard's root
/// has `CAP_SYS_ADMIN`, and a root command keeps its set-user-ID behaviour); only when the
/// kernel refuses (`EACCES`: a user's `guard run` under the daemon) is `PR_SET_NO_NEW_PRIVS`
/// set and the call made again. Fails closed: an error stops the command from starting.
pub fn seccomp_from_pre_exec(flags: u32, fprog: &libc::sock_fprog) -> io::Result<libc::c_long> {
    // SAFETY: raw syscalls with a valid program that outlives them, and integer arguments.
    unsafe {
        let install = || {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags,
                fprog as *const libc::sock_fprog,
            )
        };
        let done = install();
        if done >= 0 {
            return Ok(done);
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EACCES) {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let done = install();
        if done < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one call as the kernel would: the return it reaches.
    fn verdict(program: &[libc::sock_filter], nr: libc::c_long, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&(nr as u32).to_ne_bytes());
        data[4..8].copy_from_slice(&AUDIT_ARCH.to_ne_bytes());
        for (i, arg) in args.iter().enumerate() {
            let at = DATA_ARGS as usize + 8 * i;
            data[at..at + 8].copy_from_slice(&arg.to_ne_bytes());
        }
        crate::confine::syscalls::run_classic_bpf(program, &data)
    }

    #[test]
    fn exec_only_holds_the_two_execs() {
        let program = program(HeldSyscalls {
            exec: true,
            ..Default::default()
        });
        for nr in EXEC_SYSCALLS {
            assert_eq!(verdict(&program, nr, [0; 6]), libc::SECCOMP_RET_USER_NOTIF);
        }
        for nr in [libc::SYS_connect, libc::SYS_sendto, libc::SYS_getppid] {
            assert_eq!(verdict(&program, nr, [1; 6]), libc::SECCOMP_RET_ALLOW);
        }
    }

    #[test]
    fn connect_alone_holds_no_message() {
        let program = program(HeldSyscalls {
            connect: true,
            ..Default::default()
        });
        assert_eq!(
            verdict(&program, libc::SYS_connect, [0; 6]),
            libc::SECCOMP_RET_USER_NOTIF
        );
        for nr in [libc::SYS_sendmsg, libc::SYS_sendto, libc::SYS_execve] {
            assert_eq!(verdict(&program, nr, [1; 6]), libc::SECCOMP_RET_ALLOW);
        }
    }

    #[test]
    fn messages_hold_sendmsg_sendmmsg_and_only_addressed_sendto() {
        let program = program(HeldSyscalls {
            connect: true,
            messages: true,
            ..Default::default()
        });
        for nr in CONNECT_SYSCALLS.iter().chain(&MESSAGE_SYSCALLS) {
            assert_eq!(verdict(&program, *nr, [0; 6]), libc::SECCOMP_RET_USER_NOTIF);
        }
        let sendto = |address: u64| verdict(&program, libc::SYS_sendto, [3, 0, 0, 0, address, 16]);
        assert_eq!(
            sendto(0),
            libc::SECCOMP_RET_ALLOW,
            "a send on a connected socket"
        );
        assert_eq!(sendto(0x7fff_0000_1000), libc::SECCOMP_RET_USER_NOTIF);
        assert_eq!(sendto(0x1000), libc::SECCOMP_RET_USER_NOTIF);
        assert_eq!(sendto(0x7fff_0000_0000), libc::SECCOMP_RET_USER_NOTIF);
        for nr in [libc::SYS_execve, libc::SYS_write, libc::SYS_getppid] {
            assert_eq!(verdict(&program, nr, [1; 6]), libc::SECCOMP_RET_ALLOW);
        }
    }
}
