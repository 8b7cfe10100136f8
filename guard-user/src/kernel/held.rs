//! Ending a held TCP socket on a denial: `SOCK_DESTROY` over the `sock_diag` netlink family, the
//! way `ss --kill` ends a socket. The socket is named by its addresses and ports (which the
//! sock_ops program wrote in its `HELD_SOCKETS` entry) and its cookie, so only that socket can
//! match. Its program sees the connect fail at once with ECONNABORTED.
//!
//! A connect held on its way to guard's splice listener is connecting to the listener, not to
//! the stand-in its entry names: [`connection`] says which.
//!
//! Needs `CONFIG_INET_DIAG_DESTROY`; without it the call fails with EOPNOTSUPP and the socket
//! stays held until its program gives up or its user timeout (the ask's expiry) ends it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use guard_common::maps::{HeldSocket, held};

const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DESTROY: u16 = 21;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const IPPROTO_TCP: u8 = 6;

#[repr(C)]
struct Header {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}

/// `struct inet_diag_req_v2` with its `struct inet_diag_sockid`.
#[repr(C)]
struct Request {
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    sport: u16,
    dport: u16,
    src: [u8; 16],
    dst: [u8; 16],
    interface: u32,
    cookie: [u32; 2],
}

#[repr(C)]
struct Message {
    header: Header,
    request: Request,
}

/// The connection held socket `entry` makes, as `sock_diag` names it: to its destination, or
/// for one sent to guard's splice listener (at `splice_port` on 127.0.0.1; the connect programs
/// write `::ffff:127.0.0.1` for an IPv6 socket, which is held as IPv4) to the listener.
pub fn connection(entry: &HeldSocket, splice_port: u16) -> HeldSocket {
    if !held::is_spliced(entry.state) {
        return *entry;
    }
    let mut addr = [0u8; 16];
    addr[..4].copy_from_slice(&[127, 0, 0, 1]);
    HeldSocket {
        addr,
        port: splice_port,
        ..*entry
    }
}

/// Ends the held TCP socket `cookie` (its connect fails with ECONNABORTED). `NotFound`: no such
/// socket any more (it closed, or its program gave up).
pub fn end_socket(cookie: u64, held: &HeldSocket) -> io::Result<()> {
    // SAFETY: plain socket call.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nobody else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let message = Message {
        header: Header {
            len: std::mem::size_of::<Message>() as u32,
            kind: SOCK_DESTROY,
            flags: NLM_F_REQUEST | NLM_F_ACK,
            seq: 1,
            pid: 0,
        },
        request: Request {
            family: held.family as u8,
            protocol: IPPROTO_TCP,
            ext: 0,
            pad: 0,
            states: u32::MAX,
            sport: held.local_port.to_be(),
            dport: held.port.to_be(),
            src: held.local_addr,
            dst: held.addr,
            interface: 0,
            cookie: [cookie as u32, (cookie >> 32) as u32],
        },
    };
    // SAFETY: the message is a plain repr(C) value of the length given; the kernel's own
    // address (all zero) is the default destination of a netlink socket.
    let sent = unsafe {
        libc::send(
            socket.as_raw_fd(),
            (&raw const message).cast(),
            std::mem::size_of::<Message>(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    // The answer: an NLMSG_ERROR whose code is 0 (done) or a negative errno.
    let mut answer = [0u8; 256];
    // SAFETY: a buffer of the length given.
    let got = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            answer.as_mut_ptr().cast(),
            answer.len(),
            0,
        )
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = got as usize;
    if got < 20 || u16::from_ne_bytes([answer[4], answer[5]]) != NLMSG_ERROR {
        return Err(io::Error::other(
            "sock_diag answered SOCK_DESTROY with something other than an acknowledgement",
        ));
    }
    let code = i32::from_ne_bytes([answer[16], answer[17], answer[18], answer[19]]);
    match code {
        0 => Ok(()),
        code => Err(io::Error::from_raw_os_error(-code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spliced_socket_is_ended_at_the_listener_and_any_other_at_its_destination() {
        let mut entry = HeldSocket {
            addr: [198, 18, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            port: 443,
            family: libc::AF_INET as u16,
            state: held::HELD,
            ..HeldSocket::default()
        };
        assert_eq!(connection(&entry, 4000), entry);
        for state in [held::SPLICED, held::SPLICE_RELEASED] {
            entry.state = state;
            let at = connection(&entry, 4000);
            assert_eq!((&at.addr[..4], at.port), (&[127, 0, 0, 1][..], 4000));
            assert_eq!(at.addr[4..], [0; 12]);
        }
    }
}
