//! How long a command takes to start under guard, against the sandboxes it is compared with.
//! Each figure is one process started and waited for (`true`, whose own work is nil), the
//! median of `ROUNDS` rounds; a round runs every column once, in an order rotated each round, so
//! every ratio shares the machine's noise. Beside the wall-clock time (what the goals are set
//! in) it prints the CPU time a start took (the command's and the children it waited for; the
//! daemon's too for the daemon's column), which a loaded machine moves less. The columns:
//!
//! 1. **outside**: `true` itself (fork, exec, wait): the floor.
//! 2. **guard run, warm**: `guard run --rules DEFAULT -- true`, stand-alone, reusing the program
//!    set an earlier run kept loaded on the bpffs (`/sys/fs/bpf/guard-cache`): no verifier.
//! 3. **guard run, cold**: the same with `--fresh-programs`: every program loaded and verified
//!    afresh, as the first run after a boot.
//! 4. **guard run under the daemon**: `guard run --socket S -- true` against a `guard daemon`
//!    this bench starts (`guard_tests::daemon::TestDaemon`).
//! 5. **the Codex CLI's sandbox**: `codex sandbox -- true` (`@openai/codex`, pinned in
//!    `guard_tests::npm`), under its default policy, read-only (no write anywhere, no network).
//! 6. **Anthropic's sandbox-runtime**: `srt --settings FILE true` (no network, no write beyond
//!    its defaults); left out, with one line saying why, where it cannot run here.
//!
//! guard's columns use the embedded default policy (written to a file, so that neither
//! /etc/guard nor a daemon on the default socket decides), the daemon's too. One untimed round
//! comes first: it fills the kept program set and the tools' caches. Before timing, each
//! sandbox is shown to hold: a write it must refuse fails.
//!
//! Run with `cargo xtask bench -- start` (it builds the release `guard` first) or
//! `cargo build --release -p guard-user --bin guard && cargo bench -p guard-tests --bench start`.
//! Needs root; otherwise it prints why and exits 0 (1 when `CI=true`). The Codex CLI and srt
//! are installed with npm on first use under `target/` (`guard_tests::npm`).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use guard::kernel::program_cache::CACHE_ROOT;
use guard::policy::load::EMBEDDED_DEFAULT_RULES;
use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run, guard_bin, text};
use guard_tests::kernel::skip;
use guard_tests::npm::{CODEX, SANDBOX_RUNTIME};

const ROUNDS: usize = 15;
/// The goals of issue 41.
const WARM_OVER_CODEX_GOAL: f64 = 3.0;
const COLD_GOAL: Duration = Duration::from_millis(500);
const DAEMON_GOAL: Duration = Duration::from_millis(30);

/// One way of starting `true`.
struct Column {
    label: &'static str,
    /// What the table shows as its command.
    shown: String,
    command: Box<dyn Fn() -> Command>,
    /// Run, untimed, before each timed start.
    prepare: Option<Box<dyn Fn()>>,
    /// The CPU time (ns, cumulative) of a process outside the command that works for it: the
    /// daemon.
    helper_cpu: Option<Box<dyn Fn() -> u64>>,
}

/// One start: its wall-clock time, and the CPU time it took (the command's, its waited-for
/// children's and the bench's thread's, plus the helper's).
#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    cpu: Duration,
}

impl Column {
    fn new(label: &'static str, shown: &str, command: impl Fn() -> Command + 'static) -> Column {
        Column {
            label,
            shown: shown.to_string(),
            command: Box::new(command),
            prepare: None,
            helper_cpu: None,
        }
    }

    /// Starts it and waits for it; what that took. Panics when it fails.
    fn time(&self) -> Sample {
        if let Some(prepare) = &self.prepare {
            prepare();
        }
        self.start()
    }

