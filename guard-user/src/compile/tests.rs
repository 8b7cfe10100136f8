//! Policy → EnforcementImage: exec identities, names and argv rules; destinations per host and
//! per address rule; rule ids back to file and line; and parity with the evaluators.

use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::kernel_engine::KernelEngine;
use super::*;
use crate::policy::rule::MULTI_CALL_PROGRAMS;
use crate::policy::{Decision, PolicyParser, Transport};

use crate::compile::test_support::Table;

fn parse(src: &str) -> Policy {
    parse_named("c.rules", src)
}

fn parse_named(name: &str, src: &str) -> Policy {
    let mut parser = PolicyParser::new();
    parser
        .parse(name, src)
        .unwrap_or_else(|err| panic!("{src:?} was refused: {err}"));
    parser.build()
}

/// No PATH folders: nothing is found by name.
fn no_path() -> CompileEnv {
    CompileEnv::default()
}

fn compile_plain(policy: &Policy) -> EnforcementImage {
    compile(policy, &NoResolver, &no_path())
}

fn write_executable(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, "#!/bin/sh\n").unwrap();
}

fn identity_of(path: &Path) -> (u64, u64) {
    let metadata = std::fs::metadata(path).unwrap();
    (kernel_dev(metadata.dev()), metadata.ino())
}

fn verdict(decision: Decision, rule: u32) -> Verdict {
    Verdict {
        decision,
        rule,
        audit_only: false,
    }
}

type DestinationRow = (String, Option<u16>, Transport, Decision, u32);

/// An image's destination entries, compared in any order (the image keeps them by key).
#[derive(Debug)]
struct Destinations(Vec<DestinationRow>);

impl<const N: usize> PartialEq<[DestinationRow; N]> for Destinations {
    fn eq(&self, other: &[DestinationRow; N]) -> bool {
        let mut mine = self.0.clone();
        let mut theirs = other.to_vec();
        mine.sort();
        theirs.sort();
        mine == theirs
    }
}

fn destinations(image: &EnforcementImage) -> Destinations {
    Destinations(
        image
            .destinations
            .iter()
            .map(|entry| {
                (
                    entry.network.to_string(),
                    entry.port,
                    entry.transport,
                    entry.verdict.decision,
                    entry.verdict.rule,
                )
            })
            .collect(),
    )
}

// --- exec ------------------------------------------------------------------------------------

#[test]
fn kernel_dev_is_major_shifted_by_20_or_minor() {
    assert_eq!(kernel_dev(libc::makedev(8, 1)), (8 << 20) | 1);
    assert_eq!(kernel_dev(libc::makedev(259, 70000)), (259 << 20) | 70000);
    assert_eq!(kernel_dev(0), 0);
}

#[test]
fn a_bare_name_becomes_a_name_entry_and_one_identity_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("bin/tool");
    write_executable(&real);
    let links = dir.path().join("links");
    std::fs::create_dir_all(&links).unwrap();
    std::os::unix::fs::symlink(&real, links.join("tool")).unwrap();
    // A folder of the same name is not an executable.
    std::fs::create_dir_all(dir.path().join("other/tool")).unwrap();
    let env = CompileEnv {
        path_dirs: vec![
            links.clone(),
            dir.path().join("bin"),
            dir.path().join("other"),
            dir.path().join("missing"),
        ],
        ..CompileEnv::default()
    };
    let policy = parse("prefix_rule(pattern=[\"tool\"], decision=\"forbidden\")\n");
    let image = compile(&policy, &NoResolver, &env);
    let (dev, ino) = identity_of(&real);
    assert_eq!(
        image.identities,
        [IdentityEntry {
            dev,
            ino,
            path: std::fs::canonicalize(&real).unwrap(),
            verdict: verdict(Decision::Forbidden, 0),
        }]
    );
    assert_eq!(
        image.names,
        [NameEntry {
            name: "tool".into(),
            verdict: verdict(Decision::Forbidden, 0),
        }]
    );
    // A rule that forbids also holds under argv[0] and as a multi-call program's applet.
    let forbidden = verdict(Decision::Forbidden, 0);
    let applet = |program: &str| ArgvRule {
        program: program.into(),
        rest: vec![vec!["tool".to_string()]],
        verdict: forbidden,
    };
    assert_eq!(
        image.argv_rules,
        [
            ArgvRule {
                program: "tool".into(),
                rest: Vec::new(),
                verdict: forbidden,
            },
            applet("busybox"),
            applet("toybox"),
        ]
    );
    assert!(image.warnings.is_empty(), "{:?}", image.warnings);
}

