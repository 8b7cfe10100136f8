//! Policy → [`EnforcementImage`]: what the kernel programs need to decide, with every entry
//! pointing back at the rule (file and line) it came from. Host names are resolved through a
//! [`HostResolver`] snapshot (`crate::resolve::lookup` keeps one fresh; compiling does no DNS).
//!
//! [`compile`] is pure apart from `stat`: the same policy, resolver snapshot and PATH give the
//! same image. How each rule becomes kernel entries:
//!
//! - a one-token `prefix_rule` becomes a program identity (device + inode) for every file the
//!   name is on PATH or at one of its `host_executable` paths, plus a name entry (an absolute
//!   first token: that file's identity only);
//! - a longer `prefix_rule` becomes an argv rule;
//! - a `network_rule` host becomes destination entries with its §2.4 decision, on the ports its
//!   protocols use (`http` TCP 80, `https` TCP+UDP 443, `socks5_tcp`/`socks5_udp` any port);
//! - an `address_rule` becomes one entry per address (or resolved name) and port;
//! - a legacy policy's `forbid_program_regex` and `forbid_substrings`, and a rule set's
//!   `exec(...)` patterns, become pattern tables ([`patterns`]), walked by the kernel.
pub mod destination_maps;
mod destination_twin;
pub mod destinations;
pub mod dfa;
pub mod encode;
mod exec;
mod exec_twin;
pub mod image;
pub mod kernel_engine;
pub mod loader;
mod network;
pub mod patterns;
pub mod unix;

pub use network::host_names;

use std::path::PathBuf;

pub use crate::policy::destination::{HostResolver, NoResolver};
pub use destination_twin::{DestinationTwin, KernelDestinationDecision, prompts_udp};
pub use exec::kernel_dev;
pub use exec_twin::{ExecTwin, KernelExecDecision, kernel_exec_decision};
pub use image::{
    ApprovalError, ArgvRule, DestinationEntry, DestinationKey, DestinationSet, EnforcementImage,
    ExecApproval, IdentityEntry, KernelRule, KernelRuleKind, NameEntry, Verdict,
    validate_exec_approval,
};

use crate::policy::Policy;
use crate::policy::render::{
    address_rule_summary, address_rule_text, network_rule_summary, network_rule_text,
    prefix_rule_summary, prefix_rule_text,
};

/// What compiling reads from the machine: where bare program names are looked up, and where
/// the dynamic loaders are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileEnv {
    /// The folders a bare name is looked up in, in order (absolute paths only).
    pub path_dirs: Vec<PathBuf>,
    /// The folders searched for dynamic loaders, whose direct execs are refused unless a rule
    /// names them (`loader`); empty: none.
    pub loader_dirs: Vec<PathBuf>,
    /// Take an exec's file to be the one its name resolves to, even under an exec allowlist
    /// (where the kernel lets a name allow only by the files' identities): for `guard replay`,
    /// whose recorded execs are known by their path alone.
    pub names_are_their_files: bool,
}

/// `PATH` when the process has none: the usual system folders.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl CompileEnv {
    /// The folders of this process's `$PATH` ([`DEFAULT_PATH`] when unset). Empty and relative
    /// entries are dropped: they depend on a current directory, which the kernel does not share.
    pub fn from_process() -> Self {
        let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
        Self::from_path_var(&path)
    }

    /// The folders of a `PATH`-style value, and the system's library folders for loaders.
    pub fn from_path_var(path: &std::ffi::OsStr) -> Self {
        CompileEnv {
            path_dirs: std::env::split_paths(path)
                .filter(|dir| dir.is_absolute())
                .collect(),
            loader_dirs: loader::system_loader_dirs(),
            names_are_their_files: false,
        }
    }
}

/// Compiles `policy` into the tables the kernel decides with. Host names are looked up in
/// `resolver` (names it does not know end up in `unresolved_hosts`), bare program names in
/// `env.path_dirs`.
pub fn compile(policy: &Policy, resolver: &dyn HostResolver, env: &CompileEnv) -> EnforcementImage {
    let mut rules = kernel_rules(policy);
    let network_base = policy.prefix_rules().len() as u32;
    let address_base = network_base + policy.network_rules().len() as u32;
    let exec = exec::compile_exec(policy, env);
    let sources = network::destination_sources(policy, network_base, address_base);
    let destinations = destinations::DestinationSet::compile(sources, resolver);
    let patterns = patterns::compile_patterns(policy, rules.len() as u32);
    rules.extend(patterns.rules);
    let (unix_rules, unix) = unix::compile_unix(policy, rules.len() as u32);
    rules.extend(unix_rules);
    let mut identities = exec.identities;
    loader::forbid_direct_loader_execs(&env.loader_dirs, &mut rules, &mut identities, &exec.names);
    let warnings = exec.warnings;
    EnforcementImage {
        settings: policy.enforcement(),
        record_allowed: false,
        rules,
        identities,
        names: exec.names,
        argv_rules: exec.argv_rules,
        argv_roots: exec.argv_roots,
        destinations,
        warnings,
        exec_approvals: Vec::new(),
        destination_approvals: Vec::new(),
        unix_approvals: Vec::new(),
        patterns: patterns.tables,
        unix,
        allow_by_name: policy.enforcement().unmatched_exec == crate::policy::Decision::Allow
            || env.names_are_their_files,
        stand_ins: resolver.stand_ins(),
    }
}

