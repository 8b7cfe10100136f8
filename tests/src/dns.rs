//! An in-process DNS server for tests: real DNS over UDP (and TCP) on loopback, authoritative for
//! whatever names the test sets, counting the queries it gets.
//!
//! It runs hickory-server on its own thread with its own tokio runtime, so sync tests can use it
//! and async tests can use it from any runtime; dropping it stops the server.
//!
//! ```no_run
//! use guard_tests::dns::TestDns;
//! let dns = TestDns::start();
//! dns.set_a("api.test", &["192.0.2.1".parse().unwrap()], 1);
//! // point the resolver under test at dns.addr()
//! assert_eq!(dns.queries("api.test"), 0);
//! ```

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, anyhow};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::proto::op::{Edns, Metadata, ResponseCode};
use hickory_server::proto::rr::rdata::{A, AAAA, SOA};
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tokio::sync::oneshot;

/// The TTL (and SOA minimum) of negative answers: short, so a name a test adds later is seen
/// by the next refresh.
const NEGATIVE_TTL: u32 = 1;
/// How long the server may take to stop when dropped.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

/// A running test DNS server. See the module documentation.
pub struct TestDns {
    addr: SocketAddr,
    tcp: bool,
    state: Arc<Mutex<State>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct State {
    /// Records per normalised name (lower case, no trailing dot).
    names: HashMap<String, Records>,
    /// Queries received per normalised name, any record type.
    queries: HashMap<String, usize>,
    /// Queries received per normalised name and record type.
    typed_queries: HashMap<(String, RecordType), usize>,
}

#[derive(Default)]
struct Records {
    a: Option<(Vec<Ipv4Addr>, u32)>,
    aaaa: Option<(Vec<Ipv6Addr>, u32)>,
    /// A records that change with every query, as a load balancer's do.
    rotating: Option<Rotation>,
    /// Its negative answers (NODATA) carry no SOA, as some forwarders and stubs answer: they
    /// say nothing of how long the answer holds.
    no_soa: bool,
}

struct Rotation {
    pool: Vec<Ipv4Addr>,
    per_answer: usize,
    ttls: std::ops::RangeInclusive<u32>,
    answered: usize,
}

impl TestDns {
    /// Starts a server on 127.0.0.1 (an ephemeral port, UDP and, when that port is free for TCP
    /// too, TCP). Panics when it cannot: a test without its server cannot run.
    pub fn start() -> Self {
        Self::try_start().expect("starting the test DNS server")
    }