#[test]
fn host_executable_paths_add_identities_for_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let on_path = dir.path().join("bin/tool");
    let elsewhere = dir.path().join("opt/tool");
    write_executable(&on_path);
    write_executable(&elsewhere);
    let env = CompileEnv {
        path_dirs: vec![dir.path().join("bin")],
        ..CompileEnv::default()
    };
    let policy = parse(&format!(
        "host_executable(name=\"tool\", paths=[{:?}, \"/nonexistent/tool\"])\nprefix_rule(pattern=[\"tool\"], decision=\"prompt\")\n",
        elsewhere.display().to_string()
    ));
    let image = compile(&policy, &NoResolver, &env);
    let found: Vec<(u64, u64)> = image.identities.iter().map(|e| (e.dev, e.ino)).collect();
    assert_eq!(found, [identity_of(&on_path), identity_of(&elsewhere)]);
    assert!(
        image
            .identities
            .iter()
            .all(|e| e.verdict == verdict(Decision::Prompt, 0))
    );
}

#[test]
fn an_absolute_first_token_is_that_files_identity_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tool");
    write_executable(&file);
    let policy = parse(&format!(
        "prefix_rule(pattern=[{:?}], decision=\"forbidden\")\nprefix_rule(pattern=[\"/nonexistent/x\"], decision=\"forbidden\")\n",
        file.display().to_string()
    ));
    let image = compile_plain(&policy);
    assert_eq!(image.identities.len(), 1);
    assert_eq!(
        (image.identities[0].dev, image.identities[0].ino),
        identity_of(&file)
    );
    assert!(image.names.is_empty());
    assert_eq!(image.warnings.len(), 1);
    assert!(
        image.warnings[0].contains("`/nonexistent/x` is not an existing regular file"),
        "{:?}",
        image.warnings
    );
    assert!(
        image.warnings[0].contains("c.rules:2"),
        "{:?}",
        image.warnings
    );
}

#[test]
fn a_program_found_nowhere_is_a_warning_and_still_a_name() {
    let policy = parse(
        "\nprefix_rule(pattern=[\"no-such-program-xyz\"], decision=\"prompt\")\nprefix_rule(pattern=[\"./rel\"])\n",
    );
    let image = compile(
        &policy,
        &NoResolver,
        &CompileEnv {
            path_dirs: vec!["/nonexistent".into()],
            ..CompileEnv::default()
        },
    );
    assert!(image.identities.is_empty());
    let names: Vec<&str> = image.names.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["no-such-program-xyz"]);
    assert_eq!(image.warnings.len(), 2, "{:?}", image.warnings);
    assert!(image.warnings[0].contains("c.rules:2"));
    assert!(image.warnings[0].contains("no executable `no-such-program-xyz`"));
    assert!(image.warnings[1].contains("`./rel` is a relative path"));
}

#[test]
fn entries_keep_the_strongest_verdict_and_ties_keep_the_earlier_rule() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bin/tool");
    write_executable(&file);
    let env = CompileEnv {
        path_dirs: vec![dir.path().join("bin")],
        ..CompileEnv::default()
    };
    let policy = parse(&format!(
        r#"
prefix_rule(pattern=["tool"], decision="allow")
prefix_rule(pattern=["tool"], decision="allow")
prefix_rule(pattern=[{path:?}], decision="prompt")
prefix_rule(pattern=["other"], decision="forbidden", audit_only=True)
prefix_rule(pattern=["other"], decision="prompt")
prefix_rule(pattern=["other"], decision="forbidden")
prefix_rule(pattern=["third"], decision="prompt")
prefix_rule(pattern=["third"], decision="allow")
"#,
        path = file.display().to_string()
    ));
    let image = compile(&policy, &NoResolver, &env);
    // The absolute path is the same file as `tool` on PATH: one identity, prompt (rule 2).
    assert_eq!(image.identities.len(), 1);
    assert_eq!(image.identities[0].verdict, verdict(Decision::Prompt, 2));
    let names: Vec<(&str, Verdict)> = image
        .names
        .iter()
        .map(|n| (n.name.as_str(), n.verdict))
        .collect();
    assert_eq!(
        names,
        [
            // Two equal allows: the earlier rule.
            ("tool", verdict(Decision::Allow, 0)),
            // An enforced forbidden beats an earlier audit-only forbidden.
            ("other", verdict(Decision::Forbidden, 5)),
            ("third", verdict(Decision::Prompt, 6)),
        ]
    );
    // Audit-only rules keep their flag when they win.
    let audit = compile_plain(&parse(
        "prefix_rule(pattern=[\"x\"], decision=\"prompt\", audit_only=True)\n",
    ));
    assert!(audit.names[0].verdict.audit_only);
}

