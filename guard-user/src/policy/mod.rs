//! The `.rules` policy engine: parse files into a [`Policy`], evaluate commands against it, and
//! append amendments. The kernel compiler (`crate::compile`) reads the same [`Policy`].
pub mod address;
pub mod amend;
pub mod approval;
mod chunks;
pub mod destination;
pub mod error;
mod evaluate;
mod examples;
pub mod heuristics;
pub mod host;
pub mod load;
mod model;
pub mod parser;
pub mod patch;
pub mod paths;
pub mod protected;
pub mod reason;
pub mod render;
pub mod rule;
mod rule_index;
pub mod rule_set;
pub mod sandbox;
pub mod shell;
pub mod unix;

pub use destination::{DestinationEvaluation, DestinationMatch};
pub use error::{LoadError, PolicyError};
pub use evaluate::{Evaluation, Fallback, KernelExecVerdict, MatchOptions};
pub use examples::render_example;
pub use model::{LegacyPolicy, NetworkDomains, NetworkHost, Policy};
pub use parser::PolicyParser;
pub use rule::{
    AddressRule, AddressTarget, Decision, DnsCaps, EnforcementOverrides, EnforcementSettings,
    NetworkProtocol, NetworkRule, PatternToken, PrefixPattern, PrefixRule, RuleId, RuleKind,
    RuleMatch, RuleOrigin, SocketKinds, Transport,
};
