//! Where guard's resolver sends the queries it answers: one server, over UDP (TCP when the
//! program asked over TCP, or the UDP answer was truncated). guard's own sockets are outside
//! every scope, so these queries are not redirected back to it.
//!
//! UDP sockets are kept between queries ([`Upstream`]): opening, connecting and registering a
//! socket for every query cost more than the server's answer on loopback. What a spoofed answer
//! must guess stays what it was: each query has a random id (`getrandom`) and is answered only
//! on its own socket, connected to the server (the kernel takes datagrams from its address
//! alone), with the id and question checked. A socket serves one query at a time, binds a port
//! the kernel picks at random, and is closed after [`SOCKET_USES`] queries or [`SOCKET_AGE`],
//! so its port changes often (dnsmasq keeps a pool of random ports the same way); one whose
//! query timed out or failed is closed at once, so no late datagram is read as a later answer.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hickory_resolver::proto::op::{Message, MessageType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::timeout;

/// How long one attempt waits for the server.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);
/// UDP attempts (datagrams get lost).
const UDP_ATTEMPTS: usize = 2;
/// The largest answer taken over UDP (EDNS allows up to 64 KiB; 4 KiB is what resolvers offer).
const UDP_ANSWER_MAX: usize = 4096;
/// The most queries one UDP socket (one source port) serves before it is closed.
pub const SOCKET_USES: u32 = 32;
/// The longest one UDP socket is kept.
pub const SOCKET_AGE: Duration = Duration::from_secs(10);
/// The most idle sockets kept (as many queries at once reuse them; more open new ones).
const IDLE_SOCKETS: usize = 16;

/// The upstream server: `nameserver` when given, else the first name server of the system's
/// configuration (`/etc/resolv.conf`), port 53.
pub fn choose(nameserver: Option<SocketAddr>) -> Result<SocketAddr> {
    if let Some(addr) = nameserver {
        return Ok(addr);
    }
    let (config, _) = hickory_resolver::system_conf::read_system_conf()
        .context("reading the system resolver configuration (/etc/resolv.conf)")?;
    let server = config.name_servers().first().ok_or_else(|| {
        anyhow!(
            "the system resolver configuration (/etc/resolv.conf) names no name server; give one \
             with --nameserver IP:PORT"
        )
    })?;
    Ok(SocketAddr::new(server.ip, 53))
}

/// The upstream server and the UDP sockets kept for it.
pub struct Upstream {
    server: SocketAddr,
    idle: Mutex<Vec<KeptSocket>>,
}

struct KeptSocket {
    socket: UdpSocket,
    /// Queries it answered.
    uses: u32,
    opened: Instant,
}

