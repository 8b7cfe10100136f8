//! [`Policy`]: every rule of the loaded `.rules` files, indexed the way evaluation needs them,
//! and the operations that build one policy from others (amend, overlay).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::error::{PolicyError, Result};
use super::host::normalize_network_host;
use super::rule::{
    Decision, NetworkProtocol, NetworkRule, PatternToken, PrefixPattern, PrefixRule, RuleId,
};

/// A loaded policy.
///
/// Prefix rules are kept twice: in load order (what `policy show` lists and the kernel compiles,
/// where a rule's [`RuleId`] is its index) and grouped by first token, so checking a command
/// costs the same however many rules other programs have.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    prefix_rules: Vec<Arc<PrefixRule>>,
    rules_by_program: HashMap<String, Vec<Arc<PrefixRule>>>,
    network_rules: Vec<NetworkRule>,
    host_executables: HashMap<String, Arc<[PathBuf]>>,
}

/// Hosts that end up allowed and denied after every `network_rule` in order (spec §2.4).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NetworkDomains {
    pub allowed: Vec<String>,
    pub denied: Vec<String>,
}

impl Policy {
    pub fn empty() -> Self {
        Self::default()
    }

    /// Builds a policy from rules in load order; ids are assigned here, by position.
    pub fn from_parts(
        prefix_rules: impl IntoIterator<Item = PrefixRule>,
        network_rules: Vec<NetworkRule>,
        host_executables: HashMap<String, Arc<[PathBuf]>>,
    ) -> Self {
        let mut policy = Policy {
            network_rules,
            host_executables,
            ..Policy::default()
        };
        for rule in prefix_rules {
            policy.push_prefix_rule(rule);
        }
        policy
    }

    fn push_prefix_rule(&mut self, mut rule: PrefixRule) {
        rule.id = RuleId(self.prefix_rules.len() as u32);
        let rule = Arc::new(rule);
        self.rules_by_program
            .entry(rule.program().to_string())
            .or_default()
            .push(rule.clone());
        self.prefix_rules.push(rule);
    }

    /// Every prefix rule, in load order.
    pub fn prefix_rules(&self) -> &[Arc<PrefixRule>] {
        &self.prefix_rules
    }

    /// The rules whose first token is `program`, in definition order.
    pub fn rules_for_program(&self, program: &str) -> &[Arc<PrefixRule>] {
        self.rules_by_program
            .get(program)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    pub fn network_rules(&self) -> &[NetworkRule] {
        &self.network_rules
    }

    pub fn host_executables(&self) -> &HashMap<String, Arc<[PathBuf]>> {
        &self.host_executables
    }

    /// Appends `prefix` as an all-literal rule without justification (an approved amendment).
    pub fn add_prefix_rule(&mut self, prefix: &[String], decision: Decision) -> Result<()> {
        let (first, rest) = prefix
            .split_first()
            .ok_or_else(|| PolicyError::InvalidPattern("prefix cannot be empty".to_string()))?;
        self.push_prefix_rule(PrefixRule {
            id: RuleId(0),
            pattern: PrefixPattern {
                first: first.as_str().into(),
                rest: rest.iter().cloned().map(PatternToken::Single).collect(),
            },
            decision,
            justification: None,
            origin: None,
        });
        Ok(())
    }

    /// Appends a network rule, normalising the host and refusing a blank justification.
    pub fn add_network_rule(
        &mut self,
        host: &str,
        protocol: NetworkProtocol,
        decision: Decision,
        justification: Option<String>,
    ) -> Result<()> {
        let host = normalize_network_host(host)?;
        if justification
            .as_deref()
            .is_some_and(|j| j.trim().is_empty())
        {
            return Err(PolicyError::InvalidRule(
                "justification cannot be empty".to_string(),
            ));
        }
        self.network_rules.push(NetworkRule {
            host,
            protocol,
            decision,
            justification,
            origin: None,
        });
        Ok(())
    }

    /// Replaces the allowed paths for `name` (an empty list blocks every absolute path).
    pub fn set_host_executable_paths(&mut self, name: String, paths: Vec<PathBuf>) {
        self.host_executables.insert(name, paths.into());
    }

    /// A new policy with `overlay`'s rules after this one's: prefix rules appended per program,
    /// network rules appended (so they come later in [`Policy::network_domains`]), host
    /// executables replaced by name. Decisions combine by maximum, so an overlay can only tighten
    /// command decisions.
    pub fn merge_overlay(&self, overlay: &Policy) -> Policy {
        let rules = self
            .prefix_rules
            .iter()
            .chain(&overlay.prefix_rules)
            .map(|rule| PrefixRule::clone(rule));
        let network_rules = self
            .network_rules
            .iter()
            .chain(&overlay.network_rules)
            .cloned()
            .collect();
        let mut host_executables = self.host_executables.clone();
        host_executables.extend(
            overlay
                .host_executables
                .iter()
                .map(|(name, paths)| (name.clone(), paths.clone())),
        );
        Policy::from_parts(rules, network_rules, host_executables)
    }

    /// For every allow rule, `[first, rendered rest...]`, sorted and deduplicated.
    pub fn allowed_prefixes(&self) -> Vec<Vec<String>> {
        let mut prefixes: Vec<Vec<String>> = self
            .prefix_rules
            .iter()
            .filter(|rule| rule.decision == Decision::Allow)
            .map(|rule| {
                std::iter::once(rule.pattern.first.to_string())
                    .chain(rule.pattern.rest.iter().map(PatternToken::render))
                    .collect()
            })
            .collect();
        prefixes.sort();
        prefixes.dedup();
        prefixes
    }

    /// The reference's `compiled_network_domains`: walk the network rules in order; `allow`
    /// moves the host to the end of `allowed` and out of `denied`, `forbidden` the mirror image,
    /// `prompt` changes nothing. Protocols share one host namespace.
    pub fn network_domains(&self) -> NetworkDomains {
        let mut domains = NetworkDomains::default();
        for rule in &self.network_rules {
            let (upsert, remove) = match rule.decision {
                Decision::Allow => (&mut domains.allowed, &mut domains.denied),
                Decision::Forbidden => (&mut domains.denied, &mut domains.allowed),
                Decision::Prompt => continue,
            };
            remove.retain(|host| *host != rule.host);
            upsert.retain(|host| *host != rule.host);
            upsert.push(rule.host.clone());
        }
        domains
    }
}
