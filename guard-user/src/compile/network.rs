//! Network and address rules → destination entries: each address (an IP literal, a CIDR, or
//! what the resolver knows for a name) × each port and transport the rule covers.
//!
//! Network rules are compiled per host (§2.4): the host's decision is the last allow/deny among
//! its rules (prompt when all prompt), over the union of its rules' protocols. Entries with the
//! same network, port and transport are merged, the strongest verdict kept.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::HostResolver;
use super::image::{DestinationEntry, Verdict};
use crate::policy::host::is_host_pattern;
use crate::policy::rule::canonical_ip;
use crate::policy::{AddressTarget, Policy, Transport};

#[derive(Default)]
pub(super) struct DestinationTables {
    pub destinations: Vec<DestinationEntry>,
    pub unresolved_hosts: Vec<String>,
    index: HashMap<(IpNetwork, Option<u16>, Transport), usize>,
}

impl DestinationTables {
    fn add(&mut self, entry: DestinationEntry) {
        let key = (entry.network, entry.port, entry.transport);
        match self.index.get(&key) {
            Some(&slot) => {
                let kept = &mut self.destinations[slot];
                if entry.verdict.beats(&kept.verdict) {
                    *kept = entry;
                }
            }
            None => {
                self.index.insert(key, self.destinations.len());
                self.destinations.push(entry);
            }
        }
    }

    /// The networks a host stands for: itself if it is an IP literal, else what the resolver
    /// knows (nothing: the name is recorded as unresolved).
    fn networks_of_host(
        &mut self,
        host: &str,
        resolver: &dyn HostResolver,
    ) -> (Vec<IpNetwork>, bool) {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return (vec![AddressTarget::single(ip)], false);
        }
        // A pattern can stand for thousands of answered addresses: dedup in one pass.
        let mut seen = std::collections::HashSet::new();
        let networks: Vec<IpNetwork> = resolver
            .lookup(host)
            .into_iter()
            .map(|ip| IpNetwork::from(canonical_ip(ip)))
            .filter(|network| seen.insert(*network))
            .collect();
        // A pattern has the addresses guard's resolver answered for names it covers; none yet
        // is not a name that failed to resolve.
        if networks.is_empty() && !is_host_pattern(host) {
            self.unresolved_hosts.push(host.to_string());
        }
        (networks, true)
    }
}

/// Every host name (not IP literal, not pattern) the policy's network and address rules name,
/// sorted and deduplicated: what DNS must resolve before the policy can be held in full.
pub fn host_names(policy: &Policy) -> Vec<String> {
    let network = policy.network_rules().iter().map(|rule| rule.host.as_str());
    let address = policy
        .address_rules()
        .iter()
        .flat_map(|rule| &rule.addresses)
        .filter_map(|target| match target {
            AddressTarget::Host(name) => Some(name.as_str()),
            AddressTarget::Network(_) => None,
        });
    let mut names: Vec<String> = network
        .chain(address)
        .filter(|host| host.parse::<IpAddr>().is_err() && !is_host_pattern(host))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Network rule `i` is kernel rule `network_base + i`, address rule `j` is
/// `address_base + j`.
pub(super) fn compile_destinations(
    policy: &Policy,
    resolver: &dyn HostResolver,
    network_base: u32,
    address_base: u32,
) -> DestinationTables {
    let mut tables = DestinationTables::default();
    for host in policy.network_hosts() {
        let verdict = Verdict {
            decision: host.decision,
            rule: network_base + host.deciding_rule as u32,
            audit_only: false,
        };
        let mut endpoints: Vec<(Transport, Option<u16>)> = Vec::new();
        for protocol in &host.protocols {
            for endpoint in protocol.endpoints() {
                if !endpoints.contains(endpoint) {
                    endpoints.push(*endpoint);
                }
            }
        }
        let (networks, is_name) = tables.networks_of_host(&host.host, resolver);
        for network in networks {
            for &(transport, port) in &endpoints {
                tables.add(DestinationEntry {
                    network,
                    port,
                    transport,
                    verdict,
                    host: is_name.then(|| host.host.clone()),
                });
            }
        }
    }
    for (index, rule) in policy.address_rules().iter().enumerate() {
        let verdict = Verdict {
            decision: rule.decision,
            rule: address_base + index as u32,
            audit_only: rule.audit_only,
        };
        let ports: Vec<Option<u16>> = match &rule.ports {
            Some(ports) => ports.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        for target in &rule.addresses {
            let (networks, host) = match target {
                AddressTarget::Network(network) => (vec![*network], None),
                AddressTarget::Host(name) => {
                    (tables.networks_of_host(name, resolver).0, Some(name))
                }
            };
            for network in networks {
                for &port in &ports {
                    tables.add(DestinationEntry {
                        network,
                        port,
                        transport: rule.transport,
                        verdict,
                        host: host.cloned(),
                    });
                }
            }
        }
    }
    tables.unresolved_hosts.sort();
    tables.unresolved_hosts.dedup();
    tables
}
