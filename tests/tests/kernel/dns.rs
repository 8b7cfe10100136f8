//! The daemon's host-name resolution (`guard::resolve::lookup`) against a real DNS server on
//! loopback (`guard_tests::dns::TestDns`).

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use guard::compile::HostResolver;
use guard::resolve::lookup::{DnsCache, DnsConfig, DnsResolver, HostChange};
use guard_tests::dns::TestDns;

/// The bound on any single await in these tests.
const WAIT: Duration = Duration::from_secs(15);

async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {WAIT:?}"))
}

fn resolver_for(dns: &TestDns) -> DnsResolver {
    DnsResolver::new(&DnsConfig {
        nameserver: Some(dns.addr()),
    })
    .expect("a resolver for the test server")
}

fn hosts(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Sleeps until `cache`'s next refresh is due (plus a little), bounded.
async fn until_due(cache: &DnsCache) {
    let due = cache.next_refresh().expect("a host to refresh");
    let wait = due.saturating_duration_since(Instant::now());
    assert!(wait <= Duration::from_secs(5), "next refresh {wait:?} away");
    tokio::time::sleep(wait + Duration::from_millis(50)).await;
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn resolves_a_and_aaaa() {
    let dns = TestDns::start();
    dns.set_a("both.test", &[v4("192.0.2.2"), v4("192.0.2.1")], 300);
    dns.set_aaaa("both.test", &[v6("2001:db8::1")], 300);
    dns.set_a("v4only.test", &[v4("198.51.100.7")], 300);
    dns.set_aaaa("v6only.test", &[v6("2001:db8::7")], 300);
    let resolver = resolver_for(&dns);

    let cache = bounded(
        "resolve",
        resolver.resolve(&hosts(&["both.test", "V4ONLY.test.", "v6only.test"])),
    )
    .await;

    assert_eq!(
        cache.lookup("both.test"),
        vec![ip("192.0.2.1"), ip("192.0.2.2"), ip("2001:db8::1")]
    );
    assert_eq!(cache.lookup("v4only.test"), vec![ip("198.51.100.7")]);
    assert_eq!(cache.lookup("v6only.test"), vec![ip("2001:db8::7")]);
    for host in ["both.test", "v4only.test", "v6only.test"] {
        assert_eq!(cache.error(host), None, "{host}");
        // One A and one AAAA query each: the absolute name is asked once, no search list.
        assert_eq!(dns.queries(host), 2, "{host}");
    }
    let expires = cache.expires("both.test").unwrap();
    let ttl = expires.saturating_duration_since(Instant::now());
    assert!(
        ttl > Duration::from_secs(290) && ttl <= Duration::from_secs(300),
        "{ttl:?}"
    );
    // A host is re-resolved when its shortest-lived answer runs out: here the NODATA for
    // v4only.test's AAAA, with the test server's 1 s negative TTL.
    assert!(cache.expires("v4only.test").unwrap() <= Instant::now() + Duration::from_secs(1));
}

#[tokio::test]
async fn unknown_name_has_no_addresses() {
    let dns = TestDns::start();
    dns.set_a("known.test", &[v4("192.0.2.1")], 300);
    let resolver = resolver_for(&dns);

    let cache = bounded(
        "resolve",
        resolver.resolve(&hosts(&["nowhere.test", "known.test"])),
    )
    .await;

    assert!(cache.lookup("nowhere.test").is_empty());
    assert!(cache.lookup("never-asked.test").is_empty());
    assert_eq!(cache.lookup("known.test"), vec![ip("192.0.2.1")]);
    // NXDOMAIN is an answer, not a failure, and it did reach the server.
    assert_eq!(cache.error("nowhere.test"), None);
    assert!(dns.queries("nowhere.test") >= 1);
    // The negative answer expires with the SOA's negative TTL (1 s at the test server).
    assert!(cache.expires("nowhere.test").unwrap() <= Instant::now() + Duration::from_secs(1));
}

#[tokio::test]
async fn refresh_after_ttl_picks_up_a_changed_answer() {
    let dns = TestDns::start();
    dns.set_a("moving.test", &[v4("192.0.2.1"), v4("192.0.2.2")], 1);
    // Both families answered, so the host's expiry is the records' TTL (a NODATA answer would
    // bring the test server's 1 s negative TTL).
    dns.set_a("steady.test", &[v4("198.51.100.1")], 300);
    dns.set_aaaa("steady.test", &[v6("2001:db8::100")], 300);
    let resolver = resolver_for(&dns);
    let mut cache = bounded(
        "resolve",
        resolver.resolve(&hosts(&["moving.test", "steady.test"])),
    )
    .await;
    assert_eq!(
        cache.lookup("moving.test"),
        vec![ip("192.0.2.1"), ip("192.0.2.2")]
    );
    let moving_queries = dns.queries("moving.test");
    let steady_queries = dns.queries("steady.test");

    // Before the TTL ran out, a refresh asks nobody.
    let changes = bounded(
        "early refresh",
        resolver.refresh(&mut cache, Instant::now()),
    )
    .await;
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(dns.queries("moving.test"), moving_queries);
    assert_eq!(dns.queries("steady.test"), steady_queries);

    // The answer changes; after the TTL the refresh sees it.
    dns.set_a("moving.test", &[v4("192.0.2.2"), v4("192.0.2.3")], 1);
    dns.set_aaaa("moving.test", &[v6("2001:db8::3")], 1);
    until_due(&cache).await;
    let changes = bounded("refresh", resolver.refresh(&mut cache, Instant::now())).await;
    assert_eq!(
        changes,
        vec![HostChange {
            host: "moving.test".into(),
            added: vec![ip("192.0.2.3"), ip("2001:db8::3")],
            removed: vec![ip("192.0.2.1")],
        }]
    );
    assert!(dns.queries("moving.test") > moving_queries);
    // Only the expired host was asked again.
    assert_eq!(dns.queries("steady.test"), steady_queries);
    assert_eq!(
        cache.lookup("moving.test"),
        vec![ip("192.0.2.2"), ip("192.0.2.3"), ip("2001:db8::3")]
    );
    assert_eq!(resolver.next_refresh(&cache), cache.next_refresh());

    // The same answer once more: asked again (the resolver's cache does not answer), no change.
    let before = dns.queries("moving.test");
    until_due(&cache).await;
    let changes = bounded("refresh", resolver.refresh(&mut cache, Instant::now())).await;
    assert!(changes.is_empty(), "{changes:?}");
    assert!(dns.queries("moving.test") > before);

    // The name disappears: its addresses go.
    dns.remove("moving.test");
    until_due(&cache).await;
    let changes = bounded("refresh", resolver.refresh(&mut cache, Instant::now())).await;
    assert_eq!(
        changes,
        vec![HostChange {
            host: "moving.test".into(),
            added: vec![],
            removed: vec![ip("192.0.2.2"), ip("192.0.2.3"), ip("2001:db8::3")],
        }]
    );
    assert!(cache.lookup("moving.test").is_empty());
    assert_eq!(
        cache.lookup("steady.test"),
        vec![ip("198.51.100.1"), ip("2001:db8::100")]
    );
}

#[tokio::test]
async fn a_failed_refresh_keeps_the_old_addresses() {
    let dns = TestDns::start();
    dns.set_a("flaky.test", &[v4("192.0.2.9")], 1);
    let resolver = resolver_for(&dns);
    let server = dns.addr();
    let mut cache = bounded("resolve", resolver.resolve(&hosts(&["flaky.test"]))).await;
    assert_eq!(cache.lookup("flaky.test"), vec![ip("192.0.2.9")]);

    drop(dns); // the server goes away
    until_due(&cache).await;
    let started = Instant::now();
    let changes = bounded("refresh", resolver.refresh(&mut cache, Instant::now())).await;
    assert!(
        started.elapsed() < Duration::from_secs(7),
        "a lookup is bounded: {:?}",
        started.elapsed()
    );
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(cache.lookup("flaky.test"), vec![ip("192.0.2.9")]);
    let error = cache.error("flaky.test").expect("the failure is recorded");
    assert!(error.contains("flaky.test"), "{error}");
    assert!(error.contains(&server.to_string()), "{error}");
    // Retried after the backoff, not at once.
    let retry = cache.expires("flaky.test").unwrap();
    assert!(
        retry > Instant::now() + Duration::from_secs(3),
        "retry too soon"
    );
}

#[test]
fn test_server_works_from_sync_code_and_stops_on_drop() {
    let dns = TestDns::start();
    dns.set_a("sync.test", &[v4("192.0.2.1")], 60);
    let addr = dns.addr();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let resolver = resolver_for(&dns);
    let cache = runtime.block_on(bounded("resolve", resolver.resolve(&hosts(&["sync.test"]))));
    assert_eq!(cache.lookup("sync.test"), vec![ip("192.0.2.1")]);
    drop(dns);
    // The port is free again once the server has stopped.
    std::net::UdpSocket::bind(addr).expect("the server released its port");
}

#[test]
fn test_server_answers_over_tcp_too() {
    use std::io::{Read, Write};

    use hickory_server::proto::op::{Message, Query, ResponseCode};
    use hickory_server::proto::rr::{Name, RecordType};

    let dns = TestDns::start();
    if !dns.has_tcp() {
        eprintln!("skipped: the test server's port was not free for TCP");
        return;
    }
    dns.set_a("tcp.test", &[v4("192.0.2.53")], 60);

    let ask = |name: &str| -> Message {
        let mut query = Message::query();
        query.metadata.id = 7;
        query.add_query(Query::query(name.parse::<Name>().unwrap(), RecordType::A));
        let bytes = query.to_vec().unwrap();
        let mut stream = std::net::TcpStream::connect(dns.addr()).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        stream
            .write_all(&(bytes.len() as u16).to_be_bytes())
            .unwrap();
        stream.write_all(&bytes).unwrap();
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).unwrap();
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut reply).unwrap();
        Message::from_vec(&reply).unwrap()
    };

    let reply = ask("tcp.test.");
    assert_eq!(reply.metadata.id, 7);
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    let addrs: Vec<IpAddr> = reply
        .answers
        .iter()
        .filter_map(|r| r.data.ip_addr())
        .collect();
    assert_eq!(addrs, vec![ip("192.0.2.53")]);
    assert_eq!(dns.queries("tcp.test"), 1);

    let reply = ask("missing.test.");
    assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
    assert!(reply.answers.is_empty());
}

