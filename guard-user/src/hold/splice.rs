//! guard's splice listener: where a held connect to a stand-in address goes. A stand-in stands
//! for a name no rule names (`unmatched_network="prompt"` with guard's resolver), which does not
//! leave the host before an approval, so its connect has no real address to be held on the way
//! to. The connect programs send it here instead (the kernel's `held::SPLICED`), and the kernel
//! holds its SYNs on the way as it holds any prompted connect's, so its program's connect
//! timeout applies and a denial fails the connect. Approved (the name resolved and its stand-in
//! mapped), the kernel lets its next SYN out (`held::SPLICE_RELEASED`, then `SPLICE_CONNECTED`):
//! it connects here, and guard connects to the real address itself (from outside the scope) and
//! copies bytes both ways, the way a transparent proxy does. The program's connect has completed by then: a real
//! address that cannot be reached resets the connection.
//!
//! The listener is on 127.0.0.1 at a port of its own. A connection is matched to its held
//! socket by its full address (the local address and port the kernel wrote in the socket's
//! `HELD_SOCKETS` entry) and then by the socket's identity: the kernel is asked (sock_diag) for
//! the cookie of the socket at the other end of that exact connection, which must be the held
//! socket's. So another scope's socket bound to the same port on another loopback address, or
//! one that took the address after the held socket closed, is never spliced; where the kernel
//! cannot say (no `inet_diag` for TCP), the connection is not spliced either (fails closed).
//! The identity is asked as a connection is accepted: one whose socket is not a released held
//! one (only an approved connect's SYN reaches the listener) is closed at once, so connections that no held socket made cannot fill the waiting room and
//! push a held one out. Waiting connections are kept by their address, never by the order they
//! came in.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::resolve::peer::{QuerySocket, socket_cookie};

/// How long an accepted connection waits to be matched to its held socket (its event arrives
/// within milliseconds): past it, it is closed.
const UNMATCHED_FOR: Duration = Duration::from_secs(30);
/// The most connections waiting to be matched; past it the oldest are closed.
const MAX_WAITING: usize = 1024;
/// How long connecting to the real address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct SpliceListener {
    listener: TcpListener,
    address: SocketAddrV4,
    /// Accepted connections of held sockets not yet taken, by the peer's address: the stream,
    /// the peer socket's cookie, and when it came.
    waiting: HashMap<SocketAddrV4, (TcpStream, u64, Instant)>,
}

/// Why a held socket's connection was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum NotTaken {
    /// Nothing came from that address (yet).
    NotHere,
    /// Something came from that address, but it is not the held socket (or the kernel cannot
    /// say whose it is): it was closed.
    NotTheHeldSocket,
}

impl SpliceListener {
    /// Listens on 127.0.0.1 at a port the kernel picks.
    pub fn start() -> io::Result<SpliceListener> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        Ok(SpliceListener {
            listener,
            address: SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
            waiting: HashMap::new(),
        })
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// The connection that came from `from` (a held socket's local address and port), if it
    /// came and is the socket whose cookie is `cookie`. `is_held` says whether a cookie is a
    /// held socket's that may come here (released), for the connections accepted meanwhile.
    pub fn take(
        &mut self,
        from: SocketAddr,
        cookie: u64,
        is_held: impl Fn(u64) -> bool,
    ) -> Result<TcpStream, NotTaken> {
        self.accept(is_held);
        let SocketAddr::V4(from) = canonical(from) else {
            return Err(NotTaken::NotHere);
        };
        let (stream, identity, _) = self.waiting.remove(&from).ok_or(NotTaken::NotHere)?;
        if identity == cookie {
            Ok(stream)
        } else {
            tracing::warn!(
                "a connection to the splice listener from {from} is not the held socket \
                 {cookie:#x} (its cookie: {identity:#x}): closed"
            );
            Err(NotTaken::NotTheHeldSocket)
        }
    }

