//! `Policy::check_destination`: address and name matching, ports and transports, the §2.4
//! decision per host, strongest-wins across rules, and the unmatched default.

use std::net::IpAddr;

use super::*;
use crate::policy::PolicyParser;

use crate::compile::test_support::Table;

fn parse(src: &str) -> Policy {
    let mut parser = PolicyParser::new();
    parser.parse("d.rules", src).unwrap();
    parser.build()
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn decide(policy: &Policy, addr: &str, port: u16, transport: Transport) -> Decision {
    policy
        .check_destination(ip(addr), port, transport, &crate::compile::NoResolver)
        .decision
}

#[test]
fn unmatched_destinations_get_the_enforcement_default() {
    let policy = parse("address_rule(addresses=[\"10.0.0.0/8\"], decision=\"deny\")\n");
    let eval = policy.check_destination(
        ip("192.168.0.1"),
        443,
        Transport::Tcp,
        &crate::compile::NoResolver,
    );
    assert_eq!(eval.decision, Decision::Allow);
    assert!(eval.unmatched);
    assert!(eval.matched.is_empty());
    let strict = parse(
        "enforcement(unmatched_network=\"prompt\")\naddress_rule(addresses=[\"10.0.0.0/8\"], decision=\"allow\")\n",
    );
    let eval = strict.check_destination(
        ip("192.168.0.1"),
        443,
        Transport::Tcp,
        &crate::compile::NoResolver,
    );
    assert_eq!((eval.decision, eval.unmatched), (Decision::Prompt, true));
    // A match, even an allow, is not "unmatched".
    let eval = strict.check_destination(
        ip("10.1.1.1"),
        1,
        Transport::Udp,
        &crate::compile::NoResolver,
    );
    assert_eq!((eval.decision, eval.unmatched), (Decision::Allow, false));
}

#[test]
fn cidr_containment_and_ipv4_mapped_addresses() {
    let policy = parse(
        r#"
address_rule(addresses=["10.0.0.0/8"], decision="deny", justification="internal")
address_rule(addresses=["fd00::/8"], decision="prompt")
address_rule(addresses=["192.168.1.7"], decision="deny")
"#,
    );
    for (addr, want) in [
        ("10.0.0.0", Decision::Forbidden),
        ("10.255.255.255", Decision::Forbidden),
        ("11.0.0.0", Decision::Allow),
        ("9.255.255.255", Decision::Allow),
        ("::ffff:10.1.2.3", Decision::Forbidden),
        ("::ffff:11.1.2.3", Decision::Allow),
        ("fd12::1", Decision::Prompt),
        ("fe00::1", Decision::Allow),
        ("192.168.1.7", Decision::Forbidden),
        ("::ffff:192.168.1.7", Decision::Forbidden),
        ("192.168.1.8", Decision::Allow),
    ] {
        assert_eq!(decide(&policy, addr, 443, Transport::Tcp), want, "{addr}");
    }
    let eval = policy.check_destination(
        ip("10.9.9.9"),
        22,
        Transport::Tcp,
        &crate::compile::NoResolver,
    );
    assert_eq!(eval.matched.len(), 1);
    let found = &eval.matched[0];
    assert_eq!(found.kind, RuleKind::Address);
    assert_eq!(found.rule_index, 0);
    assert_eq!(
        found.text,
        r#"address_rule(addresses=["10.0.0.0/8"], decision="deny", justification="internal")"#
    );
    assert_eq!(found.origin.as_ref().unwrap().line, 2);
    assert_eq!(found.justification.as_deref(), Some("internal"));
    assert_eq!(found.host, None);
}

#[test]
fn ports_and_transports_filter_address_rules() {
    let policy = parse(
        r#"
address_rule(addresses=["127.0.0.1"], decision="deny", ports=[22, 2222], transport="tcp")
address_rule(addresses=["127.0.0.1"], decision="prompt", ports=[53], transport="udp")
address_rule(addresses=["127.0.0.2"], decision="deny", transport="udp")
address_rule(addresses=["127.0.0.3"], decision="prompt", ports=[8080])
"#,
    );
    for (addr, port, transport, want) in [
        ("127.0.0.1", 22, Transport::Tcp, Decision::Forbidden),
        ("127.0.0.1", 2222, Transport::Tcp, Decision::Forbidden),
        ("127.0.0.1", 22, Transport::Udp, Decision::Allow),
        ("127.0.0.1", 23, Transport::Tcp, Decision::Allow),
        ("127.0.0.1", 53, Transport::Udp, Decision::Prompt),
        ("127.0.0.1", 53, Transport::Tcp, Decision::Allow),
        ("127.0.0.2", 1, Transport::Udp, Decision::Forbidden),
        ("127.0.0.2", 65535, Transport::Udp, Decision::Forbidden),
        ("127.0.0.2", 1, Transport::Tcp, Decision::Allow),
        ("127.0.0.3", 8080, Transport::Tcp, Decision::Prompt),
        ("127.0.0.3", 8080, Transport::Udp, Decision::Prompt),
        ("127.0.0.3", 8081, Transport::Udp, Decision::Allow),
    ] {
        assert_eq!(
            decide(&policy, addr, port, transport),
            want,
            "{addr}:{port}/{transport}"
        );
    }
}

#[test]
fn network_rules_use_their_protocols_ports() {
    let policy = parse(
        r#"
network_rule(host="127.0.0.1", protocol="http", decision="deny")
network_rule(host="127.0.0.2", protocol="https", decision="deny")
network_rule(host="127.0.0.3", protocol="socks5_tcp", decision="deny")
network_rule(host="127.0.0.4", protocol="socks5_udp", decision="deny")
network_rule(host="::1", protocol="http", decision="prompt")
"#,
    );
    for (addr, port, transport, want) in [
        ("127.0.0.1", 80, Transport::Tcp, Decision::Forbidden),
        ("127.0.0.1", 80, Transport::Udp, Decision::Allow),
        ("127.0.0.1", 443, Transport::Tcp, Decision::Allow),
        ("127.0.0.2", 443, Transport::Tcp, Decision::Forbidden),
        ("127.0.0.2", 443, Transport::Udp, Decision::Forbidden),
        ("127.0.0.2", 80, Transport::Tcp, Decision::Allow),
        ("127.0.0.3", 1080, Transport::Tcp, Decision::Forbidden),
        ("127.0.0.3", 1080, Transport::Udp, Decision::Allow),
        ("127.0.0.4", 9, Transport::Udp, Decision::Forbidden),
        ("127.0.0.4", 9, Transport::Tcp, Decision::Allow),
        ("::1", 80, Transport::Tcp, Decision::Prompt),
        ("::1", 81, Transport::Tcp, Decision::Allow),
    ] {
        assert_eq!(
            decide(&policy, addr, port, transport),
            want,
            "{addr}:{port}/{transport}"
        );
    }
}

#[test]
fn network_hosts_decide_by_their_last_allow_or_deny_over_all_their_protocols() {
    let policy = parse(
        r#"
network_rule(host="127.0.0.1", protocol="https", decision="prompt")
network_rule(host="127.0.0.1", protocol="http", decision="allow")
network_rule(host="127.0.0.2", protocol="http", decision="allow")
network_rule(host="127.0.0.2", protocol="socks5_udp", decision="deny")
network_rule(host="127.0.0.3", protocol="http", decision="prompt")
network_rule(host="127.0.0.3", protocol="https", decision="prompt")
"#,
    );
    // Prompt then allow: allow, and on https too (protocols share one host namespace).
    assert_eq!(
        decide(&policy, "127.0.0.1", 443, Transport::Tcp),
        Decision::Allow
    );
    assert_eq!(
        decide(&policy, "127.0.0.1", 80, Transport::Tcp),
        Decision::Allow
    );
    // Allow then deny: forbidden on every port of both protocols.
    assert_eq!(
        decide(&policy, "127.0.0.2", 80, Transport::Tcp),
        Decision::Forbidden
    );
    assert_eq!(
        decide(&policy, "127.0.0.2", 5, Transport::Udp),
        Decision::Forbidden
    );
    // All prompt: prompt, reported by its first rule.
    let eval = policy.check_destination(
        ip("127.0.0.3"),
        443,
        Transport::Udp,
        &crate::compile::NoResolver,
    );
    assert_eq!(eval.decision, Decision::Prompt);
    assert_eq!(eval.matched.len(), 1);
    assert_eq!(eval.matched[0].rule_index, 4);
    assert_eq!(eval.matched[0].kind, RuleKind::Network);
    // The deciding rule is the last allow/deny one.
    let eval = policy.check_destination(
        ip("127.0.0.1"),
        443,
        Transport::Tcp,
        &crate::compile::NoResolver,
    );
    assert_eq!(eval.matched[0].rule_index, 1);
    assert_eq!(
        eval.matched[0].text,
        r#"network_rule(host="127.0.0.1", protocol="http", decision="allow")"#
    );
}

#[test]
fn an_overlay_deny_after_a_base_allow_denies() {
    let base = parse("network_rule(host=\"127.0.0.1\", protocol=\"https\", decision=\"allow\")\n");
    let overlay =
        parse("network_rule(host=\"127.0.0.1\", protocol=\"https\", decision=\"deny\")\n");
    let merged = base.merge_overlay(&overlay);
    assert_eq!(
        decide(&merged, "127.0.0.1", 443, Transport::Tcp),
        Decision::Forbidden
    );
    assert_eq!(
        decide(&base, "127.0.0.1", 443, Transport::Tcp),
        Decision::Allow
    );
}

#[test]
fn strongest_decision_wins_across_rules() {
    let policy = parse(
        r#"
network_rule(host="127.0.0.1", protocol="https", decision="allow")
address_rule(addresses=["127.0.0.0/8"], decision="prompt")
address_rule(addresses=["127.0.0.1"], decision="allow", ports=[443])
"#,
    );
    let eval = policy.check_destination(
        ip("127.0.0.1"),
        443,
        Transport::Tcp,
        &crate::compile::NoResolver,
    );
    assert_eq!(eval.decision, Decision::Prompt);
    let kinds: Vec<(RuleKind, usize, Decision)> = eval
        .matched
        .iter()
        .map(|found| (found.kind, found.rule_index, found.decision))
        .collect();
    assert_eq!(
        kinds,
        [
            (RuleKind::Network, 0, Decision::Allow),
            (RuleKind::Address, 0, Decision::Prompt),
            (RuleKind::Address, 1, Decision::Allow),
        ]
    );
}

#[test]
fn host_names_match_through_the_resolver() {
    let policy = parse(
        r#"
network_rule(host="api.example.com", protocol="https", decision="deny", justification="no")
address_rule(addresses=["db.internal"], decision="prompt", ports=[5432], audit_only=True)
"#,
    );
    let resolver = Table::new(&[
        ("api.example.com", &["93.184.216.34", "2606:2800::1"]),
        ("db.internal", &["::ffff:10.0.0.5"]),
    ]);
    let check =
        |addr: &str, port: u16| policy.check_destination(ip(addr), port, Transport::Tcp, &resolver);
    assert_eq!(check("93.184.216.34", 443).decision, Decision::Forbidden);
    assert_eq!(check("2606:2800::1", 443).decision, Decision::Forbidden);
    assert_eq!(check("93.184.216.35", 443).decision, Decision::Allow);
    let eval = check("10.0.0.5", 5432);
    assert_eq!(eval.decision, Decision::Prompt);
    assert_eq!(eval.matched[0].host.as_deref(), Some("db.internal"));
    assert!(eval.matched[0].audit_only);
    let eval = check("93.184.216.34", 443);
    assert_eq!(eval.matched[0].host.as_deref(), Some("api.example.com"));
    assert_eq!(eval.matched[0].justification.as_deref(), Some("no"));
    // Without the resolver, names reach nothing by address.
    assert_eq!(
        decide(&policy, "93.184.216.34", 443, Transport::Tcp),
        Decision::Allow
    );
}

#[test]
fn checking_a_name_matches_rules_written_with_that_name() {
    let policy = parse(
        r#"
network_rule(host="Example.COM", protocol="https", decision="deny")
address_rule(addresses=["example.com", "10.0.0.0/8"], decision="prompt", ports=[8443])
address_rule(addresses=["10.0.0.0/8"], decision="deny")
"#,
    );
    let none = crate::compile::NoResolver;
    let eval = policy.check_destination_name("example.com", 443, Transport::Tcp, &none);
    assert_eq!(
        (eval.decision, eval.matched.len()),
        (Decision::Forbidden, 1)
    );
    let eval = policy.check_destination_name("example.com", 8443, Transport::Tcp, &none);
    assert_eq!(eval.decision, Decision::Prompt);
    assert_eq!(eval.matched[0].host.as_deref(), Some("example.com"));
    // IP rules never match a name nobody resolved.
    let eval = policy.check_destination_name("other.com", 443, Transport::Tcp, &none);
    assert!(eval.unmatched);
    // With a resolver, the name's addresses reach the IP rules too.
    let resolver = Table::new(&[("other.com", &["10.1.1.1"])]);
    let eval = policy.check_destination_name("other.com", 443, Transport::Tcp, &resolver);
    assert_eq!(eval.decision, Decision::Forbidden);
}

#[test]
fn the_deciding_match_is_the_strongest_and_enforced_before_audit_only() {
    let policy = parse(
        r#"address_rule(addresses=["10.0.0.0/8"], decision="allow")
address_rule(addresses=["10.1.0.0/16"], decision="deny", audit_only=True)
address_rule(addresses=["10.1.2.0/24"], decision="deny")
address_rule(addresses=["10.1.2.3"], decision="deny")
"#,
    );
    let line = |addr: &str| {
        policy
            .check_destination(ip(addr), 22, Transport::Tcp, &crate::compile::NoResolver)
            .deciding()
            .map(|found| (found.origin.as_ref().unwrap().line, found.audit_only))
    };
    assert_eq!(line("10.9.9.9"), Some((1, false)));
    assert_eq!(line("10.1.9.9"), Some((2, true)));
    // Two enforced denies and an audit-only one: the first enforced one decides.
    assert_eq!(line("10.1.2.3"), Some((3, false)));
    assert_eq!(line("192.168.0.1"), None);
}
