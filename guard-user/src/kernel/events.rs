//! Reading the kernel's ring buffer into [`KernelEvent`]s.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use aya::maps::{Map, MapData, RingBuf};
use guard_common::Decision;
use guard_common::event::{Event, action, flag, kind};
use guard_common::limits::NO_RULE;
use guard_common::maps::{TRANSPORT_TCP, TRANSPORT_UDP};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Exec,
    Connect,
    Sendmsg,
    /// A file opened for reading (`lsm` backend); the path is [`KernelEvent::path`].
    Read,
    /// A file written, created, removed, renamed or truncated (`lsm` backend).
    Write,
    /// An IP socket of a kind no connect hook decides, at creation; see [`KernelEvent::socket`].
    Socket,
    /// A connect or datagram send to a unix socket; see [`KernelEvent::unix`].
    Unix,
}

impl EventKind {
    /// Its name in records and metrics (the JSON spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Exec => "exec",
            EventKind::Connect => "connect",
            EventKind::Sendmsg => "sendmsg",
            EventKind::Read => "read",
            EventKind::Write => "write",
            EventKind::Socket => "socket",
            EventKind::Unix => "unix",
        }
    }

    /// A file event: the subject is a path, not a command or a destination.
    pub fn is_file(self) -> bool {
        matches!(self, EventKind::Read | EventKind::Write)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Recorded only (audit-only).
    None,
    Eperm,
    Sigkill,
    Eacces,
    /// A prompted connect or send let through with its packets held until an answer
    /// ([`super::loader::Enforcer::hold_network`]); [`KernelEvent::ino`] is its socket's cookie.
    Held,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct EventDestination {
    pub address: IpAddr,
    pub port: u16,
    pub transport: &'static str,
}

/// A socket refused (or recorded) at creation: its kind as `enforcement(socket_kinds=...)`
/// names it, and what the program asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventSocket {
    /// `"ping"`, `"raw"`, `"udplite"`, `"sctp"` or `"other"`.
    pub kind: &'static str,
    pub family: u16,
    /// `SOCK_RAW`, `SOCK_DGRAM`, ...
    pub socket_type: u8,
    /// The IP protocol number the kernel settled on.
    pub protocol: u16,
}

impl EventSocket {
    /// `IPPROTO_ICMP` for the protocols people know by name, else the number.
    pub fn protocol_name(&self) -> String {
        match self.protocol {
            0 => "IPPROTO_IP".into(),
            1 => "IPPROTO_ICMP".into(),
            6 => "IPPROTO_TCP".into(),
            17 => "IPPROTO_UDP".into(),
            58 => "IPPROTO_ICMPV6".into(),
            132 => "IPPROTO_SCTP".into(),
            136 => "IPPROTO_UDPLITE".into(),
            255 => "IPPROTO_RAW".into(),
            n => format!("protocol {n}"),
        }
    }
}

/// A connect or send to a unix socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventUnix {
    /// The address as a person reads it: `/run/docker.sock`, or `@name` for an abstract one.
    pub address: String,
    /// `"connect"` or `"send"`.
    pub call: &'static str,
    /// The address as the kernel read it (what an approval of it names).
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

/// One decision the kernel recorded: a refusal or an audit-only match.
#[derive(Clone, Debug, Serialize)]
pub struct KernelEvent {
    #[serde(with = "time_serde")]
    pub time: SystemTime,
    pub kind: EventKind,
    pub decision: Decision,
    pub action: Action,
    pub audit_only: bool,
    /// No rule matched: the policy's unmatched default decided.
    pub unmatched: bool,
    /// The kernel rule id (an index into the image's rule table).
    pub rule: Option<u32>,
    pub pid: u32,
    pub tgid: u32,
    pub ppid: u32,
    pub uid: u32,
    pub gid: u32,
    pub cgroup_id: u64,
    /// The scope that decided (a cgroup id): the deepest listed cgroup on the process's way
    /// down, which is `cgroup_id` or one of its ancestors. Approvals are held for it.
    pub scope: u64,
    pub comm: String,
    pub exe: String,
    pub argv: Vec<String>,
    pub argv_truncated: bool,
    /// Exec of a file no path names (a memfd, a deleted file): the policy's
    /// `enforcement(anonymous_exec=...)` decided with the rules.
    pub anonymous: bool,
    pub dev: u64,
    pub ino: u64,
    pub destination: Option<EventDestination>,
    /// A file event's path (absolute, as the kernel names it).
    pub path: Option<String>,
    /// A socket event's socket.
    pub socket: Option<EventSocket>,
    /// A unix socket event's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unix: Option<EventUnix>,
    /// A write a sandbox mode refused (seen on the syscall's way out; guard's programs did not
    /// decide it): [`KernelEvent::path`] is its first path, made absolute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxWrite>,
    /// Decided by a run's overlay set (`guard run --overlay`), not the daemon's own: its
    /// `rule` indexes the overlay's image.
    #[serde(skip)]
    pub overlay: bool,
}

