//! The legacy engine (docs/policy-language.md §8, the Codex CLI's older `codex-execpolicy-legacy`): policies that
//! describe each program's options and arguments (`define_program`), so that an exec is either
//! fully understood and typed (`safe` when it only reads, `match` when it writes or is
//! unverified), `forbidden`, or `unverified` with the reason no spec could read it; and a
//! check that the files a matched exec reads and writes lie inside allowed folders.
//!
//! [`load_policy`] reads a policy file (or the built-in one), [`classify`] classifies one exec,
//! [`check_folders`] checks a matched exec's files.

mod args;
mod builtins;
mod check;
mod error;
mod matchers;
mod policy;
mod program;

use std::path::Path;

pub use builtins::parse_policy;
pub use check::{Classification, check_folders, classify};
pub use error::Error;
pub use matchers::{ArgMatcher, ArgType};
pub use policy::{ForbiddenProgramRegex, ForbiddenSubstring, Policy};
pub use program::{ExecCall, MatchedArg, MatchedExec, MatchedFlag, MatchedOpt, ValidExec};

/// The name error locations give the built-in policy.
pub const DEFAULT_POLICY_NAME: &str = "<embedded>/default.policy";
/// The built-in policy: read-only commands (`ls`, `cat`, `head`, `rg`, `sed -n START,ENDp`, ...)
/// and `cp`.
pub const DEFAULT_POLICY: &str = include_str!("default.policy");

/// A legacy policy that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("failed to read legacy policy file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{line}")]
    Parse {
        /// `PATH:LINE: MESSAGE (problem is on or around line LINE)`.
        line: String,
        /// Starlark's full diagnostic, with the source excerpt.
        diagnostic: String,
    },
}

/// Reads the policy at `path`, or the built-in one.
pub fn load_policy(path: Option<&Path>) -> Result<Policy, LoadError> {
    let Some(path) = path else {
        return parse_named(DEFAULT_POLICY_NAME, DEFAULT_POLICY);
    };
    let name = path.display().to_string();
    let source = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: name.clone(),
        source,
    })?;
    parse_named(&name, &source)
}

fn parse_named(name: &str, source: &str) -> Result<Policy, LoadError> {
    parse_policy(name, source).map_err(|err| {
        let diagnostic = err.to_string();
        // The `.rules` loader's one-line form, so both engines name file and line alike.
        let line = crate::policy::LoadError::Parse {
            path: name.to_string(),
            source: crate::policy::PolicyError::Starlark(err),
        }
        .display_line();
        LoadError::Parse { line, diagnostic }
    })
}

#[cfg(test)]
mod tests;