    /// [`TestDns::start`], returning the error instead of panicking.
    pub fn try_start() -> anyhow::Result<Self> {
        let (udp, tcp) = bind_loopback()?;
        let addr = udp
            .local_addr()
            .context("reading the test DNS server's address")?;
        let has_tcp = tcp.is_some();
        let state = Arc::new(Mutex::new(State::default()));
        let handler = Handler {
            state: state.clone(),
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
        let thread = std::thread::Builder::new()
            .name(format!("test-dns-{}", addr.port()))
            .spawn(move || serve(udp, tcp, handler, stop_rx, ready_tx))
            .context("spawning the test DNS server thread")?;
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(error),
            Err(_) => return Err(anyhow!("the test DNS server on {addr} did not start")),
        }
        Ok(Self {
            addr,
            tcp: has_tcp,
            state,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The server's address (UDP; TCP on the same port when [`TestDns::has_tcp`]).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the server also listens on TCP (at [`TestDns::addr`]).
    pub fn has_tcp(&self) -> bool {
        self.tcp
    }

    /// Sets `name`'s A records (replacing any), each with `ttl` seconds. An empty list makes the
    /// name exist without A records (a NODATA answer).
    pub fn set_a(&self, name: &str, addrs: &[Ipv4Addr], ttl: u32) {
        self.lock().names.entry(normalise(name)).or_default().a = Some((addrs.to_vec(), ttl));
    }

    /// Makes `name`'s A answer rotate: each query gets the next `per_answer` addresses of `pool`
    /// (wrapping), with a TTL that steps through `ttls`, as a load balancer's or a CDN's would.
    pub fn set_a_rotating(
        &self,
        name: &str,
        pool: &[Ipv4Addr],
        per_answer: usize,
        ttls: std::ops::RangeInclusive<u32>,
    ) {
        self.lock()
            .names
            .entry(normalise(name))
            .or_default()
            .rotating = Some(Rotation {
            pool: pool.to_vec(),
            per_answer,
            ttls,
            answered: 0,
        });
    }

    /// Sets `name`'s AAAA records (replacing any), each with `ttl` seconds.
    pub fn set_aaaa(&self, name: &str, addrs: &[Ipv6Addr], ttl: u32) {
        self.lock().names.entry(normalise(name)).or_default().aaaa = Some((addrs.to_vec(), ttl));
    }

    /// Makes `name`'s negative answers (a type it has no records of) carry no SOA.
    pub fn set_negative_without_soa(&self, name: &str) {
        self.lock().names.entry(normalise(name)).or_default().no_soa = true;
    }

    /// Removes `name` entirely: it gets NXDOMAIN from now on.
    pub fn remove(&self, name: &str) {
        self.lock().names.remove(&normalise(name));
    }

    /// How many queries (any record type, over UDP or TCP) the server has received for `name`.
    pub fn queries(&self, name: &str) -> usize {
        self.lock()
            .queries
            .get(&normalise(name))
            .copied()
            .unwrap_or(0)
    }

    /// How many queries of `record_type` the server has received for `name`.
    pub fn queries_of(&self, name: &str, record_type: RecordType) -> usize {
        self.lock()
            .typed_queries
            .get(&(normalise(name), record_type))
            .copied()
            .unwrap_or(0)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not hide the server from the other assertions.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for TestDns {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for TestDns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDns")
            .field("addr", &self.addr)
            .field("tcp", &self.tcp)
            .finish_non_exhaustive()
    }
}

/// A UDP socket on 127.0.0.1:0 and, if the same port is free for TCP, a TCP listener on it.
fn bind_loopback() -> anyhow::Result<(std::net::UdpSocket, Option<std::net::TcpListener>)> {
    for _ in 0..10 {
        let udp = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .context("binding the test DNS server's UDP socket on 127.0.0.1")?;
        let addr = udp.local_addr()?;
        if let Ok(tcp) = std::net::TcpListener::bind(addr) {
            return Ok((udp, Some(tcp)));
        }
    }
    let udp = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .context("binding the test DNS server's UDP socket on 127.0.0.1")?;
    Ok((udp, None))
}

/// The server thread: a current-thread runtime running hickory's server until told to stop.
fn serve(
    udp: std::net::UdpSocket,
    tcp: Option<std::net::TcpListener>,
    handler: Handler,
    stop: oneshot::Receiver<()>,
    ready: std::sync::mpsc::Sender<anyhow::Result<()>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the test DNS server's runtime")
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    runtime.block_on(async move {
        let mut server = Server::new(handler);
        let registered = (|| -> anyhow::Result<()> {
            udp.set_nonblocking(true)?;
            server.register_socket(tokio::net::UdpSocket::from_std(udp)?);
            if let Some(tcp) = tcp {
                tcp.set_nonblocking(true)?;
                server.register_listener(
                    tokio::net::TcpListener::from_std(tcp)?,
                    Duration::from_secs(5),
                    64,
                );
            }
            Ok(())
        })()
        .context("registering the test DNS server's sockets");
        let ok = registered.is_ok();
        let _ = ready.send(registered);
        if !ok {
            return;
        }
        // Sender dropped or a stop message: either way, stop.
        let _ = stop.await;
        let _ = tokio::time::timeout(SHUTDOWN_TIMEOUT, server.shutdown_gracefully()).await;
    });
    // Dropping the runtime aborts whatever did not stop in time.
}

/// Answers from the shared [`State`].
struct Handler {
    state: Arc<Mutex<State>>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;

        let Some(query) = request.queries.queries().first() else {
            metadata.response_code = ResponseCode::FormErr;
            return send(
                request,
                &mut response_handle,
                metadata,
                Vec::new(),
                Vec::new(),
            )
            .await;
        };
        let query_name = Name::from(query.name().clone());
        let key = normalise(&query_name.to_string());
        let (answers, authorities) = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            *state.queries.entry(key.clone()).or_default() += 1;
            *state
                .typed_queries
                .entry((key.clone(), query.query_type()))
                .or_default() += 1;
            match state.names.get_mut(&key) {
                None => {
                    metadata.response_code = ResponseCode::NXDomain;
                    (Vec::new(), vec![soa(&query_name)])
                }
                Some(records) => {
                    let answers = records.answer(&query_name, query.query_type());
                    let authorities = if answers.is_empty() && !records.no_soa {
                        vec![soa(&query_name)]
                    } else {
                        Vec::new()
                    };
                    (answers, authorities)
                }
            }
        };
        send(
            request,
            &mut response_handle,
            metadata,
            answers,
            authorities,
        )
        .await
    }
}

impl Records {
    fn answer(&mut self, name: &Name, record_type: RecordType) -> Vec<Record> {
        if let (Some(rotation), RecordType::A) = (self.rotating.as_mut(), record_type) {
            let start = rotation.answered * rotation.per_answer;
            let span = rotation.ttls.end() - rotation.ttls.start() + 1;
            let ttl = rotation.ttls.start() + (rotation.answered as u32 % span);
            rotation.answered += 1;
            return (0..rotation.per_answer)
                .map(|i| rotation.pool[(start + i) % rotation.pool.len()])
                .map(|ip| Record::from_rdata(name.clone(), ttl, RData::A(A(ip))))
                .collect();
        }
        match record_type {
            RecordType::A => self.a.as_ref().map_or_else(Vec::new, |(addrs, ttl)| {
                addrs
                    .iter()
                    .map(|ip| Record::from_rdata(name.clone(), *ttl, RData::A(A(*ip))))
                    .collect()
            }),
            RecordType::AAAA => self.aaaa.as_ref().map_or_else(Vec::new, |(addrs, ttl)| {
                addrs
                    .iter()
                    .map(|ip| Record::from_rdata(name.clone(), *ttl, RData::AAAA(AAAA(*ip))))
                    .collect()
            }),
            _ => Vec::new(),
        }
    }
}

/// The SOA that makes a negative answer cacheable for [`NEGATIVE_TTL`] (RFC 2308), as if every
/// name were the apex of its own zone.
fn soa(name: &Name) -> Record {
    let host = Name::from_str("ns.test.").expect("a valid name");
    let mailbox = Name::from_str("hostmaster.test.").expect("a valid name");
    Record::from_rdata(
        name.clone(),
        NEGATIVE_TTL,
        RData::SOA(SOA::new(host, mailbox, 1, 60, 60, 60, NEGATIVE_TTL)),
    )
}

async fn send<R: ResponseHandler>(
    request: &Request,
    response_handle: &mut R,
    metadata: Metadata,
    answers: Vec<Record>,
    authorities: Vec<Record>,
) -> ResponseInfo {
    let edns = request.edns.as_ref().map(|req| {
        let mut edns = Edns::new();
        edns.set_max_payload(req.max_payload().max(512));
        edns.set_version(0);
        edns
    });
    let response = MessageResponseBuilder::new(&request.queries, edns.as_ref()).build(
        metadata,
        answers.iter(),
        authorities.iter(),
        std::iter::empty(),
        std::iter::empty(),
    );
    match response_handle.send_response(response).await {
        Ok(info) => info,
        Err(error) => {
            // The client went away; nothing to answer to. Report it as a server failure.
            eprintln!("test DNS server: sending a response failed: {error}");
            let mut failed = Metadata::response_from_request(&request.metadata);
            failed.response_code = ResponseCode::ServFail;
            ResponseInfo::from(hickory_server::proto::op::Header {
                metadata: failed,
                counts: Default::default(),
            })
        }
    }
}

fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// An A query for `name` with id `id`, as a stub resolver sends it.
pub fn query(name: &str, id: u16) -> Vec<u8> {
    query_of(name, id, RecordType::A)
}

/// A query of `record_type` for `name` with id `id`.
pub fn query_of(name: &str, id: u16, record_type: RecordType) -> Vec<u8> {
    let mut message = hickory_server::proto::op::Message::query();
    message.metadata.id = id;
    message.metadata.recursion_desired = true;
    message.add_query(hickory_server::proto::op::Query::query(
        Name::from_str(&format!("{name}.")).unwrap(),
        record_type,
    ));
    message.to_vec().unwrap()
}

/// One A query's round trip to `server` (a fresh socket, as a stub resolver's); panics
/// without an answer within 5 s.
pub fn ask(server: SocketAddr, name: &str) -> Duration {
    ask_of(server, name, RecordType::A)
}

/// [`ask`] for records of `record_type`.
pub fn ask_of(server: SocketAddr, name: &str, record_type: RecordType) -> Duration {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let bytes = query_of(name, 7, record_type);
    let mut buffer = [0u8; 1500];
    let started = std::time::Instant::now();
    socket.send_to(&bytes, server).unwrap();
    socket.recv_from(&mut buffer).expect("an answer");
    started.elapsed()
}

/// A name server on 127.0.0.1 (UDP) that keeps the raw bytes of every datagram it receives and
/// answers each query's first question of type A with `answer` (any other type with no
/// records): for tests that assert on exactly what reached the upstream. Dropping it stops it.
pub struct RecordingDns {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RecordingDns {
    pub fn start(answer: Ipv4Addr) -> Self {
        let socket = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .expect("binding the recording DNS server on 127.0.0.1");
        // Bounded waits, so the thread sees the stop flag.
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (kept, stopped) = (received.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buffer = vec![0u8; 65_535];
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buffer) else {
                    continue;
                };
                kept.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(buffer[..n].to_vec());
                if let Some(reply) = recorded_answer(&buffer[..n], answer) {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        RecordingDns {
            addr,
            received,
            stop,
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every datagram received so far, as it arrived.
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Forgets what was received.
    pub fn clear(&self) {
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Drop for RecordingDns {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The recording server's answer to `bytes`: the query's questions echoed, and an A record
/// for the first question when it asks for A.
fn recorded_answer(bytes: &[u8], answer: Ipv4Addr) -> Option<Vec<u8>> {
    use hickory_server::proto::op::{Message, OpCode};
    let query = Message::from_vec(bytes).ok()?;
    let mut reply = Message::response(query.metadata.id, OpCode::Query);
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.add_queries(query.queries.iter().cloned());
    if let Some(question) = query.queries.first()
        && question.query_type() == RecordType::A
    {
        reply.add_answer(Record::from_rdata(
            question.name().clone(),
            60,
            RData::A(A(answer)),
        ));
    }
    if let Some(edns) = &query.edns {
        let mut ours = Edns::new();
        ours.set_max_payload(edns.max_payload().max(512));
        reply.set_edns(ours);
    }
    reply.to_vec().ok()
}
