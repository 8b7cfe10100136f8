//! Looking up the host names in `network_rule`s, guard asking a name server itself (the scopes'
//! own queries are [`super::serve`]'s): the lookups, and the cache of addresses they fill that
//! compiling reads.
//!
//! The kernel matches destinations by address, so every host name in the policy has to be turned
//! into addresses by the daemon and kept current: DNS answers change (load balancers, CDNs,
//! failover), and a stale address set either blocks a host the policy allows or keeps allowing an
//! address the host no longer has. The pieces:
//!
//! - [`DnsCache`]: per host, its current A and AAAA addresses and when they expire. It implements
//!   [`HostResolver`], so compiling a policy reads a snapshot and never does I/O.
//! - [`DnsResolver`]: hickory's tokio resolver. [`DnsResolver::resolve`] fills a cache,
//!   [`DnsResolver::refresh`] re-resolves the hosts whose TTL ran out and reports what changed
//!   ([`HostChange`]), and [`DnsResolver::next_refresh`] says when to call it again.
//!
//! Expiry policy (all in [`DnsCache`], unit-tested without a network):
//!
//! - An answer is trusted for its smallest TTL (the address records and any CNAME leading to
//!   them), clamped to [`MIN_REFRESH`]..=[`MAX_REFRESH`]: at most one refresh per second per host
//!   even for TTL 0, and at least one an hour even for week-long TTLs.
//! - A name that does not exist (NXDOMAIN), or has no record of a family (NODATA), is an answer:
//!   that family has no addresses, for the negative TTL from the SOA (or
//!   [`NEGATIVE_TTL_WITHOUT_SOA`]).
//! - A failed lookup (timeout, SERVFAIL, refused, unreachable server) is not an answer: the family
//!   keeps its old addresses, because a resolver outage must not rewrite the enforced policy, and
//!   the host is retried after a backoff that starts at [`RETRY_BACKOFF`] and doubles per
//!   consecutive failure up to [`MAX_RETRY_BACKOFF`].
//!
//! A refresh never makes the resolver's own cache answer for a name: hickory's cache is disabled
//! and the host's entries are cleared before each lookup, so a refresh after the TTL always asks
//! the name server.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::rr::{Name, RData, RecordType};
use hickory_resolver::{TokioResolver, system_conf};
use tokio::task::JoinSet;

use crate::policy::destination::HostResolver;

/// The shortest time an answer is trusted: a TTL of 0 (or 1) must not turn into a query loop.
pub const MIN_REFRESH: Duration = Duration::from_secs(1);
/// The longest time an answer is trusted, whatever its TTL: addresses are re-checked at least
/// hourly.
pub const MAX_REFRESH: Duration = Duration::from_secs(3600);
/// The first retry delay after a failed lookup; it doubles with each consecutive failure.
pub const RETRY_BACKOFF: Duration = Duration::from_secs(5);
/// The longest retry delay after repeated failures.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(60);
/// How long a negative answer (NXDOMAIN / NODATA) is trusted when it carries no SOA record, and
/// so no negative TTL (RFC 2308 says not to cache it at all; re-asking every second would be a
/// query loop for a name that simply does not exist).
pub const NEGATIVE_TTL_WITHOUT_SOA: Duration = Duration::from_secs(5);
/// The bound on one host's lookup (A and AAAA together), retries included: one unresponsive
/// server must not stall a refresh of every other host.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// The most hosts looked up at once. Each lookup is bounded by [`LOOKUP_TIMEOUT`], so N names
/// take at most N ÷ this × that, and about N ÷ this round trips when the server answers.
pub const LOOKUPS_IN_FLIGHT: usize = 128;
/// hickory's per-request timeout. With [`RETRIES`], `(1 + RETRIES) * REQUEST_TIMEOUT` fits
/// inside [`LOOKUP_TIMEOUT`], so a dead server is reported by hickory's own error (more
/// precise than our timeout's).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// hickory's retries after a failed request (its `attempts` option counts retries).
const RETRIES: usize = 1;

/// Where host names are resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsConfig {
    /// `None`: the system resolver configuration (`/etc/resolv.conf`, and `/etc/hosts` as the
    /// system resolver would use it). `Some`: only this server, over UDP, and no hosts file
    /// (tests point this at their own server; it can be made configurable later).
    pub nameserver: Option<SocketAddr>,
}