impl Upstream {
    pub fn new(server: SocketAddr) -> Upstream {
        Upstream {
            server,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Sends `query` (guard's own, [`super::serve::forwarded_query`]) and returns the server's
    /// answer, checked to answer it (its id and question), with what `meanwhile` returned: it
    /// runs once the query is sent, while the server works on it. `tcp`: over TCP from the
    /// start.
    pub async fn exchange<T>(
        &self,
        query: &Message,
        tcp: bool,
        meanwhile: impl FnOnce() -> T,
    ) -> (Result<Message>, T) {
        let bytes = match query.to_vec().context("writing the query") {
            Ok(bytes) => bytes,
            Err(err) => return (Err(err), meanwhile()),
        };
        let upstream = self.server;
        let value = if tcp {
            meanwhile()
        } else {
            let (answer, value) = self.exchange_udp(&bytes, query, meanwhile).await;
            match answer {
                // Truncated: the answer did not fit; ask again over TCP, as a stub resolver
                // would.
                Ok(answer) if answer.metadata.truncation => value,
                answer => return (answer, value),
            }
        };
        let answer = exchange_tcp(upstream, &bytes).await.and_then(|answer| {
            answer_to(&answer, query).with_context(|| {
                format!("the name server {upstream} sent an unusable answer over TCP")
            })
        });
        (answer, value)
    }

    async fn exchange_udp<T>(
        &self,
        bytes: &[u8],
        query: &Message,
        meanwhile: impl FnOnce() -> T,
    ) -> (Result<Message>, T) {
        let upstream = self.server;
        let kept = match self.take() {
            Some(kept) => kept,
            None => match self.open().await {
                Ok(kept) => kept,
                Err(err) => return (Err(err), meanwhile()),
            },
        };
        let mut buffer = vec![0u8; UDP_ANSWER_MAX];
        // A datagram left from an earlier query (an answer to an attempt already answered) is
        // not this query's: dropped before it is sent.
        for _ in 0..UDP_ATTEMPTS * 4 {
            if kept.socket.try_recv(&mut buffer).is_err() {
                break;
            }
        }
        let sent = kept.socket.send(bytes).await;
        let value = meanwhile();
        if let Err(err) = sent {
            return (
                Err(err).with_context(|| format!("sending to the name server {upstream}")),
                value,
            );
        }
        for attempt in 0..UDP_ATTEMPTS {
            if attempt > 0
                && let Err(err) = kept.socket.send(bytes).await
            {
                let err =
                    Err(err).with_context(|| format!("sending to the name server {upstream}"));
                return (err, value);
            }
            // Datagrams with another id or question (a late answer to an earlier attempt is
            // still this query's) are skipped until the attempt's time is up.
            let attempt = async {
                loop {
                    let n = kept.socket.recv(&mut buffer).await?;
                    if let Ok(answer) = answer_to(&buffer[..n], query) {
                        return Ok::<_, std::io::Error>(answer);
                    }
                }
            };
            match timeout(ATTEMPT_TIMEOUT, attempt).await {
                Ok(Ok(answer)) => {
                    self.give_back(kept);
                    return (Ok(answer), value);
                }
                Ok(Err(err)) => {
                    let err = Err(err)
                        .with_context(|| format!("reading from the name server {upstream}"));
                    return (err, value);
                }
                Err(_) => {}
            }
        }
        (
            Err(anyhow!("the name server {upstream} did not answer")),
            value,
        )
    }

    /// An idle socket still within its uses and age.
    fn take(&self) -> Option<KeptSocket> {
        let mut idle = self.idle.lock().ok()?;
        let now = Instant::now();
        while let Some(kept) = idle.pop() {
            if now.duration_since(kept.opened) < SOCKET_AGE {
                return Some(kept);
            }
        }
        None
    }

    /// Keeps `kept` for another query, unless it served its share or enough are kept.
    fn give_back(&self, mut kept: KeptSocket) {
        kept.uses += 1;
        if kept.uses >= SOCKET_USES || kept.opened.elapsed() >= SOCKET_AGE {
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < IDLE_SOCKETS
        {
            idle.push(kept);
        }
    }

    /// A new socket on a port the kernel picks, connected to the server.
    async fn open(&self) -> Result<KeptSocket> {
        let upstream = self.server;
        let local: SocketAddr = if upstream.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(local).await?;
        socket
            .connect(upstream)
            .await
            .with_context(|| format!("reaching the name server {upstream}"))?;
        Ok(KeptSocket {
            socket,
            uses: 0,
            opened: Instant::now(),
        })
    }
}

/// Reads an upstream server's answer to query `id`, without I/O: a DNS response carrying that
/// id, or why it is not one.
pub fn read_answer(bytes: &[u8], id: u16) -> Result<Message> {
    let answer = Message::from_vec(bytes).context("not a DNS message")?;
    if answer.metadata.message_type != MessageType::Response {
        bail!("a query, not an answer");
    }
    if answer.metadata.id != id {
        bail!(
            "the answer to another query (id {}, not {id})",
            answer.metadata.id
        );
    }
    Ok(answer)
}

/// [`read_answer`] for `query`, and its question is the query's (a name compared without its
/// letter case, as DNS does).
pub fn answer_to(bytes: &[u8], query: &Message) -> Result<Message> {
    let answer = read_answer(bytes, query.metadata.id)?;
    if answer.queries != query.queries {
        bail!("the answer to another question");
    }
    Ok(answer)
}

async fn exchange_tcp(upstream: SocketAddr, query: &[u8]) -> Result<Vec<u8>> {
    let work = async {
        let mut stream = TcpStream::connect(upstream).await?;
        let length = u16::try_from(query.len()).map_err(|_| anyhow!("query too long"))?;
        let mut framed = Vec::with_capacity(query.len() + 2);
        framed.extend_from_slice(&length.to_be_bytes());
        framed.extend_from_slice(query);
        stream.write_all(&framed).await?;
        let mut length = [0u8; 2];
        stream.read_exact(&mut length).await?;
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(length))];
        stream.read_exact(&mut answer).await?;
        Ok::<_, anyhow::Error>(answer)
    };
    timeout(ATTEMPT_TIMEOUT * 2, work)
        .await
        .map_err(|_| anyhow!("the name server {upstream} did not answer over TCP"))?
        .with_context(|| format!("asking the name server {upstream} over TCP"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hickory_resolver::proto::op::{OpCode, Query};
    use hickory_resolver::proto::rr::{Name, RecordType};

    use super::*;

    fn message(id: u16, message_type: MessageType) -> Vec<u8> {
        let mut message = match message_type {
            MessageType::Query => Message::query(),
            MessageType::Response => Message::response(id, OpCode::Query),
        };
        message.metadata.id = id;
        message.add_query(Query::query(
            Name::from_ascii("example.com.").unwrap(),
            RecordType::A,
        ));
        message.to_vec().unwrap()
    }

    #[test]
    fn an_answer_answers_the_question_it_was_asked() {
        let mut query = Message::query();
        query.metadata.id = 7;
        query.add_query(Query::query(
            Name::from_ascii("example.com.").unwrap(),
            RecordType::A,
        ));
        assert!(answer_to(&message(7, MessageType::Response), &query).is_ok());
        query.queries[0].set_query_type(RecordType::AAAA);
        let other = answer_to(&message(7, MessageType::Response), &query).unwrap_err();
        assert!(format!("{other:#}").contains("another question"));
    }

    #[test]
    fn an_answer_is_a_response_to_the_query_it_names() {
        let answer = read_answer(&message(7, MessageType::Response), 7).unwrap();
        assert_eq!(answer.metadata.id, 7);
        let other = read_answer(&message(8, MessageType::Response), 7).unwrap_err();
        assert!(format!("{other:#}").contains("another query (id 8, not 7)"));
        // A query sent back (a loop to a server that echoes) is not an answer.
        let echoed = read_answer(&message(7, MessageType::Query), 7).unwrap_err();
        assert!(format!("{echoed:#}").contains("a query, not an answer"));
        let garbage = read_answer(&[0x12, 0x34, 0x80], 0x1234).unwrap_err();
        assert!(format!("{garbage:#}").contains("not a DNS message"));
    }

    /// A name server on loopback that records the source port of each query and answers it,
    /// except the first `silent` queries.
    async fn server(silent: usize) -> (SocketAddr, Arc<std::sync::Mutex<Vec<u16>>>) {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let ports = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = ports.clone();
        tokio::spawn(async move {
            let mut buffer = vec![0u8; 4096];
            while let Ok((n, from)) = socket.recv_from(&mut buffer).await {
                let count = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(from.port());
                    seen.len()
                };
                if count <= silent {
                    continue;
                }
                let query = Message::from_vec(&buffer[..n]).unwrap();
                let mut answer = Message::response(query.metadata.id, OpCode::Query);
                answer.add_queries(query.queries.iter().cloned());
                let _ = socket.send_to(&answer.to_vec().unwrap(), from).await;
            }
        });
        (addr, ports)
    }

    fn query(id: u16) -> Message {
        let mut query = Message::query();
        query.metadata.id = id;
        query.add_query(Query::query(
            Name::from_ascii("example.com.").unwrap(),
            RecordType::A,
        ));
        query
    }

    #[tokio::test]
    async fn a_socket_serves_a_bounded_number_of_queries_then_a_new_port_is_bound() {
        let (addr, ports) = server(0).await;
        let upstream = Upstream::new(addr);
        let queries = SOCKET_USES as usize + 1;
        for i in 0..queries {
            let (answer, ran) = upstream.exchange(&query(i as u16), false, || 7).await;
            assert_eq!(answer.unwrap().metadata.id, i as u16);
            assert_eq!(ran, 7, "what runs while the server answers");
        }
        let ports = ports.lock().unwrap().clone();
        assert_eq!(ports.len(), queries);
        // One after the other, the kept socket answers its share from one port; the next
        // query comes from a new one.
        let first = ports[0];
        assert!(
            ports[..SOCKET_USES as usize].iter().all(|p| *p == first),
            "{ports:?}"
        );
        assert_ne!(ports[SOCKET_USES as usize], first, "{ports:?}");
    }

    #[tokio::test]
    async fn a_socket_whose_query_went_unanswered_is_not_used_again() {
        // The first query's two attempts get no answer: the query fails, and the next one
        // leaves from another port, so a late answer to the first is never read as its own.
        let (addr, ports) = server(UDP_ATTEMPTS).await;
        let upstream = Upstream::new(addr);
        let (failed, ()) = upstream.exchange(&query(1), false, || ()).await;
        assert!(format!("{:#}", failed.unwrap_err()).contains("did not answer"));
        let (answer, ()) = upstream.exchange(&query(2), false, || ()).await;
        assert_eq!(answer.unwrap().metadata.id, 2);
        let ports = ports.lock().unwrap().clone();
        assert_eq!(ports.len(), UDP_ATTEMPTS + 1, "{ports:?}");
        assert_eq!(ports[0], ports[1], "the retry is the same query's");
        assert_ne!(ports[UDP_ATTEMPTS], ports[0], "{ports:?}");
    }
}
