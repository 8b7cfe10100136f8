//! Authorization for the daemon's control socket: who may ask it to do what.
//!
//! A policy is an ordered list of attribute rules (`{"rules": [RULE, ...]}`); the first rule
//! that covers the request's action and whose conditions all hold decides, and a request no
//! rule matches is refused. Conditions compare the subject's attributes, the reserved `sub`,
//! `email` and `entity`, and the request's `resource.*` and `env.*` attributes with the values
//! a rule lists (any of them; `!V` negates; `$sub` and `$email` stand for the caller's own).
//! Evaluation is pure and reads only its arguments, so one policy serves concurrent callers.

mod attributes;
mod builtin;
mod conditions;
mod decision;
mod error;
mod policy;
mod request;
mod rule;
mod subject;

pub use attributes::{Attributes, parse_attributes};
pub use builtin::{
    ACTIONS, AMENDS_ATTRIBUTE, ENTITIES, GROUPS_ATTRIBUTE, IN_GUARD_SCOPE_ATTRIBUTE,
    OWNER_ATTRIBUTE, REFUSED_IN_SCOPE, SCOPE_ATTRIBUTE, UID_ATTRIBUTE, builtin_json,
    is_known_action, is_known_entity,
};
pub use conditions::{EMAIL_TEMPLATE, ENV_PREFIX, NEGATION, RESOURCE_PREFIX, SUB_TEMPLATE};
pub use decision::AuthzDecision;
pub use error::{AuthzError, Result};
pub use policy::AuthzPolicy;
pub use request::Request;
pub use rule::{ANY_ACTION, Effect, Rule};
pub use subject::Subject;

#[cfg(test)]
mod tests;