#[test]
fn longer_rules_become_argv_rules_one_per_first_token() {
    let policy = parse(
        r#"
prefix_rule(pattern=[["git", "hg"], ["status", "log"], "-v"], decision="prompt", audit_only=True)
prefix_rule(pattern=["/usr/bin/git", "push"], decision="forbidden")
"#,
    );
    let image = compile_plain(&policy);
    let rest = vec![
        vec!["status".to_string(), "log".to_string()],
        vec!["-v".to_string()],
    ];
    let audit = Verdict {
        decision: Decision::Prompt,
        rule: 0,
        audit_only: true,
    };
    let (applets, own): (Vec<&ArgvRule>, Vec<&ArgvRule>) = image
        .argv_rules
        .iter()
        .partition(|rule| MULTI_CALL_PROGRAMS.contains(&rule.program.as_str()));
    // The prompt rules hold as busybox's and toybox's applets too; the one written as a path
    // names no applet.
    assert_eq!(applets.len(), 4, "{applets:?}");
    assert!(applets.iter().all(|rule| rule.rest.len() == 3));
    assert_eq!(
        own.into_iter().cloned().collect::<Vec<_>>(),
        [
            ArgvRule {
                program: "git".into(),
                rest: rest.clone(),
                verdict: audit,
            },
            ArgvRule {
                program: "hg".into(),
                rest,
                verdict: Verdict { rule: 1, ..audit },
            },
            ArgvRule {
                program: "/usr/bin/git".into(),
                rest: vec![vec!["push".to_string()]],
                verdict: verdict(Decision::Forbidden, 2),
            },
        ]
    );
    assert!(image.names.is_empty() && image.identities.is_empty());
    // A path as an argv rule's program cannot match the executed file's name: say so.
    assert_eq!(image.warnings.len(), 1, "{:?}", image.warnings);
    assert!(image.warnings[0].contains("`/usr/bin/git`"));
}

// --- destinations ----------------------------------------------------------------------------

#[test]
fn network_protocols_become_ports_and_transports() {
    let policy = parse(
        r#"
network_rule(host="10.0.0.1", protocol="http", decision="allow")
network_rule(host="10.0.0.2", protocol="https", decision="deny")
network_rule(host="10.0.0.3", protocol="socks5_tcp", decision="deny")
network_rule(host="10.0.0.4", protocol="socks5_udp", decision="deny")
network_rule(host="::1", protocol="http", decision="prompt")
network_rule(host="::ffff:10.0.0.9", protocol="http", decision="deny")
"#,
    );
    let image = compile_plain(&policy);
    assert_eq!(
        destinations(&image),
        [
            (
                "10.0.0.1/32".into(),
                Some(80),
                Transport::Tcp,
                Decision::Allow,
                0
            ),
            (
                "10.0.0.2/32".into(),
                Some(443),
                Transport::Tcp,
                Decision::Forbidden,
                1
            ),
            (
                "10.0.0.2/32".into(),
                Some(443),
                Transport::Udp,
                Decision::Forbidden,
                1
            ),
            (
                "10.0.0.3/32".into(),
                None,
                Transport::Tcp,
                Decision::Forbidden,
                2
            ),
            (
                "10.0.0.4/32".into(),
                None,
                Transport::Udp,
                Decision::Forbidden,
                3
            ),
            (
                "::1/128".into(),
                Some(80),
                Transport::Tcp,
                Decision::Prompt,
                4
            ),
            (
                "10.0.0.9/32".into(),
                Some(80),
                Transport::Tcp,
                Decision::Forbidden,
                5
            ),
        ]
    );
    assert!(
        image
            .destinations
            .iter()
            .all(|e| e.host.is_none() && !e.verdict.audit_only)
    );
    assert!(image.unresolved_hosts().is_empty());
}