    /// Accepts what came (without waiting): a connection whose socket the kernel names as a
    /// held one waits to be taken, any other is closed; and closes what waited too long.
    fn accept(&mut self, is_held: impl Fn(u64) -> bool) {
        // Bounded: at most this many a call, the rest on the next.
        for _ in 0..MAX_WAITING {
            match self.listener.accept() {
                Ok((stream, SocketAddr::V4(peer))) if peer.ip().is_loopback() => {
                    // Its program may have closed it already (sent, then closed): the
                    // socket keeps its cookie, and what it sent waits here.
                    let identity = socket_cookie(QuerySocket {
                        program: SocketAddr::V4(peer),
                        resolver: SocketAddr::V4(self.address),
                        tcp: true,
                    });
                    match identity {
                        Some(cookie) if is_held(cookie) => {
                            self.waiting.insert(peer, (stream, cookie, Instant::now()));
                        }
                        // No held socket made it, or the kernel cannot say whose it is.
                        _ => tracing::debug!(
                            "a connection to the splice listener from {peer} is no held \
                             socket's (cookie {identity:?}): closed"
                        ),
                    }
                }
                // Not from a held socket on this host: closed.
                Ok(_) => {}
                Err(_) => break,
            }
        }
        self.waiting
            .retain(|_, (_, _, since)| since.elapsed() < UNMATCHED_FOR);
        if self.waiting.len() > MAX_WAITING {
            let mut by_age: Vec<(SocketAddrV4, Instant)> =
                self.waiting.iter().map(|(a, (_, _, t))| (*a, *t)).collect();
            by_age.sort_by_key(|(_, since)| *since);
            for (address, _) in by_age.into_iter().take(self.waiting.len() - MAX_WAITING) {
                self.waiting.remove(&address);
            }
        }
    }
}

/// A v4-mapped IPv6 address as the IPv4 one it is.
fn canonical(address: SocketAddr) -> SocketAddr {
    match address {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => address,
        },
        v4 => v4,
    }
}

/// Connects to `real` and copies bytes between it and `client` until both sides are done, on
/// threads of their own (the connect too: the caller's loop does not wait for a slow host). A
/// real address that cannot be reached resets `client` (its program reads ECONNRESET, as from
/// a host that refused it). `Err`: no thread could be started (`client` is closed).
pub fn splice(client: TcpStream, real: SocketAddr) -> io::Result<()> {
    client.set_nonblocking(false)?;
    std::thread::Builder::new()
        .name("guard-splice".into())
        .spawn(
            move || match TcpStream::connect_timeout(&real, CONNECT_TIMEOUT) {
                Ok(upstream) => copy_both_ways(client, upstream),
                Err(err) => {
                    tracing::warn!(
                        "an approved connect spliced to {real} could not reach it: {err}"
                    );
                    reset(&client);
                }
            },
        )?;
    Ok(())
}

/// Copies each way on a thread of its own until both are done.
fn copy_both_ways(client: TcpStream, upstream: TcpStream) {
    let (Ok(client_read), Ok(upstream_write)) = (client.try_clone(), upstream.try_clone()) else {
        reset(&client);
        return;
    };
    let other = std::thread::Builder::new()
        .name("guard-splice".into())
        .spawn(move || copy_then_close(client_read, upstream_write));
    if other.is_err() {
        reset(&client);
        return;
    }
    copy_then_close(upstream, client);
}

