//! Destination evaluation: what the policy decides for a connection to an address and port,
//! and which `network_rule`s and `address_rule`s say so.
//!
//! This walks the rules themselves, never the compiled kernel image, so that a parity test can
//! compare the kernel (built from the image) against it. The semantics:
//!
//! - An IPv4-mapped IPv6 address is looked up as IPv4.
//! - A `network_rule` host matches when it is that IP literal or a name the resolver maps to
//!   the address. It speaks with its host's §2.4 decision (the last allow/deny for the host wins,
//!   prompt otherwise), over the ports and transports of every protocol its host's rules name:
//!   `http` TCP 80, `https` TCP and UDP 443, `socks5_tcp` any TCP port, `socks5_udp` any UDP port.
//! - An `address_rule` matches when one of its addresses contains the address (or is a name
//!   resolving to it) and its ports and transport cover the connection.
//! - The strongest decision over every match wins; with no match, the policy's
//!   `enforcement(unmatched_network=...)` decides (allow by default).

use std::net::IpAddr;

use super::model::Policy;
use super::render::{address_rule_text, network_rule_text};
use super::rule::{AddressTarget, Decision, RuleKind, RuleOrigin, Transport, canonical_ip};

/// Addresses known for a host name when a destination is decided or a policy compiled. The
/// DNS module implements it over its cache; tests use a fixed table.
pub trait HostResolver {
    /// The addresses `host` (a normalised host name, never an IP literal) resolves to now;
    /// empty when unknown.
    fn lookup(&self, host: &str) -> Vec<IpAddr>;

    /// [`HostResolver::lookup`] with the scope each address holds in: a scope (cgroup id) that
    /// guard's resolver answered it to, or 0 for every scope (what guard resolved itself).
    fn lookup_in_scopes(&self, host: &str) -> Vec<(IpAddr, u64)> {
        self.lookup(host).into_iter().map(|ip| (ip, 0)).collect()
    }

    /// What name `name` gives the patterns that cover it: the addresses (with their scopes) a
    /// pattern's [`HostResolver::lookup_in_scopes`] has for it, which is the union of these
    /// over the names it covers. `None`: not known name by name (a pattern is then looked up
    /// whole).
    fn covered_in_scopes(&self, _name: &str) -> Option<Vec<(IpAddr, u64)>> {
        None
    }

    /// Whether `host` was looked up, so that no address means it has none (an unresolved
    /// name) rather than that nobody asked for it yet (guard's resolver puts a name in force
    /// when a program asks for it).
    fn looked_up(&self, _host: &str) -> bool {
        true
    }

    /// The stand-in addresses guard's resolver answered for names that were since approved or
    /// named by a rule, each with the real address a connect to it goes to.
    fn stand_ins(&self) -> Vec<StandIn> {
        Vec::new()
    }
}

/// A stand-in address and where a connect to it goes (the kernel's `STAND_INS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandIn {
    pub stand_in: std::net::Ipv4Addr,
    pub real: std::net::Ipv4Addr,
    /// The name it stands for.
    pub name: String,
}

/// A resolver that knows nothing: every name is unresolved.
pub struct NoResolver;

impl HostResolver for NoResolver {
    fn lookup(&self, _host: &str) -> Vec<IpAddr> {
        Vec::new()
    }
}

/// The decision for one destination and every rule that went into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationEvaluation {
    /// The strongest decision among the matches, or the unmatched-network setting.
    pub decision: Decision,
    /// In order: network hosts (first-seen order), then address rules (load order).
    pub matched: Vec<DestinationMatch>,
    /// True when no rule matched and `decision` is the policy's unmatched-network setting.
    pub unmatched: bool,
}

impl DestinationEvaluation {
    /// The match the kernel reports as deciding: the strongest decision, an enforced rule
    /// before an audit-only one of the same decision, otherwise the first in
    /// [`DestinationEvaluation::matched`] order. `None` when unmatched.
    pub fn deciding(&self) -> Option<&DestinationMatch> {
        self.matched.iter().fold(None, |kept, found| match kept {
            Some(kept) if !destination_match_beats(found, kept) => Some(kept),
            _ => Some(found),
        })
    }
}

/// The kernel's `Verdict::strongest` between two matches of one destination.
fn destination_match_beats(candidate: &DestinationMatch, kept: &DestinationMatch) -> bool {
    (candidate.decision, !candidate.audit_only) > (kept.decision, !kept.audit_only)
}

