//! guard's resolver in the path of the scope's DNS (`guard::resolve`), through `guard run`: a
//! command in scope asks a "system resolver" at 127.0.0.153:53 (nothing listens there; only
//! the redirect to guard's resolver can answer) and guard forwards to a test name server on
//! loopback. Every address the test server hands out is a loopback address with a listener, so
//! all traffic stays on this host. Needs root; without it each test prints `skipped: ...` (and
//! fails when CI=true).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{dns_probe, net_probe, run_guard};
use guard_tests::daemon::{DaemonSetup, RetryingRun, TestDaemon, can_run, guard_bin, text};
use guard_tests::dns::{RecordingDns, TestDns};
use guard_tests::kernel::{Starting, root_or_skip, starting};
use serde_json::Value;

pub(crate) const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Where the command sends its queries: a loopback address nothing listens on.
pub(crate) const ASKED: &str = "127.0.0.153:53";

pub(crate) fn v4(text: &str) -> Ipv4Addr {
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
    run_probe_to(dns.addr(), rules, extra, probe)
}

/// [`run_probe`] with any upstream name server.
fn run_probe_to(upstream: SocketAddr, rules: &Path, extra: &[&str], probe: &[&str]) -> Output {
    run_guard(
        Command::new(guard_bin())
            .args(["run", "--json-events", "--rules"])
            .arg(rules)
            .args(["--nameserver", &upstream.to_string()])
            .args(extra)
            .arg("--")
            .arg(dns_probe())
            .args(probe),
        RUN_TIMEOUT,
    )
}

/// The probe's JSON line.
pub(crate) fn tally(output: &Output) -> Value {
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
        &[
            &dns.addr().to_string(),
            "api.example.test",
            "udp",
            "20",
            &port,
        ],
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
        assert_eq!(
            result["connected"].as_u64(),
            Some(2 * rounds),
            "{mode}: {result}"
        );
        // The replies seem to come from where the query was sent.
        assert_eq!(result["wrong_source"].as_u64(), Some(0), "{mode}: {result}");
        assert!(output.status.success(), "{mode}: {}", text(&output.stderr));
    }
}

#[test]
fn a_repeated_aaaa_query_for_a_name_without_aaaa_is_answered_from_guards_cache() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(dir.path());
    let (port, _listeners) = listeners(1);
    let dns = TestDns::start();
    // A name with an A record and no AAAA, whose NODATA answer carries no SOA (nothing says
    // how long it holds): before, every AAAA question was forwarded again.
    let name = "v4only.wild.test";
    dns.set_a(name, &[v4("127.0.1.1")], 300);
    dns.set_negative_without_soa(name);
    let rounds = 5;
    // The C library asks A and AAAA for each lookup, then the probe connects to the answer.
    let output = run_probe(
        &dns,
        &rules,
        &[],
        &[
            ASKED,
            name,
            "getaddrinfo",
            &rounds.to_string(),
            &port.to_string(),
        ],
    );
    let result = tally(&output);
    assert_eq!(
        result["answers"],
        rounds,
        "{result}; guard said: {}",
        text(&output.stderr)
    );
    assert_eq!(
        result["addresses"],
        serde_json::json!(["127.0.1.1"]),
        "{result}"
    );
    assert_eq!(result["connected"], rounds, "{result}");
    assert_eq!(result["refused"], 0, "{result}");
    use hickory_server::proto::rr::RecordType;
    assert_eq!(
        dns.queries_of(name, RecordType::AAAA),
        1,
        "the NODATA answer was kept for the bound, not asked for again"
    );
    assert_eq!(dns.queries_of(name, RecordType::A), 1);
    // The forwarded answers name the process that asked, from the kernel's record of its query.
    let forwarded: Vec<Value> = events(&output)
        .into_iter()
        .filter(|e| e["kind"] == "dns" && e["answered"] == "forwarded")
        .collect();
    assert_eq!(forwarded.len(), 2, "A and AAAA, once each: {forwarded:#?}");
    for event in &forwarded {
        assert!(
            event["process"]["comm"]
                .as_str()
                .is_some_and(|comm| comm.starts_with("dns-probe")),
            "{event}"
        );
        assert!(event["process"]["pid"].as_u64().is_some(), "{event}");
    }
    assert!(output.status.success(), "{}", text(&output.stderr));
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
fn under_a_refusing_default_a_name_no_rule_names_never_leaves_the_host() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("deny.rules");
    std::fs::write(
        &rules,
        "enforcement(unmatched_network=\"deny\")\n\
         network_rule(host=\"api.example.test\", protocol=\"https\", decision=\"allow\")\n",
    )
    .unwrap();
    let dns = TestDns::start();
    // A name that carries data out in its labels, to a zone no rule names.
    let exfil = "c2vjcmv0lwtleq.exfil.example.test";
    dns.set_a(exfil, &[v4("127.0.1.70")], 60);
    dns.set_a("api.example.test", &[v4("127.0.1.71")], 60);
    for query_type in ["udp", "tcp"] {
        let output = run_probe(&dns, &rules, &[], &[ASKED, exfil, query_type, "1"]);
        let result = tally(&output);
        assert_eq!(result["rcode"], "Refused", "{query_type}: {result}");
        let refusal = events(&output)
            .into_iter()
            .find(|e| e["kind"] == "dns")
            .unwrap_or_else(|| panic!("no DNS event: {}", text(&output.stderr)));
        assert_eq!(refusal["name"], exfil, "{refusal}");
        assert!(
            refusal["rule"]
                .as_str()
                .unwrap()
                .contains("unmatched_network"),
            "{refusal}"
        );
        assert!(
            refusal["process"]["comm"]
                .as_str()
                .is_some_and(|comm| comm.starts_with("dns-probe")),
            "the record names the process that asked: {refusal}"
        );
    }
    assert_eq!(dns.queries(exfil), 0, "the name left the host");
    // Ordinary work beside it: the name a rule allows resolves.
    let output = run_probe(&dns, &rules, &[], &[ASKED, "api.example.test", "udp", "1"]);
    let result = tally(&output);
    assert_eq!(
        result["addresses"],
        serde_json::json!(["127.0.1.71"]),
        "{result}: {}",
        text(&output.stderr)
    );
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

    let covered = run_probe(
        &dns,
        &rules,
        &[],
        &[ASKED, "a.wild.test", "udp", "1", &port],
    );
    let covered_result = tally(&covered);
    assert_eq!(
        covered_result["connected"],
        1,
        "{covered_result}: {}",
        text(&covered.stderr)
    );

    let other = run_probe(
        &dns,
        &rules,
        &[],
        &[ASKED, "example.org", "udp", "1", &port],
    );
    let other_result = tally(&other);
    // Under this policy's `deny` default a name no rule covers is not even looked up: its
    // connects could go nowhere, and its query would carry the name off the host.
    assert_eq!(other_result["rcode"], "Refused", "{other_result}");
    let refusal = events(&other)
        .into_iter()
        .find(|e| e["kind"] == "dns")
        .unwrap_or_else(|| panic!("no DNS event: {}", text(&other.stderr)));
    assert_eq!(refusal["name"], "example.org", "{refusal}");
    assert_eq!(dns.queries("example.org"), 0, "the name left the host");
}

