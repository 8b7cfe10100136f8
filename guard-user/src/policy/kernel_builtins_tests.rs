//! guard's kernel-only additions to the language: `prefix_rule(audit_only=...)`,
//! `address_rule` and `enforcement`. Every accepted form and every error.

use super::*;
use crate::policy::{AddressTarget, EnforcementSettings, LoadError, SocketKinds, Transport};

fn parse_named(name: &str, src: &str) -> Result<Policy> {
    let mut parser = PolicyParser::new();
    parser.parse(name, src)?;
    Ok(parser.build())
}

fn parse(src: &str) -> Policy {
    parse_named("k.rules", src).unwrap_or_else(|err| panic!("{src:?} was refused: {err}"))
}

fn parse_err(src: &str) -> String {
    match parse_named("k.rules", src) {
        Ok(_) => panic!("expected {src:?} to be refused"),
        Err(err) => err.to_string(),
    }
}

/// The line a person sees first.
fn display_line(src: &str) -> String {
    let source = parse_named("k.rules", src).expect_err("expected a parse error");
    LoadError::Parse {
        path: "k.rules".into(),
        source,
    }
    .display_line()
}

fn net(text: &str) -> AddressTarget {
    AddressTarget::Network(text.parse().unwrap())
}

// --- prefix_rule(audit_only=...) -------------------------------------------------------------

#[test]
fn prefix_rule_audit_only_defaults_to_false_and_is_kept_per_expansion() {
    let policy = parse(
        r#"
prefix_rule(pattern=["git", "push"], decision="forbidden")
prefix_rule(pattern=[["rm", "shred"]], decision="forbidden", audit_only=True)
prefix_rule(["ls"], "allow", [], [], "why", False)
prefix_rule(["cat"], "prompt", [], [], "why", True)
"#,
    );
    let flags: Vec<(&str, bool)> = policy
        .prefix_rules()
        .iter()
        .map(|rule| (rule.program(), rule.audit_only))
        .collect();
    assert_eq!(
        flags,
        [
            ("git", false),
            ("rm", true),
            ("shred", true),
            ("ls", false),
            ("cat", true)
        ]
    );
    // Audit-only changes what the kernel enforces, not what the policy decides.
    let eval = policy.check(&["rm".to_string()], None);
    assert_eq!(eval.decision, Some(Decision::Forbidden));
    // The reference's Debug shape (quoted by example errors) does not show it.
    assert!(!format!("{:?}", policy.prefix_rules()[1]).contains("audit"));
}

#[test]
fn prefix_rule_audit_only_must_be_a_bool() {
    for src in [
        r#"prefix_rule(pattern=["a"], audit_only="yes")"#,
        r#"prefix_rule(pattern=["a"], audit_only=1)"#,
        r#"prefix_rule(pattern=["a"], audit_only=None)"#,
    ] {
        let err = parse_err(src);
        assert!(
            err.contains("Type of parameter `audit_only`"),
            "{src}: {err}"
        );
    }
}

// --- address_rule ----------------------------------------------------------------------------