/// What a refresh changed for one host. The map-sync caller inserts `added` before it deletes
/// `removed`, so a connection to the host is never refused because, for a moment, neither its
/// old nor its new address was in the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostChange {
    /// The host name (normalised: lower case, no trailing dot).
    pub host: String,
    /// Addresses the host has now and did not have before, sorted.
    pub added: Vec<IpAddr>,
    /// Addresses the host had before and no longer has, sorted.
    pub removed: Vec<IpAddr>,
}

/// Per host name, its current addresses and when they must be looked up again.
#[derive(Clone, Debug, Default)]
pub struct DnsCache {
    entries: BTreeMap<String, Entry>,
}

#[derive(Clone, Debug)]
struct Entry {
    /// IPv4 addresses (from A records), sorted, no duplicates.
    v4: Vec<IpAddr>,
    /// IPv6 addresses (from AAAA records), sorted, no duplicates.
    v6: Vec<IpAddr>,
    /// When the answer runs out (or the retry after a failure is due).
    expires: Instant,
    /// Consecutive failed lookups; 0 after a complete answer.
    failures: u32,
    /// Why the last lookup failed, if it did.
    error: Option<String>,
}

/// The outcome of one record type's lookup for one host.
#[derive(Clone, Debug)]
enum Answer {
    /// The server answered: these addresses (possibly none, for NXDOMAIN / NODATA), valid for
    /// `ttl` (not yet clamped).
    Addrs { addrs: Vec<IpAddr>, ttl: Duration },
    /// No answer; the message says why (host, record type and name server included).
    Failed(String),
}

impl DnsCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many hosts the cache holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds no host.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The host names the cache holds (normalised), in order.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// When `host`'s addresses expire (or its retry is due); `None` when the host is unknown.
    pub fn expires(&self, host: &str) -> Option<Instant> {
        self.entries.get(&normalise(host)).map(|e| e.expires)
    }

    /// Why the last lookup of `host` failed (its addresses are then the ones from before);
    /// `None` when it succeeded or the host is unknown.
    pub fn error(&self, host: &str) -> Option<&str> {
        self.entries.get(&normalise(host))?.error.as_deref()
    }

    /// Adds `other`'s hosts that this cache does not hold (a reload resolves only the names it
    /// did not know, so a lookup failing then cannot take away addresses already held).
    pub fn merge_new(&mut self, other: DnsCache) {
        for (host, entry) in other.entries {
            self.entries.entry(host).or_insert(entry);
        }
    }

    /// Holds `addrs` for `host` as if a lookup had answered them (tests of what is built on
    /// the cache).
    #[cfg(test)]
    pub fn answered_for_test(&mut self, host: &str, addrs: Vec<IpAddr>, now: Instant) {
        let ttl = Duration::from_secs(300);
        let (v4, v6) = addrs.into_iter().partition(IpAddr::is_ipv4);
        self.apply(
            host,
            Answer::Addrs { addrs: v4, ttl },
            Answer::Addrs { addrs: v6, ttl },
            now,
        );
    }

    /// Drops hosts not in `keep` (names no rule mentions any more).
    pub fn retain_hosts(&mut self, keep: &[String]) {
        let keep: std::collections::HashSet<String> = keep.iter().map(|k| normalise(k)).collect();
        self.entries.retain(|host, _| keep.contains(host));
    }

    /// The earliest time a host needs resolving again; `None` when the cache is empty.
    pub fn next_refresh(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.expires).min()
    }

    /// The hosts whose answer has run out at `now`.
    fn due(&self, now: Instant) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(_, e)| e.expires <= now)
            .map(|(host, _)| host.clone())
            .collect()
    }

    /// Records the outcome of looking `host` up at `now` and returns what changed, if anything.
    /// A family whose lookup failed keeps its previous addresses.
    fn apply(&mut self, host: &str, v4: Answer, v6: Answer, now: Instant) -> Option<HostChange> {
        let host = normalise(host);
        let old = self.entries.get(&host);
        let old_v4 = old.map(|e| e.v4.clone()).unwrap_or_default();
        let old_v6 = old.map(|e| e.v6.clone()).unwrap_or_default();
        let old_failures = old.map_or(0, |e| e.failures);

        let mut ttl: Option<Duration> = None;
        let mut errors = Vec::new();
        let mut take = |answer: Answer, previous: &[IpAddr]| match answer {
            Answer::Addrs { addrs, ttl: t } => {
                ttl = Some(ttl.map_or(t, |cur| cur.min(t)));
                sorted(addrs)
            }
            Answer::Failed(error) => {
                if !errors.contains(&error) {
                    errors.push(error);
                }
                previous.to_vec()
            }
        };
        let v4 = take(v4, &old_v4);
        let v6 = take(v6, &old_v6);

        let mut wait = ttl.unwrap_or(MAX_REFRESH).clamp(MIN_REFRESH, MAX_REFRESH);
        let failures = if errors.is_empty() {
            0
        } else {
            let failures = old_failures.saturating_add(1);
            wait = wait.min(backoff(failures));
            failures
        };

        let change = diff(
            &host,
            &[&old_v4[..], &old_v6[..]].concat(),
            &[&v4[..], &v6[..]].concat(),
        );
        self.entries.insert(
            host,
            Entry {
                v4,
                v6,
                expires: now + wait,
                failures,
                error: (!errors.is_empty()).then(|| errors.join("; ")),
            },
        );
        change
    }
}

