//! The three decisions a rule can give, in the order "strongest wins" uses.

/// A rule's verdict on an exec or a destination.
///
/// Totally ordered `Allow < Prompt < Forbidden`: when several rules match, the maximum decides.
/// The discriminants are the codes the kernel programs store in maps and events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "user", serde(rename_all = "camelCase"))]
#[repr(u8)]
pub enum Decision {
    /// Let the call through.
    Allow = 0,
    /// Refuse now and ask a person; an approval makes the retry succeed.
    Prompt = 1,
    /// Refuse, with no way to approve from a prompt.
    Forbidden = 2,
}

impl Decision {
    /// The spelling used in `.rules` files and JSON output.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Prompt => "prompt",
            Decision::Forbidden => "forbidden",
        }
    }

    /// Parses the exact, case-sensitive spelling of `prefix_rule`'s `decision`.
    pub fn from_rules_str(raw: &str) -> Option<Self> {
        match raw {
            "allow" => Some(Decision::Allow),
            "prompt" => Some(Decision::Prompt),
            "forbidden" => Some(Decision::Forbidden),
            _ => None,
        }
    }

    /// The decision a kernel map or event stores as `code` (its discriminant); `None` for any
    /// other byte, such as `DECISION_NONE`.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Decision::Allow),
            1 => Some(Decision::Prompt),
            2 => Some(Decision::Forbidden),
            _ => None,
        }
    }

    /// The stronger of two decisions.
    pub fn strongest(self, other: Self) -> Self {
        if other > self { other } else { self }
    }
}

#[cfg(test)]
mod tests {
    use super::Decision;

    #[test]
    fn order_is_allow_prompt_forbidden() {
        assert!(Decision::Allow < Decision::Prompt);
        assert!(Decision::Prompt < Decision::Forbidden);
        assert_eq!(
            Decision::Allow.strongest(Decision::Forbidden),
            Decision::Forbidden
        );
        assert_eq!(
            Decision::Prompt.strongest(Decision::Allow),
            Decision::Prompt
        );
    }

    #[test]
    fn codes_are_the_discriminants_and_nothing_else() {
        for decision in [Decision::Allow, Decision::Prompt, Decision::Forbidden] {
            assert_eq!(Decision::from_code(decision as u8), Some(decision));
        }
        assert_eq!(Decision::from_code(3), None);
        assert_eq!(Decision::from_code(crate::maps::DECISION_NONE), None);
    }

    #[test]
    fn parse_is_case_sensitive_and_rejects_deny() {
        assert_eq!(Decision::from_rules_str("allow"), Some(Decision::Allow));
        assert_eq!(Decision::from_rules_str("prompt"), Some(Decision::Prompt));
        assert_eq!(
            Decision::from_rules_str("forbidden"),
            Some(Decision::Forbidden)
        );
        assert_eq!(Decision::from_rules_str("Allow"), None);
        assert_eq!(Decision::from_rules_str("deny"), None);
    }
}
