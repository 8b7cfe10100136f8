//! Running `execpolicy check` under the Codex CLI and guard's binary, and what a run printed.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::install;

/// How long one process may run.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// What one process printed and how it ended.
#[derive(PartialEq, Eq)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code,
            String::from_utf8_lossy(&self.stdout),
            String::from_utf8_lossy(&self.stderr)
        )
    }
}

/// Runs `program execpolicy check ARGS` in `dir` with the tier's environment; `worker` picks
/// the Codex home.
pub fn run(program: &Path, dir: &Path, worker: usize, args: &[String]) -> Outcome {
    let mut child = Command::new(program)
        .arg("execpolicy")
        .arg("check")
        .args(args)
        .current_dir(dir)
        .env("CODEX_HOME", install::codex_home(worker))
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {program:?}: {err}"));
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if started.elapsed() > PROCESS_TIMEOUT {
            let _ = child.kill();
            panic!("{program:?} execpolicy check {args:?} ran over {PROCESS_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("collect output");
    Outcome {
        code: status.code(),
        stdout,
        stderr,
    }
}

/// The guard binary this test build made.
pub fn guard() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_guard"))
}
