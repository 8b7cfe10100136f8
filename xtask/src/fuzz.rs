//! The `fuzz` step of `cargo xtask test`: builds the cargo-fuzz targets in `fuzz/` (nightly,
//! libFuzzer; a development build with no sanitizer, as the targets reach safe Rust only and
//! an optimised, AddressSanitizer build takes several times as long) and runs each for a bounded
//! time over its committed corpus
//! (`fuzz/corpus/TARGET`). A crash, a timeout on one input or an input that takes too much
//! memory fails the step; libFuzzer saves that input in `fuzz/artifacts/TARGET/` and prints the
//! command that reruns it. docs/design.md ("Fuzzing") says how to run a target longer.

use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd;

/// The targets, in the order they run (`fuzz/Cargo.toml`'s `[[bin]]`s).
pub const TARGETS: [&str; 3] = ["rules_file", "control_request", "resolver"];
/// Seconds each target runs (after its corpus is loaded).
const SECONDS_EACH: u32 = 20;
/// libFuzzer's bounds on one run: its memory, and one input's time.
const RSS_LIMIT_MB: u32 = 1024;
const TIMEOUT_SECS: u32 = 5;

/// Builds and runs every target; `target` is the main workspace's target directory, under which
/// the fuzz build (`target/fuzz`) and what the runs add to the corpus (`target/fuzz/corpus`)
/// are kept, so they are cached and cleaned with the rest of the build. Everything the commands
/// print goes to `log`, so the step can run beside another; `jobs` bounds the build.
pub fn run(target: &Path, log: &Path, jobs: u32) -> Result<()> {
    let fuzz_target = target.join("fuzz");
    let log = std::fs::File::create(log)?;
    let status = |command: &mut Command| -> Result<std::process::ExitStatus> {
        use std::io::Write;
        writeln!(&log, "$ {}", cmd::display(command))?;
        command
            .env("CARGO_BUILD_JOBS", jobs.to_string())
            .stdout(log.try_clone()?)
            .stderr(log.try_clone()?)
            .status()
            .map_err(Into::into)
    };
    let built = status(&mut nightly_fuzz("build", &fuzz_target))?;
    if !built.success() {
        bail!("building the fuzz targets failed ({built})");
    }
    let mut failed = Vec::new();
    for name in TARGETS {
        // New inputs go to the scratch folder (the first); the committed seeds are only read.
        let scratch = fuzz_target.join("corpus").join(name);
        std::fs::create_dir_all(&scratch)?;
        let mut run = nightly_fuzz("run", &fuzz_target);
        run.arg(name)
            .arg(&scratch)
            .arg(cmd::workspace_root().join("fuzz/corpus").join(name))
            .arg("--")
            .arg(format!("-max_total_time={SECONDS_EACH}"))
            .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
            .arg(format!("-timeout={TIMEOUT_SECS}"))
            .arg("-print_final_stats=1");
        if !status(&mut run)?.success() {
            failed.push(name);
        }
    }
    if !failed.is_empty() {
        bail!(
            "fuzz targets failed: {} (the input is in fuzz/artifacts/TARGET/; rerun it with \
             `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/FILE`)",
            failed.join(", ")
        );
    }
    Ok(())
}

/// `cargo fuzz SUBCOMMAND` on the nightly toolchain, for `fuzz/`, building into `fuzz_target`.
fn nightly_fuzz(subcommand: &str, fuzz_target: &Path) -> Command {
    let mut command = Command::new("rustup");
    command
        .args([
            "run",
            "nightly",
            "cargo",
            "fuzz",
            subcommand,
            "--fuzz-dir",
            "fuzz",
            "--sanitizer",
            "none",
            // Unoptimised, with debug assertions and overflow checks: a third of a release
            // build's time, and 20 s of runs need no speed.
            "--dev",
        ])
        .arg("--target-dir")
        .arg(fuzz_target)
        .current_dir(cmd::workspace_root())
        // The targets call the library only: no BPF object (guard-user/build.rs).
        .env("AYA_BUILD_SKIP", "1")
        // xtask runs under stable cargo, which would otherwise be the cargo cargo-fuzz runs.
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTUP_TOOLCHAIN");
    command
}
