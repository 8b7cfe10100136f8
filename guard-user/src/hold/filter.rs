//! The seccomp filter that hands the command's `execve`/`execveat` calls to guard before the
//! kernel runs them (`SECCOMP_RET_USER_NOTIF`), installed between fork and exec, and the
//! listener it makes, sent back to guard over a socket pair.
//!
//! The filter is a handful of classic-BPF instructions written here: seccompiler has no
//! user-notification action, and libseccomp would be a C library for seven instructions. It
//! is not what enforces the policy (the BPF programs are): a call it does not hold (another
//! architecture's ABI, x32) simply runs and the kernel decides it as ever.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// `offsetof(struct seccomp_data, nr)` and `arch`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

/// The syscalls held: the two that start a program.
pub const HELD_SYSCALLS: [libc::c_long; 2] = [libc::SYS_execve, libc::SYS_execveat];

fn statement(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    }
}

/// Notify for each of `syscalls` of this architecture, allow everything else.
pub fn program(syscalls: &[libc::c_long]) -> Vec<libc::sock_filter> {
    let n = syscalls.len() as u8;
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let mut program = vec![
        statement(load, DATA_ARCH),
        // Another architecture's call: to `allow`, past the number checks.
        jump(AUDIT_ARCH, 0, n + 1),
        statement(load, DATA_NR),
    ];
    for (i, nr) in syscalls.iter().enumerate() {
        // A match jumps to `notify`, the instruction after `allow`.
        program.push(jump(*nr as u32, n - i as u8, 0));
    }
    program.push(statement(ret, libc::SECCOMP_RET_ALLOW));
    program.push(statement(ret, libc::SECCOMP_RET_USER_NOTIF));
    program
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
    pub fn new(socket: &OwnedFd) -> ChildEnd {
        ChildEnd {
            program: program(&HELD_SYSCALLS),
            socket: socket.as_raw_fd(),
        }
    }

    /// Installs the filter and sends its listener to guard. Fails closed: an error stops the
    /// command from starting. Needs `CAP_SYS_ADMIN` (guard's root) or no-new-privileges, so it
    /// runs before the capabilities are dropped.
    pub fn install_from_pre_exec(&self) -> io::Result<()> {
        let fprog = libc::sock_fprog {
            len: self.program.len() as u16,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: a raw syscall with a valid program; it returns a new descriptor or -1.
        let listener = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &fprog as *const libc::sock_fprog,
            )
        };
        if listener < 0 {
            return Err(io::Error::last_os_error());
        }
        let listener = listener as RawFd;
        let sent = send_fd(self.socket, listener);
        // SAFETY: the listener is ours; guard has its own copy now (or never will).
        unsafe { libc::close(listener) };
        sent
    }
}

/// Room for one descriptor's control message, aligned as `cmsghdr` needs.
#[repr(C, align(8))]
struct FdMessage([u8; 64]);

/// `sendmsg` of `fd` as SCM_RIGHTS, with one byte of data (a message must carry some).
fn send_fd(socket: RawFd, fd: RawFd) -> io::Result<()> {
    let mut byte = [1u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = FdMessage([0; 64]);
    // SAFETY: CMSG_SPACE of an int is well within the 64 bytes of `control`; the header is
    // written through the kernel's own macros' layout.
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        if libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl GuardEnd {
    /// The listener the child sent; `None` when the child ended without sending one (it failed
    /// before its exec, and said so there).
    pub fn receive(&self) -> io::Result<Option<OwnedFd>> {
        let mut byte = [0u8];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = FdMessage([0; 64]);
        // SAFETY: as in `send_fd`; the kernel writes at most `msg_controllen` bytes.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = control.0.len() as _;
            let got = libc::recvmsg(self.0.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if got < 0 {
                return Err(io::Error::last_os_error());
            }
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if got == 0 || cmsg.is_null() || (*cmsg).cmsg_type != libc::SCM_RIGHTS {
                return Ok(None);
            }
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
            Ok(Some(OwnedFd::from_raw_fd(fd)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_on_allow_or_notify() {
        let program = program(&HELD_SYSCALLS);
        let allow = program.len() - 2;
        let notify = program.len() - 1;
        // The architecture check skips to allow.
        assert_eq!(1 + 1 + program[1].jf as usize, allow);
        for (i, insn) in program.iter().enumerate().skip(3).take(HELD_SYSCALLS.len()) {
            assert_eq!(i + 1 + insn.jt as usize, notify, "instruction {i}");
            assert_eq!(insn.k as libc::c_long, HELD_SYSCALLS[i - 3]);
        }
        assert_eq!(program[allow].k, libc::SECCOMP_RET_ALLOW);
        assert_eq!(program[notify].k, libc::SECCOMP_RET_USER_NOTIF);
    }
}
