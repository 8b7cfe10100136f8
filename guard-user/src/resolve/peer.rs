//! Which process sent a query: the resolver sees only the peer's address, so the kernel is asked
//! for that socket by its exact address pair (sock_diag: one lookup in the socket tables, not a
//! walk of `/proc/net/{udp,tcp}`, which reads every hash bucket), which gives its inode, owner
//! and cookie. For a query the kernel redirected, its DNS redirect recorded the scope and the
//! process that sent it under that cookie ([`DnsOrigins`]), so [`Peers::asker`] names the process
//! with two small reads of `/proc/PID` and no search, on a netlink socket kept open.
//!
//! Otherwise (a query sent to the resolver's port itself, or a kernel without `inet_diag`) the
//! process that holds the socket is found by a look through every `/proc/PID/fd`
//! ([`process_of`]). That look is made at most [`LOOKS_PER_SECOND`] times a second: past that a
//! flood of queries is recorded with the owner's uid alone, so it cannot keep the resolver busy.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::kernel::dns_origins::DnsOrigins;

/// How many process look-ups a second the resolver makes at most.
pub const LOOKS_PER_SECOND: u32 = 50;
/// How many processes one look-up reads at most.
const MAX_PROCESSES: usize = 65_536;

/// The process that asked.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueryProcess {
    /// `None` when the socket's holder was not looked for (the rate bound) or not found.
    pub pid: Option<u32>,
    pub uid: u32,
    /// `/proc/PID/comm` of the holder.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub comm: String,
    /// `/proc/PID/exe` of the holder.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub exe: String,
    /// The socket's cookie, by which the kernel's DNS redirect recorded the scope that sent the
    /// query (`None`: sock_diag could not say).
    #[serde(skip)]
    pub cookie: Option<u64>,
    /// The scope the kernel's DNS redirect recorded for the socket (`None`: not redirected, or
    /// not read).
    #[serde(skip)]
    pub scope: Option<u64>,
}

/// The two ends of a query's socket.
#[derive(Clone, Copy, Debug)]
pub struct QuerySocket {
    /// The program's end: where the query came from.
    pub program: SocketAddr,
    /// The resolver's end: where it arrived.
    pub resolver: SocketAddr,
    pub tcp: bool,
}

/// The process that holds the program's end of `query`.
pub fn process_of(query: QuerySocket) -> Option<QueryProcess> {
    let (inode, uid, cookie) = socket_of(query)?;
    let found = QueryProcess {
        uid,
        cookie,
        ..QueryProcess::default()
    };
    if !within_rate() {
        return Some(found);
    }
    Some(look_for_holder(found, inode))
}

/// How the resolver names who asked: sock_diag on a netlink socket it keeps, and what the
/// kernel's DNS redirect recorded of the socket.
#[derive(Default)]
pub struct Peers {
    diag: Mutex<Option<SockDiag>>,
    origins: Option<Arc<DnsOrigins>>,
}

/// Who sent a query, as far as [`Peers::asker`] can say without a look through `/proc`.
pub enum Asker {
    /// Named, or as far as the rate of looks allows ([`LOOKS_PER_SECOND`]).
    Named(QueryProcess),
    /// Its socket (owner, cookie) is known; [`look_for_holder`] names the process that holds
    /// socket `inode`.
    Look(QueryProcess, u64),
    /// sock_diag cannot name the socket: only [`process_of`] can.
    Unknown,
}

impl Peers {
    /// `origins`: the redirect's records of the set whose DNS comes here (`None`: names each
    /// process with [`process_of`]).
    pub fn new(origins: Option<Arc<DnsOrigins>>) -> Peers {
        Peers {
            diag: Mutex::new(None),
            origins,
        }
    }

