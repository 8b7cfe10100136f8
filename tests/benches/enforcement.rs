//! What the kernel enforcement costs the processes it guards: fork+exec+wait of `/bin/true`, a
//! loopback TCP connect, and an unrelated syscall (`getppid`), unguarded against guarded with
//! 10, 1 000 and 100 000 rules loaded.
//!
//! Run with `cargo xtask bench` (after the policy benchmarks; `cargo xtask bench -- enforcement`
//! runs only this one) or `cargo bench -p guard-tests --bench enforcement`. Options after `--`:
//! `--quick` (3 rounds, a third of the operations), `--rounds N`, and `--exec-arg-bytes N` (the
//! measured exec also gets arguments of 200 bytes, N bytes in all). Needs root and a kernel
//! that loads guard's programs; otherwise it prints why and exits 0 (1 when `CI=true`).
//!
//! # Method
//!
//! The operations run in a *worker*: this binary again, started once with [`WORKER_ARG`], small
//! and the same size all along (fork cost grows with the forking process's memory, and the
//! benchmark itself holds the parsed policies). The worker moves itself into a session's scope
//! cgroup by writing to its `cgroup.procs`, and back into its original cgroup (the `0::` line of
//! `/proc/self/cgroup` under the cgroup2 mount) when done.
//!
//! For each policy size, [`ROUNDS`] rounds. The three operations are measured
//!
//! - *unguarded*: no guard loaded, the worker in its original cgroup, before the first round and
//!   after each one (so each round sits between two unguarded measurements, and drift hits both
//!   sides);
//! - *guarded*: in a fresh [`Session`] (its start timed: compile + load + fill maps + scope
//!   cgroup), the worker inside its scope;
//! - *outside*: the same session loaded, the worker back in its original cgroup: what every
//!   other process on the machine pays while guard runs (the exec tracepoint is global).
//!
//! Within a session, guarded and outside alternate [`ALTERNATIONS`] times per operation (`K /
//! ALTERNATIONS` operations each, the order flipping), so their ratio is the finest-grained
//! measure of what the decision itself costs. Then the session is dropped (after a session
//! starts and after it is dropped, [`SETTLE`] passes before anything is timed). Each measurement
//! times `K` operations back to back and keeps the mean per operation, in elapsed time and in
//! CPU time (the worker thread's plus its exited children's; on a loaded machine it leaves out
//! the time spent waiting for a CPU). The report is the median over rounds, and the ratio of
//! the medians of the same size's rounds. The session's counters are checked after each round:
//! every exec and connect measured in the scope was decided, and allowed, in the kernel.
//!
//! Timings on a shared machine carry its noise; what the programs themselves cost does not. So
//! each round also runs `K / ALTERNATIONS` execs and connects in the scope with the kernel's BPF
//! run-time statistics on (`BPF_ENABLE_STATS`, for that block only; its timings are not kept)
//! and reports the exec tracepoint's and the connect4 hook's time per operation, as a share of
//! the unguarded operation. (The tracepoint's time counts every exec on the machine in that
//! block against the worker's: an upper bound.)
//!
//! # The generated policies
//!
//! `N` rules, every map populated and no rule matching what is measured (so every measured
//! operation is allowed and completes, after full lookups):
//!
//! - half `address_rule`s, `deny`: `10.a.b.c/32` over TCP on one or two ports, some on any
//!   port, some `transport="any"`; every 100th a `192.168.x.0/24`, every 1000th an IPv6 `/128`;
//!   plus three on the worker listener's own port (`127.0.0.2/32`, `127.0.1.0/24`,
//!   `10.0.0.0/8`) so the connect's lookup in its exact (transport, port) class walks deep;
//! - one in ten a one-token `forbidden` rule for a program that does not exist (name entries);
//! - a few one-token `allow` rules for programs that exist (`ls`, `cat`, `env`, `sh`: identity
//!   entries);
//! - one in twenty `["true", "x<i>"]` `forbidden` (the exec walks the argv trie from its own
//!   name; the measured exec is `true bench`, whose second token matches no edge);
//! - the rest `["prog<i>", "sub<i>"]` (every third with a third token) `forbidden`;
//! - in the "+ patterns" case, also [`PATTERNS`] exec globs `*guard-bench-glob-<i>*` (deny) in
//!   one rule set and a legacy policy of [`PATTERNS`] forbidden substrings and program regexes:
//!   every measured exec walks its whole name and argv through all three pattern tables (the
//!   leading `*` keeps the walk from ending early), and none matches.
//!
//! Results: markdown tables on stdout, JSON lines in `target/bench/enforcement.json` (every
//! ratio with its per-round samples).

use std::ffi::CString;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use guard::kernel::Backend;
use guard::kernel::scope::cgroup2_root;
use guard::policy::{Policy, PolicyParser};
use guard::session::{Session, SessionOptions};

