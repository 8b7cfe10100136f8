//! What the kernel decides for a destination, worked out in userspace: the kernel's own
//! decision code ([`KernelEngine`]) over the destination entries of an image. The hold asks it
//! about every call that names a destination, to choose whether to ask; the kernel still
//! decides the call.

use std::net::IpAddr;
use std::sync::Arc;

use guard_common::engine::outcome::Outcome;
use guard_common::event::flag;

use super::image::EnforcementImage;
use super::kernel_engine::KernelEngine;
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

/// An image's destination decisions, for deciding many calls.
#[derive(Clone)]
pub struct DestinationTwin {
    engine: Arc<KernelEngine>,
    /// DNS goes to guard's resolver, which decides by name: port 53 is not the tables'.
    dns_redirected: bool,
    /// The scope whose calls it decides: only its approvals count (`None`: every approval).
    scope: Option<u64>,
}

/// Whether some UDP datagram could be prompted under `image`: only then are the message calls
/// held.
pub fn prompts_udp(image: &EnforcementImage) -> bool {
    image.settings.unmatched_network == Decision::Prompt
        || image.destinations.iter().any(|entry| {
            entry.verdict.decision == Decision::Prompt && entry.transport != Transport::Tcp
        })
}

impl DestinationTwin {
    pub fn new(engine: Arc<KernelEngine>, dns_redirected: bool) -> DestinationTwin {
        DestinationTwin {
            engine,
            dns_redirected,
            scope: None,
        }
    }

    /// Decides the calls of `scope` (a cgroup id): other scopes' approvals do not count.
    pub fn for_scope(mut self, scope: Option<u64>) -> DestinationTwin {
        self.scope = scope;
        self
    }

    /// Whether some UDP datagram could be prompted: only then are the message calls held.
    pub fn prompts_udp(&self) -> bool {
        prompts_udp(&self.engine.image)
    }

    /// The decision for a call to `address`, `port` over `transport`. An unspecified address
    /// (the kernel decides it as the address it reaches) and redirected DNS are `allow` here:
    /// not asked about, decided by the kernel.
    pub fn decide(
        &self,
        address: IpAddr,
        port: u16,
        transport: Transport,
    ) -> KernelDestinationDecision {
        let address = canonical_ip(address);
        if address.is_unspecified() || (self.dns_redirected && port == 53) {
            return KernelDestinationDecision {
                decision: Decision::Allow,
                rule: None,
                host: None,
                audit_only: false,
            };
        }
        let decided = self
            .engine
            .destination_in(self.scope, address, port, transport);
        let verdict = decided.verdict;
        let rule = (decided.flags & flag::UNMATCHED == 0).then_some(verdict.rule);
        let host = rule.and_then(|rule| {
            let destinations = &self.engine.image.destinations;
            destinations
                .host_for(address, port, transport, rule, self.scope.unwrap_or(0))
                .map(str::to_string)
        });
        KernelDestinationDecision {
            // Not a code the encoder writes: the strongest answer.
            decision: Decision::from_code(verdict.decision).unwrap_or(Decision::Forbidden),
            rule,
            host,
            audit_only: Outcome::of(self.engine.settings(), verdict).audit_only,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{CompileEnv, NoResolver, compile};
    use crate::policy::PolicyParser;

    fn twin_of(image: &EnforcementImage) -> DestinationTwin {
        DestinationTwin::new(Arc::new(KernelEngine::new(image.clone()).unwrap()), true)
    }

    fn twin(rules: &str) -> (EnforcementImage, DestinationTwin) {
        let mut parser = PolicyParser::new();
        parser.parse("t.rules", rules).unwrap();
        let image = compile(&parser.build(), &NoResolver, &CompileEnv::default());
        let twin = twin_of(&image);
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
        image.add_destination_approval(1, loopback(2), 9, Transport::Tcp, "a".into(), "a".into());
        let approved = twin_of(&image);
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

    /// A name's address answered to one scope decides that scope's connects by the name's rule;
    /// another scope's connect to the same address is decided as if nobody had asked (the
    /// unmatched default), and the incremental update writes the same tries as a full build.
    #[test]
    fn a_scope_is_decided_by_its_own_answers() {
        use crate::compile::destination_maps::DestinationMaps;
        use crate::compile::update_destinations;
        use crate::resolve::answers::{AnswerBook, KnownAddresses};

        let mut parser = PolicyParser::new();
        parser
            .parse(
                "t.rules",
                "enforcement(unmatched_network=\"prompt\")\n\
                 network_rule(host=\"api.test\", protocol=\"https\", decision=\"allow\")\n\
                 network_rule(host=\"ask.test\", protocol=\"https\", decision=\"prompt\")\n",
            )
            .unwrap();
        let policy = parser.build();
        let mut book = AnswerBook::new();
        let known = |book: &AnswerBook| -> EnforcementImage {
            let known = KnownAddresses {
                resolved: None,
                answered: book,
                on_demand: true,
            };
            compile(&policy, &known, &CompileEnv::default())
        };
        let before = known(&book);
        let (asker, other) = (7u64, 8u64);
        let api: IpAddr = "192.0.2.5".parse().unwrap();
        let ask: IpAddr = "192.0.2.6".parse().unwrap();
        let now = std::time::Instant::now();
        let ttl = std::time::Duration::from_secs(60);
        book.record_in(asker, "api.test", &[api], ttl, now);
        book.record_in(asker, "ask.test", &[ask], ttl, now);

        let mut image = before.clone();
        let keys = update_destinations(
            &mut image,
            &["api.test".into(), "ask.test".into()],
            &KnownAddresses {
                resolved: None,
                answered: &book,
                on_demand: true,
            },
        );
        let mut kept = DestinationMaps::build(&before);
        kept.update(&image, &keys);
        let built = DestinationMaps::build(&known(&book));
        assert_eq!((&kept.v4, &kept.v6), (&built.v4, &built.v6));

        let in_scope = |image: &EnforcementImage, scope: u64| twin_of(image).for_scope(Some(scope));
        let asked = in_scope(&image, asker).decide(api, 443, Transport::Tcp);
        assert_eq!(asked.decision, Decision::Allow);
        assert_eq!(asked.host.as_deref(), Some("api.test"));
        let not_asked = in_scope(&image, other).decide(api, 443, Transport::Tcp);
        assert_eq!(
            (not_asked.decision, not_asked.rule, not_asked.host),
            (Decision::Prompt, None, None),
            "the unmatched default"
        );

        // An approval of the address marks the asking scope's own entry too.
        assert_eq!(
            in_scope(&image, asker)
                .decide(ask, 443, Transport::Tcp)
                .decision,
            Decision::Prompt
        );
        image.add_destination_approval(asker, ask, 443, Transport::Tcp, "a".into(), "a".into());
        assert_eq!(
            in_scope(&image, asker)
                .decide(ask, 443, Transport::Tcp)
                .decision,
            Decision::Allow
        );
        assert_eq!(
            in_scope(&image, other)
                .decide(ask, 443, Transport::Tcp)
                .decision,
            Decision::Prompt,
            "another scope's approval"
        );

        // Answered for every scope (`guard run`'s one scope), it holds everywhere.
        book.record("api.test", &[api], ttl, now);
        let shared = known(&book);
        for scope in [asker, other] {
            assert_eq!(
                in_scope(&shared, scope)
                    .decide(api, 443, Transport::Tcp)
                    .decision,
                Decision::Allow
            );
        }
    }
}
