//! `cargo xtask vm-test`: guard's kernel integration tests on a kernel that allows BPF LSM, booted
//! under qemu, so the same tests that exercise the `cgroup` backend on the project's machines
//! exercise the `lsm` backend too (docs/design.md, "Backends" and "Kernel facts"; this module records
//! how this was found to work, and what did not).
//!
//! The steps, each cached where it can be:
//!
//! 1. set-up: `qemu-system-x86` and `cpio` (setup items of [`Need::VmTest`]);
//! 2. kernel: the Debian package that [`kernel::KERNEL_META_PACKAGE`] depends on, downloaded with
//!    `apt-get download` into `target/vm/` (never installed) and its `vmlinuz` extracted;
//! 3. binaries: guard-tests' kernel test binary ([`KERNEL_TESTS`]: all its privileged tests, a
//!    module per area) and its bins (`vm-init` and the helpers the tests spawn), debug profile,
//!    host target; the modules to run are those of [`VM_TESTS`] (or `--test NAME`);
//! 4. initramfs: `/init` = vm-init, `/tests/kernel` = the test binary, `/tests/modules` = the
//!    modules to run, one a line, `/helpers/<bin>` = each other bin, the shared libraries they
//!    and a few programs the tests exec ([`initramfs::GUEST_PROGRAMS`]) need, `/etc/passwd` and
//!    `/etc/group`;
//! 5. qemu (software emulation: KVM does not work on the project's machines), console captured
//!    to `target/vm/console.txt`; vm-init runs the binary once per module (`kernel_net::`,
//!    `--test-threads=1`, a time limit each), prints one `VM-RESULT:` line per module and a
//!    `VM-RESULT-TOTAL:` line, then leaves through `isa-debug-exit` (qemu exits 1 = all passed).
//!
//! The verdict needs both the lines and the exit status: either alone has been seen to lie (qemu
//! exits 0 on a kernel panic; a missing line can mean the VM never got that far).

mod build;
mod initramfs;
mod kernel;
mod qemu;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::cmd;
use crate::setup::{self, Need, Report};
use crate::test_counts::TestCounts;

/// guard-tests' test binary of the privileged tier (`tests/tests/kernel/main.rs`).
pub const KERNEL_TESTS: &str = "kernel";

/// The modules of [`KERNEL_TESTS`] (`tests/tests/kernel/<name>.rs`) that run in the VM, each on
/// its own as the binary's filter `<name>::` picks it. A name with no such module yet is skipped
/// with a note, so a module can be listed before it is written. `kernel_patterns` takes about
/// 280 s here under emulation (its table builds are userspace and slow there; they were past the
/// 900 s bound before one rule set's globs became one pattern).
pub const VM_TESTS: &[&str] = &[
    "loading",
    "kernel_exec",
    "kernel_patterns",
    "kernel_net",
    "kernel_approvals",
    "kernel_pins",
    "kernel_files",
    "kernel_escapes",
    // Kept program sets on the `lsm` backend: its LSM programs reopened from their pins.
    "kept_programs",
    "resolver",
    "parity",
    // The follower program sets of overlays on the `lsm` backend (their LSM hooks decide
    // beside the daemon's; their cgroup programs are not attached there).
    "daemon_overlay",
    // The health contract where the file hooks exist: `--require files` runs.
    "layers",
];

/// What `vm::run` is asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    /// Only these modules of [`KERNEL_TESTS`] (names from [`VM_TESTS`] or any other of its
    /// modules); empty: all of [`VM_TESTS`] that exist.
    pub tests: Vec<String>,
    /// Wall-clock seconds qemu may run before it is killed.
    pub timeout_secs: u64,
    /// Echo the whole console, not only vm-init's `VM-` lines.
    pub verbose: bool,
    /// Words added to the end of [`qemu::KERNEL_CMDLINE`] (`guard.test_timeout=SECS` for
    /// vm-init's limit on each module's run; a later `lsm=` replaces the earlier one).
    pub kernel_args: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tests: Vec::new(),
            // Ten modules run one after another under emulation (TCG), each loading guard's
            // programs many times; a bound for a hung VM, not a measure of speed.
            timeout_secs: 3600,
            verbose: false,
            kernel_args: Vec::new(),
        }
    }
}

/// How a run ended: its test counts (for `cargo xtask test`'s total) and the verdict.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    pub counts: TestCounts,
    pub passed: bool,
}

/// Runs all the steps and prints a `vm-test: PASS|FAIL ...` summary line. An error means the VM
/// could not be prepared or started (a missing tool, no kernel package...), not a test failure.
pub fn run(options: &Options) -> Result<Outcome> {
    prepare(options)?.boot()
}

