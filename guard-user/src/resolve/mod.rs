//! guard's resolver in the path: every DNS query of a process in scope (TCP and UDP to port 53,
//! whatever address it was sent to) is redirected here by the cgroup connect and sendmsg
//! programs (`guard-ebpf/src/dns.rs`), so the names a program asks for are the names guard
//! decides and attributes its connects by.
//!
//! For each query ([`serve`]):
//! 1. a name the policy forbids outright ([`names::NamePolicy`]), or that no rule names under a
//!    policy whose unmatched network default is not `allow`, gets REFUSED (or NXDOMAIN,
//!    [`Refusal`]) and a [`ResolverEvent::Refused`] that names the process that asked
//!    ([`peer`]); the query never leaves the host;
//! 2. otherwise it is answered from the cache ([`cache`]) or forwarded to the upstream server
//!    ([`upstream`]: `--nameserver`, or the system's configuration);
//!    A name no rule names under `unmatched_network="prompt"` is not forwarded either: it is
//!    answered with a stand-in address ([`stand_ins`]) that the kernel decides as an ask for
//!    the name and sends to the real address once a person approved it;
//! 3. before the answer goes back, its addresses (the CNAME chain's final A and AAAA records)
//!    are handed to the owner of the maps ([`ResolverEvent::Answered`]) and the resolver waits
//!    for it to put them in force: a connect that follows the answer never races the maps. If
//!    the owner does not confirm within [`ANSWER_WAIT`], the program gets SERVFAIL (fails
//!    closed: no answer whose addresses might not be allowed yet). The event names the process
//!    that asked, for the record of a name that left the host or got a stand-in.
//!
//! Messages are parsed and written by hickory-proto; nothing here reads DNS wire format by
//! hand.
//!
//! The policy's own host names are looked up here too ([`lookup`]): a cache of their addresses,
//! which compiling reads, and the resolver that fills and refreshes it. `crate::compile` does no
//! DNS.

pub mod answers;
pub mod cache;
pub mod caps;
pub mod hosts_file;
pub mod known;
pub mod lookup;
pub mod names;
pub mod peer;
pub mod refresh;
pub mod refresher;
pub mod serve;
pub mod stand_ins;
pub mod stats;
pub mod thread;
pub mod upstream;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

pub use names::{NameDecision, NamePolicy, NameRule};

/// What guard's resolver cannot see, and how each is decided instead (`guard doctor`,
/// docs/enforcement.md): (what, how it is decided).
pub const CANNOT_SEE: [(&str, &str); 7] = [
    (
        "DNS over HTTPS or TLS (port 443 or 853) to a resolver the policy allows",
        "the names inside are never seen: the connect to the resolver is decided by its \
         address, and what it answers reaches the program without guard; the addresses \
         connected to afterwards are decided by address (asks name the address)",
    ),
    (
        "hard-coded addresses",
        "decided by address: address_rules, the addresses of the policy's names, and the \
         unmatched-network default; an ask names the address",
    ),
    (
        "/etc/hosts entries",
        "read when guard's resolver starts and kept for the scope's life: a rule or pattern \
         for such a name holds, and its connects name it (later edits are not seen)",
    ),
    (
        "lookups over a local socket instead of port 53 (nscd, nss-resolve's varlink to \
         systemd-resolved)",
        "never seen: unless the policy's `unmatched_unix` default is allow (it is deny unless \
         the policy says otherwise), the unix socket itself is refused (no rule names it), so \
         the C library asks DNS, which is redirected; under allow the connects that follow are \
         decided by address. The stub at 127.0.0.53:53 is redirected like any DNS server",
    ),
    (
        "the labels of a name a host pattern allows (`*.example.com`): they leave the host, so \
         they can carry data",
        "forwarded as guard builds the query (one question, lower case, no options of the \
         program's), within the policy's caps: `dns_max_labels`, `dns_max_name_length` and \
         `dns_wildcard_lookups_per_second` (10, 128 and 100 unless set); a lookup past a cap \
         is refused and recorded. Name exact hosts instead of a pattern where that matters",
    ),
    (
        "names resolved before the scope began; an address the name no longer answers with",
        "decided by address: a rule's name holds for the addresses the scope was answered for \
         it (their TTL plus 60 s, and while guard's refreshes find the name still answering \
         with them: 256 names per scope, past which TTL plus 60 s); any other address, a rule's \
         name's included, gets the unmatched-network default. Without guard's resolver in the \
         path guard resolves the policy's names itself and keeps them fresh",
    ),
    (
        "names asked through the daemon's resolver by several scopes",
        "attributed to every scope alike: the daemon keeps one book of answers",
    ),
];

