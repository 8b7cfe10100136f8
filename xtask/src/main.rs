//! `cargo xtask <command>`: what cargo cannot do alone (the alias is in `.cargo/config.toml`).
//!
//! - `setup`: check (and install, where it can) what the machine needs.
//! - `test`: setup, then the tests, clippy (which compiles the benchmarks), rustfmt, the fuzz targets
//!   (a bounded run of each), the package and `vm-test`.
//! - `deb`: setup, then the Debian package (target/dist), checked unpacked.
//! - `vm-test`: the kernel integration tests in a qemu VM whose kernel allows BPF LSM.
//! - `bench`: setup, then the policy and kernel enforcement benchmarks.
//! - `run`: setup, then the `guard` CLI in release mode (or a demo of the default policy).

mod cmd;
mod daemon_demo;
mod deb;
mod disk;
mod fuzz;
mod image;
mod setup;
mod test_counts;
mod vm;

use std::path::Path;
use std::process::{Command, ExitCode};

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
    /// Setup, then `cargo test` on the host crates, clippy (`--all-targets -D warnings`, which
    /// compiles the benchmarks), `cargo fmt --check`, the fuzz targets of `fuzz/` (built with nightly,
    /// 20 s each over the committed corpus), the Debian package (`deb`, checked unpacked) and
    /// `vm-test`. Every step runs; fails if any step
    /// failed. The closing `tests:` line counts the VM's tests too.
    ///
    /// Arguments after `--` go to `cargo test` (`cargo xtask test -- policy -- --nocapture`).
    Test {
        /// Passed to `cargo test` after `--workspace --exclude guard-ebpf`.
        #[arg(last = true, value_name = "CARGO_TEST_ARGS")]
        args: Vec<String>,
    },
    /// Run guard's kernel integration tests in a qemu VM whose kernel allows BPF LSM.
    ///
    /// This machine's kernel refuses BPF LSM programs, so the tests here exercise the `cgroup`
    /// backend; in the VM the same test binary exercises the `lsm` backend. Steps (cached under
    /// target/vm/ where they can be), in order:
    ///
    ///   setup      qemu-system-x86 and cpio (apt-get install --no-install-recommends)
    ///   kernel     the package linux-image-6.12-cloud-amd64 depends on: apt-get download
    ///              (not installed), vmlinuz extracted with dpkg-deb
    ///   build      guard-tests' bins and its kernel test binary (the VM runs its modules
    ///              loading, the kernel_* modules, resolver, parity), debug profile
    ///   initramfs  /init = vm-init, /tests/kernel = the test binary, /tests/modules = the
    ///              modules to run, /helpers/BIN = the other bins
    ///              (debug info stripped), their shared libraries, /bin/sh and the few
    ///              programs the tests exec, /etc/passwd, /etc/group
    ///   qemu       -accel tcg (KVM does not work here), 2 CPUs, 2 GiB, booted with
    ///              lsm=lockdown,capability,landlock,bpf; console in target/vm/console.txt
    ///
    /// In the VM, vm-init (PID 1) mounts proc, sysfs, devtmpfs, securityfs, cgroup2, bpffs and
    /// tmpfs, brings lo up, fails unless `bpf` is an active LSM, and runs the test binary once
    /// per module (`kernel_net::`) with --test-threads=1 and GUARD_TEST_BACKEND=lsm (1800 s
    /// each), printing a VM-RESULT line per module and a VM-RESULT-TOTAL line; it powers off
    /// through isa-debug-exit.
    ///
    /// Passes only when every module passed, VM-RESULT-TOTAL says ok=yes and qemu exited 1
    /// (isa-debug-exit). On failure the console is printed (at most 4000 lines of it; all of it
    /// is in target/vm/console.txt).
    #[command(verbatim_doc_comment)]
    VmTest {
        /// Run only this module of guard-tests' kernel tests (repeatable, e.g. kernel_net);
        /// default: the VM list.
        #[arg(long = "test", value_name = "NAME")]
        tests: Vec<String>,
        /// Seconds (wall clock) qemu may run before it is killed.
        #[arg(long, value_name = "SECS", default_value_t = vm::Options::default().timeout_secs)]
        timeout: u64,
        /// Echo the whole console, not only vm-init's VM- lines.
        #[arg(long, short)]
        verbose: bool,
        /// Add a word to the kernel command line (repeatable): `guard.test_timeout=SECS` sets
        /// vm-init's limit per module (default 1800); a later `lsm=...` replaces guard's.
        #[arg(long = "kernel-arg", value_name = "WORD")]
        kernel_args: Vec<String>,
    },
    /// Setup, then the benchmarks: `cargo bench -p guard-user --bench policy` (criterion: parse
    /// and check times, the check ratio of 100 000 rules ÷ 100, and `guard check`'s peak
    /// RSS), then `cargo bench -p guard-tests --bench enforcement` (what kernel
    /// enforcement costs fork+exec, a loopback connect and getppid with 10 to 100 000 rules;
    /// needs root, else it says why and is skipped; results also in
    /// target/bench/enforcement.json), then `cargo bench -p guard-tests --bench resolver`
    /// (guard's resolver: refused resolve-then-connect cycles against a rotating name server,
    /// latency per query and queries a second; needs root; target/bench/resolver.json), then
    /// `cargo bench -p guard-tests --bench names` (10 and 100 000 network_rule hosts: session
    /// start, a ruled lookup, peak RSS, the daemon's reload; needs root; target/bench/names.json),
    /// then `cargo bench -p guard-tests --bench hold` (what holding prompted execs costs the calls
    /// that are not prompted: exec, getppid and connect ratios; target/bench/hold.json), then
    /// `cargo bench -p guard-tests --bench daemon` (the
    /// daemon's status, reload, amend and approve round trips, and a reload under a flood of
    /// refusals; needs root), then `cargo bench -p guard-tests --bench start` (how long `true`
    /// takes to start under `guard run` warm, cold and under a daemon, against `true` alone,
    /// the Codex CLI's sandbox and Anthropic's sandbox-runtime, both installed with npm under
    /// target/; needs root). Every benchmark runs; fails if any failed.
    ///
    /// Arguments after `--` go to each `cargo bench` (`cargo xtask bench -- check/`). A first
    /// argument `policy`, `enforcement`, `escapes`, `hold`, `resolver`, `names`, `daemon`,
    /// `audit` or `start` runs only that one, the rest going to its `cargo bench`
    /// (`cargo xtask bench -- enforcement -- --quick`).
    Bench {
        /// Passed to `cargo bench` (a benchmark filter, or `-- --quick`...).
        #[arg(last = true, value_name = "CARGO_BENCH_ARGS")]
        args: Vec<String>,
    },
    /// Setup, then a Debian package: target/dist/guard_VERSION_ARCH.deb (the release binary,
    /// stripped, with its debug info split off into target/dist/guard.debug; the systemd unit;
    /// guard.toml as a conffile; man pages and bash, zsh and fish completions), then checked:
    /// its contents, its conffile, and the packaged binary run unpacked.
    Deb,
    /// Setup, then guard's container image for deploy/kubernetes: target/dist/guard-image.tar,
    /// an OCI archive tagged guard:latest holding the release binary, its shared libraries and
    /// busybox-static (nothing pulled from a registry); checked by loading it into podman and
    /// running `guard --version` in it. Load it on a node with
    /// `ctr -n k8s.io images import target/dist/guard-image.tar` or `podman load -i ...`.
    Image,
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
    cmd::put_cargo_bin_on_path();
    cmd::no_incremental_under_ci();
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::setup(
            &[Need::Build, Need::Test, Need::VmTest, Need::Bench],
            Report::Stdout,
        )
        .map(|()| 0),
        Task::Test { args } => test(&args),
        Task::VmTest {
            tests,
            timeout,
            verbose,
            kernel_args,
        } => vm_test(vm::Options {
            tests,
            timeout_secs: timeout,
            verbose,
            kernel_args,
        }),
        Task::Bench { args } => bench(&args),
        Task::Deb => setup::setup(&[Need::Build], Report::Stderr)
            .and_then(|()| deb::check())
            .map(|()| 0),
        Task::Image => setup::setup(&[Need::Build, Need::Test], Report::Stderr)
            .and_then(|()| build_guard())
            .and_then(|binary| image::build(&binary))
            .and_then(|archive| {
                image::check(&archive)?;
                eprintln!("image: {}", archive.display());
                Ok(0)
            }),
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
    let target = disk::target_or_default();
    disk::report(&target);
    setup::setup(&[Need::Build, Need::Test], Report::Stderr)?;
    let mut tests = cmd::cargo(["test"].iter().chain(&HOST_WORKSPACE));
    tests.args(args);
    // The Kubernetes tier runs beside the VM tier (below), with its API server built then.
    if !args.iter().any(|a| a == "--") {
        tests.arg("--");
    }
    tests.args(["--skip", KUBERNETES_TESTS]);
    // The benchmarks are not built here: clippy's `--all-targets` compiles them, so they do not
    // rot, and their release build was a sixth of a CI run; `cargo xtask bench` runs them.
    let steps = [
        ("tests", tests),
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
        // fuzz/ is a workspace of its own, which `--all` does not reach.
        (
            "rustfmt (fuzz/)",
            cmd::cargo([
                "fmt",
                "--manifest-path",
                "fuzz/Cargo.toml",
                "--all",
                "--",
                "--check",
            ]),
        ),
    ];
    let mut failed = Vec::new();
    let mut counts = test_counts::TestCounts::default();
    let started = std::time::Instant::now();
    // Each step's time, said as it ends, so a slow CI run says where its time went.
    let took = |since: std::time::Instant| {
        let secs = since.elapsed().as_secs();
        format!("{}m {:02}s", secs / 60, secs % 60)
    };
    for (name, mut command) in steps {
        eprintln!("==> {name}");
        let step_started = std::time::Instant::now();
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
                disk::report(&target);
                failed.push(name);
            }
            Err(err) => {
                eprintln!("==> {name}: FAILED ({err:#})");
                disk::report(&target);
                failed.push(name);
            }
        }
        eprintln!("==> {name}: took {}", took(step_started));
    }
    // The Debian package builds and holds what it should (a release build).
    eprintln!("==> package");
    let step_started = std::time::Instant::now();
    if let Err(err) = deb::check() {
        eprintln!("==> package: FAILED ({err:#})");
        disk::report(&target);
        failed.push("package");
    }
    eprintln!("==> package: took {}", took(step_started));
    // Bad input, fuzzed (each target a bounded time over its committed corpus), beside the VM
    // tier: qemu's single-threaded emulation leaves one core free, which the fuzz build takes.
    let fuzz_log = target.join("fuzz-step.log");
    eprintln!(
        "==> fuzz: beside vm-test, on one core (its output: {})",
        fuzz_log.display()
    );
    let fuzzing = std::thread::spawn({
        let (target, fuzz_log) = (target.clone(), fuzz_log.clone());
        move || fuzz::run(&target, &fuzz_log, 1)
    });
    // Beside it too: the Kubernetes tier, with kube-apiserver built first where this machine
    // has none yet (once per machine, into a cache outside the clone).
    let kubernetes_log = target.join("kubernetes-step.log");
    eprintln!(
        "==> kubernetes: beside vm-test (its output: {})",
        kubernetes_log.display()
    );
    let kubernetes = std::thread::spawn({
        let kubernetes_log = kubernetes_log.clone();
        move || kubernetes_tier(&kubernetes_log)
    });
    // Last, as the slowest: the same kernel tests again, in a VM, against the `lsm` backend.
    eprintln!("==> vm-test");
    let step_started = std::time::Instant::now();
    match vm::run(&vm::Options::default()) {
        Ok(outcome) => {
            counts.add(outcome.counts);
            if !outcome.passed {
                eprintln!("==> vm-test: FAILED");
                failed.push("vm-test");
            }
        }
        Err(err) => {
            eprintln!("==> vm-test: FAILED ({err:#})");
            disk::report(&target);
            // Its tests did not run: one failure, so the total below never reads clean.
            counts.failed += 1;
            failed.push("vm-test");
        }
    }
    eprintln!("==> vm-test: took {}", took(step_started));
    let fuzzed = fuzzing
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the fuzz step panicked")));
    match fuzzed {
        Ok(()) => eprintln!("==> fuzz: passed ({})", cmd::tail(&fuzz_log, 12)),
        Err(err) => {
            eprintln!("{}", cmd::tail(&fuzz_log, 60));
            eprintln!("==> fuzz: FAILED ({err:#})");
            failed.push("fuzz");
        }
    }
    match kubernetes
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the kubernetes step panicked")))
    {
        Ok(found) => {
            eprintln!(
                "==> kubernetes: {} passed, {} failed, {} skipped ({})",
                found.passed,
                found.failed,
                found.ignored,
                cmd::tail(&kubernetes_log, 3)
            );
            if found.failed > 0 {
                eprintln!("{}", cmd::tail(&kubernetes_log, 80));
                failed.push("kubernetes");
            }
            counts.add(found);
        }
        Err(err) => {
            eprintln!("{}", cmd::tail(&kubernetes_log, 80));
            eprintln!("==> kubernetes: FAILED ({err:#})");
            counts.failed += 1;
            failed.push("kubernetes");
        }
    }
    // One closing total for people and for CI, which reads the last result line.
    println!(
        "tests: {} passed, {} failed, {} skipped",
        counts.passed, counts.failed, counts.ignored
    );
    eprintln!("==> every step: took {}", took(started));
    if failed.is_empty() {
        eprintln!("==> all steps passed");
        Ok(0)
    } else {
        anyhow::bail!("failed steps: {}", failed.join(", "))
    }
}