/// Policy sizes, in rules, and whether the policy also has pattern rules (a rule set of exec
/// globs and a legacy policy's forbidden substrings and program regexes: the pattern tables).
const SIZES: [(usize, bool); 4] = [(10, false), (1_000, false), (1_000, true), (100_000, false)];
/// Pattern rules of each kind in a policy with patterns.
const PATTERNS: usize = 20;
/// Rounds per size.
const ROUNDS: usize = 9;
/// Operations per round: fork+exec+wait, connect, getppid.
const EXEC_K: usize = 300;
const CONNECT_K: usize = 3_000;
const GETPPID_K: usize = 200_000;
/// The first argument that makes this binary the worker.
const WORKER_ARG: &str = "--guard-enforcement-bench-worker";
/// How `--exec-arg-bytes` reaches the worker.
const EXEC_ARG_BYTES_ENV: &str = "GUARD_BENCH_EXEC_ARG_BYTES";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Exec,
    Connect,
    Getppid,
}

const OPS: [Op; 3] = [Op::Exec, Op::Connect, Op::Getppid];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Exec => "exec",
            Op::Connect => "connect",
            Op::Getppid => "getppid",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Op::Exec => "fork+exec /bin/true",
            Op::Connect => "loopback TCP connect",
            Op::Getppid => "getppid",
        }
    }
}

/// Where the worker is and what is loaded while an operation is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Unguarded,
    Guarded,
    Outside,
}

impl Mode {
    fn index(self) -> usize {
        self as usize
    }
}

struct Options {
    rounds: usize,
    exec_k: usize,
    connect_k: usize,
    getppid_k: usize,
}

impl Options {
    fn k(&self, op: Op) -> usize {
        match op {
            Op::Exec => self.exec_k,
            Op::Connect => self.connect_k,
            Op::Getppid => self.getppid_k,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(WORKER_ARG) {
        if let Err(err) = worker() {
            eprintln!("enforcement bench worker: {err:#}");
            std::process::exit(1);
        }
        return;
    }
    let Some(options) = parse_args(&args) else {
        println!("enforcement bench: not selected by the benchmark filter");
        return;
    };
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    match preflight() {
        Ok(backend) => {
            if let Err(err) = run(&options, backend) {
                eprintln!("enforcement bench: {err:#}");
                std::process::exit(1);
            }
        }
        Err(why) => {
            println!("enforcement bench: skipped: {why:#}");
            std::process::exit(if ci { 1 } else { 0 });
        }
    }
}

/// `None` when a benchmark filter was given that does not name this benchmark (cargo passes
/// the same filter to every bench binary).
fn parse_args(args: &[String]) -> Option<Options> {
    let mut options = Options {
        rounds: ROUNDS,
        exec_k: EXEC_K,
        connect_k: CONNECT_K,
        getppid_k: GETPPID_K,
    };
    let mut filters = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--quick" => {
                options.rounds = 3;
                options.exec_k /= 3;
                options.connect_k /= 3;
                options.getppid_k /= 3;
            }
            "--exec-arg-bytes" => {
                if let Some(bytes) = iter.next().filter(|n| n.parse::<usize>().is_ok()) {
                    // SAFETY: set before any thread is started (the worker inherits it).
                    unsafe { std::env::set_var(EXEC_ARG_BYTES_ENV, bytes) };
                }
            }
            "--rounds" => {
                options.rounds = iter
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .unwrap_or(ROUNDS);
            }
            // `--bench` from cargo, and criterion's flags meant for the other benchmark.
            flag if flag.starts_with('-') => {}
            filter => filters.push(filter.to_string()),
        }
    }
    let selected = filters.is_empty()
        || filters
            .iter()
            .any(|f| "enforcement".contains(f.as_str()) || f.starts_with("enforcement"));
    selected.then_some(options)
}

/// The backend to use, or why this machine cannot run the benchmark.
fn preflight() -> Result<Backend> {
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        bail!("needs root (loading BPF programs and moving processes between cgroups)");
    }
    cgroup2_root()?;
    let backend = Backend::detect().0;
    let mut parser = PolicyParser::new();
    parser
        .parse(
            "probe.rules",
            r#"prefix_rule(pattern=["guard-bench-probe", "x"], decision="forbidden")"#,
        )
        .map_err(|e| anyhow!("{e}"))?;
    let options = SessionOptions {
        backend: Some(backend),
        ..SessionOptions::default()
    };
    drop(Session::start(parser.build(), &options).context("guard's programs cannot be loaded")?);
    Ok(backend)
}