#[test]
fn network_hosts_get_their_last_allow_or_deny_over_the_union_of_protocols() {
    let policy = parse(
        r#"
prefix_rule(pattern=["git"])
network_rule(host="10.0.0.1", protocol="https", decision="prompt")
network_rule(host="10.0.0.1", protocol="http", decision="allow")
network_rule(host="10.0.0.2", protocol="http", decision="prompt")
network_rule(host="10.0.0.2", protocol="http", decision="prompt")
"#,
    );
    let image = compile_plain(&policy);
    // Prompt then allow: allow, decided by the allow rule (kernel rule 1 + 1), on the ports of
    // both protocols.
    assert_eq!(
        destinations(&image),
        [
            (
                "10.0.0.1/32".into(),
                Some(443),
                Transport::Tcp,
                Decision::Allow,
                2
            ),
            (
                "10.0.0.1/32".into(),
                Some(443),
                Transport::Udp,
                Decision::Allow,
                2
            ),
            (
                "10.0.0.1/32".into(),
                Some(80),
                Transport::Tcp,
                Decision::Allow,
                2
            ),
            // All prompt: prompt, named by the first prompt rule.
            (
                "10.0.0.2/32".into(),
                Some(80),
                Transport::Tcp,
                Decision::Prompt,
                3
            ),
        ]
    );
}

#[test]
fn an_overlay_deny_after_a_base_allow_compiles_to_deny() {
    let base = parse_named(
        "base.rules",
        "network_rule(host=\"10.0.0.1\", protocol=\"http\", decision=\"allow\")\n",
    );
    let overlay = parse_named(
        "managed.rules",
        "\nnetwork_rule(host=\"10.0.0.1\", protocol=\"http\", decision=\"deny\", justification=\"managed\")\n",
    );
    let image = compile_plain(&base.merge_overlay(&overlay));
    assert_eq!(
        destinations(&image),
        [(
            "10.0.0.1/32".into(),
            Some(80),
            Transport::Tcp,
            Decision::Forbidden,
            1
        )]
    );
    let rule = image.rule(&image.destinations.iter().next().unwrap().verdict);
    let origin = rule.origin.as_ref().unwrap();
    assert_eq!((&*origin.file, origin.line), ("managed.rules", 2));
    assert_eq!(rule.justification.as_deref(), Some("managed"));
}

#[test]
fn host_names_resolve_and_unknown_names_are_reported() {
    let policy = parse(
        r#"
network_rule(host="api.example.com", protocol="https", decision="allow")
network_rule(host="gone.example", protocol="http", decision="deny")
address_rule(addresses=["db.internal", "gone.example", "also-gone.example"], decision="deny", ports=[5432])
"#,
    );
    let resolver = Table::new(&[
        (
            "api.example.com",
            &["93.184.216.34", "2606:2800::1", "93.184.216.34"],
        ),
        ("db.internal", &["::ffff:10.0.0.5"]),
    ]);
    let image = compile(&policy, &resolver, &no_path());
    let entries: Vec<(String, Option<u16>, Transport, Option<&str>)> = image
        .destinations
        .iter()
        .map(|e| {
            (
                e.network.to_string(),
                e.port,
                e.transport,
                e.host.as_deref(),
            )
        })
        .collect();
    // In key order: the address, then the port and transport.
    assert_eq!(
        entries,
        [
            (
                "10.0.0.5/32".into(),
                Some(5432),
                Transport::Any,
                Some("db.internal")
            ),
            (
                "93.184.216.34/32".into(),
                Some(443),
                Transport::Tcp,
                Some("api.example.com")
            ),
            (
                "93.184.216.34/32".into(),
                Some(443),
                Transport::Udp,
                Some("api.example.com")
            ),
            (
                "2606:2800::1/128".into(),
                Some(443),
                Transport::Tcp,
                Some("api.example.com")
            ),
            (
                "2606:2800::1/128".into(),
                Some(443),
                Transport::Udp,
                Some("api.example.com")
            ),
        ]
    );
    assert_eq!(
        image.unresolved_hosts(),
        ["also-gone.example", "gone.example"]
    );
}

