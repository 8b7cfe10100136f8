//! `guard check --dest HOST_OR_IP:PORT`: what the policy decides for one destination, and
//! which network and address rules say so, with the policy's host names resolved as
//! `guard run` resolves them (so an address gets the rules of the hosts it was answered for).

use std::net::{IpAddr, SocketAddr};

use anstream::println;
use serde_json::{Value, json};

use crate::cli::output::{decision_style, dim, print_json};
use crate::compile::{HostResolver, NoResolver, host_names};
use crate::policy::host::normalize_network_host;
use crate::policy::load::{EMBEDDED_DEFAULT_NAME, SYSTEM_RULES_DIR};
use crate::policy::rule::canonical_ip;
use crate::policy::{Decision, DestinationEvaluation, Policy, RuleKind, Transport};
use crate::resolve::lookup::{DnsCache, DnsConfig, DnsResolver};

/// The host part of `--dest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DestHost {
    /// An IP literal (IPv4-mapped IPv6 already written as IPv4).
    Address(IpAddr),
    /// A normalised host name.
    Name(String),
}

/// A parsed `--dest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dest {
    pub host: DestHost,
    pub port: u16,
}

const DEST_FORMAT: &str =
    "give it as HOST:PORT, for example example.com:443, 10.0.0.1:80 or [::1]:443";

/// `example.com:443`, `10.0.0.1:80`, `[::1]:443`; the port is 1 to 65535.
pub fn parse_dest(raw: &str) -> Result<Dest, String> {
    let (host, port) = if let Some(bracketed) = raw.strip_prefix('[') {
        let (inside, rest) = bracketed
            .split_once(']')
            .ok_or_else(|| format!("--dest {raw:?} has an unclosed `[`: {DEST_FORMAT}"))?;
        let port = rest
            .strip_prefix(':')
            .ok_or_else(|| format!("--dest {raw:?} has no port: {DEST_FORMAT}"))?;
        let ip: IpAddr = inside
            .parse()
            .map_err(|_| format!("--dest {raw:?}: `{inside}` is not an IPv6 address"))?;
        (DestHost::Address(canonical_ip(ip)), port)
    } else {
        let (host, port) = raw
            .rsplit_once(':')
            .ok_or_else(|| format!("--dest {raw:?} has no port: {DEST_FORMAT}"))?;
        if host.contains(':') {
            return Err(format!(
                "--dest {raw:?}: write an IPv6 address in brackets, like [::1]:443"
            ));
        }
        let host = match host.parse::<IpAddr>() {
            Ok(ip) => DestHost::Address(canonical_ip(ip)),
            Err(_) => {
                let name =
                    normalize_network_host(host).map_err(|err| format!("--dest {raw:?}: {err}"))?;
                match name.parse::<IpAddr>() {
                    Ok(ip) => DestHost::Address(canonical_ip(ip)),
                    Err(_) => DestHost::Name(name),
                }
            }
        };
        (host, port)
    };
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|port| *port != 0)
        .ok_or_else(|| format!("--dest {raw:?}: the port must be a number from 1 to 65535"))?;
    Ok(Dest { host, port })
}

/// Whether host names are resolved for a `--dest` check.
#[derive(Clone, Copy, Debug)]
pub enum Resolution {
    /// Resolved with this server, or the system's configuration (`None`).
    Resolve(Option<SocketAddr>),
    /// Not resolved (`--no-resolve`).
    Off,
}

/// The names resolved for a check and what went wrong with any of them.
struct Resolved {
    cache: Option<DnsCache>,
    /// `(name, why)` for each name that got no address.
    failures: Vec<(String, String)>,
}

/// Resolves the policy's host names and a `--dest` name, once, as `guard run` does at start.
fn resolve(policy: &Policy, dest: &Dest, resolution: Resolution) -> Resolved {
    let Resolution::Resolve(nameserver) = resolution else {
        return Resolved {
            cache: None,
            failures: Vec::new(),
        };
    };
    let mut names = host_names(policy);
    if let DestHost::Name(name) = &dest.host
        && !names.contains(name)
    {
        names.push(name.clone());
    }
    if names.is_empty() {
        return Resolved {
            cache: None,
            failures: Vec::new(),
        };
    }
    let resolved = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| {
            let resolver = DnsResolver::new(&DnsConfig { nameserver })?;
            Ok(runtime.block_on(resolver.resolve(&names)))
        });
    match resolved {
        Ok(cache) => {
            let failures = names
                .iter()
                .filter(|name| cache.lookup(name).is_empty())
                .map(|name| {
                    let why = cache.error(name).unwrap_or("the answer held no address");
                    (name.clone(), why.to_string())
                })
                .collect();
            Resolved {
                cache: Some(cache),
                failures,
            }
        }
        Err(err) => Resolved {
            cache: None,
            failures: vec![("(every name)".to_string(), format!("{err:#}"))],
        },
    }
}

