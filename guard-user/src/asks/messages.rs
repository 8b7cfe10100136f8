//! From a kernel event to what people and programs read: the blocked-request record, the
//! human message (`docs/policy-language.md` §5.2 for execs, §7 for network), and for a
//! `prompt`, the ask's target; the refusal line `guard run` and the daemon print
//! ([`describe_event`]).

use std::path::Path;

use super::book::{AskTarget, BlockedRequest, RulePlace, timestamp};
use crate::compile::image::EnforcementImage;
use crate::kernel::events::{Action, EventKind, KernelEvent};
use crate::policy::{Decision, NetworkProtocol};

/// The network protocol whose endpoints cover a destination (the one an amendment for it
/// names): 80/tcp is http, 443 is https, any other port socks5 over its transport.
pub fn protocol_for(port: u16, transport: &str) -> NetworkProtocol {
    match (port, transport) {
        (80, "tcp") => NetworkProtocol::Http,
        (443, _) => NetworkProtocol::Https,
        (_, "udp") => NetworkProtocol::Socks5Udp,
        _ => NetworkProtocol::Socks5Tcp,
    }
}

/// The executed file's name, as the kernel compares it (argv[0] is the caller's choice).
fn executed_name(exe: &str) -> String {
    let path = Path::new(exe);
    let real = if path.is_absolute() {
        std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
    } else {
        path.to_path_buf()
    };
    real.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| exe.to_string())
}

/// What a refusal (or a prompt) says, and for a prompt what could be approved.
pub struct Described {
    pub message: String,
    /// `Some` for a `prompt` that an approval can answer.
    pub target: Option<AskTarget>,
}

/// The host a destination event is about: the policy's name for its address, else the first
/// name guard's resolver answered it for (`answered`), else none (the address is shown).
fn shown_host(
    image: &EnforcementImage,
    event: &KernelEvent,
    answered: &[String],
) -> Option<String> {
    destination_host(image, event)
        .map(str::to_string)
        .or_else(|| answered.first().cloned())
}

