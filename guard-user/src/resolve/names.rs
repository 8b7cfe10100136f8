//! What the policy says of a name, before any address is known: guard's resolver refuses a name
//! every connection to which is forbidden, and tells the owner of the maps when a name the
//! policy rules on gets addresses, so they are in the maps before the program has them.
//!
//! A name no rule speaks of leaves the host only under a policy whose unmatched network default
//! is `allow`: under `deny` or `prompt` its connects could not go anywhere a rule did not name,
//! and the name itself is the last thing a program could carry data out in (a query for
//! `<secret>.attacker.example` reaches the attacker's name server through any resolver). Under
//! `deny` it is refused; under `prompt` it is answered with a stand-in address
//! ([`super::stand_ins`]), and only resolved for real once a person approved a connect to it.

use crate::policy::Policy;
use std::collections::HashMap;

use crate::policy::host::{HostPattern, domains_of, host_covers, is_host_pattern};
use crate::policy::render::{address_rule_text, network_rule_text};
use crate::policy::rule::{AddressTarget, Decision, DnsCaps, RuleOrigin, Transport};

/// What the resolver does with a query for a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameDecision {
    /// Answer it with a refusal, and never ask upstream: `rule` forbids every connection.
    Refuse(NameRule),
    /// Answer it, and put its addresses in the maps first: a rule names it.
    Ruled,
    /// Answer it: no rule names it, and the policy allows what no rule names (its connects
    /// get the unmatched decision, attributed to it).
    Unknown,
    /// Answer it with its stand-in, and do not ask upstream: no rule names it and the policy
    /// prompts for what no rule names, so it stays on the host until an approval.
    Held,
}

/// A rule that speaks of names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameRule {
    /// A name or a pattern (`*.example.com`), shared with the index that finds the rule.
    pub host: std::sync::Arc<str>,
    pub decision: Decision,
    /// The rule as written (`network_rule(host="x", ...)`).
    pub text: String,
    pub origin: Option<RuleOrigin>,
    /// Whether it decides every port and transport of the name (a `network_rule` host's
    /// decision does, §2.4; an `address_rule` does with no `ports` and transport `any`).
    pub whole: bool,
}

/// The policy's rules on names, looked up by the resolver on every query. A clone shares them.
#[derive(Clone, Debug)]
pub struct NamePolicy {
    rules: std::sync::Arc<NameRules>,
    /// The policy's `unmatched_network`: a name no rule covers is refused unless it is allow.
    unmatched: Decision,
    /// What a host pattern forwards ([`super::caps`]).
    caps: DnsCaps,
}

/// The rules, indexed so that a query looks at the rules that can cover its name only: a
/// policy of 100 000 names is decided as fast as one of ten.
#[derive(Debug, Default)]
struct NameRules {
    rules: Vec<NameRule>,
    /// A name → its rules, in policy order.
    by_name: HashMap<std::sync::Arc<str>, Vec<u32>>,
    /// A pattern's domain → the rules with a pattern on it.
    by_domain: HashMap<String, Vec<u32>>,
}

impl NameRules {
    fn new(rules: Vec<NameRule>) -> NameRules {
        let mut indexed = NameRules::default();
        for (at, rule) in rules.iter().enumerate() {
            let slot = match HostPattern::parse(&rule.host) {
                Some(Ok(pattern)) => indexed.by_domain.entry(pattern.domain).or_default(),
                // A pattern spelled wrong never made it into a policy; it covers nothing.
                Some(Err(_)) => continue,
                None => indexed.by_name.entry(rule.host.clone()).or_default(),
            };
            slot.push(at as u32);
        }
        indexed.rules = rules;
        indexed
    }

    /// The first pattern rule that covers `name`, when no rule names it exactly.
    fn pattern_only(&self, name: &str) -> Option<&NameRule> {
        if self.by_name.contains_key(name) {
            return None;
        }
        self.covering(name)
            .into_iter()
            .find(|rule| is_host_pattern(&rule.host))
    }

