//! [`Policy`]: every rule of the loaded `.rules` files, indexed the way evaluation needs them,
//! and the operations that build one policy from others (amend, overlay).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use super::error::{PolicyError, Result};
use super::host::normalize_network_host;
use super::protected::ProtectedPath;
use super::rule::{
    AddressRule, Decision, EnforcementOverrides, EnforcementSettings, NetworkProtocol, NetworkRule,
    PatternToken, PrefixPattern, PrefixRule, RuleId,
};
use super::rule_index::PrefixIndex;
use super::rule_set::{RuleSet, RuleSetDecision, Tool, strongest};

/// A loaded policy.
///
/// Prefix rules are kept in load order (what `policy show` lists and the kernel compiles, where a
/// rule's [`RuleId`] is its index) and indexed by a token trie ([`PrefixIndex`]), so checking a
/// command costs the same however many rules the policy has.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    prefix_rules: Vec<Arc<PrefixRule>>,
    prefix_index: PrefixIndex,
    network_rules: Vec<NetworkRule>,
    host_executables: HashMap<String, Arc<[PathBuf]>>,
    /// guard's own `address_rule`s, in load order (a rule's id is its index).
    address_rules: Vec<AddressRule>,
    /// guard's own `unix_rule`s, in load order (a rule's id is its index).
    unix_rules: Vec<super::unix::UnixRule>,
    /// What `enforcement(...)` calls set; [`Policy::enforcement`] fills in the defaults.
    enforcement: EnforcementOverrides,
    /// `rule_set(...)` calls, in load order.
    rule_sets: Vec<RuleSet>,
    /// The built-in write denials for guard's own files, set by the loader (which knows the
    /// rules paths); empty for a policy only parsed.
    protected_paths: Vec<ProtectedPath>,
    /// Legacy `.policy` files (docs/policy-language.md §8) loaded beside the `.rules` files, in load order.
    legacy_policies: Vec<LegacyPolicy>,
    /// The last `sandbox(...)` call (guard-only).
    sandbox: Option<super::sandbox::SandboxSetting>,
}

/// A legacy `.policy` file loaded beside the `.rules` files. Its forbidden program regexes
/// and substrings are enforced by the kernel (`compile::patterns`); its program specs are for
/// `guard legacy check`.
#[derive(Clone, Debug)]
pub struct LegacyPolicy {
    /// As rule origins name it (the path it was read from).
    pub file: Arc<str>,
    pub policy: Arc<crate::legacy::Policy>,
}

/// One host of the `network_rule`s with the decision §2.4 gives it, the rule that decided it,
/// and every protocol its rules name. This is what a destination check and the kernel image use
/// for network rules: per host the last allow/deny wins (an approval beats an earlier prompt).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkHost {
    /// The normalised host: a name, or an IP literal.
    pub host: String,
    /// Allow if the host ends up in `network_domains().allowed`, forbidden if in `denied`,
    /// prompt when every rule for it says prompt.
    pub decision: Decision,
    /// Index into [`Policy::network_rules`]: the last allow/deny rule for the host, or its
    /// first rule when all of them prompt.
    pub deciding_rule: usize,
    /// The union of the protocols of every rule for the host, in first-seen order.
    pub protocols: Vec<NetworkProtocol>,
}

