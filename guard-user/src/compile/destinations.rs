//! An image's destination entries, kept by key with every source (a network rule's host, an
//! address rule's target) that contributes to each, so that when what is known of a name
//! changes only the entries of the sources that cover it are compiled again. guard's resolver
//! answers names one at a time: compiling every entry per answer cost 0.5 s at 10 000 hosts.
//!
//! Entries with the same network, port and transport are merged, the strongest verdict kept
//! and, at the same strength, the earlier source's (the order [`super::network`] gives): a key
//! two sources share keeps the right winner when one of them goes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ipnetwork::IpNetwork;

use super::HostResolver;
use super::image::{DestinationEntry, Verdict};
use crate::policy::Transport;
use crate::policy::host::{HostPattern, domains_of, host_covers, is_host_pattern};
use crate::policy::rule::canonical_ip;

/// What identifies an entry: its network, port (`None`: any), transport, and the scope whose
/// lookup of a name it stands for (0: every scope).
pub type DestinationKey = (IpNetwork, Option<u16>, Transport, u64);

/// A network a source reaches, and the scope it reaches it in (0: every scope): a name's
/// address holds where guard's resolver answered it.
type Reach = (IpNetwork, u64);

/// Where a source's addresses come from.
#[derive(Clone, Debug)]
pub(super) enum SourceAddresses {
    /// An IP literal or a CIDR: never changes.
    Fixed(IpNetwork),
    /// A name or a pattern: what the resolver knows of it.
    Name(Arc<str>),
}

/// A network rule's host or an address rule's target, and what it last contributed.
#[derive(Clone, Debug)]
pub(super) struct Source {
    /// What its entries name (one shared copy of the name for all of them).
    host: Option<Arc<str>>,
    addresses: SourceAddresses,
    verdict: Verdict,
    endpoints: Box<[(Transport, Option<u16>)]>,
    /// Its networks as last compiled, sorted.
    networks: Vec<Reach>,
}

impl Source {
    pub(super) fn new(
        host: Option<Arc<str>>,
        addresses: SourceAddresses,
        verdict: Verdict,
        endpoints: Vec<(Transport, Option<u16>)>,
    ) -> Source {
        Source {
            host,
            addresses,
            verdict,
            endpoints: endpoints.into_boxed_slice(),
            networks: Vec::new(),
        }
    }
}

/// One key's entry: the winning source's, and the other sources that contribute to it.
#[derive(Clone, Debug)]
struct Slot {
    entry: DestinationEntry,
    from: u32,
    others: Vec<u32>,
}

/// The destination entries of an image, in key order. Several entries may match one
/// connection; the strongest verdict among them decides.
#[derive(Clone, Debug, Default)]
pub struct DestinationSet {
    slots: BTreeMap<DestinationKey, Slot>,
    sources: Vec<Source>,
    /// A name → the sources that name it exactly.
    by_name: HashMap<Arc<str>, Vec<u32>>,
    /// A pattern's domain → the sources with a pattern on it.
    by_domain: HashMap<Box<str>, Vec<u32>>,
    /// Names the resolver looked up and had no address for.
    unresolved: BTreeSet<Arc<str>>,
}

impl PartialEq for DestinationSet {
    /// The same entries and unresolved names, however they were reached.
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter()) && self.unresolved == other.unresolved
    }
}

impl Eq for DestinationSet {}

/// A verdict's rank when two sources give the same key one: the stronger decision, then an
/// enforced one over an audit-only one ([`Verdict::beats`]), then the earlier source.
fn rank(verdict: &Verdict, source: u32) -> (crate::policy::Decision, bool, std::cmp::Reverse<u32>) {
    (
        verdict.decision,
        !verdict.audit_only,
        std::cmp::Reverse(source),
    )
}

