//! How the CLI talks: JSON on stdout for machines, styled text for people, errors on stderr
//! (and, under `--json`, also as one JSON object on stdout: [`JsonError`]).

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use anstream::{eprintln, println};
use anstyle::{AnsiColor, Style};

use crate::policy::{Decision, LoadError};

pub const EXIT_POLICY_ERROR: u8 = 2;

pub fn decision_style(decision: Option<Decision>) -> Style {
    let color = match decision {
        Some(Decision::Allow) => AnsiColor::Green,
        Some(Decision::Prompt) => AnsiColor::Yellow,
        Some(Decision::Forbidden) => AnsiColor::Red,
        None => AnsiColor::BrightBlack,
    };
    Style::new().fg_color(Some(color.into())).bold()
}

pub fn decision_name(decision: Option<Decision>) -> &'static str {
    decision.map_or("none", Decision::as_str)
}

pub fn dim() -> Style {
    Style::new().dimmed()
}

/// Prints one JSON value on its own line.
pub fn print_json(value: &serde_json::Value) {
    let mut stdout = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut stdout, value);
    let _ = writeln!(stdout);
}

/// Whether errors are also printed as [`JsonError`]s: set once, from the command line, before
/// the command runs.
static JSON_ERRORS: AtomicBool = AtomicBool::new(false);

/// Errors are also printed as [`JsonError`]s from now on when `args` (the process's
/// arguments) ask for `--json` before any `--` (what follows `--` is the command checked).
pub fn choose_error_format<S: AsRef<str>>(args: &[S]) {
    let json = args
        .iter()
        .map(AsRef::as_ref)
        .take_while(|arg| *arg != "--")
        .any(|arg| arg == "--json");
    JSON_ERRORS.store(json, Ordering::Relaxed);
}

fn json_errors() -> bool {
    JSON_ERRORS.load(Ordering::Relaxed)
}

/// An error as a program reads it under `--json`: one line on stdout,
/// `{"error":{"kind":"policy","message":"...","file":"a.rules","line":3,"exit_code":2}}`.
#[derive(serde::Serialize, Debug, PartialEq, Eq)]
pub struct JsonError<'a> {
    /// `policy` (a rules file did not load), `usage` (the command line), `unreachable` (no
    /// daemon at the socket), `unauthorized` or `refused` (the daemon said no).
    pub kind: &'a str,
    /// The one line a person would read.
    pub message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The process's exit status, which follows.
    pub exit_code: u8,
}

impl JsonError<'_> {
    /// Prints it on stdout and gives its exit status.
    pub fn print(&self) -> ExitCode {
        print_json(&serde_json::json!({ "error": self }));
        ExitCode::from(self.exit_code)
    }
}

/// Prints an error, `error: MESSAGE` in red on stderr (and a [`JsonError`] on stdout under
/// `--json`), and gives `exit_code`.
pub fn error(kind: &str, message: &str, exit_code: u8) -> ExitCode {
    if json_errors() {
        JsonError {
            kind,
            message,
            file: None,
            line: None,
            exit_code,
        }
        .print();
    }
    let style = Style::new().fg_color(Some(AnsiColor::Red.into())).bold();
    eprintln!("{style}error:{style:#} {message}");
    ExitCode::from(exit_code)
}

/// Shows a policy that failed to load: `PATH:LINE: MESSAGE` first on stderr (the reference's
/// startup error line, which tools match), then the full diagnostic and what to do; under
/// `--json` also a [`JsonError`] of kind `policy` with the file and line on stdout. Exit 2.
pub fn policy_error(err: &LoadError) -> ExitCode {
    if json_errors() {
        let (location, message) = err.located();
        JsonError {
            kind: "policy",
            message: &message,
            file: location.as_ref().map(|(file, _)| file.as_str()),
            line: location.as_ref().map(|(_, line)| *line),
            exit_code: EXIT_POLICY_ERROR,
        }
        .print();
    }
    eprintln!("{}", err.display_line());
    if let LoadError::Parse { source, .. } = err {
        let full = source.to_string();
        if full.lines().count() > 1 {
            eprintln!();
            for line in full.lines() {
                eprintln!("  {line}");
            }
        }
        eprintln!(
            "The policy was not loaded: fix the rule at that line and run the command again."
        );
        eprintln!("`guard policy validate PATH` checks a rules file without using it.");
    }
    ExitCode::from(EXIT_POLICY_ERROR)
}

/// A one-line error with a hint; exit 2.
pub fn usage_error(message: &str) -> ExitCode {
    error("usage", message, EXIT_POLICY_ERROR)
}

pub fn say(line: &str) {
    println!("{line}");
}

/// A child's exit status as ours: its code, or 128+N when signal N ended it (a shell's
/// convention: a refused exec on the `cgroup` backend is SIGKILL, so 137).
pub fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        _ => 1,
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}
