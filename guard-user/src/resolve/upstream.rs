//! Where guard's resolver sends the queries it answers: one server, over UDP (TCP when the
//! program asked over TCP, or the UDP answer was truncated). guard's own sockets are outside
//! every scope, so these queries are not redirected back to it.

use std::net::SocketAddr;
use std::time::Duration;

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

/// Sends `query` (guard's own, [`super::serve::forwarded_query`]) and returns the server's
/// answer, checked to answer it (its id and question). `tcp`: over TCP from the start.
pub async fn exchange(upstream: SocketAddr, query: &Message, tcp: bool) -> Result<Message> {
    let bytes = query.to_vec().context("writing the query")?;
    if !tcp {
        let answer = exchange_udp(upstream, &bytes, query).await?;
        // Truncated: the answer did not fit; ask again over TCP, as a stub resolver would.
        if !answer.metadata.truncation {
            return Ok(answer);
        }
    }
    let answer = exchange_tcp(upstream, &bytes).await?;
    answer_to(&answer, query)
        .with_context(|| format!("the name server {upstream} sent an unusable answer over TCP"))
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

async fn exchange_udp(upstream: SocketAddr, bytes: &[u8], query: &Message) -> Result<Message> {
    let local: SocketAddr = if upstream.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let socket = UdpSocket::bind(local).await?;
    socket
        .connect(upstream)
        .await
        .with_context(|| format!("reaching the name server {upstream}"))?;
    let mut buffer = vec![0u8; UDP_ANSWER_MAX];
    for _ in 0..UDP_ATTEMPTS {
        socket.send(bytes).await?;
        // Datagrams with another id or question (a late answer to an earlier attempt is still
        // this query's) are skipped until the attempt's time is up.
        let attempt = async {
            loop {
                let n = socket.recv(&mut buffer).await?;
                if let Ok(answer) = answer_to(&buffer[..n], query) {
                    return Ok::<_, std::io::Error>(answer);
                }
            }
        };
        if let Ok(received) = timeout(ATTEMPT_TIMEOUT, attempt).await {
            return received.with_context(|| format!("reading from the name server {upstream}"));
        }
    }
    bail!("the name server {upstream} did not answer")
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
}