impl DestinationSet {
    /// The entries of `sources` with what `resolver` knows of their names now.
    pub(super) fn compile(sources: Vec<Source>, resolver: &dyn HostResolver) -> DestinationSet {
        let mut set = DestinationSet {
            sources,
            ..DestinationSet::default()
        };
        let mut touched = Vec::new();
        for id in 0..set.sources.len() as u32 {
            set.index(id);
            let networks = set.networks_of(id, resolver);
            for network in &networks {
                set.add_network(id, *network, &mut touched);
            }
            touched.clear();
            set.sources[id as usize].networks = networks;
        }
        set
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = &DestinationEntry> {
        self.slots.values().map(|slot| &slot.entry)
    }

    pub fn get(&self, key: &DestinationKey) -> Option<&DestinationEntry> {
        self.slots.get(key).map(|slot| &slot.entry)
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The name a connection to `ip`, `port` over `transport` that `rule` decided was made to:
    /// the name of that rule's entry for the address. A name's entries are single addresses,
    /// so a few lookups find it, not a walk over every entry (each refusal asks).
    pub fn host_for(
        &self,
        ip: IpAddr,
        port: u16,
        transport: Transport,
        rule: u32,
        scope: u64,
    ) -> Option<&str> {
        let network = IpNetwork::from(canonical_ip(ip));
        [scope, 0]
            .into_iter()
            .flat_map(|scope| [(Some(port), scope), (None, scope)])
            .flat_map(|(port, scope)| {
                [
                    (network, port, transport, scope),
                    (network, port, Transport::Any, scope),
                ]
            })
            .filter_map(|key| self.slots.get(&key))
            .filter(|slot| slot.entry.verdict.rule == rule)
            .find_map(|slot| slot.entry.host.as_deref())
    }

    /// The host names the resolver looked up and had no address for (sorted): their rules
    /// hold nothing in the kernel until the names resolve.
    pub fn unresolved_hosts(&self) -> impl Iterator<Item = &str> {
        self.unresolved.iter().map(|name| &**name)
    }

    /// Compiles again the entries of every source that covers `name` (the name itself, the
    /// patterns over it) with what `resolver` knows now; returns the keys whose entry changed,
    /// came or went.
    pub fn update_name(&mut self, name: &str, resolver: &dyn HostResolver) -> Vec<DestinationKey> {
        let mut touched = Vec::new();
        for id in self.sources_covering(name) {
            touched.extend(self.update_source(id, resolver));
        }
        touched.sort();
        touched.dedup();
        touched
    }

    /// [`DestinationSet::update_name`] for a name that only gained addresses: the sources that
    /// name it are compiled again, and each pattern over it gains the name's addresses it
    /// lacks, without the other names it covers (a pattern over thousands of answered names
    /// was compiled whole for every answer). A resolver that cannot say what one name gives
    /// its patterns has them compiled whole.
    pub fn grow_name(&mut self, name: &str, resolver: &dyn HostResolver) -> Vec<DestinationKey> {
        let Some(given) = resolver.covered_in_scopes(name) else {
            return self.update_name(name, resolver);
        };
        let mut given: Vec<Reach> = given
            .into_iter()
            .map(|(ip, scope)| (IpNetwork::from(canonical_ip(ip)), scope))
            .collect();
        given.sort_unstable();
        given.dedup();
        let mut touched = Vec::new();
        for id in self.sources_covering(name) {
            let pattern = match &self.sources[id as usize].addresses {
                SourceAddresses::Name(host) => is_host_pattern(host),
                SourceAddresses::Fixed(_) => false,
            };
            if !pattern {
                touched.extend(self.update_source(id, resolver));
                continue;
            }
            for network in &given {
                let networks = &self.sources[id as usize].networks;
                if let Err(at) = networks.binary_search(network) {
                    self.sources[id as usize].networks.insert(at, *network);
                    self.add_network(id, *network, &mut touched);
                }
            }
        }
        touched.sort();
        touched.dedup();
        touched
    }

    /// Compiles source `id` again; returns the keys it touched.
    fn update_source(&mut self, id: u32, resolver: &dyn HostResolver) -> Vec<DestinationKey> {
        let mut touched = Vec::new();
        let new = self.networks_of(id, resolver);
        let old = std::mem::take(&mut self.sources[id as usize].networks);
        for network in new.iter().filter(|n| old.binary_search(n).is_err()) {
            self.add_network(id, *network, &mut touched);
        }
        for network in old.iter().filter(|n| new.binary_search(n).is_err()) {
            self.remove_network(id, *network, &mut touched);
        }
        self.sources[id as usize].networks = new;
        touched
    }

    /// The sources whose addresses depend on `name`, in source order.
    fn sources_covering(&self, name: &str) -> Vec<u32> {
        let mut ids: Vec<u32> = self.by_name.get(name).cloned().unwrap_or_default();
        for domain in domains_of(name) {
            for id in self.by_domain.get(domain).into_iter().flatten() {
                let source = &self.sources[*id as usize];
                if source.host.as_deref().is_some_and(|p| host_covers(p, name)) {
                    ids.push(*id);
                }
            }
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Files source `id` under its name or its pattern's domain.
    fn index(&mut self, id: u32) {
        let SourceAddresses::Name(name) = &self.sources[id as usize].addresses else {
            return;
        };
        if is_host_pattern(name) {
            if let Some(Ok(pattern)) = HostPattern::parse(name) {
                let domain = pattern.domain.into_boxed_str();
                self.by_domain.entry(domain).or_default().push(id);
            }
        } else {
            self.by_name.entry(name.clone()).or_default().push(id);
        }
    }

    /// Source `id`'s networks as `resolver` knows them now (sorted, deduplicated); keeps the
    /// unresolved names up to date.
    fn networks_of(&mut self, id: u32, resolver: &dyn HostResolver) -> Vec<Reach> {
        let name = match &self.sources[id as usize].addresses {
            SourceAddresses::Fixed(network) => return vec![(*network, 0)],
            SourceAddresses::Name(name) => name.clone(),
        };
        let mut networks: Vec<Reach> = resolver
            .lookup_in_scopes(&name)
            .into_iter()
            .map(|(ip, scope)| (IpNetwork::from(canonical_ip(ip)), scope))
            .collect();
        networks.sort_unstable();
        networks.dedup();
        // A pattern has the addresses guard's resolver answered for names it covers; none yet
        // is not a name that failed to resolve. Nor is a name nobody looked up yet.
        if networks.is_empty() && !is_host_pattern(&name) && resolver.looked_up(&name) {
            self.unresolved.insert(name);
        } else {
            self.unresolved.remove(&name);
        }
        networks
    }

    fn add_network(&mut self, id: u32, (network, scope): Reach, touched: &mut Vec<DestinationKey>) {
        let source = &self.sources[id as usize];
        for &(transport, port) in source.endpoints.iter() {
            let key = (network, port, transport, scope);
            match self.slots.get_mut(&key) {
                Some(slot) => {
                    let kept = &self.sources[slot.from as usize];
                    if rank(&source.verdict, id) > rank(&kept.verdict, slot.from) {
                        slot.others.push(slot.from);
                        slot.from = id;
                        let new = entry(key, source);
                        if new != slot.entry {
                            slot.entry = new;
                            touched.push(key);
                        }
                    } else {
                        slot.others.push(id);
                    }
                }
                None => {
                    self.slots.insert(
                        key,
                        Slot {
                            entry: entry(key, source),
                            from: id,
                            others: Vec::new(),
                        },
                    );
                    touched.push(key);
                }
            }
        }
    }

    fn remove_network(
        &mut self,
        id: u32,
        (network, scope): Reach,
        touched: &mut Vec<DestinationKey>,
    ) {
        let sources = &self.sources;
        for &(transport, port) in sources[id as usize].endpoints.iter() {
            let key = (network, port, transport, scope);
            let Some(slot) = self.slots.get_mut(&key) else {
                continue;
            };
            if slot.from != id {
                slot.others.retain(|other| *other != id);
                continue;
            }
            // The winner goes: the best of the others takes its place, if any.
            let best = slot
                .others
                .iter()
                .enumerate()
                .max_by_key(|(_, other)| rank(&sources[**other as usize].verdict, **other))
                .map(|(at, _)| at);
            match best {
                Some(at) => {
                    slot.from = slot.others.swap_remove(at);
                    let new = entry(key, &sources[slot.from as usize]);
                    if new != slot.entry {
                        slot.entry = new;
                        touched.push(key);
                    }
                }
                None => {
                    self.slots.remove(&key);
                    touched.push(key);
                }
            }
        }
    }
}

fn entry((network, port, transport, scope): DestinationKey, source: &Source) -> DestinationEntry {
    DestinationEntry {
        network,
        port,
        transport,
        scope,
        verdict: source.verdict,
        host: source.host.clone(),
    }
}

#[cfg(test)]
#[path = "destinations_tests.rs"]
mod tests;