    /// The rules that cover `name`, in policy order.
    fn covering(&self, name: &str) -> Vec<&NameRule> {
        let mut found: Vec<u32> = self.by_name.get(name).cloned().unwrap_or_default();
        for domain in domains_of(name) {
            let rules = self.by_domain.get(domain).into_iter().flatten();
            found.extend(rules.filter(|at| host_covers(&self.rules[**at as usize].host, name)));
        }
        found.sort_unstable();
        found.dedup();
        found.iter().map(|at| &self.rules[*at as usize]).collect()
    }
}

impl NamePolicy {
    pub fn from_policy(policy: &Policy) -> Self {
        let mut rules = Vec::new();
        for host in policy.network_hosts() {
            if host.host.parse::<std::net::IpAddr>().is_ok() {
                continue;
            }
            let rule = &policy.network_rules()[host.deciding_rule];
            rules.push(NameRule {
                host: std::sync::Arc::from(host.host),
                decision: host.decision,
                text: network_rule_text(rule),
                origin: rule.origin.clone(),
                whole: true,
            });
        }
        for rule in policy.address_rules() {
            for target in &rule.addresses {
                if let AddressTarget::Host(name) = target {
                    rules.push(NameRule {
                        host: std::sync::Arc::from(name.as_str()),
                        decision: rule.decision,
                        text: address_rule_text(rule),
                        origin: rule.origin.clone(),
                        whole: rule.ports.is_none()
                            && rule.transport == Transport::Any
                            && !rule.audit_only,
                    });
                }
            }
        }
        NamePolicy {
            rules: std::sync::Arc::new(NameRules::new(rules)),
            unmatched: policy.enforcement().unmatched_network,
            caps: policy.enforcement().dns,
        }
    }

    /// No rules, and every name answered (a resolver before any policy is known).
    pub fn answering_all() -> Self {
        NamePolicy {
            rules: std::sync::Arc::default(),
            unmatched: Decision::Allow,
            caps: DnsCaps::NONE,
        }
    }

    /// For a name only a host pattern lets out (no rule names it exactly: its labels are the
    /// asker's to choose), that pattern's rule and the caps on what it forwards.
    pub fn under_pattern(&self, name: &str) -> Option<(&NameRule, DnsCaps)> {
        self.rules.pattern_only(name).map(|rule| (rule, self.caps))
    }

