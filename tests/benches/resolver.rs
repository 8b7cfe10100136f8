//! guard's resolver in the path of a scope's DNS (`guard::resolve`), measured against a local
//! name server (`guard_tests::dns::TestDns`) whose answer to `api.bench.test` rotates (each
//! query gets 2 of 8 addresses, TTL 1–5 s), all in one run so the ratios share the machine's
//! noise:
//!
//! 1. **Resolve-then-connect cycles** of that allowed name (`dns-probe` in the scope, `CYCLES`
//!    rounds, a TCP connect to every address of each answer), two ways: *direct* (today's way
//!    without the resolver: the program asks the name server itself, guard resolves the name on
//!    its own and refreshes it as the TTL runs out) and *through guard's resolver* (the query is
//!    redirected). Reported: the connects refused of those made (must be 0 through the
//!    resolver).
//! 2. **Latency per query**, the median of `LATENCY_QUERIES` sequential A queries from outside
//!    the scope: to the name server directly (the baseline), through guard's resolver with a
//!    cache miss of a name no rule speaks of (forwarded, its answer recorded for attribution
//!    as it goes back), with a cache miss of a name a rule covers (`*.ruled.bench.test`: its
//!    addresses are put in the maps and confirmed by the session before the answer goes back),
//!    with a cache hit, and for a name the policy forbids (refused without asking upstream; its
//!    record names the process that asked). This session's policy allows what no rule names,
//!    so that names no rule speaks of are forwarded (under `deny` or `prompt` they would never
//!    leave the host). Reported as ratios to the direct median.
//! 3. **Queries per second** guard's resolver answers from its cache on its one thread, four
//!    clients asking as fast as they can for `QPS_SECS`, against the test server's own rate
//!    under the same load.
//! 4. **A cache hit with a book per scope**, as the daemon's resolver answers it: the cached
//!    answer is handed over again for the asker's scope (its socket found with sock_diag) and,
//!    for a name a rule covers, waited for; the owner here confirms at once, so this is the
//!    resolver's share. Against the same resolver with one book (`guard run`'s: a hit goes
//!    back at once), on the same runtime: medians of `LATENCY_QUERIES`.
//!
//! 5. **From a program in the scope**, as programs meet guard's resolver: `dns-probe` makes
//!    `PROGRAM_ROUNDS` rounds in one process and reports the median round, `PROGRAM_RUNS` runs
//!    of each kind, the kinds taking turns (each ratio is the median of its runs'). Its queries to
//!    127.0.0.153:53 are redirected to guard's resolver: a forwarded miss of a name no rule
//!    speaks of and of one a rule covers (each round a new name), and a cache hit, each ÷ the
//!    same probe outside the scope asking the name server directly; and `getaddrinfo` as glibc
//!    does it (A and AAAA, the name without AAAA) then a TCP connect, ÷ the same probe outside
//!    the scope connecting to the address (a numeric `getaddrinfo`, no DNS).
//! 6. **A NODATA answer asked again**: an AAAA query for a name with only an A record, whose
//!    negative answer carries no SOA, from outside the scope: the first (forwarded) and the
//!    median of the `LATENCY_QUERIES` after it (from guard's cache), and how many reached the
//!    name server.
//! 7. **The look through `/proc`** for the process that holds a socket, which a forwarded miss
//!    or a refusal of a redirected query waited for before the redirect recorded the process
//!    (it is still made, at most 50 times a second, for a query sent to the resolver's port
//!    itself): the median of `PROC_LOOKS`, with how many processes there were.
//!
//! Run with `cargo xtask bench -- resolver` or `cargo bench -p guard-tests --bench resolver`.
//! Needs root; otherwise it prints why and exits 0 (1 when `CI=true`). Results on stdout and in
//! `target/bench/resolver.json`.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use guard::policy::load::load_policy;
use guard::resolve::Refusal;
use guard::session::{Session, SessionOptions};
use guard_tests::dns::{TestDns, ask, ask_of, query};
use guard_tests::kernel::{helper, in_ci};
use hickory_server::proto::rr::RecordType;

const CYCLES: usize = 1_000;
const LATENCY_QUERIES: usize = 300;
const QPS_SECS: u64 = 3;
const QPS_CLIENTS: usize = 4;
const ASKED: &str = "127.0.0.153:53";

