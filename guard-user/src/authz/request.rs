//! One request to decide: who asks, for which action, on what.

use std::collections::BTreeMap;

use super::attributes::Attributes;
use super::subject::Subject;

/// What a request has when it brings no resource or environment attributes.
static NO_ATTRIBUTES: Attributes = BTreeMap::new();

/// `subject` asks to do `action` on `entity` (one of [`super::ENTITIES`], when the action is
/// about one); `resource` holds the facts of the record acted on (`owner`, ...), `env` those of
/// the circumstances. Rules read them as `resource.NAME` and `env.NAME`.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub subject: &'a Subject,
    pub action: &'a str,
    pub entity: Option<&'a str>,
    pub resource: &'a Attributes,
    pub env: &'a Attributes,
}

impl<'a> Request<'a> {
    /// A request with no entity and no resource or environment attributes.
    pub fn new(subject: &'a Subject, action: &'a str) -> Self {
        Request {
            subject,
            action,
            entity: None,
            resource: &NO_ATTRIBUTES,
            env: &NO_ATTRIBUTES,
        }
    }

    pub fn with_entity(self, entity: &'a str) -> Self {
        Request {
            entity: Some(entity),
            ..self
        }
    }

    pub fn with_resource(self, resource: &'a Attributes) -> Self {
        Request { resource, ..self }
    }

    pub fn with_env(self, env: &'a Attributes) -> Self {
        Request { env, ..self }
    }
}
