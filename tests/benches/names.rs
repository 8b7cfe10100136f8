//! Names at real policy sizes: a policy of `SMALL` and of `LARGE` `network_rule` hosts, in one
//! run so the ratios share the machine's noise, against a local name server
//! (`guard_tests::dns::TestDns`, loopback only):
//!
//! 1. **Session start** (`Session::start` of the parsed policy with guard's resolver in the
//!    path: compile, load, fill the maps, make the scope) and the policy names it asked the
//!    name server for (0: they are put in force as the scope asks for them).
//! 2. **A ruled lookup**: the median of `LOOKUPS` A queries through guard's resolver for names
//!    the policy allows, spread over the policy, each answered with a new address and TTL 0
//!    (never from a cache: every answer changes the maps before it is confirmed).
//! 3. **Peak RSS** of the process that parsed the policy, started the session and made the
//!    lookups (`VmHWM`): each size runs in a child process of its own.
//! 4. **Session start without guard's resolver** at `LARGE`: the policy's names are then
//!    resolved before the command starts (they are unknown to the server: NXDOMAIN), at most
//!    `resolve::lookup::LOOKUPS_IN_FLIGHT` at a time.
//! 5. **The daemon**: its start, the median of `RELOADS` reloads and its peak RSS, at both
//!    sizes.
//!
//! Run with `cargo xtask bench -- names` (it builds the release `guard` first) or
//! `cargo build --release -p guard-user --bin guard && cargo bench -p guard-tests --bench names`.
//! Needs root; otherwise it prints why and exits 0 (1 when `CI=true`). Results on stdout and in
//! `target/bench/names.json`; exits 1 when a session start asked the name server for a policy
//! name through the resolver's path.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use guard::policy::load::load_policy;
use guard::resolve::Refusal;
use guard::session::{Session, SessionOptions};
use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
use guard_tests::dns::{TestDns, ask};
use serde_json::{Value, json};

const SMALL: usize = 10;
const LARGE: usize = 100_000;
const LOOKUPS: usize = 300;
const RELOADS: usize = 5;
/// Set in a child: `SIZE MODE RULES` (MODE `resolver` or `no-resolver`).
const CHILD: &str = "GUARD_NAMES_BENCH_CHILD";

fn host(i: usize) -> String {
    format!("h{i}.names.bench.test")
}

/// `count` hosts, allowed over https, under a policy that refuses what no rule names.
fn rules(count: usize) -> String {
    let mut text = String::from("enforcement(unmatched_network=\"deny\")\n");
    for i in 0..count {
        text.push_str(&format!(
            "network_rule(host=\"{}\", protocol=\"https\", decision=\"allow\")\n",
            host(i)
        ));
    }
    text
}

/// The names the lookups ask for: ten spread over the policy (the same ten at `SMALL`).
fn asked(count: usize) -> Vec<String> {
    (0..10).map(|j| host(j * count / 10)).collect()
}

/// Query `q`'s answer: a new loopback address each time.
fn address(q: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 6 + (q / 250) as u8, (q % 250) as u8 + 1)
}

