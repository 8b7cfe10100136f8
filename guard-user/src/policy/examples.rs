//! `match` / `not_match` examples of `prefix_rule`: parsed during the call, checked when the file
//! that declared them finishes (docs/policy-language.md §1.5).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use starlark::values::Value;
use starlark::values::list::{ListRef, UnpackList};

use super::error::{ErrorLocation, PolicyError, Result};
use super::evaluate::MatchOptions;
use super::model::Policy;
use super::rule::PrefixRule;

/// One `prefix_rule` call's examples, waiting for the end of its file.
#[derive(Debug)]
pub(crate) struct PendingExamples {
    /// The call's expansions (one per first-token alternative).
    pub rules: Vec<PrefixRule>,
    pub matches: Vec<Vec<String>>,
    pub not_matches: Vec<Vec<String>>,
    /// Where the `prefix_rule(` call starts.
    pub location: Option<ErrorLocation>,
}

impl PendingExamples {
    /// `not_match` first, then `match`; matching resolves host executables and has no fallback.
    pub fn check(&self, host_executables: &HashMap<String, Arc<[PathBuf]>>) -> Result<()> {
        let policy = Policy::from_parts(self.rules.clone(), Vec::new(), host_executables.clone());
        let options = MatchOptions {
            resolve_host_executables: true,
        };
        for example in &self.not_matches {
            if let Some(found) = policy.matches_for_command(example, None, options).first() {
                return Err(PolicyError::ExampleDidMatch {
                    rule: format!("{found:?}"),
                    example: render_example(example),
                    location: self.location.clone(),
                });
            }
        }
        let unmatched: Vec<String> = self
            .matches
            .iter()
            .filter(|example| {
                policy
                    .matches_for_command(example, None, options)
                    .is_empty()
            })
            .map(|example| render_example(example))
            .collect();
        if unmatched.is_empty() {
            return Ok(());
        }
        Err(PolicyError::ExampleDidNotMatch {
            rules: self.rules.iter().map(|rule| format!("{rule:?}")).collect(),
            examples: unmatched,
            location: self.location.clone(),
        })
    }
}

/// Shell-quoted, the way error messages show a command.
pub fn render_example(tokens: &[String]) -> String {
    shlex::try_join(tokens.iter().map(String::as_str))
        .unwrap_or_else(|_| "unable to render example".to_string())
}

pub(crate) fn parse_examples(examples: UnpackList<Value<'_>>) -> Result<Vec<Vec<String>>> {
    examples.items.into_iter().map(parse_example).collect()
}

fn parse_example(value: Value<'_>) -> Result<Vec<String>> {
    let invalid = |msg: String| PolicyError::InvalidExample(msg);
    if let Some(text) = value.unpack_str() {
        let tokens = shlex::split(text)
            .ok_or_else(|| invalid("example string has invalid shell syntax".to_string()))?;
        if tokens.is_empty() {
            return Err(invalid("example cannot be an empty string".to_string()));
        }
        return Ok(tokens);
    }
    let Some(list) = ListRef::from_value(value) else {
        return Err(invalid(format!(
            "example must be a string or list of strings (got {})",
            value.get_type()
        )));
    };
    let tokens = list
        .content()
        .iter()
        .map(|token| {
            token.unpack_str().map(str::to_string).ok_or_else(|| {
                invalid(format!(
                    "example tokens must be strings (got {})",
                    token.get_type()
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if tokens.is_empty() {
        return Err(invalid("example cannot be an empty list".to_string()));
    }
    Ok(tokens)
}