/// The message and the ask's target; cheap enough for every event of a flood (the
/// blocked-request record, which copies the process, is made only where it is needed:
/// [`blocked_request`]). `answered`: the names guard's resolver answered the destination's
/// address for.
pub fn describe(image: &EnforcementImage, event: &KernelEvent, answered: &[String]) -> Described {
    let rule = event.rule.and_then(|id| image.rules.get(id as usize));
    let justification = rule.and_then(|r| r.justification.as_deref());
    let prompt = event.decision == Decision::Prompt;
    match (&event.kind, &event.destination) {
        (EventKind::Exec, _) => {
            let cmd = shown_command(event);
            let message = match (prompt, justification, rule) {
                (true, Some(j), _) => format!("`{cmd}` requires approval: {j}"),
                (true, None, Some(_)) => format!("`{cmd}` requires approval by policy"),
                (true, None, None) => format!(
                    "`{cmd}` requires approval: no rule matches it, and this policy asks about \
                     unmatched commands"
                ),
                (false, Some(j), _) => format!("`{cmd}` rejected: {j}"),
                (false, None, Some(r)) => format!("`{cmd}` rejected: policy forbids {}", r.summary),
                (false, None, None) => format!("`{cmd}` rejected: blocked by policy"),
            };
            let target = (prompt && !event.argv_truncated).then(|| {
                let mut tokens = vec![executed_name(&event.exe)];
                tokens.extend(event.argv.iter().skip(1).cloned());
                AskTarget::Exec {
                    tokens,
                    by_rule: !event.unmatched,
                }
            });
            Described { message, target }
        }
        (EventKind::Socket, _) => Described {
            message: match &event.socket {
                Some(socket) => format!("Refused {}.", socket_refusal(socket)),
                None => "A socket was refused by policy.".to_string(),
            },
            // No approval can answer a socket's creation (the kind is the policy's to allow).
            target: None,
        },
        (EventKind::Unix, _) => {
            let unix = event.unix.as_ref();
            let socket = unix.map_or("?", |u| u.address.as_str());
            // Asked only where the address reads back as itself: an approval names it by text.
            let target = unix
                .filter(|u| prompt && crate::policy::unix::parse_address(&u.address) == u.bytes)
                .map(|u| AskTarget::Unix {
                    socket: u.address.clone(),
                    by_rule: !event.unmatched,
                    by_whole_name: image.unix.iter().any(|entry| {
                        !entry.socket.prefix
                            && entry.socket.bytes == u.bytes
                            && Some(entry.verdict.rule) == event.rule
                    }),
                });
            let message = match (prompt, justification, rule) {
                (true, Some(j), _) => format!("unix socket `{socket}` requires approval: {j}"),
                (true, None, _) if target.is_some() => format!(
                    "unix socket `{socket}` requires approval{}",
                    if event.unmatched {
                        ": no rule names it, and enforcement(unmatched_unix) asks about it"
                    } else {
                        " by policy"
                    }
                ),
                (_, Some(j), _) => format!("unix socket `{socket}` rejected: {j}"),
                (true, None, _) => format!(
                    "unix socket `{socket}` rejected: it needs approval; add \
                     unix_rule(socket=\"{socket}\", decision=\"allow\") to let it through"
                ),
                (false, None, Some(r)) => {
                    format!(
                        "unix socket `{socket}` rejected: policy forbids {}",
                        r.summary
                    )
                }
                (false, None, None) => format!(
                    "unix socket `{socket}` rejected: no rule names it and \
                     enforcement(unmatched_unix) refuses it; add \
                     unix_rule(socket=\"{socket}\", decision=\"allow\") to let it through"
                ),
            };
            Described { message, target }
        }
        (EventKind::Read | EventKind::Write, _) => {
            let access = if event.kind == EventKind::Read {
                "read"
            } else {
                "write"
            };
            let path = event.path.as_deref().unwrap_or("?");
            // No approval can answer a file operation: it was refused, prompt or not.
            let message = match (prompt, justification, rule) {
                (_, Some(j), _) => format!("{access} of `{path}` rejected: {j}"),
                (true, None, Some(r)) => {
                    format!(
                        "{access} of `{path}` rejected: approval required for {}",
                        r.summary
                    )
                }
                (false, None, Some(r)) => {
                    format!(
                        "{access} of `{path}` rejected: policy forbids {}",
                        r.summary
                    )
                }
                (_, None, None) => format!("{access} of `{path}` rejected: blocked by policy"),
            };
            Described {
                message,
                target: None,
            }
        }
        (_, Some(d)) if prompt => {
            let host = shown_host(image, event, answered);
            let protocol = protocol_for(d.port, d.transport);
            // `curl wants api.example.com:443 (203.0.113.7), https`: the program, the host it
            // asked for (or the address), and what an approval would cover.
            let wanted = match &host {
                // The name has not left the host yet: it has no address to show.
                Some(host) if crate::resolve::stand_ins::is_stand_in_ip(d.address) => {
                    format!("{host}:{} (not resolved until approved)", d.port)
                }
                Some(host) => format!("{host}:{} ({})", d.port, d.address),
                None => format!("{}:{}", bracketed(d.address), d.port),
            };
            let why = match justification {
                Some(j) => format!(": {j}"),
                None if event.unmatched => {
                    ": no rule names it, and this policy asks about other destinations".to_string()
                }
                None => String::new(),
            };
            let message = format!(
                "{} wants {wanted}, {}{why}",
                executed_name(&event.exe),
                approval_scope(protocol, d.port, d.transport)
            );
            let target = Some(AskTarget::Network {
                host,
                address: d.address,
                port: d.port,
                transport: d.transport.to_string(),
                protocol,
                by_rule: !event.unmatched,
            });
            Described { message, target }
        }
        (_, Some(d)) => {
            let host = shown_host(image, event, answered);
            let shown = host.unwrap_or_else(|| d.address.to_string());
            let detail = match (prompt, justification) {
                (true, Some(j)) => format!("requires approval: {j}"),
                (true, None) => "was blocked: domain is not on the allowlist for the current \
                                 sandbox mode"
                    .to_string(),
                (false, _) => "was blocked: domain is explicitly denied by policy and cannot be \
                               approved from this prompt"
                    .to_string(),
            };
            let message = format!("Network access to \"{shown}\" {detail}.");
            Described {
                message,
                target: None,
            }
        }
        (_, None) => Described {
            message: "Network access was blocked by policy.".to_string(),
            target: None,
        },
    }
}

