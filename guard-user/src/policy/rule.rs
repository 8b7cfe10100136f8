//! The rules a policy holds, and what a match of one reports.
//!
//! Rules remember where they were written ([`RuleOrigin`]) and carry a [`RuleId`], so a decision
//! made in the kernel or by `guard check` can name the rule, its file and its line.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

pub use guard_common::Decision;

use super::error::{PolicyError, Result};

/// The file and line a rule was written on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RuleOrigin {
    pub file: Arc<str>,
    pub line: usize,
}

impl fmt::Display for RuleOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A prefix rule's position in its policy, in load order. Stable for one loaded policy; the
/// kernel reports it back in events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct RuleId(pub u32);

/// One position of a prefix pattern: an exact token, or alternatives for it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PatternToken {
    Single(String),
    Alts(Vec<String>),
}

impl PatternToken {
    pub fn matches(&self, token: &str) -> bool {
        self.alternatives().iter().any(|alt| alt == token)
    }

    pub fn alternatives(&self) -> &[String] {
        match self {
            PatternToken::Single(token) => std::slice::from_ref(token),
            PatternToken::Alts(alts) => alts,
        }
    }

    /// `git` as itself, alternatives as `[a|b]` (the form of `allowed_prefixes`).
    pub fn render(&self) -> String {
        match self {
            PatternToken::Single(token) => token.clone(),
            PatternToken::Alts(alts) => format!("[{}]", alts.join("|")),
        }
    }
}

/// A prefix pattern whose first token is fixed: rules are indexed by it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PrefixPattern {
    pub first: Arc<str>,
    pub rest: Arc<[PatternToken]>,
}

impl PrefixPattern {
    /// The matched argv prefix (the command's own tokens), if `cmd` starts with this pattern.
    pub fn matches_prefix(&self, cmd: &[String]) -> Option<Vec<String>> {
        let len = self.rest.len() + 1;
        if cmd.len() < len || cmd[0] != *self.first {
            return None;
        }
        let rest_matches = self
            .rest
            .iter()
            .zip(&cmd[1..len])
            .all(|(pattern, token)| pattern.matches(token));
        rest_matches.then(|| cmd[..len].to_vec())
    }
}

/// `prefix_rule(...)` after first-position expansion: one rule per first token.
#[derive(Clone, PartialEq, Eq)]
pub struct PrefixRule {
    pub id: RuleId,
    pub pattern: PrefixPattern,
    pub decision: Decision,
    pub justification: Option<String>,
    pub origin: Option<RuleOrigin>,
}

/// The reference's derived `Debug` shape, which example-validation errors quote verbatim; the id
/// and origin are guard's own and stay out of it.
impl fmt::Debug for PrefixRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrefixRule")
            .field("pattern", &self.pattern)
            .field("decision", &self.decision)
            .field("justification", &self.justification)
            .finish()
    }
}

impl PrefixRule {
    pub fn program(&self) -> &str {
        &self.pattern.first
    }

    pub fn matches(&self, cmd: &[String]) -> Option<RuleMatch> {
        self.pattern
            .matches_prefix(cmd)
            .map(|matched_prefix| RuleMatch::PrefixRuleMatch {
                matched_prefix,
                decision: self.decision,
                resolved_program: None,
                justification: self.justification.clone(),
                rule_id: self.id,
                origin: self.origin.clone(),
            })
    }
}

/// The result of evaluating one command against one rule (or against the fallback).
#[derive(Clone, PartialEq, Eq)]
pub enum RuleMatch {
    PrefixRuleMatch {
        /// The command's own tokens that the pattern covered.
        matched_prefix: Vec<String>,
        decision: Decision,
        /// The absolute path `argv[0]` resolved to, when the match came from host-executable
        /// resolution.
        resolved_program: Option<PathBuf>,
        justification: Option<String>,
        rule_id: RuleId,
        origin: Option<RuleOrigin>,
    },
    HeuristicsRuleMatch {
        command: Vec<String>,
        decision: Decision,
    },
}

impl RuleMatch {
    pub fn decision(&self) -> Decision {
        match self {
            RuleMatch::PrefixRuleMatch { decision, .. }
            | RuleMatch::HeuristicsRuleMatch { decision, .. } => *decision,
        }
    }

    /// True for a match of a written rule, false for a fallback verdict.
    pub fn is_policy_match(&self) -> bool {
        matches!(self, RuleMatch::PrefixRuleMatch { .. })
    }
}

/// The reference's derived `Debug` shape (quoted by `not_match` errors).
impl fmt::Debug for RuleMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct AbsolutePathBuf<'a>(&'a PathBuf);
        impl fmt::Debug for AbsolutePathBuf<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple("AbsolutePathBuf").field(self.0).finish()
            }
        }
        match self {
            RuleMatch::PrefixRuleMatch {
                matched_prefix,
                decision,
                resolved_program,
                justification,
                ..
            } => f
                .debug_struct("PrefixRuleMatch")
                .field("matched_prefix", matched_prefix)
                .field("decision", decision)
                .field(
                    "resolved_program",
                    &resolved_program.as_ref().map(AbsolutePathBuf),
                )
                .field("justification", justification)
                .finish(),
            RuleMatch::HeuristicsRuleMatch { command, decision } => f
                .debug_struct("HeuristicsRuleMatch")
                .field("command", command)
                .field("decision", decision)
                .finish(),
        }
    }
}

/// The protocols a `network_rule` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NetworkProtocol {
    Http,
    Https,
    Socks5Tcp,
    Socks5Udp,
}