#[test]
fn address_rule_accepted_forms() {
    let policy = parse(
        r#"
address_rule(addresses=["10.0.0.0/8", "fd00::/8"], decision="deny")
address_rule(["Example.COM.", "192.168.1.7", "[::1]", "10.0.0.0/8", "10.1.2.3/8"], "allow", [443, 80, 443], "tcp", "web", True)
address_rule(addresses=["localhost"], decision="prompt", ports=None, transport="udp", justification=None)
address_rule(addresses=["::ffff:127.0.0.1"], decision="forbidden", transport="any", audit_only=False)
"#,
    );
    let rules = policy.address_rules();
    assert_eq!(rules.len(), 4);
    assert_eq!(rules[0].addresses, [net("10.0.0.0/8"), net("fd00::/8")]);
    assert_eq!(rules[0].decision, Decision::Forbidden);
    assert_eq!(rules[0].ports, None);
    assert_eq!(rules[0].transport, Transport::Any);
    assert_eq!(rules[0].justification, None);
    assert!(!rules[0].audit_only);
    // Duplicates (also after normalisation) are dropped, first-seen order kept.
    assert_eq!(
        rules[1].addresses,
        [
            AddressTarget::Host("example.com".into()),
            net("192.168.1.7/32"),
            net("::1/128"),
            net("10.0.0.0/8"),
        ]
    );
    assert_eq!(rules[1].ports, Some(vec![443, 80]));
    assert_eq!(rules[1].transport, Transport::Tcp);
    assert_eq!(rules[1].justification.as_deref(), Some("web"));
    assert!(rules[1].audit_only);
    assert_eq!(rules[2].decision, Decision::Prompt);
    assert_eq!(rules[2].transport, Transport::Udp);
    assert_eq!(rules[3].addresses, [net("127.0.0.1/32")]);
    assert_eq!(rules[3].decision, Decision::Forbidden);
    let lines: Vec<(u32, usize)> = rules
        .iter()
        .map(|rule| (rule.id.0, rule.origin.as_ref().unwrap().line))
        .collect();
    assert_eq!(lines, [(0, 2), (1, 3), (2, 4), (3, 5)]);
    assert_eq!(&*rules[0].origin.as_ref().unwrap().file, "k.rules");
    // Address rules never take part in command matching.
    assert_eq!(policy.prefix_rules().len(), 0);
}

#[test]
fn address_rule_errors() {
    for (args, want) in [
        (
            r#"addresses=[], decision="deny""#,
            "invalid rule: address_rule addresses cannot be empty",
        ),
        (
            r#"addresses=[10], decision="deny""#,
            "invalid rule: address_rule addresses must be strings (got int)",
        ),
        (
            r#"addresses=["10.0.0.0/33"], decision="deny""#,
            r#"invalid rule: invalid address "10.0.0.0/33" in address_rule: prefix length 33 is more than 32, the most an IPv4 network has"#,
        ),
        (
            r#"addresses=["ok.com", "*bad.com"], decision="deny""#,
            r#"invalid rule: invalid address "*bad.com" in address_rule: host pattern "*bad.com" must be `*.DOMAIN`"#,
        ),
        (
            r#"addresses=["a.com:443"], decision="deny""#,
            r#"invalid rule: invalid address "a.com:443" in address_rule: a port cannot be part of the address; give it in ports=[...]"#,
        ),
        (
            r#"addresses=["a.com"], decision="block""#,
            "invalid decision: block",
        ),
        (
            r#"addresses=["a.com"], decision="Deny""#,
            "invalid decision: Deny",
        ),
        (
            r#"addresses=["a.com"], decision="deny", ports=[]"#,
            "invalid rule: address_rule ports cannot be empty (leave ports out to mean any port)",
        ),
        (
            r#"addresses=["a.com"], decision="deny", ports=[0]"#,
            "invalid rule: invalid port 0 in address_rule: ports are 1 to 65535",
        ),
        (
            r#"addresses=["a.com"], decision="deny", ports=[65536]"#,
            "invalid rule: invalid port 65536 in address_rule: ports are 1 to 65535",
        ),
        (
            r#"addresses=["a.com"], decision="deny", ports=[-5]"#,
            "invalid rule: invalid port -5 in address_rule: ports are 1 to 65535",
        ),
        (
            r#"addresses=["a.com"], decision="deny", ports=[100000000000000000000]"#,
            "invalid rule: invalid port 100000000000000000000 in address_rule: ports are 1 to 65535",
        ),
        (
            r#"addresses=["a.com"], decision="deny", ports=["443"]"#,
            "invalid rule: address_rule ports must be integers (got string)",
        ),
        (
            r#"addresses=["a.com"], decision="deny", ports=[True]"#,
            "invalid rule: address_rule ports must be integers (got bool)",
        ),
        (
            r#"addresses=["a.com"], decision="deny", ports=443"#,
            "invalid rule: address_rule ports must be a list of port numbers or None (got int)",
        ),
        (
            r#"addresses=["a.com"], decision="deny", ports=(443,)"#,
            "invalid rule: address_rule ports must be a list of port numbers or None (got tuple)",
        ),
        (
            r#"addresses=["a.com"], decision="deny", transport="TCP""#,
            "invalid rule: address_rule transport must be one of tcp, udp, any (got TCP)",
        ),
        (
            r#"addresses=["a.com"], decision="deny", justification="  ""#,
            "invalid rule: justification cannot be empty",
        ),
        (
            r#"addresses=["a.com"], decision="deny", justification=5"#,
            "invalid rule: address_rule justification must be a string (got int)",
        ),
    ] {
        let err = parse_err(&format!("address_rule({args})"));
        assert!(err.contains(want), "{args}: {err}");
    }
    // Starlark's own argument checks.
    for (src, want) in [
        (
            r#"address_rule(addresses=("a.com",), decision="deny")"#,
            "Type of parameter `addresses` doesn't match, expected `list`",
        ),
        (
            r#"address_rule(addresses=["a.com"])"#,
            "Missing parameter `decision` for call to `address_rule`",
        ),
        (
            r#"address_rule(addresses=["a.com"], decision="deny", port=[1])"#,
            "Found `port` extra named parameter(s) for call to address_rule",
        ),
        (
            r#"address_rule(addresses=["a.com"], decision="deny", audit_only="yes")"#,
            "Type of parameter `audit_only`",
        ),
        (
            r#"address_rule(addresses=["a.com"], decision="deny", transport=None)"#,
            "Type of parameter `transport`",
        ),
    ] {
        let err = parse_err(src);
        assert!(err.contains(want), "{src}: {err}");
    }
}

