//! Step 5 of `vm-test`: qemu, the console, and the verdict from both.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use super::{Dirs, Options};
use crate::cmd;
use crate::test_counts::TestCounts;

/// The kernel command line. `lsm=` must name `bpf` (without it LSM programs load, attach and
/// never run); `panic=-1` with `-no-reboot` turns a kernel panic into a qemu exit.
pub const KERNEL_CMDLINE: &str =
    "console=ttyS0 lsm=lockdown,capability,landlock,bpf panic=-1 quiet";

/// One qemu run, as seen from outside.
pub struct Boot {
    /// The console, without carriage returns and terminal escapes.
    pub console: String,
    pub qemu_stderr: String,
    pub exit: QemuExit,
}

/// What qemu's exit status means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QemuExit {
    /// vm-init wrote 0 to isa-debug-exit: qemu exits 1.
    DebugExitPass,
    /// vm-init wrote 1: qemu exits 3.
    DebugExitFail,
    /// A plain power-off, or a kernel panic with `panic=-1 -no-reboot`.
    PoweredOff,
    /// `timeout` killed it.
    TimedOut(u64),
    Other(i32),
}

impl std::fmt::Display for QemuExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QemuExit::DebugExitPass => write!(f, "exit 1: vm-init reported success"),
            QemuExit::DebugExitFail => write!(f, "exit 3: vm-init reported failure"),
            QemuExit::PoweredOff => {
                write!(
                    f,
                    "exit 0: powered off without isa-debug-exit, or a kernel panic"
                )
            }
            QemuExit::TimedOut(secs) => write!(f, "killed after {secs} s"),
            QemuExit::Other(code) => write!(f, "exit {code}"),
        }
    }
}

pub fn boot(dirs: &Dirs, kernel: &Path, initramfs: &Path, options: &Options) -> Result<Boot> {
    let mut command = Command::new("timeout");
    // qemu hangs instead of exiting on some failures (a KVM emulation error, for one).
    command
        .args(["--kill-after=10", &options.timeout_secs.to_string()])
        .args([
            "qemu-system-x86_64",
            // One host thread for all vCPUs: under multi-threaded TCG a vCPU can run a
            // stale translation of code the kernel is live-patching (a BPF LSM trampoline
            // attached while another CPU execs), hit the patch's int3 after the patch is
            // done and panic (`Oops: int3` in `bpf_lsm_file_open`, seen once in CI). Real
            // CPUs serialize that patching; single-threaded TCG does too.
            "-accel",
            "tcg,thread=single",
            "-m",
            "2G",
            "-smp",
            "2",
        ])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initramfs)
        .arg("-append")
        .arg(
            std::iter::once(KERNEL_CMDLINE)
                .chain(options.kernel_args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
        )
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let line = cmd::display(&command);
    eprintln!("$ {line}");
    let mut child = command
        .spawn()
        .with_context(|| format!("could not start `{line}`"))?;
    let mut stderr = child.stderr.take().expect("stderr was piped");
    let stderr_reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    });
    let console_path = dirs.console();
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&console_path)
            .with_context(|| format!("creating {}", console_path.display()))?,
    );
    let mut console = String::new();
    let mut reader = BufReader::new(child.stdout.take().expect("stdout was piped"));
    let mut raw = Vec::new();
    // Locked a line at a time: `cargo xtask test` echoes the host's tests on another thread.
    let mut echo = std::io::stdout();
    while reader.read_until(b'\n', &mut raw)? > 0 {
        let text = String::from_utf8_lossy(&raw);
        let text = plain_text(text.trim_end_matches(['\n', '\r']));
        writeln!(file, "{text}")?;
        if options.verbose || text.contains("VM-") {
            writeln!(echo, "{text}")?;
        }
        console.push_str(&text);
        console.push('\n');
        raw.clear();
    }
    file.flush()?;
    let status = child.wait()?;
    let qemu_stderr = stderr_reader.join().unwrap_or_default();
    let exit = match status.code() {
        Some(1) => QemuExit::DebugExitPass,
        Some(3) => QemuExit::DebugExitFail,
        Some(0) => QemuExit::PoweredOff,
        Some(124) | Some(137) => QemuExit::TimedOut(options.timeout_secs),
        Some(code) => QemuExit::Other(code),
        None => QemuExit::Other(cmd::exit_code(status)),
    };
    Ok(Boot {
        console,
        qemu_stderr,
        exit,
    })
}

/// A console line without carriage returns and terminal escapes (SeaBIOS clears the screen).
fn plain_text(line: &str) -> String {
    let mut text = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            // CSI (ESC [ parameters, then one final byte in @..~); a two-byte sequence such as
            // ESC c (reset) loses its second byte with the `next()`.
            '\x1b' => {
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => text.push(c),
        }
    }
    text
}

/// What the console and qemu's exit status say, together.
pub struct Verdict {
    pub counts: TestCounts,
    pub passed: bool,
    pub problems: Vec<String>,
}

