//! The listeners and one query's way through the resolver (the steps are in the module above).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hickory_resolver::proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_resolver::proto::rr::RData;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{Semaphore, oneshot};
use tokio::time::timeout;

use super::cache::AnswerCache;
use super::names::{NameDecision, NamePolicy};
use super::{ANSWER_WAIT, Answered, RefusedName, ResolverConfig, ResolverEvent, upstream};

/// Queries answered at once; past it a UDP query is dropped (the program retries) and a TCP
/// connection waits.
const IN_FLIGHT: usize = 512;
/// How long an idle TCP connection is kept.
const TCP_IDLE: Duration = Duration::from_secs(10);

pub struct Shared {
    config: ResolverConfig,
    names: Arc<RwLock<NamePolicy>>,
    events: super::EventSink,
    cache: Mutex<AnswerCache>,
    in_flight: Arc<Semaphore>,
}

impl Shared {
    pub fn new(
        config: ResolverConfig,
        names: Arc<RwLock<NamePolicy>>,
        events: super::EventSink,
    ) -> Self {
        Shared {
            config,
            names,
            events,
            cache: Mutex::new(AnswerCache::default()),
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
        }
    }
}

pub async fn udp(socket: Arc<UdpSocket>, shared: Arc<Shared>) {
    let mut buffer = vec![0u8; 65_535];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buffer).await else {
            continue;
        };
        let Ok(permit) = shared.in_flight.clone().try_acquire_owned() else {
            continue;
        };
        let query = buffer[..n].to_vec();
        let (socket, shared) = (socket.clone(), shared.clone());
        tokio::spawn(async move {
            if let Some(reply) = answer(&shared, &query, false, peer).await {
                let _ = socket.send_to(&reply, peer).await;
            }
            drop(permit);
        });
    }
}

pub async fn tcp(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(tcp_connection(stream, peer, shared.clone()));
    }
}

/// Length-prefixed messages, one after the other, until the program closes or goes idle.
async fn tcp_connection(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    loop {
        let mut length = [0u8; 2];
        if !matches!(
            timeout(TCP_IDLE, stream.read_exact(&mut length)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let mut query = vec![0u8; usize::from(u16::from_be_bytes(length))];
        if !matches!(
            timeout(TCP_IDLE, stream.read_exact(&mut query)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let Ok(permit) = shared.in_flight.clone().acquire_owned().await else {
            return;
        };
        let reply = answer(&shared, &query, true, peer).await;
        drop(permit);
        let Some(reply) = reply else { return };
        let Ok(length) = u16::try_from(reply.len()) else {
            return;
        };
        let mut framed = length.to_be_bytes().to_vec();
        framed.extend_from_slice(&reply);
        if stream.write_all(&framed).await.is_err() {
            return;
        }
    }
}

/// The reply to one query from `peer` (`None`: not a query; nothing is sent back).
async fn answer(shared: &Shared, bytes: &[u8], tcp: bool, peer: SocketAddr) -> Option<Vec<u8>> {
    let query = Message::from_vec(bytes).ok()?;
    if query.metadata.message_type != MessageType::Query {
        return None;
    }
    let id = query.metadata.id;
    let Some(question) = query.queries.first().cloned() else {
        return reply_code(&query, ResponseCode::FormErr);
    };
    if query.metadata.op_code != OpCode::Query {
        return reply_code(&query, ResponseCode::NotImp);
    }
    let name = normalise(&question.name().to_ascii());
    let decision = shared
        .names
        .read()
        .map(|names| names.decide(&name))
        .unwrap_or(NameDecision::Unknown);
    if let NameDecision::Refuse(rule) = &decision {
        let refusal = shared.config.refusal;
        let process = tokio::task::spawn_blocking(move || super::peer::process_of(peer, tcp))
            .await
            .ok()
            .flatten();
        let _ = shared.events.send(ResolverEvent::Refused(RefusedName {
            name,
            query_type: question.query_type().to_string(),
            answer: refusal.as_str(),
            rule: rule.text.clone(),
            file: rule.origin.as_ref().map(|o| o.file.to_string()),
            line: rule.origin.as_ref().map(|o| o.line),
            process,
        }));
        let code = match refusal {
            super::Refusal::Refused => ResponseCode::Refused,
            super::Refusal::Nxdomain => ResponseCode::NXDomain,
        };
        return reply_code(&query, code);
    }
    let dnssec_ok = query.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok);
    let cached = shared
        .cache
        .lock()
        .ok()
        .and_then(|c| c.get(&question, dnssec_ok, id, Instant::now()));
    let (bytes, message) = match cached {
        // A kept answer's addresses were put in force before it was first answered, and stay
        // there past its TTL (plus a grace period), so it goes back at once.
        Some(message) => {
            return message
                .to_vec()
                .ok()
                .map(|bytes| fit(&query, &message, bytes, tcp));
        }
        None => match upstream::exchange(shared.config.upstream, bytes, id, tcp).await {
            Ok(answer) => answer,
            Err(err) => {
                let _ = shared.events.send(ResolverEvent::UpstreamFailed {
                    name,
                    error: format!("{err:#}"),
                });
                return reply_code(&query, ResponseCode::ServFail);
            }
        },
    };
    let (addrs, ttl) = addresses(&message);
    if !addrs.is_empty() {
        // Only a name a rule speaks of puts addresses in the maps; any other's are recorded for
        // attribution (which the owner takes before the kernel events that could follow), so
        // its answer need not wait.
        let must_wait = decision == NameDecision::Ruled;
        let (done, confirmed) = oneshot::channel();
        let sent = shared.events.send(ResolverEvent::Answered(Answered {
            name: name.clone(),
            addrs,
            ttl,
            decision,
            done,
        }));
        // Not confirmed in time (or the owner is gone): no answer whose addresses might not be
        // in force yet.
        if must_wait && (!sent || !matches!(timeout(ANSWER_WAIT, confirmed).await, Ok(Ok(())))) {
            return reply_code(&query, ResponseCode::ServFail);
        }
    }
    if let Ok(mut cache) = shared.cache.lock() {
        cache.put(&question, dnssec_ok, &message, ttl);
    }
    Some(fit(&query, &message, bytes, tcp))
}

/// `bytes` (the encoded `message`), or the message truncated when it is too big for the
/// program's UDP buffer, so it asks again over TCP.
fn fit(query: &Message, message: &Message, bytes: Vec<u8>, tcp: bool) -> Vec<u8> {
    if !tcp && bytes.len() > usize::from(query.max_payload()) {
        return message.truncate().to_vec().unwrap_or(bytes);
    }
    bytes
}

/// The final A and AAAA records of an answer, and the smallest TTL of the answer section (the
/// CNAMEs on the way count: the chain is only as fresh as its shortest link); for an answer
/// without records, the authority section's (a negative answer's SOA).
fn addresses(message: &Message) -> (Vec<IpAddr>, Duration) {
    let addrs = message
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
            _ => None,
        })
        .collect();
    let section = if message.answers.is_empty() {
        &message.authorities
    } else {
        &message.answers
    };
    let ttl = section.iter().map(|r| r.ttl).min().unwrap_or(0);
    (addrs, Duration::from_secs(u64::from(ttl)))
}

/// A reply with no records: `code`, the query's question and recursion flag.
fn reply_code(query: &Message, code: ResponseCode) -> Option<Vec<u8>> {
    let mut reply = Message::error_msg(query.metadata.id, query.metadata.op_code, code);
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.add_queries(query.queries.iter().cloned());
    reply.to_vec().ok()
}

fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}
