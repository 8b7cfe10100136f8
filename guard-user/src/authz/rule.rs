//! One authorization rule: an effect, the actions it covers and the conditions it needs.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::conditions::when_matches;
use super::request::Request;

/// The action name that covers every action.
pub const ANY_ACTION: &str = "*";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Allow,
    Deny,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Deny => "deny",
        }
    }
}

/// Read by hand so a wrong effect is reported at the value itself, naming the two choices.
impl<'de> Deserialize<'de> for Effect {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EffectVisitor;

        impl Visitor<'_> for EffectVisitor {
            type Value = Effect;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"allow\" or \"deny\"")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Effect, E> {
                match text {
                    "allow" => Ok(Effect::Allow),
                    "deny" => Ok(Effect::Deny),
                    _ => Err(E::custom(format!(
                        "invalid effect {text:?}: expected \"allow\" or \"deny\""
                    ))),
                }
            }
        }

        deserializer.deserialize_str(EffectVisitor)
    }
}

/// `effect` applies to a request for one of `actions` (`"*"`: any) when every condition in
/// `when` holds. `obligations` are advisory tokens handed to the caller when this rule allows.
///
/// JSON: `{"effect": "allow"|"deny", "actions": [...], "when": {...}?, "obligations": [...]?}`;
/// unknown fields are ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rule {
    pub effect: Effect,
    pub actions: Vec<String>,
    pub when: BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub obligations: Vec<String>,
}

impl Rule {
    /// Whether the rule is about this action at all.
    pub fn covers(&self, action: &str) -> bool {
        self.actions
            .iter()
            .any(|covered| covered == ANY_ACTION || covered == action)
    }

    /// Whether the rule decides this request: it covers the action and its conditions hold.
    pub fn applies_to(&self, request: &Request) -> bool {
        self.covers(request.action) && when_matches(&self.when, request)
    }
}

/// Read by hand rather than derived: a missing `effect` or `actions` gets a message that says
/// what to write, raised while the rule is being read so its position is the rule's end; a
/// list in place of a rule object is refused rather than read as the fields in order.
impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RuleVisitor)
    }
}

struct RuleVisitor;

impl<'de> Visitor<'de> for RuleVisitor {
    type Value = Rule;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(
            "a rule, {\"effect\": \"allow\" or \"deny\", \"actions\": [ACTION, ...], \"when\": \
             {KEY: [VALUE, ...]}, \"obligations\": [TOKEN, ...]}",
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Rule, A::Error> {
        let mut effect = None;
        let mut actions = None;
        let mut when = None;
        let mut obligations = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "effect" => set_once(&mut effect, &key, map.next_value()?)?,
                "actions" => set_once(&mut actions, &key, map.next_value()?)?,
                "when" => set_once(&mut when, &key, map.next_value::<When>()?.0)?,
                "obligations" => set_once(&mut obligations, &key, map.next_value()?)?,
                // Forward compatibility: a newer policy's fields are not this reader's business.
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Rule {
            effect: effect.ok_or_else(|| {
                A::Error::custom("a rule needs \"effect\": \"allow\" or \"deny\"")
            })?,
            actions: actions.ok_or_else(|| {
                A::Error::custom(
                    "a rule needs \"actions\": [\"*\"] for every action, or a list of action \
                     names",
                )
            })?,
            when: when.unwrap_or_default(),
            obligations: obligations.unwrap_or_default(),
        })
    }
}

fn set_once<T, E: serde::de::Error>(slot: &mut Option<T>, key: &str, value: T) -> Result<(), E> {
    if slot.replace(value).is_some() {
        return Err(E::custom(format!("a rule gives \"{key}\" twice")));
    }
    Ok(())
}

/// `when` as written: a key given twice is refused, not silently replaced by the last one (the
/// writer most likely meant both conditions).
struct When(BTreeMap<String, Vec<String>>);

impl<'de> Deserialize<'de> for When {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(WhenVisitor)
    }
}

struct WhenVisitor;

impl<'de> Visitor<'de> for WhenVisitor {
    type Value = When;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of conditions, {KEY: [VALUE, ...], ...}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<When, A::Error> {
        let mut when = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let values = map.next_value_seed(ConditionValues(&key))?;
            if when.insert(key.clone(), values).is_some() {
                return Err(A::Error::custom(format!(
                    "condition \"{key}\" is given twice in \"when\": list its values once (any \
                     of them matches)"
                )));
            }
        }
        Ok(When(when))
    }
}

/// The values of condition `.0`: a list of strings, with errors that name the condition.
struct ConditionValues<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for ConditionValues<'_> {
    type Value = Vec<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ConditionValues<'_> {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a list of values for condition \"{}\", e.g. [\"admin\"]",
            self.0
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut values = Vec::new();
        while let Some(value) = seq.next_element_seed(ConditionValue(self.0))? {
            values.push(value);
        }
        Ok(values)
    }
}

/// One value of condition `.0`.
struct ConditionValue<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for ConditionValue<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_string(self)
    }
}

impl Visitor<'_> for ConditionValue<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a string value for condition \"{}\"", self.0)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<String, E> {
        Ok(text.to_string())
    }
}

/// `allow [audit] when entity=audit, resource.owner=$sub`: the rule in one line for people.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let actions: Vec<String> = self.actions.iter().map(|a| word(a)).collect();
        write!(f, "{} [{}]", self.effect.as_str(), actions.join(", "))?;
        if self.when.is_empty() {
            return f.write_str(" for every subject");
        }
        let conditions: Vec<String> = self
            .when
            .iter()
            .map(|(key, values)| {
                let values = match values.as_slice() {
                    [] => "[]".to_string(),
                    values => values.iter().map(|v| word(v)).collect::<Vec<_>>().join("|"),
                };
                format!("{}={values}", word(key))
            })
            .collect();
        write!(f, " when {}", conditions.join(", "))
    }
}

/// A name or value as is, or JSON-quoted when it would blur the one-line form.
fn word(text: &str) -> String {
    let plain = !text.is_empty()
        && !text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || ",|=[]\"".contains(c));
    if plain {
        text.to_string()
    } else {
        serde_json::to_string(text).expect("a string always serialises")
    }
}
