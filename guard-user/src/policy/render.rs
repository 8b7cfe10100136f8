//! Rules written back as text: the call as it would appear in a `.rules` file, and a short
//! phrase saying what a rule covers. `guard check`, the kernel image and audit events show these
//! so a person can find and edit the rule that decided.

use super::rule::{AddressRule, Decision, NetworkRule, PatternToken, PrefixRule};

/// A JSON string literal, the way amendment lines quote tokens.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string always serialises")
}

/// `deny` for forbidden (what `network_rule` and `address_rule` files say), else the decision.
pub fn destination_decision(decision: Decision) -> &'static str {
    match decision {
        Decision::Forbidden => "deny",
        other => other.as_str(),
    }
}

fn optional_tail(justification: Option<&str>, audit_only: bool) -> String {
    let mut tail = String::new();
    if let Some(justification) = justification {
        tail.push_str(&format!(", justification={}", quoted(justification)));
    }
    if audit_only {
        tail.push_str(", audit_only=True");
    }
    tail
}

/// `prefix_rule(pattern=["git", ["status", "log"]], decision="allow")`, one expansion (its own
/// first token).
pub fn prefix_rule_text(rule: &PrefixRule) -> String {
    let tokens: Vec<String> = std::iter::once(quoted(&rule.pattern.first))
        .chain(rule.pattern.rest.iter().map(|token| match token {
            PatternToken::Single(token) => quoted(token),
            PatternToken::Alts(alts) => format!(
                "[{}]",
                alts.iter().map(|alt| quoted(alt)).collect::<Vec<_>>().join(", ")
            ),
        }))
        .collect();
    format!(
        "prefix_rule(pattern=[{}], decision=\"{}\"{})",
        tokens.join(", "),
        rule.decision.as_str(),
        optional_tail(rule.justification.as_deref(), rule.audit_only)
    )
}

/// `network_rule(host="example.com", protocol="https", decision="deny")`: the amendment format.
pub fn network_rule_text(rule: &NetworkRule) -> String {
    format!(
        "network_rule(host={}, protocol=\"{}\", decision=\"{}\"{})",
        quoted(&rule.host),
        rule.protocol.as_str(),
        destination_decision(rule.decision),
        optional_tail(rule.justification.as_deref(), false)
    )
}

/// `address_rule(addresses=["10.0.0.0/8"], decision="deny", ports=[443], transport="tcp")`;
/// `ports` and `transport` only when they narrow the rule.
/// `unix_rule(socket="/run/docker.sock", decision="allow")`.
pub fn unix_rule_text(rule: &super::unix::UnixRule) -> String {
    let mut text = format!(
        "unix_rule(socket={}, decision=\"{}\"",
        quoted(&rule.socket.to_string()),
        destination_decision(rule.decision)
    );
    text.push_str(&optional_tail(rule.justification.as_deref(), false));
    text.push(')');
    text
}

pub fn address_rule_text(rule: &AddressRule) -> String {
    let addresses: Vec<String> = rule
        .addresses
        .iter()
        .map(|target| quoted(&target.to_string()))
        .collect();
    let mut text = format!(
        "address_rule(addresses=[{}], decision=\"{}\"",
        addresses.join(", "),
        destination_decision(rule.decision)
    );
    if let Some(ports) = &rule.ports {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        text.push_str(&format!(", ports=[{}]", ports.join(", ")));
    }
    if rule.transport != super::rule::Transport::Any {
        text.push_str(&format!(", transport=\"{}\"", rule.transport));
    }
    text.push_str(&optional_tail(
        rule.justification.as_deref(),
        rule.audit_only,
    ));
    text.push(')');
    text
}

/// "commands starting with `git push`" (alternatives as `[a|b]`).
pub fn prefix_rule_summary(rule: &PrefixRule) -> String {
    let tokens: Vec<String> = std::iter::once(rule.pattern.first.to_string())
        .chain(rule.pattern.rest.iter().map(PatternToken::render))
        .collect();
    format!("commands starting with `{}`", tokens.join(" "))
}

/// "host example.com".
pub fn network_rule_summary(rule: &NetworkRule) -> String {
    format!("host {}", rule.host)
}

/// "addresses 10.0.0.0/8, example.com", then " ports 80, 443" and " over tcp" when given.
pub fn address_rule_summary(rule: &AddressRule) -> String {
    let addresses: Vec<String> = rule.addresses.iter().map(ToString::to_string).collect();
    let mut summary = format!("addresses {}", addresses.join(", "));
    if let Some(ports) = &rule.ports {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        let noun = if ports.len() == 1 { "port" } else { "ports" };
        summary.push_str(&format!(" {noun} {}", ports.join(", ")));
    }
    if rule.transport != super::rule::Transport::Any {
        summary.push_str(&format!(" over {}", rule.transport));
    }
    summary
}
