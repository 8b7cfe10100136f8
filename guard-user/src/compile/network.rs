//! Network and address rules → the sources of destination entries: each network rule host and
//! each address rule target, with its verdict and the ports and transports it covers. What a
//! source's addresses are (an IP literal, a CIDR, or what the resolver knows for a name) and how
//! the entries are merged is [`super::destinations`]'s.
//!
//! Network rules are compiled per host (§2.4): the host's decision is the last allow/deny among
//! its rules (prompt when all prompt), over the union of its rules' protocols.

use std::net::IpAddr;
use std::sync::Arc;

use ipnetwork::IpNetwork;

use super::destinations::{Source, SourceAddresses};
use super::image::Verdict;
use crate::policy::host::is_host_pattern;
use crate::policy::{AddressTarget, Policy, Transport};

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

/// The sources of `policy`'s destination entries, in the order their entries were always
/// merged (network hosts first-seen, then address rules and their targets in order): at the
/// same strength the earlier source's entry is kept. Network rule `i` is kernel rule
/// `network_base + i`, address rule `j` is `address_base + j`.
pub(super) fn destination_sources(
    policy: &Policy,
    network_base: u32,
    address_base: u32,
) -> Vec<Source> {
    let mut sources = Vec::new();
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
        let (addresses, host) = match host.host.parse::<IpAddr>() {
            // An IP literal's entries name no host.
            Ok(ip) => (SourceAddresses::Fixed(AddressTarget::single(ip)), None),
            Err(_) => {
                let name: Arc<str> = Arc::from(host.host);
                (SourceAddresses::Name(name.clone()), Some(name))
            }
        };
        sources.push(Source::new(host, addresses, verdict, endpoints));
    }
    for (index, rule) in policy.address_rules().iter().enumerate() {
        let verdict = Verdict {
            decision: rule.decision,
            rule: address_base + index as u32,
            audit_only: rule.audit_only,
        };
        let endpoints: Vec<(Transport, Option<u16>)> = match &rule.ports {
            Some(ports) => ports
                .iter()
                .map(|port| (rule.transport, Some(*port)))
                .collect(),
            None => vec![(rule.transport, None)],
        };
        for target in &rule.addresses {
            let (addresses, host) = match target {
                AddressTarget::Network(network) => (SourceAddresses::Fixed(*network), None),
                AddressTarget::Host(name) => match name.parse::<IpAddr>() {
                    Ok(ip) => (
                        SourceAddresses::Fixed(IpNetwork::from(ip)),
                        Some(Arc::from(name.as_str())),
                    ),
                    Err(_) => {
                        let name: Arc<str> = Arc::from(name.as_str());
                        (SourceAddresses::Name(name.clone()), Some(name))
                    }
                },
            };
            sources.push(Source::new(host, addresses, verdict, endpoints.clone()));
        }
    }
    sources
}
