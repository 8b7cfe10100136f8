//! A process's IPv4 sockets as the kernel lists them in `/proc/PID/net/{tcp,udp}` and
//! `/proc/PID/fd`: how a test finds, from outside, the port a daemon listens on or the connection
//! a held program waits on (what an attacker on the host can see the same way).

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4};

/// `st` of a TCP socket in `/proc/net/tcp`.
pub const ESTABLISHED: u8 = 0x01;
pub const SYN_SENT: u8 = 0x02;
pub const LISTEN: u8 = 0x0A;

/// One row of `/proc/PID/net/tcp` (or `udp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketRow {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    pub state: u8,
    pub inode: u64,
}

/// The IPv4 sockets of `table` (`tcp` or `udp`) in the network namespace of process `pid`.
pub fn rows(pid: u32, table: &str) -> Vec<SocketRow> {
    let path = format!("/proc/{pid}/net/{table}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    // A header line, then `sl local rem st queues tr retrnsmt uid timeout inode ...`.
    text.lines().skip(1).filter_map(row).collect()
}

fn row(line: &str) -> Option<SocketRow> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    Some(SocketRow {
        local: address(fields.get(1)?)?,
        remote: address(fields.get(2)?)?,
        state: u8::from_str_radix(fields.get(3)?, 16).ok()?,
        inode: fields.get(9)?.parse().ok()?,
    })
}

/// `0100007F:1F90`: the address as the kernel's `%08X` of its network-order bytes read as a
/// native u32, then the port in hex.
fn address(text: &str) -> Option<SocketAddrV4> {
    let (ip, port) = text.split_once(':')?;
    let ip = u32::from_str_radix(ip, 16).ok()?;
    Some(SocketAddrV4::new(
        Ipv4Addr::from(ip.to_ne_bytes()),
        u16::from_str_radix(port, 16).ok()?,
    ))
}

/// The inodes of the sockets process `pid` has open.
pub fn socket_inodes(pid: u32) -> HashSet<u64> {
    let folder = format!("/proc/{pid}/fd");
    let entries = std::fs::read_dir(&folder).unwrap_or_else(|e| panic!("reading {folder}: {e}"));
    entries
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_of_this_process_and_its_connection_are_listed_with_their_addresses() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(at) = listener.local_addr().unwrap() else {
            unreachable!()
        };
        let client = std::net::TcpStream::connect(at).unwrap();
        let std::net::SocketAddr::V4(from) = client.local_addr().unwrap() else {
            unreachable!()
        };
        let pid = std::process::id();
        let ours = socket_inodes(pid);
        let tcp = rows(pid, "tcp");
        assert!(
            tcp.iter()
                .any(|r| r.local == at && r.state == LISTEN && ours.contains(&r.inode)),
            "{tcp:?}"
        );
        assert!(
            tcp.iter().any(|r| r.local == from
                && r.remote == at
                && r.state == ESTABLISHED
                && ours.contains(&r.inode)),
            "{tcp:?}"
        );
    }
}