impl NetworkProtocol {
    /// Parses the exact spellings the reference accepts, aliases included
    /// (`https_connect`, `http-connect`; not `https-connect` or `http_connect`).
    pub fn parse(raw: &str) -> Result<Self> {
        match raw {
            "http" => Ok(Self::Http),
            "https" | "https_connect" | "http-connect" => Ok(Self::Https),
            "socks5_tcp" => Ok(Self::Socks5Tcp),
            "socks5_udp" => Ok(Self::Socks5Udp),
            other => Err(PolicyError::InvalidRule(format!(
                "network_rule protocol must be one of http, https, socks5_tcp, socks5_udp (got {other})"
            ))),
        }
    }

    /// The canonical spelling written back to files and shown in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
            Self::Socks5Tcp => "socks5_tcp",
            Self::Socks5Udp => "socks5_udp",
        }
    }
}

impl fmt::Display for NetworkProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `network_rule(...)` with its host normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkRule {
    pub host: String,
    pub protocol: NetworkProtocol,
    pub decision: Decision,
    pub justification: Option<String>,
    pub origin: Option<RuleOrigin>,
}

/// `decision=` of `prefix_rule` (and of `network_rule` after its `deny` alias).
pub fn parse_decision(raw: &str) -> Result<Decision> {
    Decision::from_rules_str(raw).ok_or_else(|| PolicyError::InvalidDecision(raw.to_string()))
}

/// `network_rule` also accepts `deny`, meaning forbidden.
pub fn parse_network_decision(raw: &str) -> Result<Decision> {
    match raw {
        "deny" => Ok(Decision::Forbidden),
        other => parse_decision(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(tokens: &[&str]) -> Vec<String> {
        tokens.iter().map(|t| t.to_string()).collect()
    }

    fn pattern(first: &str, rest: Vec<PatternToken>) -> PrefixPattern {
        PrefixPattern {
            first: first.into(),
            rest: rest.into(),
        }
    }

    #[test]
    fn prefix_matching_is_exact_and_reports_the_command_tokens() {
        let p = pattern("git", vec![PatternToken::Alts(argv(&["status", "log"]))]);
        assert_eq!(
            p.matches_prefix(&argv(&["git", "log", "-1"])),
            Some(argv(&["git", "log"]))
        );
        assert_eq!(p.matches_prefix(&argv(&["git"])), None);
        assert_eq!(p.matches_prefix(&argv(&["git", "-C", "x", "status"])), None);
        assert_eq!(p.matches_prefix(&argv(&["Git", "status"])), None);
    }

    #[test]
    fn star_and_spaces_are_literal_tokens() {
        let star = pattern("ls", vec![PatternToken::Single("*".into())]);
        assert!(star.matches_prefix(&argv(&["ls", "*"])).is_some());
        assert!(star.matches_prefix(&argv(&["ls", "a"])).is_none());
        let spaced = pattern("git status", vec![]);
        assert!(spaced.matches_prefix(&argv(&["git status"])).is_some());
        assert!(spaced.matches_prefix(&argv(&["git", "status"])).is_none());
        let empty = pattern("echo", vec![PatternToken::Single(String::new())]);
        assert!(empty.matches_prefix(&argv(&["echo", ""])).is_some());
        assert!(empty.matches_prefix(&argv(&["echo", "x"])).is_none());
    }

    #[test]
    fn debug_shapes_are_the_references() {
        let rule = PrefixRule {
            id: RuleId(7),
            pattern: pattern("git", vec![PatternToken::Single("status".into())]),
            decision: Decision::Allow,
            justification: None,
            origin: None,
        };
        assert_eq!(
            format!("{rule:?}"),
            r#"PrefixRule { pattern: PrefixPattern { first: "git", rest: [Single("status")] }, decision: Allow, justification: None }"#
        );
        let m = RuleMatch::PrefixRuleMatch {
            matched_prefix: argv(&["git", "status"]),
            decision: Decision::Prompt,
            resolved_program: Some("/usr/bin/git".into()),
            justification: Some("why".into()),
            rule_id: RuleId(0),
            origin: None,
        };
        assert_eq!(
            format!("{m:?}"),
            r#"PrefixRuleMatch { matched_prefix: ["git", "status"], decision: Prompt, resolved_program: Some(AbsolutePathBuf("/usr/bin/git")), justification: Some("why") }"#
        );
    }

    #[test]
    fn protocols_and_their_aliases() {
        for (raw, want) in [
            ("http", NetworkProtocol::Http),
            ("https", NetworkProtocol::Https),
            ("https_connect", NetworkProtocol::Https),
            ("http-connect", NetworkProtocol::Https),
            ("socks5_tcp", NetworkProtocol::Socks5Tcp),
            ("socks5_udp", NetworkProtocol::Socks5Udp),
        ] {
            assert_eq!(NetworkProtocol::parse(raw).unwrap(), want);
        }
        for raw in [
            "https-connect",
            "http_connect",
            "HTTPS",
            "socks5",
            "tcp",
            "",
        ] {
            assert_eq!(
                NetworkProtocol::parse(raw).unwrap_err().to_string(),
                format!(
                    "invalid rule: network_rule protocol must be one of http, https, socks5_tcp, socks5_udp (got {raw})"
                )
            );
        }
        assert_eq!(NetworkProtocol::Https.as_str(), "https");
    }

    #[test]
    fn decisions_and_the_network_deny_alias() {
        assert_eq!(parse_decision("prompt").unwrap(), Decision::Prompt);
        assert_eq!(
            parse_decision("deny").unwrap_err().to_string(),
            "invalid decision: deny"
        );
        assert_eq!(parse_network_decision("deny").unwrap(), Decision::Forbidden);
        for raw in ["Deny", "block", "ask"] {
            assert_eq!(
                parse_network_decision(raw).unwrap_err().to_string(),
                format!("invalid decision: {raw}")
            );
        }
    }
}
