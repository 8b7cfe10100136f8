//! docs/policy-language.md §3.2–§3.3: amendment lines, escaping, dedupe, newline repair, folders, locking, and the
//! round trip through the parser.

use super::*;
use crate::policy::{MatchOptions, PolicyParser};
use proptest::prelude::*;

fn tokens(list: &[&str]) -> Vec<String> {
    list.iter().map(|t| t.to_string()).collect()
}

fn parse_file(path: &Path) -> crate::policy::Policy {
    let mut parser = PolicyParser::new();
    let contents = std::fs::read_to_string(path).unwrap();
    parser
        .parse(&path.display().to_string(), &contents)
        .unwrap_or_else(|err| panic!("amended file must parse: {err}\n{contents}"));
    parser.build()
}

#[test]
fn prefix_line_format_and_json_escaping() {
    assert_eq!(
        prefix_amendment_line(&tokens(&["cargo", "test"])).unwrap(),
        r#"prefix_rule(pattern=["cargo", "test"], decision="allow")"#
    );
    assert_eq!(
        prefix_amendment_line(&tokens(&["echo", "a\"b", "c\\d", "e\nf\u{1}", "bücher"])).unwrap(),
        r#"prefix_rule(pattern=["echo", "a\"b", "c\\d", "e\nf\u0001", "bücher"], decision="allow")"#
    );
    assert_eq!(
        prefix_amendment_line(&[]).unwrap_err().to_string(),
        "prefix rule requires at least one token"
    );
}

#[test]
fn network_line_format() {
    let line = |host, protocol, decision, justification| {
        network_amendment_line(host, protocol, decision, justification).unwrap()
    };
    assert_eq!(
        line(
            "API.GitHub.com:443",
            NetworkProtocol::Https,
            Decision::Allow,
            None
        ),
        r#"network_rule(host="api.github.com", protocol="https", decision="allow")"#
    );
    assert_eq!(
        line("x.org", NetworkProtocol::Socks5Udp, Decision::Prompt, None),
        r#"network_rule(host="x.org", protocol="socks5_udp", decision="prompt")"#
    );
    assert_eq!(
        line(
            "[::1]:80",
            NetworkProtocol::Http,
            Decision::Forbidden,
            Some("Deny http access to \"::1\"")
        ),
        r#"network_rule(host="::1", protocol="http", decision="deny", justification="Deny http access to \"::1\"")"#
    );
    let err =
        network_amendment_line("*.x", NetworkProtocol::Http, Decision::Allow, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid network rule: invalid rule: network_rule host must be a specific host; wildcards are not allowed"
    );
    let err = network_amendment_line("x", NetworkProtocol::Http, Decision::Allow, Some("\t"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid network rule: justification cannot be empty"
    );
}

#[test]
fn append_creates_the_folder_dedupes_and_repairs_a_missing_newline() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules").join("default.rules");
    let prefix = tokens(&["cargo", "test"]);
    assert_eq!(
        append_prefix_amendment(&file, &prefix).unwrap(),
        AmendOutcome::Appended
    );
    let once = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        once,
        "prefix_rule(pattern=[\"cargo\", \"test\"], decision=\"allow\")\n"
    );
    assert_eq!(
        append_prefix_amendment(&file, &prefix).unwrap(),
        AmendOutcome::AlreadyPresent
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), once);

    std::fs::write(&file, "# mine, no newline at the end").unwrap();
    append_prefix_amendment(&file, &prefix).unwrap();
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("# mine, no newline at the end\n{once}")
    );
}

#[test]
fn only_one_missing_folder_level_is_created_and_a_failure_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a").join("b").join("default.rules");
    let err = append_prefix_amendment(&file, &tokens(&["ls"])).unwrap_err();
    assert!(
        err.to_string().starts_with("cannot create the folder"),
        "{err}"
    );
    assert!(!dir.path().join("a").exists());
}

#[test]
fn an_invalid_amendment_leaves_the_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("default.rules");
    std::fs::write(&file, "prefix_rule(pattern=[\"ls\"])").unwrap();
    assert!(
        append_network_amendment(&file, "a b", NetworkProtocol::Http, Decision::Allow, None)
            .is_err()
    );
    assert!(append_prefix_amendment(&file, &[]).is_err());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "prefix_rule(pattern=[\"ls\"])"
    );
    let missing = dir.path().join("missing.rules");
    assert!(
        append_network_amendment(&missing, "*", NetworkProtocol::Http, Decision::Allow, None)
            .is_err()
    );
    assert!(!missing.exists());
}