    /// The owner, cookie and (when the kernel redirected it) scope of the program's end of
    /// `query`, with one sock_diag lookup and no look for its process (`None`: sock_diag
    /// cannot name the socket).
    pub fn owner(&self, query: QuerySocket) -> Option<QueryProcess> {
        let (_, uid, cookie) = self.diagnosed(query)?;
        let origin = self.origin(cookie);
        Some(QueryProcess {
            uid,
            cookie: Some(cookie),
            scope: origin.map(|o| o.scope),
            ..QueryProcess::default()
        })
    }

    /// The process that sent `query`: from the redirect's record of its socket where there is
    /// one (its comm and exe read from `/proc/PID`), else what a look through `/proc` must find.
    pub fn asker(&self, query: QuerySocket) -> Asker {
        let Some((inode, uid, cookie)) = self.diagnosed(query) else {
            return Asker::Unknown;
        };
        let origin = self.origin(cookie);
        let mut found = QueryProcess {
            uid,
            cookie: Some(cookie),
            scope: origin.map(|o| o.scope),
            ..QueryProcess::default()
        };
        // A pid of the initial namespace names another process in a guard that runs in a
        // namespace of its own: there only the look through its own `/proc` can tell.
        match origin.map(|o| o.pid) {
            Some(pid) if pid != 0 && kernel_pids_are_ours() => {
                found.pid = Some(pid);
                describe(&mut found, pid);
                Asker::Named(found)
            }
            _ if within_rate() => Asker::Look(found, inode),
            _ => Asker::Named(found),
        }
    }

    fn origin(&self, cookie: u64) -> Option<crate::kernel::dns_origins::DnsOrigin> {
        self.origins.as_ref()?.get(cookie).ok().flatten()
    }

    /// [`SockDiag::lookup`] on the kept socket, opened on first use and again after an error.
    fn diagnosed(&self, query: QuerySocket) -> Option<(u64, u32, u64)> {
        let mut kept = self.diag.lock().ok()?;
        if kept.is_none() {
            *kept = SockDiag::open();
        }
        let found = kept.as_mut()?.lookup(query);
        if matches!(found, Err(())) {
            *kept = None;
        }
        found.ok().flatten()
    }
}

/// Whether the pids the kernel's programs record (the initial pid namespace's) are this
/// process's pids: it runs in the initial pid namespace (whose inode number is fixed,
/// `PROC_PID_INIT_INO`).
fn kernel_pids_are_ours() -> bool {
    use std::os::unix::fs::MetadataExt;
    static OURS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OURS.get_or_init(|| {
        std::fs::metadata("/proc/self/ns/pid").is_ok_and(|ns| ns.ino() == 0xEFFF_FFFC)
    })
}

/// `found` with the process that holds socket `inode`, when one is found (a look through every
/// `/proc/PID/fd`).
pub fn look_for_holder(mut found: QueryProcess, inode: u64) -> QueryProcess {
    if let Some(pid) = holder_of(inode) {
        found.pid = Some(pid);
        describe(&mut found, pid);
    }
    found
}

/// `found`'s comm and exe, read from `/proc/PID`.
fn describe(found: &mut QueryProcess, pid: u32) {
    use std::io::Read;
    // One read of at most 16 bytes and a newline (TASK_COMM_LEN): no size asked first.
    let mut comm = [0u8; 32];
    let read = std::fs::File::open(format!("/proc/{pid}/comm"))
        .and_then(|mut file| file.read(&mut comm))
        .unwrap_or(0);
    found.comm = String::from_utf8_lossy(&comm[..read])
        .trim_end()
        .to_string();
    found.exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
}

/// The owner and cookie of the program's end of `query`, with one sock_diag lookup and no look
/// for its process (`None`: sock_diag cannot name the socket).
pub fn socket_owner(query: QuerySocket) -> Option<QueryProcess> {
    let (_, uid, cookie) = diagnosed(query)?;
    Some(QueryProcess {
        uid,
        cookie: Some(cookie),
        ..QueryProcess::default()
    })
}

/// The cookie of the program's end of `query`, also once its program closed it (an orphaned
/// or TIME-WAIT socket keeps its cookie, though no descriptor names it any more); `None`:
/// sock_diag cannot name the socket.
pub fn socket_cookie(query: QuerySocket) -> Option<u64> {
    diagnosed_any(query).map(|(_, _, cookie)| cookie)
}

