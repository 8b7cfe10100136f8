//! What an answer to an ask does: an `--always` (or `deny --always`) appends the amendment line
//! that covers exactly what was asked; `--once` / `--session` hold an exact approval in the
//! kernel; and some answers cannot be given (an approval never lifts a `forbidden`; an allow
//! line cannot lift a `prompt` rule's exec). Carrying the plan out is the caller's.

use super::ApprovalMode;
use super::approvals::ApprovalTarget;
use super::book::{Ask, AskTarget};
use crate::compile::image::EnforcementImage;
use crate::policy::Policy;
use crate::policy::amend::{
    AmendError, address_amendment_line, network_amendment_line, prefix_amendment_line,
    unix_amendment_line,
};
use crate::policy::approval::is_banned_prefix;
use crate::policy::render_example;
use crate::policy::{Decision, NetworkProtocol, Transport};

/// What an approval of `ask` in `mode` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalPlan {
    /// Append this amendment line and reload.
    Append(String),
    /// Hold this exact approval in the kernel maps.
    Hold(ApprovalTarget),
}

/// How `ask` is approved in `mode` under `image` (the policy in force), or why it cannot be.
/// `proposed`: a prefix to allow instead of the asked argv (`guard approve --always
/// --prefix`), judged against the policy as the reference judges a proposed prefix.
pub fn plan_approval(
    ask: &Ask,
    mode: ApprovalMode,
    image: &EnforcementImage,
    proposed: Option<(&Policy, &[String])>,
) -> Result<ApprovalPlan, String> {
    if let Some(why) = forbidden_destination(image, ask.scope, &ask.target) {
        return Err(why);
    }
    if ask.by_overlay && (mode == ApprovalMode::Always || proposed.is_some()) {
        return Err(format!(
            "ask {} was asked by its run's overlay, which only that run holds: --always or a \
             prefix would change the daemon's policy and the overlay would still ask; answer it \
             --once or --session",
            ask.id
        ));
    }
    if mode == ApprovalMode::Always {
        if let Some(why) = always_refused(ask) {
            return Err(why);
        }
        if let Some((policy, prefix)) = proposed {
            return proposed_prefix_line(ask, policy, prefix).map(ApprovalPlan::Append);
        }
        return amendment_line(&ask.target, Decision::Allow)
            .map(ApprovalPlan::Append)
            .map_err(|e| e.to_string());
    }
    if proposed.is_some() {
        return Err("--prefix goes with --always (a prefix is a rule from then on)".to_string());
    }
    Ok(ApprovalPlan::Hold(match &ask.target {
        AskTarget::Exec { tokens, .. } => ApprovalTarget::Exec {
            tokens: tokens.clone(),
        },
        AskTarget::Network {
            host,
            address,
            port,
            transport,
            ..
        } => ApprovalTarget::Network {
            address: *address,
            port: *port,
            transport: Transport::parse(transport).unwrap_or(Transport::Tcp),
            host: host.clone(),
        },
        AskTarget::Unix { socket, .. } => ApprovalTarget::Unix {
            socket: socket.clone(),
        },
    }))
}

/// The line that allows `prefix` for an exec ask, if the prefix is accepted: not one of the
/// reference's banned prefixes, and with it the kernel would allow what was asked (its
/// decision, with the policy's unmatched default, not the reference's heuristics).
fn proposed_prefix_line(ask: &Ask, policy: &Policy, prefix: &[String]) -> Result<String, String> {
    let AskTarget::Exec { tokens, .. } = &ask.target else {
        return Err(format!(
            "ask {} is a connection; --prefix applies to an exec ask",
            ask.id
        ));
    };
    let shown = render_example(prefix);
    if is_banned_prefix(prefix) {
        return Err(format!(
            "the prefix is not accepted: `{shown}` is a banned prefix (it would allow a whole \
             interpreter or shell); propose a longer one"
        ));
    }
    let mut amended = policy.clone();
    amended
        .add_prefix_rule(prefix, Decision::Allow)
        .map_err(|e| e.to_string())?;
    if amended.kernel_exec_decision(tokens) != Decision::Allow {
        return Err(format!(
            "the prefix is not accepted: allowing `{shown}` would not allow `{}` (it does not \
             cover it, or a stronger rule still decides it)",
            render_example(tokens)
        ));
    }
    prefix_amendment_line(prefix).map_err(|e| e.to_string())
}