#[test]
fn address_rule_errors_carry_file_and_line() {
    assert_eq!(
        display_line("\n\naddress_rule(addresses=[\"10.0.0.0/33\"], decision=\"deny\")\n"),
        "k.rules:3: error: invalid rule: invalid address \"10.0.0.0/33\" in address_rule: prefix length 33 is more than 32, the most an IPv4 network has (problem is on or around line 3)"
    );
    assert_eq!(
        display_line("\naddress_rule(addresses=[\"a.com\"], decision=\"deny\", ports=[0])\n"),
        "k.rules:2: error: invalid rule: invalid port 0 in address_rule: ports are 1 to 65535 (problem is on or around line 2)"
    );
}

// --- enforcement -----------------------------------------------------------------------------

#[test]
fn enforcement_defaults_never_lock_anyone_out() {
    let policy = parse("prefix_rule(pattern=[\"git\"])\n");
    assert_eq!(
        policy.enforcement(),
        EnforcementSettings {
            unmatched_exec: Decision::Allow,
            unmatched_network: Decision::Allow,
            // A server outside the scope acts for whoever connects (tmux runs commands): a
            // unix socket no rule or built-in entry names is refused, as the peer sandboxes do.
            unmatched_unix: Decision::Forbidden,
            audit_only: false,
            // No rule can name a file without a path: refused, as an unmatched exec would be
            // under `unmatched_exec="deny"`.
            anonymous_exec: Decision::Forbidden,
            socket_kinds: SocketKinds::NONE,
            dns: crate::policy::DnsCaps::DEFAULT,
        }
    );
    assert_eq!(policy.enforcement(), EnforcementSettings::default());
    assert_eq!(
        policy.enforcement_overrides(),
        EnforcementOverrides::default()
    );
}