impl Verdict {
    /// `modules`: those vm-init was to run, each with its `VM-RESULT:` line.
    pub fn new(boot: &Boot, modules: &[String]) -> Verdict {
        let results = parse_results(&boot.console);
        let total = boot
            .console
            .lines()
            .find_map(|line| line.find("VM-RESULT-TOTAL:").map(|at| &line[at..]));
        let mut problems = Vec::new();
        let mut counts = TestCounts::default();
        for name in modules {
            match results.iter().find(|result| &result.name == name) {
                None => {
                    problems.push(format!(
                        "no VM-RESULT line for `{name}`: it did not run to the end"
                    ));
                    // A module that never reported is one failure, so totals never read clean.
                    counts.failed += 1;
                }
                Some(result) => {
                    counts.passed += result.counts.passed;
                    counts.ignored += result.counts.ignored;
                    counts.failed += result.counts.failed;
                    if result.status != "exit:0" || !result.reported {
                        problems.push(format!(
                            "`{name}` ended with status {}{}",
                            result.status,
                            if result.reported {
                                ""
                            } else {
                                " and no `test result:` line"
                            }
                        ));
                        if result.counts.failed == 0 {
                            counts.failed += 1;
                        }
                    } else if result.counts.failed > 0 {
                        problems.push(format!("`{name}`: {} failed", result.counts.failed));
                    }
                }
            }
        }
        match total {
            None => problems.push(
                "no VM-RESULT-TOTAL line: vm-init did not finish (a kernel panic, a timeout, or \
                 the VM never reached /init); see the console above"
                    .to_string(),
            ),
            Some(total) if !total.contains("ok=yes") => {
                problems.push(format!("vm-init reported failure: {total}"));
            }
            Some(_) => {}
        }
        for line in boot
            .console
            .lines()
            .filter(|line| line.contains("VM-FAIL:"))
        {
            problems.push(line.trim().to_string());
        }
        if boot.exit != QemuExit::DebugExitPass {
            problems.push(format!("qemu: {}", boot.exit));
        }
        // A failed VM run whose tests all passed (no `bpf` LSM, a lost line...) still counts one
        // failure, so `cargo xtask test`'s total never reads clean when this step failed.
        if !problems.is_empty() && counts.failed == 0 {
            counts.failed = 1;
        }
        Verdict {
            counts,
            passed: problems.is_empty(),
            problems,
        }
    }
}

struct VmResult {
    name: String,
    counts: TestCounts,
    status: String,
    /// Whether the module's run printed a `test result:` line.
    reported: bool,
}

/// The `VM-RESULT: <name> passed=N failed=M ignored=K status=S ...` lines (kernel messages may
/// precede them on the same console line).
fn parse_results(console: &str) -> Vec<VmResult> {
    console
        .lines()
        .filter_map(|line| {
            let at = line.find("VM-RESULT: ")?;
            let mut words = line[at + "VM-RESULT: ".len()..].split_whitespace();
            let name = words.next()?.to_string();
            let mut result = VmResult {
                name,
                counts: TestCounts::default(),
                status: String::new(),
                reported: !line.contains("no `test result:` line"),
            };
            for word in words {
                let Some((key, value)) = word.split_once('=') else {
                    continue;
                };
                let number = || value.parse::<u64>().unwrap_or(0);
                match key {
                    "passed" => result.counts.passed = number(),
                    "failed" => result.counts.failed = number(),
                    "ignored" => result.counts.ignored = number(),
                    "status" => result.status = value.to_string(),
                    _ => {}
                }
            }
            Some(result)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_lines_lose_escapes_and_carriage_returns() {
        assert_eq!(
            plain_text("\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16.2)\r"),
            "SeaBIOS (version 1.16.2)"
        );
        assert_eq!(plain_text("VM-RESULT: a passed=1"), "VM-RESULT: a passed=1");
    }

    fn boot(console: &str, exit: QemuExit) -> Boot {
        Boot {
            console: console.to_string(),
            qemu_stderr: String::new(),
            exit,
        }
    }

    fn tests(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    const GOOD: &str = "[    2.0] Run /init as init process\n\
        VM-RESULT: loading passed=12 failed=0 ignored=1 status=exit:0 seconds=0.4\n\
        [    2.1] random kernel line VM-RESULT: kernel_exec passed=3 failed=0 ignored=0 status=exit:0 seconds=1.0\n\
        VM-RESULT-TOTAL: modules=2 passed=15 failed=0 ignored=1 bpf_lsm=yes ok=yes\n";

    #[test]
    fn passes_only_with_every_result_the_total_and_the_debug_exit() {
        let verdict = Verdict::new(
            &boot(GOOD, QemuExit::DebugExitPass),
            &tests(&["loading", "kernel_exec"]),
        );
        assert!(verdict.passed, "{:?}", verdict.problems);
        assert_eq!(
            verdict.counts,
            TestCounts {
                passed: 15,
                failed: 0,
                ignored: 1
            }
        );
        // The same lines, but qemu exited 0 (no debug-exit write): not a pass.
        assert!(!Verdict::new(&boot(GOOD, QemuExit::PoweredOff), &tests(&["loading"])).passed);
    }

    #[test]
    fn a_missing_total_or_module_is_a_failure_that_counts() {
        let console = "VM-RESULT: loading passed=12 failed=0 ignored=0 status=exit:0 seconds=0.4\n";
        let verdict = Verdict::new(
            &boot(console, QemuExit::PoweredOff),
            &tests(&["loading", "kernel_net"]),
        );
        assert!(!verdict.passed);
        assert_eq!(verdict.counts.failed, 1);
        assert!(
            verdict
                .problems
                .iter()
                .any(|p| p.contains("no VM-RESULT-TOTAL")),
            "{:?}",
            verdict.problems
        );
    }

    #[test]
    fn a_killed_run_counts_as_failed_even_with_no_failures_reported() {
        let console = "VM-RESULT: kernel_exec passed=0 failed=0 ignored=0 status=timeout:300s seconds=300.0 (no `test result:` line)\n\
                       VM-RESULT-TOTAL: modules=1 passed=0 failed=0 ignored=0 bpf_lsm=yes ok=no\n";
        let verdict = Verdict::new(
            &boot(console, QemuExit::DebugExitFail),
            &tests(&["kernel_exec"]),
        );
        assert!(!verdict.passed);
        assert_eq!(verdict.counts.failed, 1);
    }
}
