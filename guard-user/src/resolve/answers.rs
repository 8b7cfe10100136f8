//! What guard's resolver answered in a scope: each name's addresses, kept for the answer's TTL
//! plus [`GRACE`] (programs keep answers past their TTL, and a connection pool reconnects to an
//! address it resolved minutes ago), and for each address the names it was answered for, so a
//! connect can be attributed to the host the program asked for. An address of a name guard
//! refreshes for the scope ([`super::refresh`]) is kept past that for as long as the name still
//! answers with it ([`AnswerBook::hold`]).
//!
//! A new answer adds its addresses at once and never removes an older one: an address goes only
//! when its own time is up and no refresh holds it ([`AnswerBook::prune`]), so a rotating answer
//! never leaves a program holding an address the maps no longer allow.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::compile::HostResolver;
use crate::policy::destination::StandIn;
use crate::policy::host::{HostPattern, is_host_pattern};
use crate::policy::rule::canonical_ip;
use crate::resolve::lookup::DnsCache;
use crate::resolve::refresh::Family;

/// How long an address is kept after its answer's TTL ran out.
pub const GRACE: Duration = Duration::from_secs(60);
/// The most addresses kept; past it the oldest answers of the scope that holds the most go
/// first (a program that asks for a million names must not grow guard without bound, nor push
/// out the answers of another scope).
pub const MAX_ADDRESSES: usize = 65_536;

/// An address as answered to one scope (its cgroup id), or to every scope (0: `guard run`'s one
/// scope, the hosts file).
type ScopedAddress = (IpAddr, u64);

/// How long one answered address is kept.
#[derive(Clone, Copy, Debug)]
struct Kept {
    /// When its own answer's time is up (its TTL plus [`GRACE`]).
    until: Instant,
    /// A refresh holds it: the name still answers with it ([`AnswerBook::hold`]), so it stays
    /// past `until` until a refresh says otherwise.
    refreshed: bool,
}

impl Kept {
    fn kept_at(&self, now: Instant) -> bool {
        self.refreshed || self.until > now
    }

    /// The order the bound evicts in: the oldest first, what a refresh holds last.
    fn eviction_order(&self) -> (bool, Instant) {
        (self.refreshed, self.until)
    }
}

#[derive(Default)]
pub struct AnswerBook {
    /// Name (normalised) → address and the scope it was answered to → how long it is kept.
    names: HashMap<String, HashMap<ScopedAddress, Kept>>,
    /// Address → the names it was answered for, and to which scope.
    by_address: HashMap<IpAddr, BTreeSet<(String, u64)>>,
    /// The stand-in addresses among them (few; looked at after every answer).
    stand_in_addresses: BTreeSet<std::net::Ipv4Addr>,
    /// Names that lost addresses to the bound ([`MAX_ADDRESSES`]) since the last
    /// [`AnswerBook::take_evicted`]: their entries must go from the maps too.
    evicted: Vec<String>,
    size: usize,
    /// No later than the first time an address no refresh holds goes: lowered as answers come
    /// and as refreshes let addresses go, made exact by [`AnswerBook::prune`] (an answer only
    /// ever gets a later time, so the bound holds), so the owner's check after every answer
    /// does not look at every address kept.
    earliest: Option<Instant>,
    /// How many answers each scope holds.
    per_scope: HashMap<u64, usize>,
}