/// Hosts that end up allowed and denied after every `network_rule` in order (docs/policy-language.md §2.4).
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
        prefix_rules: impl IntoIterator<Item = impl Into<Arc<PrefixRule>>>,
        network_rules: Vec<NetworkRule>,
        host_executables: HashMap<String, Arc<[PathBuf]>>,
    ) -> Self {
        let prefix_rules: Vec<Arc<PrefixRule>> = prefix_rules
            .into_iter()
            .enumerate()
            .map(|(position, rule)| {
                let mut rule = rule.into();
                // Unshared when it comes from the parser; a rule another policy holds is copied.
                Arc::make_mut(&mut rule).id = RuleId(position as u32);
                rule
            })
            .collect();
        Policy {
            prefix_index: PrefixIndex::build(&prefix_rules),
            prefix_rules,
            network_rules,
            host_executables,
            ..Policy::default()
        }
    }

    /// Appends `rule` after the others (an amendment), indexed beside the built index until
    /// enough were appended to build it again.
    fn push_prefix_rule(&mut self, mut rule: Arc<PrefixRule>) {
        let position = self.prefix_rules.len() as u32;
        Arc::make_mut(&mut rule).id = RuleId(position);
        self.prefix_index.append(rule.clone());
        self.prefix_rules.push(rule);
        if self.prefix_index.needs_rebuild() {
            self.prefix_index = PrefixIndex::build(&self.prefix_rules);
        }
    }

    /// Every prefix rule, in load order.
    pub fn prefix_rules(&self) -> &[Arc<PrefixRule>] {
        &self.prefix_rules
    }

    /// The rules the index reaches for `cmd`, in load order: every rule that matches `cmd` is
    /// among them, and few others (a rule with many alternatives, or one appended since the
    /// index was built). [`Policy::matching_rules`] keeps those that match.
    pub fn candidate_rules<S: AsRef<str>>(&self, cmd: &[S]) -> Vec<&Arc<PrefixRule>> {
        self.prefix_index.candidates(cmd)
    }

    /// Every prefix rule that matches `cmd`, in load order, found through the index without
    /// reading the rules it does not return.
    pub fn matching_rules<S: AsRef<str>>(&self, cmd: &[S]) -> Vec<&Arc<PrefixRule>> {
        self.prefix_index.matching(cmd)
    }

    /// Whether any prefix rule's first token is `program`.
    pub fn has_rules_for_program(&self, program: &str) -> bool {
        self.prefix_index.has_program(program)
    }

    pub fn network_rules(&self) -> &[NetworkRule] {
        &self.network_rules
    }

    pub fn host_executables(&self) -> &HashMap<String, Arc<[PathBuf]>> {
        &self.host_executables
    }

    /// Every `address_rule`, in load order.
    pub fn address_rules(&self) -> &[AddressRule] {
        &self.address_rules
    }

    /// Appends an address rule; its id is its position.
    pub fn add_address_rule(&mut self, mut rule: AddressRule) {
        rule.id = RuleId(self.address_rules.len() as u32);
        self.address_rules.push(rule);
    }

    /// Every `unix_rule`, in load order.
    pub fn unix_rules(&self) -> &[super::unix::UnixRule] {
        &self.unix_rules
    }

    /// Appends a unix rule; its id is its position.
    pub fn add_unix_rule(&mut self, mut rule: super::unix::UnixRule) {
        rule.id = RuleId(self.unix_rules.len() as u32);
        self.unix_rules.push(rule);
    }

    /// The built-in unix socket entries (for the users with a session now; an allowed one only
    /// where its socket is now, see [`super::unix::builtin_rules_present`]) followed by the
    /// policy's `unix_rule`s: what [`super::unix::decide`] and the kernel's tables take.
    pub fn unix_rules_with_builtins(&self) -> Vec<super::unix::UnixRule> {
        let mut rules = super::unix::builtin_rules_present(
            &super::unix::session_user_ids(),
            super::unix::is_socket,
        );
        rules.extend(self.unix_rules.iter().cloned());
        rules
    }

    /// Every `rule_set`, in load order.
    pub fn rule_sets(&self) -> &[RuleSet] {
        &self.rule_sets
    }

    pub fn add_rule_set(&mut self, rule_set: RuleSet) {
        self.rule_sets.push(rule_set);
    }

    /// Every legacy `.policy` file loaded with the rules, in load order.
    pub fn legacy_policies(&self) -> &[LegacyPolicy] {
        &self.legacy_policies
    }

    pub fn add_legacy_policy(&mut self, legacy: LegacyPolicy) {
        self.legacy_policies.push(legacy);
    }

    /// The built-in protected paths this policy holds (see [`super::protected`]).
    pub fn protected_paths(&self) -> &[ProtectedPath] {
        &self.protected_paths
    }

    pub fn set_protected_paths(&mut self, protected: Vec<ProtectedPath>) {
        self.protected_paths = protected;
    }

    /// What the rule sets say about a call of `tool` with the canonical `subject`: each set
    /// (the protected paths first, then the written sets in load order) decides on its own by
    /// first match deny → ask → allow, and the strongest of those decisions wins; on a tie the
    /// earlier set is named. `None` when no pattern of any set matches.
    pub fn rule_set_decision(
        &self,
        tool: Tool,
        subject: Option<&str>,
    ) -> Option<RuleSetDecision<'_>> {
        let protected = self.protected_paths.iter().map(|p| &p.rule_set);
        strongest(protected.chain(&self.rule_sets), tool, subject)
    }

    /// The enforcement settings in force: what `enforcement(...)` set, defaults for the rest.
    pub fn enforcement(&self) -> EnforcementSettings {
        self.enforcement.settings()
    }

    /// The write confinement a rules file chose with `sandbox(...)`.
    pub fn sandbox(&self) -> Option<&super::sandbox::SandboxSetting> {
        self.sandbox.as_ref()
    }

    pub fn set_sandbox(&mut self, sandbox: super::sandbox::SandboxSetting) {
        self.sandbox = Some(sandbox);
    }

    /// Only the keys `enforcement(...)` calls set (what `policy show` marks as not a default).
    pub fn enforcement_overrides(&self) -> EnforcementOverrides {
        self.enforcement
    }

    /// Applies a later `enforcement(...)` call: the keys it sets replace earlier ones.
    pub fn set_enforcement(&mut self, later: EnforcementOverrides) {
        self.enforcement = self.enforcement.then(later);
    }

    /// Appends `prefix` as an all-literal rule without justification (an approved amendment).
    pub fn add_prefix_rule(&mut self, prefix: &[String], decision: Decision) -> Result<()> {
        let (first, rest) = prefix
            .split_first()
            .ok_or_else(|| PolicyError::InvalidPattern("prefix cannot be empty".to_string()))?;
        self.push_prefix_rule(Arc::new(PrefixRule {
            id: RuleId(0),
            pattern: PrefixPattern {
                first: first.as_str().into(),
                rest: rest.iter().cloned().map(PatternToken::Single).collect(),
            },
            decision,
            justification: None,
            origin: None,
            audit_only: false,
        }));
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
    /// executables replaced by name, address rules and rule sets appended (the base's protected
    /// paths kept: the loader sets them for the whole policy). Decisions combine by maximum, so an
    /// overlay can only tighten command decisions. Enforcement settings: the unmatched decisions
    /// are the strongest of both; `audit_only` is the base's unless the overlay sets it.
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
        let mut merged = Policy::from_parts(rules, network_rules, host_executables);
        for rule in self.address_rules.iter().chain(&overlay.address_rules) {
            merged.add_address_rule(rule.clone());
        }
        for rule in self.unix_rules.iter().chain(&overlay.unix_rules) {
            merged.add_unix_rule(rule.clone());
        }
        merged.enforcement = self.enforcement.overlaid_by(overlay.enforcement);
        merged.rule_sets = self
            .rule_sets
            .iter()
            .chain(&overlay.rule_sets)
            .cloned()
            .collect();
        merged.protected_paths = self.protected_paths.clone();
        merged.legacy_policies = self
            .legacy_policies
            .iter()
            .chain(&overlay.legacy_policies)
            .cloned()
            .collect();
        merged
    }

    /// This policy as a run's overlay, decided beside the daemon's policy by a program set of
    /// its own (`guard run --overlay`): what it does not set has no say. An exec or
    /// destination or unix socket no rule matches is allowed, a file no path names may run and every socket
    /// kind may be made, unless an `enforcement(...)` call of the overlay says otherwise; the
    /// daemon's policy decides those for the run as for any run.
    pub fn without_say_where_unset(mut self) -> Policy {
        let unset = EnforcementOverrides {
            unmatched_exec: Some(Decision::Allow),
            unmatched_network: Some(Decision::Allow),
            unmatched_unix: Some(Decision::Allow),
            audit_only: None,
            anonymous_exec: Some(Decision::Allow),
            socket_kinds: Some(super::rule::SocketKinds::all()),
            dns_max_labels: Some(super::rule::DnsCaps::NONE.max_labels),
            dns_max_name_length: Some(super::rule::DnsCaps::NONE.max_name_length),
            dns_wildcard_lookups_per_second: Some(
                super::rule::DnsCaps::NONE.wildcard_lookups_per_second,
            ),
        };
        self.enforcement = unset.then(self.enforcement);
        self
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
        // A host ends up where its last allow or deny put it, ordered by that rule: the walk's
        // result, without moving each host through the lists (quadratic at 100 000 hosts).
        let mut last: HashMap<&str, (usize, Decision)> = HashMap::new();
        for (position, rule) in self.network_rules.iter().enumerate() {
            if rule.decision != Decision::Prompt {
                last.insert(rule.host.as_str(), (position, rule.decision));
            }
        }
        let mut decided: Vec<(usize, Decision, &str)> = last
            .into_iter()
            .map(|(host, (position, decision))| (position, decision, host))
            .collect();
        decided.sort_unstable();
        let mut domains = NetworkDomains::default();
        for (_, decision, host) in decided {
            match decision {
                Decision::Allow => domains.allowed.push(host.to_string()),
                _ => domains.denied.push(host.to_string()),
            }
        }
        domains
    }

    /// Every host of the network rules, in first-seen order, with its §2.4 decision, the rule
    /// that decided it and the union of its protocols (see [`NetworkHost`]).
    pub fn network_hosts(&self) -> Vec<NetworkHost> {
        let domains = self.network_domains();
        let mut hosts: Vec<NetworkHost> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (position, rule) in self.network_rules.iter().enumerate() {
            let slot = *index.entry(rule.host.as_str()).or_insert_with(|| {
                hosts.push(NetworkHost {
                    host: rule.host.clone(),
                    decision: Decision::Prompt,
                    deciding_rule: position,
                    protocols: Vec::new(),
                });
                hosts.len() - 1
            });
            let host = &mut hosts[slot];
            if !host.protocols.contains(&rule.protocol) {
                host.protocols.push(rule.protocol);
            }
            if rule.decision != Decision::Prompt {
                host.deciding_rule = position;
            }
        }
        let allowed: HashSet<&str> = domains.allowed.iter().map(String::as_str).collect();
        let denied: HashSet<&str> = domains.denied.iter().map(String::as_str).collect();
        for host in &mut hosts {
            host.decision = if allowed.contains(host.host.as_str()) {
                Decision::Allow
            } else if denied.contains(host.host.as_str()) {
                Decision::Forbidden
            } else {
                Decision::Prompt
            };
        }
        hosts
    }
}
