//! What the CLI test files share: a temporary folder to run the `guard` binary in, and what one
//! run produced. Each test file adds the helpers of its own subcommands in `impl` blocks.

#![allow(dead_code)] // each test file uses a part

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tempfile::TempDir;

/// A temporary working folder for one test.
pub struct Sandbox {
    dir: TempDir,
}

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("create a temporary folder"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// An absolute path inside the sandbox.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path().join(name)
    }

    /// Writes `contents` to `name` (creating folders) and returns its absolute path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.file(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create folder");
        }
        fs::write(&path, contents).expect("write file");
        path
    }

    /// A command for the binary, run in the sandbox, with no system rules folder.
    pub fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_guard"));
        command
            .current_dir(self.path())
            .env("GUARD_SYSTEM_RULES", self.file("no-such-system-rules"))
            .env_remove("CLICOLOR_FORCE")
            .env_remove("CLICOLOR");
        command
    }

    pub fn run<I, S>(&self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        run_command(self.command().args(args))
    }
}

pub fn run_command(command: &mut Command) -> Run {
    let output = command.output().expect("run the guard binary");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

impl Run {
    #[track_caller]
    pub fn assert_code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(expected),
            "unexpected exit status\n--- stdout:\n{}\n--- stderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        self.assert_code(0)
    }

    /// Exactly one line of JSON on stdout (whatever the exit status), parsed.
    #[track_caller]
    pub fn one_json_line(&self) -> Value {
        let lines: Vec<&str> = self.stdout.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected exactly one line of JSON on stdout, got:\n{}{}",
            self.stdout,
            self.stderr
        );
        assert!(self.stdout.ends_with('\n'), "JSON line ends with a newline");
        serde_json::from_str(lines[0])
            .unwrap_or_else(|err| panic!("stdout is not JSON ({err}):\n{}", self.stdout))
    }

    /// Exit 0 and exactly one line of JSON on stdout; returns it parsed.
    #[track_caller]
    pub fn json(&self) -> Value {
        self.assert_success();
        self.one_json_line()
    }

    pub fn first_stderr_line(&self) -> &str {
        self.stderr.lines().next().unwrap_or_default()
    }
}

pub fn display(path: &Path) -> String {
    path.display().to_string()
}

pub fn read(path: &Path) -> Vec<u8> {
    fs::read(path).expect("read file")
}
