//! What the audit log takes under a flood: refused UDP connects in a loop inside a `guard run`
//! scope, paced at 200 000 a second and then as fast as the loop can go (it then takes a core
//! of the two these machines have), against the release daemon. Reports the events the kernel
//! emitted (put in the ring buffer + lost to it being full), the records written to the log,
//! every loss by cause, the daemon's CPU and peak memory; and the same loop outside any scope
//! (no guard) as the baseline measured in the same run. A third row runs the fast loop with
//! `[export.otlp]` sending every record to a receiver built from the official OTLP protobuf
//! definitions (`guard_tests::otlp`, far slower than the flood): the export must slow neither
//! the loop nor the log, and what it could not send is counted.
//!
//! Run with `cargo xtask bench -- audit` (it builds the release `guard` first). Needs root;
//! otherwise it prints why and exits 0 (1 when `CI=true`). Writes target/bench/audit.json.

use std::path::Path;
use std::time::{Duration, Instant};

use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
use guard_tests::kernel::helper;
use guard_tests::otlp::OtlpReceiver;
use serde_json::{Value, json};

/// How long each loop runs.
const SECS: f64 = 5.0;
/// What the benchmark must drive at least (the paced row drives exactly this).
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

/// One run of the loop in a fresh daemon's scope, and what the daemon made of it.
struct Row {
    label: String,
    rate: f64,
    attempts: u64,
    refused: u64,
    emitted: u64,
    written: u64,
    ring_lost: u64,
    writer_lost: u64,
    write_errors: u64,
    cpu: f64,
    wall: f64,
    peak_kib: u64,
    record_bytes: f64,
    /// With `[export.otlp]`: records the receiver took, and those failed or lost.
    otlp: Option<(u64, u64)>,
    /// Events the kernel did not emit for the scope past its share of a ring buffer more than
    /// half full (the `scope_loss` records say how many).
    scope_lost: u64,
}