/// Closes `stream` with a reset (`SO_LINGER` 0) once its last descriptor goes.
fn reset(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a linger value of the size passed, on a socket this process owns.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// Copies `from` to `to` until `from` ends, then ends `to`'s writing half.
fn copy_then_close(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// The kernel's cookie of `stream`'s own socket (`SO_COOKIE`).
    fn cookie_of(stream: &TcpStream) -> u64 {
        use std::os::fd::AsRawFd;
        let mut cookie = 0u64;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        // SAFETY: a u64 out-parameter of the size passed.
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_COOKIE,
                (&mut cookie as *mut u64).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        cookie
    }

    fn taken(
        listener: &mut SpliceListener,
        from: SocketAddr,
        cookie: u64,
    ) -> Result<TcpStream, NotTaken> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match listener.take(from, cookie, |_| true) {
                Err(NotTaken::NotHere) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                other => return other,
            }
        }
    }

    #[test]
    fn a_connection_is_taken_by_its_address_and_cookie_and_spliced_to_the_real_address() {
        let real = TcpListener::bind("127.0.0.1:0").unwrap();
        let real_addr = real.local_addr().unwrap();
        let mut splice_listener = SpliceListener::start().unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", splice_listener.port())).unwrap();
        let (from, cookie) = (client.local_addr().unwrap(), cookie_of(&client));
        let accepted = taken(&mut splice_listener, from, cookie).expect("the held socket's");
        assert_eq!(
            splice_listener.take(from, cookie, |_| true).err(),
            Some(NotTaken::NotHere),
            "taken once"
        );
        splice(accepted, real_addr).unwrap();
        let (mut server, _) = real.accept().unwrap();
        client.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        server.write_all(b"pong").unwrap();
        drop(server);
        let mut back = Vec::new();
        client.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"pong", "the reply, then the end of the stream");
    }

    #[test]
    fn a_real_address_that_cannot_be_reached_resets_the_spliced_connection() {
        let gone = TcpListener::bind("127.0.0.1:0").unwrap();
        let real_addr = gone.local_addr().unwrap();
        drop(gone);
        let mut splice_listener = SpliceListener::start().unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", splice_listener.port())).unwrap();
        let (from, cookie) = (client.local_addr().unwrap(), cookie_of(&client));
        let accepted = taken(&mut splice_listener, from, cookie).expect("the held socket's");
        splice(accepted, real_addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut byte = [0u8; 1];
        let err = client
            .read(&mut byte)
            .expect_err("no bytes, no orderly end");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
    }

    #[test]
    fn the_same_port_on_another_address_or_another_socket_is_never_taken() {
        use std::os::fd::FromRawFd;
        let mut splice_listener = SpliceListener::start().unwrap();
        let held = TcpStream::connect(("127.0.0.1", splice_listener.port())).unwrap();
        let (from, cookie) = (held.local_addr().unwrap(), cookie_of(&held));
        // Another socket bound to the held socket's port on 127.0.0.2 comes first.
        // SAFETY: socket, bind and connect on a descriptor made here.
        let hijacker = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            let mut address: libc::sockaddr_in = std::mem::zeroed();
            address.sin_family = libc::AF_INET as libc::sa_family_t;
            address.sin_port = from.port().to_be();
            address.sin_addr.s_addr = u32::from(Ipv4Addr::new(127, 0, 0, 2)).to_be();
            let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            assert_eq!(libc::bind(fd, (&raw const address).cast(), size), 0);
            address.sin_port = splice_listener.port().to_be();
            address.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
            assert_eq!(libc::connect(fd, (&raw const address).cast(), size), 0);
            TcpStream::from_raw_fd(fd)
        };
        let hijacker_from = hijacker.local_addr().unwrap();
        assert_eq!(hijacker_from.port(), from.port());
        // Asked for by the held socket's address: the held socket's connection, not the other.
        let accepted = taken(&mut splice_listener, from, cookie).expect("the held socket's");
        assert_eq!(accepted.peer_addr().unwrap(), from);
        // The other address with the held socket's cookie: not the held socket, closed.
        assert_eq!(
            taken(&mut splice_listener, hijacker_from, cookie).err(),
            Some(NotTaken::NotTheHeldSocket)
        );
    }

    #[test]
    fn a_connection_no_held_socket_made_is_closed_as_it_is_accepted() {
        let mut splice_listener = SpliceListener::start().unwrap();
        let held = TcpStream::connect(("127.0.0.1", splice_listener.port())).unwrap();
        let mut other = TcpStream::connect(("127.0.0.1", splice_listener.port())).unwrap();
        let (from, cookie) = (held.local_addr().unwrap(), cookie_of(&held));
        let only_held = |c: u64| c == cookie;
        let deadline = Instant::now() + Duration::from_secs(5);
        let accepted = loop {
            match splice_listener.take(from, cookie, only_held) {
                Ok(stream) => break stream,
                Err(NotTaken::NotHere) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(err) => panic!("{err:?}"),
            }
        };
        assert_eq!(accepted.peer_addr().unwrap(), from);
        // The other connection was accepted in the same turn and closed: it reads the end.
        other
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(other.read(&mut byte).unwrap(), 0, "closed at once");
        assert!(splice_listener.waiting.is_empty(), "nothing else waits");
    }
}
