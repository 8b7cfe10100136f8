//! Which process sent a query: the resolver sees only the peer's loopback address, so the socket
//! is found by its local port in `/proc/net/{udp,tcp}{,6}` (its inode and owner), then the
//! process that holds it by a look through `/proc/PID/fd`. Done for refused names only (what a
//! record must name), and at most [`LOOKS_PER_SECOND`] times a second: past that a flood of
//! queries is recorded with the owner's uid alone, so it cannot keep the resolver busy.

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
}

/// The process that holds the socket with local address `peer`, over TCP or UDP.
pub fn process_of(peer: SocketAddr, tcp: bool) -> Option<QueryProcess> {
    let (inode, uid) = socket_of(peer, tcp)?;
    let mut found = QueryProcess {
        uid,
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

/// The inode and owner of the socket whose local port is `peer`'s, from the kernel's tables.
fn socket_of(peer: SocketAddr, tcp: bool) -> Option<(u64, u32)> {
    let protocol = if tcp { "tcp" } else { "udp" };
    let table = match peer {
        SocketAddr::V4(_) => format!("/proc/net/{protocol}"),
        SocketAddr::V6(_) => format!("/proc/net/{protocol}6"),
    };
    let text = std::fs::read_to_string(table).ok()?;
    find_socket(&text, peer.port())
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
    fn a_socket_is_found_by_its_local_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                     123: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1111 2 0 0\n\
                     124: 0100007F:D431 0100007F:0035 01 00000000:00000000 00:00000000 00000000  1000        0 2222 2 0 0\n";
        assert_eq!(find_socket(table, 0xD431), Some((2222, 1000)));
        assert_eq!(find_socket(table, 53), Some((1111, 0)));
        assert_eq!(find_socket(table, 9), None);
    }

    #[test]
    fn this_process_is_found_as_the_holder_of_its_socket() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let found = process_of(socket.local_addr().unwrap(), false).unwrap();
        assert_eq!(found.pid, Some(std::process::id()));
        // SAFETY: getuid has no preconditions.
        assert_eq!(found.uid, unsafe { libc::getuid() });
    }
}