impl AnswerBook {
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `addrs` for `name`, for every scope, until `now + ttl + GRACE` (an address
    /// answered again gets the later time). Returns whether any address is new for this name.
    pub fn record(&mut self, name: &str, addrs: &[IpAddr], ttl: Duration, now: Instant) -> bool {
        self.record_in(0, name, addrs, ttl, now)
    }

    /// [`AnswerBook::record`] for the one scope `scope` (a cgroup id; 0: every scope): only
    /// its connects are attributed to `name` by these addresses.
    pub fn record_in(
        &mut self,
        scope: u64,
        name: &str,
        addrs: &[IpAddr],
        ttl: Duration,
        now: Instant,
    ) -> bool {
        // An answer without addresses (NXDOMAIN, an MX lookup) has nothing to attribute by.
        if addrs.is_empty() {
            return false;
        }
        let until = now + ttl + GRACE;
        let mut added = false;
        for ip in addrs.iter().map(|ip| canonical_ip(*ip)) {
            let kept = Kept {
                until,
                refreshed: false,
            };
            added |= self.add(name, (ip, scope), kept);
        }
        if self.size > MAX_ADDRESSES {
            self.evict_oldest(self.size - MAX_ADDRESSES);
        }
        added
    }

    /// Keeps `answer` for `name` as `kept` says, or the later of both times when it is kept
    /// already (and held by a refresh if it was). Returns whether it is new; the caller bounds
    /// the book.
    fn add(&mut self, name: &str, answer: ScopedAddress, kept: Kept) -> bool {
        let known = self.names.entry(name.to_string()).or_default();
        if let Some(old) = known.get_mut(&answer) {
            old.until = old.until.max(kept.until);
            old.refreshed |= kept.refreshed;
            return false;
        }
        known.insert(answer, kept);
        if !kept.refreshed {
            self.lower_earliest(kept.until);
        }
        let (ip, scope) = answer;
        self.by_address
            .entry(ip)
            .or_default()
            .insert((name.to_string(), scope));
        if let IpAddr::V4(v4) = ip
            && super::stand_ins::is_stand_in_ip(ip)
        {
            self.stand_in_addresses.insert(v4);
        }
        self.size += 1;
        *self.per_scope.entry(scope).or_default() += 1;
        true
    }

    /// An address no refresh holds goes at `until`: the kept bound is no later.
    fn lower_earliest(&mut self, until: Instant) {
        self.earliest = Some(self.earliest.map_or(until, |first| first.min(until)));
    }

    /// Every stand-in address kept, with the name it stands for.
    pub fn stand_ins(&self) -> Vec<(std::net::Ipv4Addr, String)> {
        self.stand_in_addresses
            .iter()
            .filter_map(|v4| {
                let names = self.by_address.get(&IpAddr::V4(*v4))?;
                names.iter().next().map(|(name, _)| (*v4, name.clone()))
            })
            .collect()
    }

    /// Drops what is past its time; returns the names that lost an address.
    pub fn prune(&mut self, now: Instant) -> Vec<String> {
        let mut changed = Vec::new();
        for (name, addrs) in &mut self.names {
            let before = addrs.len();
            let mut gone = Vec::new();
            addrs.retain(|answer, kept| {
                let keep = kept.kept_at(now);
                if !keep {
                    gone.push(*answer);
                }
                keep
            });
            for answer in gone {
                uncount(&mut self.per_scope, answer.1);
                forget(
                    &mut self.by_address,
                    &mut self.stand_in_addresses,
                    name,
                    answer,
                );
            }
            if addrs.len() != before {
                self.size -= before - addrs.len();
                changed.push(name.clone());
            }
        }
        self.names.retain(|_, addrs| !addrs.is_empty());
        self.earliest = self
            .names
            .values()
            .flat_map(|a| a.values())
            .filter(|kept| !kept.refreshed)
            .map(|kept| kept.until)
            .min();
        changed
    }

    /// When the next address goes, if any is kept that no refresh holds (or earlier: then
    /// [`AnswerBook::prune`] finds nothing to drop and says when).
    pub fn next_expiry(&self) -> Option<Instant> {
        self.earliest
    }

    /// Marks `addrs` (of `name`, answered to `scope`) as held by a refresh from now on.
    pub fn mark_refreshed(&mut self, scope: u64, name: &str, addrs: &[IpAddr]) {
        let Some(known) = self.names.get_mut(name) else {
            return;
        };
        for ip in addrs.iter().map(|ip| canonical_ip(*ip)) {
            if let Some(kept) = known.get_mut(&(ip, scope)) {
                kept.refreshed = true;
            }
        }
    }

    /// A refresh found `name` answering with `addrs` of `family` at `now`: for `scope` those
    /// are held from now on (the new ones added), and the family's others are held no more
    /// (each goes when its own answer's time is up, [`AnswerBook::prune`]). `None`: the scope
    /// holds none of the name's family any more (the bound let them go), so nothing is added;
    /// else whether an address was added.
    pub fn hold(
        &mut self,
        scope: u64,
        name: &str,
        family: Family,
        addrs: &[IpAddr],
        now: Instant,
    ) -> Option<bool> {
        let known = self.names.get_mut(name)?;
        let addrs: Vec<IpAddr> = addrs
            .iter()
            .map(|ip| canonical_ip(*ip))
            .filter(|ip| family.holds(*ip))
            .collect();
        let mut held = false;
        let mut let_go: Option<Instant> = None;
        for ((ip, to), kept) in known.iter_mut() {
            if *to == scope && family.holds(*ip) {
                held = true;
                kept.refreshed = addrs.contains(ip);
                if !kept.refreshed {
                    let_go = Some(let_go.map_or(kept.until, |first| first.min(kept.until)));
                }
            }
        }
        if !held {
            return None;
        }
        if let Some(until) = let_go {
            self.lower_earliest(until);
        }
        let known = &self.names[name];
        // Added as answered now, so each goes at once when a refresh stops holding it.
        let new: Vec<IpAddr> = addrs
            .into_iter()
            .filter(|ip| !known.contains_key(&(*ip, scope)))
            .collect();
        if new.is_empty() {
            return Some(false);
        }
        for ip in new {
            let kept = Kept {
                until: now,
                refreshed: true,
            };
            self.add(name, (ip, scope), kept);
        }
        if self.size > MAX_ADDRESSES {
            self.evict_oldest(self.size - MAX_ADDRESSES);
        }
        Some(true)
    }

    /// No refresh holds `name`'s addresses of `family` for `scope` any more: each goes when its
    /// own answer's time is up.
    pub fn release(&mut self, scope: u64, name: &str, family: Family) {
        let Some(known) = self.names.get_mut(name) else {
            return;
        };
        let mut let_go: Option<Instant> = None;
        for ((ip, to), kept) in known.iter_mut() {
            if *to == scope && family.holds(*ip) {
                kept.refreshed = false;
                let_go = Some(let_go.map_or(kept.until, |first| first.min(kept.until)));
            }
        }
        if let Some(until) = let_go {
            self.lower_earliest(until);
        }
    }

    /// Drops every answer given to `scope` (it ended); returns the names that lost addresses.
    pub fn drop_scope(&mut self, scope: u64) -> Vec<String> {
        let mut changed = Vec::new();
        for (name, addrs) in &mut self.names {
            let gone: Vec<ScopedAddress> = addrs
                .keys()
                .filter(|(_, to)| *to == scope)
                .copied()
                .collect();
            for answer in &gone {
                addrs.remove(answer);
                self.size -= 1;
                uncount(&mut self.per_scope, scope);
                forget(
                    &mut self.by_address,
                    &mut self.stand_in_addresses,
                    name,
                    *answer,
                );
            }
            if !gone.is_empty() {
                changed.push(name.clone());
            }
        }
        self.names.retain(|_, addrs| !addrs.is_empty());
        changed.sort();
        changed
    }

    /// Drops the `count` oldest answers of the scope that holds the most.
    fn evict_oldest(&mut self, count: usize) {
        let Some(fullest) = self
            .per_scope
            .iter()
            .max_by_key(|(_, held)| **held)
            .map(|(scope, _)| *scope)
        else {
            return;
        };
        let mut all: Vec<((bool, Instant), String, ScopedAddress)> = self
            .names
            .iter()
            .flat_map(|(name, addrs)| {
                addrs
                    .iter()
                    .filter(|(answer, _)| answer.1 == fullest)
                    .map(|(answer, kept)| (kept.eviction_order(), name.clone(), *answer))
            })
            .collect();
        all.sort();
        for (_, name, answer) in all.into_iter().take(count) {
            if let Some(addrs) = self.names.get_mut(&name) {
                addrs.remove(&answer);
                self.size -= 1;
                uncount(&mut self.per_scope, answer.1);
                self.evicted.push(name.clone());
            }
            forget(
                &mut self.by_address,
                &mut self.stand_in_addresses,
                &name,
                answer,
            );
        }
        self.names.retain(|_, addrs| !addrs.is_empty());
    }

    /// The names that lost addresses to the bound since the last call.
    pub fn take_evicted(&mut self) -> Vec<String> {
        let mut names = std::mem::take(&mut self.evicted);
        names.sort();
        names.dedup();
        names
    }

    /// How many names have addresses kept.
    pub fn name_count(&self) -> usize {
        self.names.len()
    }

    /// How many names have addresses kept for scope `scope` itself.
    pub fn name_count_in(&self, scope: u64) -> usize {
        self.names
            .values()
            .filter(|addrs| addrs.keys().any(|(_, to)| *to == scope))
            .count()
    }

    /// How many (name, address, scope) answers are kept.
    pub fn address_count(&self) -> usize {
        self.size
    }

    /// The addresses kept for `name`, in any scope.
    pub fn addresses(&self, name: &str) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = self.answers(name).into_iter().map(|(ip, _)| ip).collect();
        out.dedup();
        out
    }