/// `guard check --json --dest DEST --rules RULES ARGS...`, parsed.
fn check_dest(rules: &std::path::Path, dest: &str, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(guard_tests::daemon::guard_bin())
        .args(["check", "--json", "--rules"])
        .arg(rules)
        .args(["--dest", dest])
        .args(args)
        .output()
        .expect("running guard check");
    assert!(
        out.status.success(),
        "guard check --dest {dest}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("guard check --json prints JSON")
}

#[test]
fn check_dest_gives_an_address_the_rules_of_the_hosts_it_resolves_for_as_the_kernel_does() {
    let dns = TestDns::start();
    dns.set_a("api.check.test", &[v4("127.55.0.1")], 60);
    dns.set_a("alias.check.test", &[v4("127.55.0.1")], 60);
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("d.rules");
    std::fs::write(
        &rules,
        "network_rule(host=\"api.check.test\", protocol=\"https\", decision=\"deny\")\n\
         network_rule(host=\"gone.check.test\", protocol=\"https\", decision=\"deny\")\n",
    )
    .unwrap();
    let server = dns.addr().to_string();

    // The address api.check.test was answered with is that rule's in the kernel's maps.
    let value = check_dest(&rules, "127.55.0.1:443", &["--nameserver", &server]);
    assert_eq!(value["decision"], "forbidden", "{value}");
    assert_eq!(value["resolved"], true, "{value}");
    assert_eq!(value["matched_rules"][0]["line"], 1, "{value}");
    // A name decides by its addresses too: another name for the same address.
    let value = check_dest(&rules, "alias.check.test:443", &["--nameserver", &server]);
    assert_eq!(value["decision"], "forbidden", "{value}");
    // A name that does not resolve holds no address, and is said so.
    let errors = value["resolve_errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e["host"] == "gone.check.test"),
        "{value}"
    );
    // Without resolution only rules written with an address would match: none here.
    let value = check_dest(&rules, "127.55.0.1:443", &["--no-resolve"]);
    assert_eq!(
        (value["decision"].as_str(), value["unmatched"].as_bool()),
        (Some("allow"), Some(true)),
        "{value}"
    );
}
