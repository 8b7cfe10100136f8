//! `network_rule` host normalisation (docs/policy-language.md §1.3): the one spelling a host is stored, compared and
//! written back under.

use super::error::{PolicyError, Result};

fn invalid(msg: impl Into<String>) -> PolicyError {
    PolicyError::InvalidRule(msg.into())
}

/// Normalises a `network_rule` host, or explains why it is not a specific host.
///
/// The steps and their order are the reference's: trim; refuse schemes and paths; unwrap
/// `[v6]` with an optional all-digit port; drop a single `:port`; strip trailing dots; lowercase
/// ASCII only; refuse empty, wildcard and whitespace hosts. Nothing more is validated.
pub fn normalize_network_host(raw: &str) -> Result<String> {
    let mut host = raw.trim();
    if host.is_empty() {
        return Err(invalid("network_rule host cannot be empty"));
    }
    if host.contains("://") || host.contains(['/', '?', '#']) {
        return Err(invalid(
            "network_rule host must be a hostname or IP literal (without scheme or path)",
        ));
    }
    if let Some(bracketed) = host.strip_prefix('[') {
        let Some((inside, suffix)) = bracketed.split_once(']') else {
            return Err(invalid(
                "network_rule host has an invalid bracketed IPv6 literal",
            ));
        };
        if !suffix.is_empty() && !suffix.strip_prefix(':').is_some_and(is_port) {
            return Err(invalid(format!(
                "network_rule host contains an unsupported suffix: {raw}"
            )));
        }
        host = inside;
    } else if host.matches(':').count() == 1
        && let Some((name, port)) = host.split_once(':')
        && !name.is_empty()
        && is_port(port)
    {
        host = name;
    }
    let normalized = host.trim_end_matches('.').trim().to_ascii_lowercase();
    if normalized.is_empty() {
        return Err(invalid("network_rule host cannot be empty"));
    }
    if normalized.contains('*') {
        return Err(invalid(
            "network_rule host must be a specific host; wildcards are not allowed",
        ));
    }
    if normalized.chars().any(char::is_whitespace) {
        return Err(invalid("network_rule host cannot contain whitespace"));
    }
    Ok(normalized)
}

/// A guard-only host pattern (in `address_rule(addresses=[...])`, never in `network_rule`),
/// in the proxy's domain-pattern spelling (docs/policy-language.md §7): `*.example.com` is every name below
/// `example.com` but not `example.com` itself, `**.example.com` is `example.com` and every name
/// below it. Decided by name at guard's resolver and, for connects, by the addresses it
/// answered for the names the pattern matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern {
    /// The normalised domain after the `*.` or `**.`.
    pub domain: String,
    /// `**.`: the domain itself matches too.
    pub apex: bool,
}

impl HostPattern {
    /// `*.x` or `**.x` (`x` normalised like a `network_rule` host, and a name of at least two
    /// labels, so that no pattern covers a whole top-level domain); `None` for a text that
    /// is not a pattern; an error for a pattern spelled wrong (`a*b`, `*`, `*.com`).
    pub fn parse(raw: &str) -> Option<Result<HostPattern>> {
        let text = raw.trim();
        if !text.contains('*') {
            return None;
        }
        let (rest, apex) = match (text.strip_prefix("**."), text.strip_prefix("*.")) {
            (Some(rest), _) => (rest, true),
            (None, Some(rest)) => (rest, false),
            _ => {
                return Some(Err(invalid(format!(
                    "host pattern {text:?} must be `*.DOMAIN` (names below DOMAIN) or \
                     `**.DOMAIN` (DOMAIN and the names below it)"
                ))));
            }
        };
        Some(
            normalize_network_host(rest)
                .map_err(|err| invalid(format!("host pattern {text:?}: {err}")))
                .and_then(|domain| {
                    if !domain.contains('.') || domain.parse::<std::net::IpAddr>().is_ok() {
                        Err(invalid(format!(
                            "host pattern {text:?} must name a domain of two labels or more \
                             (like *.example.com), not a top-level domain or an address"
                        )))
                    } else {
                        Ok(HostPattern { domain, apex })
                    }
                }),
        )
    }

