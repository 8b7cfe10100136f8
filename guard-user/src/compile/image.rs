//! The [`EnforcementImage`]: everything the kernel programs decide with, as plain tables the map
//! sync writes into BPF maps. Every entry carries a [`Verdict`] whose `rule` indexes
//! [`EnforcementImage::rules`], so an event from the kernel names a rule, its file and its line.

use std::path::PathBuf;

use ipnetwork::IpNetwork;

pub use crate::policy::RuleKind as KernelRuleKind;
use crate::policy::{Decision, EnforcementSettings, RuleOrigin, Transport};

/// A compiled policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnforcementImage {
    /// What the kernel does where no entry matches, and global audit-only mode.
    pub settings: EnforcementSettings,
    /// Index = kernel rule id (u32). Every rule of the policy has one, in the order prefix
    /// rules, network rules, address rules; every [`Verdict::rule`] indexes here.
    pub rules: Vec<KernelRule>,
    /// Executables by file identity, one per (dev, ino), the strongest verdict kept.
    pub identities: Vec<IdentityEntry>,
    /// Executables by file name, one per name, the strongest verdict kept.
    pub names: Vec<NameEntry>,
    /// Rules of two or more tokens, compared with the exec's argv (token 0 is the executed
    /// file's name).
    pub argv_rules: Vec<ArgvRule>,
    /// Destinations: networks with a port (or any) and a transport. Several entries may match
    /// one connection; the strongest verdict among them decides.
    pub destinations: Vec<DestinationEntry>,
    /// Host names the resolver had no address for (sorted, deduplicated). Their rules hold
    /// nothing in the kernel until the names resolve.
    pub unresolved_hosts: Vec<String>,
    /// Human sentences about rules the kernel cannot fully hold, e.g. a one-token rule whose
    /// program is on no PATH folder.
    pub warnings: Vec<String>,
}

/// A decision as the kernel stores it: what, because of which rule, and whether it is only
/// recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    /// Index into [`EnforcementImage::rules`].
    pub rule: u32,
    /// The rule is audit-only: record the decision, let the call through.
    pub audit_only: bool,
}

impl Verdict {
    /// Whether `self` should replace `kept` when both apply to the same key: a stronger
    /// decision wins; at the same decision an enforced verdict beats an audit-only one (so an
    /// audit-only rule never weakens an enforced one); otherwise the earlier rule stays.
    pub fn beats(&self, kept: &Verdict) -> bool {
        (self.decision, !self.audit_only) > (kept.decision, !kept.audit_only)
    }
}

/// One rule of the policy, as events and `guard` output name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelRule {
    pub kind: KernelRuleKind,
    /// The rule as it would be written, e.g.
    /// `prefix_rule(pattern=["git", "push"], decision="forbidden")`.
    pub text: String,
    /// What it covers: "commands starting with `git push`", "host example.com",
    /// "addresses 10.0.0.0/8".
    pub summary: String,
    /// The decision the rule itself gives (a network rule's host may end up with another one,
    /// see §2.4; the entries carry the decision in force).
    pub decision: Decision,
    pub justification: Option<String>,
    /// Where it was written.
    pub origin: Option<RuleOrigin>,
}

/// An executable by identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityEntry {
    /// The kernel's `dev_t` encoding, `(major << 20) | minor` (not the userspace `st_dev`).
    pub dev: u64,
    pub ino: u64,
    /// The canonical path the identity was found at (for people; the kernel uses dev/ino).
    pub path: PathBuf,
    pub verdict: Verdict,
}

/// An executable by file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameEntry {
    pub name: String,
    pub verdict: Verdict,
}

/// A prefix rule of two or more tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgvRule {
    /// The rule's first token as written (compared with the executed file's name).
    pub program: String,
    /// The alternatives for each following position; at least one position.
    pub rest: Vec<Vec<String>>,
    pub verdict: Verdict,
}

/// A destination network, port and transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationEntry {
    /// IPv4-mapped IPv6 is written as IPv4; host bits are clear.
    pub network: IpNetwork,
    /// `None`: any port.
    pub port: Option<u16>,
    /// `Any` covers TCP and UDP.
    pub transport: Transport,
    pub verdict: Verdict,
    /// The host name the address came from, if any.
    pub host: Option<String>,
}

impl DestinationEntry {
    /// Whether this entry applies to a connection to `ip` (already IPv4 if it was
    /// IPv4-mapped), `port`, over `transport`.
    pub fn covers(&self, ip: std::net::IpAddr, port: u16, transport: Transport) -> bool {
        self.network.contains(ip)
            && self.port.is_none_or(|p| p == port)
            && self.transport.covers(transport)
    }
}

impl EnforcementImage {
    /// The rule a verdict names.
    pub fn rule(&self, verdict: &Verdict) -> &KernelRule {
        &self.rules[verdict.rule as usize]
    }
}
