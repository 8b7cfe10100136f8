//! The `.rules` policy engine: parse files into a [`Policy`], evaluate commands against it, and
//! append amendments. The kernel compiler (a later issue) reads the same [`Policy`].
pub mod amend;
pub mod error;
mod evaluate;
mod examples;
pub mod heuristics;
pub mod host;
pub mod load;
mod model;
pub mod parser;
pub mod paths;
pub mod reason;
pub mod rule;
pub mod shell;

pub use error::{LoadError, PolicyError};
pub use evaluate::{Evaluation, Fallback, MatchOptions};
pub use examples::render_example;
pub use model::{NetworkDomains, Policy};
pub use parser::PolicyParser;
pub use rule::{
    Decision, NetworkProtocol, NetworkRule, PatternToken, PrefixPattern, PrefixRule, RuleId,
    RuleMatch, RuleOrigin,
};
