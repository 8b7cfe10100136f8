//! The rules a policy holds, and what a match of one reports.
//!
//! Rules remember where they were written ([`RuleOrigin`]) and carry a [`RuleId`], so a decision
//! made in the kernel or by `guard check` can name the rule, its file and its line.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use guard_common::Decision;
use ipnetwork::IpNetwork;

use super::error::{PolicyError, Result};

/// The file and line a rule was written on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RuleOrigin {
    pub file: Arc<str>,
    pub line: usize,
}

impl fmt::Display for RuleOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A prefix rule's position in its policy, in load order. Stable for one loaded policy; the
/// kernel reports it back in events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct RuleId(pub u32);

/// One position of a prefix pattern: an exact token, or alternatives for it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PatternToken {
    Single(String),
    Alts(Vec<String>),
}

impl PatternToken {
    pub fn matches(&self, token: &str) -> bool {
        self.alternatives().iter().any(|alt| alt == token)
    }

    pub fn alternatives(&self) -> &[String] {
        match self {
            PatternToken::Single(token) => std::slice::from_ref(token),
            PatternToken::Alts(alts) => alts,
        }
    }

    /// `git` as itself, alternatives as `[a|b]` (the form of `allowed_prefixes`).
    pub fn render(&self) -> String {
        match self {
            PatternToken::Single(token) => token.clone(),
            PatternToken::Alts(alts) => format!("[{}]", alts.join("|")),
        }
    }
}

/// A prefix pattern whose first token is fixed: rules are indexed by it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PrefixPattern {
    pub first: Arc<str>,
    pub rest: Arc<[PatternToken]>,
}

/// The reference's derived `Debug` shape (example-validation errors quote it). Its
/// `canonical_matching` is set only by rules from Codex's managed TOML requirements, never by a
/// `.rules` file, so it is always `false` here.
impl fmt::Debug for PrefixPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrefixPattern")
            .field("canonical_matching", &false)
            .field("first", &self.first)
            .field("rest", &self.rest)
            .finish()
    }
}

impl PrefixPattern {
    /// The matched argv prefix (the command's own tokens), if `cmd` starts with this pattern.
    pub fn matches_prefix(&self, cmd: &[String]) -> Option<Vec<String>> {
        self.is_prefix_of(cmd)
            .then(|| cmd[..self.rest.len() + 1].to_vec())
    }

    /// Whether `cmd` starts with this pattern.
    pub fn is_prefix_of<S: AsRef<str>>(&self, cmd: &[S]) -> bool {
        let len = self.rest.len() + 1;
        cmd.len() >= len
            && cmd[0].as_ref() == &*self.first
            && self
                .rest
                .iter()
                .zip(&cmd[1..len])
                .all(|(pattern, token)| pattern.matches(token.as_ref()))
    }
}

/// `prefix_rule(...)` after first-position expansion: one rule per first token.
#[derive(Clone, PartialEq, Eq)]
pub struct PrefixRule {
    pub id: RuleId,
    pub pattern: PrefixPattern,
    pub decision: Decision,
    pub justification: Option<String>,
    pub origin: Option<RuleOrigin>,
    /// `audit_only=True`: the kernel records the decision but lets the exec through. `guard
    /// check` decides as if it were enforced.
    pub audit_only: bool,
}

/// The reference's derived `Debug` shape, which example-validation errors quote verbatim; the id,
/// origin and audit-only flag are guard's own and stay out of it.
impl fmt::Debug for PrefixRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrefixRule")
            .field("pattern", &self.pattern)
            .field("decision", &self.decision)
            .field("justification", &self.justification)
            .finish()
    }
}

impl PrefixRule {
    pub fn program(&self) -> &str {
        &self.pattern.first
    }

    pub fn matches(&self, cmd: &[String]) -> Option<RuleMatch> {
        self.pattern.is_prefix_of(cmd).then(|| self.match_of(cmd))
    }