/// Waits (bounded) for the first JSON event on `lines` that satisfies `wanted`; every line seen
/// is kept in `seen` for the failure message.
fn next_event(
    lines: &std::sync::mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        let Ok(line) = lines.recv_timeout(left) else {
            break;
        };
        seen.push(line.clone());
        if let Ok(value) = serde_json::from_str::<Value>(&line)
            && wanted(&value)
        {
            return value;
        }
    }
    panic!("no such event within 60 s; guard said: {seen:#?}");
}

/// `guard run --json-events` of a probe that looks `name` up, connects to port 443 of what it
/// got, waits for the test to call [`KeptAnswerRun::finish`] and connects again to the same
/// addresses (a program that keeps its answer), then looks the name up again and connects.
struct KeptAnswerRun {
    /// The run's rules ([`KeptAnswerRun::RULES`] at first).
    rules: PathBuf,
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    reader: std::thread::JoinHandle<()>,
    seen: Vec<String>,
    approved: PathBuf,
    _listener: TcpListener,
    _dir: tempfile::TempDir,
    /// The run removes abandoned scopes as it starts.
    _starting: Starting,
}

impl KeptAnswerRun {
    const RULES: &str = "enforcement(unmatched_network=\"prompt\")\n";

    /// `name` is answered `address` by `dns`, and port 443 listens there.
    fn start(dns: &TestDns, name: &str, address: Ipv4Addr) -> KeptAnswerRun {
        dns.set_a(name, &[address], 60);
        let starting = starting();
        let listener = TcpListener::bind((address, 443)).expect("listening on port 443");
        let dir = tempfile::tempdir().unwrap();
        let rules = dir.path().join("run.rules");
        std::fs::write(&rules, Self::RULES).unwrap();
        let approved = dir.path().join("approved");
        let probe = format!(
            "DNS_PROBE_RETRY_AFTER={mark} {probe} {ASKED} {name} udp 1 443; \
             {probe} {ASKED} {name} udp 1 443",
            probe = dns_probe().display(),
            mark = approved.display()
        );
        let mut child = Command::new(guard_bin())
            .args(["run", "--json-events", "--rules"])
            .arg(&rules)
            .args(["--nameserver", &dns.addr().to_string()])
            .args(["--", "sh", "-c", &probe])
            .env_remove("GUARD_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting guard run");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        KeptAnswerRun {
            rules,
            child,
            lines,
            reader,
            seen: Vec::new(),
            approved,
            _listener: listener,
            _dir: dir,
            _starting: starting,
        }
    }

    fn next_event(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        next_event(&self.lines, &mut self.seen, wanted)
    }

    /// Lets the probe go on; its two JSON lines, and every line guard said.
    fn finish(mut self) -> (std::process::ExitStatus, Vec<Value>, Vec<String>) {
        std::fs::write(&self.approved, "").unwrap();
        let status = guard_tests::kernel::wait_status(&mut self.child, RUN_TIMEOUT);
        let mut stdout = String::new();
        std::io::Read::read_to_string(&mut self.child.stdout.take().unwrap(), &mut stdout).unwrap();
        self.reader.join().unwrap();
        let mut seen = self.seen;
        seen.extend(self.lines.try_iter());
        let results: Vec<Value> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        assert_eq!(results.len(), 2, "{stdout}; guard said: {seen:#?}");
        (status, results, seen)
    }
}