/// `https` for 443, `http` for 80/tcp, else `tcp port 8080`: what a connection used, and what
/// an approval of it covers.
fn approval_scope(protocol: NetworkProtocol, port: u16, transport: &str) -> String {
    match protocol {
        NetworkProtocol::Http | NetworkProtocol::Https => protocol.as_str().to_string(),
        _ => format!("{transport} port {port}"),
    }
}

fn bracketed(address: std::net::IpAddr) -> String {
    match address {
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    }
}

/// The blocked-request record (§7, plus the process) of an event.
pub fn blocked_request(
    image: &EnforcementImage,
    event: &KernelEvent,
    answered: &[String],
) -> BlockedRequest {
    let rule = event.rule.and_then(|id| image.rules.get(id as usize));
    let prompt = event.decision == Decision::Prompt;
    let (host, protocol, port) = match &event.destination {
        Some(d) => (
            shown_host(image, event, answered).unwrap_or_else(|| d.address.to_string()),
            protocol_for(d.port, d.transport).as_str().to_string(),
            Some(d.port),
        ),
        None if event.kind.is_file() => (
            event.path.clone().unwrap_or_default(),
            if event.kind == EventKind::Read {
                "read"
            } else {
                "write"
            }
            .to_string(),
            None,
        ),
        None if event.kind == EventKind::Unix => (
            event
                .unix
                .as_ref()
                .map(|u| u.address.clone())
                .unwrap_or_default(),
            "unix".to_string(),
            None,
        ),
        None => (String::new(), "exec".to_string(), None),
    };
    BlockedRequest {
        host,
        protocol,
        port,
        reason: if prompt { "not_allowed" } else { "denied" }.to_string(),
        decision: if prompt { "ask" } else { "deny" }.to_string(),
        source: if event.unmatched {
            "mode_guard"
        } else {
            "baseline_policy"
        }
        .to_string(),
        pid: event.tgid,
        uid: event.uid,
        executable: event.exe.clone(),
        argv: event.argv.clone(),
        timestamp: timestamp(event.time),
        rule: rule.and_then(|r| r.origin.as_ref()).map(|o| RulePlace {
            file: o.file.to_string(),
            line: o.line,
        }),
        justification: rule.and_then(|r| r.justification.clone()),
    }
}

/// `guard: refused exec of `git push origin main`: policy forbids commands starting with
/// `git push` (team.rules:3)`. `answered`: the names guard's resolver answered a destination's
/// address for, named when no rule's host does.
pub fn describe_event(
    image: &EnforcementImage,
    event: &KernelEvent,
    answered: &[String],
) -> String {
    let what = match (&event.kind, &event.destination) {
        (EventKind::Exec, _) => {
            format!("exec of `{}`", shown_command(event))
        }
        (EventKind::Unix, _) => {
            let unix = event.unix.as_ref();
            format!(
                "{} unix socket {}",
                if unix.is_some_and(|u| u.call == "send") {
                    "send to"
                } else {
                    "connect to"
                },
                unix.map_or("?", |u| u.address.as_str())
            )
        }
        (EventKind::Read | EventKind::Write, _) => format!(
            "{} of `{}`",
            if event.kind == EventKind::Read {
                "read"
            } else {
                "write"
            },
            event.path.as_deref().unwrap_or("?")
        ),
        (kind, Some(d)) => {
            let verb = if *kind == EventKind::Connect {
                "connect to"
            } else {
                "send to"
            };
            let addr = match d.address {
                std::net::IpAddr::V6(a) => format!("[{a}]"),
                a => a.to_string(),
            };
            let host = match destination_host(image, event) {
                Some(host) => format!(" ({host})"),
                None if !answered.is_empty() => format!(" ({})", answered.join(", ")),
                None => String::new(),
            };
            format!("{verb} {addr}:{}/{}{host}", d.port, d.transport)
        }
        (_, None) => "call".to_string(),
    };
    let verb = if event.audit_only || event.action == Action::None {
        "audit-only, would refuse"
    } else {
        "refused"
    };
    if let Some(socket) = &event.socket {
        return format!("guard: {verb} {}", socket_refusal(socket));
    }
    let why = match event.rule.and_then(|id| image.rules.get(id as usize)) {
        Some(rule) => {
            let location = rule
                .origin
                .as_ref()
                .map(|o| format!(" ({}:{})", short_file(&o.file), o.line))
                .unwrap_or_default();
            let reason = match event.decision {
                Decision::Prompt => format!("approval required for {}", rule.summary),
                _ => format!("policy forbids {}", rule.summary),
            };
            let justification = rule
                .justification
                .as_deref()
                .map(|j| format!(": {j}"))
                .unwrap_or_default();
            format!("{reason}{justification}{location}")
        }
        None if event.anonymous => format!(
            "the executed file has no path a rule could name (a memfd or a deleted file), and \
             this policy's enforcement(anonymous_exec=...) is `{}`",
            event.decision.as_str()
        ),
        None if event.kind == EventKind::Unix => format!(
            "no rule names it, and this policy's enforcement(unmatched_unix=...) is `{}`; to let \
             it through, add unix_rule(socket=\"{}\", decision=\"allow\")",
            event.decision.as_str(),
            event.unix.as_ref().map_or("?", |u| u.address.as_str())
        ),
        None => format!(
            "no rule matches, and this policy's default for unmatched {} is `{}`",
            if event.kind == EventKind::Exec {
                "execs"
            } else {
                "destinations"
            },
            event.decision.as_str()
        ),
    };
    format!("guard: {verb} {what}: {why}")
}