    /// Whether `name` (normalised: lower case, no trailing dot) is one the pattern covers.
    pub fn matches(&self, name: &str) -> bool {
        match name.strip_suffix(self.domain.as_str()) {
            Some("") => self.apex,
            Some(prefix) => prefix.ends_with('.') && prefix.len() > 1,
            None => false,
        }
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", if self.apex { "**" } else { "*" }, self.domain)
    }
}

/// Whether a stored host (a rule's name, never an IP literal) is a [`HostPattern`].
pub fn is_host_pattern(host: &str) -> bool {
    host.starts_with("*.") || host.starts_with("**.")
}

/// Whether `name` is `host`, or a name the pattern `host` covers.
pub fn host_covers(host: &str, name: &str) -> bool {
    if is_host_pattern(host) {
        HostPattern::parse(host).is_some_and(|p| p.is_ok_and(|p| p.matches(name)))
    } else {
        host == name
    }
}

/// `name` and each name above it (`a.b.example.com`, `b.example.com`, `example.com`, `com`):
/// the domains a [`HostPattern`] covering `name` can have, so rules on patterns are found by
/// a few lookups instead of a walk over every pattern.
pub fn domains_of(name: &str) -> impl Iterator<Item = &str> {
    std::iter::once(name).chain(name.match_indices('.').map(move |(at, _)| &name[at + 1..]))
}

