//! The [`EnforcementImage`]: everything the kernel programs decide with, as plain tables the map
//! sync writes into BPF maps. Every entry carries a [`Verdict`] whose `rule` indexes
//! [`EnforcementImage::rules`], so an event from the kernel names a rule, its file and its line.

use std::path::PathBuf;
use std::sync::Arc;

use guard_common::limits::{MAX_ARGV_TOKENS, NAME_LEN, TOKEN_MAX_LEN};
use ipnetwork::IpNetwork;

pub use super::destinations::{DestinationKey, DestinationSet};
pub use super::patterns::PatternTables;
pub use crate::policy::RuleKind as KernelRuleKind;
use crate::policy::{Decision, EnforcementSettings, RuleOrigin, Transport};

/// A compiled policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnforcementImage {
    /// What the kernel does where no entry matches, and global audit-only mode.
    pub settings: EnforcementSettings,
    /// Allowed decisions are recorded too (the daemon's `[audit] record_allowed`, not the
    /// policy's).
    pub record_allowed: bool,
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
    /// The files each argv rule's program stands for, so the kernel starts its argv walk at
    /// that program's node for an exec of the file under any name (a hard link, a renamed copy
    /// of the path).
    pub argv_roots: Vec<ArgvRoot>,
    /// Destinations: networks with a port (or any) and a transport, by key, and the host names
    /// the resolver had no address for. Several entries may match one connection; the
    /// strongest verdict among them decides.
    pub destinations: DestinationSet,
    /// Human sentences about rules the kernel cannot fully hold, e.g. a one-token rule whose
    /// program is on no PATH folder.
    pub warnings: Vec<String>,
    /// Exact argv a person approved ([`EnforcementImage::add_exec_approval`]): an exec with
    /// exactly these tokens runs where its decision would be `prompt`; never over `forbidden`.
    pub exec_approvals: Vec<ExecApproval>,
    /// Exact destinations a person approved ([`EnforcementImage::add_destination_approval`]).
    pub destination_approvals: Vec<DestinationApproval>,
    /// Unix socket names a person approved ([`EnforcementImage::add_unix_approval`]).
    pub unix_approvals: Vec<UnixApproval>,
    /// The pattern tables (legacy forbidden regexes and substrings, rule-set `exec(...)`
    /// patterns); their verdicts name rules after the address rules.
    pub patterns: PatternTables,
    /// Unix socket names and prefixes (`unix_rule`s, the built-in lists and the defaults); their
    /// verdicts name rules after the pattern rules.
    pub unix: Vec<UnixEntry>,
    /// Whether a rule's name allows whatever file takes it. Not under an exec allowlist
    /// (`unmatched_exec` not `allow`): there an allow holds only for the files the name resolves
    /// to, by their identity, so a copy named like an allowed program does not run.
    pub allow_by_name: bool,
    /// Stand-in addresses guard's resolver answered for names that are now approved or named
    /// by a rule, and the real address the kernel sends their connects to.
    pub stand_ins: Vec<crate::policy::destination::StandIn>,
}

/// One name or prefix of the unix socket tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnixEntry {
    pub socket: crate::policy::unix::UnixSocket,
    pub verdict: Verdict,
}

/// One approved exec: the exact argv (token 0 is the executed file's name, as in argv rules)
/// and the kernel rule id that names the approval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecApproval {
    pub tokens: Vec<String>,
    /// The scope (cgroup id) whose execs it lets through: only the one whose ask it answered.
    pub scope: u64,
    /// Index into [`EnforcementImage::rules`] (an allow prefix rule with no origin).
    pub rule: u32,
}

/// One approved destination: exactly this address, port and transport (TCP or UDP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationApproval {
    /// IPv4-mapped IPv6 is written as IPv4.
    pub address: std::net::IpAddr,
    pub port: u16,
    pub transport: Transport,
    /// The scope (cgroup id) whose connects and sends it lets through.
    pub scope: u64,
    pub rule: u32,
}

/// One approved unix socket: exactly this address (no prefix), for one scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnixApproval {
    /// The address as the kernel reads it (a pathname without its NUL, an abstract name with
    /// its leading NUL).
    pub address: Vec<u8>,
    /// The scope (cgroup id) whose connects and sends it lets through.
    pub scope: u64,
    pub rule: u32,
}

