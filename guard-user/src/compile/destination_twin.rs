//! What the kernel decides for a destination, worked out in userspace from the image it
//! holds: the strongest verdict of the destination entries that cover it, else the policy's
//! `enforcement(unmatched_network=...)`, and a `prompt` an approval covers goes through (as
//! `guard-ebpf`'s `net.rs` decides). The hold asks it about every call that names a
//! destination, to choose whether to ask; the kernel still decides the call.

use std::net::IpAddr;

use super::image::{DestinationApproval, DestinationEntry, EnforcementImage};
use crate::policy::rule::canonical_ip;
use crate::policy::{Decision, Transport};

/// The kernel's decision for a destination and the rule that made it (`None`: the unmatched
/// default), with the host name its entry came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelDestinationDecision {
    pub decision: Decision,
    pub rule: Option<u32>,
    pub host: Option<String>,
    /// Only recorded (an audit-only rule or mode): the call goes through.
    pub audit_only: bool,
}

/// The destination tables of an image, for deciding many calls.
#[derive(Clone, Debug)]
pub struct DestinationTwin {
    destinations: Vec<DestinationEntry>,
    approvals: Vec<DestinationApproval>,
    unmatched: Decision,
    audit_only: bool,
    /// DNS goes to guard's resolver, which decides by name: port 53 is not the tables'.
    dns_redirected: bool,
}

impl DestinationTwin {
    pub fn new(image: &EnforcementImage, dns_redirected: bool) -> DestinationTwin {
        DestinationTwin {
            destinations: image.destinations.clone(),
            approvals: image.destination_approvals.clone(),
            unmatched: image.settings.unmatched_network,
            audit_only: image.settings.audit_only,
            dns_redirected,
        }
    }

    /// The decision for a call to `address`, `port` over `transport`. An unspecified address
    /// (the kernel decides it as the address it reaches) and redirected DNS are `allow` here:
    /// not asked about, decided by the kernel.
    /// Whether some UDP datagram could be prompted: only then are the message calls held.
    pub fn prompts_udp(&self) -> bool {
        self.unmatched == Decision::Prompt
            || self.destinations.iter().any(|entry| {
                entry.verdict.decision == Decision::Prompt && entry.transport != Transport::Tcp
            })
    }

    pub fn decide(
        &self,
        address: IpAddr,
        port: u16,
        transport: Transport,
    ) -> KernelDestinationDecision {
        let address = canonical_ip(address);
        let not_ours = KernelDestinationDecision {
            decision: Decision::Allow,
            rule: None,
            host: None,
            audit_only: false,
        };
        if address.is_unspecified() || (self.dns_redirected && port == 53) {
            return not_ours;
        }
        let deciding = self
            .destinations
            .iter()
            .filter(|e| e.covers(address, port, transport))
            .reduce(|kept, e| {
                if e.verdict.beats(&kept.verdict) {
                    e
                } else {
                    kept
                }
            });
        let mut decision = match deciding {
            Some(entry) => KernelDestinationDecision {
                decision: entry.verdict.decision,
                rule: Some(entry.verdict.rule),
                host: entry.host.clone(),
                audit_only: self.audit_only || entry.verdict.audit_only,
            },
            None => KernelDestinationDecision {
                decision: self.unmatched,
                rule: None,
                host: None,
                audit_only: self.audit_only,
            },
        };
        let approved = self
            .approvals
            .iter()
            .any(|a| a.address == address && a.port == port && a.transport.covers(transport));
        if approved && decision.decision == Decision::Prompt {
            decision.decision = Decision::Allow;
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{CompileEnv, NoResolver, compile};
    use crate::policy::PolicyParser;

    fn twin(rules: &str) -> (EnforcementImage, DestinationTwin) {
        let mut parser = PolicyParser::new();
        parser.parse("t.rules", rules).unwrap();
        let image = compile(&parser.build(), &NoResolver, &CompileEnv::default());
        let twin = DestinationTwin::new(&image, true);
        (image, twin)
    }

    #[test]
    fn only_a_prompt_for_udp_needs_the_message_calls_held() {
        let (_, tcp_only) = twin(
            "address_rule(addresses=[\"127.0.0.1\"], transport=\"tcp\", decision=\"prompt\")\n",
        );
        assert!(!tcp_only.prompts_udp(), "no message call needs holding");
    }

    #[test]
    fn decides_as_the_tables_and_approvals_say() {
        let (mut image, twin) = twin(
            "address_rule(addresses=[\"127.0.0.0/8\"], ports=[9], decision=\"prompt\")\n\
             address_rule(addresses=[\"127.0.0.7\"], decision=\"deny\")\n",
        );
        assert!(
            twin.prompts_udp(),
            "a rule of any transport prompts datagrams too"
        );
        let loopback = |last: u8| IpAddr::from([127, 0, 0, last]);
        let asked = twin.decide(loopback(2), 9, Transport::Tcp);
        assert_eq!(asked.decision, Decision::Prompt);
        assert!(asked.rule.is_some());
        assert_eq!(
            twin.decide(loopback(7), 9, Transport::Tcp).decision,
            Decision::Forbidden,
            "the stronger entry decides"
        );
        let other_port = twin.decide(loopback(2), 10, Transport::Tcp);
        assert_eq!(
            (other_port.decision, other_port.rule),
            (Decision::Allow, None)
        );
        assert_eq!(
            twin.decide(loopback(2), 53, Transport::Udp).decision,
            Decision::Allow,
            "DNS is the resolver's"
        );
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        assert_eq!(
            twin.decide(mapped, 9, Transport::Tcp).decision,
            Decision::Prompt
        );
        image.add_destination_approval(loopback(2), 9, Transport::Tcp, "a".into(), "a".into());
        let approved = DestinationTwin::new(&image, true);
        assert_eq!(
            approved.decide(loopback(2), 9, Transport::Tcp).decision,
            Decision::Allow
        );
        assert_eq!(
            approved.decide(loopback(3), 9, Transport::Tcp).decision,
            Decision::Prompt
        );
        assert_eq!(
            approved.decide(loopback(2), 9, Transport::Udp).decision,
            Decision::Prompt
        );
    }
}