    fn start(&self) -> Sample {
        let mut command = (self.command)();
        command.stdin(Stdio::null());
        let helper = || self.helper_cpu.as_ref().map_or(0, |cpu| cpu());
        let (started, cpu) = (Instant::now(), cpu_ns() + helper());
        let out = command.output().expect("starting the command");
        let took = Sample {
            wall: started.elapsed(),
            cpu: Duration::from_nanos((cpu_ns() + helper()).saturating_sub(cpu)),
        };
        assert!(
            out.status.success(),
            "{} ({}) failed: {}\n{}",
            self.label,
            self.shown,
            out.status,
            text(&out.stderr)
        );
        took
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
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

/// The CPU time (ns) process `pid`'s live threads have run (`/proc/PID/task/*/schedstat`).
fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn shown(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    match ms {
        ms if ms >= 1000.0 => format!("{:.2} s", ms / 1e3),
        ms if ms >= 100.0 => format!("{ms:.0} ms"),
        ms if ms >= 10.0 => format!("{ms:.1} ms"),
        ms => format!("{ms:.2} ms"),
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Runs `sandboxed` (a shell writing to `probe` inside the sandbox) and fails unless the write
/// was refused: the column times a sandbox that holds.
fn refuses_write(label: &str, mut sandboxed: Command, probe: &Path) -> Result<(), String> {
    let out = sandboxed
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("cannot start {label}: {err}"))?;
    if probe.exists() {
        let _ = std::fs::remove_file(probe);
        return Err(format!("{label} let a write through that it should refuse"));
    }
    if out.status.success() {
        return Err(format!(
            "{label} exited 0 without writing the probe: {}",
            text(&out.stderr)
        ));
    }
    Ok(())
}

/// The program every column starts, each finding it on PATH.
const TRUE: &str = "true";

fn main() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().to_path_buf();
    let rules = work.join("default.rules");
    std::fs::write(&rules, EMBEDDED_DEFAULT_RULES).unwrap();
    let probe = work.join("write-probe");
    let write_probe = format!("echo written > {}", probe.display());
    println!("load average at the start: {}", load_average());

    let mut columns = vec![Column::new("outside", "true", || Command::new(TRUE))];
    let standalone = {
        let rules = rules.clone();
        move |fresh: bool| {
            let mut command = Command::new(guard_bin());
            command.env_remove("GUARD_SOCKET").arg("run").arg("--rules");
            command.arg(&rules);
            if fresh {
                command.arg("--fresh-programs");
            }
            command.args(["--", TRUE]);
            command
        }
    };
    let warm = standalone.clone();
    let mut warm_column = Column::new(
        "guard run, warm (kept programs)",
        "guard run --rules default.rules -- true",
        move || warm(false),
    );
    // A `guard release` anywhere on the machine (every daemon test's clean-up runs one) removes
    // the kept sets no run holds: a warm round would then time a cold start. Refilled untimed.
    let refills = Rc::new(Cell::new(0));
    let refill = {
        let (refills, warm) = (refills.clone(), standalone.clone());
        move || {
            if !any_kept_set() {
                refills.set(refills.get() + 1);
                let out = warm(false).stdin(Stdio::null()).output().unwrap();
                assert!(out.status.success(), "{}", text(&out.stderr));
            }
        }
    };
    warm_column.prepare = Some(Box::new(refill));
    columns.push(warm_column);
    let cold = standalone;
    columns.push(Column::new(
        "guard run, cold",
        "guard run --rules default.rules --fresh-programs -- true",
        move || cold(true),
    ));
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: EMBEDDED_DEFAULT_RULES.to_string(),
        ..Default::default()
    });
    let socket = daemon.socket.clone();
    let mut under_daemon = Column::new(
        "guard run under the daemon",
        "guard run --socket S -- true",
        move || {
            let mut command = Command::new(guard_bin());
            command.arg("run").arg("--socket").arg(&socket);
            command.args(["--", TRUE]);
            command
        },
    );
    let daemon_pid = daemon.pid();
    under_daemon.helper_cpu = Some(Box::new(move || process_cpu_ns(daemon_pid)));
    columns.push(under_daemon);
    match codex_column(&work, &write_probe, &probe) {
        Ok(column) => columns.push(column),
        Err(why) => skip(&format!("the Codex CLI's sandbox is not measured: {why}")),
    }
    match srt_column(&work, &write_probe, &probe) {
        Ok(column) => columns.push(column),
        // Not a failure: it is a comparison, not guard.
        Err(why) => println!("srt is not measured: {why}"),
    }