/// Why an argv cannot be approved: the kernel could not tell it apart from other argvs, so an
/// approval of it would approve more than the person saw.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    #[error("an exec approval needs at least one token, the program's file name")]
    NoTokens,
    #[error(
        "an exec approval of {count} tokens cannot be held: the kernel compares at most \
         {max} tokens of argv (the program's name included), so it could not tell this argv \
         from a longer one; approve a shorter command, or write a prefix rule"
    )]
    TooManyTokens { count: usize, max: usize },
    #[error(
        "an exec approval's first token is empty; it must be the executed file's name (e.g. `git`)"
    )]
    EmptyProgram,
    #[error(
        "an exec approval's first token `{program}` is a path; the kernel compares the \
         executed file's name, so give the name alone (e.g. `git`, not `/usr/bin/git`)"
    )]
    ProgramIsPath { program: String },
    #[error(
        "an exec approval's first token `{program}` is {len} bytes; the kernel compares \
         program names of at most {max} bytes exactly, so a longer one cannot be approved \
         (write a prefix rule for it instead)"
    )]
    ProgramTooLong {
        program: String,
        len: usize,
        max: usize,
    },
    #[error(
        "token {index} of an exec approval is {len} bytes; the kernel compares argv tokens of \
         at most {max} bytes exactly, so a longer one cannot be approved (write a prefix rule \
         that stops before it instead)"
    )]
    TokenTooLong {
        index: usize,
        len: usize,
        max: usize,
    },
    #[error("token {index} of an exec approval contains a NUL byte, which no argv token can hold")]
    TokenHasNul { index: usize },
}

/// Checks that the kernel can match `tokens` exactly, as an argv (token 0: the executed
/// file's name): 1..=[`MAX_ARGV_TOKENS`] tokens, a non-empty name without `/` that fits both
/// an [`ExecName`](guard_common::maps::ExecName), and later tokens of at most
/// [`TOKEN_MAX_LEN`] bytes (the longest the kernel reads), none holding a NUL.
pub fn validate_exec_approval(tokens: &[String]) -> Result<(), ApprovalError> {
    let Some(program) = tokens.first() else {
        return Err(ApprovalError::NoTokens);
    };
    if tokens.len() > MAX_ARGV_TOKENS {
        return Err(ApprovalError::TooManyTokens {
            count: tokens.len(),
            max: MAX_ARGV_TOKENS,
        });
    }
    if program.is_empty() {
        return Err(ApprovalError::EmptyProgram);
    }
    if program.contains('/') {
        return Err(ApprovalError::ProgramIsPath {
            program: program.clone(),
        });
    }
    // Token 0 is the executed file's name as the kernel reads it (< NAME_LEN bytes).
    let name_max = NAME_LEN - 1;
    if program.len() > name_max {
        return Err(ApprovalError::ProgramTooLong {
            program: program.clone(),
            len: program.len(),
            max: name_max,
        });
    }
    for (index, token) in tokens.iter().enumerate() {
        if token.as_bytes().contains(&0) {
            return Err(ApprovalError::TokenHasNul { index });
        }
        if index > 0 && token.len() > TOKEN_MAX_LEN {
            return Err(ApprovalError::TokenTooLong {
                index,
                len: token.len(),
                max: TOKEN_MAX_LEN,
            });
        }
    }
    Ok(())
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

/// A file an argv rule's program stands for: its identity and the program's first token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgvRoot {
    pub dev: u64,
    pub ino: u64,
    pub path: PathBuf,
    pub program: String,
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
    /// The scope (cgroup id) whose lookup of the name this address was answered to; 0: every
    /// scope.
    pub scope: u64,
    pub verdict: Verdict,
    /// The host name the address came from, if any (one copy shared by the name's entries).
    pub host: Option<Arc<str>>,
}

impl DestinationEntry {
    /// Whether this entry applies to a connection of `scope` (0: a scope that asked for no
    /// name) to `ip` (already IPv4 if it was IPv4-mapped), `port`, over `transport`.
    pub fn covers(
        &self,
        scope: u64,
        ip: std::net::IpAddr,
        port: u16,
        transport: Transport,
    ) -> bool {
        (self.scope == 0 || self.scope == scope)
            && self.network.contains(ip)
            && self.port.is_none_or(|p| p == port)
            && self.transport.covers(transport)
    }

    /// What identifies it among the image's entries.
    pub fn key(&self) -> super::destinations::DestinationKey {
        (self.network, self.port, self.transport, self.scope)
    }
}