    /// The match of `cmd`, which this rule's pattern is known to start (as
    /// [`super::model::Policy::matching_rules`] returns it).
    pub fn match_of(&self, cmd: &[String]) -> RuleMatch {
        debug_assert!(self.pattern.is_prefix_of(cmd));
        RuleMatch::PrefixRuleMatch {
            matched_prefix: cmd[..self.pattern.rest.len() + 1].to_vec(),
            decision: self.decision,
            resolved_program: None,
            justification: self.justification.clone(),
            rule_id: self.id,
            origin: self.origin.clone(),
        }
    }
}

/// The result of evaluating one command against one rule (or against the fallback).
#[derive(Clone, PartialEq, Eq)]
pub enum RuleMatch {
    PrefixRuleMatch {
        /// The command's own tokens that the pattern covered.
        matched_prefix: Vec<String>,
        decision: Decision,
        /// The absolute path `argv[0]` resolved to, when the match came from host-executable
        /// resolution.
        resolved_program: Option<PathBuf>,
        justification: Option<String>,
        rule_id: RuleId,
        origin: Option<RuleOrigin>,
    },
    HeuristicsRuleMatch {
        command: Vec<String>,
        decision: Decision,
    },
    /// A `rule_set` pattern (or a built-in protected path) that decided for the command.
    RuleSetMatch {
        /// The pattern as written, e.g. `bash(rm -rf*)`.
        pattern: String,
        decision: Decision,
        origin: Option<RuleOrigin>,
    },
    /// A legacy policy's `forbid_program_regex` or `forbid_substrings` (always forbidden).
    LegacyMatch {
        /// The call, e.g. `forbid_substrings(["--force"])`.
        rule: String,
        /// Why: the regex's reason, or which argument holds the substring.
        reason: String,
        origin: Option<RuleOrigin>,
    },
}

impl RuleMatch {
    pub fn decision(&self) -> Decision {
        match self {
            RuleMatch::PrefixRuleMatch { decision, .. }
            | RuleMatch::HeuristicsRuleMatch { decision, .. }
            | RuleMatch::RuleSetMatch { decision, .. } => *decision,
            RuleMatch::LegacyMatch { .. } => Decision::Forbidden,
        }
    }

    /// True for a match of a written rule, false for a fallback verdict.
    pub fn is_policy_match(&self) -> bool {
        matches!(
            self,
            RuleMatch::PrefixRuleMatch { .. }
                | RuleMatch::RuleSetMatch { .. }
                | RuleMatch::LegacyMatch { .. }
        )
    }
}

/// The reference's derived `Debug` shape (quoted by `not_match` errors).
impl fmt::Debug for RuleMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct AbsolutePathBuf<'a>(&'a PathBuf);
        impl fmt::Debug for AbsolutePathBuf<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple("AbsolutePathBuf").field(self.0).finish()
            }
        }
        match self {
            RuleMatch::PrefixRuleMatch {
                matched_prefix,
                decision,
                resolved_program,
                justification,
                ..
            } => f
                .debug_struct("PrefixRuleMatch")
                .field("matched_prefix", matched_prefix)
                .field("decision", decision)
                .field(
                    "resolved_program",
                    &resolved_program.as_ref().map(AbsolutePathBuf),
                )
                .field("justification", justification)
                .finish(),
            RuleMatch::HeuristicsRuleMatch { command, decision } => f
                .debug_struct("HeuristicsRuleMatch")
                .field("command", command)
                .field("decision", decision)
                .finish(),
            RuleMatch::RuleSetMatch {
                pattern, decision, ..
            } => f
                .debug_struct("RuleSetMatch")
                .field("pattern", pattern)
                .field("decision", decision)
                .finish(),
            RuleMatch::LegacyMatch { rule, reason, .. } => f
                .debug_struct("LegacyMatch")
                .field("rule", rule)
                .field("reason", reason)
                .finish(),
        }
    }
}

/// The protocols a `network_rule` names.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum NetworkProtocol {
    Http,
    Https,
    Socks5Tcp,
    Socks5Udp,
}