fn main() {
    if unsafe { libc::geteuid() } != 0 {
        println!("resolver benchmark skipped: it needs root (it loads BPF programs)");
        std::process::exit(if in_ci() { 1 } else { 0 });
    }
    let dns = TestDns::start();
    let pool: Vec<Ipv4Addr> = (1..=8).map(|i| Ipv4Addr::new(127, 0, 3, i)).collect();
    dns.set_a_rotating("api.bench.test", &pool, 2, 1..=5);
    let first = TcpListener::bind((pool[0], 0)).expect("a listener on 127.0.3.1");
    let port = first.local_addr().unwrap().port();
    // Accepted and dropped at once: thousands of connects must not fill a backlog.
    for listener in std::iter::once(first).chain(
        pool[1..]
            .iter()
            .map(|ip| TcpListener::bind((*ip, port)).expect("the same port on the pool")),
    ) {
        std::thread::spawn(move || {
            for connection in listener.incoming() {
                drop(connection);
            }
        });
    }

    let rules = format!(
        "enforcement(unmatched_network=\"deny\")\n\
         network_rule(host=\"api.bench.test\", protocol=\"socks5_tcp\", decision=\"allow\")\n\
         address_rule(addresses=[\"127.0.0.1\"], ports=[{}], transport=\"udp\", decision=\"allow\")\n\
         address_rule(addresses=[\"*.ruled.bench.test\"], transport=\"tcp\", decision=\"allow\")\n",
        dns.addr().port()
    );
    let dir = tempfile::tempdir().unwrap();
    let rules_file = dir.path().join("bench.rules");
    std::fs::write(&rules_file, &rules).unwrap();

    // 1. Resolve-then-connect cycles.
    let direct = cycles(&dns, &rules_file, None, &dns.addr().to_string(), port);
    let through = cycles(&dns, &rules_file, Some(Refusal::Refused), ASKED, port);

    // 2 and 3, from outside the scope, against the resolver of a session that is polled.
    let latency_rules = dir.path().join("latency.rules");
    std::fs::write(
        &latency_rules,
        // The pattern's lookups a second are not capped here (the default, 100, would refuse
        // most of the misses measured below).
        "enforcement(unmatched_network=\"allow\", dns_wildcard_lookups_per_second=1000000)\n\
         address_rule(addresses=[\"*.ruled.bench.test\"], transport=\"tcp\", decision=\"allow\")\n\
         network_rule(host=\"refused.bench.test\", protocol=\"https\", decision=\"deny\")\n",
    )
    .unwrap();
    let policy = load_policy(std::slice::from_ref(&latency_rules), &[])
        .unwrap()
        .policy;
    let mut session = Session::start(
        policy,
        &SessionOptions {
            nameserver: Some(dns.addr()),
            resolver: Some(Refusal::Refused),
            ..SessionOptions::default()
        },
    )
    .expect("starting a session");
    let resolver: SocketAddr = (Ipv4Addr::LOCALHOST, session.resolver_port().unwrap()).into();
    for i in 0..2 * LATENCY_QUERIES {
        dns.set_a(
            &format!("n{i}.bench.test"),
            &[Ipv4Addr::new(127, 0, 4, 1)],
            300,
        );
    }
    for i in 0..LATENCY_QUERIES {
        // One address each, all different: every answer changes the maps.
        dns.set_a(
            &format!("r{i}.ruled.bench.test"),
            &[Ipv4Addr::new(
                127,
                0,
                5 + (i / 250) as u8,
                (i % 250) as u8 + 1,
            )],
            300,
        );
    }
    dns.set_a("hit.bench.test", &[Ipv4Addr::new(127, 0, 4, 2)], 300);
    dns.set_a(NODATA, &[Ipv4Addr::new(127, 0, 4, 4)], 300);
    dns.set_negative_without_soa(NODATA);
    let stop = Arc::new(AtomicBool::new(false));
    let measured = {
        let stop = stop.clone();
        let upstream = dns.addr();
        std::thread::spawn(move || {
            let direct: Vec<Duration> = (0..LATENCY_QUERIES)
                .map(|i| ask(upstream, &format!("n{i}.bench.test")))
                .collect();
            let miss: Vec<Duration> = (LATENCY_QUERIES..2 * LATENCY_QUERIES)
                .map(|i| ask(resolver, &format!("n{i}.bench.test")))
                .collect();
            let ruled_miss: Vec<Duration> = (0..LATENCY_QUERIES)
                .map(|i| ask(resolver, &format!("r{i}.ruled.bench.test")))
                .collect();
            ask(resolver, "hit.bench.test");
            let hit: Vec<Duration> = (0..LATENCY_QUERIES)
                .map(|_| ask(resolver, "hit.bench.test"))
                .collect();
            let refused: Vec<Duration> = (0..LATENCY_QUERIES)
                .map(|_| ask(resolver, "refused.bench.test"))
                .collect();
            let nodata_first = ask_of(resolver, NODATA, RecordType::AAAA);
            let nodata_later: Vec<Duration> = (0..LATENCY_QUERIES)
                .map(|_| ask_of(resolver, NODATA, RecordType::AAAA))
                .collect();
            let direct_qps = qps(upstream, "hit.bench.test");
            let resolver_qps = qps(resolver, "hit.bench.test");
            stop.store(true, Ordering::SeqCst);
            (
                median(direct),
                median(miss),
                median(ruled_miss),
                median(hit),
                median(refused),
                direct_qps,
                resolver_qps,
                (nodata_first, median(nodata_later)),
            )
        })
    };
    while !stop.load(Ordering::SeqCst) {
        session.poll_events(Duration::from_millis(10));
    }
    let (direct_latency, miss, ruled_miss, hit, refused, direct_qps, resolver_qps, nodata) =
        measured.join().unwrap();
    let nodata_upstream = dns.queries_of(NODATA, RecordType::AAAA);
    // Every miss measured left the host (none was refused, say by a cap).
    let forwarded = |name: &dyn Fn(usize) -> String| -> usize {
        (0..LATENCY_QUERIES).map(|i| dns.queries(&name(i))).sum()
    };
    let misses = (
        forwarded(&|i| format!("n{}.bench.test", LATENCY_QUERIES + i)),
        forwarded(&|i| format!("r{i}.ruled.bench.test")),
    );
    assert_eq!(
        misses,
        (LATENCY_QUERIES, LATENCY_QUERIES),
        "misses that reached the name server (no rule, ruled)"
    );
    let program = program_rounds(&dns, &mut session);
    drop(session);
    let (proc_look, processes) = proc_look();
    let (one_book_hit, one_book_ruled_hit) = cache_hits(dns.addr(), &latency_rules, false);
    let (scoped_hit, scoped_ruled_hit) = cache_hits(dns.addr(), &latency_rules, true);

    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!("## guard's resolver (api.bench.test: 2 of 8 addresses per answer, TTL 1-5 s)\n");
    println!(
        "| resolve-then-connect, {CYCLES} cycles | connects | refused | refused ratio | upstream queries |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for (label, c) in [
        ("direct (no resolver)", &direct),
        ("through guard's resolver", &through),
    ] {
        println!(
            "| {label} | {} | {} | {:.3} | {} |",
            c.connects,
            c.refused,
            c.refused as f64 / c.connects.max(1) as f64,
            c.upstream_queries
        );
    }
    println!("\n| per query (median of {LATENCY_QUERIES}) | latency | ratio to direct |");
    println!("| --- | --- | --- |");
    println!(
        "| direct to the name server | {:?} | x1.00 |",
        direct_latency
    );
    println!(
        "| guard's resolver, cache miss (a name no rule speaks of) | {:?} | x{:.2} |",
        miss,
        ratio(miss, direct_latency)
    );
    println!(
        "| guard's resolver, cache miss (a name a rule covers: maps updated first) | {:?} | x{:.2} |",
        ruled_miss,
        ratio(ruled_miss, direct_latency)
    );
    println!(
        "| guard's resolver, cache hit | {:?} | x{:.2} |",
        hit,
        ratio(hit, direct_latency)
    );
    println!(
        "| guard's resolver, a forbidden name (refused, the process looked up) | {:?} | x{:.2} |",
        refused,
        ratio(refused, direct_latency)
    );
    println!(
        "\n| cache hit, resolver on its own runtime (median of {LATENCY_QUERIES}) | one book | a book per scope | ratio |"
    );
    println!("| --- | --- | --- | --- |");
    println!(
        "| a name no rule speaks of (handed over, not waited for) | {one_book_hit:?} | {scoped_hit:?} | x{:.2} |",
        ratio(scoped_hit, one_book_hit)
    );
    println!(
        "| a name a rule covers (handed over and confirmed) | {one_book_ruled_hit:?} | {scoped_ruled_hit:?} | x{:.2} |",
        ratio(scoped_ruled_hit, one_book_ruled_hit)
    );
    println!(
        "\n| from a program ({PROGRAM_RUNS} runs of {PROGRAM_ROUNDS} rounds, the kinds in turn; medians) | outside the scope | in the scope | ratio (median of the runs') | goal |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for (label, outside, (inside, run_ratio), goal) in [
        (
            "forwarded miss, a name no rule speaks of ÷ the name server directly",
            program.direct,
            program.miss,
            "≤ x2",
        ),
        (
            "forwarded miss, a name a rule covers ÷ the name server directly",
            program.direct,
            program.ruled_miss,
            "≤ x2",
        ),
        (
            "cache hit ÷ the name server directly",
            program.direct,
            program.hit,
            "≤ x1",
        ),
        (
            "getaddrinfo (A + AAAA, no AAAA) + connect by name ÷ connect to the address",
            program.connect,
            program.by_name,
            "≤ x4",
        ),
        (
            "the same, a new name each round (A and AAAA forwarded) ÷ connect to the address",
            program.connect,
            program.by_new_name,
            "",
        ),
    ] {
        println!("| {label} | {outside:?} | {inside:?} | x{run_ratio:.2} | {goal} |");
    }
    println!(
        "\n| AAAA of a name without AAAA (NODATA, no SOA), from outside the scope | latency | ratio to the first | queries upstream |"
    );
    println!("| --- | --- | --- | --- |");
    println!("| the first (forwarded) | {:?} | x1.00 | |", nodata.0);
    println!(
        "| the next {LATENCY_QUERIES}, median (guard's cache) | {:?} | x{:.2} | {nodata_upstream} in all |",
        nodata.1,
        ratio(nodata.1, nodata.0)
    );
    println!(
        "\n| the look through /proc/*/fd for a socket's holder ({processes} processes), median of {PROC_LOOKS} | {proc_look:?} |"
    );
    println!("| --- | --- |");
    println!("\n| queries per second ({QPS_CLIENTS} clients, {QPS_SECS} s) | answered/s | ratio |");
    println!("| --- | --- | --- |");
    println!("| the test name server (hickory-server) | {direct_qps:.0} | x1.00 |");
    println!(
        "| guard's resolver from its cache, one thread | {resolver_qps:.0} | x{:.2} |",
        resolver_qps / direct_qps
    );
    let json = serde_json::json!({
        "cycles": CYCLES,
        "direct": {"connects": direct.connects, "refused": direct.refused, "upstream_queries": direct.upstream_queries},
        "through_resolver": {"connects": through.connects, "refused": through.refused, "upstream_queries": through.upstream_queries},
        "latency_ns": {"direct": direct_latency.as_nanos() as u64, "miss": miss.as_nanos() as u64, "ruled_miss": ruled_miss.as_nanos() as u64, "hit": hit.as_nanos() as u64, "refused": refused.as_nanos() as u64, "one_book_hit": one_book_hit.as_nanos() as u64, "one_book_ruled_hit": one_book_ruled_hit.as_nanos() as u64, "scoped_hit": scoped_hit.as_nanos() as u64, "scoped_ruled_hit": scoped_ruled_hit.as_nanos() as u64},
        "miss_ratio": ratio(miss, direct_latency),
        "ruled_miss_ratio": ratio(ruled_miss, direct_latency),
        "hit_ratio": ratio(hit, direct_latency),
        "scoped_hit_ratio": ratio(scoped_hit, one_book_hit),
        "scoped_ruled_hit_ratio": ratio(scoped_ruled_hit, one_book_ruled_hit),
        "refused_ratio": ratio(refused, direct_latency),
        "qps": {"direct": direct_qps, "resolver": resolver_qps},
        "program_ns": {"direct": program.direct.as_nanos() as u64, "miss": program.miss.0.as_nanos() as u64, "ruled_miss": program.ruled_miss.0.as_nanos() as u64, "hit": program.hit.0.as_nanos() as u64, "connect": program.connect.as_nanos() as u64, "by_name": program.by_name.0.as_nanos() as u64},
        "program_miss_ratio": program.miss.1,
        "program_ruled_miss_ratio": program.ruled_miss.1,
        "program_hit_ratio": program.hit.1,
        "by_name_connect_ratio": program.by_name.1,
        "by_new_name_connect_ratio": program.by_new_name.1,
        "proc_look_ns": proc_look.as_nanos() as u64,
        "nodata_ns": {"first": nodata.0.as_nanos() as u64, "later": nodata.1.as_nanos() as u64},
        "nodata_later_ratio": ratio(nodata.1, nodata.0),
        "nodata_upstream_queries": nodata_upstream,
    });
    let out = bench_dir().join("resolver.json");
    std::fs::create_dir_all(out.parent().unwrap()).ok();
    std::fs::write(&out, format!("{json}\n")).ok();
    if through.refused != 0 {
        eprintln!(
            "FAILED: {} connects were refused through guard's resolver",
            through.refused
        );
        std::process::exit(1);
    }
}

