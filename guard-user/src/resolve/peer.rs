//! Which process sent a query: the resolver sees only the peer's address, so the kernel is asked
//! for that socket by its exact address pair (sock_diag: one lookup in the socket tables, not a
//! walk of `/proc/net/{udp,tcp}`, which reads every hash bucket), which gives its inode and owner;
//! then the process that holds it is found by a look through `/proc/PID/fd`. That look is made at
//! most [`LOOKS_PER_SECOND`] times a second: past that a flood of queries is recorded with the
//! owner's uid alone, so it cannot keep the resolver busy.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Instant;

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
    let mut found = QueryProcess {
        uid,
        cookie,
        ..QueryProcess::default()
    };
    if !within_rate() {
        return Some(found);
    }
    if let Some(pid) = holder_of(inode) {
        found.pid = Some(pid);
        found.comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim_end().to_string())
            .unwrap_or_default();
        found.exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    Some(found)
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

/// The socket the kernel's sock_diag finds for `query`: `None` when it is not found or
/// sock_diag cannot look.
fn diagnosed(query: QuerySocket) -> Option<(u64, u32, u64)> {
    use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
    use netlink_packet_sock_diag::SockDiagMessage;
    use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP, IPPROTO_UDP};
    use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
    use netlink_sys::{Socket, SocketAddr as NetlinkAddr, protocols::NETLINK_SOCK_DIAG};

    // TCP is looked up as the socket sees itself (source: its own end); UDP as a datagram to it
    // would be addressed (source: the resolver's end), the kernel's historical swap.
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
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut message = NetlinkMessage::new(header, SockDiagMessage::InetRequest(request).into());
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    let mut socket = Socket::new(NETLINK_SOCK_DIAG).ok()?;
    socket.bind_auto().ok()?;
    socket.connect(&NetlinkAddr::new(0, 0)).ok()?;
    socket.send(&bytes, 0).ok()?;
    let mut reply = vec![0; 4096];
    let length = socket.recv(&mut &mut reply[..], 0).ok()?;
    let answer = NetlinkMessage::<SockDiagMessage>::deserialize(&reply[..length]).ok()?;
    match answer.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
            // Two native words, low then high (the kernel's `sock_diag_save_cookie`).
            let words = response.header.socket_id.cookie;
            let word =
                |at: usize| u64::from(u32::from_ne_bytes(words[at..at + 4].try_into().unwrap()));
            let cookie = word(0) | word(4) << 32;
            Some((
                u64::from(response.header.inode),
                response.header.uid,
                cookie,
            ))
            .filter(|(inode, _, _)| *inode != 0)
        }
        // Not found (the program closed it already), or an error.
        _ => None,
    }
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
}