impl NetworkProtocol {
    /// Parses the exact spellings the reference accepts, aliases included
    /// (`https_connect`, `http-connect`; not `https-connect` or `http_connect`).
    pub fn parse(raw: &str) -> Result<Self> {
        match raw {
            "http" => Ok(Self::Http),
            "https" | "https_connect" | "http-connect" => Ok(Self::Https),
            "socks5_tcp" => Ok(Self::Socks5Tcp),
            "socks5_udp" => Ok(Self::Socks5Udp),
            other => Err(PolicyError::InvalidRule(format!(
                "network_rule protocol must be one of http, https, socks5_tcp, socks5_udp (got {other})"
            ))),
        }
    }

    /// The canonical spelling written back to files and shown in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
            Self::Socks5Tcp => "socks5_tcp",
            Self::Socks5Udp => "socks5_udp",
        }
    }
}

impl fmt::Display for NetworkProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `network_rule(...)` with its host normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkRule {
    pub host: String,
    pub protocol: NetworkProtocol,
    pub decision: Decision,
    pub justification: Option<String>,
    pub origin: Option<RuleOrigin>,
}

impl NetworkProtocol {
    /// The (transport, port) pairs a connection over this protocol uses, as the kernel sees
    /// them: `http` is TCP 80, `https` is TCP 443 and UDP 443 (HTTP/3), the SOCKS5 forms are
    /// their transport on any port. `None` means any port.
    pub fn endpoints(self) -> &'static [(Transport, Option<u16>)] {
        match self {
            Self::Http => &[(Transport::Tcp, Some(80))],
            Self::Https => &[(Transport::Tcp, Some(443)), (Transport::Udp, Some(443))],
            Self::Socks5Tcp => &[(Transport::Tcp, None)],
            Self::Socks5Udp => &[(Transport::Udp, None)],
        }
    }
}

/// The transport a destination rule applies to; `Any` covers both.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Udp,
    Any,
}

impl Transport {
    /// `tcp`, `udp` or `any`: the spelling of `address_rule(transport=...)`.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "tcp" => Some(Self::Tcp),
            "udp" => Some(Self::Udp),
            "any" => Some(Self::Any),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Any => "any",
        }
    }

    /// Whether a rule for `self` covers a connection over `actual` (`Any` on either side
    /// covers everything).
    pub fn covers(self, actual: Transport) -> bool {
        self == Transport::Any || actual == Transport::Any || self == actual
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One element of `address_rule(addresses=[...])`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AddressTarget {
    /// An IP address (a /32 or /128) or a CIDR, with host bits cleared and IPv4-mapped IPv6
    /// written as IPv4.
    Network(IpNetwork),
    /// A host name, normalised like a `network_rule` host; its addresses come from DNS.
    Host(String),
}

impl AddressTarget {
    /// A one-address network for `ip` (IPv4-mapped IPv6 becomes IPv4).
    pub fn single(ip: IpAddr) -> IpNetwork {
        IpNetwork::from(canonical_ip(ip))
    }
}

impl fmt::Display for AddressTarget {
    /// `10.0.0.0/8`, `10.0.0.1` (a single address without its length), `example.com`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressTarget::Network(network) => f.write_str(&render_network(network)),
            AddressTarget::Host(host) => f.write_str(host),
        }
    }
}

/// `10.0.0.1` for a single address, `10.0.0.0/8` otherwise.
pub fn render_network(network: &IpNetwork) -> String {
    let full = if network.is_ipv4() { 32 } else { 128 };
    if network.prefix() == full {
        network.ip().to_string()
    } else {
        format!("{}/{}", network.ip(), network.prefix())
    }
}

