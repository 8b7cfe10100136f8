//! Adds up the `test result:` lines of `cargo test`, so `cargo xtask test` can close with one
//! total (`tests: N passed, N failed, N skipped`) instead of whichever test binary ran last,
//! often a doc-test run of zero tests.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitStatus, Stdio};

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TestCounts {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
}

impl TestCounts {
    /// Adds another run's counts (the VM's, in `cargo xtask test`).
    pub fn add(&mut self, other: TestCounts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }

    /// Adds one `test result: ok. 12 passed; 0 failed; 1 ignored; ...` line; other lines are
    /// left alone.
    pub fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim_start().strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(label), Some(count)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(count) = count.parse::<u64>() else {
                continue;
            };
            match label {
                "passed" => self.passed += count,
                "failed" => self.failed += count,
                "ignored" => self.ignored += count,
                _ => {}
            }
        }
    }
}

/// Runs `command` like [`cmd::status`], echoing its stdout line by line while counting results.
pub fn status_counting(command: &mut Command) -> Result<(ExitStatus, TestCounts)> {
    let line = cmd::display(command);
    eprintln!("$ {line}");
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{line}`"))?;
    let mut counts = TestCounts::default();
    let stdout = child.stdout.take().expect("stdout was piped");
    // Locked a line at a time: the VM's thread echoes its results beside this.
    let mut echo = std::io::stdout();
    for text in BufReader::new(stdout).lines() {
        let text = text.context("reading cargo test's output")?;
        counts.add_line(&text);
        let _ = writeln!(echo, "{text}");
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for `{line}`"))?;
    Ok((status, counts))
}

#[cfg(test)]
mod tests {
    use super::TestCounts;

    #[test]
    fn sums_result_lines_and_ignores_the_rest() {
        let mut counts = TestCounts::default();
        for line in [
            "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 3 filtered out; finished in 0.01s",
            "test foo ... ok",
            "running 3 tests",
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s",
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
        ] {
            counts.add_line(line);
        }
        assert_eq!(
            counts,
            TestCounts {
                passed: 14,
                failed: 1,
                ignored: 1
            }
        );
    }
}