/// Part 4: cache hits of a resolver whose owner keeps one book or (`per_scope`) a book per
/// scope, the owner confirming each answer at once. Returns the medians for a name no rule
/// speaks of and one a rule covers.
fn cache_hits(
    upstream: SocketAddr,
    rules: &std::path::Path,
    per_scope: bool,
) -> (Duration, Duration) {
    use guard::resolve::{EventSink, NamePolicy, Resolver, ResolverConfig, ResolverEvent};
    let policy = load_policy(&[rules.to_path_buf()], &[]).unwrap().policy;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (events, mut taken) = tokio::sync::mpsc::unbounded_channel();
        let names = Arc::new(std::sync::RwLock::new(NamePolicy::from_policy(&policy)));
        let config = ResolverConfig {
            upstream,
            refusal: Refusal::Refused,
            per_scope,
            origins: None,
        };
        let resolver = Resolver::start(config, names, EventSink::Tokio(events))
            .await
            .expect("starting a resolver");
        tokio::spawn(async move {
            while let Some(event) = taken.recv().await {
                if let ResolverEvent::Answered(_, done) = event {
                    let _ = done.send(());
                }
            }
        });
        let at: SocketAddr = (Ipv4Addr::LOCALHOST, resolver.port()).into();
        let medians = tokio::task::spawn_blocking(move || {
            let hits = |name: &str| {
                ask(at, name);
                median((0..LATENCY_QUERIES).map(|_| ask(at, name)).collect())
            };
            (hits("hit.bench.test"), hits("r0.ruled.bench.test"))
        })
        .await
        .unwrap();
        drop(resolver);
        medians
    })
}