/// The kernel tests of the Kubernetes tier (`tests/tests/kernel/kubernetes.rs`).
const KUBERNETES_TESTS: &str = "kubernetes::";

/// The Kubernetes tier: its setup (etcd, kubectl, kube-apiserver built once per machine), then
/// its tests, all written to `log`; the counts of its tests.
fn kubernetes_tier(log: &Path) -> Result<test_counts::TestCounts> {
    setup::setup(&[Need::Kubernetes], Report::Stderr)?;
    let file = std::fs::File::create(log)
        .map_err(|err| anyhow::anyhow!("creating {}: {err}", log.display()))?;
    let mut tests = cmd::cargo([
        "test",
        "-p",
        "guard-tests",
        "--test",
        "kernel",
        "--",
        KUBERNETES_TESTS,
    ]);
    tests.stdout(file.try_clone()?).stderr(file);
    let status = cmd::status(&mut tests)?;
    let mut counts = test_counts::TestCounts::default();
    for line in std::fs::read_to_string(log)?.lines() {
        counts.add_line(line);
    }
    if !status.success() && counts.failed == 0 {
        anyhow::bail!("its tests did not run ({status})");
    }
    if counts.passed == 0 {
        anyhow::bail!("it ran no test");
    }
    // The DaemonSet's image, from the release binary the package step built: made, loaded
    // into podman and run.
    let binary = vm::target_directory()?.join("release").join("guard");
    let archive = image::build(&binary)?;
    image::check(&archive)?;
    Ok(counts)
}