fn within_rate() -> bool {
    static WINDOW: Mutex<Option<(Instant, u32)>> = Mutex::new(None);
    let Ok(mut window) = WINDOW.lock() else {
        return false;
    };
    let now = Instant::now();
    match window.as_mut() {
        Some((start, count)) if now.duration_since(*start).as_secs() < 1 => {
            *count += 1;
            *count <= LOOKS_PER_SECOND
        }
        _ => {
            *window = Some((now, 1));
            true
        }
    }
}

/// The inode, owner and (from sock_diag) cookie of the program's end of `query`: asked of the
/// kernel by its addresses, or, where sock_diag cannot answer for this protocol (a kernel built
/// without `inet_diag`, or with it as a module that is not there), found in the `/proc/net`
/// table by its port.
fn socket_of(query: QuerySocket) -> Option<(u64, u32, Option<u64>)> {
    diagnosed(query)
        .map(|(inode, uid, cookie)| (inode, uid, Some(cookie)))
        .or_else(|| in_proc_table(query).map(|(inode, uid)| (inode, uid, None)))
}

/// The socket the kernel's sock_diag finds for `query`, on a netlink socket of its own: `None`
/// when it is not found or sock_diag cannot look.
fn diagnosed(query: QuerySocket) -> Option<(u64, u32, u64)> {
    SockDiag::open()?.lookup(query).ok().flatten()
}

/// The socket the kernel's sock_diag finds for `query`, open or closed (inode 0).
fn diagnosed_any(query: QuerySocket) -> Option<(u64, u32, u64)> {
    SockDiag::open()?.lookup_any(query).ok().flatten()
}

/// A netlink sock_diag socket, kept for many lookups.
struct SockDiag {
    socket: netlink_sys::Socket,
    /// The last request's sequence number: a reply is taken only for it.
    sequence: u32,
}

/// How long a lookup waits for the kernel's reply (it is queued before the request's send
/// returns; this bounds a kernel that does otherwise).
const DIAG_WAIT: Duration = Duration::from_millis(50);

impl SockDiag {
    fn open() -> Option<SockDiag> {
        use netlink_sys::{Socket, SocketAddr as NetlinkAddr, protocols::NETLINK_SOCK_DIAG};
        let mut socket = Socket::new(NETLINK_SOCK_DIAG).ok()?;
        socket.bind_auto().ok()?;
        socket.connect(&NetlinkAddr::new(0, 0)).ok()?;
        socket.set_non_blocking(true).ok()?;
        Some(SockDiag {
            socket,
            sequence: 0,
        })
    }

    /// The inode, owner and cookie of the program's end of `query` while a descriptor names
    /// it (inode not 0): `Ok(None)` when the kernel has no such socket, `Err` when the netlink
    /// socket failed (open another).
    fn lookup(&mut self, query: QuerySocket) -> Result<Option<(u64, u32, u64)>, ()> {
        Ok(self.lookup_any(query)?.filter(|(inode, _, _)| *inode != 0))
    }

