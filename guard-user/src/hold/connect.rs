//! What a held `connect` / `sendto` / `sendmsg` / `sendmmsg` asks for, read from the caller: the
//! destination's address and port (from its memory) and the socket's transport (from a copy of
//! its descriptor). As with an exec, the reading only chooses whether to ask: the kernel's
//! programs decide the call that really happens, from the kernel's own copy of the address.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;

use super::call::read_memory;
use super::listener::Notification;
use crate::policy::Transport;

/// A held call that names a destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectCall {
    pub address: IpAddr,
    pub port: u16,
    /// TCP or UDP (a socket of any other kind is not held).
    pub transport: Transport,
    /// `connect`, `sendto`, `sendmsg` or `sendmmsg`.
    pub syscall: &'static str,
}

/// A held call's destination before its socket's transport is known: reading the transport
/// costs two descriptor copies, which a destination that is prompted for neither TCP nor UDP
/// does not need.
#[derive(Clone, Copy, Debug)]
pub struct Destination {
    pub address: IpAddr,
    pub port: u16,
    syscall: &'static str,
    pid: u32,
    fd: i32,
}

impl Destination {
    /// The call, with its socket's transport; `None` for a socket that is neither TCP nor UDP.
    pub fn with_transport(self) -> Option<ConnectCall> {
        Some(ConnectCall {
            address: self.address,
            port: self.port,
            transport: socket_transport(self.pid, self.fd)?,
            syscall: self.syscall,
        })
    }
}

/// Reads the destination of `call`; `Ok(None)` for a call that names none guard decides (no
/// address, not IPv4/IPv6, memory the caller does not have).
pub fn read_destination(call: &Notification) -> io::Result<Option<Destination>> {
    let nr = call.nr as libc::c_long;
    let fd = call.args[0] as i32;
    let (syscall, address, length) = if nr == libc::SYS_connect {
        ("connect", call.args[1], call.args[2])
    } else if nr == libc::SYS_sendto {
        ("sendto", call.args[4], call.args[5])
    } else if nr == libc::SYS_sendmsg {
        match message_name(call.pid, call.args[1])? {
            Some((address, length)) => ("sendmsg", address, length),
            None => return Ok(None),
        }
    } else if nr == libc::SYS_sendmmsg {
        // The first message's (a `struct mmsghdr` starts with its `msghdr`); the kernel
        // decides the others as it always does.
        if call.args[2] == 0 {
            return Ok(None);
        }
        match message_name(call.pid, call.args[1])? {
            Some((address, length)) => ("sendmmsg", address, length),
            None => return Ok(None),
        }
    } else {
        return Ok(None);
    };
    if address == 0 {
        return Ok(None);
    }
    let Some((address, port)) = read_sockaddr(call.pid, address, length)? else {
        return Ok(None);
    };
    Ok(Some(Destination {
        address,
        port,
        syscall,
        pid: call.pid,
        fd,
    }))
}

/// `msg_name` and `msg_namelen` of the caller's `struct msghdr` at `message`.
fn message_name(pid: u32, message: u64) -> io::Result<Option<(u64, u64)>> {
    let mut head = [0u8; 12];
    if message == 0 || !read_memory(pid, message, &mut head)? {
        return Ok(None);
    }
    let name = u64::from_ne_bytes(head[0..8].try_into().expect("8 bytes"));
    let length = u32::from_ne_bytes(head[8..12].try_into().expect("4 bytes"));
    Ok(Some((name, length as u64)))
}

/// An IPv4 or IPv6 socket address of `length` bytes at `address`.
fn read_sockaddr(pid: u32, address: u64, length: u64) -> io::Result<Option<(IpAddr, u16)>> {
    let mut raw = [0u8; std::mem::size_of::<libc::sockaddr_in6>()];
    let length = (length as usize).min(raw.len());
    if length < 2 || !read_memory(pid, address, &mut raw[..length])? {
        return Ok(None);
    }
    let family = u16::from_ne_bytes([raw[0], raw[1]]) as i32;
    let port = |raw: &[u8]| u16::from_be_bytes([raw[2], raw[3]]);
    Ok(match family {
        libc::AF_INET if length >= std::mem::size_of::<libc::sockaddr_in>() => {
            let octets: [u8; 4] = raw[4..8].try_into().expect("4 bytes");
            Some((IpAddr::V4(Ipv4Addr::from(octets)), port(&raw)))
        }
        libc::AF_INET6 if length >= std::mem::size_of::<libc::sockaddr_in6>() => {
            let octets: [u8; 16] = raw[8..24].try_into().expect("16 bytes");
            Some((IpAddr::V6(Ipv6Addr::from(octets)), port(&raw)))
        }
        _ => None,
    })
}

/// The transport of the caller's socket `fd`, from a copy of it (`pidfd_getfd`, so it is the
/// socket the call names, not one a pid reused meanwhile would).
fn socket_transport(pid: u32, fd: i32) -> Option<Transport> {
    let socket = super::copy_fd(pid, fd).ok()?;
    let mut protocol: libc::c_int = 0;
    let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one int into `protocol`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PROTOCOL,
            (&mut protocol as *mut libc::c_int).cast(),
            &mut length,
        )
    };
    match (rc, protocol) {
        (0, libc::IPPROTO_TCP) => Some(Transport::Tcp),
        (0, libc::IPPROTO_UDP) => Some(Transport::Udp),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, UdpSocket};

    #[test]
    fn reads_an_address_and_its_own_socket_transport() {
        let pid = std::process::id();
        let v4 = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: 8443u16.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 9]),
            },
            sin_zero: [0; 8],
        };
        let at = &v4 as *const libc::sockaddr_in as u64;
        let read = read_sockaddr(pid, at, std::mem::size_of_val(&v4) as u64).unwrap();
        assert_eq!(read, Some(("127.0.0.9".parse().unwrap(), 8443)));
        assert_eq!(read_sockaddr(pid, at, 4).unwrap(), None, "too short");
        let socket = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        assert_eq!(
            socket_transport(pid, socket.as_raw_fd()),
            Some(Transport::Udp)
        );
    }
}