#[test]
fn standalone_a_session_approval_of_a_stand_in_resolves_the_name_but_keeps_it_on_stand_ins() {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    let mut run = KeptAnswerRun::start(&dns, "api3.example.test", v4("127.0.1.10"));
    let (rules, original) = (run.rules.clone(), KeptAnswerRun::RULES);
    let asked = run.next_event(|e| e["kind"] == "connect");
    let id = asked["ask"].as_u64().expect("an ask").to_string();
    assert_eq!(
        dns.queries("api3.example.test"),
        0,
        "asked upstream before the approval"
    );
    let out = Command::new(guard_bin())
        .args(["approve", &id, "--session"])
        .env_remove("GUARD_SOCKET")
        .output()
        .unwrap();
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&rules).unwrap(),
        original,
        "no line written"
    );
    assert!(
        dns.queries("api3.example.test") > 0,
        "resolved once approved"
    );
    let (status, results, seen) = run.finish();
    assert!(status.success(), "{status}; guard said: {seen:#?}");
    let stand_in = results[0]["addresses"][0].as_str().unwrap_or_default();
    assert!(stand_in.starts_with("198.18."), "{}", results[0]);
    assert_eq!(
        results[0]["retried"],
        serde_json::json!({"connected": 1, "refused": 0, "reached": ["127.0.1.10"]}),
        "guard said: {seen:#?}"
    );
    // No rule names the name: looked up again it is still answered with its stand-in, which the
    // session's approval sends on.
    assert_eq!(results[1]["addresses"], serde_json::json!([stand_in]));
    assert_eq!(results[1]["connected"], 1, "{}", results[1]);
}

#[test]
fn standalone_an_unknown_name_stays_on_the_host_until_approved_and_a_kept_stand_in_then_reaches_the_real_address()
 {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    let mut run = KeptAnswerRun::start(&dns, "api2.example.test", v4("127.0.1.9"));
    let (rules, original) = (run.rules.clone(), KeptAnswerRun::RULES);
    let asked = run.next_event(|e| e["kind"] == "connect");
    let id = asked["ask"]
        .as_u64()
        .unwrap_or_else(|| panic!("the refused connect made no ask: {asked}"));
    assert_eq!(
        asked["hosts"],
        serde_json::json!(["api2.example.test"]),
        "{asked}"
    );
    assert!(
        asked["socket"]
            .as_str()
            .unwrap()
            .starts_with("/run/guard/runs/"),
        "{asked}"
    );
    let out = Command::new(guard_bin())
        .args(["prompts", "--json"])
        .env_remove("GUARD_SOCKET")
        .output()
        .unwrap();
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    let ask = listed
        .iter()
        .find(|a| a["socket"] == asked["socket"] && a["id"] == id)
        .unwrap_or_else(|| panic!("guard prompts does not list ask {id}: {listed:?}"));
    assert!(
        ask["message"].as_str().unwrap().starts_with(
            "dns-probe wants api2.example.test:443 (not resolved until approved), https"
        ),
        "{ask}"
    );
    // The name has not left the host: the program was answered with a stand-in.
    assert_eq!(
        dns.queries("api2.example.test"),
        0,
        "asked upstream before the approval"
    );
    assert!(
        ask["record"]["argv"][0]
            .as_str()
            .unwrap()
            .ends_with("dns-probe"),
        "{ask}"
    );

    // No --socket: guard approve finds the run that holds the ask.
    let out = Command::new(guard_bin())
        .args(["approve", &id.to_string(), "--always"])
        .env_remove("GUARD_SOCKET")
        .output()
        .unwrap();
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&rules).unwrap(),
        format!(
            "{original}network_rule(host=\"api2.example.test\", protocol=\"https\", \
             decision=\"allow\", justification=\"Allow https_connect access to \
             api2.example.test\")\n"
        )
    );
    let (status, results, seen) = run.finish();
    assert_eq!(results[0]["refused"], 1, "{}", results[0]);
    let stand_in = results[0]["addresses"][0].as_str().unwrap_or_default();
    assert!(stand_in.starts_with("198.18."), "{}", results[0]);
    // The program kept its stand-in; its connect reached the name's real address.
    assert_eq!(
        results[0]["retried"],
        serde_json::json!({"connected": 1, "refused": 0, "reached": ["127.0.1.9"]}),
        "the retry connects in the same run: {}; guard said: {seen:#?}",
        results[0]
    );
    // Looked up again, the approved name is forwarded and answered for real.
    assert_eq!(results[1]["addresses"], serde_json::json!(["127.0.1.9"]));
    assert_eq!(results[1]["connected"], 1, "{}", results[1]);
    // Each answer is an event that names the process that asked.
    let dns_events: Vec<Value> = seen
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "dns" && e["name"] == "api2.example.test")
        .collect();
    for how in ["stand_in", "forwarded"] {
        let event = dns_events
            .iter()
            .find(|e| e["answered"] == how)
            .unwrap_or_else(|| panic!("no {how} event: {dns_events:#?}"));
        assert!(
            event["process"]["exe"]
                .as_str()
                .is_some_and(|exe| exe.ends_with("dns-probe")),
            "{event}"
        );
    }
    assert!(status.success(), "{status}; guard said: {seen:#?}");
    assert!(
        seen.iter()
            .any(|l| l.starts_with(&format!("guard: ask {id} approved always by root"))),
        "{seen:#?}"
    );
    // The run's socket goes with it.
    assert!(!Path::new(asked["socket"].as_str().unwrap()).exists());
}

/// `guard run -- dns-probe ARGS` under the daemon: the probe's JSON line and guard's stderr.
pub(crate) fn probe_in_daemon(daemon: &TestDaemon, args: &[&str]) -> (Value, String) {
    let (_, stdout, stderr) = daemon.run_in_scope(&dns_probe(), args);
    let line = stdout.lines().last().unwrap_or_default().to_string();
    let value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("{e}: {line:?}; guard said: {stderr}"));
    (value, stderr)
}

/// One more try of a [`RetryingRun`] of dns-probe: its JSON line, and all it printed.
fn probe_attempt(run: &mut RetryingRun) -> (Value, String) {
    let (_, out) = run.attempt();
    let value = out
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("dns-probe printed no JSON line: {out}"));
    (value, out)
}