    /// [`SockDiag::lookup`], also of a socket its program closed (an orphaned or TIME-WAIT
    /// socket keeps its cookie; its inode is 0).
    fn lookup_any(&mut self, query: QuerySocket) -> Result<Option<(u64, u32, u64)>, ()> {
        use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
        use netlink_packet_sock_diag::SockDiagMessage;
        use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP, IPPROTO_UDP};
        use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};

        // TCP is looked up as the socket sees itself (source: its own end); UDP as a datagram
        // to it would be addressed (source: the resolver's end), the kernel's historical swap.
        let (source, destination) = if query.tcp {
            (query.program, query.resolver)
        } else {
            (query.resolver, query.program)
        };
        let request = InetRequest {
            family: if query.program.is_ipv4() {
                AF_INET
            } else {
                AF_INET6
            },
            protocol: if query.tcp { IPPROTO_TCP } else { IPPROTO_UDP },
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            socket_id: SocketId {
                source_port: source.port(),
                destination_port: destination.port(),
                source_address: source.ip(),
                destination_address: destination.ip(),
                interface_id: 0,
                // INET_DIAG_NOCOOKIE: any socket with these addresses.
                cookie: [0xff; 8],
            },
        };
        self.sequence = self.sequence.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST;
        header.sequence_number = self.sequence;
        let mut message = NetlinkMessage::new(header, SockDiagMessage::InetRequest(request).into());
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        self.socket.send(&bytes, 0).map_err(|_| ())?;
        let mut reply = vec![0; 4096];
        let deadline = Instant::now() + DIAG_WAIT;
        loop {
            let length = match self.socket.recv(&mut &mut reply[..], 0) {
                Ok(length) => length,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || !readable(&self.socket, left) {
                        return Err(());
                    }
                    continue;
                }
                Err(_) => return Err(()),
            };
            let Ok(answer) = NetlinkMessage::<SockDiagMessage>::deserialize(&reply[..length])
            else {
                continue;
            };
            // A late reply to an earlier request (one that timed out) is not this one's.
            if answer.header.sequence_number != self.sequence {
                continue;
            }
            return Ok(match answer.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
                    // Two native words, low then high (the kernel's `sock_diag_save_cookie`).
                    let words = response.header.socket_id.cookie;
                    let word = |at: usize| {
                        u64::from(u32::from_ne_bytes(words[at..at + 4].try_into().unwrap()))
                    };
                    let cookie = word(0) | word(4) << 32;
                    Some((
                        u64::from(response.header.inode),
                        response.header.uid,
                        cookie,
                    ))
                }
                // Not found (the program closed it already), or an error.
                _ => None,
            });
        }
    }
}

/// Whether `socket` becomes readable within `wait`.
fn readable(socket: &netlink_sys::Socket, wait: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let mut poll = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX).max(1);
    // SAFETY: one pollfd, valid for the call.
    unsafe { libc::poll(&mut poll, 1, millis) > 0 }
}

/// The program's end of `query` in `/proc/net/{udp,tcp}{,6}` (a walk of the whole table).
fn in_proc_table(query: QuerySocket) -> Option<(u64, u32)> {
    let protocol = if query.tcp { "tcp" } else { "udp" };
    let family = if query.program.is_ipv4() { "" } else { "6" };
    let table = std::fs::read_to_string(format!("/proc/net/{protocol}{family}")).ok()?;
    find_socket(&table, query.program.port())
}

/// In a `/proc/net/{udp,tcp}` table, the (inode, uid) of the socket bound to local `port`.
fn find_socket(table: &str, port: u16) -> Option<(u64, u32)> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local = fields.get(1)?;
        let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
        if local_port != port {
            return None;
        }
        let uid = fields.get(7)?.parse().ok()?;
        let inode = fields.get(9)?.parse().ok()?;
        (inode != 0).then_some((inode, uid))
    })
}