#[test]
fn enforcement_calls_set_only_their_keys_and_later_calls_win() {
    let policy = parse(
        r#"
enforcement(unmatched_network="prompt")
enforcement(audit_only=True)
enforcement(unmatched_exec="deny", unmatched_network=None)
enforcement()
"#,
    );
    assert_eq!(
        policy.enforcement(),
        EnforcementSettings {
            unmatched_exec: Decision::Forbidden,
            unmatched_network: Decision::Prompt,
            unmatched_unix: Decision::Forbidden,
            audit_only: true,
            anonymous_exec: Decision::Forbidden,
            socket_kinds: SocketKinds::NONE,
            dns: crate::policy::DnsCaps::DEFAULT,
        }
    );
    let later = parse(
        r#"
enforcement("prompt", "deny", True)
enforcement(unmatched_exec="allow", audit_only=False)
enforcement(unmatched_network="forbidden")
enforcement(anonymous_exec="prompt", unmatched_unix="prompt")
"#,
    );
    assert_eq!(
        later.enforcement(),
        EnforcementSettings {
            unmatched_exec: Decision::Allow,
            unmatched_network: Decision::Forbidden,
            unmatched_unix: Decision::Prompt,
            audit_only: false,
            anonymous_exec: Decision::Prompt,
            socket_kinds: SocketKinds::NONE,
            dns: crate::policy::DnsCaps::DEFAULT,
        }
    );
    // Several files parsed by one parser: later files override earlier keys too.
    let mut parser = PolicyParser::new();
    parser
        .parse(
            "a.rules",
            "enforcement(unmatched_exec=\"prompt\", audit_only=True)\n",
        )
        .unwrap();
    parser
        .parse("b.rules", "enforcement(unmatched_exec=\"allow\")\n")
        .unwrap();
    let settings = parser.build().enforcement();
    assert_eq!(settings.unmatched_exec, Decision::Allow);
    assert!(settings.audit_only);
}

#[test]
fn enforcement_errors() {
    for (args, want) in [
        (
            r#"unmatched_exec="block""#,
            r#"invalid rule: enforcement unmatched_exec must be "allow", "prompt" or "deny" (got "block")"#,
        ),
        (
            r#"unmatched_network="Deny""#,
            r#"invalid rule: enforcement unmatched_network must be "allow", "prompt" or "deny" (got "Deny")"#,
        ),
        (
            r#"unmatched_network=1"#,
            r#"invalid rule: enforcement unmatched_network must be "allow", "prompt" or "deny" (got 1)"#,
        ),
        (
            r#"audit_only="yes""#,
            r#"invalid rule: enforcement audit_only must be True or False (got "yes")"#,
        ),
        (
            r#"audit_only=0"#,
            "invalid rule: enforcement audit_only must be True or False (got 0)",
        ),
    ] {
        let err = parse_err(&format!("enforcement({args})"));
        assert!(err.contains(want), "{args}: {err}");
    }
    let unknown = parse_err("enforcement(unmatched=\"deny\")");
    assert!(
        unknown.contains("Found `unmatched` extra named parameter(s) for call to enforcement"),
        "{unknown}"
    );
    assert_eq!(
        display_line("\nenforcement(audit_only=\"yes\")\n"),
        "k.rules:2: error: invalid rule: enforcement audit_only must be True or False (got \"yes\") (problem is on or around line 2)"
    );
}

#[test]
fn socket_kinds_are_named_and_later_calls_replace_them() {
    let policy = parse("enforcement(socket_kinds=[\"ping\", \"udplite\"])\n");
    let kinds = policy.enforcement().socket_kinds;
    assert_eq!(kinds.names(), ["ping", "udplite"]);
    assert_eq!(
        kinds.bits(),
        guard_common::sockets::kind::PING | guard_common::sockets::kind::UDPLITE
    );
    let later = parse(
        "enforcement(socket_kinds=[\"raw\", \"sctp\", \"other\"])\nenforcement(socket_kinds=[])\n",
    );
    assert_eq!(later.enforcement().socket_kinds, SocketKinds::NONE);
    assert_eq!(
        parse("enforcement(audit_only=True)\n")
            .enforcement()
            .socket_kinds,
        SocketKinds::NONE,
        "none allowed by default"
    );
}

#[test]
fn socket_kinds_errors_name_the_file_and_line() {
    let want =
        r#"enforcement socket_kinds must be a list of "ping", "raw", "udplite", "sctp", "other""#;
    for args in [
        r#"socket_kinds="raw""#,
        r#"socket_kinds=["icmp"]"#,
        r#"socket_kinds=["Raw"]"#,
        r#"socket_kinds=[1]"#,
    ] {
        let err = parse_err(&format!("enforcement({args})"));
        assert!(err.contains(want), "{args}: {err}");
    }
    assert_eq!(
        display_line("\n\nenforcement(socket_kinds=[\"icmp\"])\n"),
        format!(
            "k.rules:3: error: invalid rule: {want} (got [\"icmp\"]) (problem is on or around line 3)"
        )
    );
}

