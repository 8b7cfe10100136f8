//! Attributes: the facts a request brings (the subject's, the resource's, the environment's),
//! each a name with a list of values.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::error::{AuthzError, Result};

/// Attribute name to its values. A name with no values is the same as a name not given.
pub type Attributes = BTreeMap<String, Vec<String>>;

/// Parses a flat JSON object whose values are a string (one value) or a list of strings:
/// `{"owner": "alice", "labels": ["a", "b"]}`.
pub fn parse_attributes(json: &str) -> Result<Attributes> {
    let value: Value = serde_json::from_str(json).map_err(|err| AuthzError::json(&err))?;
    attributes_from_value(value)
}

fn attributes_from_value(value: Value) -> Result<Attributes> {
    let Value::Object(object) = value else {
        return Err(AuthzError::NotAnObject {
            found: kind_of(&value),
        });
    };
    object
        .into_iter()
        .map(|(key, value)| {
            let values = match value {
                Value::String(one) => vec![one],
                Value::Array(items) => items
                    .into_iter()
                    .map(|item| match item {
                        Value::String(text) => Ok(text),
                        other => Err(kind_in_list(&other)),
                    })
                    .collect::<Result<_, _>>()
                    .map_err(|found| AuthzError::AttributeValue {
                        key: key.clone(),
                        found,
                    })?,
                other => {
                    return Err(AuthzError::AttributeValue {
                        key,
                        found: kind_of(&other),
                    });
                }
            };
            Ok((key, values))
        })
        .collect()
}

/// `deserialize_with` for [`Attributes`]: the same string-or-list leniency and messages as
/// [`parse_attributes`], inside a larger document (serde_json adds the position).
pub(crate) fn deserialize_attributes<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Attributes, D::Error> {
    let value = Value::deserialize(deserializer)?;
    attributes_from_value(value).map_err(serde::de::Error::custom)
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn kind_in_list(value: &Value) -> &'static str {
    match value {
        Value::Null => "a list containing null",
        Value::Bool(_) => "a list containing a boolean",
        Value::Number(_) => "a list containing a number",
        Value::String(_) => "a list containing a string",
        Value::Array(_) => "a list containing a list",
        Value::Object(_) => "a list containing an object",
    }
}