/// What a write that failed with EACCES under a sandbox mode named.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SandboxWrite {
    /// `openat`, `mkdir`, `renameat2`, ...
    pub syscall: &'static str,
    /// The second path of a rename or link (its new name), made absolute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub second_path: Option<String>,
}

/// The write-like syscalls `tp_btf/sys_exit` reports, by their x86_64 numbers.
fn syscall_name(nr: u64) -> &'static str {
    match nr {
        2 => "open",
        76 => "truncate",
        82 => "rename",
        83 => "mkdir",
        84 => "rmdir",
        85 => "creat",
        86 => "link",
        87 => "unlink",
        88 => "symlink",
        133 => "mknod",
        257 => "openat",
        258 => "mkdirat",
        259 => "mknodat",
        263 => "unlinkat",
        264 => "renameat",
        265 => "linkat",
        266 => "symlinkat",
        316 => "renameat2",
        437 => "openat2",
        _ => "a write",
    }
}

/// `path` as the process `pid` named it relative to `dirfd`, made absolute through /proc while
/// the process lives (it just returned from the call); as given when it cannot be.
fn absolute_path(pid: u32, dirfd: i32, path: &str) -> String {
    if path.starts_with('/') || path.is_empty() {
        return path.to_string();
    }
    let base = if dirfd == guard_common::event::sandbox::AT_FDCWD {
        format!("/proc/{pid}/cwd")
    } else {
        format!("/proc/{pid}/fd/{dirfd}")
    };
    match std::fs::read_link(&base) {
        Ok(dir) => crate::policy::sandbox::normalize(std::path::Path::new(path), &dir)
            .display()
            .to_string(),
        Err(_) => path.to_string(),
    }
}

/// The sandbox part of a [`flag::SANDBOX`] event, and its first path (see
/// [`guard_common::event::sandbox`] for the layout).
fn sandbox_write(e: &Event) -> (String, SandboxWrite) {
    use guard_common::event::sandbox::PATH_HALF;
    let (first, second) = e.argv.split_at(PATH_HALF);
    let second_dirfd = i32::from_ne_bytes([e.addr[0], e.addr[1], e.addr[2], e.addr[3]]);
    let second = cstr(second);
    let write = SandboxWrite {
        syscall: syscall_name(e.ino),
        second_path: (!second.is_empty()).then(|| absolute_path(e.pid, second_dirfd, &second)),
    };
    (
        absolute_path(e.pid, e.dev as i64 as i32, &cstr(first)),
        write,
    )
}

/// Event times as the audit log and asks write them: RFC 3339 with nanoseconds, UTC.
mod time_serde {
    use std::time::SystemTime;

    pub fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339_nanos(*t))
    }
}

