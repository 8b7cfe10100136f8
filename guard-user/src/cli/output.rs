//! How the CLI talks: JSON on stdout for machines, styled text for people, errors on stderr.

use std::io::Write;
use std::process::ExitCode;

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

/// Shows a policy that failed to load: `PATH:LINE: MESSAGE` first, then the full diagnostic
/// and what to do. Exit 2.
pub fn policy_error(err: &LoadError) -> ExitCode {
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
    let style = Style::new().fg_color(Some(AnsiColor::Red.into())).bold();
    eprintln!("{style}error:{style:#} {message}");
    ExitCode::from(EXIT_POLICY_ERROR)
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
