//! The authorization policy: an ordered list of rules, read from JSON, first match decides.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::builtin::is_known_action;
use super::decision::AuthzDecision;
use super::error::{AuthzError, Result};
use super::request::Request;
use super::rule::{ANY_ACTION, Rule};

/// JSON: `{"rules": [RULE, ...]}`; unknown fields are ignored (forward compatibility).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(expecting = "an authorization policy, {\"rules\": [RULE, ...]}")]
pub struct AuthzPolicy {
    pub rules: Vec<Rule>,
}

impl AuthzPolicy {
    /// Parses a policy; an error names the line and column and says what was expected there.
    pub fn from_json(text: &str) -> Result<Self> {
        refuse_a_bare_list(text)?;
        serde_json::from_str(text).map_err(|err| AuthzError::json(&err))
    }

    /// Reads and parses a policy file; an error names the file (and the line and column).
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthzError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text).map_err(|err| err.in_file(path.to_path_buf()))
    }

    /// The first rule that covers the action and whose conditions hold decides; when none
    /// does, the request is refused.
    pub fn evaluate(&self, request: &Request) -> AuthzDecision {
        self.rules
            .iter()
            .enumerate()
            .find(|(_, rule)| rule.applies_to(request))
            .map_or_else(AuthzDecision::refused, |(index, rule)| {
                AuthzDecision::by_rule(index, rule)
            })
    }

    /// The actions rules name that the daemon does not have (most likely typos), with the index
    /// of the rule naming them. They are legal (a newer daemon may have them) but match nothing.
    pub fn unknown_actions(&self) -> Vec<(usize, &str)> {
        self.rules
            .iter()
            .enumerate()
            .flat_map(|(index, rule)| {
                rule.actions
                    .iter()
                    .filter(|action| *action != ANY_ACTION && !is_known_action(action))
                    .map(move |action| (index, action.as_str()))
            })
            .collect()
    }

    /// The policy as pretty JSON, in the shape [`AuthzPolicy::from_json`] reads.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a policy always serialises")
    }
}

/// A top-level list is the likeliest mistake (the rules without their `{"rules": ...}`), and
/// serde would read it as a struct in sequence form with a baffling message: say so plainly.
fn refuse_a_bare_list(text: &str) -> Result<()> {
    // JSON's own whitespace, so the column is serde_json's.
    let Some(offset) = text.find(|c: char| !matches!(c, ' ' | '\t' | '\n' | '\r')) else {
        return Ok(());
    };
    if !text[offset..].starts_with('[') {
        return Ok(());
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |newline| newline + 1) + 1;
    Err(AuthzError::Json {
        line,
        column,
        message: "expected an authorization policy, {\"rules\": [RULE, ...]}, not a list: put \
                  the rules in \"rules\""
            .to_string(),
    })
}