#[test]
fn address_rules_become_one_entry_per_network_and_port() {
    let policy = parse(
        r#"
address_rule(addresses=["10.0.0.0/8", "fd00::/8"], decision="deny", ports=[80, 443], transport="tcp", audit_only=True)
address_rule(addresses=["192.168.1.1"], decision="prompt", transport="udp")
address_rule(addresses=["0.0.0.0/0"], decision="allow")
"#,
    );
    let image = compile_plain(&policy);
    assert_eq!(
        destinations(&image),
        [
            (
                "10.0.0.0/8".into(),
                Some(80),
                Transport::Tcp,
                Decision::Forbidden,
                0
            ),
            (
                "10.0.0.0/8".into(),
                Some(443),
                Transport::Tcp,
                Decision::Forbidden,
                0
            ),
            (
                "fd00::/8".into(),
                Some(80),
                Transport::Tcp,
                Decision::Forbidden,
                0
            ),
            (
                "fd00::/8".into(),
                Some(443),
                Transport::Tcp,
                Decision::Forbidden,
                0
            ),
            (
                "192.168.1.1/32".into(),
                None,
                Transport::Udp,
                Decision::Prompt,
                1
            ),
            ("0.0.0.0/0".into(), None, Transport::Any, Decision::Allow, 2),
        ]
    );
    // The first rule's entries are audit-only, the others' not.
    for entry in image.destinations.iter() {
        assert_eq!(
            entry.verdict.audit_only,
            entry.verdict.rule == 0,
            "{entry:?}"
        );
    }
}

#[test]
fn identical_destinations_merge_keeping_the_strongest() {
    let policy = parse(
        r#"
network_rule(host="10.0.0.1", protocol="socks5_tcp", decision="allow")
address_rule(addresses=["10.0.0.1"], decision="deny", transport="tcp")
address_rule(addresses=["10.0.0.1/32"], decision="deny", transport="tcp")
"#,
    );
    let image = compile_plain(&policy);
    assert_eq!(
        destinations(&image),
        [(
            "10.0.0.1/32".into(),
            None,
            Transport::Tcp,
            Decision::Forbidden,
            1
        )]
    );
}

// --- rules, settings, environment ------------------------------------------------------------

#[test]
fn every_rule_gets_a_kernel_rule_in_order_with_its_file_and_line() {
    let policy = parse(
        r#"
prefix_rule(pattern=["git", ["status", "log"]], justification="read only")
prefix_rule(pattern=["git", "push"], decision="forbidden")
network_rule(host="Example.COM", protocol="https", decision="deny")
address_rule(addresses=["10.0.0.0/8", "db.internal"], decision="prompt", ports=[5432], transport="tcp", audit_only=True)
enforcement(unmatched_exec="prompt", audit_only=True)
"#,
    );
    let image = compile_plain(&policy);
    // The built-in unix socket lists follow the policy's own rules.
    let rules: Vec<(KernelRuleKind, &str, &str, usize)> = image
        .rules
        .iter()
        .filter(|rule| rule.kind != KernelRuleKind::Unix)
        .map(|rule| {
            (
                rule.kind,
                rule.text.as_str(),
                rule.summary.as_str(),
                rule.origin.as_ref().unwrap().line,
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            (
                KernelRuleKind::Prefix,
                r#"prefix_rule(pattern=["git", ["status", "log"]], decision="allow", justification="read only")"#,
                "commands starting with `git [status|log]`",
                2
            ),
            (
                KernelRuleKind::Prefix,
                r#"prefix_rule(pattern=["git", "push"], decision="forbidden")"#,
                "commands starting with `git push`",
                3
            ),
            (
                KernelRuleKind::Network,
                r#"network_rule(host="example.com", protocol="https", decision="deny")"#,
                "host example.com",
                4
            ),
            (
                KernelRuleKind::Address,
                r#"address_rule(addresses=["10.0.0.0/8", "db.internal"], decision="prompt", ports=[5432], transport="tcp", audit_only=True)"#,
                "addresses 10.0.0.0/8, db.internal port 5432 over tcp",
                5
            ),
        ]
    );
    assert_eq!(image.rules[0].justification.as_deref(), Some("read only"));
    assert_eq!(image.rules[2].decision, Decision::Forbidden);
    assert_eq!(KernelRuleKind::Address.as_str(), "address_rule");
    // Every verdict names a rule of the image.
    let verdicts = image
        .argv_rules
        .iter()
        .map(|r| r.verdict)
        .chain(image.destinations.iter().map(|d| d.verdict));
    for v in verdicts {
        assert!((v.rule as usize) < image.rules.len());
    }
    assert_eq!(image.argv_rules[1].verdict.rule, 1);
    assert!(image.destinations.iter().any(|e| e.verdict.rule == 3));
    assert_eq!(image.settings, policy.enforcement());
    assert_eq!(image.settings.unmatched_exec, Decision::Prompt);
    assert!(image.settings.audit_only);
    assert_eq!(image.unresolved_hosts(), ["db.internal", "example.com"]);
}

#[test]
fn compile_env_keeps_absolute_path_folders_in_order() {
    let env = CompileEnv::from_path_var(std::ffi::OsStr::new("/usr/bin::relative:/bin:/usr/bin"));
    assert_eq!(
        env.path_dirs,
        [
            PathBuf::from("/usr/bin"),
            PathBuf::from("/bin"),
            PathBuf::from("/usr/bin")
        ]
    );
    let defaults = CompileEnv::from_path_var(std::ffi::OsStr::new(DEFAULT_PATH));
    assert_eq!(defaults.path_dirs.len(), 6);
    assert!(
        !CompileEnv::from_process()
            .path_dirs
            .iter()
            .any(|d| d.is_relative())
    );
}

// --- parity ----------------------------------------------------------------------------------

/// What the kernel decides, worked out by the engine the BPF programs run over the entries the
/// encoder makes for them (no kernel needed).
fn kernel_engine(image: &EnforcementImage) -> KernelEngine {
    KernelEngine::new(image.clone()).expect("the image encodes")
}

fn engine_decision(decided: guard_common::engine::Decided) -> Decision {
    Decision::from_code(decided.verdict.decision).expect("the engine always decides")
}

fn decision_word() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["allow", "prompt", "deny"])
}