#[test]
fn under_the_daemon_an_unknown_name_is_answered_with_a_stand_in_whose_approved_connect_reaches_the_host()
 {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    let address = v4("127.0.1.7");
    dns.set_a("api2.example.test", &[address], 60);
    dns.set_a("evil.example.test", &[v4("127.0.1.66")], 60);
    dns.set_a("a.wild.test", &[v4("127.0.1.8")], 60);
    let _https = TcpListener::bind((address, 443)).expect("listening on 127.0.1.7:443");
    let other = TcpListener::bind((address, 0)).unwrap();
    let other_port = other.local_addr().unwrap().port();
    let third = TcpListener::bind((address, 0)).unwrap();
    let third_port = third.local_addr().unwrap().port().to_string();
    let _wild = TcpListener::bind((v4("127.0.1.8"), 443)).unwrap();
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_network=\"prompt\")\n\
                network_rule(host=\"evil.example.test\", protocol=\"https\", decision=\"deny\")\n\
                address_rule(addresses=[\"*.wild.test\"], transport=\"tcp\", decision=\"allow\")\n"
            .to_string(),
        nameserver: Some(dns.addr()),
        ..Default::default()
    });

    // The lookup is answered with a stand-in (the name does not leave the host before an
    // approval); the connect is an ask for the host. The retry after the approval comes from
    // the same run: an approval answers the scope whose ask it was.
    let mut asking = RetryingRun::start(
        &daemon,
        &dns_probe(),
        &[ASKED, "api2.example.test", "udp", "1", "443"],
    );
    let (result, stderr) = probe_attempt(&mut asking);
    let stand_in = result["addresses"][0]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(stand_in.starts_with("198.18."), "{result}: {stderr}");
    assert_eq!(result["refused"], 1, "{result}: {stderr}");
    assert_eq!(
        dns.queries("api2.example.test"),
        0,
        "asked upstream before the approval"
    );
    let asks = daemon.prompts();
    assert_eq!(asks.len(), 1, "{asks:?}");
    let ask = &asks[0];
    assert_eq!(ask["record"]["host"], "api2.example.test", "{ask}");
    assert_eq!(ask["record"]["protocol"], "https");
    assert!(
        ask["record"]["executable"]
            .as_str()
            .unwrap()
            .ends_with("dns-probe"),
        "{ask}"
    );
    let message = ask["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "dns-probe wants api2.example.test:443 (not resolved until approved), https"
        ),
        "{message}"
    );

    // Approved once: guard resolves the name now, and the program's connect to its stand-in
    // goes to the real address (the listener at 127.0.1.7:443 takes it).
    let id = ask["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    assert!(
        dns.queries("api2.example.test") > 0,
        "resolved once approved"
    );
    let (result, stderr) = probe_attempt(&mut asking);
    assert_eq!(
        result["addresses"],
        serde_json::json!([stand_in]),
        "{stderr}"
    );
    assert_eq!(
        result["connected"], 1,
        "the retry connects: {result}: {stderr}"
    );

    // An approval covers what was asked: another port is another ask, and approving it always
    // writes that port alone.
    let other_port_text = other_port.to_string();
    let (result, _) = probe_in_daemon(
        &daemon,
        &[ASKED, "api2.example.test", "udp", "1", &other_port_text],
    );
    assert_eq!(result["refused"], 1, "{result}");
    let ask = daemon.prompts().into_iter().next().expect("a second ask");
    let id = ask["id"].as_u64().unwrap().to_string();
    let out = daemon.guard(&["approve", &id, "--always"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let written = std::fs::read_to_string(daemon.amendments()).unwrap();
    assert!(
        written.starts_with(&format!(
            "address_rule(addresses=[\"api2.example.test\"], ports=[{other_port}], \
             transport=\"tcp\", decision=\"allow\", justification=\"Allow tcp port \
             {other_port} access to api2.example.test\")\n"
        )),
        "{written}"
    );
    // A rule names the name now: it is forwarded and answered for real.
    let (result, _) = probe_in_daemon(
        &daemon,
        &[ASKED, "api2.example.test", "udp", "1", &other_port_text],
    );
    assert_eq!(result["addresses"], serde_json::json!(["127.0.1.7"]));
    assert_eq!(result["connected"], 1, "{result}");
    let (result, _) = probe_in_daemon(
        &daemon,
        &[ASKED, "api2.example.test", "udp", "1", &third_port],
    );
    assert_eq!(result["refused"], 1, "a third port still asks: {result}");

    // A forbidden name is refused by the daemon's resolver and audited.
    let (result, _) = probe_in_daemon(&daemon, &[ASKED, "evil.example.test", "udp", "1"]);
    assert_eq!(result["rcode"], "Refused", "{result}");
    // A pattern allows what it covers.
    let (result, _) = probe_in_daemon(&daemon, &[ASKED, "a.wild.test", "tcp", "1", "443"]);
    assert_eq!(result["connected"], 1, "{result}");

    let out = daemon.guard(&["audit", "--json"]);
    let records: Vec<Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let refused = records
        .iter()
        .find(|r| r["type"] == "dns_refused")
        .unwrap_or_else(|| panic!("no dns_refused record: {records:?}"));
    assert_eq!(refused["name"], "evil.example.test", "{refused}");
    assert_eq!(refused["rule"]["line"], 2, "{refused}");
    // Every answer is recorded with the process that asked: first the stand-in, then (a rule
    // names it) the name forwarded.
    let answered: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "dns_answered" && r["name"] == "api2.example.test")
        .collect();
    for how in ["stand_in", "forwarded"] {
        let record = answered
            .iter()
            .find(|r| r["answered"] == how)
            .unwrap_or_else(|| panic!("no {how} record of api2.example.test: {answered:?}"));
        assert!(
            record["process"]["exe"]
                .as_str()
                .is_some_and(|exe| exe.ends_with("dns-probe")),
            "{record}"
        );
    }
    // Every connect record names the host its address was answered for.
    let connects: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "decision" && r["event"] == "connect")
        .collect();
    assert!(!connects.is_empty());
    for record in connects {
        assert_eq!(
            record["destination"]["hosts"],
            serde_json::json!(["api2.example.test"]),
            "{record}"
        );
    }
}

