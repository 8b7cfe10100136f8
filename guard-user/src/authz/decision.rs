//! The answer to a request, and its JSON form.

use serde::{Deserialize, Serialize};

use super::rule::{Effect, Rule};

/// Whether the request is allowed, by which rule (its 0-based index; `None`: no rule matched,
/// so it is refused) and the obligations the allowing rule carries.
///
/// JSON: `{"decision": "allow"|"deny", "rule": INDEX|null, "obligations": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "DecisionJson", from = "DecisionJson")]
pub struct AuthzDecision {
    pub allowed: bool,
    pub rule: Option<usize>,
    pub obligations: Vec<String>,
}

impl AuthzDecision {
    /// No rule matched: requests no rule allows are refused.
    pub fn refused() -> Self {
        AuthzDecision {
            allowed: false,
            rule: None,
            obligations: Vec::new(),
        }
    }

    /// Rule `index` decided. A denial carries no obligations: they tell an allowed caller how
    /// to proceed, and there is nothing to proceed with.
    pub fn by_rule(index: usize, rule: &Rule) -> Self {
        let allowed = rule.effect == Effect::Allow;
        AuthzDecision {
            allowed,
            rule: Some(index),
            obligations: if allowed {
                rule.obligations.clone()
            } else {
                Vec::new()
            },
        }
    }

    pub fn effect(&self) -> Effect {
        if self.allowed {
            Effect::Allow
        } else {
            Effect::Deny
        }
    }
}

#[derive(Serialize, Deserialize)]
struct DecisionJson {
    decision: Effect,
    rule: Option<usize>,
    #[serde(default)]
    obligations: Vec<String>,
}

impl From<AuthzDecision> for DecisionJson {
    fn from(decision: AuthzDecision) -> Self {
        DecisionJson {
            decision: decision.effect(),
            rule: decision.rule,
            obligations: decision.obligations,
        }
    }
}

impl From<DecisionJson> for AuthzDecision {
    fn from(json: DecisionJson) -> Self {
        AuthzDecision {
            allowed: json.decision == Effect::Allow,
            rule: json.rule,
            obligations: json.obligations,
        }
    }
}
