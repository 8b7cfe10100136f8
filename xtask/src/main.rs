//! `cargo xtask <command>`: what cargo cannot do alone (the alias is in `.cargo/config.toml`).
//!
//! - `setup`: check (and install, where it can) what the machine needs.
//! - `test`: setup, then the tests, the benchmarks' build, clippy and rustfmt.
//! - `bench`: setup, then the policy benchmarks.
//! - `run`: setup, then the `guard` CLI in release mode (or a demo of the default policy).

mod cmd;
mod setup;
mod test_counts;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use setup::{Need, Report};

#[derive(Parser, Debug)]
#[command(name = "xtask", bin_name = "cargo xtask", about = "guard's development tasks.", long_about = None)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Check for (and install, if missing and possible) what building and testing guard needs.
    /// Idempotent: prints one line per item, `ok` or `installed`.
    Setup,
    /// Setup, then `cargo test` on the host crates, a build of the benchmarks, clippy
    /// (`-D warnings`) and `cargo fmt --check`. Every step runs; fails if any step failed.
    ///
    /// Arguments after `--` go to `cargo test` (`cargo xtask test -- policy -- --nocapture`).
    Test {
        /// Passed to `cargo test` after `--workspace --exclude guard-ebpf`.
        #[arg(last = true, value_name = "CARGO_TEST_ARGS")]
        args: Vec<String>,
    },
    /// Setup, then `cargo bench -p guard-user --bench policy`.
    ///
    /// Arguments after `--` go to `cargo bench` (`cargo xtask bench -- check/`).
    Bench {
        /// Passed to `cargo bench` (a benchmark filter, or `-- --quick`...).
        #[arg(last = true, value_name = "CARGO_BENCH_ARGS")]
        args: Vec<String>,
    },
    /// Setup, then `guard ARGS...` (built with `--release`), exiting with its status.
    ///
    /// Without arguments: a demo of the embedded default policy (`policy show`, then a few
    /// `check`s). Example: `cargo xtask run -- check --json -- git status`.
    Run {
        /// The `guard` command line; none for the demo.
        #[arg(last = true, value_name = "GUARD_ARGS")]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::setup(&[Need::Build, Need::Test], Report::Stdout).map(|()| 0),
        Task::Test { args } => test(&args),
        Task::Bench { args } => bench(&args),
        Task::Run { args } if args.is_empty() => demo(),
        Task::Run { args } => run(&args),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The host crates: every member but `guard-ebpf`, which only builds for the BPF target.
const HOST_WORKSPACE: [&str; 3] = ["--workspace", "--exclude", "guard-ebpf"];

fn test(args: &[String]) -> Result<i32> {
    setup::setup(&[Need::Build, Need::Test], Report::Stderr)?;
    let mut tests = cmd::cargo(["test"].iter().chain(&HOST_WORKSPACE));
    tests.args(args);
    let steps = [
        ("tests", tests),
        // Benchmarks are only built, so they do not rot; `cargo xtask bench` runs them.
        (
            "benchmarks build",
            cmd::cargo(["bench", "--no-run", "-p", "guard-user"]),
        ),
        (
            "clippy",
            cmd::cargo(["clippy"].iter().chain(&HOST_WORKSPACE).chain(&[
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])),
        ),
        ("rustfmt", cmd::cargo(["fmt", "--all", "--", "--check"])),
    ];
    let mut failed = Vec::new();
    let mut counts = test_counts::TestCounts::default();
    for (name, mut command) in steps {
        eprintln!("==> {name}");
        let status = if name == "tests" {
            test_counts::status_counting(&mut command).map(|(status, found)| {
                counts = found;
                status
            })
        } else {
            cmd::status(&mut command)
        };
        match status {
            Ok(status) if status.success() => {}
            Ok(status) => {
                eprintln!("==> {name}: FAILED ({status})");
                failed.push(name);
            }
            Err(err) => {
                eprintln!("==> {name}: FAILED ({err:#})");
                failed.push(name);
            }
        }
    }
    // One closing total for people and for CI, which reads the last result line.
    println!(
        "tests: {} passed, {} failed, {} skipped",
        counts.passed, counts.failed, counts.ignored
    );
    if failed.is_empty() {
        eprintln!("==> all steps passed");
        Ok(0)
    } else {
        anyhow::bail!("failed steps: {}", failed.join(", "))
    }
}

fn bench(args: &[String]) -> Result<i32> {
    setup::setup(&[Need::Build], Report::Stderr)?;
    let status =
        cmd::status(cmd::cargo(["bench", "-p", "guard-user", "--bench", "policy"]).args(args))?;
    Ok(cmd::exit_code(status))
}

/// `cargo run --release --quiet -p guard-user --bin guard -- ARGS...`
fn guard<S: AsRef<str>>(args: &[S]) -> Result<std::process::ExitStatus> {
    let mut command = cmd::cargo([
        "run",
        "--release",
        "--quiet",
        "-p",
        "guard-user",
        "--bin",
        "guard",
        "--",
    ]);
    command.args(args.iter().map(AsRef::as_ref));
    cmd::status(&mut command)
}

fn run(args: &[String]) -> Result<i32> {
    setup::setup(&[Need::Build], Report::Stderr)?;
    Ok(cmd::exit_code(guard(args)?))
}

/// What `cargo xtask run` shows with no arguments: the embedded default policy, then how it
/// decides a few commands.
const DEMO: &[&[&str]] = &[
    &["policy", "show"],
    &["check", "--fallback", "heuristics", "--", "git", "status"],
    &[
        "check",
        "--fallback",
        "heuristics",
        "--",
        "git",
        "push",
        "origin",
        "main",
    ],
    &["check", "--fallback", "heuristics", "--", "rm", "-rf", "/"],
    &[
        "check",
        "--fallback",
        "heuristics",
        "--split-shell",
        "--",
        "bash",
        "-lc",
        "ls && rm -rf /",
    ],
];

fn demo() -> Result<i32> {
    setup::setup(&[Need::Build], Report::Stderr)?;
    let mut code = 0;
    for (i, args) in DEMO.iter().enumerate() {
        if i > 0 {
            println!();
        }
        let line = std::iter::once("guard")
            .chain(args.iter().copied())
            .map(cmd::quote)
            .collect::<Vec<_>>()
            .join(" ");
        println!("=== {line}");
        let status = guard(args)?;
        if !status.success() && code == 0 {
            code = cmd::exit_code(status);
        }
    }
    Ok(code)
}