impl HostResolver for DnsCache {
    /// The cached addresses (IPv4 first), as of the last resolve or refresh; no I/O.
    fn lookup(&self, host: &str) -> Vec<IpAddr> {
        self.entries
            .get(&normalise(host))
            .map(|e| [&e.v4[..], &e.v6[..]].concat())
            .unwrap_or_default()
    }
}

/// The retry delay after `failures` consecutive failed lookups (`failures >= 1`); a scope's
/// refreshes ([`super::refresh`]) retry after the same.
pub(super) fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_RETRY_BACKOFF)
}

/// Host names compare case-insensitively and with or without the root's trailing dot.
fn normalise(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn sorted(addrs: Vec<IpAddr>) -> Vec<IpAddr> {
    addrs
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn diff(host: &str, old: &[IpAddr], new: &[IpAddr]) -> Option<HostChange> {
    let added: Vec<IpAddr> = new.iter().filter(|a| !old.contains(a)).copied().collect();
    let removed: Vec<IpAddr> = old.iter().filter(|a| !new.contains(a)).copied().collect();
    (!added.is_empty() || !removed.is_empty()).then(|| HostChange {
        host: host.to_owned(),
        added: sorted(added),
        removed: sorted(removed),
    })
}

/// The daemon's resolver: hickory's tokio resolver, configured so that every lookup asks a name
/// server (see the module documentation) and is bounded in time.
#[derive(Clone)]
pub struct DnsResolver {
    resolver: TokioResolver,
    /// Which server(s) answer, for error messages.
    source: String,
}

impl std::fmt::Debug for DnsResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsResolver")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl DnsResolver {
    /// A resolver for `config`. Fails when the system configuration cannot be read or names no
    /// server. Needs no runtime; lookups must run inside a tokio runtime.
    pub fn new(config: &DnsConfig) -> anyhow::Result<Self> {
        let (resolver_config, mut opts, source) = match config.nameserver {
            None => {
                let (resolver_config, opts) = system_conf::read_system_conf()
                    .context("reading the system resolver configuration (/etc/resolv.conf)")?;
                anyhow::ensure!(
                    !resolver_config.name_servers().is_empty(),
                    "the system resolver configuration (/etc/resolv.conf) names no name server"
                );
                let servers: Vec<String> = resolver_config
                    .name_servers()
                    .iter()
                    .map(|ns| ns.ip.to_string())
                    .collect();
                let source = format!("the system resolver ({})", servers.join(", "));
                (resolver_config, opts, source)
            }
            Some(addr) => {
                let mut connection = ConnectionConfig::udp();
                connection.port = addr.port();
                let server = NameServerConfig::new(addr.ip(), true, vec![connection]);
                let mut opts = ResolverOpts::default();
                // "That server only": the hosts file would answer for names the server does not
                // know about.
                opts.use_hosts_file = ResolveHosts::Never;
                (
                    ResolverConfig::from_name_servers(vec![server]),
                    opts,
                    format!("name server {addr}"),
                )
            }
        };
        // Our cache is the only cache: hickory's would answer a refresh from memory (see
        // `lookup_host`, which also clears the host's entries before each lookup).
        opts.cache_size = 0;
        opts.timeout = REQUEST_TIMEOUT;
        opts.attempts = RETRIES;
        let resolver =
            TokioResolver::builder_with_config(resolver_config, TokioRuntimeProvider::default())
                .with_options(opts)
                .build()
                .with_context(|| format!("building a DNS resolver for {source}"))?;
        Ok(Self { resolver, source })
    }

    /// Which server(s) this resolver asks, as said in error messages.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Resolves every host (A and AAAA) concurrently, each bounded by [`LOOKUP_TIMEOUT`]. A host
    /// that fails to resolve is in the cache with no addresses, its error
    /// ([`DnsCache::error`]) and a retry time. Must run inside a tokio runtime.
    pub async fn resolve(&self, hosts: &[String]) -> DnsCache {
        let mut cache = DnsCache::new();
        let hosts: BTreeSet<String> = hosts.iter().map(|h| normalise(h)).collect();
        let results = self.lookup_all(hosts.into_iter().collect()).await;
        let answered = Instant::now();
        for (host, v4, v6) in results {
            cache.apply(&host, v4, v6, answered);
        }
        cache
    }

    /// Re-resolves the hosts in `cache` whose answer ran out at `now` (the current time; pass
    /// `Instant::now()`, tests may pass a later instant) and returns, per host whose addresses
    /// changed, what changed. Hosts not yet due are not looked up. New expiry times count from
    /// when the answers arrived (`now` plus the time the lookups took), so a slow failed lookup
    /// still waits its whole backoff before the retry. Must run inside a tokio runtime.
    pub async fn refresh(&self, cache: &mut DnsCache, now: Instant) -> Vec<HostChange> {
        let due = cache.due(now);
        if due.is_empty() {
            return Vec::new();
        }
        let started = Instant::now();
        let results = self.lookup_all(due).await;
        let answered = now + started.elapsed();
        results
            .into_iter()
            .filter_map(|(host, v4, v6)| cache.apply(&host, v4, v6, answered))
            .collect()
    }

    /// When [`DnsResolver::refresh`] next has something to do; `None` for an empty cache.
    pub fn next_refresh(&self, cache: &DnsCache) -> Option<Instant> {
        cache.next_refresh()
    }

    /// Looks every host up concurrently, at most [`LOOKUPS_IN_FLIGHT`] at a time (a policy of
    /// 100 000 names must not become 100 000 tasks and sockets at once); results in host order.
    async fn lookup_all(&self, hosts: Vec<String>) -> Vec<(String, Answer, Answer)> {
        let mut tasks = JoinSet::new();
        let mut names = HashMap::new();
        let mut results = Vec::with_capacity(hosts.len());
        let mut pending = hosts.into_iter();
        loop {
            while tasks.len() < LOOKUPS_IN_FLIGHT {
                let Some(host) = pending.next() else { break };
                let this = self.clone();
                let task_host = host.clone();
                let handle = tasks.spawn(async move { this.lookup_host(&task_host).await });
                names.insert(handle.id(), host);
            }
            let Some(joined) = tasks.join_next_with_id().await else {
                break;
            };
            match joined {
                Ok((id, (v4, v6))) => {
                    if let Some(host) = names.remove(&id) {
                        results.push((host, v4, v6));
                    }
                }
                Err(error) => {
                    if let Some(host) = names.remove(&error.id()) {
                        let message = format!("resolving {host}: the lookup task failed: {error}");
                        results.push((
                            host,
                            Answer::Failed(message.clone()),
                            Answer::Failed(message),
                        ));
                    }
                }
            }
        }
        results.sort_by(|a, b| a.0.cmp(&b.0));
        results
    }

    /// One host's A and AAAA lookups, together bounded by [`LOOKUP_TIMEOUT`].
    async fn lookup_host(&self, host: &str) -> (Answer, Answer) {
        if let Ok(ip) = IpAddr::from_str(host) {
            // Not expected (rules hold IP literals as CIDRs), but an address resolves to itself.
            let (v4, v6) = if ip.is_ipv4() {
                (vec![ip], vec![])
            } else {
                (vec![], vec![ip])
            };
            return (
                Answer::Addrs {
                    addrs: v4,
                    ttl: MAX_REFRESH,
                },
                Answer::Addrs {
                    addrs: v6,
                    ttl: MAX_REFRESH,
                },
            );
        }
        let name = match dns_name(host) {
            Ok(name) => name,
            Err(error) => {
                let message = format!("{error:#}");
                return (Answer::Failed(message.clone()), Answer::Failed(message));
            }
        };
        for record_type in [RecordType::A, RecordType::AAAA] {
            self.resolver.clear_lookup_cache(name.clone(), record_type);
        }
        let both = async {
            tokio::join!(
                self.lookup_family(host, &name, RecordType::A),
                self.lookup_family(host, &name, RecordType::AAAA),
            )
        };
        match tokio::time::timeout(LOOKUP_TIMEOUT, both).await {
            Ok(answers) => answers,
            Err(_) => {
                let message = format!(
                    "resolving {host} via {}: no answer within {} s",
                    self.source,
                    LOOKUP_TIMEOUT.as_secs()
                );
                (Answer::Failed(message.clone()), Answer::Failed(message))
            }
        }
    }

    async fn lookup_family(&self, host: &str, name: &Name, record_type: RecordType) -> Answer {
        match self.resolver.lookup(name.clone(), record_type).await {
            Ok(lookup) => {
                let answers = lookup.answers();
                let addrs = answers
                    .iter()
                    .filter_map(|record| match &record.data {
                        RData::A(a) if record_type == RecordType::A => Some(IpAddr::V4(a.0)),
                        RData::AAAA(aaaa) if record_type == RecordType::AAAA => {
                            Some(IpAddr::V6(aaaa.0))
                        }
                        _ => None,
                    })
                    .collect();
                // The chain (CNAMEs included) is only as good as its shortest-lived record.
                let ttl = answers
                    .iter()
                    .map(|record| Duration::from_secs(u64::from(record.ttl)))
                    .min()
                    .unwrap_or(NEGATIVE_TTL_WITHOUT_SOA);
                Answer::Addrs { addrs, ttl }
            }
            Err(NetError::Dns(DnsError::NoRecordsFound(no_records))) => Answer::Addrs {
                addrs: Vec::new(),
                ttl: no_records
                    .negative_ttl
                    .map_or(NEGATIVE_TTL_WITHOUT_SOA, |ttl| {
                        Duration::from_secs(u64::from(ttl))
                    }),
            },
            Err(error) => Answer::Failed(format!(
                "{:#}",
                anyhow!(error).context(format!(
                    "resolving {host} ({record_type}) via {}",
                    self.source
                ))
            )),
        }
    }
}

/// The DNS name to ask for `host`. A dotted name is absolute (`example.com` means
/// `example.com.`, never `example.com.<search domain>`): what a rule allows must not depend on
/// the machine's search list. A single label (`db`) is left relative, so the search list
/// applies, as it does for the programs the rule is about.
fn dns_name(host: &str) -> anyhow::Result<Name> {
    let text = if host.contains('.') && !host.ends_with('.') {
        format!("{host}.")
    } else {
        host.to_owned()
    };
    Name::from_str(&text).with_context(|| format!("`{host}` is not a valid DNS name"))
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
    }

    fn v6(last: u16) -> IpAddr {
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last))
    }

    fn addrs(addrs: Vec<IpAddr>, ttl_secs: u64) -> Answer {
        Answer::Addrs {
            addrs,
            ttl: Duration::from_secs(ttl_secs),
        }
    }

    fn failed() -> Answer {
        Answer::Failed("resolving example.com (A) via name server 127.0.0.1:53: timed out".into())
    }

    #[test]
    fn answer_sets_addresses_and_expiry_from_the_smallest_ttl() {
        let now = Instant::now();
        let mut cache = DnsCache::new();
        let change = cache.apply(
            "Example.COM.",
            addrs(vec![v4(2), v4(1), v4(2)], 300),
            addrs(vec![v6(1)], 60),
            now,
        );
        assert_eq!(
            change,
            Some(HostChange {
                host: "example.com".into(),
                added: vec![v4(1), v4(2), v6(1)],
                removed: vec![],
            })
        );
        assert_eq!(cache.lookup("example.com"), vec![v4(1), v4(2), v6(1)]);
        assert_eq!(cache.lookup("EXAMPLE.com."), vec![v4(1), v4(2), v6(1)]);
        assert_eq!(
            cache.expires("example.com"),
            Some(now + Duration::from_secs(60))
        );
        assert_eq!(cache.next_refresh(), Some(now + Duration::from_secs(60)));
        assert_eq!(cache.error("example.com"), None);
        assert_eq!(cache.hosts().collect::<Vec<_>>(), vec!["example.com"]);
    }

    #[test]
    fn ttl_is_clamped_to_the_refresh_bounds() {
        let now = Instant::now();
        let mut cache = DnsCache::new();
        cache.apply("zero.test", addrs(vec![v4(1)], 0), addrs(vec![], 0), now);
        cache.apply(
            "week.test",
            addrs(vec![v4(2)], 7 * 86_400),
            addrs(vec![], 7 * 86_400),
            now,
        );
        assert_eq!(cache.expires("zero.test"), Some(now + MIN_REFRESH));
        assert_eq!(cache.expires("week.test"), Some(now + MAX_REFRESH));
        assert_eq!(cache.next_refresh(), Some(now + MIN_REFRESH));
    }

    #[test]
    fn unknown_host_has_no_addresses() {
        let cache = DnsCache::new();
        assert!(cache.lookup("nowhere.test").is_empty());
        assert_eq!(cache.expires("nowhere.test"), None);
        assert_eq!(cache.next_refresh(), None);
        assert!(cache.is_empty());
    }

    #[test]
    fn only_expired_hosts_are_due() {
        let now = Instant::now();
        let mut cache = DnsCache::new();
        cache.apply("short.test", addrs(vec![v4(1)], 1), addrs(vec![], 1), now);
        cache.apply(
            "long.test",
            addrs(vec![v4(2)], 600),
            addrs(vec![], 600),
            now,
        );
        assert!(cache.due(now).is_empty());
        assert!(cache.due(now + Duration::from_millis(999)).is_empty());
        assert_eq!(
            cache.due(now + Duration::from_secs(1)),
            vec!["short.test".to_string()]
        );
        assert_eq!(cache.due(now + Duration::from_secs(600)).len(), 2);
    }

    #[test]
    fn changed_answer_reports_added_and_removed() {
        let now = Instant::now();
        let mut cache = DnsCache::new();
        cache.apply(
            "h.test",
            addrs(vec![v4(1), v4(2)], 1),
            addrs(vec![v6(1)], 1),
            now,
        );
        let later = now + Duration::from_secs(1);
        let change = cache.apply(
            "h.test",
            addrs(vec![v4(2), v4(3)], 1),
            addrs(vec![], 1),
            later,
        );
        assert_eq!(
            change,
            Some(HostChange {
                host: "h.test".into(),
                added: vec![v4(3)],
                removed: vec![v4(1), v6(1)],
            })
        );
        assert_eq!(cache.lookup("h.test"), vec![v4(2), v4(3)]);
        // The same answer again changes nothing.
        let change = cache.apply(
            "h.test",
            addrs(vec![v4(3), v4(2)], 1),
            addrs(vec![], 1),
            later,
        );
        assert_eq!(change, None);
    }

    #[test]
    fn failure_keeps_old_addresses_and_backs_off() {
        let now = Instant::now();
        let mut cache = DnsCache::new();
        cache.apply("h.test", addrs(vec![v4(1)], 1), addrs(vec![v6(1)], 1), now);

        let t1 = now + Duration::from_secs(1);
        assert_eq!(cache.apply("h.test", failed(), failed(), t1), None);
        assert_eq!(cache.lookup("h.test"), vec![v4(1), v6(1)]);
        assert_eq!(cache.expires("h.test"), Some(t1 + RETRY_BACKOFF));
        assert!(cache.error("h.test").unwrap().contains("example.com"));

        // Consecutive failures double the delay, up to the maximum.
        let t2 = t1 + RETRY_BACKOFF;
        cache.apply("h.test", failed(), failed(), t2);
        assert_eq!(cache.expires("h.test"), Some(t2 + RETRY_BACKOFF * 2));
        let mut t = t2;
        for _ in 0..10 {
            t += Duration::from_secs(60);
            cache.apply("h.test", failed(), failed(), t);
        }
        assert_eq!(cache.expires("h.test"), Some(t + MAX_RETRY_BACKOFF));
        assert_eq!(cache.lookup("h.test"), vec![v4(1), v6(1)]);

        // An answer ends the backoff and the error.
        let t3 = t + MAX_RETRY_BACKOFF;
        let change = cache.apply(
            "h.test",
            addrs(vec![v4(9)], 300),
            addrs(vec![v6(1)], 300),
            t3,
        );
        assert_eq!(
            change,
            Some(HostChange {
                host: "h.test".into(),
                added: vec![v4(9)],
                removed: vec![v4(1)],
            })
        );
        assert_eq!(cache.expires("h.test"), Some(t3 + Duration::from_secs(300)));
        assert_eq!(cache.error("h.test"), None);
    }

    #[test]
    fn one_failed_family_keeps_its_addresses_and_retries_soon() {
        let now = Instant::now();
        let mut cache = DnsCache::new();
        cache.apply(
            "h.test",
            addrs(vec![v4(1)], 300),
            addrs(vec![v6(1)], 300),
            now,
        );
        let later = now + Duration::from_secs(300);
        let change = cache.apply("h.test", addrs(vec![v4(2)], 300), failed(), later);
        assert_eq!(
            change,
            Some(HostChange {
                host: "h.test".into(),
                added: vec![v4(2)],
                removed: vec![v4(1)],
            })
        );
        assert_eq!(cache.lookup("h.test"), vec![v4(2), v6(1)]);
        assert_eq!(cache.expires("h.test"), Some(later + RETRY_BACKOFF));
    }

    #[test]
    fn first_lookup_failing_leaves_no_addresses_and_a_retry() {
        let now = Instant::now();
        let mut cache = DnsCache::new();
        assert_eq!(cache.apply("h.test", failed(), failed(), now), None);
        assert!(cache.lookup("h.test").is_empty());
        assert_eq!(cache.next_refresh(), Some(now + RETRY_BACKOFF));
    }

    #[test]
    fn negative_answer_removes_addresses() {
        let now = Instant::now();
        let mut cache = DnsCache::new();
        cache.apply("h.test", addrs(vec![v4(1)], 1), addrs(vec![], 1), now);
        let later = now + Duration::from_secs(1);
        let change = cache.apply("h.test", addrs(vec![], 30), addrs(vec![], 30), later);
        assert_eq!(
            change,
            Some(HostChange {
                host: "h.test".into(),
                added: vec![],
                removed: vec![v4(1)],
            })
        );
        assert_eq!(
            cache.expires("h.test"),
            Some(later + Duration::from_secs(30))
        );
    }

    #[test]
    fn backoff_doubles_and_saturates() {
        assert_eq!(backoff(1), RETRY_BACKOFF);
        assert_eq!(backoff(2), RETRY_BACKOFF * 2);
        assert_eq!(backoff(3), RETRY_BACKOFF * 4);
        assert_eq!(backoff(100), MAX_RETRY_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_RETRY_BACKOFF);
    }

    #[test]
    fn dotted_names_are_absolute() {
        assert!(dns_name("example.com").unwrap().is_fqdn());
        assert!(dns_name("example.com.").unwrap().is_fqdn());
        assert!(!dns_name("db").unwrap().is_fqdn());
        let error = dns_name(&"a".repeat(300)).unwrap_err();
        assert!(format!("{error:#}").contains("not a valid DNS name"));
    }

    #[test]
    fn explicit_nameserver_config_builds_without_a_runtime() {
        let resolver = DnsResolver::new(&DnsConfig {
            nameserver: Some("127.0.0.1:5353".parse().unwrap()),
        })
        .unwrap();
        assert_eq!(resolver.source(), "name server 127.0.0.1:5353");
    }
}