fn vm_test(options: vm::Options) -> Result<i32> {
    setup::setup(&[Need::Build], Report::Stderr)?;
    let outcome = vm::run(&options)?;
    Ok(if outcome.passed { 0 } else { 1 })
}

/// `cargo xtask bench`'s benchmarks, in the order they run: (name, package).
const BENCHES: [(&str, &str); 9] = [
    ("policy", "guard-user"),
    ("enforcement", "guard-tests"),
    ("escapes", "guard-tests"),
    ("hold", "guard-tests"),
    ("resolver", "guard-tests"),
    ("names", "guard-tests"),
    ("daemon", "guard-tests"),
    ("audit", "guard-tests"),
    ("start", "guard-tests"),
];

fn bench(args: &[String]) -> Result<i32> {
    setup::setup(&[Need::Build, Need::Bench], Report::Stderr)?;
    // A first argument naming one of them selects it; the rest go to its `cargo bench`.
    let (selected, args) = match args.split_first() {
        Some((first, rest)) if BENCHES.iter().any(|(name, _)| name == first) => {
            (vec![first.as_str()], rest)
        }
        _ => (BENCHES.iter().map(|(name, _)| *name).collect(), args),
    };
    let mut code = 0;
    for (name, package) in BENCHES.iter().filter(|(name, _)| selected.contains(name)) {
        if matches!(*name, "daemon" | "audit" | "names" | "start") {
            // It drives the release `guard` binary, which `cargo bench` does not build.
            cmd::status(&mut cmd::cargo([
                "build",
                "--release",
                "-p",
                "guard-user",
                "--bin",
                "guard",
            ]))?;
        }
        let status = cmd::status(cmd::cargo(["bench", "-p", package, "--bench", name]).args(args))?;
        if !status.success() && code == 0 {
            code = cmd::exit_code(status);
        }
    }
    Ok(code)
}