/// How long a query waits for the owner of the maps to put its answer in force.
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// How a forbidden name is answered.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Refusal {
    /// RCODE 5: the server will not answer (a resolver does not try another name or server).
    #[default]
    Refused,
    /// RCODE 3: the name does not exist.
    Nxdomain,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Refused => "REFUSED",
            Refusal::Nxdomain => "NXDOMAIN",
        }
    }
}

/// A name answered without a refusal, for the owner of the maps: its addresses to attribute
/// connects by (and put in force when a rule names it), and a record of the name.
#[derive(Clone, Debug)]
pub struct Answered {
    /// The name that was asked (normalised).
    pub name: String,
    /// `A`, `AAAA`, `MX`, ...
    pub query_type: String,
    /// The final A and AAAA records of the answer.
    pub addrs: Vec<IpAddr>,
    /// The smallest TTL on the way to them (the CNAMEs and the addresses); how long to keep a
    /// stand-in.
    pub ttl: Duration,
    /// What the policy says of the name.
    pub decision: NameDecision,
    pub source: AnswerSource,
    /// Who asked (looked up at a bounded rate, see [`peer`]).
    pub process: Option<peer::QueryProcess>,
}

/// Where an answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerSource {
    /// The name left the host: the upstream server answered it.
    Forwarded,
    /// Answered from what the upstream server answered before (its TTL is not over).
    Cached,
    /// The name stayed on the host: it was answered with its stand-in (or no records).
    StandIn,
}

impl AnswerSource {
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerSource::Forwarded => "forwarded",
            AnswerSource::Cached => "cached",
            AnswerSource::StandIn => "stand_in",
        }
    }
}

/// A name refused without asking upstream.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RefusedName {
    pub name: String,
    /// `A`, `AAAA`, `MX`, ...
    pub query_type: String,
    /// How it was answered.
    pub answer: &'static str,
    /// The rule as written, and where (none for the unmatched default).
    pub rule: String,
    pub file: Option<String>,
    pub line: Option<usize>,
    /// Who asked.
    pub process: Option<peer::QueryProcess>,
}

/// What the resolver tells the owner of the maps.
#[derive(Debug)]
pub enum ResolverEvent {
    /// Reply on the sender once the answer's addresses are in force.
    Answered(Answered, oneshot::Sender<()>),
    Refused(RefusedName),
    /// The upstream server did not answer `name` (the program got SERVFAIL).
    UpstreamFailed {
        name: String,
        error: String,
    },
    /// What the upstream said when guard asked for a scope's name again ([`refresh`]).
    Refreshed(refresher::Refreshed),
}

/// What the resolver said, once its answers were taken in (see
/// [`crate::in_force::Core::take_resolver_events`]): for the front end to report.
#[derive(Clone, Debug)]
pub enum ResolverNote {
    Answered(Answered),
    Refused(RefusedName),
    /// The upstream server did not answer `name` (the program got SERVFAIL).
    UpstreamFailed {
        name: String,
        error: String,
    },
}

/// How the resolver runs.
#[derive(Clone, Debug)]
pub struct ResolverConfig {
    /// Where queries go.
    pub upstream: SocketAddr,
    pub refusal: Refusal,
    /// The owner keeps a book of answers per scope (the daemon): an answer from the cache is
    /// handed over again, for the scope of the program that asked. `guard run` has one scope,
    /// whose first answer holds for it.
    pub per_scope: bool,
    /// What the kernel's DNS redirect records of each query socket, to name the process that
    /// asked without a look through `/proc` ([`peer::Peers`]; `None`: that look names it).
    pub origins: Option<Arc<crate::kernel::dns_origins::DnsOrigins>>,
}

/// A running resolver: listening on 127.0.0.1 and (when the host has it) ::1, UDP and TCP, one
/// port for all four. Dropping it stops every listener.
pub struct Resolver {
    port: u16,
    stats: Arc<stats::ResolverStats>,
    refresher: refresher::Refresher,
    /// Its listeners and refresher, which run for its life; aborted when dropped.
    tasks: JoinSet<()>,
}

/// Where the resolver's events go. Each is there before the answer it concerns leaves, so an
/// owner that reads its events after the kernel's sees the answer behind any connect.
#[derive(Clone)]
pub enum EventSink {
    /// A channel the owner's tokio tasks read (the daemon).
    Tokio(mpsc::UnboundedSender<ResolverEvent>),
    /// A channel read from a `poll` loop (a [`ResolverThread`]), and the eventfd written with
    /// each event, which wakes it.
    Poll {
        events: std::sync::mpsc::Sender<ResolverEvent>,
        wake: Arc<std::os::fd::OwnedFd>,
    },
}

impl EventSink {
    /// Whether the owner is there to take it.
    pub fn send(&self, event: ResolverEvent) -> bool {
        self.send_waking(event, true)
    }