/// The `.rules` text of `n` rules (see the module documentation); `port` is the worker
/// listener's.
fn policy_text(n: usize, port: u16) -> String {
    let addresses = n / 2;
    let names = (n / 10).max(1);
    let identities = if n >= 100 { 4 } else { 1 };
    let trues = (n / 20).max(1);
    let progs = n - addresses - names - identities - trues;
    let mut text = String::with_capacity(n * 80);
    for (i, program) in ["ls", "cat", "env", "sh"]
        .iter()
        .take(identities)
        .enumerate()
    {
        let _ = writeln!(text, "# identity {i}");
        let _ = writeln!(
            text,
            r#"prefix_rule(pattern=["{program}"], decision="allow")"#
        );
    }
    for i in 0..names {
        let _ = writeln!(
            text,
            r#"prefix_rule(pattern=["guard-bench-missing-{i}"], decision="forbidden")"#
        );
    }
    for i in 0..trues {
        let _ = writeln!(
            text,
            r#"prefix_rule(pattern=["true", "x{i}"], decision="forbidden")"#
        );
    }
    for i in 0..progs {
        if i.is_multiple_of(3) {
            let _ = writeln!(
                text,
                r#"prefix_rule(pattern=["prog{i}", "sub{i}", ["a", "b"]], decision="forbidden")"#
            );
        } else {
            let _ = writeln!(
                text,
                r#"prefix_rule(pattern=["prog{i}", "sub{i}"], decision="forbidden")"#
            );
        }
    }
    // Near the measured destination, on its own port: the lookups in its class go deep.
    let near = [
        "127.0.0.2/32".to_string(),
        "127.0.1.0/24".to_string(),
        "10.0.0.0/8".to_string(),
    ];
    let near_count = near.len().min(addresses);
    for address in near.iter().take(near_count) {
        let _ = writeln!(
            text,
            r#"address_rule(addresses=["{address}"], ports=[{port}], transport="tcp", decision="deny")"#
        );
    }
    for i in 0..addresses - near_count {
        let address = if i % 1000 == 999 {
            format!("fd00::{:x}/128", i + 1)
        } else if i % 100 == 99 {
            format!("192.168.{}.0/24", (i / 100) % 256)
        } else {
            let j = i + 1;
            format!("10.{}.{}.{}/32", (j >> 16) & 255, (j >> 8) & 255, j & 255)
        };
        let tail = match i % 10 {
            7 => r#"ports=[80, 443], transport="tcp""#.to_string(),
            8 => r#"transport="tcp""#.to_string(),
            9 => r#"ports=[53], transport="any""#.to_string(),
            _ => format!(r#"ports=[{}], transport="tcp""#, 1000 + i % 5000),
        };
        let _ = writeln!(
            text,
            r#"address_rule(addresses=["{address}"], {tail}, decision="deny")"#
        );
    }
    text
}

fn parse_policy(n: usize, port: u16, patterns: bool) -> Result<(Policy, Duration)> {
    let mut text = policy_text(n, port);
    let mut legacy = String::new();
    if patterns {
        let globs: Vec<String> = (0..PATTERNS)
            .map(|i| format!("\"exec(*guard-bench-glob-{i}*)\""))
            .collect();
        let _ = writeln!(text, "rule_set(deny=[{}])", globs.join(", "));
        let substrings: Vec<String> = (0..PATTERNS)
            .map(|i| format!("\"guard-bench-substring-{i}\""))
            .collect();
        let _ = writeln!(legacy, "forbid_substrings([{}])", substrings.join(", "));
        for i in 0..PATTERNS {
            let _ = writeln!(
                legacy,
                "forbid_program_regex(\"^guard-bench-evil-{i}[0-9]*$\", \"bench\")"
            );
        }
    }
    let started = Instant::now();
    let mut parser = PolicyParser::new();
    parser
        .parse(&format!("bench-{n}.rules"), &text)
        .map_err(|e| anyhow!("parsing the generated policy of {n} rules: {e}"))?;
    let mut policy = parser.build();
    if patterns {
        let parsed = guard::legacy::parse_policy("bench.policy", &legacy)
            .map_err(|e| anyhow!("parsing the generated legacy policy: {e}"))?;
        policy.add_legacy_policy(guard::policy::LegacyPolicy {
            file: "bench.policy".into(),
            policy: std::sync::Arc::new(parsed),
        });
    }
    Ok((policy, started.elapsed()))
}

/// How an operation's time is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clock {
    /// Elapsed time.
    Wall,
    /// CPU time of the measuring thread plus its exited children's: time spent waiting for a
    /// CPU on a loaded machine is left out.
    Cpu,
}

const CLOCKS: [Clock; 2] = [Clock::Wall, Clock::Cpu];

impl Clock {
    fn name(self) -> &'static str {
        match self {
            Clock::Wall => "wall",
            Clock::Cpu => "cpu",
        }
    }
}

/// Per size: samples[clock][mode][op] (ns per op, one per round), session start times, and what
/// the image held.
struct SizeResult {
    rules: usize,
    /// The policy has pattern rules (see [`SIZES`]).
    patterns: bool,
    samples: [[[Vec<f64>; 3]; 3]; 2],
    parse: Duration,
    starts: Vec<Duration>,
    image: String,
    /// Per round, from the kernel's BPF run-time statistics: [exec tracepoint ns per measured
    /// exec (every exec on the machine in that time counted against ours), its ns per run, the
    /// connect4 hook's ns per connect], then what keeping the statistics costs, as elapsed time
    /// per operation in the scope: [exec with them off, exec with them on, connect off, connect
    /// on] (NaN when something else had them on).
    bpf: Vec<[f64; 7]>,
}

/// Quiet time after a session starts and after it is dropped, before anything is measured: the
/// kernel frees a dropped session's maps and programs in the background (RCU callbacks,
/// workqueues), which would otherwise slow the unguarded measurement that follows.
const SETTLE: Duration = Duration::from_millis(300);

/// Guarded and outside measurements alternate this many times within a session.
const ALTERNATIONS: usize = 10;