/// Builds the release `guard`, with cargo's progress on the terminal: the first build compiles
/// some 300 crates and the BPF programs (minutes on 2 cores; README, "On a fresh machine"),
/// later ones take seconds. The binary's path.
fn build_guard() -> Result<std::path::PathBuf> {
    let release = vm::target_directory()?.join("release").join("guard");
    if !release.exists() {
        eprintln!(
            "building guard (release) for the first time: about 5 minutes on 2 cores (its \
             dependencies, then the BPF programs with nightly Rust and bpf-linker); later builds \
             reuse it"
        );
    }
    cmd::run(&mut cmd::cargo([
        "build",
        "--release",
        "-p",
        "guard-user",
        "--bin",
        "guard",
    ]))?;
    Ok(release)
}

/// `guard ARGS...`, the binary [`build_guard`] built.
fn guard<S: AsRef<str>>(binary: &Path, args: &[S]) -> Result<std::process::ExitStatus> {
    cmd::status(Command::new(binary).args(args.iter().map(AsRef::as_ref)))
}

fn run(args: &[String]) -> Result<i32> {
    setup::setup(&[Need::Build], Report::Stderr)?;
    let binary = build_guard()?;
    Ok(cmd::exit_code(guard(&binary, args)?))
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
    // The kernel holds the same policy: `git status` runs, `git push` (a `prompt` rule) is
    // killed before it runs. The remote does not exist, so even an unguarded push does nothing.
    &[
        "run",
        "--",
        "sh",
        "-c",
        "git status --short >/dev/null && echo 'git status: ran'; \
         git push --dry-run guard-demo-no-such-remote main; echo \"git push: exit status $?\"",
    ],
];

fn demo() -> Result<i32> {
    setup::setup(&[Need::Build], Report::Stderr)?;
    let release = build_guard()?;
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
        let status = guard(&release, args)?;
        if !status.success() && code == 0 {
            code = cmd::exit_code(status);
        }
    }
    // The same policy under the daemon: the push held while it asks, approved, going on.
    let daemon = daemon_demo::run(&release)?;
    Ok(if code == 0 { daemon } else { code })
}