/// Part 5: the median round of each kind of `dns-probe` run, and each in-scope kind's ratio to
/// its baseline (the median of the ratios of runs made one after the other, so each pair
/// shares the machine's noise of the moment).
struct ProgramRounds {
    /// Outside the scope, asking the name server directly (a new name each round).
    direct: Duration,
    /// In the scope: forwarded misses, of a name no rule speaks of and of one a rule covers,
    /// and a cache hit; each ÷ `direct`.
    miss: (Duration, f64),
    ruled_miss: (Duration, f64),
    hit: (Duration, f64),
    /// Outside the scope: a connect to the address (numeric `getaddrinfo`).
    connect: Duration,
    /// In the scope: `getaddrinfo` of the name, then the connect; ÷ `connect`.
    by_name: (Duration, f64),
    /// The same with a new name each round: A and AAAA forwarded, then the connect.
    by_new_name: (Duration, f64),
}

/// Part 5's runs of each kind, and the rounds of each run.
const PROGRAM_RUNS: usize = 9;
const PROGRAM_ROUNDS: usize = 40;

/// The name part 6 asks AAAA of: an A record only, negative answers without an SOA.
const NODATA: &str = "v4only.bench.test";

/// Part 5: `dns-probe` runs outside `session`'s scope and in it (polled meanwhile), the kinds
/// taking turns.
fn program_rounds(dns: &TestDns, session: &mut Session) -> ProgramRounds {
    let listening = Ipv4Addr::new(127, 0, 4, 3);
    for run in 0..PROGRAM_RUNS {
        for i in 0..PROGRAM_ROUNDS {
            let address = Ipv4Addr::new(127, 0, 4, 1);
            dns.set_a(&format!("d{run}x{i}.bench.test"), &[address], 300);
            dns.set_a(&format!("m{run}x{i}.bench.test"), &[address], 300);
            // A new address each: every answer changes the maps.
            let n = run * PROGRAM_ROUNDS + i;
            let ruled = Ipv4Addr::new(127, 0, 8 + (n / 250) as u8, (n % 250) as u8 + 1);
            dns.set_a(&format!("q{run}x{i}.ruled.bench.test"), &[ruled], 300);
            dns.set_a(&format!("g{run}x{i}.ruled.bench.test"), &[listening], 300);
        }
    }
    dns.set_a("gai.ruled.bench.test", &[listening], 300);
    let listener = TcpListener::bind((listening, 0)).expect("a listener on 127.0.4.3");
    let port = listener.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for connection in listener.incoming() {
            drop(connection);
        }
    });
    let n = PROGRAM_ROUNDS.to_string();
    let server = dns.addr().to_string();
    let outside = |args: &[&str]| {
        let out = Command::new(helper("dns-probe", env!("CARGO_BIN_EXE_dns-probe")))
            .args(args)
            .output()
            .expect("running dns-probe");
        round_of(&String::from_utf8_lossy(&out.stdout), PROGRAM_ROUNDS)
    };
    // [direct, miss, ruled miss, hit, connect, by name, by a new name] of each run.
    let mut runs: Vec<[Duration; 7]> = Vec::new();
    for run in 0..PROGRAM_RUNS {
        let direct = outside(&[&server, &format!("d{run}x{{}}.bench.test"), "udp", &n]);
        let mut inside = |args: &[&str]| probe_in_scope(session, args, PROGRAM_ROUNDS);
        let miss = inside(&[ASKED, &format!("m{run}x{{}}.bench.test"), "udp", &n]);
        let ruled = inside(&[ASKED, &format!("q{run}x{{}}.ruled.bench.test"), "udp", &n]);
        let hit = inside(&[ASKED, "hit.bench.test", "udp", &n]);
        let connect = outside(&[ASKED, "127.0.4.3", "getaddrinfo", &n, &port]);
        let by_name = probe_in_scope(
            session,
            &[ASKED, "gai.ruled.bench.test", "getaddrinfo", &n, &port],
            PROGRAM_ROUNDS,
        );
        let by_new_name = probe_in_scope(
            session,
            &[
                ASKED,
                &format!("g{run}x{{}}.ruled.bench.test"),
                "getaddrinfo",
                &n,
                &port,
            ],
            PROGRAM_ROUNDS,
        );
        runs.push([direct, miss, ruled, hit, connect, by_name, by_new_name]);
    }
    let kind = |k: usize| median(runs.iter().map(|r| r[k]).collect());
    let over = |k: usize, base: usize| {
        let mut ratios: Vec<f64> = runs
            .iter()
            .map(|r| r[k].as_secs_f64() / r[base].as_secs_f64())
            .collect();
        ratios.sort_by(f64::total_cmp);
        (kind(k), ratios[ratios.len() / 2])
    };
    ProgramRounds {
        direct: kind(0),
        miss: over(1, 0),
        ruled_miss: over(2, 0),
        hit: over(3, 0),
        connect: kind(4),
        by_name: over(5, 4),
        by_new_name: over(6, 4),
    }
}