fn destination_rule() -> impl Strategy<Value = String> {
    let network = (
        0u8..8,
        prop::sample::select(vec!["http", "https", "socks5_tcp", "socks5_udp"]),
        decision_word(),
    )
        .prop_map(|(host, protocol, decision)| {
            format!("network_rule(host=\"127.0.0.{host}\", protocol=\"{protocol}\", decision=\"{decision}\")")
        });
    let address = (
        prop::collection::vec((0u8..8, 29u8..=32), 1..3),
        decision_word(),
        prop::option::of(prop::sample::subsequence(vec![22u16, 80, 443, 1080], 1..3)),
        prop::sample::select(vec!["tcp", "udp", "any"]),
    )
        .prop_map(|(addresses, decision, ports, transport)| {
            let addresses: Vec<String> = addresses
                .iter()
                .map(|(last, len)| format!("\"127.0.0.{last}/{len}\""))
                .collect();
            let ports = match ports {
                Some(ports) => format!("{ports:?}"),
                None => "None".to_string(),
            };
            format!(
                "address_rule(addresses=[{}], decision=\"{decision}\", ports={ports}, transport=\"{transport}\")",
                addresses.join(", ")
            )
        });
    prop_oneof![network, address]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The evaluator and the kernel's engine, over the encoded image, agree on every
    /// destination: this pins what the kernel runs to `guard check --dest`.
    #[test]
    fn destination_evaluator_agrees_with_the_image(
        rules in prop::collection::vec(destination_rule(), 0..7),
        unmatched in prop::option::of(decision_word()),
        queries in prop::collection::vec(
            (0u8..8, prop::sample::select(vec![22u16, 80, 443, 1080, 8080]), any::<bool>(), any::<bool>()),
            1..12,
        ),
    ) {
        let mut src = rules.join("\n");
        if let Some(unmatched) = unmatched {
            src.push_str(&format!("\nenforcement(unmatched_network=\"{unmatched}\")"));
        }
        let policy = parse(&src);
        let engine = kernel_engine(&compile_plain(&policy));
        for (last, port, udp, mapped) in queries {
            let ip: IpAddr = if mapped {
                format!("::ffff:127.0.0.{last}").parse().unwrap()
            } else {
                format!("127.0.0.{last}").parse().unwrap()
            };
            let transport = if udp { Transport::Udp } else { Transport::Tcp };
            let evaluated = policy.check_destination(ip, port, transport, &NoResolver);
            let from_image = engine_decision(engine.destination(ip, port, transport));
            prop_assert_eq!(
                evaluated.decision, from_image,
                "{}:{}/{} under\n{}", ip, port, transport, src
            );
            prop_assert_eq!(evaluated.unmatched, evaluated.matched.is_empty());
        }
    }

    /// `kernel_exec_decision` agrees with the kernel's engine walking the encoded argv trie
    /// and name entries.
    #[test]
    fn kernel_exec_decision_agrees_with_the_image(
        rules in prop::collection::vec(
            (
                prop::sample::select(vec!["a", "b"]),
                prop::collection::vec(prop::sample::subsequence(vec!["x", "y", "z"], 1..3), 0..3),
                decision_word(),
            ),
            0..6,
        ),
        unmatched in prop::option::of(decision_word()),
        commands in prop::collection::vec(
            (prop::sample::select(vec!["a", "b", "c", "a-x", "b-y-z"]), prop::collection::vec(prop::sample::select(vec!["x", "y", "z"]), 0..4)),
            1..8,
        ),
    ) {
        let mut src: Vec<String> = rules
            .iter()
            .map(|(program, rest, decision)| {
                let decision = if *decision == "deny" { "forbidden" } else { decision };
                let rest: Vec<String> = rest.iter().map(|alts| format!("{alts:?}")).collect();
                let mut pattern = vec![format!("{program:?}")];
                pattern.extend(rest);
                format!("prefix_rule(pattern=[{}], decision=\"{decision}\")", pattern.join(", "))
            })
            .collect();
        if let Some(unmatched) = unmatched {
            src.push(format!("enforcement(unmatched_exec=\"{unmatched}\")"));
        }
        let src = src.join("\n");
        let policy = parse(&src);
        let engine = kernel_engine(&compile_plain(&policy));
        let no_file = guard_common::maps::ExecIdentity { dev: 0, ino: 0 };
        for (program, args) in commands {
            let cmd: Vec<String> = std::iter::once(program)
                .chain(args)
                .map(str::to_string)
                .collect();
            prop_assert_eq!(
                policy.kernel_exec_decision(&cmd),
                engine_decision(engine.exec(no_file, &cmd[0], &cmd)),
                "{:?} under\n{}", cmd, src
            );
        }
    }
}