// --- overlays --------------------------------------------------------------------------------

#[test]
fn overlays_append_address_rules_and_only_tighten_unmatched_decisions() {
    let base = parse_named(
        "base.rules",
        r#"
address_rule(addresses=["10.0.0.0/8"], decision="allow")
enforcement(unmatched_exec="prompt", unmatched_network="allow", audit_only=True)
"#,
    )
    .unwrap();
    let overlay = parse_named(
        "managed.rules",
        r#"
address_rule(addresses=["10.0.0.5"], decision="deny")
enforcement(unmatched_exec="allow", unmatched_network="deny")
"#,
    )
    .unwrap();
    let merged = base.merge_overlay(&overlay);
    let ids: Vec<(u32, &str)> = merged
        .address_rules()
        .iter()
        .map(|rule| (rule.id.0, &*rule.origin.as_ref().unwrap().file))
        .collect();
    assert_eq!(ids, [(0, "base.rules"), (1, "managed.rules")]);
    assert_eq!(
        merged.enforcement(),
        EnforcementSettings {
            // The overlay's allow cannot weaken the base's prompt; its deny tightens.
            unmatched_exec: Decision::Prompt,
            unmatched_network: Decision::Forbidden,
            unmatched_unix: Decision::Forbidden,
            // Not set by the overlay: the base's.
            audit_only: true,
            anonymous_exec: Decision::Forbidden,
            socket_kinds: SocketKinds::NONE,
            dns: crate::policy::DnsCaps::DEFAULT,
        }
    );
    // An overlay that sets audit_only decides it.
    let enforcing = parse("enforcement(audit_only=False)\n");
    assert!(!merged.merge_overlay(&enforcing).enforcement().audit_only);
    // Nothing set anywhere: the defaults.
    assert_eq!(
        parse("").merge_overlay(&parse("")).enforcement(),
        EnforcementSettings::default()
    );
}

#[test]
fn reference_files_keep_their_meaning() {
    // The reference's three builtins alone leave every kernel-only setting at its default.
    let policy = parse(crate::policy::load::EMBEDDED_DEFAULT_RULES);
    assert!(policy.address_rules().is_empty());
    assert_eq!(policy.enforcement(), EnforcementSettings::default());
    assert!(policy.prefix_rules().iter().all(|rule| !rule.audit_only));
}

#[test]
fn the_dns_caps_are_set_per_key_checked_and_an_overlay_only_lowers_them() {
    let policy = parse("enforcement(dns_max_labels=4)\nenforcement(dns_max_name_length=60)\n");
    let caps = policy.enforcement().dns;
    assert_eq!((caps.max_labels, caps.max_name_length), (4, 60));
    assert_eq!(
        caps.wildcard_lookups_per_second,
        crate::policy::DnsCaps::DEFAULT.wildcard_lookups_per_second
    );
    for bad in [
        "enforcement(dns_max_labels=0)",
        "enforcement(dns_max_labels=128)",
        "enforcement(dns_max_name_length=254)",
        "enforcement(dns_wildcard_lookups_per_second=\"10\")",
    ] {
        let err = parse_err(bad);
        assert!(
            err.contains("must be a whole number from 1 to"),
            "{bad}: {err}"
        );
        assert!(err.contains("k.rules"), "{bad}: {err}");
    }
    let base = EnforcementOverrides {
        dns_max_labels: Some(8),
        ..Default::default()
    };
    let overlay = EnforcementOverrides {
        dns_max_labels: Some(20),
        dns_max_name_length: Some(50),
        ..Default::default()
    };
    let merged = base.overlaid_by(overlay);
    assert_eq!(merged.dns_max_labels, Some(8), "an overlay cannot loosen");
    assert_eq!(merged.dns_max_name_length, Some(50));
}