fn run(options: &Options, backend: Backend) -> Result<()> {
    let mut worker = Worker::start()?;
    let port = worker.port;
    // Warm-up: page cache, the listener's accept thread, the CPU's frequency.
    for op in OPS {
        worker.measure(op, options.k(op) / 3 + 1)?;
    }
    let session_options = SessionOptions {
        backend: Some(backend),
        ..SessionOptions::default()
    };
    let total = Instant::now();
    eprintln!("enforcement bench: load average {}", load_average());
    let mut results = Vec::new();
    for (n, patterns) in SIZES {
        let (policy, parse) = parse_policy(n, port, patterns)?;
        eprintln!("enforcement bench: {n} rules (patterns: {patterns}) parsed in {parse:.2?}");
        let mut result = SizeResult {
            rules: n,
            patterns,
            samples: Default::default(),
            parse,
            starts: Vec::new(),
            image: String::new(),
            bpf: Vec::new(),
        };
        // U G/O U G/O ... U: every guarded round sits between two unguarded ones.
        measure_unguarded(&mut worker, options, &mut result)?;
        for round in 0..options.rounds {
            let started = Instant::now();
            let mut session = Session::start(policy.clone(), &session_options)
                .with_context(|| format!("starting a session with {n} rules"))?;
            result.starts.push(started.elapsed());
            std::thread::sleep(SETTLE);
            if round == 0 {
                let image = session.image();
                let pattern_rows: usize = image
                    .patterns
                    .by_index()
                    .iter()
                    .flatten()
                    .map(|t| t.rows.len())
                    .sum();
                result.image = format!(
                    "{{\"rules\":{},\"identities\":{},\"names\":{},\"argv_rules\":{},\"destinations\":{},\"pattern_rows\":{}}}",
                    image.rules.len(),
                    image.identities.len(),
                    image.names.len(),
                    image.argv_rules.len(),
                    image.destinations.len(),
                    pattern_rows
                );
            }
            let before = counters(&session)?;
            let measured = measure_in_session(&mut worker, options, &session, round, &mut result)
                .and_then(|()| bpf_run_time(&mut worker, options, &mut session))
                .map(|bpf| result.bpf.push(bpf));
            // Out of the scope whatever happened: dropping the session kills what is left in it.
            worker.leave()?;
            measured?;
            check_decided(&before, &counters(&session)?, options, n)?;
            drop(session);
            std::thread::sleep(SETTLE);
            measure_unguarded(&mut worker, options, &mut result)?;
        }
        eprintln!(
            "enforcement bench: {n} rules: session start {:.2?} (median)",
            median_duration(&result.starts)
        );
        results.push(result);
    }
    worker.quit();
    eprintln!(
        "enforcement bench: measured in {:.1?}; load average now {}",
        total.elapsed(),
        load_average()
    );
    report(&results, options, backend)
}

/// The first three fields of /proc/loadavg: how busy the machine was (the benchmark itself
/// keeps about one CPU busy).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_string())
}

fn push(result: &mut SizeResult, mode: Mode, op: Op, (wall, cpu): (f64, f64)) {
    result.samples[Clock::Wall as usize][mode.index()][op as usize].push(wall);
    result.samples[Clock::Cpu as usize][mode.index()][op as usize].push(cpu);
}

fn measure_unguarded(
    worker: &mut Worker,
    options: &Options,
    result: &mut SizeResult,
) -> Result<()> {
    for op in OPS {
        let sample = worker.measure(op, options.k(op))?;
        push(result, Mode::Unguarded, op, sample);
    }
    Ok(())
}

/// Per operation, [`ALTERNATIONS`] × (in the scope, outside it), `K / ALTERNATIONS` operations
/// each, the order flipping every time; leaves the worker wherever it ends.
fn measure_in_session(
    worker: &mut Worker,
    options: &Options,
    session: &Session,
    round: usize,
    result: &mut SizeResult,
) -> Result<()> {
    let scope = session.scope().path();
    let procs = scope.join("cgroup.procs");
    for op in OPS {
        let k = options.k(op) / ALTERNATIONS;
        let mut sums = [(0.0, 0.0); 2];
        for step in 0..2 * ALTERNATIONS {
            let inside = (step + round).is_multiple_of(2);
            if inside {
                worker.join(&procs, scope)?;
            } else {
                worker.leave()?;
            }
            let (wall, cpu) = worker.measure(op, k)?;
            let sum = &mut sums[usize::from(!inside)];
            sum.0 += wall / ALTERNATIONS as f64;
            sum.1 += cpu / ALTERNATIONS as f64;
        }
        push(result, Mode::Guarded, op, sums[0]);
        push(result, Mode::Outside, op, sums[1]);
    }
    Ok(())
}

