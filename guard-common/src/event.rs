//! The record the kernel programs put in the ring buffer for every refusal and every
//! audit-only match.

use crate::limits::{ARGV_LEN, PATH_LEN};

/// What the event is about.
pub mod kind {
    pub const EXEC: u8 = 1;
    pub const CONNECT: u8 = 2;
    /// UDP `sendmsg`/`sendto` with a destination, on an unconnected socket.
    pub const SENDMSG: u8 = 3;
    /// A file opened for reading (`lsm` backend); the path is in [`super::Event::argv`].
    pub const FILE_READ: u8 = 4;
    /// A file opened for writing, created, removed, renamed or truncated (`lsm` backend); the
    /// path is in [`super::Event::argv`].
    pub const FILE_WRITE: u8 = 5;
    /// An IP socket of a kind the connect hooks never see, at creation (`cgroup/sock_create`):
    /// [`super::Event::family`] is its family, [`super::Event::port`] its protocol and
    /// [`super::Event::transport`] its type (`SOCK_*`); the kind is `sockets::classify` of them.
    pub const SOCKET: u8 = 6;
    /// A connect or datagram send to a unix socket (`cgroup/connect_unix`,
    /// `cgroup/sendmsg_unix`): the address's bytes are in [`super::Event::argv`] (an abstract
    /// name with its leading NUL), [`super::Event::port`] is 0 for a connect and 1 for a send.
    pub const UNIX: u8 = 7;
}

/// What the kernel did.
pub mod action {
    /// Recorded only (audit-only).
    pub const NONE: u8 = 0;
    /// The call failed with EPERM (`lsm` hooks, `cgroup` sock_addr hooks).
    pub const EPERM: u8 = 1;
    /// The process was killed before the new image ran (exec on the `cgroup` backend).
    pub const SIGKILL: u8 = 2;
    /// The file operation failed with EACCES (`lsm` file hooks).
    pub const EACCES: u8 = 3;
    /// A prompted connect or send let through with its packets held until an answer
    /// (`maps::NetHold`); [`super::Event::ino`] is the socket's cookie.
    pub const HELD: u8 = 4;
}

/// [`Event::flags`].
pub mod flag {
    /// Recorded but not enforced.
    pub const AUDIT_ONLY: u8 = 1;
    /// No rule matched; the policy's unmatched default decided.
    pub const UNMATCHED: u8 = 2;
    /// argv was longer than the event holds.
    pub const ARGV_TRUNCATED: u8 = 4;
    /// The decision came from the `lsm` backend's hook.
    pub const LSM: u8 = 8;
    /// Exec of a file no path names (a memfd, a deleted file): `enforcement(anonymous_exec)`.
    pub const ANONYMOUS: u8 = 16;
    /// A [`super::kind::FILE_WRITE`] that failed with EACCES under a sandbox mode, seen on the
    /// syscall's way out (`tp_btf/sys_exit`): guard's programs did not decide it. The layout is
    /// [`super::sandbox`]'s.
    pub const SANDBOX: u8 = 32;
}

/// A [`flag::SANDBOX`] event: [`Event::argv`] holds the syscall's path in its first
/// [`sandbox::PATH_HALF`] bytes and its second path (rename, link) in the rest, each
/// NUL-terminated as the program gave it (maybe relative); [`Event::dev`] is the first path's
/// dirfd (an `i32`, [`sandbox::AT_FDCWD`] for none), the first 4 bytes of [`Event::addr`] the
/// second's (native endian), and [`Event::ino`] the syscall number (x86_64).
pub mod sandbox {
    use crate::limits::ARGV_LEN;

    pub const PATH_HALF: usize = ARGV_LEN / 2;
    pub const AT_FDCWD: i32 = -100;
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Event {
    /// `CLOCK_BOOTTIME` nanoseconds.
    pub time_ns: u64,
    pub cgroup_id: u64,
    /// The scope it was decided in: the deepest listed cgroup on the process's way down (an
    /// approval of it is held for this scope).
    pub scope: u64,
    /// Exec: the executed file's identity.
    pub dev: u64,
    pub ino: u64,
    pub kind: u8,
    pub decision: u8,
    pub action: u8,
    pub flags: u8,
    /// Kernel rule id, or `NO_RULE`.
    pub rule: u32,
    pub pid: u32,
    pub tgid: u32,
    pub ppid: u32,
    pub uid: u32,
    pub gid: u32,
    /// `AF_INET` / `AF_INET6` (connect, sendmsg).
    pub family: u16,
    /// Destination port, host order.
    pub port: u16,
    pub transport: u8,
    pub _pad: [u8; 3],
    pub exe_len: u16,
    pub argv_len: u16,
    /// Destination address: 4 bytes for IPv4 (IPv4-mapped IPv6 is reported as IPv4), else 16.
    pub addr: [u8; 16],
    pub comm: [u8; 16],
    /// Exec: the path given to `execve`; connect: the path of the process's last exec.
    pub exe: [u8; PATH_LEN],
    /// NUL-separated argv; for a file event ([`kind::FILE_READ`], [`kind::FILE_WRITE`]) the
    /// file's path instead (the process is named by `exe`, its last exec).
    pub argv: [u8; ARGV_LEN],
}

/// What the exec tracepoint remembers about each scoped process, for its connect events.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskInfo {
    pub ppid: u32,
    pub exe_len: u16,
    pub argv_len: u16,
    pub exe: [u8; PATH_LEN],
    pub argv: [u8; ARGV_LEN],
}