/// The looks part 7 times (within `peer::LOOKS_PER_SECOND`, so each is made).
const PROC_LOOKS: usize = 11;

/// Part 7: what a look through `/proc` for the holder of a socket costs here (what each
/// forwarded miss or refusal of a query the kernel redirected waited for before the redirect
/// recorded the process), and how many processes it looked through.
fn proc_look() -> (Duration, usize) {
    use guard::resolve::peer::{QuerySocket, process_of};
    let resolver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let program = UdpSocket::bind("127.0.0.1:0").unwrap();
    let query = QuerySocket {
        program: program.local_addr().unwrap(),
        resolver: resolver.local_addr().unwrap(),
        tcp: false,
    };
    std::thread::sleep(Duration::from_secs(1));
    let looks = (0..PROC_LOOKS)
        .map(|_| {
            let started = Instant::now();
            let found = process_of(query);
            assert_eq!(found.and_then(|p| p.pid), Some(std::process::id()));
            started.elapsed()
        })
        .collect();
    let processes = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .count()
        })
        .unwrap_or(0);
    (median(looks), processes)
}

/// `dns-probe ARGS` in `session`'s scope, the session polled meanwhile as `guard run` does:
/// its median round.
fn probe_in_scope(session: &mut Session, args: &[&str], rounds: usize) -> Duration {
    let mut command = Command::new(helper("dns-probe", env!("CARGO_BIN_EXE_dns-probe")));
    command.args(args).stdout(Stdio::piped());
    let mut child = session.spawn(&mut command).expect("starting dns-probe");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "dns-probe did not finish");
        session.poll_events(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    round_of(&String::from_utf8_lossy(&out.stdout), rounds)
}