/// The first process with a descriptor on socket `inode`.
fn holder_of(inode: u64) -> Option<u32> {
    let wanted = format!("socket:[{inode}]");
    let processes = std::fs::read_dir("/proc").ok()?;
    for entry in processes.filter_map(|e| e.ok()).take(MAX_PROCESSES) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.filter_map(|e| e.ok()) {
            if std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == &*wanted) {
                return Some(pid);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_found_in_a_proc_table_by_its_local_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                     123: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1111 2 0 0\n\
                     124: 0100007F:D431 0100007F:0035 01 00000000:00000000 00:00000000 00000000  1000        0 2222 2 0 0\n";
        assert_eq!(find_socket(table, 0xD431), Some((2222, 1000)));
        assert_eq!(find_socket(table, 53), Some((1111, 0)));
        assert_eq!(find_socket(table, 9), None);
    }

    #[test]
    fn the_kernel_and_the_proc_table_name_the_same_socket() {
        let resolver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let program = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let query = QuerySocket {
            program: program.local_addr().unwrap(),
            resolver: resolver.local_addr().unwrap(),
            tcp: false,
        };
        let from_table = in_proc_table(query).expect("in /proc/net/udp");
        // Where this kernel has inet_diag, both ways agree, and the cookie is the socket's.
        if let Some((inode, uid, cookie)) = diagnosed(query) {
            assert_eq!((inode, uid), from_table);
            let mut own: u64 = 0;
            let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
            // SAFETY: an 8-byte out-parameter for SO_COOKIE on a socket this test holds.
            let got = unsafe {
                libc::getsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&program),
                    libc::SOL_SOCKET,
                    libc::SO_COOKIE,
                    (&raw mut own).cast(),
                    &mut len,
                )
            };
            assert_eq!(got, 0, "SO_COOKIE");
            assert_eq!(cookie, own, "sock_diag gives the socket's own cookie");
        }
    }

    #[test]
    fn this_process_is_found_as_the_holder_of_its_udp_and_tcp_sockets() {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let resolver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let program = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let query = QuerySocket {
            program: program.local_addr().unwrap(),
            resolver: resolver.local_addr().unwrap(),
            tcp: false,
        };
        let found = process_of(query).unwrap();
        assert_eq!((found.pid, found.uid), (Some(std::process::id()), uid));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let program = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_accepted, _) = listener.accept().unwrap();
        let query = QuerySocket {
            program: program.local_addr().unwrap(),
            resolver: listener.local_addr().unwrap(),
            tcp: true,
        };
        let found = process_of(query).unwrap();
        assert_eq!((found.pid, found.uid), (Some(std::process::id()), uid));
        // An address pair no socket has: nothing is found, and no other process is named.
        let nobody = QuerySocket {
            program: (std::net::Ipv4Addr::LOCALHOST, 9).into(),
            resolver: listener.local_addr().unwrap(),
            tcp: true,
        };
        assert!(process_of(nobody).is_none());
    }

    /// The socket's own cookie (`SO_COOKIE`).
    fn cookie_of(socket: &std::net::UdpSocket) -> u64 {
        let mut own: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        // SAFETY: an 8-byte out-parameter for SO_COOKIE on a socket the caller holds.
        let got = unsafe {
            libc::getsockopt(
                std::os::fd::AsRawFd::as_raw_fd(socket),
                libc::SOL_SOCKET,
                libc::SO_COOKIE,
                (&raw mut own).cast(),
                &mut len,
            )
        };
        assert_eq!(got, 0, "SO_COOKIE");
        own
    }

    #[test]
    fn the_kept_netlink_socket_names_one_query_socket_after_another() {
        let peers = Peers::new(None);
        let resolver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..3 {
            let program = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let query = QuerySocket {
                program: program.local_addr().unwrap(),
                resolver: resolver.local_addr().unwrap(),
                tcp: false,
            };
            // A kernel without inet_diag: nothing to keep a socket for.
            let Some(owner) = peers.owner(query) else {
                assert!(diagnosed(query).is_none());
                return;
            };
            assert_eq!(owner.cookie, Some(cookie_of(&program)));
            // SAFETY: getuid has no preconditions.
            assert_eq!(owner.uid, unsafe { libc::getuid() });
            assert_eq!(owner.scope, None, "not redirected: no scope recorded");
            // Without the redirect's record the process is found by the look through /proc.
            match peers.asker(query) {
                Asker::Look(found, inode) => {
                    let found = look_for_holder(found, inode);
                    assert_eq!(found.pid, Some(std::process::id()));
                    assert_eq!(found.cookie, owner.cookie);
                }
                // Past the looks a second (other tests look too): the owner alone.
                Asker::Named(found) => assert_eq!(found.cookie, owner.cookie),
                Asker::Unknown => panic!("sock_diag named the socket a moment ago"),
            }
        }
    }
}