impl EnforcementImage {
    /// The host names the resolver looked up and had no address for (sorted): their rules
    /// hold nothing in the kernel until the names resolve.
    pub fn unresolved_hosts(&self) -> Vec<String> {
        self.destinations
            .unresolved_hosts()
            .map(str::to_string)
            .collect()
    }

    /// The rule a verdict names.
    pub fn rule(&self, verdict: &Verdict) -> &KernelRule {
        &self.rules[verdict.rule as usize]
    }

    /// Approves one exact argv: once the maps hold this image, an exec whose argv is exactly
    /// `tokens` (token 0 compared with the executed file's name, as argv rules are) runs where
    /// it would be decided `prompt`, by a rule or by the unmatched default. Anything else, a
    /// longer argv included, is decided as before, and `forbidden` is never overridden.
    ///
    /// Adds an allow [`KernelRule`] with `text` and `summary` (what events and `guard` output
    /// show; no justification, no origin) and returns its rule id. Fails, changing nothing,
    /// when the kernel could not match `tokens` exactly (see [`validate_exec_approval`]).
    /// Only the processes of `scope` (a cgroup id, as the kernel's scope lookup finds it) are
    /// let through: an approval answers the ask of one scope.
    pub fn add_exec_approval(
        &mut self,
        scope: u64,
        tokens: &[String],
        text: String,
        summary: String,
    ) -> Result<u32, ApprovalError> {
        validate_exec_approval(tokens)?;
        let rule = u32::try_from(self.rules.len()).expect("fewer than 2^32 rules");
        self.rules.push(KernelRule {
            kind: KernelRuleKind::Prefix,
            text,
            summary,
            decision: Decision::Allow,
            justification: None,
            origin: None,
        });
        self.exec_approvals.push(ExecApproval {
            tokens: tokens.to_vec(),
            scope,
            rule,
        });
        Ok(rule)
    }

    /// Approves one exact destination: once the maps hold this image, a connection (or UDP
    /// send) to exactly `address`, `port` over `transport` goes through where it would be
    /// decided `prompt`. Other ports, transports and addresses are decided as before, and
    /// `forbidden` is never overridden. Adds an allow [`KernelRule`] and returns its id.
    /// `transport` must be TCP or UDP (a request has one). Only the processes of `scope` are
    /// let through.
    pub fn add_destination_approval(
        &mut self,
        scope: u64,
        address: std::net::IpAddr,
        port: u16,
        transport: Transport,
        text: String,
        summary: String,
    ) -> u32 {
        debug_assert!(transport != Transport::Any, "a request has one transport");
        let rule = u32::try_from(self.rules.len()).expect("fewer than 2^32 rules");
        self.rules.push(KernelRule {
            kind: KernelRuleKind::Address,
            text,
            summary,
            decision: Decision::Allow,
            justification: None,
            origin: None,
        });
        self.destination_approvals.push(DestinationApproval {
            address: crate::policy::rule::canonical_ip(address),
            port,
            transport,
            scope,
            rule,
        });
        rule
    }

    /// Approves one unix socket address (as the kernel reads it): once the maps hold this
    /// image, a connect or send to exactly it goes through where it would be decided `prompt`,
    /// for the processes of `scope` alone. Other addresses are decided as before, and
    /// `forbidden` is never overridden. Adds an allow [`KernelRule`] and returns its id.
    pub fn add_unix_approval(
        &mut self,
        scope: u64,
        address: Vec<u8>,
        text: String,
        summary: String,
    ) -> u32 {
        let rule = u32::try_from(self.rules.len()).expect("fewer than 2^32 rules");
        self.rules.push(KernelRule {
            kind: KernelRuleKind::Unix,
            text,
            summary,
            decision: Decision::Allow,
            justification: None,
            origin: None,
        });
        self.unix_approvals.push(UnixApproval {
            address,
            scope,
            rule,
        });
        rule
    }

    /// The strongest verdict among the entries that cover a destination in `scope` (what the
    /// kernel decides, approvals aside); `None` when no entry does.
    pub fn destination_verdict(
        &self,
        scope: u64,
        ip: std::net::IpAddr,
        port: u16,
        transport: Transport,
    ) -> Option<Verdict> {
        let ip = crate::policy::rule::canonical_ip(ip);
        self.destinations
            .iter()
            .filter(|e| e.covers(scope, ip, port, transport))
            .map(|e| e.verdict)
            .reduce(|kept, v| if v.beats(&kept) { v } else { kept })
    }
}