/// IPv4-mapped IPv6 (`::ffff:10.0.0.1`) as the IPv4 address it stands for; anything else as is.
/// The kernel looks such an address up as IPv4, and so does every comparison here.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// `address_rule(addresses, decision, ports=None, transport="any", justification=None,
/// audit_only=False)`: destinations by address, CIDR or host name, optionally by port and
/// transport. guard's own builtin; the reference has no equivalent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressRule {
    /// Position among the policy's address rules, in load order.
    pub id: RuleId,
    pub addresses: Vec<AddressTarget>,
    /// `None`: any port.
    pub ports: Option<Vec<u16>>,
    pub transport: Transport,
    pub decision: Decision,
    pub justification: Option<String>,
    pub audit_only: bool,
    pub origin: Option<RuleOrigin>,
}

impl AddressRule {
    /// Whether the rule's port and transport cover a connection to `port` over `transport`.
    pub fn covers_port(&self, port: u16, transport: Transport) -> bool {
        self.transport.covers(transport)
            && self
                .ports
                .as_ref()
                .is_none_or(|ports| ports.contains(&port))
    }
}

/// What the kernel does where no rule speaks, and whether it enforces at all
/// (`enforcement(...)`).
///
/// The defaults (allow, allow, enforced) never lock anyone out of their own machine: only what
/// a rule names is asked about or refused. The refusals by default are an exec of a file no
/// path names (a memfd, a deleted file): no rule could name it, so allowing it would let any
/// program run past every rule; and a unix socket nothing names: a server outside the scope
/// (tmux, screen) does what it is asked with its own rights, past every rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EnforcementSettings {
    /// The decision for an exec no prefix rule matches.
    pub unmatched_exec: Decision,
    /// The decision for a destination no network or address rule matches.
    pub unmatched_network: Decision,
    /// The decision for a unix socket no `unix_rule` or built-in entry names (guard-only):
    /// refused by default, since a server outside the scope acts for whoever connects.
    pub unmatched_unix: Decision,
    /// Global audit-only mode: every decision is recorded, none is enforced.
    pub audit_only: bool,
    /// The decision for an exec of a file no path names (a memfd, a deleted or O_TMPFILE
    /// file), decided with the rules that match its name.
    pub anonymous_exec: Decision,
    /// The IP socket kinds no connect hook decides that a scoped process may create (raw,
    /// ping, UDP-Lite, SCTP, other); none by default.
    pub socket_kinds: SocketKinds,
    /// What guard's resolver forwards of a name only a host pattern (`*.example.com`) allows.
    pub dns: DnsCaps,
}

/// The caps on names guard's resolver forwards because a host pattern covers them (and no rule
/// names them exactly): such a name's labels are the asker's to choose, so they can carry data
/// to whoever answers for the pattern's domain. Past a cap the lookup is refused and recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DnsCaps {
    /// Labels of the whole name (`a.b.example.com`: 4).
    pub max_labels: u8,
    /// Characters of the name, without the trailing dot.
    pub max_name_length: u16,
    /// Lookups sent upstream per second under one pattern (answers from the cache do not
    /// count: they do not leave the host).
    pub wildcard_lookups_per_second: u32,
}

impl DnsCaps {
    /// The defaults: far above the names and lookup rates programs use (a CDN or cloud name
    /// has 3 to 6 labels and fewer than 80 characters), and a bound on what one pattern
    /// carries out.
    pub const DEFAULT: DnsCaps = DnsCaps {
        max_labels: 10,
        max_name_length: 128,
        wildcard_lookups_per_second: 100,
    };
    /// What DNS itself allows (no cap): 127 labels, 253 characters.
    pub const NONE: DnsCaps = DnsCaps {
        max_labels: 127,
        max_name_length: 253,
        wildcard_lookups_per_second: 1_000_000,
    };
}

/// A set of socket kinds (`guard_common::sockets::kind` bits), as `enforcement(socket_kinds=
/// [...])` names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketKinds(u8);

impl SocketKinds {
    pub const NONE: SocketKinds = SocketKinds(0);

