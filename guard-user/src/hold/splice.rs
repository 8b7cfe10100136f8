//! guard's splice listener: where a held connect to a stand-in address goes. A stand-in stands
//! for a name no rule names (`unmatched_network="prompt"` with guard's resolver), which does not
//! leave the host before an approval, so its connect has no real address to be held on the way
//! to. The connect programs send it here instead (the kernel's `held::SPLICED`); it connects at
//! once, and waits, as its program's data does, until the ask is answered. Approved (the name
//! resolved and its stand-in mapped), guard connects to the real address itself (from outside
//! the scope) and copies bytes both ways, the way a transparent proxy does; denied or expired,
//! the connection is closed.
//!
//! The listener is on 127.0.0.1 at a port of its own; a connection is matched to its held socket
//! by the local port the kernel wrote in the socket's `HELD_SOCKETS` entry.

use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long an accepted connection waits to be matched to its held socket (its event arrives
/// within milliseconds): past it, it is closed.
const UNMATCHED_FOR: Duration = Duration::from_secs(30);
/// The most connections waiting to be matched; past it the oldest are closed.
const MAX_WAITING: usize = 1024;
/// How long connecting to the real address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct SpliceListener {
    listener: TcpListener,
    port: u16,
    /// Accepted connections not yet taken: the peer's port, and when it came.
    waiting: Vec<(TcpStream, u16, Instant)>,
}

impl SpliceListener {
    /// Listens on 127.0.0.1 at a port the kernel picks.
    pub fn start() -> io::Result<SpliceListener> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        Ok(SpliceListener {
            listener,
            port,
            waiting: Vec::new(),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection that came from local port `port` (a held socket's), if it came.
    pub fn take(&mut self, port: u16) -> Option<TcpStream> {
        self.accept();
        let at = self.waiting.iter().position(|(_, peer, _)| *peer == port)?;
        Some(self.waiting.swap_remove(at).0)
    }

    /// Accepts what came (without waiting), and closes what waited too long.
    fn accept(&mut self) {
        // Bounded: at most this many a call, the rest on the next.
        for _ in 0..MAX_WAITING {
            match self.listener.accept() {
                Ok((stream, SocketAddr::V4(peer))) if peer.ip().is_loopback() => {
                    self.waiting.push((stream, peer.port(), Instant::now()));
                }
                // Not from a held socket on this host: closed.
                Ok(_) => {}
                Err(_) => break,
            }
        }
        self.waiting
            .retain(|(_, _, since)| since.elapsed() < UNMATCHED_FOR);
        if self.waiting.len() > MAX_WAITING {
            let extra = self.waiting.len() - MAX_WAITING;
            self.waiting.drain(..extra);
        }
    }
}

/// Connects to `real` and copies bytes between it and `client` until both sides are done, on
/// threads of their own. `Err`: the real address could not be reached (`client` is closed).
pub fn splice(client: TcpStream, real: SocketAddr) -> io::Result<()> {
    let upstream = TcpStream::connect_timeout(&real, CONNECT_TIMEOUT)?;
    client.set_nonblocking(false)?;
    let (client_read, upstream_write) = (client.try_clone()?, upstream.try_clone()?);
    std::thread::Builder::new()
        .name("guard-splice".into())
        .spawn(move || copy_then_close(client_read, upstream_write))?;
    std::thread::Builder::new()
        .name("guard-splice".into())
        .spawn(move || copy_then_close(upstream, client))?;
    Ok(())
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

    #[test]
    fn a_connection_is_taken_by_its_port_and_spliced_to_the_real_address() {
        let real = TcpListener::bind("127.0.0.1:0").unwrap();
        let real_addr = real.local_addr().unwrap();
        let mut splice_listener = SpliceListener::start().unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", splice_listener.port())).unwrap();
        let port = client.local_addr().unwrap().port();
        let deadline = Instant::now() + Duration::from_secs(5);
        let accepted = loop {
            if let Some(stream) = splice_listener.take(port) {
                break stream;
            }
            assert!(Instant::now() < deadline, "the connection was not accepted");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(splice_listener.take(port).is_none(), "taken once");
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
}
