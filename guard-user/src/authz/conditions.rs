//! Whether a rule's `when` holds for a request: every key must match, each by any of its values.

use std::collections::BTreeMap;

use super::request::Request;
use super::subject::Subject;

/// Keys with this prefix name the request's resource attributes, never the subject's.
pub const RESOURCE_PREFIX: &str = "resource.";
/// Keys with this prefix name the request's environment attributes, never the subject's.
pub const ENV_PREFIX: &str = "env.";
/// A value with this prefix matches when the key does not hold the rest.
pub const NEGATION: char = '!';
/// Values that stand for the caller's own `sub` and `email`.
pub const SUB_TEMPLATE: &str = "$sub";
pub const EMAIL_TEMPLATE: &str = "$email";

pub(crate) fn when_matches(when: &BTreeMap<String, Vec<String>>, request: &Request) -> bool {
    when.iter().all(|(key, values)| {
        let held = resolve(key, request);
        // An empty list never matches: `any` of nothing is false.
        values
            .iter()
            .any(|value| value_matches(value, &held, request.subject))
    })
}

/// The values a key holds, taken from the one source that owns the key.
enum Held<'r> {
    Values(Option<&'r Vec<String>>),
    Value(Option<&'r str>),
}

impl Held<'_> {
    fn contains(&self, wanted: &str) -> bool {
        match self {
            Held::Values(values) => values.is_some_and(|values| values.iter().any(|v| v == wanted)),
            Held::Value(value) => *value == Some(wanted),
        }
    }
}

/// The reserved keys and the two namespaces come first, so an attribute of the subject named
/// `sub`, `entity` or `resource.owner` can never stand in for them.
fn resolve<'r>(key: &str, request: &Request<'r>) -> Held<'r> {
    if let Some(name) = key.strip_prefix(RESOURCE_PREFIX) {
        return Held::Values(request.resource.get(name));
    }
    if let Some(name) = key.strip_prefix(ENV_PREFIX) {
        return Held::Values(request.env.get(name));
    }
    match key {
        "sub" => Held::Value(Some(&request.subject.sub)),
        "email" => Held::Value(request.subject.email.as_deref()),
        "entity" => Held::Value(request.entity),
        _ => Held::Values(request.subject.attrs.get(key)),
    }
}

fn value_matches(value: &str, held: &Held, subject: &Subject) -> bool {
    let (negated, pattern) = match value.strip_prefix(NEGATION) {
        Some(rest) => (true, rest),
        None => (false, value),
    };
    let present = expand(pattern, subject).is_some_and(|wanted| held.contains(wanted));
    present != negated
}

/// What a value compares with: a template's resolution (none for `$email` without an email),
/// else the value itself. Only the exact templates resolve; `$subx` or `a$sub` are literals.
fn expand<'s>(pattern: &'s str, subject: &'s Subject) -> Option<&'s str> {
    match pattern {
        SUB_TEMPLATE => Some(&subject.sub),
        EMAIL_TEMPLATE => subject.email.as_deref(),
        literal => Some(literal),
    }
}