    /// The kind called `name` in a policy, if there is one.
    pub fn named(name: &str) -> Option<SocketKinds> {
        guard_common::sockets::kind::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, bit)| SocketKinds(*bit))
    }

    /// Every kind guard names.
    pub fn all() -> SocketKinds {
        guard_common::sockets::kind::NAMES
            .iter()
            .fold(SocketKinds::NONE, |all, (_, bit)| {
                all.with(SocketKinds(*bit))
            })
    }

    pub fn with(self, other: SocketKinds) -> SocketKinds {
        SocketKinds(self.0 | other.0)
    }

    /// Only the kinds both allow (an overlay can only tighten).
    pub fn within(self, other: SocketKinds) -> SocketKinds {
        SocketKinds(self.0 & other.0)
    }

    pub fn bits(self) -> u8 {
        self.0
    }

    /// The policy names of the kinds in the set, in a fixed order.
    pub fn names(self) -> Vec<&'static str> {
        guard_common::sockets::kind::NAMES
            .iter()
            .filter(|(_, bit)| self.0 & bit != 0)
            .map(|(name, _)| *name)
            .collect()
    }
}

impl serde::Serialize for SocketKinds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.names())
    }
}

impl Default for EnforcementSettings {
    fn default() -> Self {
        EnforcementSettings {
            unmatched_exec: Decision::Allow,
            unmatched_network: Decision::Allow,
            unmatched_unix: Decision::Forbidden,
            audit_only: false,
            anonymous_exec: Decision::Forbidden,
            socket_kinds: SocketKinds::NONE,
            dns: DnsCaps::DEFAULT,
        }
    }
}

/// The keys `enforcement(...)` calls have set; a later call overrides earlier keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnforcementOverrides {
    pub unmatched_exec: Option<Decision>,
    pub unmatched_network: Option<Decision>,
    pub unmatched_unix: Option<Decision>,
    pub audit_only: Option<bool>,
    pub anonymous_exec: Option<Decision>,
    pub socket_kinds: Option<SocketKinds>,
    pub dns_max_labels: Option<u8>,
    pub dns_max_name_length: Option<u16>,
    pub dns_wildcard_lookups_per_second: Option<u32>,
}

impl EnforcementOverrides {
    /// `later`'s keys replace these where `later` sets them (one file's later call).
    pub fn then(self, later: EnforcementOverrides) -> Self {
        EnforcementOverrides {
            unmatched_exec: later.unmatched_exec.or(self.unmatched_exec),
            unmatched_network: later.unmatched_network.or(self.unmatched_network),
            unmatched_unix: later.unmatched_unix.or(self.unmatched_unix),
            audit_only: later.audit_only.or(self.audit_only),
            anonymous_exec: later.anonymous_exec.or(self.anonymous_exec),
            socket_kinds: later.socket_kinds.or(self.socket_kinds),
            dns_max_labels: later.dns_max_labels.or(self.dns_max_labels),
            dns_max_name_length: later.dns_max_name_length.or(self.dns_max_name_length),
            dns_wildcard_lookups_per_second: later
                .dns_wildcard_lookups_per_second
                .or(self.dns_wildcard_lookups_per_second),
        }
    }

    /// An overlay on top of a base: it can only tighten the unmatched decisions (strongest of
    /// both) and the DNS caps (the lower of both); `audit_only` is the base's unless the
    /// overlay sets it.
    pub fn overlaid_by(self, overlay: EnforcementOverrides) -> Self {
        let strongest = |base: Option<Decision>, over: Option<Decision>| match (base, over) {
            (Some(a), Some(b)) => Some(a.strongest(b)),
            (a, b) => a.or(b),
        };
        EnforcementOverrides {
            unmatched_exec: strongest(self.unmatched_exec, overlay.unmatched_exec),
            unmatched_network: strongest(self.unmatched_network, overlay.unmatched_network),
            unmatched_unix: strongest(self.unmatched_unix, overlay.unmatched_unix),
            audit_only: overlay.audit_only.or(self.audit_only),
            anonymous_exec: strongest(self.anonymous_exec, overlay.anonymous_exec),
            socket_kinds: match (self.socket_kinds, overlay.socket_kinds) {
                (Some(a), Some(b)) => Some(a.within(b)),
                (a, b) => a.or(b),
            },
            dns_max_labels: lowest(self.dns_max_labels, overlay.dns_max_labels),
            dns_max_name_length: lowest(self.dns_max_name_length, overlay.dns_max_name_length),
            dns_wildcard_lookups_per_second: lowest(
                self.dns_wildcard_lookups_per_second,
                overlay.dns_wildcard_lookups_per_second,
            ),
        }
    }

