//! The listeners and one query's way through the resolver (the steps are in the module above).
//! The steps that only read and write messages ([`read_query`], [`forwarded_query`],
//! [`reply_for`], [`refusal_reply`], [`stand_in_reply`], [`addresses`], [`fit`]) are functions
//! of their own, without I/O: the
//! resolver fuzz target (`fuzz/fuzz_targets/resolver.rs`) runs them on arbitrary packets.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use hickory_resolver::proto::op::{
    Edns, Header, Message, MessageType, OpCode, Query, ResponseCode,
};
use hickory_resolver::proto::rr::rdata::A;
use hickory_resolver::proto::rr::{RData, Record, RecordType};
use hickory_resolver::proto::serialize::binary::{BinDecodable, BinDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{Semaphore, oneshot};
use tokio::time::timeout;

use super::cache::AnswerCache;
use super::caps::{self, PatternRates};
use super::names::{NameDecision, NamePolicy};
use super::stand_ins::StandIns;
use super::stats::{Outcome, ResolverStats};
use super::{
    ANSWER_WAIT, AnswerSource, Answered, RefusedName, ResolverConfig, ResolverEvent, peer, upstream,
};

/// Queries answered at once; past it a UDP query is dropped (the program retries) and a TCP
/// connection waits.
const IN_FLIGHT: usize = 512;
/// How long an idle TCP connection is kept.
const TCP_IDLE: Duration = Duration::from_secs(10);

pub struct Shared {
    config: ResolverConfig,
    names: Arc<RwLock<NamePolicy>>,
    events: super::EventSink,
    upstream: upstream::Upstream,
    /// Who asked.
    peers: peer::Peers,
    cache: Mutex<AnswerCache>,
    stand_ins: Mutex<StandIns>,
    /// Lookups sent upstream under each host pattern this second ([`caps`]).
    rates: Mutex<PatternRates>,
    in_flight: Arc<Semaphore>,
    /// Queries by outcome and their latency (the daemon's metrics read them).
    pub stats: Arc<ResolverStats>,
}

impl Shared {
    pub fn new(
        config: ResolverConfig,
        names: Arc<RwLock<NamePolicy>>,
        events: super::EventSink,
    ) -> Self {
        Shared {
            upstream: upstream::Upstream::new(config.upstream),
            peers: peer::Peers::new(config.origins.clone()),
            config,
            names,
            events,
            cache: Mutex::new(AnswerCache::default()),
            stand_ins: Mutex::new(StandIns::default()),
            rates: Mutex::new(PatternRates::default()),
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
            stats: Arc::default(),
        }
    }

    /// Where queries go.
    /// The upstream server, with the sockets kept for it.
    pub(super) fn upstream(&self) -> &upstream::Upstream {
        &self.upstream
    }

    /// Where the owner of the maps hears from the resolver.
    pub(super) fn events(&self) -> &super::EventSink {
        &self.events
    }
}

pub async fn udp(socket: Arc<UdpSocket>, shared: Arc<Shared>) {
    let mut buffer = vec![0u8; 65_535];
    let Ok(local) = socket.local_addr() else {
        return;
    };
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buffer).await else {
            continue;
        };
        let Ok(permit) = shared.in_flight.clone().try_acquire_owned() else {
            shared.stats.count(Outcome::Dropped);
            continue;
        };
        let query = buffer[..n].to_vec();
        let (socket, shared) = (socket.clone(), shared.clone());
        tokio::spawn(async move {
            let asker = peer::QuerySocket {
                program: peer,
                resolver: local,
                tcp: false,
            };
            if let Some(reply) = answer(&shared, &query, asker).await {
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
    let Ok(local) = stream.local_addr() else {
        return;
    };
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
        let asker = peer::QuerySocket {
            program: peer,
            resolver: local,
            tcp: true,
        };
        let reply = answer(&shared, &query, asker).await;
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

/// A packet from a scope, read ([`read_query`]): a query for a name, to decide.
pub struct NameQuery {
    pub query: Message,
    /// Its one question.
    pub question: Query,
    /// Its name as the policy reads it: lower case, no trailing dot.
    pub name: String,
}

/// A packet guard does not decide ([`read_query`]).
#[derive(Debug)]
pub enum NotForwarded {
    /// Not a DNS query: nothing goes back (a reply to a reply could loop).
    Ignored,
    /// A query guard does not forward: FORMERR or NOTIMP goes back, and a record.
    Rejected(Rejected),
}

/// A query guard answers with FORMERR or NOTIMP.
#[derive(Debug)]
pub struct Rejected {
    pub reply: Option<Vec<u8>>,
    /// `FORMERR` or `NOTIMP`.
    pub answer: &'static str,
    /// Its first question's name (normalised) and type, empty without one.
    pub name: String,
    pub query_type: String,
    /// Why, for the record.
    pub why: String,
}

/// Reads a packet a program sent to the resolver, without I/O: a query of exactly one question
/// and nothing else (no records but one OPT in the additional section, no bytes after the
/// message), or why not. guard forwards a query it builds from that question alone
/// ([`forwarded_query`]), so anything else the packet carries could only be meant for the
/// upstream server, past the policy: such a query gets FORMERR, never forwarded.
pub fn read_query(bytes: &[u8]) -> Result<NameQuery, NotForwarded> {
    let mut decoder = BinDecoder::new(bytes);
    let query = match Message::read(&mut decoder) {
        Ok(query) => query,
        Err(err) => {
            // A header that reads is a query to answer, FORMERR; less is not a DNS query.
            let header =
                Header::read(&mut BinDecoder::new(bytes)).map_err(|_| NotForwarded::Ignored)?;
            if header.metadata.message_type != MessageType::Query {
                return Err(NotForwarded::Ignored);
            }
            let mut reply = Message::error_msg(
                header.metadata.id,
                header.metadata.op_code,
                ResponseCode::FormErr,
            );
            reply.metadata.recursion_desired = header.metadata.recursion_desired;
            reply.metadata.recursion_available = true;
            return Err(NotForwarded::Rejected(Rejected {
                reply: reply.to_vec().ok(),
                answer: "FORMERR",
                name: String::new(),
                query_type: String::new(),
                why: not_forwarded(&format!("it does not parse ({err})")),
            }));
        }
    };
    if query.metadata.message_type != MessageType::Query {
        return Err(NotForwarded::Ignored);
    }
    let (name, query_type) = query.queries.first().map_or_else(Default::default, |q| {
        (normalise(&q.name().to_ascii()), q.query_type().to_string())
    });
    let rejected = |code: ResponseCode, answer, why: String| {
        NotForwarded::Rejected(Rejected {
            reply: reply_code(&query, code),
            answer,
            name: name.clone(),
            query_type: query_type.clone(),
            why: not_forwarded(&why),
        })
    };
    if query.metadata.op_code != OpCode::Query {
        let why = format!("opcode {:?}", query.metadata.op_code);
        return Err(rejected(ResponseCode::NotImp, "NOTIMP", why));
    }
    let extra = [
        ("answer", query.answers.len()),
        ("authority", query.authorities.len()),
        ("additional", query.additionals.len()),
    ];
    let why = if query.queries.len() != 1 {
        Some(format!("{} questions", query.queries.len()))
    } else if let Some((section, n)) = extra.iter().find(|(_, n)| *n > 0) {
        Some(format!("{n} records in its {section} section"))
    } else if query.signature.is_some() {
        Some("a signature".to_string())
    } else if !decoder.is_empty() {
        Some(format!("{} bytes after the message", decoder.len()))
    } else {
        None
    };
    if let Some(why) = why {
        return Err(rejected(ResponseCode::FormErr, "FORMERR", why));
    }
    let question = query.queries[0].clone();
    Ok(NameQuery {
        query,
        question,
        name,
    })
}

/// The record's text for a query guard does not forward.
fn not_forwarded(why: &str) -> String {
    format!(
        "a query guard's resolver does not forward (one question, no records but one OPT, \
         nothing after it): {why}"
    )
}

/// The EDNS payload guard offers: its upstream answers fit (4 KiB is taken), and what does not
/// fit a program's own buffer is truncated for it ([`fit`]).
const EDNS_PAYLOAD: u16 = 1232;

/// guard's own EDNS: its payload size and the DNSSEC OK bit, no options.
pub(super) fn guard_edns(dnssec_ok: bool) -> Edns {
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    edns.set_version(0);
    edns.set_dnssec_ok(dnssec_ok);
    edns
}

/// The DNSSEC OK bit of a message's EDNS.
pub fn dnssec_ok(message: &Message) -> bool {
    message.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok)
}

/// The query guard sends upstream for `query`'s `question`, built from the question alone: id
/// `id` (not the program's), the name in lower case, recursion desired, guard's own EDNS. Of
/// the program's packet only the DNSSEC OK and checking-disabled bits go on (a validating stub
/// needs them); its EDNS options, the name's letter case and everything else stay on the host.
pub fn forwarded_query(query: &Message, question: &Query, id: u16) -> Message {
    let mut forward = Message::new(id, MessageType::Query, OpCode::Query);
    forward.metadata.recursion_desired = true;
    forward.metadata.checking_disabled = query.metadata.checking_disabled;
    let mut asked = Query::query(question.name().to_lowercase(), question.query_type());
    asked.set_query_class(question.query_class());
    forward.add_query(asked);
    forward.set_edns(guard_edns(dnssec_ok(query)));
    forward
}

/// The reply to the program's `query` from `answer` (the upstream server's, or the cache's):
/// the answer's code and records under the program's id and question as it wrote it (the
/// name's letter case restored, in the records that carry the name too), with guard's EDNS
/// when the program sent EDNS and none when it did not (the server's options stay here).
pub fn reply_for(query: &Message, answer: &Message) -> Message {
    let mut reply = answer.clone();
    reply.metadata.id = query.metadata.id;
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    reply.metadata.checking_disabled = query.metadata.checking_disabled;
    reply.queries = query.queries.clone();
    if let Some(asked) = query.queries.first().map(Query::name) {
        for record in reply
            .answers
            .iter_mut()
            .chain(reply.authorities.iter_mut())
            .chain(reply.additionals.iter_mut())
            .filter(|record| record.name == *asked)
        {
            record.name = asked.clone();
        }
    }
    reply.edns = query.edns.as_ref().map(|_| guard_edns(dnssec_ok(answer)));
    reply.signature = None;
    reply
}

/// A fresh id for a forwarded query, so an upstream (or a listener on the path) sees nothing
/// the program chose.
pub(super) fn new_id() -> u16 {
    let mut id = [0u8; 2];
    // SAFETY: a 2-byte write into `id`; a short or failed read leaves zeros (still a valid id).
    unsafe { libc::getrandom(id.as_mut_ptr().cast(), id.len(), 0) };
    u16::from_ne_bytes(id)
}

/// The reply to one query from `asker` (`None`: not a query; nothing is sent back), counted
/// and timed in the resolver's stats.
async fn answer(shared: &Shared, bytes: &[u8], asker: peer::QuerySocket) -> Option<Vec<u8>> {
    let started = Instant::now();
    let mut outcome = Outcome::Malformed;
    let reply = reply_to(shared, bytes, asker, &mut outcome).await;
    match outcome {
        Outcome::Malformed => shared.stats.count(outcome),
        _ => shared.stats.answered(outcome, started.elapsed()),
    }
    reply
}

/// [`answer`]'s work; sets `outcome` to how the query was answered.
async fn reply_to(
    shared: &Shared,
    bytes: &[u8],
    asker: peer::QuerySocket,
    outcome: &mut Outcome,
) -> Option<Vec<u8>> {
    let tcp = asker.tcp;
    let NameQuery {
        query,
        question,
        name,
    } = match read_query(bytes) {
        Ok(read) => read,
        Err(NotForwarded::Ignored) => return None,
        Err(NotForwarded::Rejected(rejected)) => {
            let process = process_of(shared, asker).await;
            let _ = shared.events.send(ResolverEvent::Refused(RefusedName {
                name: rejected.name,
                query_type: rejected.query_type,
                answer: rejected.answer,
                rule: rejected.why,
                file: None,
                line: None,
                process,
            }));
            return rejected.reply;
        }
    };
    let (decision, pattern) = shared
        .names
        .read()
        .map(|names| {
            let pattern = names
                .under_pattern(&name)
                .map(|(rule, caps)| (rule.clone(), caps));
            (names.decide(&name), pattern)
        })
        .unwrap_or((NameDecision::Unknown, None));
    if let NameDecision::Refuse(rule) = &decision {
        *outcome = Outcome::Refused;
        let why = (rule.text.clone(), rule.origin.clone());
        return refuse(shared, &query, &question, name, why, asker).await;
    }
    if decision == NameDecision::Held {
        *outcome = Outcome::StandIn;
        return stand_in_answer(shared, &query, name, asker).await;
    }
    // A name only a pattern lets out: its labels are the asker's, so its shape is capped.
    if let Some((rule, caps)) = &pattern {
        let labels = usize::from(question.name().num_labels());
        if let Some(past) = caps::shape(*caps, labels, name.len()) {
            *outcome = Outcome::Capped;
            let why = (past.text(rule), rule.origin.clone());
            return refuse(shared, &query, &question, name, why, asker).await;
        }
    }
    let dnssec_ok = dnssec_ok(&query);
    let cached = shared
        .cache
        .lock()
        .ok()
        .and_then(|c| c.get(&question, dnssec_ok, query.metadata.id, Instant::now()));
    // A kept answer's addresses were put in force before it was first answered, and stay there
    // past its TTL (plus a grace period), for the scope that asked then. An owner with a book
    // per scope gets them again for this asker's scope: found by the socket's cookie (one
    // sock_diag round trip on a kept socket, made on this thread: shorter than a hand-off), or
    // where sock_diag cannot name it by the process that holds it (its cgroup says the scope).
    // A kept answer without addresses (NXDOMAIN, NODATA) puts nothing in force anywhere, so it
    // is answered as it is, after the policy decided the name above.
    if let Some(message) = cached {
        let mut answered = answered_from(&message, name, &question, decision, AnswerSource::Cached);
        if shared.config.per_scope && !answered.addrs.is_empty() {
            answered.process = match shared.peers.owner(asker) {
                Some(socket) => Some(socket),
                None => process_of(shared, asker).await,
            };
            if !hand_over(shared, answered).await {
                return reply_code(&query, ResponseCode::ServFail);
            }
        }
        *outcome = Outcome::Cached;
        return encode_reply(&query, &message, tcp);
    }
    // Only what leaves the host counts against a pattern's lookups a second.
    if let Some((rule, caps)) = &pattern {
        let limit = caps.wildcard_lookups_per_second;
        let admitted = shared
            .rates
            .lock()
            .is_ok_and(|mut rates| rates.admit(&rule.host, limit, Instant::now()));
        if !admitted {
            *outcome = Outcome::Capped;
            let past = caps::Exceeded::LookupsPerSecond { limit };
            let why = (past.text(rule), rule.origin.clone());
            return refuse(shared, &query, &question, name, why, asker).await;
        }
    }
    // Who asked is looked up while upstream answers: the record of a name that left the host
    // names the process that sent it.
    *outcome = Outcome::Failed;
    let forward = forwarded_query(&query, &question, new_id());
    let (exchanged, looked_up) = shared
        .upstream
        .exchange(&forward, tcp, || start_process_of(shared, asker))
        .await;
    let message = match exchanged {
        Ok(answer) => answer,
        Err(err) => {
            let _ = shared.events.send(ResolverEvent::UpstreamFailed {
                name,
                error: format!("{err:#}"),
            });
            return reply_code(&query, ResponseCode::ServFail);
        }
    };
    let mut answered = answered_from(&message, name, &question, decision, AnswerSource::Forwarded);
    answered.process = looked_up.get().await;
    if !hand_over(shared, answered).await {
        return reply_code(&query, ResponseCode::ServFail);
    }
    *outcome = Outcome::Forwarded;
    if let Ok(mut cache) = shared.cache.lock() {
        cache.put(&question, dnssec_ok, &message, Instant::now());
    }
    encode_reply(&query, &message, tcp)
}

/// `answer` as the reply to the program's `query` ([`reply_for`]), encoded and cut to its
/// buffer ([`fit`]).
fn encode_reply(query: &Message, answer: &Message, tcp: bool) -> Option<Vec<u8>> {
    let reply = reply_for(query, answer);
    let bytes = reply.to_vec().ok()?;
    Some(fit(query, &reply, bytes, tcp))
}

/// Refuses `query` (REFUSED or NXDOMAIN, as configured) and records why: `why` is the rule's
/// text and where it is written.
async fn refuse(
    shared: &Shared,
    query: &Message,
    question: &Query,
    name: String,
    why: (String, Option<crate::policy::RuleOrigin>),
    asker: peer::QuerySocket,
) -> Option<Vec<u8>> {
    let refusal = shared.config.refusal;
    let process = process_of(shared, asker).await;
    let (rule, origin) = why;
    let _ = shared.events.send(ResolverEvent::Refused(RefusedName {
        name,
        query_type: question.query_type().to_string(),
        answer: refusal.as_str(),
        rule,
        file: origin.as_ref().map(|o| o.file.to_string()),
        line: origin.as_ref().map(|o| o.line),
        process,
    }));
    refusal_reply(query, refusal)
}

/// What the owner is told of `message`, an answer to `question` (who asked is filled in by the
/// caller).
fn answered_from(
    message: &Message,
    name: String,
    question: &Query,
    decision: NameDecision,
    source: AnswerSource,
) -> Answered {
    let (addrs, ttl) = addresses(message);
    Answered {
        name,
        query_type: question.query_type().to_string(),
        addrs,
        ttl,
        decision,
        source,
        process: None,
    }
}

/// Tells the owner of the maps what is answered, and waits for it to put the addresses in
/// force where they must be first; `false`: not confirmed in time (or the owner is gone), so no
/// answer whose addresses might not be in force yet.
async fn hand_over(shared: &Shared, answered: Answered) -> bool {
    // A name a rule speaks of puts addresses in the maps, and so may a stand-in (its real
    // address, once approved). Any other's are recorded for attribution, which the owner takes
    // before the kernel events that could follow, so its answer need not wait.
    let must_wait = matches!(answered.decision, NameDecision::Ruled | NameDecision::Held)
        && !answered.addrs.is_empty();
    let (done, confirmed) = oneshot::channel();
    let event = ResolverEvent::Answered(answered, done);
    if !must_wait {
        shared.events.send_unwaited(event);
        return true;
    }
    shared.events.send(event) && matches!(timeout(ANSWER_WAIT, confirmed).await, Ok(Ok(())))
}

/// The answer to a name held on the host ([`NameDecision::Held`]): an A query gets the name's
/// stand-in, any other type no records (NOERROR: a program asking for AAAA or HTTPS records
/// goes on with the A answer). Nothing is asked upstream.
async fn stand_in_answer(
    shared: &Shared,
    query: &Message,
    name: String,
    asker: peer::QuerySocket,
) -> Option<Vec<u8>> {
    let question = query.queries.first()?.clone();
    let stand_in = (question.query_type() == RecordType::A)
        .then(|| {
            shared
                .stand_ins
                .lock()
                .ok()
                .map(|mut s| s.address_for(&name))
        })
        .flatten();
    let answered = Answered {
        name,
        query_type: question.query_type().to_string(),
        addrs: stand_in.map(IpAddr::V4).into_iter().collect(),
        // The answer book keeps a stand-in far longer than programs are told to: a program
        // that keeps it past its TTL still has its connects named after the name.
        ttl: STAND_IN_KEPT,
        decision: NameDecision::Held,
        source: AnswerSource::StandIn,
        process: process_of(shared, asker).await,
    };
    if !hand_over(shared, answered).await {
        return reply_code(query, ResponseCode::ServFail);
    }
    stand_in_reply(query, stand_in)
}

/// The reply that holds a name on the host: the query's question answered with `stand_in`
/// (an A record; none for any other type of question).
pub fn stand_in_reply(query: &Message, stand_in: Option<Ipv4Addr>) -> Option<Vec<u8>> {
    let question = query.queries.first()?;
    let mut reply = Message::response(query.metadata.id, query.metadata.op_code);
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.add_queries(query.queries.iter().cloned());
    if let Some(address) = stand_in.filter(|_| question.query_type() == RecordType::A) {
        reply.add_answer(Record::from_rdata(
            question.name().clone(),
            STAND_IN_TTL.as_secs() as u32,
            RData::A(A(address)),
        ));
    }
    reply.to_vec().ok()
}

/// The reply to a query for a name the policy forbids: REFUSED or NXDOMAIN, as configured.
pub fn refusal_reply(query: &Message, refusal: super::Refusal) -> Option<Vec<u8>> {
    let code = match refusal {
        super::Refusal::Refused => ResponseCode::Refused,
        super::Refusal::Nxdomain => ResponseCode::NXDomain,
    };
    reply_code(query, code)
}

/// What programs are told a stand-in is good for.
const STAND_IN_TTL: Duration = Duration::from_secs(60);
/// How long the owner's answer book keeps a stand-in after it was last answered.
const STAND_IN_KEPT: Duration = Duration::from_secs(3600);

/// Who sent a query, being found ([`start_process_of`]).
enum Asking {
    Named(Option<peer::QueryProcess>),
    /// The look through `/proc`, off the runtime's threads.
    Looking(tokio::task::JoinHandle<Option<peer::QueryProcess>>),
}

impl Asking {
    async fn get(self) -> Option<peer::QueryProcess> {
        match self {
            Asking::Named(process) => process,
            Asking::Looking(looking) => looking.await.ok().flatten(),
        }
    }
}

/// Starts finding the process that sent a query: at once from what the kernel's redirect
/// recorded of its socket, else by the look through `/proc` on a blocking thread (within its
/// rate).
fn start_process_of(shared: &Shared, asker: peer::QuerySocket) -> Asking {
    let look = match shared.peers.asker(asker) {
        peer::Asker::Named(process) => return Asking::Named(Some(process)),
        peer::Asker::Look(found, inode) => {
            tokio::task::spawn_blocking(move || Some(peer::look_for_holder(found, inode)))
        }
        peer::Asker::Unknown => tokio::task::spawn_blocking(move || peer::process_of(asker)),
    };
    Asking::Looking(look)
}

async fn process_of(shared: &Shared, asker: peer::QuerySocket) -> Option<peer::QueryProcess> {
    start_process_of(shared, asker).get().await
}

/// `bytes` (the encoded `message`), or the message truncated when it is too big for the
/// program's UDP buffer, so it asks again over TCP.
pub fn fit(query: &Message, message: &Message, bytes: Vec<u8>, tcp: bool) -> Vec<u8> {
    if !tcp && bytes.len() > usize::from(query.max_payload()) {
        return message.truncate().to_vec().unwrap_or(bytes);
    }
    bytes
}

/// The final A and AAAA records of an answer, and the smallest TTL of the answer section (the
/// CNAMEs on the way count: the chain is only as fresh as its shortest link); for an answer
/// without records, the authority section's (a negative answer's SOA).
pub fn addresses(message: &Message) -> (Vec<IpAddr>, Duration) {
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
pub fn reply_code(query: &Message, code: ResponseCode) -> Option<Vec<u8>> {
    let mut reply = Message::error_msg(query.metadata.id, query.metadata.op_code, code);
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.add_queries(query.queries.iter().cloned());
    reply.to_vec().ok()
}

fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
#[path = "serve_tests.rs"]
mod tests;