fn measure(probe: &str, pace: Option<f64>, otlp: Option<&OtlpReceiver>) -> Row {
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.79.0.1\"], decision=\"forbidden\")\n".to_string(),
        // No per-scope share: the flood is one scope's, and every record of it is to be
        // written (or counted lost), not folded.
        extra_config: format!(
            "[audit]\nscope_records = 0\n{}",
            otlp.map(|r| format!("[export.otlp]\nendpoint = \"{}\"\n", r.endpoint()))
                .unwrap_or_default()
        ),
        ..Default::default()
    });
    let pid = daemon.pid();
    let before = daemon.json(&["status", "--json"]);
    let (cpu_before, _) = cpu_and_peak(pid);
    let started = Instant::now();
    let secs = SECS.to_string();
    let mut args = vec!["run", "--", probe, "connect-loop", "127.79.0.1", "9", &secs];
    let pace_arg = pace.map(|r| r.to_string());
    if let Some(rate) = &pace_arg {
        args.push(rate);
    }
    let out = daemon
        .guard_command(&args)
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let (attempts, refused, loop_secs) = parse_loop(&String::from_utf8_lossy(&out.stdout));
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
    let audit = |k: &str| {
        after["audit"][k].as_u64().unwrap_or(0) - before["audit"][k].as_u64().unwrap_or(0)
    };
    let (ring_lost, written) = (delta("events_lost"), audit("written"));
    let scope_lost: u64 = std::fs::read_to_string(&daemon.audit_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["type"] == "scope_loss")
        .filter_map(|record| record["scope_events_lost"].as_u64())
        .sum();
    let exported = otlp.map(|_| {
        let field = |k: &str| after["audit"]["otlp"][k].as_u64().unwrap_or(0);
        (field("sent"), field("failed") + field("lost"))
    });
    Row {
        label: match (pace, otlp) {
            (Some(rate), _) => format!("paced at {rate:.0}/s"),
            (None, None) => "as fast as the loop goes".to_string(),
            (None, Some(_)) => "as fast as the loop goes, with [export.otlp]".to_string(),
        },
        otlp: exported,
        scope_lost,
        rate: attempts as f64 / loop_secs,
        attempts,
        refused,
        emitted: delta("events_submitted") + ring_lost,
        written,
        ring_lost,
        writer_lost: audit("writer_lost"),
        write_errors: audit("write_errors"),
        cpu: cpu_after - cpu_before,
        wall,
        peak_kib,
        record_bytes: audit("bytes") as f64 / written.max(1) as f64,
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

fn main() {
    if !can_run() {
        return;
    }
    let probe = helper("net-probe", env!("CARGO_BIN_EXE_net-probe"));
    let probe = probe.to_str().unwrap();

    // Baseline: the same loop with no guard (the connects succeed: UDP connect sends nothing).
    let out = std::process::Command::new(probe)
        .args(["connect-loop", "127.79.0.2", "9", &SECS.to_string()])
        .output()
        .unwrap();
    let (base_n, _, base_secs) = parse_loop(&String::from_utf8_lossy(&out.stdout));
    let base_rate = base_n as f64 / base_secs;

    let Some(receiver) = OtlpReceiver::start_or_skip() else {
        return;
    };
    let rows = [
        measure(probe, Some(TARGET_RATE), None),
        measure(probe, None, None),
        measure(probe, None, Some(&receiver)),
    ];
    let per_record = |row: &Row| row.cpu / row.written.max(1) as f64;
    println!(
        "| load (refused UDP connects in a guard run scope) | events/s driven | emitted | written | lost: ring buffer | lost: writer | daemon CPU | daemon peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for row in &rows {
        println!(
            "| {} | {:.0} | {} | {} ({:.1} %) | {} ({:.1} %) | {} ({:.1} %) | {:.2} s in {:.1} s ({:.0} % of a core) | {:.1} MiB |",
            row.label,
            row.rate,
            row.emitted,
            row.written,
            percent(row.written, row.emitted),
            row.ring_lost,
            percent(row.ring_lost, row.emitted),
            row.writer_lost,
            percent(row.writer_lost, row.emitted),
            row.cpu,
            row.wall,
            100.0 * row.cpu / row.wall,
            row.peak_kib as f64 / 1024.0,
        );
    }
    let fast = &rows[1];
    println!(
        "\nthe same loop with no guard: {base_rate:.0} connects/s; as fast as it goes in the scope \
         ×{:.2} of that (each refusal emits an event); the daemon writes {:.0} records per CPU \
         second ({:.0} bytes each)",
        fast.rate / base_rate,
        fast.written as f64 / fast.cpu.max(1e-9),
        fast.record_bytes,
    );
    let exporting = &rows[2];
    let (sent, missed) = exporting.otlp.unwrap_or_default();
    println!(
        "with [export.otlp] to a receiver far slower than the flood (Python, on the same 2 \
         cores): the loop ×{:.2} of the same run without it, every event still written or \
         counted ({} lost by the writer); the daemon's CPU per record written ×{:.2} ({:.2} µs \
         against {:.2} µs); the receiver took {sent} records, {missed} were counted failed or \
         lost",
        exporting.rate / fast.rate,
        exporting.writer_lost,
        per_record(exporting) / per_record(fast).max(1e-12),
        per_record(exporting) * 1e6,
        per_record(fast) * 1e6,
    );
    for row in &rows {
        // Every event is written or counted lost (the writer also writes the daemon's own
        // records, so written may exceed the events by a few).
        let accounted = row.written + row.ring_lost + row.writer_lost;
        assert!(
            accounted >= row.emitted,
            "{}: {} emitted but only {accounted} written or counted lost",
            row.label,
            row.emitted
        );
        assert_eq!(
            row.refused, row.attempts,
            "every connect in the scope is refused"
        );
        // Paced, one event per refusal. Past what the daemon drains, the kernel stops
        // emitting the scope's events at its share of a ring more than half full; those are
        // counted per scope, and only partly reported in `scope_loss` records once the run
        // has ended (a gap this benchmark shows, docs/performance.md).
        if row.label.starts_with("paced") {
            assert_eq!(
                row.emitted + row.scope_lost,
                row.attempts,
                "one event per refusal"
            );
        } else if row.emitted + row.scope_lost != row.attempts {
            println!(
                "{}: {} refusals, {} emitted, {} reported lost to the scope's share: {} not \
                 reported",
                row.label,
                row.attempts,
                row.emitted,
                row.scope_lost,
                row.attempts - row.emitted - row.scope_lost
            );
        }
        assert_eq!(row.write_errors, 0);
    }
    let report: Vec<Value> = rows
        .iter()
        .map(|row| {
            json!({
                "load": row.label,
                "events_per_sec": row.rate,
                "emitted": row.emitted,
                "written": row.written,
                "lost_ring_buffer": row.ring_lost,
                "lost_writer": row.writer_lost,
                "daemon_cpu_secs": row.cpu,
                "wall_secs": row.wall,
                "daemon_peak_rss_kib": row.peak_kib,
                "record_bytes": row.record_bytes,
                "otlp_sent": row.otlp.map(|o| o.0),
                "otlp_failed_or_lost": row.otlp.map(|o| o.1),
            })
        })
        .collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(
        dir.join("audit.json"),
        json!({"baseline_connects_per_sec": base_rate, "rows": report}).to_string(),
    );
    if rows[0].rate < TARGET_RATE * 0.95 {
        eprintln!(
            "the paced loop drove {:.0} events/s, under the {TARGET_RATE:.0} this benchmark is meant to drive",
            rows[0].rate
        );
        std::process::exit(1);
    }
}