/// What guard's programs themselves cost per operation, from the kernel's run-time statistics
/// (enabled only for this block), and what keeping those statistics costs the operations: the
/// block's timings against the same operations in the same scope with them off, just before
/// and just after (their mean). Leaves the worker in the scope.
fn bpf_run_time(worker: &mut Worker, options: &Options, session: &mut Session) -> Result<[f64; 7]> {
    let ids = session.program_ids();
    let id = |name: &str| {
        ids.iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| *id)
            .ok_or_else(|| anyhow!("the session has no program {name}"))
    };
    let (exec_id, connect_id) = (id("sched_process_exec")?, id("connect4")?);
    let read = |id: u32| -> Result<(u64, u64)> {
        for info in aya::programs::loaded_programs() {
            let info = info?;
            if info.id() == id {
                return Ok((info.run_time().as_nanos() as u64, info.run_count()));
            }
        }
        bail!("program {id} is not loaded")
    };
    let (exec_k, connect_k) = (
        options.exec_k / ALTERNATIONS,
        options.connect_k / ALTERNATIONS,
    );
    let scope = session.scope().path();
    worker.join(&scope.join("cgroup.procs"), scope)?;
    // "Off" only when nothing else on the machine keeps them on (the sysctl says whether any
    // holder has them on).
    let stats_off = || {
        std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|t| t.trim() == "0")
    };
    let off_before = stats_off();
    let exec_off_1 = worker.measure(Op::Exec, exec_k)?.0;
    let connect_off_1 = worker.measure(Op::Connect, connect_k)?.0;
    let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .context("enabling BPF run-time statistics")?;
    let exec_before = read(exec_id)?;
    let exec_on = worker.measure(Op::Exec, exec_k)?.0;
    let exec_after = read(exec_id)?;
    let connect_before = read(connect_id)?;
    let connect_on = worker.measure(Op::Connect, connect_k)?.0;
    let connect_after = read(connect_id)?;
    drop(stats);
    let off_after = stats_off();
    let connect_off_2 = worker.measure(Op::Connect, connect_k)?.0;
    let exec_off_2 = worker.measure(Op::Exec, exec_k)?.0;
    let (exec_off, connect_off) = if off_before && off_after {
        (
            (exec_off_1 + exec_off_2) / 2.0,
            (connect_off_1 + connect_off_2) / 2.0,
        )
    } else {
        (f64::NAN, f64::NAN)
    };
    let exec_time = (exec_after.0 - exec_before.0) as f64;
    let exec_runs = (exec_after.1 - exec_before.1).max(1) as f64;
    let connect_runs = connect_after.1 - connect_before.1;
    if connect_runs != connect_k as u64 {
        bail!("connect4 ran {connect_runs} times for {connect_k} connects in the scope");
    }
    Ok([
        exec_time / exec_k as f64,
        exec_time / exec_runs,
        (connect_after.0 - connect_before.0) as f64 / connect_k as f64,
        exec_off,
        exec_on,
        connect_off,
        connect_on,
    ])
}

fn counters(session: &Session) -> Result<std::collections::HashMap<&'static str, u64>> {
    Ok(session.enforcer().counters()?.into_iter().collect())
}