    /// `name` normalised (lower case, no trailing dot). A forbidding rule that decides the whole
    /// name refuses it whatever else allows it (strongest wins, as the kernel would decide every
    /// address the name could have).
    pub fn decide(&self, name: &str) -> NameDecision {
        let mut ruled = false;
        for rule in self.rules.covering(name) {
            if rule.whole && rule.decision == Decision::Forbidden {
                return NameDecision::Refuse(rule.clone());
            }
            ruled = true;
        }
        if ruled {
            NameDecision::Ruled
        } else if self.unmatched == Decision::Allow {
            NameDecision::Unknown
        } else if self.unmatched == Decision::Prompt {
            NameDecision::Held
        } else {
            NameDecision::Refuse(NameRule {
                host: std::sync::Arc::from(name),
                decision: self.unmatched,
                text: format!(
                    "enforcement(unmatched_network=\"{}\"): no rule names it, and a name no \
                     rule names does not leave the host",
                    crate::policy::render::destination_decision(self.unmatched)
                ),
                origin: None,
                whole: true,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyParser;

    fn names(source: &str) -> NamePolicy {
        let mut parser = PolicyParser::new();
        parser.parse("t.rules", source).unwrap();
        NamePolicy::from_policy(&parser.build())
    }

    #[test]
    fn names_are_refused_ruled_or_unknown() {
        let policy = names(
            r#"
network_rule(host="evil.test", protocol="https", decision="deny")
network_rule(host="api.test", protocol="https", decision="allow")
address_rule(addresses=["*.cdn.test"], ports=[443], decision="allow")
address_rule(addresses=["**.blocked.test"], decision="deny")
address_rule(addresses=["*.partly.test"], ports=[25], decision="deny")
"#,
        );
        assert!(
            matches!(policy.decide("evil.test"), NameDecision::Refuse(r) if r.origin.as_ref().unwrap().line == 2)
        );
        assert_eq!(policy.decide("api.test"), NameDecision::Ruled);
        assert_eq!(policy.decide("a.cdn.test"), NameDecision::Ruled);
        assert_eq!(policy.decide("cdn.test"), NameDecision::Unknown);
        assert!(matches!(
            policy.decide("blocked.test"),
            NameDecision::Refuse(_)
        ));
        assert!(matches!(
            policy.decide("x.blocked.test"),
            NameDecision::Refuse(_)
        ));
        // A denial of one port is held by the kernel, on the answered addresses.
        assert_eq!(policy.decide("mail.partly.test"), NameDecision::Ruled);
        assert_eq!(policy.decide("example.org"), NameDecision::Unknown);
    }

    #[test]
    fn the_first_forbidding_rule_refuses_whether_it_names_the_name_or_covers_it() {
        let policy = names(
            r#"
address_rule(addresses=["**.deep.test"], decision="deny")
network_rule(host="a.b.deep.test", protocol="https", decision="deny")
address_rule(addresses=["*.other.test"], ports=[443], decision="allow")
network_rule(host="x.other.test", protocol="https", decision="deny")
"#,
        );
        // The network rules' hosts come first, then the address rules' targets.
        let NameDecision::Refuse(rule) = policy.decide("a.b.deep.test") else {
            panic!("refused");
        };
        assert_eq!(rule.origin.unwrap().line, 3);
        // Found through its domain two labels up.
        let NameDecision::Refuse(rule) = policy.decide("c.b.deep.test") else {
            panic!("refused");
        };
        assert_eq!(rule.origin.unwrap().line, 2);
        let NameDecision::Refuse(rule) = policy.decide("x.other.test") else {
            panic!("refused");
        };
        assert_eq!(rule.origin.unwrap().line, 5);
        assert_eq!(policy.decide("y.other.test"), NameDecision::Ruled);
        assert_eq!(policy.decide("other.test"), NameDecision::Unknown);
    }

    #[test]
    fn a_refusing_default_keeps_unknown_names_on_the_host() {
        let policy = names(
            "enforcement(unmatched_network=\"deny\")\n\
             network_rule(host=\"api.test\", protocol=\"https\", decision=\"allow\")\n",
        );
        assert_eq!(policy.decide("api.test"), NameDecision::Ruled);
        let NameDecision::Refuse(rule) = policy.decide("c2VjcmV0.exfil.test") else {
            panic!("an unknown name under deny is refused");
        };
        assert!(rule.origin.is_none() && rule.text.contains("unmatched_network"));
        // Under prompt it is held on the host too: answered with a stand-in, not forwarded.
        let policy = names("enforcement(unmatched_network=\"prompt\")\n");
        assert_eq!(policy.decide("c2VjcmV0.exfil.test"), NameDecision::Held);
    }

    #[test]
    fn a_name_only_a_pattern_covers_is_under_the_patterns_caps() {
        let policy = names(
            "enforcement(dns_max_labels=5)\n\
             address_rule(addresses=[\"*.wild.test\"], decision=\"allow\")\n\
             network_rule(host=\"api.wild.test\", protocol=\"https\", decision=\"allow\")\n",
        );
        let (rule, caps) = policy.under_pattern("data.wild.test").unwrap();
        assert_eq!(&*rule.host, "*.wild.test");
        assert_eq!(caps.max_labels, 5);
        assert_eq!(caps.max_name_length, DnsCaps::DEFAULT.max_name_length);
        // A name a rule names exactly carries nothing of the asker's; one no rule covers is
        // decided by the unmatched default.
        assert!(policy.under_pattern("api.wild.test").is_none());
        assert!(policy.under_pattern("example.org").is_none());
    }
}