/// One or more ASCII digits; the value is deliberately not range-checked (`:99999` is a port).
fn is_port(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::{HostPattern, normalize_network_host};

    #[test]
    fn a_name_lies_below_each_of_its_domains() {
        let domains: Vec<&str> = super::domains_of("a.b.example.test").collect();
        assert_eq!(
            domains,
            ["a.b.example.test", "b.example.test", "example.test", "test"]
        );
    }

    #[test]
    fn host_patterns_cover_subdomains_and_with_two_stars_the_apex() {
        let below = HostPattern::parse("*.Example.TEST.").unwrap().unwrap();
        assert_eq!(below.to_string(), "*.example.test");
        assert!(below.matches("a.example.test"));
        assert!(below.matches("a.b.example.test"));
        assert!(!below.matches("example.test"));
        assert!(!below.matches("badexample.test"));
        assert!(!below.matches("example.org"));
        let apex = HostPattern::parse("**.example.test").unwrap().unwrap();
        assert!(apex.matches("example.test") && apex.matches("x.example.test"));
        assert!(HostPattern::parse("example.test").is_none());
        for bad in [
            "*",
            "a*b.test",
            "*.com",
            "*.*.example.test",
            "*.10.0.0.1",
            "x.*.test",
        ] {
            assert!(
                HostPattern::parse(bad).unwrap().is_err(),
                "{bad} should be refused"
            );
        }
    }
    use proptest::prelude::*;

    #[test]
    fn accepted_examples_of_the_spec() {
        for (raw, want) in [
            ("Api.GitHub.COM", "api.github.com"),
            ("example.com.:443", "example.com"),
            ("[FE80::1]", "fe80::1"),
            ("[::1]:8080", "::1"),
            ("10.0.0.1:80", "10.0.0.1"),
            ("  example.com  ", "example.com"),
            ("example.com:99999", "example.com"),
            ("example.com:", "example.com:"),
            ("example.com:http", "example.com:http"),
            ("::1", "::1"),
            (":80", ":80"),
            ("BÜCHER.de", "bÜcher.de"),
            ("user@example.com", "user@example.com"),
            ("example.com...", "example.com"),
        ] {
            assert_eq!(normalize_network_host(raw).unwrap(), want, "input {raw:?}");
        }
    }

    #[test]
    fn rejected_examples_of_the_spec_with_their_messages() {
        let scheme = "invalid rule: network_rule host must be a hostname or IP literal (without scheme or path)";
        for (raw, want) in [
            ("https://x", scheme),
            ("x/api", scheme),
            ("x?q", scheme),
            ("x#f", scheme),
            (
                "*.x",
                "invalid rule: network_rule host must be a specific host; wildcards are not allowed",
            ),
            (
                "*",
                "invalid rule: network_rule host must be a specific host; wildcards are not allowed",
            ),
            (
                "a*b",
                "invalid rule: network_rule host must be a specific host; wildcards are not allowed",
            ),
            (
                "[*]",
                "invalid rule: network_rule host must be a specific host; wildcards are not allowed",
            ),
            (
                "exa mple.com",
                "invalid rule: network_rule host cannot contain whitespace",
            ),
            (
                "[::1",
                "invalid rule: network_rule host has an invalid bracketed IPv6 literal",
            ),
            (
                "[::1]x",
                "invalid rule: network_rule host contains an unsupported suffix: [::1]x",
            ),
            (
                "[::1]:",
                "invalid rule: network_rule host contains an unsupported suffix: [::1]:",
            ),
            ("   ", "invalid rule: network_rule host cannot be empty"),
            ("", "invalid rule: network_rule host cannot be empty"),
            (".", "invalid rule: network_rule host cannot be empty"),
            ("[]", "invalid rule: network_rule host cannot be empty"),
        ] {
            let err = normalize_network_host(raw).unwrap_err();
            assert_eq!(err.to_string(), want, "input {raw:?}");
        }
    }

    /// The one way a normalised host is not a fixed point: `[a:80]` and `a:80.` normalise to
    /// `a:80`, which a second pass reads as host `a` with a port. The reference behaves the same.
    fn looks_like_host_and_port(host: &str) -> bool {
        host.matches(':').count() == 1
            && host
                .split_once(':')
                .is_some_and(|(name, port)| !name.is_empty() && super::is_port(port))
    }

    #[test]
    fn bracketed_or_dotted_host_and_port_is_not_a_fixed_point() {
        assert_eq!(normalize_network_host("[a:80]").unwrap(), "a:80");
        assert_eq!(normalize_network_host("a:80.").unwrap(), "a:80");
        assert_eq!(normalize_network_host("a:80").unwrap(), "a");
    }

    proptest! {
        // Normalising twice changes nothing: the stored spelling is a fixed point, which is what
        // lets amendments dedupe and compiled domains compare hosts as plain strings.
        #[test]
        fn normalisation_is_idempotent(raw in "[ -~]{0,24}") {
            if let Ok(once) = normalize_network_host(&raw)
                && !looks_like_host_and_port(&once)
            {
                let twice = normalize_network_host(&once).expect("a normalised host stays valid");
                prop_assert_eq!(once, twice);
            }
        }

        #[test]
        fn normalised_hosts_have_no_forbidden_characters(raw in "\\PC{0,24}") {
            if let Ok(host) = normalize_network_host(&raw) {
                prop_assert!(!host.is_empty());
                prop_assert!(!host.contains('*'));
                prop_assert!(!host.chars().any(char::is_whitespace));
                prop_assert!(!host.contains('/') && !host.contains('?') && !host.contains('#'));
                prop_assert!(!host.ends_with('.'));
                prop_assert!(!host.bytes().any(|b| b.is_ascii_uppercase()));
            }
        }

        #[test]
        fn case_trailing_dots_and_ports_do_not_change_the_host(
            name in "[a-z][a-z0-9-]{0,10}(\\.[a-z][a-z0-9-]{0,10}){0,3}",
            port in 0u32..100000,
            dots in 0usize..3,
        ) {
            let decorated = format!("{}{}:{}", name.to_ascii_uppercase(), ".".repeat(dots), port);
            prop_assert_eq!(normalize_network_host(&decorated).unwrap(), name);
        }
    }
}