    /// [`EventSink::send`] of an event nothing waits for (an answer recorded for attribution
    /// only): a `poll` loop's owner is not woken for it, and takes it with the next kernel
    /// event (before that event, so a connect is still attributed by the answer) or at its next
    /// turn. Waking it for every such answer put a second thread on the answer's way.
    pub fn send_unwaited(&self, event: ResolverEvent) -> bool {
        self.send_waking(event, false)
    }

    fn send_waking(&self, event: ResolverEvent, waking: bool) -> bool {
        match self {
            EventSink::Tokio(events) => events.send(event).is_ok(),
            EventSink::Poll { events, wake } => {
                if events.send(event).is_err() {
                    return false;
                }
                if !waking {
                    return true;
                }
                let one: u64 = 1;
                // SAFETY: an 8-byte write to an eventfd held open by `wake`.
                unsafe {
                    libc::write(
                        std::os::fd::AsRawFd::as_raw_fd(&**wake),
                        (&raw const one).cast(),
                        8,
                    )
                };
                true
            }
        }
    }
}

impl Resolver {
    /// Binds the listeners and starts serving on the current tokio runtime. `names` is read on
    /// every query (the daemon replaces it at a reload); `events` receives what the owner of
    /// the maps must do or know.
    pub async fn start(
        config: ResolverConfig,
        names: Arc<RwLock<NamePolicy>>,
        events: EventSink,
    ) -> Result<Resolver> {
        Self::start_on(config, names, events, 0).await
    }

    /// [`Resolver::start`] on `port` (0: a free one): the daemon starts a resolver that
    /// stopped again where the kernel's redirect sends the scopes' queries.
    pub async fn start_on(
        config: ResolverConfig,
        names: Arc<RwLock<NamePolicy>>,
        events: EventSink,
        port: u16,
    ) -> Result<Resolver> {
        let (udp, tcp) = bind_loopback(port).await?;
        let port = udp[0].local_addr()?.port();
        let shared = Arc::new(serve::Shared::new(config, names, events));
        let stats = shared.stats.clone();
        let mut tasks = JoinSet::new();
        for socket in udp {
            tasks.spawn(serve::udp(Arc::new(socket), shared.clone()));
        }
        for listener in tcp {
            tasks.spawn(serve::tcp(listener, shared.clone()));
        }
        let (refresher, refreshes) = refresher::Refresher::channel();
        tasks.spawn(refresher::serve(refreshes, shared.clone()));
        Ok(Resolver {
            port,
            stats,
            refresher,
            tasks,
        })
    }

    /// Why it stopped answering, once one of its tasks ended (they run for its life: a
    /// listener whose socket failed, or a panic); `None` while it runs.
    pub fn stopped(&mut self) -> Option<String> {
        match self.tasks.try_join_next()? {
            Ok(()) => Some("one of its listeners ended".to_string()),
            Err(err) if err.is_panic() => Some("one of its tasks panicked".to_string()),
            Err(err) => Some(format!("one of its tasks ended: {err}")),
        }
    }

    /// The port it listens on (127.0.0.1 and ::1, UDP and TCP).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where to send the names guard asks for again ([`refresh`]); their answers come as
    /// [`ResolverEvent::Refreshed`].
    pub fn refresher(&self) -> refresher::Refresher {
        self.refresher.clone()
    }

    /// Its queries by outcome and their latency so far.
    pub fn stats(&self) -> stats::ResolverSnapshot {
        self.stats.snapshot()
    }
}

/// Tries ephemeral ports until one is free on 127.0.0.1 for UDP and TCP (and on ::1 when the
/// host has IPv6 loopback; without it, IPv6 queries are redirected to an address nothing
/// listens on and fail, which is no worse than a host without IPv6).
async fn bind_loopback(port: u16) -> Result<(Vec<UdpSocket>, Vec<TcpListener>)> {
    let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let mut last_error = None;
    // A port asked for is tried once; a free one up to 20 times (the UDP port the kernel
    // picks may be taken for TCP).
    let attempts = if port == 0 { 20 } else { 1 };
    for _ in 0..attempts {
        let udp = UdpSocket::bind((v4, port))
            .await
            .with_context(|| format!("binding guard's resolver (UDP, 127.0.0.1:{port})"))?;
        let port = udp.local_addr()?.port();
        match TcpListener::bind((v4, port)).await {
            Ok(tcp) => {
                let mut sockets = vec![udp];
                let mut listeners = vec![tcp];
                if let (Ok(udp6), Ok(tcp6)) = (
                    UdpSocket::bind((v6, port)).await,
                    TcpListener::bind((v6, port)).await,
                ) {
                    sockets.push(udp6);
                    listeners.push(tcp6);
                }
                return Ok((sockets, listeners));
            }
            Err(err) => last_error = Some(err),
        }
    }
    Err(anyhow::anyhow!(
        "no port was free for guard's resolver on 127.0.0.1 for both UDP and TCP: {}",
        last_error.map_or_else(String::new, |e| e.to_string())
    ))
}