    /// The settings in force: what was set, the defaults for the rest.
    pub fn settings(self) -> EnforcementSettings {
        let defaults = EnforcementSettings::default();
        EnforcementSettings {
            unmatched_exec: self.unmatched_exec.unwrap_or(defaults.unmatched_exec),
            unmatched_network: self.unmatched_network.unwrap_or(defaults.unmatched_network),
            unmatched_unix: self.unmatched_unix.unwrap_or(defaults.unmatched_unix),
            audit_only: self.audit_only.unwrap_or(defaults.audit_only),
            anonymous_exec: self.anonymous_exec.unwrap_or(defaults.anonymous_exec),
            socket_kinds: self.socket_kinds.unwrap_or(defaults.socket_kinds),
            dns: DnsCaps {
                max_labels: self.dns_max_labels.unwrap_or(defaults.dns.max_labels),
                max_name_length: self
                    .dns_max_name_length
                    .unwrap_or(defaults.dns.max_name_length),
                wildcard_lookups_per_second: self
                    .dns_wildcard_lookups_per_second
                    .unwrap_or(defaults.dns.wildcard_lookups_per_second),
            },
        }
    }
}

/// The lower of two caps, where either is set.
fn lowest<T: Ord>(base: Option<T>, over: Option<T>) -> Option<T> {
    match (base, over) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Which builtin a rule was written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    Prefix,
    Network,
    Address,
    /// One pattern of a `rule_set(...)` (the kernel holds its `exec(...)` patterns).
    RuleSet,
    /// A `forbid_program_regex` or `forbid_substrings` of a legacy `.policy` file.
    Legacy,
    /// A `unix_rule`, or an entry of the built-in unix socket lists.
    Unix,
}

impl RuleKind {
    /// The builtin's name: `prefix_rule`, `network_rule`, `address_rule`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::Prefix => "prefix_rule",
            RuleKind::Network => "network_rule",
            RuleKind::Address => "address_rule",
            RuleKind::RuleSet => "rule_set",
            RuleKind::Legacy => "legacy_policy",
            RuleKind::Unix => "unix_rule",
        }
    }
}

impl fmt::Display for RuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Programs that run another program's code by the name in their first argument
/// (`busybox touch M`) or in `argv[0]` (a link named `touch`): the kernel holds the rules that
/// ask or forbid for their applets too.
pub const MULTI_CALL_PROGRAMS: [&str; 2] = ["busybox", "toybox"];

/// `decision=` of `prefix_rule` (and of `network_rule` after its `deny` alias).
pub fn parse_decision(raw: &str) -> Result<Decision> {
    Decision::from_rules_str(raw).ok_or_else(|| PolicyError::InvalidDecision(raw.to_string()))
}

