//! guard's resolver in the path of the scope's DNS (`guard::resolve`), through `guard run`: a
//! command in scope asks a "system resolver" at 127.0.0.153:53 (nothing listens there; only
//! the redirect to guard's resolver can answer) and guard forwards to a test name server on
//! loopback. Every address the test server hands out is a loopback address with a listener, so
//! all traffic stays on this host. Needs root; without it each test prints `skipped: ...` (and
//! fails when CI=true).

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use guard_tests::daemon::{guard_bin, text};
use guard_tests::dns::TestDns;
use guard_tests::kernel::{helper, root_or_skip, wait_output};
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Where the command sends its queries: a loopback address nothing listens on.
const ASKED: &str = "127.0.0.153:53";

fn dns_probe() -> PathBuf {
    helper("dns-probe", env!("CARGO_BIN_EXE_dns-probe"))
}

fn v4(text: &str) -> Ipv4Addr {
    text.parse().unwrap()
}

/// TCP listeners on `127.0.1.1` .. `127.0.1.COUNT`, one port for all (connects need only the
/// backlog: nothing is read).
fn listeners(count: u8) -> (u16, Vec<TcpListener>) {
    for _ in 0..20 {
        let first = TcpListener::bind("127.0.1.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        let mut all = vec![first];
        for i in 2..=count {
            match TcpListener::bind((v4(&format!("127.0.1.{i}")), port)) {
                Ok(listener) => all.push(listener),
                Err(_) => break,
            }
        }
        if all.len() == usize::from(count) {
            return (port, all);
        }
    }
    panic!("no port was free on 127.0.1.1-{count}");
}

const RULES: &str = r#"
enforcement(unmatched_network="deny")
network_rule(host="api.example.test", protocol="socks5_tcp", decision="allow")
network_rule(host="evil.example.test", protocol="https", decision="deny")
address_rule(addresses=["*.wild.test"], transport="tcp", decision="allow")
address_rule(addresses=["**.blocked.test"], decision="deny")
"#;

fn write_rules(dir: &Path) -> PathBuf {
    let rules = dir.join("dns.rules");
    std::fs::write(&rules, RULES).unwrap();
    rules
}

/// `guard run --rules R --nameserver DNS [EXTRA] -- dns-probe ARGS`.
fn run_probe(dns: &TestDns, rules: &Path, extra: &[&str], probe: &[&str]) -> Output {
    let child = Command::new(guard_bin())
        .args(["run", "--json-events", "--rules"])
        .arg(rules)
        .args(["--nameserver", &dns.addr().to_string()])
        .args(extra)
        .arg("--")
        .arg(dns_probe())
        .args(probe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting guard run");
    wait_output(child, RUN_TIMEOUT)
}

/// The probe's JSON line.
fn tally(output: &Output) -> Value {
    let stdout = text(&output.stdout);
    let line = stdout.lines().last().unwrap_or_else(|| {
        panic!(
            "dns-probe printed nothing; guard said: {}",
            text(&output.stderr)
        )
    });
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// guard's JSON event lines on stderr.
fn events(output: &Output) -> Vec<Value> {
    text(&output.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

#[test]
fn an_allowed_names_rotating_answers_connect_every_time_through_guards_resolver() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(dir.path());
    let (port, _listeners) = listeners(8);
    let pool: Vec<Ipv4Addr> = (1..=8).map(|i| v4(&format!("127.0.1.{i}"))).collect();
    let dns = TestDns::start();
    dns.set_a_rotating("api.example.test", &pool, 2, 1..=5);
    let port = port.to_string();

    // Without the resolver in the path (today's way), the command resolves on its own (the
    // policy must let it reach the name server) and gets addresses guard never saw.
    let direct_rules = dir.path().join("direct.rules");
    std::fs::write(
        &direct_rules,
        format!(
            "{RULES}address_rule(addresses=[\"127.0.0.1\"], ports=[{}], transport=\"udp\", \
             decision=\"allow\")\n",
            dns.addr().port()
        ),
    )
    .unwrap();
    let direct = run_probe(
        &dns,
        &direct_rules,
        &["--no-resolver"],
        &[&dns.addr().to_string(), "api.example.test", "udp", "20", &port],
    );
    let direct = tally(&direct);
    assert!(
        direct["refused"].as_u64().unwrap() > 0,
        "without guard's resolver some connects should be refused: {direct}"
    );

    for mode in ["udp", "udp-connected", "tcp"] {
        let rounds = if mode == "udp" { "100" } else { "10" };
        let output = run_probe(
            &dns,
            &rules,
            &[],
            &[ASKED, "api.example.test", mode, rounds, &port],
        );
        let result = tally(&output);
        let rounds: u64 = rounds.parse().unwrap();
        assert_eq!(
            result["answers"].as_u64(),
            Some(rounds),
            "{mode}: every query answered: {result}; guard: {}",
            text(&output.stderr)
        );
        assert_eq!(result["refused"].as_u64(), Some(0), "{mode}: {result}");
        assert_eq!(result["other_errors"].as_u64(), Some(0), "{mode}: {result}");
        assert_eq!(result["connected"].as_u64(), Some(2 * rounds), "{mode}: {result}");
        // The replies seem to come from where the query was sent.
        assert_eq!(result["wrong_source"].as_u64(), Some(0), "{mode}: {result}");
        assert!(output.status.success(), "{mode}: {}", text(&output.stderr));
    }
}

#[test]
fn a_forbidden_name_is_refused_by_guards_resolver_and_never_asked_upstream() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(dir.path());
    let dns = TestDns::start();
    dns.set_a("evil.example.test", &[v4("127.0.1.66")], 60);
    dns.set_a("x.blocked.test", &[v4("127.0.1.67")], 60);
    let cases = [
        ("refused", "Refused", "evil.example.test", 4),
        ("nxdomain", "NXDomain", "evil.example.test", 4),
        ("refused", "Refused", "x.blocked.test", 6),
    ];
    for (refusal, rcode, name, line) in cases {
        let output = run_probe(
            &dns,
            &rules,
            &["--dns-refusal", refusal],
            &[ASKED, name, "udp", "1"],
        );
        let result = tally(&output);
        assert_eq!(result["rcode"], rcode, "{result}");
        assert_eq!(result["addresses"], serde_json::json!([]), "{result}");
        let refusal_event = events(&output)
            .into_iter()
            .find(|e| e["kind"] == "dns")
            .unwrap_or_else(|| panic!("no DNS event: {}", text(&output.stderr)));
        assert_eq!(refusal_event["name"], name);
        assert_eq!(refusal_event["decision"], "forbidden");
        assert_eq!(refusal_event["line"], line, "{refusal_event}");
        assert!(
            refusal_event["message"]
                .as_str()
                .unwrap()
                .contains(&format!("refused DNS lookup of {name}")),
            "{refusal_event}"
        );
    }
    // guard resolves the policy's own names itself (evil.example.test among them), never a
    // pattern's: the command's query for a name below `blocked.test` never left the host.
    assert_eq!(dns.queries("x.blocked.test"), 0, "the query left the host");
}

#[test]
fn a_host_pattern_allows_the_names_it_covers_from_the_answers_guards_resolver_sees() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(dir.path());
    let (port, _listeners) = listeners(2);
    let dns = TestDns::start();
    dns.set_a("a.wild.test", &[v4("127.0.1.1")], 30);
    dns.set_a("example.org", &[v4("127.0.1.2")], 30);
    let port = port.to_string();

    let covered = run_probe(&dns, &rules, &[], &[ASKED, "a.wild.test", "udp", "1", &port]);
    let covered_result = tally(&covered);
    assert_eq!(covered_result["connected"], 1, "{covered_result}: {}", text(&covered.stderr));

    let other = run_probe(&dns, &rules, &[], &[ASKED, "example.org", "udp", "1", &port]);
    let other_result = tally(&other);
    assert_eq!(other_result["refused"], 1, "{other_result}");
    // The refused connect names the host its address was answered for.
    let refusal = events(&other)
        .into_iter()
        .find(|e| e["kind"] == "connect")
        .unwrap_or_else(|| panic!("no connect event: {}", text(&other.stderr)));
    assert_eq!(refusal["hosts"], serde_json::json!(["example.org"]), "{refusal}");
    assert!(
        refusal["message"].as_str().unwrap().contains("(example.org)"),
        "{refusal}"
    );
}