#[test]
fn host_names_are_the_names_to_resolve_and_no_ip_literals() {
    let policy = parse(
        r#"
network_rule(host="b.example", protocol="https", decision="allow")
network_rule(host="127.0.0.2", protocol="http", decision="deny")
network_rule(host="a.example", protocol="http", decision="prompt")
address_rule(addresses=["10.0.0.0/8", "c.example", "a.example"], decision="deny")
"#,
    );
    assert_eq!(host_names(&policy), ["a.example", "b.example", "c.example"]);
}

// Exec approvals: only what the kernel can match exactly is accepted.

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

#[test]
fn an_approval_adds_an_allow_rule_without_origin_and_returns_its_id() {
    let mut image = compile_plain(&parse(
        "prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n",
    ));
    let before = image.rules.len();
    let id = image
        .add_exec_approval(
            1,
            &words("git push origin main"),
            "approved `git push origin main`".into(),
            "the command `git push origin main`".into(),
        )
        .unwrap();
    assert_eq!(id as usize, before);
    let rule = &image.rules[id as usize];
    assert_eq!(rule.kind, KernelRuleKind::Prefix);
    assert_eq!(rule.decision, Decision::Allow);
    assert_eq!(rule.text, "approved `git push origin main`");
    assert_eq!(rule.summary, "the command `git push origin main`");
    assert_eq!((&rule.justification, &rule.origin), (&None, &None));
    assert_eq!(
        image.exec_approvals,
        [ExecApproval {
            tokens: words("git push origin main"),
            scope: 1,
            rule: id,
        }]
    );
}