/// `a raw socket (IPPROTO_ICMP): enforcement(socket_kinds=...) does not allow "raw"`.
pub fn socket_refusal(socket: &crate::kernel::events::EventSocket) -> String {
    format!(
        "a {} socket ({}): enforcement(socket_kinds=...) does not allow \"{}\"",
        socket.kind,
        socket.protocol_name(),
        socket.kind
    )
}

/// An exec as a person would type it: the original argv (the path, when argv is unknown),
/// shell-quoted.
pub fn shown_command(event: &KernelEvent) -> String {
    let argv = if event.argv.is_empty() {
        vec![event.exe.clone()]
    } else {
        event.argv.clone()
    };
    shlex::try_join(argv.iter().map(String::as_str)).unwrap_or_else(|_| argv.join(" "))
}

/// The host name a refused destination's address came from: the name of the deciding entry
/// that covers it (`None` for an address rule's CIDR, an IP literal, or the unmatched default).
pub fn destination_host<'a>(image: &'a EnforcementImage, event: &KernelEvent) -> Option<&'a str> {
    let d = event.destination.as_ref()?;
    let rule = event.rule?;
    let transport = crate::policy::Transport::parse(d.transport)?;
    image
        .destinations
        .host_for(d.address, d.port, transport, rule, event.scope)
}

fn short_file(file: &str) -> &str {
    std::path::Path::new(file)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(file)
}

#[cfg(test)]
pub(in crate::asks) mod tests {
    use super::*;

    #[test]
    fn ports_map_to_the_protocol_whose_endpoints_cover_them() {
        assert_eq!(protocol_for(443, "tcp"), NetworkProtocol::Https);
        assert_eq!(protocol_for(443, "udp"), NetworkProtocol::Https);
        assert_eq!(protocol_for(80, "tcp"), NetworkProtocol::Http);
        assert_eq!(protocol_for(80, "udp"), NetworkProtocol::Socks5Udp);
        assert_eq!(protocol_for(22, "tcp"), NetworkProtocol::Socks5Tcp);
        for (port, transport) in [(443, "tcp"), (80, "tcp"), (22, "tcp"), (53, "udp")] {
            let t = crate::policy::Transport::parse(transport).unwrap();
            assert!(
                protocol_for(port, transport)
                    .endpoints()
                    .iter()
                    .any(|(tr, p)| tr.covers(t) && p.is_none_or(|p| p == port)),
                "{port}/{transport}"
            );
        }
    }

    /// An event of `/bin/sh` (pid 1) with nothing else set.
    pub(in crate::asks) fn event(
        kind: EventKind,
        decision: Decision,
        action: crate::kernel::events::Action,
    ) -> KernelEvent {
        KernelEvent {
            time: std::time::SystemTime::now(),
            kind,
            decision,
            action,
            audit_only: false,
            unmatched: false,
            rule: None,
            pid: 1,
            tgid: 1,
            ppid: 0,
            uid: 0,
            gid: 0,
            cgroup_id: 0,
            scope: 0,
            comm: "sh".into(),
            exe: "/bin/sh".into(),
            argv: Vec::new(),
            argv_truncated: false,
            anonymous: false,
            dev: 0,
            ino: 0,
            socket: None,
            unix: None,
            destination: None,
            path: None,
            sandbox: None,
            overlay: false,
        }
    }