/// Evaluates `dest` and prints the decision (JSON or an explanation).
pub fn check(
    policy: &Policy,
    dest: &Dest,
    transport: Transport,
    resolution: Resolution,
    as_json: bool,
) {
    let resolved = resolve(policy, dest, resolution);
    let resolver: &dyn HostResolver = match &resolved.cache {
        Some(cache) => cache,
        None => &NoResolver,
    };
    let evaluation = match &dest.host {
        DestHost::Address(ip) => policy.check_destination(*ip, dest.port, transport, resolver),
        DestHost::Name(name) => policy.check_destination_name(name, dest.port, transport, resolver),
    };
    if as_json {
        let mut value = dest_json(dest, transport, &evaluation);
        value["resolved"] = json!(resolved.cache.is_some());
        value["resolve_errors"] = json!(
            resolved
                .failures
                .iter()
                .map(|(name, why)| json!({"host": name, "error": why}))
                .collect::<Vec<_>>()
        );
        print_json(&value);
    } else {
        explain(policy, dest, transport, &evaluation, &resolved);
    }
}

fn dest_json(dest: &Dest, transport: Transport, evaluation: &DestinationEvaluation) -> Value {
    let mut destination = json!({"port": dest.port, "transport": transport.as_str()});
    match &dest.host {
        DestHost::Address(ip) => destination["address"] = json!(ip.to_string()),
        DestHost::Name(name) => destination["host"] = json!(name),
    }
    let matched: Vec<Value> = evaluation
        .matched
        .iter()
        .map(|found| {
            let mut object = json!({
                "kind": found.kind.as_str(),
                "text": found.text,
                "decision": found.decision.as_str(),
                "audit_only": found.audit_only,
            });
            if let Some(origin) = &found.origin {
                object["file"] = json!(&*origin.file);
                object["line"] = json!(origin.line);
            }
            if let Some(justification) = &found.justification {
                object["justification"] = json!(justification);
            }
            if let Some(host) = &found.host {
                object["host"] = json!(host);
            }
            object
        })
        .collect();
    json!({
        "destination": destination,
        "decision": evaluation.decision.as_str(),
        "unmatched": evaluation.unmatched,
        "matched_rules": matched,
    })
}

fn render_dest(dest: &Dest, transport: Transport) -> String {
    let host = match &dest.host {
        DestHost::Address(IpAddr::V6(ip)) => format!("[{ip}]"),
        DestHost::Address(ip) => ip.to_string(),
        DestHost::Name(name) => name.clone(),
    };
    format!("{host}:{} ({transport})", dest.port)
}

fn explain(
    policy: &Policy,
    dest: &Dest,
    transport: Transport,
    evaluation: &DestinationEvaluation,
    resolved: &Resolved,
) {
    let style = decision_style(Some(evaluation.decision));
    let dim = dim();
    println!(
        "{style}{}{style:#}  {}",
        evaluation.decision.as_str(),
        render_dest(dest, transport)
    );
    if evaluation.unmatched {
        println!(
            "    no rule matches; the policy's enforcement(unmatched_network=...) decides: {}",
            evaluation.decision.as_str()
        );
    }
    for found in &evaluation.matched {
        let style = decision_style(Some(found.decision));
        let mut line = format!(
            "    {style}{}{style:#} by {}",
            found.decision.as_str(),
            found.text
        );
        if let Some(origin) = &found.origin {
            line.push_str(&format!(" {dim}at {origin}{dim:#}"));
        }
        if found.kind == RuleKind::Network {
            line.push_str(&format!(
                " {dim}(its host's last allow or deny decides){dim:#}"
            ));
        }
        if found.audit_only {
            line.push_str(&format!(
                " {dim}(audit only: recorded, not enforced){dim:#}"
            ));
        }
        println!("{line}");
        if let Some(justification) = &found.justification {
            println!("      {dim}justification:{dim:#} {justification}");
        }
    }
    if resolved.cache.is_none() && matches!(dest.host, DestHost::Name(_)) {
        println!(
            "  {dim}note:{dim:#} nothing was resolved (--no-resolve), so only rules written with \
             this name matched; the kernel decides by the addresses it resolves to."
        );
    }
    for (name, why) in &resolved.failures {
        println!(
            "  {dim}note:{dim:#} {name} did not resolve ({why}): its rules hold no address here, \
             as in the kernel until it does"
        );
    }
    if policy.enforcement().audit_only {
        println!(
            "  {dim}note:{dim:#} the policy is in audit-only mode: the kernel records this \
             decision and lets the connection through."
        );
    }
    println!("{}", how_to_change(dest, evaluation));
}