    // The untimed round: fills the kept set, the tools' caches and the page cache.
    for column in &columns {
        column.start();
    }
    assert!(
        any_kept_set(),
        "no program set kept under {CACHE_ROOT} after a stand-alone run: the warm column \
         would time cold starts"
    );
    refills.set(0);

    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); columns.len()];
    for round in 0..ROUNDS {
        for i in 0..columns.len() {
            let at = (round + i) % columns.len();
            samples[at].push(columns[at].time());
        }
    }
    drop(daemon);
    let medians: Vec<Sample> = samples
        .iter()
        .map(|column| Sample {
            wall: median(column.iter().map(|s| s.wall).collect()),
            cpu: median(column.iter().map(|s| s.cpu).collect()),
        })
        .collect();
    let of = |label: &str| {
        columns
            .iter()
            .position(|c| c.label.starts_with(label))
            .map(|i| medians[i])
    };
    let outside = medians[0];
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();

    println!(
        "\n## Starting a run (`true`, median of {ROUNDS} rounds, load average at the end {})\n",
        load_average()
    );
    println!("| | command | median | ÷ outside | CPU time, median | ÷ outside |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (column, median) in columns.iter().zip(&medians) {
        println!(
            "| {} | `{}` | {} | ×{:.0} | {} | ×{:.0} |",
            column.label,
            column.shown,
            shown(median.wall),
            ratio(median.wall, outside.wall),
            shown(median.cpu),
            ratio(median.cpu, outside.cpu),
        );
    }
    println!(
        "\n(CPU time: the command's and the children it waited for, and for the daemon's \
         column the daemon's too; a machine's load moves it less than the wall-clock time.)"
    );
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    let warm = of("guard run, warm").unwrap();
    let cold = of("guard run, cold").unwrap().wall;
    let under_daemon = of("guard run under").unwrap().wall;
    println!("\ngoals (wall-clock time):");
    if let Some(codex) = of("Codex") {
        let wall = ratio(warm.wall, codex.wall);
        println!(
            "- warm guard run ÷ Codex sandbox: ×{wall:.2} (goal ≤ ×{WARM_OVER_CODEX_GOAL}): {}; \
             in CPU time ×{:.2}",
            verdict(wall <= WARM_OVER_CODEX_GOAL),
            ratio(warm.cpu, codex.cpu)
        );
    }
    println!(
        "- cold guard run: {} (goal ≤ {}): {}",
        shown(cold),
        shown(COLD_GOAL),
        verdict(cold <= COLD_GOAL)
    );
    println!(
        "- run under the daemon: {} (goal ≤ {}): {}",
        shown(under_daemon),
        shown(DAEMON_GOAL),
        verdict(under_daemon <= DAEMON_GOAL)
    );
    println!("- cold ÷ warm: ×{:.1}", ratio(cold, warm.wall));
    if refills.get() > 0 {
        println!(
            "\nthe kept program set was gone before {} of {ROUNDS} warm rounds (a `guard \
             release` elsewhere on the machine) and was refilled, untimed",
            refills.get()
        );
    }
}

/// Whether a stand-alone run left a program set under [`CACHE_ROOT`] (`KEY/SLOT`; of any key:
/// a set another guard build left would hide a missing one of this build's).
fn any_kept_set() -> bool {
    std::fs::read_dir(CACHE_ROOT).is_ok_and(|keys| {
        keys.flatten()
            .any(|key| std::fs::read_dir(key.path()).is_ok_and(|mut slots| slots.next().is_some()))
    })
}

/// `codex sandbox -- true` in `work`, its state in a home beside its install.
fn codex_column(work: &Path, write_probe: &str, probe: &Path) -> Result<Column, String> {
    let codex = CODEX.install()?;
    let home = CODEX.home("bench");
    let command = {
        let work = work.to_path_buf();
        move |args: &[&str]| {
            let mut command = Command::new(&codex);
            command
                .current_dir(&work)
                .env("CODEX_HOME", &home)
                .args(["sandbox", "--"])
                .args(args);
            command
        }
    };
    refuses_write(
        "the Codex sandbox",
        command(&["sh", "-c", write_probe]),
        probe,
    )?;
    Ok(Column::new(
        "Codex sandbox (read-only)",
        &format!("codex sandbox -- true (@openai/codex@{})", CODEX.version),
        move || command(&[TRUE]),
    ))
}

/// `srt --settings FILE true` in `work`: no network, no write beyond srt's own defaults.
fn srt_column(work: &Path, write_probe: &str, probe: &Path) -> Result<Column, String> {
    let srt = SANDBOX_RUNTIME.install()?;
    let settings: PathBuf = work.join("srt-settings.json");
    std::fs::write(
        &settings,
        r#"{"network":{"allowedDomains":[],"deniedDomains":[]},"filesystem":{"denyRead":[],"allowWrite":[],"denyWrite":[]}}"#,
    )
    .map_err(|err| err.to_string())?;
    let command = {
        let work = work.to_path_buf();
        move |args: &[&str]| {
            let mut command = Command::new(&srt);
            command
                .current_dir(&work)
                .arg("--settings")
                .arg(&settings)
                .args(args);
            command
        }
    };
    // srt says itself what it lacks (bubblewrap, socat, ripgrep, Node).
    let out = command(&[TRUE])
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("cannot start {}: {err}", SANDBOX_RUNTIME.name))?;
    if !out.status.success() {
        let said = text(&out.stderr);
        let said = said.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!(
            "`srt true` failed ({}): {}",
            out.status,
            said.unwrap_or("no output")
        ));
    }
    // srt's own `-c` runs a command line (it would take a `-c` after `sh` as its own).
    refuses_write("srt", command(&["-c", write_probe]), probe)?;
    Ok(Column::new(
        "sandbox-runtime (srt)",
        &format!(
            "srt --settings FILE true ({}@{})",
            SANDBOX_RUNTIME.name, SANDBOX_RUNTIME.version
        ),
        move || command(&[TRUE]),
    ))
}
