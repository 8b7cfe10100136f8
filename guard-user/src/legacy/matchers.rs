//! Argument matchers of the legacy engine (docs/policy-language.md §8.1): what a positional pattern or an opt's
//! value may be, how many arguments a pattern takes, and how one value is validated.

use std::fmt;

use serde::{Serialize, Serializer};

use super::error::Error;

/// A pattern in `define_program(args=[...])`, or the type of `opt(name, type)`. A plain string
/// in a policy is a [`ArgMatcher::Literal`]; the others are the `ARG_*` globals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgMatcher {
    Literal(String),
    OpaqueNonFile,
    ReadableFile,
    WriteableFile,
    ReadableFiles,
    ReadableFilesOrCwd,
    PositiveInteger,
    SedCommand,
    UnverifiedVarargs,
}

/// How many positional arguments one pattern takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cardinality {
    One,
    AtLeastOne,
    ZeroOrMore,
}

/// What a matched argument or opt value is, as reported in `exec` and read by the folder check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgType {
    Literal(String),
    OpaqueNonFile,
    ReadableFile,
    WriteableFile,
    PositiveInteger,
    SedCommand,
    Unknown,
}

impl ArgMatcher {
    /// The `ARG_*` globals a policy sees, by name.
    pub const PREDEFINED: [(&'static str, ArgMatcher); 8] = [
        ("ARG_OPAQUE_VALUE", ArgMatcher::OpaqueNonFile),
        ("ARG_RFILE", ArgMatcher::ReadableFile),
        ("ARG_WFILE", ArgMatcher::WriteableFile),
        ("ARG_RFILES", ArgMatcher::ReadableFiles),
        ("ARG_RFILES_OR_CWD", ArgMatcher::ReadableFilesOrCwd),
        ("ARG_POS_INT", ArgMatcher::PositiveInteger),
        ("ARG_SED_COMMAND", ArgMatcher::SedCommand),
        ("ARG_UNVERIFIED_VARARGS", ArgMatcher::UnverifiedVarargs),
    ];

    pub fn cardinality(&self) -> Cardinality {
        match self {
            ArgMatcher::ReadableFiles => Cardinality::AtLeastOne,
            ArgMatcher::ReadableFilesOrCwd | ArgMatcher::UnverifiedVarargs => {
                Cardinality::ZeroOrMore
            }
            _ => Cardinality::One,
        }
    }

    pub fn arg_type(&self) -> ArgType {
        match self {
            ArgMatcher::Literal(value) => ArgType::Literal(value.clone()),
            ArgMatcher::OpaqueNonFile => ArgType::OpaqueNonFile,
            ArgMatcher::ReadableFile
            | ArgMatcher::ReadableFiles
            | ArgMatcher::ReadableFilesOrCwd => ArgType::ReadableFile,
            ArgMatcher::WriteableFile => ArgType::WriteableFile,
            ArgMatcher::PositiveInteger => ArgType::PositiveInteger,
            ArgMatcher::SedCommand => ArgType::SedCommand,
            ArgMatcher::UnverifiedVarargs => ArgType::Unknown,
        }
    }

    /// The name a policy writes it with: `ARG_RFILES`, or the literal itself for a literal.
    fn global_name(&self) -> Option<&'static str> {
        ArgMatcher::PREDEFINED
            .iter()
            .find(|(_, matcher)| matcher == self)
            .map(|(name, _)| *name)
    }
}

impl fmt::Display for ArgMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.global_name()) {
            (ArgMatcher::Literal(value), _) => write!(f, "{value:?}"),
            (_, Some(name)) => f.write_str(name),
            (_, None) => unreachable!("every matcher but a literal is predefined"),
        }
    }
}

/// In error JSON a matcher is its global's name, or `{"literal": VALUE}`.
impl Serialize for ArgMatcher {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ArgMatcher::Literal(value) => {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("literal", value)?;
                map.end()
            }
            other => serializer.serialize_str(other.global_name().unwrap_or_default()),
        }
    }
}

