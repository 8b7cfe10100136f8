//! What the audit log takes under a flood: refused UDP connects in a loop inside a `guard run`
//! scope, as fast as the loop can go, against the release daemon. Reports the events the kernel
//! emitted (put in the ring buffer + lost to it being full), the records written to the log,
//! every loss by cause, the daemon's CPU and peak memory; and the same loop outside any scope
//! (no guard) as the baseline measured in the same run.
//!
//! Run with `cargo xtask bench -- audit` (it builds the release `guard` first). Needs root;
//! otherwise it prints why and exits 0 (1 when `CI=true`). Writes target/bench/audit.json.

use std::path::Path;
use std::time::{Duration, Instant};

use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
use guard_tests::kernel::helper;
use serde_json::{Value, json};

/// How long each loop runs.
const SECS: f64 = 5.0;
/// Loops at once: one per core keeps the daemon competing for CPU, as on a busy machine.
const LOOPS: usize = 1;
/// What the issue asks the benchmark to drive.
const TARGET_RATE: f64 = 200_000.0;

/// `connects N refused M secs S` from net-probe.
fn parse_loop(out: &str) -> (u64, u64, f64) {
    let words: Vec<&str> = out.split_whitespace().collect();
    match words.as_slice() {
        ["connects", n, "refused", m, "secs", s] => {
            (n.parse().unwrap(), m.parse().unwrap(), s.parse().unwrap())
        }
        _ => panic!("net-probe said {out:?}"),
    }
}

/// (utime + stime in seconds, peak resident set in KiB) of a process.
fn cpu_and_peak(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start after the last `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields[i].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = (ticks(11) + ticks(12)) / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (cpu, peak)
}

fn counter(status: &Value, name: &str) -> u64 {
    status["counters"][name].as_u64().unwrap_or(0)
}

fn main() {
    if !can_run() {
        return;
    }
    let probe = helper("net-probe", env!("CARGO_BIN_EXE_net-probe"));
    let probe = probe.to_str().unwrap();
    let secs = SECS.to_string();

    // Baseline: the same loop with no guard (the connects succeed: UDP connect sends nothing).
    let out = std::process::Command::new(probe)
        .args(["connect-loop", "127.79.0.2", "9", &secs])
        .output()
        .unwrap();
    let (base_n, _, base_secs) = parse_loop(&String::from_utf8_lossy(&out.stdout));
    let base_rate = base_n as f64 / base_secs;

    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.79.0.1\"], decision=\"forbidden\")\n".to_string(),
        ..Default::default()
    });
    let pid = daemon.pid();
    let before = daemon.json(&["status", "--json"]);
    let (cpu_before, _) = cpu_and_peak(pid);
    let started = Instant::now();
    let loops: Vec<_> = (0..LOOPS)
        .map(|_| {
            daemon
                .guard_command(&["run", "--", probe, "connect-loop", "127.79.0.1", "9", &secs])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let (mut attempts, mut refused, mut loop_secs) = (0u64, 0u64, 0f64);
    for child in loops {
        let out = child.wait_with_output().unwrap();
        let (n, m, s) = parse_loop(&String::from_utf8_lossy(&out.stdout));
        attempts += n;
        refused += m;
        loop_secs = loop_secs.max(s);
    }
    // Until the daemon has written what it will write (bounded).
    let settle_deadline = Instant::now() + Duration::from_secs(30);
    let mut last = u64::MAX;
    let after = loop {
        std::thread::sleep(Duration::from_millis(500));
        let status = daemon.json(&["status", "--json"]);
        let written = status["audit"]["written"].as_u64().unwrap_or(0);
        if written == last || Instant::now() > settle_deadline {
            break status;
        }
        last = written;
    };
    let wall = started.elapsed().as_secs_f64();
    let (cpu_after, peak_kib) = cpu_and_peak(pid);

    let delta = |name: &str| counter(&after, name) - counter(&before, name);
    let submitted = delta("events_submitted");
    let ring_lost = delta("events_lost");
    let emitted = submitted + ring_lost;
    let audit = |s: &Value, k: &str| s["audit"][k].as_u64().unwrap_or(0);
    let written = audit(&after, "written") - audit(&before, "written");
    let writer_lost = audit(&after, "writer_lost") - audit(&before, "writer_lost");
    let write_errors = audit(&after, "write_errors") - audit(&before, "write_errors");
    let rate = attempts as f64 / loop_secs;
    let cpu = cpu_after - cpu_before;
    let bytes = audit(&after, "bytes") - audit(&before, "bytes");

    println!(
        "| | events/s driven | emitted | written | lost: ring buffer | lost: writer | daemon CPU | daemon peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| refused connects in a guard run scope | {:.0} | {emitted} | {written} ({:.1} %) | {ring_lost} ({:.1} %) | {writer_lost} | {:.2} s over {:.1} s ({:.0} % of a core) | {:.1} MiB |",
        rate,
        100.0 * written as f64 / emitted.max(1) as f64,
        100.0 * ring_lost as f64 / emitted.max(1) as f64,
        cpu,
        wall,
        100.0 * cpu / wall,
        peak_kib as f64 / 1024.0,
    );
    println!(
        "\nthe same loop with no guard: {base_rate:.0} connects/s; in the scope ×{:.2} of that \
         (each refusal emits an event); {refused} of {attempts} refused; written {:.0} records/s \
         of CPU ({:.0} bytes each); write errors {write_errors}",
        rate / base_rate,
        written as f64 / cpu.max(1e-9),
        bytes as f64 / written.max(1) as f64,
    );
    // Every event is written or counted lost (the writer also writes the daemon's own records).
    let accounted = written + ring_lost + writer_lost;
    assert!(
        accounted >= emitted,
        "{emitted} emitted but only {accounted} written or counted lost"
    );
    assert_eq!(refused, attempts, "every connect in the scope is refused");
    assert_eq!(emitted, attempts, "one event per refusal");

    let report = json!({
        "events_per_sec": rate,
        "baseline_connects_per_sec": base_rate,
        "emitted": emitted,
        "written": written,
        "lost_ring_buffer": ring_lost,
        "lost_writer": writer_lost,
        "write_errors": write_errors,
        "daemon_cpu_secs": cpu,
        "wall_secs": wall,
        "daemon_peak_rss_kib": peak_kib,
        "record_bytes": bytes as f64 / written.max(1) as f64,
    });
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("audit.json"), report.to_string());
    if rate < TARGET_RATE {
        eprintln!(
            "the loop drove {rate:.0} events/s, under the {TARGET_RATE:.0} this benchmark is meant to drive"
        );
        std::process::exit(1);
    }
}