fn main() {
    if let Ok(args) = std::env::var(CHILD) {
        child(&args);
        return;
    }
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut results = serde_json::Map::new();
    for (count, mode) in [
        (SMALL, "resolver"),
        (LARGE, "resolver"),
        (LARGE, "no-resolver"),
    ] {
        let file = dir.path().join(format!("names-{count}.rules"));
        if !file.exists() {
            std::fs::write(&file, rules(count)).unwrap();
        }
        let out = Command::new(std::env::current_exe().unwrap())
            .env(CHILD, format!("{count} {mode} {}", file.display()))
            .output()
            .expect("running the benchmark's child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        let value: Value = serde_json::from_str(line).unwrap_or_else(|err| {
            panic!(
                "{err}: the child ({count}, {mode}) said {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        results.insert(format!("{mode}_{count}"), value);
    }
    let daemon = daemon_figures(&TestDns::start());
    let session = |key: &str| results[key].clone();
    let (small, large, direct) = (
        session(&format!("resolver_{SMALL}")),
        session(&format!("resolver_{LARGE}")),
        session(&format!("no-resolver_{LARGE}")),
    );
    let f = |v: &Value, key: &str| v[key].as_f64().unwrap_or(f64::NAN);
    println!("## Names at policy size ({SMALL} and {LARGE} network_rule hosts)\n");
    println!("| | {SMALL} hosts | {LARGE} hosts | ratio | goal |");
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| session start, guard's resolver in the path | {:.3} s | {:.3} s | ×{:.2} | ≤ ×4 |",
        f(&small, "start_s"),
        f(&large, "start_s"),
        f(&large, "start_s") / f(&small, "start_s")
    );
    println!(
        "| policy names asked upstream during the start | {} | {} | | 0 |",
        small["start_policy_queries"], large["start_policy_queries"]
    );
    println!(
        "| ruled lookup through guard's resolver, median of {LOOKUPS} (maps updated) | {:.1} µs | {:.1} µs | ×{:.2} | ≤ ×1.5 |",
        f(&small, "lookup_us"),
        f(&large, "lookup_us"),
        f(&large, "lookup_us") / f(&small, "lookup_us")
    );
    println!(
        "| peak RSS (parse + start + lookups) | {:.1} MiB | {:.1} MiB | ×{:.2} | ≤ 300 MiB |",
        f(&small, "peak_rss_mib"),
        f(&large, "peak_rss_mib"),
        f(&large, "peak_rss_mib") / f(&small, "peak_rss_mib")
    );
    println!(
        "| session start without guard's resolver (names resolved first) | | {:.3} s ({} queries for the names, peak RSS {:.1} MiB) | | |",
        f(&direct, "start_s"),
        direct["start_policy_queries"],
        f(&direct, "peak_rss_mib"),
    );
    for (label, key, unit, goal) in [
        ("daemon start", "start_s", "s", ""),
        ("daemon reload", "reload_s", "s", "≤ 1 s at 100 000"),
        ("daemon peak RSS", "peak_rss_mib", "MiB", ""),
    ] {
        let (a, b) = (f(&daemon[0], key), f(&daemon[1], key));
        println!(
            "| {label} | {a:.3} {unit} | {b:.3} {unit} | ×{:.2} | {goal} |",
            b / a
        );
    }
    let json = json!({"sessions": results, "daemon": daemon});
    let out = bench_dir().join("names.json");
    std::fs::create_dir_all(out.parent().unwrap()).ok();
    std::fs::write(&out, format!("{json}\n")).ok();
    let asked_at_start = [&small, &large]
        .iter()
        .map(|v| v["start_policy_queries"].as_u64().unwrap_or(u64::MAX))
        .sum::<u64>();
    if asked_at_start != 0 {
        eprintln!("FAILED: a session start with guard's resolver asked for policy names");
        std::process::exit(1);
    }
}

/// One size in a process of its own, with a name server of its own: parse, start the
/// session, ask, report on stdout.
fn child(args: &str) {
    let [count, mode, rules] = args.split(' ').collect::<Vec<_>>()[..] else {
        panic!("{CHILD}={args:?}");
    };
    let count: usize = count.parse().unwrap();
    let server = Arc::new(TestDns::start());
    let dns = server.addr();
    let policy = load_policy(&[rules.into()], &[]).unwrap().policy;
    let started = Instant::now();
    let mut session = Session::start(
        policy,
        &SessionOptions {
            nameserver: Some(dns),
            resolver: (mode == "resolver").then_some(Refusal::Refused),
            ..SessionOptions::default()
        },
    )
    .expect("starting a session");
    let start = started.elapsed();
    // Before any lookup: what the start asked the name server for.
    let start_queries: usize = (0..count).map(|i| server.queries(&host(i))).sum();
    let mut lookup = None;
    if let Some(port) = session.resolver_port() {
        let resolver: SocketAddr = (Ipv4Addr::LOCALHOST, port).into();
        let names = asked(count);
        let stop = Arc::new(AtomicBool::new(false));
        let asking = {
            let stop = stop.clone();
            let server = server.clone();
            std::thread::spawn(move || {
                let samples: Vec<Duration> = (0..LOOKUPS)
                    .map(|q| {
                        let name = &names[q % names.len()];
                        // TTL 0: never answered from a cache, and a new address each time.
                        server.set_a(name, &[address(q)], 0);
                        ask(resolver, name)
                    })
                    .collect();
                stop.store(true, Ordering::SeqCst);
                samples
            })
        };
        while !stop.load(Ordering::SeqCst) {
            session.poll_events(Duration::from_millis(10));
        }
        let mut samples = asking.join().unwrap();
        samples.sort();
        lookup = Some(samples[samples.len() / 2]);
    }
    let peak = peak_rss_mib(std::process::id());
    drop(session);
    println!(
        "{}",
        json!({
            "hosts": count,
            "start_s": start.as_secs_f64(),
            "lookup_us": lookup.map(|d| d.as_secs_f64() * 1e6),
            "start_policy_queries": start_queries,
            "peak_rss_mib": peak,
        })
    );
}

/// `VmHWM` of process `pid`, in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// The daemon at both sizes: start, reloads, peak RSS.
fn daemon_figures(dns: &TestDns) -> Vec<Value> {
    let reload = r#"{"v":1,"op":"reload"}"#;
    [SMALL, LARGE]
        .iter()
        .map(|count| {
            let started = Instant::now();
            let daemon = TestDaemon::start(&DaemonSetup {
                rules: rules(*count),
                nameserver: Some(dns.addr()),
                ..Default::default()
            });
            let start = started.elapsed();
            let mut reloads: Vec<Duration> = (0..RELOADS)
                .map(|_| request(&daemon.socket, reload))
                .collect();
            reloads.sort();
            json!({
                "hosts": count,
                "start_s": start.as_secs_f64(),
                "reload_s": reloads[reloads.len() / 2].as_secs_f64(),
                "peak_rss_mib": peak_rss_mib(daemon.pid()),
            })
        })
        .collect()
}

/// One request line's round trip over the control socket.
fn request(socket: &Path, line: &str) -> Duration {
    let started = Instant::now();
    let mut stream = UnixStream::connect(socket).expect("connecting to the daemon");
    stream.write_all(line.as_bytes()).unwrap();
    stream.write_all(b"\n").unwrap();
    let mut response = String::new();
    BufReader::new(&stream).read_line(&mut response).unwrap();
    let took = started.elapsed();
    assert!(
        response.contains("\"ok\":true"),
        "{line} failed: {response}"
    );
    took
}

/// `target/bench`: from `CARGO_TARGET_DIR`, else three levels above this binary.
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