fn cstr(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl KernelEvent {
    /// Decodes a ring-buffer record; `None` for a record of the wrong size.
    pub fn decode(bytes: &[u8]) -> Option<KernelEvent> {
        if bytes.len() < std::mem::size_of::<Event>() {
            return None;
        }
        // SAFETY: size checked; Event is plain old data, read unaligned.
        let e: Event = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let boot_now = clock(libc::CLOCK_BOOTTIME);
        let age = boot_now.saturating_sub(Duration::from_nanos(e.time_ns));
        let time = SystemTime::now() - age;
        let exe_len = (e.exe_len as usize).min(e.exe.len());
        let argv_len = (e.argv_len as usize).min(e.argv.len());
        let argv = e.argv[..argv_len]
            .split(|b| *b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect::<Vec<_>>();
        let mut argv = argv;
        if argv.last().is_some_and(|s| s.is_empty()) {
            argv.pop();
        }
        let kind = match e.kind {
            kind::EXEC => EventKind::Exec,
            kind::CONNECT => EventKind::Connect,
            kind::FILE_READ => EventKind::Read,
            kind::FILE_WRITE => EventKind::Write,
            kind::SOCKET => EventKind::Socket,
            kind::UNIX => EventKind::Unix,
            _ => EventKind::Sendmsg,
        };
        // A unix socket event carries the address where argv would be.
        let unix = (kind == EventKind::Unix).then(|| EventUnix {
            address: crate::policy::unix::address_text(&e.argv[..argv_len]),
            call: if e.port == 0 { "connect" } else { "send" },
            bytes: e.argv[..argv_len].to_vec(),
        });
        if unix.is_some() {
            argv.clear();
        }
        // A file event carries its path where argv would be; the process's argv is unknown.
        let path = kind
            .is_file()
            .then(|| String::from_utf8_lossy(&e.argv[..argv_len]).into_owned());
        if path.is_some() {
            argv.clear();
        }
        let destination = matches!(kind, EventKind::Connect | EventKind::Sendmsg).then(|| {
            let address = if e.family == libc::AF_INET6 as u16 {
                IpAddr::V6(Ipv6Addr::from(e.addr))
            } else {
                IpAddr::V4(Ipv4Addr::new(e.addr[0], e.addr[1], e.addr[2], e.addr[3]))
            };
            EventDestination {
                address,
                port: e.port,
                transport: match e.transport {
                    TRANSPORT_TCP => "tcp",
                    TRANSPORT_UDP => "udp",
                    _ => "other",
                },
            }
        });
        let (path, sandbox) = if e.flags & flag::SANDBOX != 0 && kind == EventKind::Write {
            let (path, write) = sandbox_write(&e);
            (Some(path), Some(write))
        } else {
            (path, None)
        };
        let socket = (kind == EventKind::Socket).then(|| EventSocket {
            kind: guard_common::sockets::kind::name(e.ino as u8),
            family: e.family,
            socket_type: e.transport,
            protocol: e.port,
        });
        Some(KernelEvent {
            time,
            kind,
            decision: Decision::from_code(e.decision).unwrap_or(Decision::Forbidden),
            action: match e.action {
                action::EPERM => Action::Eperm,
                action::EACCES => Action::Eacces,
                action::SIGKILL => Action::Sigkill,
                action::HELD => Action::Held,
                _ => Action::None,
            },
            audit_only: e.flags & flag::AUDIT_ONLY != 0,
            unmatched: e.flags & flag::UNMATCHED != 0,
            rule: (e.rule != NO_RULE).then_some(e.rule),
            pid: e.pid,
            tgid: e.tgid,
            ppid: e.ppid,
            uid: e.uid,
            gid: e.gid,
            cgroup_id: e.cgroup_id,
            scope: e.scope,
            comm: cstr(&e.comm),
            exe: String::from_utf8_lossy(&e.exe[..exe_len]).into_owned(),
            argv,
            argv_truncated: e.flags & flag::ARGV_TRUNCATED != 0,
            anonymous: e.kind == kind::EXEC && e.flags & flag::ANONYMOUS != 0,
            dev: e.dev,
            ino: e.ino,
            destination,
            path,
            socket,
            unix,
            sandbox,
            overlay: false,
        })
    }
}

/// The ring buffer, read by polling its file descriptor.
pub struct EventReader {
    ring: RingBuf<MapData>,
}

/// For an async runtime to wait on (readable = records are there).
impl AsRawFd for EventReader {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }
}

impl EventReader {
    pub fn new(map: Map) -> Result<Self> {
        let ring = RingBuf::try_from(map).context("the EVENTS map is not a ring buffer")?;
        Ok(EventReader { ring })
    }

    /// Waits up to `timeout` for records, then returns all that are there.
    pub fn poll(&mut self, timeout: Duration) -> Vec<KernelEvent> {
        self.poll_or_wake(timeout, [None, None])
    }

    /// [`EventReader::poll`], also returning (with what arrived, maybe nothing) as soon as
    /// one of `wake` is readable: an owner that waits for more than kernel events (its
    /// resolver, its command's exit) waits in one place.
    pub fn poll_or_wake(
        &mut self,
        timeout: Duration,
        wake: [Option<RawFd>; 2],
    ) -> Vec<KernelEvent> {
        let mut out = self.drain();
        if !out.is_empty() {
            return out;
        }
        let mut fds = [
            libc::pollfd {
                fd: self.ring.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake[0].unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake[1].unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: valid pollfds (a negative fd is ignored by poll).
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                timeout.as_millis().min(i32::MAX as u128) as i32,
            )
        };
        out.extend(self.drain());
        out
    }

    /// Every record already in the buffer.
    pub fn drain(&mut self) -> Vec<KernelEvent> {
        self.drain_at_most(usize::MAX)
    }

    /// At most `limit` records (a busy reader that must also do other work takes them in turns).
    pub fn drain_at_most(&mut self, limit: usize) -> Vec<KernelEvent> {
        let mut out = Vec::new();
        while out.len() < limit
            && let Some(item) = self.ring.next()
        {
            if let Some(event) = KernelEvent::decode(&item) {
                out.push(event);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    #[derive(serde::Serialize)]
    struct Timed {
        #[serde(with = "super::time_serde")]
        time: SystemTime,
    }

    #[test]
    fn event_times_are_rfc3339_like_the_audit_log() {
        let time = UNIX_EPOCH + Duration::new(1_796_479_443, 223_000_001);
        assert_eq!(
            serde_json::to_string(&Timed { time }).unwrap(),
            r#"{"time":"2026-12-05T14:04:03.223000001Z"}"#
        );
    }
}