// Names at policy size: a policy of `MANY` names, enforced by a session in this process.

/// How many names the policies below have: enough that an answer recompiling every name's
/// entries, or a start resolving them, would show, and few enough for the VM tier's software
/// emulation (a daemon parsing 20 000 rules there took past its 30 s start). The sizes users
/// run are measured by `tests/benches/names.rs` (10 and 100 000 names).
const MANY: usize = 2_000;

/// The filler names (`n{i}.many.test`, allowed on any TCP port) and `extra` rules, under a
/// policy that refuses what no rule names.
fn many_names(extra: &str) -> String {
    let mut rules = String::from("enforcement(unmatched_network=\"deny\")\n");
    rules.push_str(extra);
    for i in 0..MANY {
        rules.push_str(&format!(
            "network_rule(host=\"n{i}.many.test\", protocol=\"socks5_tcp\", decision=\"allow\")\n"
        ));
    }
    rules
}

/// Filler name `i`'s address: its own, on loopback.
fn filler_address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250) as u8 + 1)
}

/// How many queries the name server got for the policy's filler names.
fn filler_queries(dns: &TestDns) -> usize {
    (0..MANY)
        .map(|i| dns.queries(&format!("n{i}.many.test")))
        .sum()
}

/// `net-probe tcp ADDR PORT` in the session's scope: `ok` or `errno N`.
pub(crate) fn connect_in_scope(
    session: &guard::session::Session,
    addr: Ipv4Addr,
    port: u16,
) -> String {
    let mut command = Command::new(net_probe());
    command
        .args(["tcp", &addr.to_string(), &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = session.spawn(&mut command).expect("starting net-probe");
    let output = guard_tests::kernel::wait_output(child, RUN_TIMEOUT);
    text(&output.stdout).trim().to_string()
}

/// `dns-probe ASKED NAME udp 1 PORT` in the session's scope (its query redirected to guard's
/// resolver), the session polled meanwhile as `guard run` does: the probe's JSON line.
pub(crate) fn lookup_in_scope(
    session: &mut guard::session::Session,
    name: &str,
    port: u16,
) -> Value {
    let mut command = Command::new(dns_probe());
    command
        .args([ASKED, name, "udp", "1", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = session.spawn(&mut command).expect("starting dns-probe");
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "dns-probe hung");
        session.poll_events(Duration::from_millis(5));
    }
    tally(&child.wait_with_output().unwrap())
}

/// One port on each of `ips`, all listening.
pub(crate) fn listening_on(ips: &[Ipv4Addr]) -> (u16, Vec<TcpListener>) {
    for _ in 0..20 {
        let first = TcpListener::bind((ips[0], 0)).unwrap();
        let port = first.local_addr().unwrap().port();
        let rest: Vec<TcpListener> = ips[1..]
            .iter()
            .filter_map(|ip| TcpListener::bind((*ip, port)).ok())
            .collect();
        if rest.len() == ips.len() - 1 {
            return (port, std::iter::once(first).chain(rest).collect());
        }
    }
    panic!("no port was free on {ips:?}");
}

#[test]
fn with_many_names_start_asks_for_none_and_a_ruled_name_is_in_force_right_after_its_answer() {
    let dns = TestDns::start();
    let asked = v4("127.0.1.3");
    let denied = v4("127.0.1.4");
    let never_asked = filler_address(7);
    let (port, _listeners) = listening_on(&[asked, denied, never_asked]);
    dns.set_a("asked.many.test", &[asked], 300);
    dns.set_a("denied.many.test", &[denied], 300);
    dns.set_a("n7.many.test", &[never_asked], 300);
    let rules = many_names(
        "network_rule(host=\"asked.many.test\", protocol=\"socks5_tcp\", decision=\"allow\")\n\
         network_rule(host=\"denied.many.test\", protocol=\"socks5_tcp\", decision=\"deny\")\n",
    );
    let options = guard::session::SessionOptions {
        nameserver: Some(dns.addr()),
        resolver: Some(guard::resolve::Refusal::Refused),
        ..Default::default()
    };
    let Some(mut session) = guard_tests::kernel::session_or_skip(&rules, options) else {
        return;
    };
    // The start looked none of the policy's names up, and reports none of them unresolved.
    assert_eq!(filler_queries(&dns), 0, "the start asked for filler names");
    assert_eq!(dns.queries("asked.many.test"), 0);
    assert_eq!(dns.queries("denied.many.test"), 0);
    assert!(
        session.image().unresolved_hosts().is_empty(),
        "{:?}",
        &session.image().unresolved_hosts()[..3]
    );

    // Asked in the scope: the answer's address is in force before the program has it.
    let result = lookup_in_scope(&mut session, "asked.many.test", port);
    assert_eq!(
        result["addresses"],
        serde_json::json!(["127.0.1.3"]),
        "{result}"
    );
    assert_eq!(result["connected"], 1, "{result}");
    assert_eq!(result["refused"], 0, "{result}");
    assert_eq!(dns.queries("asked.many.test"), 1);

    // A denied name is refused by the resolver and never asked upstream; its address, which
    // the program could only have hard-coded, gets the unmatched default (deny here).
    let result = lookup_in_scope(&mut session, "denied.many.test", port);
    assert_eq!(result["rcode"], "Refused", "{result}");
    assert_eq!(result["connected"], 0, "{result}");
    assert_eq!(dns.queries("denied.many.test"), 0);
    assert_eq!(connect_in_scope(&session, denied, port), "errno 1");

    // An allowed name nobody asked for is not in force: its address, hard-coded, is refused
    // by the unmatched default until the scope looks the name up.
    assert_eq!(connect_in_scope(&session, never_asked, port), "errno 1");
    let result = lookup_in_scope(&mut session, "n7.many.test", port);
    assert_eq!(result["connected"], 1, "{result}");
    assert_eq!(connect_in_scope(&session, never_asked, port), "ok");
    assert_eq!(
        filler_queries(&dns),
        1,
        "only the asked filler name left the host"
    );
}

#[test]
fn with_many_names_resolved_by_guard_a_changed_answer_moves_only_its_names_entries() {
    let dns = TestDns::start();
    let shared = v4("127.0.1.5");
    let moved_to = v4("127.0.1.6");
    let (port, _listeners) = listening_on(&[shared, moved_to]);
    for i in 0..MANY {
        dns.set_a(&format!("n{i}.many.test"), &[filler_address(i)], 3600);
    }
    // Both names at one address: the deny wins there until `moving` moves away.
    dns.set_a("moving.many.test", &[shared], 1);
    dns.set_a("steady.many.test", &[shared], 3600);
    let rules = many_names(
        "network_rule(host=\"moving.many.test\", protocol=\"socks5_tcp\", decision=\"deny\")\n\
         network_rule(host=\"steady.many.test\", protocol=\"socks5_tcp\", decision=\"allow\")\n",
    );
    // Without guard's resolver in the path, the kernel needs every name before the command.
    let options = guard::session::SessionOptions {
        nameserver: Some(dns.addr()),
        resolver: None,
        ..Default::default()
    };
    let Some(mut session) = guard_tests::kernel::session_or_skip(&rules, options) else {
        return;
    };
    let unasked = (0..MANY).find(|i| dns.queries(&format!("n{i}.many.test")) == 0);
    assert_eq!(unasked, None, "every name was resolved before the command");
    assert_eq!(connect_in_scope(&session, shared, port), "errno 1");
    assert_eq!(
        connect_in_scope(&session, filler_address(11), port),
        "errno 111"
    );

    dns.set_a("moving.many.test", &[moved_to], 1);
    std::thread::sleep(Duration::from_millis(1100));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !session.refresh_dns().expect("refreshing the names") {
        assert!(
            std::time::Instant::now() < deadline,
            "no refresh saw the change"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its old address is steady's alone now (allowed); its new one is denied.
    assert_eq!(connect_in_scope(&session, shared, port), "ok");
    assert_eq!(connect_in_scope(&session, moved_to, port), "errno 1");
    let held = |ip: Ipv4Addr| {
        let hosts: Vec<String> = session
            .image()
            .destinations
            .iter()
            .filter(|e| e.network.contains(ip.into()))
            .filter_map(|e| e.host.as_deref().map(str::to_string))
            .collect();
        hosts
    };
    assert_eq!(held(shared), ["steady.many.test"]);
    assert_eq!(held(moved_to), ["moving.many.test"]);
}

#[test]
fn under_the_daemon_start_and_reload_ask_for_no_policy_name_and_a_looked_up_name_holds() {
    if !can_run() {
        return;
    }
    let dns = TestDns::start();
    let address = v4("127.0.1.9");
    let (port, _listeners) = listening_on(&[address]);
    dns.set_a("ondemand.many.test", &[address], 300);
    let rules = many_names(
        "network_rule(host=\"ondemand.many.test\", protocol=\"socks5_tcp\", decision=\"allow\")\n",
    );
    let daemon = TestDaemon::start(&DaemonSetup {
        rules,
        nameserver: Some(dns.addr()),
        ..Default::default()
    });
    let reload = daemon.guard(&["reload"]);
    assert!(reload.status.success(), "{}", text(&reload.stderr));
    assert_eq!(
        filler_queries(&dns),
        0,
        "start or reload asked for policy names"
    );
    assert_eq!(dns.queries("ondemand.many.test"), 0);
    // What guard status says: no name is unresolved or resolved by guard itself; the resolver
    // puts them in force as they are asked.
    let status = daemon.json(&["status", "--json"]);
    assert_eq!(
        status["unresolved_hosts"],
        serde_json::json!([]),
        "{status}"
    );
    assert_eq!(status["addresses"], serde_json::json!([]), "{status}");
    let human = text(&daemon.guard(&["status"]).stdout);
    assert!(
        human.contains("put in force as the scopes look them up"),
        "{human}"
    );

    // Not looked up: its address gets the unmatched default (deny).
    let (code, stdout, _) =
        daemon.run_in_scope(&net_probe(), &["tcp", "127.0.0.1", &port.to_string()]);
    assert_eq!(
        (code, stdout.trim()),
        (1, "errno 1"),
        "an address no rule names"
    );
    let (result, stderr) = probe_in_daemon(
        &daemon,
        &[ASKED, "ondemand.many.test", "udp", "1", &port.to_string()],
    );
    assert_eq!(result["connected"], 1, "{result}: {stderr}");
    assert_eq!(dns.queries("ondemand.many.test"), 1);
    let status = daemon.json(&["status", "--json"]);
    assert!(status["resolver"]["names"].as_u64() >= Some(1), "{status}");
}

/// A policy whose one way out by name is a host pattern, with caps on what it forwards.
const PATTERN_RULES: &str = r#"
enforcement(unmatched_network="deny", dns_max_labels=5, dns_max_name_length=40,
            dns_wildcard_lookups_per_second=3)
address_rule(addresses=["*.wild.test"], transport="tcp", decision="allow")
"#;

/// Where the recording server's A answers point (a listener in the tests that connect).
const ANSWERED: &str = "127.0.1.9";

/// The packets a program could write to carry more than its question past guard's decision,
/// each as (what it tries, hex): two questions, a record in each section, bytes after the
/// message.
fn smuggling_queries() -> Vec<(&'static str, String)> {
    use hickory_server::proto::op::{Message, Query};
    use hickory_server::proto::rr::rdata::NULL;
    use hickory_server::proto::rr::{Name, RData, Record, RecordType};
    use std::str::FromStr;
    let base = || {
        let mut m = Message::query();
        m.metadata.id = 0x4242;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(
            Name::from_str("ok.wild.test.").unwrap(),
            RecordType::A,
        ));
        m
    };
    let payload = || {
        Record::from_rdata(
            Name::from_str("c2VjcmV0.attacker.test.").unwrap(),
            0,
            RData::NULL(NULL::with(b"smuggled-secret".to_vec())),
        )
    };
    let mut two = base();
    two.add_query(Query::query(
        Name::from_str("c2VjcmV0.attacker.test.").unwrap(),
        RecordType::TXT,
    ));
    let mut answer = base();
    answer.add_answer(payload());
    let mut authority = base();
    authority.add_authority(payload());
    let mut additional = base();
    additional.add_additional(payload());
    let mut trailing = base().to_vec().unwrap();
    trailing.extend_from_slice(b"smuggled-secret");
    let hex = |bytes: Vec<u8>| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    vec![
        ("two questions", hex(two.to_vec().unwrap())),
        (
            "a record in the answer section",
            hex(answer.to_vec().unwrap()),
        ),
        (
            "a record in the authority section",
            hex(authority.to_vec().unwrap()),
        ),
        (
            "a record in the additional section",
            hex(additional.to_vec().unwrap()),
        ),
        ("bytes after the message", hex(trailing)),
    ]
}

/// A query for `name` in the letter case written, with EDNS options that carry data (a cookie
/// and padding, as dig and DoT clients send them): hex.
fn query_with_options(name: &str) -> String {
    use hickory_server::proto::op::{Edns, Message, Query};
    use hickory_server::proto::rr::rdata::opt::{EdnsCode, EdnsOption};
    use hickory_server::proto::rr::{Name, RecordType};
    let mut m = Message::query();
    m.metadata.id = 0x4242;
    m.metadata.recursion_desired = true;
    // `from_ascii`: `from_str` would lower the letter case.
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    edns.options_mut().insert(EdnsOption::Unknown(
        u16::from(EdnsCode::Cookie),
        b"c2VjcmV0".to_vec(),
    ));
    edns.options_mut().insert(EdnsOption::Unknown(
        u16::from(EdnsCode::Padding),
        b"smuggled-secret".to_vec(),
    ));
    m.set_edns(edns);
    m.to_vec()
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The DNS records of `output` (guard's JSON events of kind `dns` that refused a lookup).
fn dns_refusals(output: &Output) -> Vec<Value> {
    events(output)
        .into_iter()
        .filter(|e| e["kind"] == "dns" && e["decision"] == "forbidden")
        .collect()
}

/// What reached the upstream, each datagram checked to be a query guard built: exactly one
/// question in lower case, no record but guard's OPT without options, nothing after it, and
/// not the program's id (when known). Returns the names asked.
fn guard_built(received: &[Vec<u8>], program_id: Option<u16>) -> Vec<String> {
    use hickory_server::proto::op::Message;
    received
        .iter()
        .map(|bytes| {
            let query = Message::from_vec(bytes).expect("the upstream got a DNS message");
            assert_eq!(query.queries.len(), 1, "one question: {query:?}");
            assert!(
                query.answers.is_empty()
                    && query.authorities.is_empty()
                    && query.additionals.is_empty(),
                "no record of the program's: {query:?}"
            );
            if let Some(edns) = &query.edns {
                assert!(
                    edns.options().as_ref().is_empty(),
                    "the program's EDNS options reached the upstream: {query:?}"
                );
            }
            assert_eq!(
                query.to_vec().unwrap().len(),
                bytes.len(),
                "bytes after the message reached the upstream"
            );
            if let Some(id) = program_id {
                assert_ne!(query.metadata.id, id, "the program's id went on");
            }
            let name = query.queries[0].name().to_ascii();
            assert_eq!(name, name.to_ascii_lowercase(), "the program's letter case");
            assert!(!bytes.windows(8).any(|w| w == b"smuggled"), "{bytes:?}");
            name
        })
        .collect()
}

#[test]
fn a_query_that_carries_more_than_its_one_question_never_reaches_the_upstream() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("pattern.rules");
    std::fs::write(&rules, PATTERN_RULES).unwrap();
    let upstream = RecordingDns::start(v4(ANSWERED));

    for (tries, hex) in smuggling_queries() {
        let output = run_probe_to(upstream.addr(), &rules, &[], &[ASKED, &hex, "raw"]);
        let result = tally(&output);
        assert_eq!(
            result["rcode"],
            "FormErr",
            "{tries}: {result}; guard: {}",
            text(&output.stderr)
        );
        assert_eq!(
            result["id"], 0x4242,
            "{tries}: the reply is to the program's query"
        );
        let records = dns_refusals(&output);
        let record = records
            .iter()
            .find(|e| e["answer"] == "FORMERR")
            .unwrap_or_else(|| panic!("{tries}: no record: {}", text(&output.stderr)));
        assert!(
            record["rule"]
                .as_str()
                .is_some_and(|r| r.contains("does not forward")),
            "{tries}: {record}"
        );
        assert!(
            upstream.received().is_empty(),
            "{tries}: it reached the upstream"
        );
    }

    // EDNS options and a name in mixed case: answered, in the case asked; the upstream gets
    // guard's own query (one question, lower case, no options, a new id).
    let output = run_probe_to(
        upstream.addr(),
        &rules,
        &[],
        &[ASKED, &query_with_options("MiXeD.Wild.Test."), "raw"],
    );
    let result = tally(&output);
    assert_eq!(
        result["rcode"],
        "NoError",
        "{result}: {}",
        text(&output.stderr)
    );
    assert_eq!(result["question"], "MiXeD.Wild.Test.", "{result}");
    assert_eq!(result["id"], 0x4242, "{result}");
    assert_eq!(
        result["addresses"],
        serde_json::json!([ANSWERED]),
        "{result}"
    );
    assert_eq!(
        guard_built(&upstream.received(), Some(0x4242)),
        ["mixed.wild.test."]
    );

    // Ordinary lookups beside it: a dig-like probe and the C library's getaddrinfo, whose
    // connects to the answer go through.
    let (port, _listeners) = listening_on(&[v4(ANSWERED)]);
    let port = port.to_string();
    upstream.clear();
    for (mode, name) in [("udp", "ok.wild.test"), ("getaddrinfo", "libc.wild.test")] {
        let output = run_probe_to(
            upstream.addr(),
            &rules,
            &[],
            &[ASKED, name, mode, "1", &port],
        );
        let result = tally(&output);
        assert_eq!(
            result["addresses"],
            serde_json::json!([ANSWERED]),
            "{mode}: {result}: {}",
            text(&output.stderr)
        );
        assert_eq!(result["connected"], 1, "{mode}: {result}");
        assert!(output.status.success(), "{mode}: {}", text(&output.stderr));
    }
    let asked = guard_built(&upstream.received(), None);
    assert!(asked.contains(&"ok.wild.test.".to_string()), "{asked:?}");
    assert!(asked.contains(&"libc.wild.test.".to_string()), "{asked:?}");
}

#[test]
fn a_name_under_a_pattern_past_a_cap_is_refused_and_recorded_and_one_within_is_answered() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("pattern.rules");
    std::fs::write(&rules, PATTERN_RULES).unwrap();
    let upstream = RecordingDns::start(v4(ANSWERED));

    // 6 labels (the cap is 5), 46 characters (the cap is 40).
    let many_labels = "a.b.c.d.wild.test";
    let long = "c2vjcmv0lwtles0xmjm0nty3odkwywjjzgvm.wild.test";
    for (name, cap) in [
        (many_labels, "dns_max_labels=5"),
        (long, "dns_max_name_length=40"),
    ] {
        let output = run_probe_to(upstream.addr(), &rules, &[], &[ASKED, name, "udp", "1"]);
        let result = tally(&output);
        assert_eq!(result["rcode"], "Refused", "{name}: {result}");
        let records = dns_refusals(&output);
        assert_eq!(records.len(), 1, "{name}: {records:?}");
        assert_eq!(records[0]["name"], name);
        assert!(
            records[0]["rule"]
                .as_str()
                .is_some_and(|r| r.starts_with(&format!("enforcement({cap})"))),
            "{name}: {}",
            records[0]
        );
        assert!(
            records[0]["message"].as_str().unwrap().contains(name),
            "{}",
            records[0]
        );
    }
    assert!(
        upstream.received().is_empty(),
        "a capped name left the host"
    );

    // Under the caps: answered (4 labels, 14 characters).
    let output = run_probe_to(
        upstream.addr(),
        &rules,
        &[],
        &[ASKED, "a.b.wild.test", "udp", "1"],
    );
    let result = tally(&output);
    assert_eq!(
        result["addresses"],
        serde_json::json!([ANSWERED]),
        "{result}: {}",
        text(&output.stderr)
    );
    assert_eq!(
        guard_built(&upstream.received(), Some(1)),
        ["a.b.wild.test."]
    );

    // Lookups a second: 20 names in a row from one process (a fraction of a second here, a
    // few seconds where the CPU is emulated); the first 3 leave, and past 3 in a second the
    // rest are refused with the cap named.
    upstream.clear();
    let output = run_probe_to(
        upstream.addr(),
        &rules,
        &[],
        &[ASKED, "n{}.wild.test", "udp", "20"],
    );
    let result = tally(&output);
    assert_eq!(result["answers"], 20, "{result}: {}", text(&output.stderr));
    let left = guard_built(&upstream.received(), None);
    assert_eq!(
        &left[..3],
        ["n0.wild.test.", "n1.wild.test.", "n2.wild.test."],
        "{left:?}"
    );
    let capped: Vec<Value> = dns_refusals(&output)
        .into_iter()
        .filter(|e| {
            e["rule"]
                .as_str()
                .is_some_and(|r| r.starts_with("enforcement(dns_wildcard_lookups_per_second=3)"))
        })
        .collect();
    assert!(!capped.is_empty(), "no lookup was capped: {left:?}");
    assert_eq!(capped.len() + left.len(), 20, "{left:?} {capped:?}");
    assert!(
        capped
            .iter()
            .all(|e| !["n0.wild.test", "n1.wild.test", "n2.wild.test"]
                .contains(&e["name"].as_str().unwrap_or(""))),
        "the first 3 of a second leave: {capped:?}"
    );
}