/// Every measured exec and connect was decided in the kernel, and allowed.
fn check_decided(
    before: &std::collections::HashMap<&'static str, u64>,
    after: &std::collections::HashMap<&'static str, u64>,
    options: &Options,
    n: usize,
) -> Result<()> {
    let delta =
        |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    let (execs, connects) = (delta("exec_allow"), delta("net_allow"));
    let (want_execs, want_connects) = (
        options.exec_k / ALTERNATIONS * ALTERNATIONS,
        options.connect_k / ALTERNATIONS * ALTERNATIONS,
    );
    if execs < want_execs as u64 || connects < want_connects as u64 {
        bail!(
            "with {n} rules the kernel decided {execs} execs and {connects} connects of the \
             {want_execs} and {want_connects} measured in the scope: the worker was not in it"
        );
    }
    for refused in [
        "exec_prompt",
        "exec_forbidden",
        "net_prompt",
        "net_forbidden",
    ] {
        if delta(refused) != 0 {
            bail!(
                "with {n} rules the kernel counted {} {refused} during a measured round",
                delta(refused)
            );
        }
    }
    Ok(())
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if !sorted.len().is_multiple_of(2) {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

fn median_duration(values: &[Duration]) -> Duration {
    Duration::from_secs_f64(median(
        &values.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
    ))
}

fn format_ns(ns: f64) -> String {
    if ns >= 1_000_000_000.0 {
        format!("{:.2} s", ns / 1_000_000_000.0)
    } else if ns >= 100_000_000.0 {
        format!("{:.0} ms", ns / 1_000_000.0)
    } else if ns >= 1_000_000.0 {
        format!("{:.2} ms", ns / 1_000_000.0)
    } else if ns >= 100_000.0 {
        format!("{:.0} µs", ns / 1_000.0)
    } else if ns >= 1_000.0 {
        format!("{:.1} µs", ns / 1_000.0)
    } else {
        format!("{ns:.0} ns")
    }
}

fn format_rules(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// A column heading: `1 000 rules`, `1 000 rules + patterns`.
fn size_label(r: &SizeResult) -> String {
    let patterns = if r.patterns { " + patterns" } else { "" };
    format!("{} rules{patterns}", format_rules(r.rules))
}

fn report(results: &[SizeResult], options: &Options, backend: Backend) -> Result<()> {
    let mut json = String::new();
    for clock in CLOCKS {
        let table = overhead_table(results, options, backend, clock, &mut json);
        let what = match clock {
            Clock::Wall => "elapsed time",
            Clock::Cpu => {
                "CPU time (the worker's thread and its children; waiting for a CPU left out)"
            }
        };
        println!(
            "\nguard enforcement overhead, {what}: {} backend, median of {} rounds; ×ratio of the \
             medians of the same size's rounds (the numerator's time in brackets)\n",
            backend.as_str(),
            options.rounds
        );
        println!("{table}");
    }
    let mut table = String::from("| |");
    for r in results {
        let _ = write!(table, " {} |", size_label(r));
    }
    table.push_str("\n|---|");
    table.push_str(&"---|".repeat(results.len()));
    table.push_str("\n| policy parse |");
    for r in results {
        let _ = write!(table, " {} |", format_duration(r.parse));
    }
    let unguarded = |op: Op| {
        let all: Vec<f64> = results
            .iter()
            .flat_map(|r| samples(r, Clock::Wall, Mode::Unguarded, op).iter().copied())
            .collect();
        median(&all)
    };
    for (i, label) in [
        (
            0,
            "BPF time per exec in the scope (exec tracepoint; share of an unguarded exec)",
        ),
        (
            2,
            "BPF time per connect in the scope (connect4 hook; share of an unguarded connect)",
        ),
    ] {
        let op = if i == 0 { Op::Exec } else { Op::Connect };
        let _ = write!(table, "\n| {label} |");
        for r in results {
            let ns = median(&r.bpf.iter().map(|b| b[i]).collect::<Vec<_>>());
            let _ = write!(
                table,
                " {} ({:.2} %) |",
                format_ns(ns),
                100.0 * ns / unguarded(op)
            );
        }
    }
    for (off, label) in [
        (
            3,
            "exec in the scope with BPF stats on ÷ off (what keeping them costs)",
        ),
        (5, "connect in the scope with BPF stats on ÷ off"),
    ] {
        let _ = write!(table, "\n| {label} |");
        for r in results {
            let kept: Vec<&[f64; 7]> = r.bpf.iter().filter(|b| !b[off].is_nan()).collect();
            if kept.is_empty() {
                table.push_str(" (something else kept them on) |");
                continue;
            }
            let on = median(&kept.iter().map(|b| b[off + 1]).collect::<Vec<_>>());
            let off = median(&kept.iter().map(|b| b[off]).collect::<Vec<_>>());
            let _ = write!(table, " ×{:.2} ({}) |", on / off, format_ns(on));
        }
    }
    table.push_str("\n| session start: compile + load + fill maps + scope (median) |");
    for r in results {
        let start = median_duration(&r.starts);
        let _ = write!(table, " {} |", format_duration(start));
        let _ = writeln!(
            json,
            "{{\"bench\":\"enforcement\",\"op\":\"load\",\"rules\":{},\"patterns\":{},\"backend\":\"{}\",\
             \"parse_ms\":{:.1},\"session_start_ms\":{:.1},\"session_start_rounds_ms\":{},\"image\":{},\
             \"bpf_exec_ns_per_exec\":{},\"bpf_exec_ns_per_run\":{},\"bpf_connect4_ns_per_connect\":{}}}",
            r.rules,
            r.patterns,
            backend.as_str(),
            r.parse.as_secs_f64() * 1e3,
            start.as_secs_f64() * 1e3,
            json_list(
                &r.starts
                    .iter()
                    .map(|d| d.as_secs_f64() * 1e3)
                    .collect::<Vec<_>>()
            ),
            r.image,
            json_list(&r.bpf.iter().map(|b| b[0]).collect::<Vec<_>>()),
            json_list(&r.bpf.iter().map(|b| b[1]).collect::<Vec<_>>()),
            json_list(&r.bpf.iter().map(|b| b[2]).collect::<Vec<_>>()),
        );
    }
    println!(
        "\nloading, and what the programs themselves cost (kernel BPF run-time statistics)\n\n{table}\n"
    );
    let path = bench_dir()?.join("enforcement.json");
    std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
    println!("JSON lines: {}", path.display());
    Ok(())
}

fn samples(r: &SizeResult, clock: Clock, mode: Mode, op: Op) -> &[f64] {
    &r.samples[clock as usize][mode.index()][op as usize]
}

/// The markdown table of one clock; its JSON lines are appended to `json`.
fn overhead_table(
    results: &[SizeResult],
    options: &Options,
    backend: Backend,
    clock: Clock,
    json: &mut String,
) -> String {
    let mut table = String::from("| | unguarded |");
    for r in results {
        let _ = write!(table, " {} |", size_label(r));
    }
    table.push_str("\n|---|---|");
    table.push_str(&"---|".repeat(results.len()));
    table.push('\n');
    // (row label suffix, JSON name, numerator, denominator)
    let comparisons = [
        ("", "guarded/unguarded", Mode::Guarded, Mode::Unguarded),
        (
            ": in the scope ÷ outside it, same session",
            "guarded/outside",
            Mode::Guarded,
            Mode::Outside,
        ),
        (
            ": outside the scope, guard loaded ÷ unguarded",
            "outside/unguarded",
            Mode::Outside,
            Mode::Unguarded,
        ),
    ];
    for (label, name, top, bottom) in comparisons {
        for op in OPS {
            let _ = write!(table, "| {}{label} |", op.label());
            if bottom == Mode::Unguarded {
                let all: Vec<f64> = results
                    .iter()
                    .flat_map(|r| samples(r, clock, bottom, op).iter().copied())
                    .collect();
                let _ = write!(table, " {} |", format_ns(median(&all)));
            } else {
                table.push_str(" |");
            }
            for r in results {
                let (num, den) = (samples(r, clock, top, op), samples(r, clock, bottom, op));
                let (n, d) = (median(num), median(den));
                let _ = write!(table, " ×{:.2} ({}) |", n / d, format_ns(n));
                // Paired by round (an unguarded sample is taken before and after each session:
                // the mean of the two), to show how much the ratio moves from round to round.
                let paired: Vec<f64> = num
                    .iter()
                    .enumerate()
                    .map(|(i, n)| {
                        let d = if bottom == Mode::Unguarded {
                            (den[i] + den[i + 1]) / 2.0
                        } else {
                            den[i]
                        };
                        n / d
                    })
                    .collect();
                let _ = writeln!(
                    json,
                    "{{\"bench\":\"enforcement\",\"op\":\"{}\",\"clock\":\"{}\",\"ratio_of\":\"{name}\",\
                     \"rules\":{},\"patterns\":{},\"backend\":\"{}\",\"rounds\":{},\"k\":{},\"numerator_ns\":{n:.1},\
                     \"denominator_ns\":{d:.1},\"ratio\":{:.4},\"paired_ratio_median\":{:.4},\
                     \"paired_ratio_min\":{:.4},\"paired_ratio_max\":{:.4},\"numerator_rounds_ns\":{},\
                     \"denominator_rounds_ns\":{}}}",
                    op.name(),
                    clock.name(),
                    r.rules,
                    r.patterns,
                    backend.as_str(),
                    options.rounds,
                    options.k(op),
                    n / d,
                    median(&paired),
                    paired.iter().copied().fold(f64::INFINITY, f64::min),
                    paired.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    json_list(num),
                    json_list(den),
                );
            }
            table.push('\n');
        }
    }
    table.trim_end().to_string()
}

fn format_duration(d: Duration) -> String {
    format_ns(d.as_secs_f64() * 1e9)
}

fn json_list(values: &[f64]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
    format!("[{}]", items.join(","))
}

/// `target/bench`: from `CARGO_TARGET_DIR`, else three levels above this binary
/// (`target/release/deps/enforcement-…`).
fn bench_dir() -> Result<PathBuf> {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::current_exe()?
            .ancestors()
            .nth(3)
            .map(Path::to_path_buf)
            .ok_or_else(|| anyhow!("cannot tell the target folder from this binary's path"))?,
    };
    let dir = target.join("bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The worker process, driven one line at a time.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    port: u16,
}

impl Worker {
    fn start() -> Result<Worker> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(WORKER_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the worker")?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut worker = Worker {
            child,
            stdin,
            stdout,
            port: 0,
        };
        worker.port = worker.reply()?.parse().context("the worker's port")?;
        Ok(worker)
    }

    fn reply(&mut self) -> Result<String> {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .context("reading from the worker")?;
        let line = line.trim_end().to_string();
        match line.strip_prefix("ok ") {
            Some(rest) => Ok(rest.to_string()),
            None if line.is_empty() => Err(anyhow!("the worker exited")),
            None => Err(anyhow!("worker: {line}")),
        }
    }

    fn request(&mut self, line: &str) -> Result<String> {
        writeln!(self.stdin, "{line}").context("writing to the worker")?;
        self.stdin.flush()?;
        self.reply()
    }

    /// Mean ns per operation over `k` back to back: (wall, CPU).
    fn measure(&mut self, op: Op, k: usize) -> Result<(f64, f64)> {
        let reply = self.request(&format!("{} {k}", op.name()))?;
        let (wall, cpu) = reply
            .split_once(' ')
            .ok_or_else(|| anyhow!("unexpected worker reply {reply:?}"))?;
        Ok((
            wall.parse::<f64>()? / k as f64,
            cpu.parse::<f64>()? / k as f64,
        ))
    }

    /// Moves the worker into the cgroup of `procs`, and checks it is there.
    fn join(&mut self, procs: &Path, cgroup: &Path) -> Result<()> {
        let now = self.request(&format!("join {}", procs.display()))?;
        let expected = cgroup.strip_prefix(cgroup2_root()?).unwrap_or(cgroup);
        if Path::new(&now).strip_prefix("/").unwrap_or(Path::new(&now)) != expected {
            bail!("the worker is in {now}, not {}", cgroup.display());
        }
        Ok(())
    }

    fn leave(&mut self) -> Result<()> {
        self.request("leave").map(drop)
    }

    fn quit(mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// This process's cgroup v2 path, relative to the hierarchy's root (`0::/a/b` → `a/b`).
fn own_cgroup() -> Result<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup")?;
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|path| path.trim_start_matches('/').to_string())
        .ok_or_else(|| anyhow!("no cgroup v2 line (0::) in /proc/self/cgroup"))
}

/// The worker: a listener with an accept thread, then commands on stdin (`exec K`,
/// `connect K`, `getppid K` → total ns; `join PROCS`, `leave` → the cgroup it is in now).
fn worker() -> Result<()> {
    let original = cgroup2_root()?.join(own_cgroup()?).join("cgroup.procs");
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
    let port = listener.local_addr()?.port();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            drop(stream);
            counted.fetch_add(1, Ordering::Release);
        }
    });
    let target = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    let program = CString::new("/bin/true")?;
    // `--exec-arg-bytes N`: after `bench`, arguments of 200 bytes up to N bytes in all (what a
    // long command line costs the pattern tables, which read up to 4 KiB of argv; each is
    // short enough for the argv trie to step over).
    let mut argv_owned = vec![CString::new("true")?, CString::new("bench")?];
    let extra: usize = std::env::var(EXEC_ARG_BYTES_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    for i in 0..extra.div_ceil(201) {
        argv_owned.push(CString::new(format!("{i:03}{}", "b".repeat(197)))?);
    }
    let argv: Vec<*const libc::c_char> = argv_owned
        .iter()
        .map(|arg| arg.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];

    let mut out = std::io::stdout().lock();
    writeln!(out, "ok {port}")?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let (command, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let answer = match command {
            "exec" | "connect" | "getppid" => arg
                .parse::<usize>()
                .map_err(anyhow::Error::from)
                .and_then(|k| match command {
                    "exec" => {
                        timed(|| (0..k).try_for_each(|_| fork_exec_wait(&program, &argv, &envp)))
                    }
                    "connect" => connect_batches(&target, k, &accepted),
                    _ => timed(|| {
                        for _ in 0..k {
                            // SAFETY: a syscall without arguments.
                            std::hint::black_box(unsafe { libc::syscall(libc::SYS_getppid) });
                        }
                        Ok(())
                    }),
                })
                .map(|(wall, cpu)| format!("{} {cpu}", wall.as_nanos())),
            "join" => join_cgroup(Path::new(arg)),
            "leave" => join_cgroup(&original),
            "quit" => return Ok(()),
            other => Err(anyhow!("unknown command {other:?}")),
        };
        match answer {
            Ok(text) => writeln!(out, "ok {text}")?,
            Err(err) => writeln!(out, "error: {err:#}")?,
        }
        out.flush()?;
    }
    Ok(())
}