#[test]
fn approvals_the_kernel_cannot_match_exactly_are_refused_and_change_nothing() {
    use guard_common::limits::{MAX_ARGV_TOKENS, NAME_LEN, TOKEN_MAX_LEN};
    let long_token = "x".repeat(TOKEN_MAX_LEN + 1);
    let long_name = "n".repeat(NAME_LEN);
    let too_many = vec!["git".to_string(); MAX_ARGV_TOKENS + 1];
    let cases: Vec<(Vec<String>, ApprovalError)> = vec![
        (vec![], ApprovalError::NoTokens),
        (
            too_many,
            ApprovalError::TooManyTokens {
                count: MAX_ARGV_TOKENS + 1,
                max: MAX_ARGV_TOKENS,
            },
        ),
        (vec![String::new(), "x".into()], ApprovalError::EmptyProgram),
        (
            words("/usr/bin/git push"),
            ApprovalError::ProgramIsPath {
                program: "/usr/bin/git".into(),
            },
        ),
        (
            words("./git push"),
            ApprovalError::ProgramIsPath {
                program: "./git".into(),
            },
        ),
        (
            vec![long_name.clone()],
            ApprovalError::ProgramTooLong {
                program: long_name,
                len: NAME_LEN,
                max: NAME_LEN - 1,
            },
        ),
        (
            vec!["git".into(), "push".into(), long_token],
            ApprovalError::TokenTooLong {
                index: 2,
                len: TOKEN_MAX_LEN + 1,
                max: TOKEN_MAX_LEN,
            },
        ),
        (
            vec!["git".into(), "pu\0sh".into()],
            ApprovalError::TokenHasNul { index: 1 },
        ),
    ];
    let mut image = compile_plain(&parse(""));
    let builtin_rules = image.rules.len();
    for (tokens, want) in cases {
        let got = image.add_exec_approval(1, &tokens, String::new(), String::new());
        assert_eq!(got, Err(want.clone()), "{tokens:?}");
        let message = want.to_string();
        assert!(
            message.len() > 40,
            "a sentence that says what to do: {message}"
        );
    }
    assert!(image.rules.len() == builtin_rules && image.exec_approvals.is_empty());
}

#[test]
fn approvals_at_the_bounds_are_accepted() {
    use guard_common::limits::{MAX_ARGV_TOKENS, NAME_LEN, TOKEN_MAX_LEN};
    let mut image = compile_plain(&parse(""));
    // Long tokens are compared exactly (the rest of a token past the trie key's prefix is in
    // LONG_TOKENS), so approvals hold them up to what the kernel reads.
    let mut tokens = vec!["n".repeat(NAME_LEN - 1)];
    tokens.extend((1..MAX_ARGV_TOKENS).map(|_| "t".repeat(TOKEN_MAX_LEN)));
    assert_eq!(tokens.len(), MAX_ARGV_TOKENS);
    image
        .add_exec_approval(1, &tokens, String::new(), String::new())
        .unwrap();
    // An empty token is a real argv token the kernel compares exactly.
    image
        .add_exec_approval(
            1,
            &["git".into(), String::new()],
            String::new(),
            String::new(),
        )
        .unwrap();
    image
        .add_exec_approval(1, &words("git"), String::new(), String::new())
        .unwrap();
    assert_eq!(image.exec_approvals.len(), 3);
}

#[test]
fn an_approval_holds_only_for_the_scope_it_was_given_to() {
    let mut image = compile_plain(&parse(
        "prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n\
         address_rule(addresses=[\"127.0.0.0/8\"], ports=[9], decision=\"prompt\")\n",
    ));
    let loopback: IpAddr = "127.0.0.2".parse().unwrap();
    image
        .add_exec_approval(7, &words("git push origin"), String::new(), String::new())
        .unwrap();
    image.add_destination_approval(7, loopback, 9, Transport::Tcp, String::new(), String::new());
    let no_file = guard_common::maps::ExecIdentity { dev: 0, ino: 0 };
    let push = words("git push origin");
    let engine = kernel_engine(&image);
    let decide = |scope: u64| {
        (
            engine_decision(engine.exec_in(Some(scope), no_file, "git", &push)),
            engine_decision(engine.destination_in(Some(scope), loopback, 9, Transport::Tcp)),
        )
    };
    assert_eq!(
        decide(7),
        (Decision::Allow, Decision::Allow),
        "its own scope"
    );
    assert_eq!(
        decide(8),
        (Decision::Prompt, Decision::Prompt),
        "another scope's request is still asked"
    );
    let entries = super::encode::MapEncoder::new().encode(&image).unwrap();
    let kinds: Vec<(u64, u8)> = {
        let mut kinds: Vec<_> = entries
            .approvals
            .keys()
            .map(|k| (k.scope, k.kind))
            .collect();
        kinds.sort_unstable();
        kinds
    };
    assert_eq!(
        kinds,
        [
            (7, guard_common::maps::approval_kind::EXEC),
            (7, guard_common::maps::approval_kind::V4)
        ],
        "one scope entry for each approval"
    );
}