/// What to change to get another decision for this destination.
fn how_to_change(dest: &Dest, evaluation: &DestinationEvaluation) -> String {
    let address = match &dest.host {
        DestHost::Address(ip) => ip.to_string(),
        DestHost::Name(name) => name.clone(),
    };
    let port = dest.port;
    if evaluation.unmatched {
        return format!(
            "To decide it: add address_rule(addresses=[\"{address}\"], ports=[{port}], \
             decision=\"allow\"|\"prompt\"|\"deny\"), or change enforcement(unmatched_network=...)."
        );
    }
    if evaluation.decision == Decision::Allow {
        return format!(
            "To ask or refuse instead: add address_rule(addresses=[\"{address}\"], ports=[{port}], \
             decision=\"prompt\" or \"deny\") (the strongest decision wins)."
        );
    }
    let Some(strongest) = evaluation
        .matched
        .iter()
        .find(|found| found.decision == evaluation.decision)
    else {
        return String::new();
    };
    let place = strongest
        .origin
        .as_ref()
        .map_or_else(|| "an amendment".to_string(), ToString::to_string);
    if place.starts_with(EMBEDDED_DEFAULT_NAME) {
        return format!(
            "To change it: the {} rule at {place} is part of the embedded default policy; give \
             --rules PATH (or create {SYSTEM_RULES_DIR}) to use your own policy instead.",
            evaluation.decision.as_str()
        );
    }
    match (strongest.kind, &strongest.host) {
        (RuleKind::Network, host) => {
            let host = host.clone().unwrap_or(address);
            format!(
                "To change it: for host {host} the last allow or deny wins, so `guard allow-host \
                 {host} --protocol PROTOCOL --rules-file FILE` appends one (or edit the rule at \
                 {place}). An address rule that also matches still counts: the strongest \
                 decision wins."
            )
        }
        _ => format!(
            "To change it: edit or remove the {} rule at {place}. An allow rule cannot override \
             it: the strongest decision wins.",
            evaluation.decision.as_str()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_with_their_port() {
        for (raw, host, port) in [
            (
                "10.0.0.1:80",
                DestHost::Address("10.0.0.1".parse().unwrap()),
                80,
            ),
            ("[::1]:443", DestHost::Address("::1".parse().unwrap()), 443),
            (
                "[::ffff:10.0.0.1]:443",
                DestHost::Address("10.0.0.1".parse().unwrap()),
                443,
            ),
            (
                "Example.COM.:8443",
                DestHost::Name("example.com".into()),
                8443,
            ),
            ("localhost:65535", DestHost::Name("localhost".into()), 65535),
        ] {
            assert_eq!(parse_dest(raw).unwrap(), Dest { host, port }, "{raw}");
        }
    }

    #[test]
    fn bad_destinations_say_what_to_write() {
        for (raw, want) in [
            ("example.com", "has no port"),
            ("[::1]", "has no port"),
            ("[::1:443", "unclosed `[`"),
            ("::1:443", "write an IPv6 address in brackets"),
            ("[x]:443", "`x` is not an IPv6 address"),
            ("example.com:0", "the port must be a number from 1 to 65535"),
            (
                "example.com:65536",
                "the port must be a number from 1 to 65535",
            ),
            (
                "example.com:https",
                "the port must be a number from 1 to 65535",
            ),
            (":443", "network_rule host cannot be empty"),
            ("*.x:443", "wildcards are not allowed"),
        ] {
            let err = parse_dest(raw).unwrap_err();
            assert!(err.contains(want), "{raw}: {err}");
        }
    }
}