/// CPU time of the calling thread plus that of its waited-for children, in ns.
fn cpu_ns() -> u64 {
    // SAFETY: plain getters into zeroed out-parameters.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        let tv_ns =
            |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1_000;
        ts.tv_sec as u64 * 1_000_000_000
            + ts.tv_nsec as u64
            + tv_ns(usage.ru_utime)
            + tv_ns(usage.ru_stime)
    }
}

/// (wall time, CPU time in ns) of `run`.
fn timed(run: impl FnOnce() -> Result<()>) -> Result<(Duration, u64)> {
    let (started, cpu) = (Instant::now(), cpu_ns());
    run()?;
    Ok((started.elapsed(), cpu_ns() - cpu))
}

/// Writes this process's pid into `procs`; returns the cgroup it is in now.
fn join_cgroup(procs: &Path) -> Result<String> {
    std::fs::write(procs, std::process::id().to_string())
        .with_context(|| format!("writing {}", procs.display()))?;
    Ok(format!("/{}", own_cgroup()?))
}

fn fork_exec_wait(
    program: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char; 1],
) -> Result<()> {
    // SAFETY: the child only calls execve and _exit (async-signal-safe) on memory prepared
    // before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        unsafe {
            libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        bail!("waitpid: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("/bin/true did not exit 0 (wait status {status:#x})");
    }
    Ok(())
}

/// Connections per timed batch: the accept thread catches up (untimed) between batches, so the
/// listen backlog (128) never overflows; an overflow drops the SYN, and its retransmission
/// costs a whole second.
const CONNECT_BATCH: usize = 64;

/// The (wall, CPU) time `k` connects took, timed in batches of [`CONNECT_BATCH`].
fn connect_batches(
    target: &libc::sockaddr_in,
    k: usize,
    accepted: &AtomicUsize,
) -> Result<(Duration, u64)> {
    let base = accepted.load(Ordering::Acquire);
    let (mut wall, mut cpu) = (Duration::ZERO, 0);
    let mut done = 0;
    while done < k {
        let batch = CONNECT_BATCH.min(k - done);
        let (batch_wall, batch_cpu) = timed(|| (0..batch).try_for_each(|_| connect_once(target)))?;
        wall += batch_wall;
        cpu += batch_cpu;
        done += batch;
        let deadline = Instant::now() + Duration::from_secs(10);
        while accepted.load(Ordering::Acquire) < base + done {
            if Instant::now() > deadline {
                bail!("the accept thread fell behind by more than 10 s");
            }
            std::thread::yield_now();
        }
    }
    Ok((wall, cpu))
}

fn connect_once(target: &libc::sockaddr_in) -> Result<()> {
    // SAFETY: plain socket calls on a descriptor this function owns and closes.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            bail!("socket: {}", std::io::Error::last_os_error());
        }
        let connected = libc::connect(
            fd,
            (target as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        if connected != 0 {
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            bail!("connect: {err}");
        }
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
        libc::close(fd);
    }
    Ok(())
}