impl ArgType {
    pub fn name(&self) -> &'static str {
        match self {
            ArgType::Literal(_) => "Literal",
            ArgType::OpaqueNonFile => "OpaqueNonFile",
            ArgType::ReadableFile => "ReadableFile",
            ArgType::WriteableFile => "WriteableFile",
            ArgType::PositiveInteger => "PositiveInteger",
            ArgType::SedCommand => "SedCommand",
            ArgType::Unknown => "Unknown",
        }
    }

    /// Whether an exec with a value of this type may do something the policy cannot vouch for:
    /// write a file, or anything at all (Unknown). Such a match is `match`, not `safe`.
    pub fn might_write_files(&self) -> bool {
        matches!(self, ArgType::WriteableFile | ArgType::Unknown)
    }

    /// Checks one value against the type (the "value check" column of §8.1's table).
    pub fn validate(&self, value: &str) -> Result<(), Error> {
        match self {
            ArgType::Literal(expected) if expected != value => {
                Err(Error::LiteralValueDidNotMatch {
                    expected: expected.clone(),
                    actual: value.to_string(),
                })
            }
            ArgType::ReadableFile | ArgType::WriteableFile if value.is_empty() => {
                Err(Error::EmptyFileName {})
            }
            ArgType::PositiveInteger if !matches!(parse_u64(value), Some(n) if n > 0) => {
                Err(Error::InvalidPositiveInteger {
                    value: value.to_string(),
                })
            }
            ArgType::SedCommand if !is_provably_safe_sed_command(value) => {
                Err(Error::SedCommandNotProvablySafe {
                    command: value.to_string(),
                })
            }
            _ => Ok(()),
        }
    }
}

impl Serialize for ArgType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Decimal digits only, as a u64. Rust's own `parse` takes a leading `+`, which §8.1 refuses.
fn parse_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Only `START,ENDp` (print a range of lines) is known to be harmless: any other sed script
/// could write files (`w`) or run commands (`e`).
fn is_provably_safe_sed_command(command: &str) -> bool {
    command
        .strip_suffix('p')
        .and_then(|range| range.split_once(','))
        .is_some_and(|(start, end)| parse_u64(start).is_some() && parse_u64(end).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_integers_are_plain_decimal_above_zero() {
        let int = ArgType::PositiveInteger;
        for good in ["1", "42", "007", "18446744073709551615"] {
            assert_eq!(int.validate(good), Ok(()), "{good}");
        }
        for bad in [
            "0",
            "",
            "1.0",
            "+1",
            "-1",
            " 1",
            "18446744073709551616",
            "1e3",
        ] {
            assert_eq!(
                int.validate(bad),
                Err(Error::InvalidPositiveInteger {
                    value: bad.to_string()
                }),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_line_range_prints_are_safe_sed_commands() {
        let sed = ArgType::SedCommand;
        for good in ["122,202p", "0,0p", "1,1p"] {
            assert_eq!(sed.validate(good), Ok(()), "{good}");
        }
        for bad in [
            "5p", "1,2", "1,2w out", "p", ",p", "1,p", "a,2p", "1,2pp", "s/a/b/", "+1,2p",
        ] {
            assert!(
                matches!(
                    sed.validate(bad),
                    Err(Error::SedCommandNotProvablySafe { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn files_must_be_named_and_literals_equal() {
        assert_eq!(
            ArgType::ReadableFile.validate(""),
            Err(Error::EmptyFileName {})
        );
        assert_eq!(
            ArgType::WriteableFile.validate(""),
            Err(Error::EmptyFileName {})
        );
        assert_eq!(ArgType::OpaqueNonFile.validate(""), Ok(()));
        assert_eq!(ArgType::Unknown.validate(""), Ok(()));
        assert_eq!(
            ArgType::Literal("push".into()).validate("pull"),
            Err(Error::LiteralValueDidNotMatch {
                expected: "push".into(),
                actual: "pull".into()
            })
        );
    }

    #[test]
    fn cardinalities_and_types_follow_the_table() {
        use ArgMatcher as M;
        let expected = [
            (M::OpaqueNonFile, Cardinality::One, ArgType::OpaqueNonFile),
            (M::ReadableFile, Cardinality::One, ArgType::ReadableFile),
            (M::WriteableFile, Cardinality::One, ArgType::WriteableFile),
            (
                M::ReadableFiles,
                Cardinality::AtLeastOne,
                ArgType::ReadableFile,
            ),
            (
                M::ReadableFilesOrCwd,
                Cardinality::ZeroOrMore,
                ArgType::ReadableFile,
            ),
            (
                M::PositiveInteger,
                Cardinality::One,
                ArgType::PositiveInteger,
            ),
            (M::SedCommand, Cardinality::One, ArgType::SedCommand),
            (
                M::UnverifiedVarargs,
                Cardinality::ZeroOrMore,
                ArgType::Unknown,
            ),
        ];
        for (matcher, cardinality, arg_type) in expected {
            assert_eq!(matcher.cardinality(), cardinality, "{matcher}");
            assert_eq!(matcher.arg_type(), arg_type, "{matcher}");
        }
    }
}