/// The line a denial of `ask` appends (`always`), if any.
pub fn denial_line(ask: &Ask, always: bool) -> Result<Option<String>, String> {
    if !always {
        return Ok(None);
    }
    amendment_line(&ask.target, Decision::Forbidden)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The line an `--always` approval (`Allow`) or `deny --always` (`Forbidden`) of `target`
/// appends.
pub fn amendment_line(target: &AskTarget, decision: Decision) -> Result<String, AmendError> {
    match target {
        AskTarget::Exec { tokens, .. } => {
            let line = prefix_amendment_line(tokens)?;
            Ok(if decision == Decision::Forbidden {
                line.replace("decision=\"allow\")", "decision=\"forbidden\")")
            } else {
                line
            })
        }
        AskTarget::Network { .. } => network_line(target, decision),
        AskTarget::Unix { socket, .. } => unix_amendment_line(socket, decision),
    }
}

/// Why `ask` has no `--always` approval, if it has none: a `prompt` rule decided the exec (or
/// named the unix socket whole), and an allow rule cannot override it (the strongest decision
/// wins).
fn always_refused(ask: &Ask) -> Option<String> {
    match &ask.target {
        AskTarget::Exec { by_rule: true, .. } => Some(format!(
            "ask {} comes from a prompt rule ({}); an allow rule cannot override it (prefix \
             rules combine by strongest decision), so there is no amendment to write. Approve it \
             --once or --session, or change that rule.",
            ask.id,
            ask.record
                .rule
                .as_ref()
                .map_or("?".to_string(), ToString::to_string)
        )),
        AskTarget::Unix {
            socket,
            by_whole_name: true,
            ..
        } => Some(format!(
            "ask {} comes from a unix_rule that names `{socket}` itself ({}); an allow rule for \
             the same socket would not override it (the stronger decision wins), so there is \
             no amendment to write. Approve it --once or --session, or change that rule.",
            ask.id,
            ask.record
                .rule
                .as_ref()
                .map_or("?".to_string(), ToString::to_string)
        )),
        _ => None,
    }
}

/// The rule that forbids a network ask's destination outright, said as a refusal: the kernel
/// would not let an approval through, so say which rule stands in the way instead of
/// approving in vain.
fn forbidden_destination(
    image: &EnforcementImage,
    scope: u64,
    target: &AskTarget,
) -> Option<String> {
    let AskTarget::Network {
        address,
        port,
        transport,
        ..
    } = target
    else {
        return None;
    };
    let transport = Transport::parse(transport).unwrap_or(Transport::Tcp);
    let verdict = image.destination_verdict(scope, *address, *port, transport)?;
    if verdict.decision != Decision::Forbidden {
        return None;
    }
    let rule = image.rule(&verdict);
    let at = rule
        .origin
        .as_ref()
        .map(|o| format!(" ({}:{})", o.file, o.line))
        .unwrap_or_default();
    Some(format!(
        "{address}:{port} is forbidden by `{}`{at}; an approval never overrides a forbidden rule",
        rule.text
    ))
}

/// The amendment an `--always` answer to a network ask writes, covering exactly what was asked:
/// the host (the name the program asked for, else the address) and what the connection used.
/// `http` (80/tcp) and `https` (443) are the reference's `network_rule`; so is an ask a
/// `network_rule` made (only the host's own later allow or deny can answer it). Any other port
/// of an unmatched destination is guard's `address_rule` for that port and transport alone (the
/// reference's `socks5_tcp` would be every TCP port).
fn network_line(target: &AskTarget, decision: Decision) -> Result<String, AmendError> {
    let AskTarget::Network {
        host,
        address,
        port,
        transport,
        protocol,
        by_rule,
    } = target
    else {
        return Err(AmendError::InvalidNetworkRule("not a network ask".into()));
    };
    let host = host.clone().unwrap_or_else(|| address.to_string());
    let verb = if decision == Decision::Allow {
        "Allow"
    } else {
        "Deny"
    };
    if *by_rule || matches!(protocol, NetworkProtocol::Http | NetworkProtocol::Https) {
        let justification = format!("{verb} {} access to {host}", label(*protocol));
        return network_amendment_line(&host, *protocol, decision, Some(&justification));
    }
    let transport = Transport::parse(transport).unwrap_or(Transport::Tcp);
    let justification = format!("{verb} {transport} port {port} access to {host}");
    address_amendment_line(&host, *port, transport, decision, Some(&justification))
}

/// The reference's label in amendment justifications (`Allow https_connect access to <host>`).
fn label(protocol: NetworkProtocol) -> &'static str {
    match protocol {
        NetworkProtocol::Http => "http",
        NetworkProtocol::Https => "https_connect",
        NetworkProtocol::Socks5Tcp => "socks5_tcp",
        NetworkProtocol::Socks5Udp => "socks5_udp",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network(port: u16, by_rule: bool) -> AskTarget {
        AskTarget::Network {
            host: Some("api2.example.test".into()),
            address: "203.0.113.7".parse().unwrap(),
            port,
            transport: "tcp".into(),
            protocol: crate::asks::protocol_for(port, "tcp"),
            by_rule,
        }
    }

    #[test]
    fn labels_are_the_references() {
        assert_eq!(label(NetworkProtocol::Https), "https_connect");
        assert_eq!(label(NetworkProtocol::Http), "http");
    }

    #[test]
    fn an_https_ask_is_the_references_network_rule_and_another_port_that_port_alone() {
        assert_eq!(
            amendment_line(&network(443, false), Decision::Allow).unwrap(),
            "network_rule(host=\"api2.example.test\", protocol=\"https\", decision=\"allow\", \
             justification=\"Allow https_connect access to api2.example.test\")"
        );
        assert_eq!(
            amendment_line(&network(8080, false), Decision::Forbidden).unwrap(),
            "address_rule(addresses=[\"api2.example.test\"], ports=[8080], transport=\"tcp\", \
             decision=\"deny\", justification=\"Deny tcp port 8080 access to api2.example.test\")"
        );
    }

    #[test]
    fn a_unix_ask_always_is_a_unix_rule_for_that_socket_alone() {
        let unix = |socket: &str| AskTarget::Unix {
            socket: socket.into(),
            by_rule: false,
            by_whole_name: false,
        };
        let line = amendment_line(&unix("/tmp/t/srv.sock"), Decision::Allow).unwrap();
        assert_eq!(
            line,
            "unix_rule(socket=\"/tmp/t/srv.sock\", decision=\"allow\")"
        );
        let mut parser = crate::policy::PolicyParser::new();
        parser.parse("amend.rules", &line).unwrap();
        let policy = parser.build();
        let rules = policy.unix_rules_with_builtins();
        let decide = |address: &[u8]| {
            crate::policy::unix::decide(&rules, Decision::Prompt, address).decision()
        };
        assert_eq!(decide(b"/tmp/t/srv.sock"), Decision::Allow);
        assert_eq!(
            decide(b"/tmp/t/srv.sock2"),
            Decision::Prompt,
            "that name alone"
        );
        assert_eq!(
            amendment_line(&unix("@guard-test"), Decision::Forbidden).unwrap(),
            "unix_rule(socket=\"@guard-test\", decision=\"deny\")"
        );
        // A name the rule language would read as a prefix has no line of its own.
        let err = amendment_line(&unix("/tmp/t/a*"), Decision::Allow).unwrap_err();
        assert!(
            err.to_string().contains("more than this one socket"),
            "{err}"
        );
    }

    #[test]
    fn an_exec_denied_always_is_a_forbidden_prefix_rule() {
        let target = AskTarget::Exec {
            tokens: vec!["git".into(), "push".into()],
            by_rule: false,
        };
        let line = amendment_line(&target, Decision::Forbidden).unwrap();
        assert!(line.ends_with("decision=\"forbidden\")"), "{line}");
        assert!(
            line.starts_with("prefix_rule(pattern=[\"git\", \"push\"]"),
            "{line}"
        );
    }
}