/// `network_rule` also accepts `deny`, meaning forbidden.
pub fn parse_network_decision(raw: &str) -> Result<Decision> {
    match raw {
        "deny" => Ok(Decision::Forbidden),
        other => parse_decision(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(tokens: &[&str]) -> Vec<String> {
        tokens.iter().map(|t| t.to_string()).collect()
    }

    fn pattern(first: &str, rest: Vec<PatternToken>) -> PrefixPattern {
        PrefixPattern {
            first: first.into(),
            rest: rest.into(),
        }
    }

    #[test]
    fn prefix_matching_is_exact_and_reports_the_command_tokens() {
        let p = pattern("git", vec![PatternToken::Alts(argv(&["status", "log"]))]);
        assert_eq!(
            p.matches_prefix(&argv(&["git", "log", "-1"])),
            Some(argv(&["git", "log"]))
        );
        assert_eq!(p.matches_prefix(&argv(&["git"])), None);
        assert_eq!(p.matches_prefix(&argv(&["git", "-C", "x", "status"])), None);
        assert_eq!(p.matches_prefix(&argv(&["Git", "status"])), None);
    }

    #[test]
    fn star_and_spaces_are_literal_tokens() {
        let star = pattern("ls", vec![PatternToken::Single("*".into())]);
        assert!(star.matches_prefix(&argv(&["ls", "*"])).is_some());
        assert!(star.matches_prefix(&argv(&["ls", "a"])).is_none());
        let spaced = pattern("git status", vec![]);
        assert!(spaced.matches_prefix(&argv(&["git status"])).is_some());
        assert!(spaced.matches_prefix(&argv(&["git", "status"])).is_none());
        let empty = pattern("echo", vec![PatternToken::Single(String::new())]);
        assert!(empty.matches_prefix(&argv(&["echo", ""])).is_some());
        assert!(empty.matches_prefix(&argv(&["echo", "x"])).is_none());
    }

    #[test]
    fn debug_shapes_are_the_references() {
        let rule = PrefixRule {
            id: RuleId(7),
            pattern: pattern("git", vec![PatternToken::Single("status".into())]),
            decision: Decision::Allow,
            justification: None,
            origin: None,
            audit_only: true,
        };
        assert_eq!(
            format!("{rule:?}"),
            r#"PrefixRule { pattern: PrefixPattern { canonical_matching: false, first: "git", rest: [Single("status")] }, decision: Allow, justification: None }"#
        );
        let m = RuleMatch::PrefixRuleMatch {
            matched_prefix: argv(&["git", "status"]),
            decision: Decision::Prompt,
            resolved_program: Some("/usr/bin/git".into()),
            justification: Some("why".into()),
            rule_id: RuleId(0),
            origin: None,
        };
        assert_eq!(
            format!("{m:?}"),
            r#"PrefixRuleMatch { matched_prefix: ["git", "status"], decision: Prompt, resolved_program: Some(AbsolutePathBuf("/usr/bin/git")), justification: Some("why") }"#
        );
    }

    #[test]
    fn protocols_and_their_aliases() {
        for (raw, want) in [
            ("http", NetworkProtocol::Http),
            ("https", NetworkProtocol::Https),
            ("https_connect", NetworkProtocol::Https),
            ("http-connect", NetworkProtocol::Https),
            ("socks5_tcp", NetworkProtocol::Socks5Tcp),
            ("socks5_udp", NetworkProtocol::Socks5Udp),
        ] {
            assert_eq!(NetworkProtocol::parse(raw).unwrap(), want);
        }
        for raw in [
            "https-connect",
            "http_connect",
            "HTTPS",
            "socks5",
            "tcp",
            "",
        ] {
            assert_eq!(
                NetworkProtocol::parse(raw).unwrap_err().to_string(),
                format!(
                    "invalid rule: network_rule protocol must be one of http, https, socks5_tcp, socks5_udp (got {raw})"
                )
            );
        }
        assert_eq!(NetworkProtocol::Https.as_str(), "https");
    }

    #[test]
    fn decisions_and_the_network_deny_alias() {
        assert_eq!(parse_decision("prompt").unwrap(), Decision::Prompt);
        assert_eq!(
            parse_decision("deny").unwrap_err().to_string(),
            "invalid decision: deny"
        );
        assert_eq!(parse_network_decision("deny").unwrap(), Decision::Forbidden);
        for raw in ["Deny", "block", "ask"] {
            assert_eq!(
                parse_network_decision(raw).unwrap_err().to_string(),
                format!("invalid decision: {raw}")
            );
        }
    }
}