/// A VM ready to boot: its kernel, binaries and initramfs made ([`prepare`]), so the boot,
/// which builds nothing, can run beside other work ([`Prepared::boot`]).
pub struct Prepared {
    options: Options,
    dirs: Dirs,
    kernel: PathBuf,
    binaries: build::Binaries,
    initramfs: PathBuf,
    start: Instant,
    times: Vec<(&'static str, std::time::Duration)>,
}

/// The steps before the boot: set-up, the kernel, the binaries (cargo), the initramfs.
pub fn prepare(options: &Options) -> Result<Prepared> {
    let start = Instant::now();
    let mut times = Vec::new();
    let mut step = |name: &'static str, since: Instant| times.push((name, since.elapsed()));

    let t = Instant::now();
    setup::setup(&[Need::VmTest], Report::Stderr)?;
    step("setup", t);

    let dirs = Dirs::new()?;
    let t = Instant::now();
    let kernel = kernel::kernel(&dirs).context("getting the VM's kernel")?;
    step("kernel", t);

    let t = Instant::now();
    let binaries = build::build(options).context("building the VM's binaries")?;
    step("build", t);

    let t = Instant::now();
    let initramfs = initramfs::initramfs(&dirs, &binaries).context("making the initramfs")?;
    step("initramfs", t);
    Ok(Prepared {
        options: options.clone(),
        dirs,
        kernel,
        binaries,
        initramfs,
        start,
        times,
    })
}

impl Prepared {
    /// Boots the VM, runs the modules, and prints the verdict.
    pub fn boot(self) -> Result<Outcome> {
        let Prepared {
            options,
            dirs,
            kernel,
            binaries,
            initramfs,
            start,
            mut times,
        } = self;
        let t = Instant::now();
        let boot = qemu::boot(&dirs, &kernel, &initramfs, &options).context("running qemu")?;
        times.push(("qemu", t.elapsed()));

        let verdict = qemu::Verdict::new(&boot, &binaries.modules);
        let times = times
            .iter()
            .map(|(name, took)| format!("{name} {:.1} s", took.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ");
        eprintln!(
            "vm-test: times: {times}; total {:.1} s",
            start.elapsed().as_secs_f64()
        );
        if !verdict.passed {
            if !options.verbose {
                echo_console(&boot.console, &dirs.console());
            }
            if !boot.qemu_stderr.trim().is_empty() {
                eprintln!("vm-test: qemu's stderr:\n{}", boot.qemu_stderr.trim_end());
            }
            for problem in &verdict.problems {
                eprintln!("vm-test: {problem}");
            }
        }
        println!(
            "vm-test: {} ({} passed, {} failed, {} ignored in {} modules; qemu {})",
            if verdict.passed { "PASS" } else { "FAIL" },
            verdict.counts.passed,
            verdict.counts.failed,
            verdict.counts.ignored,
            binaries.modules.len(),
            boot.exit,
        );
        Ok(Outcome {
            counts: verdict.counts,
            passed: verdict.passed,
        })
    }
}

/// At most this many console lines are echoed on failure (a verifier log runs to thousands of
/// lines per test, and each failing test prints its own); the file always has them all.
const CONSOLE_ECHO_LINES: usize = 4000;

/// The console on failure: whole, or its start (the boot) and its end (libtest's summaries).
fn echo_console(console: &str, path: &Path) {
    let lines: Vec<&str> = console.lines().collect();
    if lines.len() <= CONSOLE_ECHO_LINES {
        eprintln!("vm-test: the whole console ({}):", path.display());
        eprintln!("{console}");
        return;
    }
    let (head, tail) = (CONSOLE_ECHO_LINES / 4, CONSOLE_ECHO_LINES * 3 / 4);
    eprintln!(
        "vm-test: the console's first {head} and last {tail} of {} lines (all in {}):",
        lines.len(),
        path.display()
    );
    eprintln!("{}", lines[..head].join("\n"));
    eprintln!(
        "[... {} lines left out: see {} ...]",
        lines.len() - head - tail,
        path.display()
    );
    eprintln!("{}", lines[lines.len() - tail..].join("\n"));
}

/// Where everything goes: `target/vm/` of the workspace's target directory.
struct Dirs {
    vm: PathBuf,
}

impl Dirs {
    fn new() -> Result<Dirs> {
        let vm = target_directory()?.join("vm");
        std::fs::create_dir_all(&vm).with_context(|| format!("creating {}", vm.display()))?;
        Ok(Dirs { vm })
    }

    fn console(&self) -> PathBuf {
        self.vm.join("console.txt")
    }
}

/// cargo's target directory (honours `CARGO_TARGET_DIR` and `build.target-dir`).
pub fn target_directory() -> Result<PathBuf> {
    let metadata = cargo_metadata()?;
    let dir = metadata["target_directory"]
        .as_str()
        .context("`cargo metadata` gave no target_directory")?;
    Ok(PathBuf::from(dir))
}

fn cargo_metadata() -> Result<serde_json::Value> {
    let output = cmd::cargo(["metadata", "--no-deps", "--format-version", "1"])
        .stderr(Stdio::inherit())
        .output()
        .context("could not run `cargo metadata`")?;
    anyhow::ensure!(output.status.success(), "`cargo metadata` failed");
    serde_json::from_slice(&output.stdout).context("parsing `cargo metadata`")
}

fn remove_dir_if_present(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(err).with_context(|| format!("removing {}", dir.display()))
        }
        _ => Ok(()),
    }
}