    /// The addresses kept for `name`, each with the scope it was answered to.
    pub fn answers(&self, name: &str) -> Vec<ScopedAddress> {
        let mut out: Vec<ScopedAddress> = self
            .names
            .get(name)
            .map(|a| a.keys().copied().collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    /// The addresses kept for every name `pattern` covers, each with its scope.
    pub fn matching(&self, pattern: &HostPattern) -> Vec<ScopedAddress> {
        let mut out: Vec<ScopedAddress> = self
            .names
            .iter()
            .filter(|(name, _)| pattern.matches(name))
            .flat_map(|(_, addrs)| addrs.keys().copied())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The names `ip` was answered for in `scope` (or for every scope), sorted.
    pub fn names_for(&self, ip: IpAddr, scope: u64) -> Vec<String> {
        let mut names: Vec<String> = self
            .by_address
            .get(&canonical_ip(ip))
            .into_iter()
            .flatten()
            .filter(|(_, to)| *to == 0 || *to == scope)
            .map(|(name, _)| name.clone())
            .collect();
        names.dedup();
        names
    }
}

/// One answer fewer for `scope`.
fn uncount(per_scope: &mut HashMap<u64, usize>, scope: u64) {
    if let Some(held) = per_scope.get_mut(&scope) {
        *held -= 1;
        if *held == 0 {
            per_scope.remove(&scope);
        }
    }
}

/// Drops `name`'s answer of an address to a scope from the index by address.
fn forget(
    by_address: &mut HashMap<IpAddr, BTreeSet<(String, u64)>>,
    stand_ins: &mut BTreeSet<std::net::Ipv4Addr>,
    name: &str,
    (ip, scope): ScopedAddress,
) {
    let Some(names) = by_address.get_mut(&ip) else {
        return;
    };
    names.remove(&(name.to_string(), scope));
    if names.is_empty() {
        by_address.remove(&ip);
        if let IpAddr::V4(v4) = ip {
            stand_ins.remove(&v4);
        }
    }
}

/// What compiling the policy knows of a host: what guard resolved for the policy's own names
/// (`resolved`), and what its resolver answered the scope's programs (`answered`). A pattern has
/// only the latter: the addresses of the names it covers that a program asked for.
pub struct KnownAddresses<'a> {
    pub resolved: Option<&'a DnsCache>,
    pub answered: &'a AnswerBook,
    /// guard's resolver is in the path of the scope's DNS and puts a rule's name in force when
    /// a program asks for it: a name guard did not resolve itself was not looked up yet, it
    /// is not unresolved.
    pub on_demand: bool,
}

impl HostResolver for KnownAddresses<'_> {
    /// Each stand-in whose name guard resolved for real (a rule names it, or a person approved
    /// it), with the name's first IPv4 address: where the kernel sends a connect to it.
    fn stand_ins(&self) -> Vec<StandIn> {
        let Some(resolved) = self.resolved else {
            return Vec::new();
        };
        self.answered
            .stand_ins()
            .into_iter()
            .filter_map(|(stand_in, name)| {
                let real = resolved.lookup(&name).into_iter().find_map(|ip| {
                    match crate::policy::rule::canonical_ip(ip) {
                        IpAddr::V4(v4) if !super::stand_ins::is_stand_in_ip(ip) => Some(v4),
                        _ => None,
                    }
                })?;
                Some(StandIn {
                    stand_in,
                    real,
                    name,
                })
            })
            // The kernel's table holds so many; past it a stand-in goes nowhere (refused), and
            // the image still applies.
            .take(guard_common::limits::MAX_STAND_INS as usize)
            .collect()
    }

    /// A pattern has what guard's resolver answered for the names it covers.
    fn covered_in_scopes(&self, name: &str) -> Option<Vec<(IpAddr, u64)>> {
        Some(self.answered.answers(name))
    }

    fn looked_up(&self, host: &str) -> bool {
        !self.on_demand
            || self
                .resolved
                .is_some_and(|cache| cache.expires(host).is_some())
    }

    fn lookup(&self, host: &str) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = self
            .lookup_in_scopes(host)
            .into_iter()
            .map(|(ip, _)| ip)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// What guard resolved holds for every scope; what its resolver answered, for the scope
    /// it answered.
    fn lookup_in_scopes(&self, host: &str) -> Vec<(IpAddr, u64)> {
        if is_host_pattern(host) {
            return match HostPattern::parse(host) {
                Some(Ok(pattern)) => self.answered.matching(&pattern),
                _ => Vec::new(),
            };
        }
        let mut out: Vec<(IpAddr, u64)> = self
            .resolved
            .map(|c| c.lookup(host))
            .unwrap_or_default()
            .into_iter()
            .map(|ip| (ip, 0))
            .collect();
        out.extend(self.answered.answers(host));
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_new_answer_adds_and_an_address_goes_only_when_its_own_time_is_up() {
        let mut book = AnswerBook::new();
        let t0 = Instant::now();
        let one = Duration::from_secs(1);
        assert!(book.record("api.test", &[ip("192.0.2.1"), ip("192.0.2.2")], one, t0));
        assert!(!book.record("api.test", &[ip("192.0.2.2")], one, t0));
        let t1 = t0 + Duration::from_secs(30);
        assert!(book.record("api.test", &[ip("192.0.2.3")], one, t1));
        assert_eq!(book.addresses("api.test").len(), 3);
        // The first two were answered at t0: they go at 1 s + GRACE, the third stays.
        assert!(
            book.prune(t0 + one + GRACE - Duration::from_millis(1))
                .is_empty()
        );
        assert_eq!(book.prune(t0 + one + GRACE), vec!["api.test".to_string()]);
        assert_eq!(book.addresses("api.test"), vec![ip("192.0.2.3")]);
        assert!(book.names_for(ip("192.0.2.1"), 0).is_empty());
        assert_eq!(book.names_for(ip("::ffff:192.0.2.3"), 0), vec!["api.test"]);
    }

    #[test]
    fn the_next_expiry_is_never_late_and_pruning_makes_it_exact() {
        let mut book = AnswerBook::new();
        let t0 = Instant::now();
        let (short, long) = (Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(book.next_expiry(), None);
        book.record("api.test", &[ip("192.0.2.1")], short, t0);
        book.record("other.test", &[ip("192.0.2.2")], long, t0);
        assert_eq!(book.next_expiry(), Some(t0 + short + GRACE));
        // Answered again for longer: the bound stays early, and pruning there drops nothing
        // and says when the first address really goes.
        book.record("api.test", &[ip("192.0.2.1")], long, t0);
        assert_eq!(book.next_expiry(), Some(t0 + short + GRACE));
        assert!(book.prune(t0 + short + GRACE).is_empty());
        assert_eq!(book.next_expiry(), Some(t0 + long + GRACE));
        assert_eq!(book.prune(t0 + long + GRACE).len(), 2);
        assert_eq!(book.next_expiry(), None);
    }

    #[test]
    fn an_answer_belongs_to_the_scope_it_was_given_to() {
        let mut book = AnswerBook::new();
        let now = Instant::now();
        let (short, long) = (Duration::from_secs(1), Duration::from_secs(60));
        assert!(book.record_in(7, "api.test", &[ip("192.0.2.1")], short, now));
        assert!(book.record_in(8, "api.test", &[ip("192.0.2.1")], long, now));
        assert!(!book.record_in(8, "api.test", &[ip("192.0.2.1")], long, now));
        assert_eq!(
            book.answers("api.test"),
            vec![(ip("192.0.2.1"), 7), (ip("192.0.2.1"), 8)]
        );
        assert_eq!(book.names_for(ip("192.0.2.1"), 7), vec!["api.test"]);
        assert!(book.names_for(ip("192.0.2.1"), 9).is_empty(), "not asked");
        assert_eq!((book.name_count_in(7), book.name_count_in(9)), (1, 0));
        // Scope 7's answer goes at its own time; scope 8 keeps its own.
        assert_eq!(
            book.prune(now + short + GRACE),
            vec!["api.test".to_string()]
        );
        assert!(book.names_for(ip("192.0.2.1"), 7).is_empty());
        assert_eq!(book.answers("api.test"), vec![(ip("192.0.2.1"), 8)]);
        // An answer for every scope (`guard run`'s) names the address everywhere.
        book.record("api.test", &[ip("192.0.2.2")], long, now);
        assert_eq!(book.names_for(ip("192.0.2.2"), 9), vec!["api.test"]);
    }

    #[test]
    fn a_pattern_knows_the_addresses_of_the_names_it_covers() {
        let mut book = AnswerBook::new();
        let now = Instant::now();
        let ttl = Duration::from_secs(5);
        book.record("a.example.test", &[ip("192.0.2.1")], ttl, now);
        book.record("example.test", &[ip("192.0.2.2")], ttl, now);
        book.record("example.org", &[ip("192.0.2.3")], ttl, now);
        let known = KnownAddresses {
            resolved: None,
            answered: &book,
            on_demand: true,
        };
        assert_eq!(known.lookup("*.example.test"), vec![ip("192.0.2.1")]);
        assert_eq!(
            known.lookup("**.example.test"),
            vec![ip("192.0.2.1"), ip("192.0.2.2")]
        );
        assert_eq!(known.lookup("example.org"), vec![ip("192.0.2.3")]);
    }

    #[test]
    fn a_stand_in_goes_to_its_names_first_ipv4_address_once_guard_resolved_the_name() {
        let now = Instant::now();
        let ttl = Duration::from_secs(60);
        let mut book = AnswerBook::new();
        let mut resolved = DnsCache::new();
        // Not approved yet: nowhere to send it.
        book.record("api.test", &[ip("198.18.0.1")], ttl, now);
        book.record("other.test", &[ip("198.18.0.2")], ttl, now);
        book.record("plain.test", &[ip("192.0.2.9")], ttl, now);
        let known = KnownAddresses {
            resolved: Some(&resolved),
            answered: &book,
            on_demand: true,
        };
        assert!(known.stand_ins().is_empty());
        assert_eq!(book.names_for(ip("198.18.0.1"), 7), vec!["api.test"]);
        assert_eq!(
            book.stand_ins(),
            vec![
                ("198.18.0.1".parse().unwrap(), "api.test".to_string()),
                ("198.18.0.2".parse().unwrap(), "other.test".to_string())
            ]
        );
        // Approved: guard resolved it, and its stand-in goes to its first IPv4 address.
        resolved.answered_for_test(
            "api.test",
            vec![ip("2001:db8::1"), ip("192.0.2.7"), ip("192.0.2.3")],
            now,
        );
        let known = KnownAddresses {
            resolved: Some(&resolved),
            answered: &book,
            on_demand: true,
        };
        assert_eq!(
            known.stand_ins(),
            vec![StandIn {
                stand_in: "198.18.0.1".parse().unwrap(),
                real: "192.0.2.3".parse().unwrap(),
                name: "api.test".to_string(),
            }]
        );
        // The stand-in is one of the name's addresses, so a rule for the name covers it.
        assert!(known.lookup("api.test").contains(&ip("198.18.0.1")));
        // Once its time is up it is no stand-in any more.
        book.prune(now + ttl + GRACE);
        assert!(book.stand_ins().is_empty());
    }

    #[test]
    fn an_answer_without_addresses_leaves_nothing_in_the_book() {
        let mut book = AnswerBook::new();
        assert!(!book.record("nx.test", &[], Duration::from_secs(5), Instant::now()));
        assert_eq!(book.name_count(), 0);
    }

    #[test]
    fn the_book_is_bounded_and_the_oldest_answers_go_first() {
        let mut book = AnswerBook::new();
        let now = Instant::now();
        for i in 0..(MAX_ADDRESSES + 10) {
            let addr = IpAddr::from((i as u32).to_be_bytes());
            book.record("flood.test", &[addr], Duration::from_secs(i as u64), now);
        }
        assert_eq!(book.addresses("flood.test").len(), MAX_ADDRESSES);
        assert!(
            book.names_for(IpAddr::from(0u32.to_be_bytes()), 0)
                .is_empty()
        );
        // Its owner learns which names lost addresses, so their entries go from the maps too.
        assert_eq!(book.take_evicted(), ["flood.test"]);
        assert!(book.take_evicted().is_empty());
    }

    #[test]
    fn a_flooding_scope_pushes_out_its_own_answers_not_another_scopes() {
        let mut book = AnswerBook::new();
        let now = Instant::now();
        let kept = ip("198.51.100.1");
        book.record_in(7, "api.test", &[kept], Duration::from_secs(1), now);
        for i in 0..(MAX_ADDRESSES + 10) {
            let addr = IpAddr::from((i as u32).to_be_bytes());
            book.record_in(8, "flood.test", &[addr], Duration::from_secs(60), now);
        }
        assert_eq!(book.address_count(), MAX_ADDRESSES);
        assert_eq!(
            book.names_for(kept, 7),
            vec!["api.test"],
            "the older answer of the other scope stays"
        );
        assert_eq!(book.take_evicted(), ["flood.test"]);
    }
}