#[test]
fn concurrent_identical_approvals_write_the_line_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("default.rules");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let file = file.clone();
            std::thread::spawn(move || {
                append_network_amendment(
                    &file,
                    "crates.io",
                    NetworkProtocol::Https,
                    Decision::Allow,
                    None,
                )
                .unwrap()
            })
        })
        .collect();
    let outcomes: Vec<AmendOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == AmendOutcome::Appended)
            .count(),
        1
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 1);
}

fn token_strategy() -> impl Strategy<Value = String> {
    // Any text, with quotes, backslashes, control characters and non-ASCII likely.
    prop_oneof![
        "[a-z0-9._/-]{1,8}",
        "\\PC{0,6}",
        "[\"\\\\\n\t\u{1}\u{7f}ü€ ]{1,4}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_prefix_amendment_parses_decides_allow_and_is_idempotent(
        prefix in proptest::collection::vec(token_strategy(), 1..5),
        extra in proptest::collection::vec("[a-z]{1,4}", 0..3),
        existing in prop_oneof![Just(String::new()), Just("# no newline".to_string()), Just("prefix_rule(pattern=[\"ls\"])\n".to_string())],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("default.rules");
        std::fs::write(&file, &existing).unwrap();
        prop_assert_eq!(append_prefix_amendment(&file, &prefix).unwrap(), AmendOutcome::Appended);
        let policy = parse_file(&file);
        let mut cmd = prefix.clone();
        cmd.extend(extra);
        prop_assert_eq!(policy.check(&cmd, None).decision, Some(Decision::Allow));
        prop_assert!(policy.allowed_prefixes().contains(&prefix));
        let before = std::fs::read(&file).unwrap();
        prop_assert_eq!(append_prefix_amendment(&file, &prefix).unwrap(), AmendOutcome::AlreadyPresent);
        prop_assert_eq!(std::fs::read(&file).unwrap(), before);
    }

    #[test]
    fn a_network_amendment_parses_moves_the_host_and_is_idempotent(
        host in "[A-Za-z][A-Za-z0-9-]{0,8}(\\.[A-Za-z][A-Za-z0-9-]{0,8}){0,2}\\.?(:[0-9]{1,5})?",
        protocol in prop_oneof![Just(NetworkProtocol::Http), Just(NetworkProtocol::Https), Just(NetworkProtocol::Socks5Tcp), Just(NetworkProtocol::Socks5Udp)],
        decision in prop_oneof![Just(Decision::Allow), Just(Decision::Prompt), Just(Decision::Forbidden)],
        justification in proptest::option::of("[ -~]{0,3}[a-z\"\\\\]{1,4}"),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("default.rules");
        std::fs::write(&file, "network_rule(host=\"seed.example\", protocol=\"http\", decision=\"deny\")").unwrap();
        append_network_amendment(&file, &host, protocol, decision, justification.as_deref()).unwrap();
        let policy = parse_file(&file);
        let normalized = crate::policy::host::normalize_network_host(&host).unwrap();
        let rule = policy.network_rules().last().unwrap();
        prop_assert_eq!(&rule.host, &normalized);
        prop_assert_eq!(rule.protocol, protocol);
        prop_assert_eq!(rule.decision, decision);
        prop_assert_eq!(rule.justification.as_deref(), justification.as_deref());
        let domains = policy.network_domains();
        match decision {
            Decision::Allow => prop_assert_eq!(domains.allowed.last(), Some(&normalized)),
            Decision::Forbidden => prop_assert_eq!(domains.denied.last(), Some(&normalized)),
            Decision::Prompt => prop_assert!(!domains.allowed.contains(&normalized)),
        }
        let before = std::fs::read(&file).unwrap();
        prop_assert_eq!(
            append_network_amendment(&file, &host, protocol, decision, justification.as_deref()).unwrap(),
            AmendOutcome::AlreadyPresent
        );
        prop_assert_eq!(std::fs::read(&file).unwrap(), before);
    }
}

#[test]
fn an_amended_prefix_resolves_like_any_other_rule() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("default.rules");
    append_prefix_amendment(&file, &tokens(&["git", "push"])).unwrap();
    let policy = parse_file(&file);
    let eval = policy.check_with_options(
        &tokens(&["/usr/bin/git", "push", "origin"]),
        None,
        MatchOptions {
            resolve_host_executables: true,
        },
    );
    assert_eq!(eval.decision, Some(Decision::Allow));
}