    #[test]
    fn a_unix_refusal_by_the_default_names_the_socket_and_the_rule_that_allows_it() {
        let image = crate::compile::compile(
            &crate::policy::Policy::default(),
            &crate::compile::NoResolver,
            &crate::compile::CompileEnv::default(),
        );
        let event = KernelEvent {
            unmatched: true,
            unix: Some(crate::kernel::events::EventUnix {
                address: "/tmp/t/srv.sock".into(),
                call: "connect",
                bytes: b"/tmp/t/srv.sock".to_vec(),
            }),
            ..event(
                EventKind::Unix,
                Decision::Forbidden,
                crate::kernel::events::Action::Eperm,
            )
        };
        assert_eq!(
            describe_event(&image, &event, &[]),
            "guard: refused connect to unix socket /tmp/t/srv.sock: no rule names it, and this \
             policy's enforcement(unmatched_unix=...) is `forbidden`; to let it through, add \
             unix_rule(socket=\"/tmp/t/srv.sock\", decision=\"allow\")"
        );
        let described = describe(&image, &event, &[]);
        assert!(
            described
                .message
                .contains("unix_rule(socket=\"/tmp/t/srv.sock\", decision=\"allow\")"),
            "{}",
            described.message
        );
    }

    #[test]
    fn a_file_refusal_names_the_access_the_path_and_the_rule_and_asks_nothing() {
        let policy = {
            let mut parser = crate::policy::PolicyParser::new();
            parser
                .parse("t.rules", "rule_set(deny=[\"write(.git/**)\"])\n")
                .unwrap();
            parser.build()
        };
        let image = crate::compile::compile(
            &policy,
            &crate::compile::NoResolver,
            &crate::compile::CompileEnv::default(),
        );
        let rule = image
            .patterns
            .decide_path(crate::policy::rule_set::Tool::Write, "/w/.git/config");
        let (decision, rule) = rule.expect("the write table decides it");
        let event = KernelEvent {
            rule: Some(rule),
            path: Some("/w/.git/config".into()),
            ..event(
                EventKind::Write,
                decision,
                crate::kernel::events::Action::Eacces,
            )
        };
        let described = describe(&image, &event, &[]);
        assert_eq!(
            described.message,
            "write of `/w/.git/config` rejected: policy forbids writing files matching `.git/**`"
        );
        assert!(described.target.is_none());
        let request = blocked_request(&image, &event, &[]);
        assert_eq!(
            (request.host.as_str(), request.protocol.as_str()),
            ("/w/.git/config", "write")
        );
    }

    #[test]
    fn an_ask_for_an_unknown_destination_names_the_program_the_host_it_asked_for_and_the_port() {
        let image = crate::compile::compile(
            &crate::policy::Policy::default(),
            &crate::compile::NoResolver,
            &crate::compile::CompileEnv::default(),
        );
        let mut event = KernelEvent {
            unmatched: true,
            comm: "curl".into(),
            exe: "curl".into(),
            argv: vec!["curl".into(), "https://api2.example.test/".into()],
            destination: Some(crate::kernel::events::EventDestination {
                address: "203.0.113.7".parse().unwrap(),
                port: 443,
                transport: "tcp",
            }),
            ..event(
                EventKind::Connect,
                Decision::Prompt,
                crate::kernel::events::Action::Eperm,
            )
        };
        let answered = vec!["api2.example.test".to_string()];
        let described = describe(&image, &event, &answered);
        assert_eq!(
            described.message,
            "curl wants api2.example.test:443 (203.0.113.7), https: no rule names it, and this \
             policy asks about other destinations"
        );
        let Some(AskTarget::Network { host, .. }) = &described.target else {
            panic!("a network ask");
        };
        assert_eq!(host.as_deref(), Some("api2.example.test"));
        assert_eq!(
            blocked_request(&image, &event, &answered).host,
            "api2.example.test"
        );
        // No name known, another port: the address, and the port an approval covers.
        event.destination = Some(crate::kernel::events::EventDestination {
            address: "127.0.0.3".parse().unwrap(),
            port: 8080,
            transport: "tcp",
        });
        assert!(
            describe(&image, &event, &[])
                .message
                .starts_with("curl wants 127.0.0.3:8080, tcp port 8080"),
        );
    }
}
