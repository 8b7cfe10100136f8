//! The authenticated caller a request is decided for.

use serde::{Deserialize, Serialize};

use super::attributes::{Attributes, deserialize_attributes};
use super::error::{AuthzError, Result};

/// Who is asking. `sub` is the caller's identity (what `$sub` stands for and what a record's
/// `owner` is compared with), `attrs` everything else known about them (`uid`, `groups`, ...).
///
/// JSON: `{"sub": "...", "email": "..."?, "attrs": {"KEY": ["VALUE", ...]}?}`; an attribute's
/// value may also be a single string.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    pub sub: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(default, deserialize_with = "deserialize_attributes")]
    pub attrs: Attributes,
}

impl Subject {
    /// Parses the JSON form and refuses an empty `sub`.
    pub fn from_json(text: &str) -> Result<Self> {
        let subject: Subject = serde_json::from_str(text).map_err(|err| AuthzError::json(&err))?;
        if subject.sub.is_empty() {
            return Err(AuthzError::EmptySub);
        }
        Ok(subject)
    }
}