/// One rule that matched a destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationMatch {
    /// `Network` or `Address`.
    pub kind: RuleKind,
    /// Index into [`Policy::network_rules`] (the rule that decided its host) or
    /// [`Policy::address_rules`].
    pub rule_index: usize,
    /// The rule as it would be written.
    pub text: String,
    pub origin: Option<RuleOrigin>,
    /// The decision it contributes: for a network rule, its host's compiled decision.
    pub decision: Decision,
    pub justification: Option<String>,
    /// The rule is audit-only: the kernel records its decision but lets the connection through.
    pub audit_only: bool,
    /// The host name through which it matched, if it matched by name.
    pub host: Option<String>,
}

/// What is being connected to: an address, or (without DNS) a host name compared as text.
#[derive(Clone, Copy)]
enum Target<'a> {
    Ip(IpAddr),
    Name(&'a str),
}

impl Policy {
    /// The decision for a connection to `ip`:`port` over `transport` (TCP or UDP), resolving the
    /// rules' host names with `resolver`. See the module documentation for the rules.
    pub fn check_destination(
        &self,
        ip: IpAddr,
        port: u16,
        transport: Transport,
        resolver: &dyn HostResolver,
    ) -> DestinationEvaluation {
        self.evaluate_destination(Target::Ip(canonical_ip(ip)), port, transport, resolver)
    }

    /// The decision for a connection to the host name `host` (normalised, not an IP literal):
    /// the rules naming that host match by name, and the rules for any address `resolver` gives
    /// for it match as in [`Policy::check_destination`]. With [`crate::compile::NoResolver`]
    /// only rules written with that very name match.
    pub fn check_destination_name(
        &self,
        host: &str,
        port: u16,
        transport: Transport,
        resolver: &dyn HostResolver,
    ) -> DestinationEvaluation {
        self.evaluate_destination(Target::Name(host), port, transport, resolver)
    }

    fn evaluate_destination(
        &self,
        target: Target<'_>,
        port: u16,
        transport: Transport,
        resolver: &dyn HostResolver,
    ) -> DestinationEvaluation {
        let resolved_target: Vec<IpAddr> = match target {
            Target::Ip(ip) => vec![ip],
            Target::Name(name) => resolver
                .lookup(name)
                .into_iter()
                .map(canonical_ip)
                .collect(),
        };
        let name_matches =
            |candidate: &str| matches!(target, Target::Name(name) if name == candidate);
        // A rule's host (an IP literal or a name) reaches the target when it is the target's
        // name, or one of its addresses is one of the target's addresses.
        let host_reaches = |host: &str| -> bool {
            if name_matches(host) {
                return true;
            }
            let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
                Ok(ip) => vec![canonical_ip(ip)],
                Err(_) => resolver
                    .lookup(host)
                    .into_iter()
                    .map(canonical_ip)
                    .collect(),
            };
            addresses.iter().any(|ip| resolved_target.contains(ip))
        };

        let mut matched = Vec::new();
        for host in self.network_hosts() {
            let covers = host.protocols.iter().any(|protocol| {
                protocol
                    .endpoints()
                    .iter()
                    .any(|(rule_transport, rule_port)| {
                        rule_transport.covers(transport) && rule_port.is_none_or(|p| p == port)
                    })
            });
            if !covers || !host_reaches(&host.host) {
                continue;
            }
            let rule = &self.network_rules()[host.deciding_rule];
            let is_name = host.host.parse::<IpAddr>().is_err();
            matched.push(DestinationMatch {
                kind: RuleKind::Network,
                rule_index: host.deciding_rule,
                text: network_rule_text(rule),
                origin: rule.origin.clone(),
                decision: host.decision,
                justification: rule.justification.clone(),
                audit_only: false,
                host: is_name.then(|| host.host.clone()),
            });
        }
        for (index, rule) in self.address_rules().iter().enumerate() {
            if !rule.covers_port(port, transport) {
                continue;
            }
            let through = rule.addresses.iter().find_map(|address| match address {
                AddressTarget::Network(network) => resolved_target
                    .iter()
                    .any(|ip| network.contains(*ip))
                    .then_some(None),
                AddressTarget::Host(name) => host_reaches(name).then(|| Some(name.clone())),
            });
            let Some(host) = through else {
                continue;
            };
            matched.push(DestinationMatch {
                kind: RuleKind::Address,
                rule_index: index,
                text: address_rule_text(rule),
                origin: rule.origin.clone(),
                decision: rule.decision,
                justification: rule.justification.clone(),
                audit_only: rule.audit_only,
                host,
            });
        }
        match matched.iter().map(|found| found.decision).max() {
            Some(decision) => DestinationEvaluation {
                decision,
                matched,
                unmatched: false,
            },
            None => DestinationEvaluation {
                decision: self.enforcement().unmatched_network,
                matched,
                unmatched: true,
            },
        }
    }
}

#[cfg(test)]
#[path = "destination_tests.rs"]
mod tests;
