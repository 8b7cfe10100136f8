//! What the daemon's control plane costs: a `status` request (the baseline: one round trip, no
//! map writes), a `reload` (re-read, compile, map sync), an `amend` (append under the lock, then
//! reload) and a once-approval (compile with the approval, map sync), with 10 and 10 000 rules;
//! and a reload while a scoped process floods the daemon with refusals (as fast as one process
//! can make UDP connects: tens of thousands a second), against the same reload idle; and what a
//! run's overlay costs: its start against a run's without one, and the kernel memory its program
//! set takes against the daemon's own.
//!
//! Run with `cargo xtask bench -- daemon` (it builds the release `guard` first) or
//! `cargo build --release -p guard-user --bin guard && cargo bench -p guard-tests --bench daemon`.
//! Needs root; otherwise it prints why and exits 0 (1 when `CI=true`). Each figure is the median
//! of `ROUNDS` requests over the control socket, measured in one run so the ratios share the
//! machine's noise.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
use guard_tests::kernel::helper;

const ROUNDS: usize = 30;

/// One request line, its response line; the round trip's duration.
fn request(socket: &Path, line: &str) -> (Duration, String) {
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
    (took, response)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn timed(socket: &Path, line: impl Fn(usize) -> String) -> Duration {
    median((0..ROUNDS).map(|i| request(socket, &line(i)).0).collect())
}

fn rules(count: usize) -> String {
    (0..count)
        .map(|i| {
            format!(
                "address_rule(addresses=[\"10.{}.{}.{}\"], decision=\"prompt\")\n",
                i / 65_536,
                (i / 256) % 256,
                i % 256
            )
        })
        .collect()
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    if !can_run() {
        return;
    }
    let status = r#"{"v":1,"op":"status"}"#;
    let reload = r#"{"v":1,"op":"reload"}"#;
    println!(
        "| rules | status (baseline) | reload | amend | approve --once | reload ÷ status | amend ÷ status |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut reload_at = Vec::new();
    for count in [10, 10_000] {
        let daemon = TestDaemon::start(&DaemonSetup {
            rules: rules(count)
                + "address_rule(addresses=[\"127.77.20.0/24\"], decision=\"prompt\")\n",
            ..Default::default()
        });
        let socket = &daemon.socket;
        let t_status = timed(socket, |_| status.to_string());
        let t_reload = timed(socket, |_| reload.to_string());
        let t_amend = timed(socket, |i| {
            format!(
                r#"{{"v":1,"op":"amend","amendment":{{"kind":"network","host":"bench-{count}-{i}.test","protocol":"https","decision":"allow"}}}}"#
            )
        });
        // Asks to approve: one refused UDP connect per round, each to its own address.
        let probe = helper("net-probe", env!("CARGO_BIN_EXE_net-probe"));
        let mut asks = Vec::new();
        for i in 0..ROUNDS {
            let addr = format!("127.77.20.{}", i + 1);
            let out = daemon.guard(&[
                "run",
                "--",
                probe.to_str().unwrap(),
                "udp-connect",
                &addr,
                // Not 53: DNS goes to guard's resolver, never to an address rule.
                "5353",
            ]);
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "errno 1");
            asks.push(addr);
        }
        let pending = daemon.json(&["prompts", "--json"]);
        let ids: Vec<u64> = pending
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids.len(), ROUNDS, "one ask per address");
        let t_approve = median(
            ids.iter()
                .map(|id| {
                    request(
                        socket,
                        &format!(r#"{{"v":1,"op":"approve","id":{id},"mode":"once"}}"#),
                    )
                    .0
                })
                .collect(),
        );
        let ratio = |d: Duration| d.as_secs_f64() / t_status.as_secs_f64();
        println!(
            "| {count} | {} | {} | {} | {} | ×{:.0} | ×{:.0} |",
            ms(t_status),
            ms(t_reload),
            ms(t_amend),
            ms(t_approve),
            ratio(t_reload),
            ratio(t_amend)
        );
        reload_at.push(t_reload);
    }
    println!(
        "\nreload at 10 000 rules ÷ at 10: ×{:.1}",
        reload_at[1].as_secs_f64() / reload_at[0].as_secs_f64()
    );

    // A reload while a scoped process is refused as fast as it can go.
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.21.1\"], decision=\"forbidden\")\n".to_string(),
        ..Default::default()
    });
    let idle = timed(&daemon.socket, |_| reload.to_string());
    let stop = daemon.dir.path().join("stop");
    let probe = helper("net-probe", env!("CARGO_BIN_EXE_net-probe"));
    let mut flood = daemon
        .guard_command(&[
            "run",
            "--",
            probe.to_str().unwrap(),
            "udp-loop",
            "127.77.21.2",
            "127.77.21.1",
            "9",
            stop.to_str().unwrap(),
            "60",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let busy = timed(&daemon.socket, |_| reload.to_string());
    std::fs::write(&stop, "").unwrap();
    let _ = flood.wait();
    let counters = daemon.json(&["status", "--json"])["counters"].clone();
    println!(
        "\nreload idle {} · during a flood of refusals {} (×{:.1}); refusals {}, events lost to the \
         full ring buffer {}",
        ms(idle),
        ms(busy),
        busy.as_secs_f64() / idle.as_secs_f64(),
        counters["net_forbidden"],
        counters["events_lost"]
    );
    drop(daemon);
    overlay_costs();
}

/// The kernel memory of every BPF map a process holds open (the `memlock` of its map fds).
fn map_memory(pid: u32) -> u64 {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return 0;
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_to_string(fd.path()).ok())
        .filter(|info| info.lines().any(|l| l.starts_with("map_type:")))
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("memlock:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

/// `guard run -- true` with and without an overlay (medians of `OVERLAY_ROUNDS`), and the
/// kernel memory of one overlay's set beside the daemon's.
fn overlay_costs() {
    const OVERLAY_ROUNDS: usize = 9;
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "prefix_rule(pattern=[\"curl\"], decision=\"prompt\")\n".to_string(),
        ..Default::default()
    });
    let overlay = daemon.dir.path().join("tight.rules");
    std::fs::write(
        &overlay,
        "prefix_rule(pattern=[\"git\", \"push\"], decision=\"forbidden\")\n",
    )
    .unwrap();
    let overlay = overlay.to_str().unwrap();
    let run = |args: &[&str]| {
        let started = Instant::now();
        let out = daemon.guard(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        started.elapsed()
    };
    let plain = median(
        (0..OVERLAY_ROUNDS)
            .map(|_| run(&["run", "--", "true"]))
            .collect(),
    );
    let tightened = median(
        (0..OVERLAY_ROUNDS)
            .map(|_| run(&["run", "--overlay", overlay, "--", "true"]))
            .collect(),
    );
    let alone = map_memory(daemon.pid());
    let stop = daemon.dir.path().join("stop-waiting");
    let mut waiting = daemon
        .guard_command(&[
            "run",
            "--overlay",
            overlay,
            "--",
            "sh",
            "-c",
            &format!(
                "i=0; while [ ! -e {} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
                stop.display()
            ),
        ])
        .spawn()
        .unwrap();
    // Its set is loaded before the command starts; the run's own start is bounded above.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut with_one = alone;
    while with_one == alone && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        with_one = map_memory(daemon.pid());
    }
    std::fs::write(&stop, "").unwrap();
    let _ = waiting.wait();
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    println!(
        "
a run's start (guard run -- true, median of {OVERLAY_ROUNDS}): {} without an overlay, \
         {} with one (×{:.0}); kernel memory of the daemon's maps {:.0} MiB, of one overlay's \
         set {:.0} MiB (×{:.2})",
        ms(plain),
        ms(tightened),
        tightened.as_secs_f64() / plain.as_secs_f64(),
        mib(alone),
        mib(with_one.saturating_sub(alone)),
        with_one.saturating_sub(alone) as f64 / alone.max(1) as f64
    );
}