/// Names whose addresses changed since the image was compiled, and how.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameChanges {
    /// Changed in any way (a refresh, an expiry, an eviction): every source that covers one is
    /// compiled again.
    pub changed: Vec<String>,
    /// Only gained addresses (guard's resolver answered them: an answer adds, it never
    /// removes): a pattern over one only gains its addresses, without a look at every other
    /// name the pattern covers.
    pub grown: Vec<String>,
}

impl NameChanges {
    /// `names` changed in any way.
    pub fn any(names: &[String]) -> NameChanges {
        NameChanges {
            changed: names.to_vec(),
            grown: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.grown.is_empty()
    }

    /// `names` changed in any way too (a name that also grew is compiled again all the same).
    pub fn add_changed(&mut self, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        self.changed.extend(names);
        self.changed.sort();
        self.changed.dedup();
        let changed = &self.changed;
        self.grown
            .retain(|name| changed.binary_search(name).is_err());
    }
}

/// Compiles again the destination entries of the sources `names` cover (their addresses
/// changed: guard's resolver answered them, a refresh or an expiry), with what `resolver` knows
/// now, and the stand-ins; the rest of the image, the approvals included, is kept. Returns the
/// keys whose entry changed, came or went.
pub fn update_destinations(
    image: &mut EnforcementImage,
    names: &[String],
    resolver: &dyn HostResolver,
) -> Vec<DestinationKey> {
    update_destinations_by(image, &NameChanges::any(names), resolver)
}

/// [`update_destinations`] for `changes`, where a grown name costs its own sources' work.
pub fn update_destinations_by(
    image: &mut EnforcementImage,
    changes: &NameChanges,
    resolver: &dyn HostResolver,
) -> Vec<DestinationKey> {
    let mut touched = Vec::new();
    for name in &changes.changed {
        touched.extend(image.destinations.update_name(name, resolver));
    }
    for name in changes
        .grown
        .iter()
        .filter(|n| !changes.changed.contains(n))
    {
        touched.extend(image.destinations.grow_name(name, resolver));
    }
    touched.sort();
    touched.dedup();
    image.stand_ins = resolver.stand_ins();
    touched
}

/// Every rule of the policy, in the order prefix rules, network rules, address rules (the
/// pattern rules follow, see [`patterns`]).
fn kernel_rules(policy: &Policy) -> Vec<KernelRule> {
    let prefix = policy.prefix_rules().iter().map(|rule| KernelRule {
        kind: KernelRuleKind::Prefix,
        text: prefix_rule_text(rule),
        summary: prefix_rule_summary(rule),
        decision: rule.decision,
        justification: rule.justification.clone(),
        origin: rule.origin.clone(),
    });
    let network = policy.network_rules().iter().map(|rule| KernelRule {
        kind: KernelRuleKind::Network,
        text: network_rule_text(rule),
        summary: network_rule_summary(rule),
        decision: rule.decision,
        justification: rule.justification.clone(),
        origin: rule.origin.clone(),
    });
    let address = policy.address_rules().iter().map(|rule| KernelRule {
        kind: KernelRuleKind::Address,
        text: address_rule_text(rule),
        summary: address_rule_summary(rule),
        decision: rule.decision,
        justification: rule.justification.clone(),
        origin: rule.origin.clone(),
    });
    prefix.chain(network).chain(address).collect()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod test_support {
    use std::collections::HashMap;
    use std::net::IpAddr;

    use super::HostResolver;

    /// A fixed name → addresses table.
    pub struct Table(HashMap<String, Vec<IpAddr>>);

    impl Table {
        pub fn new(entries: &[(&str, &[&str])]) -> Self {
            Table(
                entries
                    .iter()
                    .map(|(name, ips)| {
                        (
                            name.to_string(),
                            ips.iter().map(|ip| ip.parse().unwrap()).collect(),
                        )
                    })
                    .collect(),
            )
        }
    }

    impl HostResolver for Table {
        fn lookup(&self, host: &str) -> Vec<IpAddr> {
            self.0.get(host).cloned().unwrap_or_default()
        }
    }
}