/// The median round of `dns-probe`'s JSON line, which must have answered every round and
/// made every connect.
fn round_of(stdout: &str, rounds: usize) -> Duration {
    let line = stdout.lines().last().unwrap_or_default();
    let value: serde_json::Value = serde_json::from_str(line).expect(line);
    assert_eq!(value["answers"].as_u64(), Some(rounds as u64), "{line}");
    assert_eq!(value["refused"].as_u64(), Some(0), "{line}");
    assert_eq!(value["other_errors"].as_u64(), Some(0), "{line}");
    Duration::from_nanos(value["round_ns"].as_u64().expect(line))
}

struct Cycles {
    connects: u64,
    refused: u64,
    upstream_queries: usize,
}

/// `CYCLES` resolve-then-connect rounds of `dns-probe` in a fresh session's scope, asking
/// `server`; the session is polled (and its own DNS refreshed) meanwhile, as `guard run` does.
fn cycles(
    dns: &TestDns,
    rules: &std::path::Path,
    resolver: Option<Refusal>,
    server: &str,
    port: u16,
) -> Cycles {
    let before = dns.queries("api.bench.test");
    let policy = load_policy(&[rules.to_path_buf()], &[]).unwrap().policy;
    let mut session = Session::start(
        policy,
        &SessionOptions {
            nameserver: Some(dns.addr()),
            resolver,
            ..SessionOptions::default()
        },
    )
    .expect("starting a session");
    let mut command = Command::new(helper("dns-probe", env!("CARGO_BIN_EXE_dns-probe")));
    command
        .args([
            server,
            "api.bench.test",
            "udp",
            &CYCLES.to_string(),
            &port.to_string(),
        ])
        .stdout(Stdio::piped());
    let mut child = session.spawn(&mut command).expect("starting dns-probe");
    let deadline = Instant::now() + Duration::from_secs(600);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "dns-probe did not finish");
        session.poll_events(Duration::from_millis(5));
        if session
            .next_dns_refresh()
            .is_some_and(|due| due <= Instant::now())
        {
            session.refresh_dns().expect("refreshing guard's own DNS");
        }
    }
    let out = child.wait_with_output().unwrap();
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let value: serde_json::Value = serde_json::from_str(&line).expect(&line);
    let connected = value["connected"].as_u64().unwrap();
    let refused = value["refused"].as_u64().unwrap();
    assert_eq!(value["answers"].as_u64(), Some(CYCLES as u64), "{line}");
    Cycles {
        connects: connected + refused + value["other_errors"].as_u64().unwrap(),
        refused,
        upstream_queries: dns.queries("api.bench.test") - before,
    }
}

/// Answers a second, `QPS_CLIENTS` clients each asking for `name` one query at a time.
fn qps(server: SocketAddr, name: &str) -> f64 {
    let answered = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs(QPS_SECS);
    let clients: Vec<_> = (0..QPS_CLIENTS)
        .map(|c| {
            let answered = answered.clone();
            let bytes = query(name, c as u16);
            std::thread::spawn(move || {
                let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
                socket
                    .set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                socket.connect(server).unwrap();
                let mut buffer = [0u8; 1500];
                while Instant::now() < end {
                    socket.send(&bytes).unwrap();
                    if socket.recv(&mut buffer).is_ok() {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    answered.load(Ordering::Relaxed) as f64 / QPS_SECS as f64
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// `target/bench`: from `CARGO_TARGET_DIR`, else three levels above this binary
/// (`target/release/deps/resolver-*`).
fn bench_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return std::path::PathBuf::from(dir).join("bench");
    }
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .nth(3)
        .map(|p| p.join("bench"))
        .unwrap_or_else(|| std::path::PathBuf::from("target/bench"))
}
