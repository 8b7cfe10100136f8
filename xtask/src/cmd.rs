//! Running cargo (and other programs) the way every xtask does: from the workspace root, with
//! inherited stdio, each command printed before it runs.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use anyhow::{Context, Result};

/// The workspace root: the parent of this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// The cargo that runs us (`CARGO`), else `cargo` from `PATH`.
pub fn cargo_program() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// Puts `$CARGO_HOME/bin` (default `~/.cargo/bin`) first on `PATH`, for this process and every
/// command it runs: `cargo install` puts bpf-linker there, and the BPF build looks it up on `PATH`.
pub fn put_cargo_bin_on_path() {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    let Some(bin) = cargo_home.map(|home| home.join("bin")) else {
        return;
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| dir == bin) {
        return;
    }
    let joined = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path)));
    if let Ok(joined) = joined {
        // SAFETY: called first thing in main, before any thread exists.
        unsafe { std::env::set_var("PATH", joined) };
    }
}

/// Under CI (`CI=true`) every build is a clean one-shot build, so incremental compilation only
/// leaves caches (about 1 GiB) that nothing reads again; an explicit `CARGO_INCREMENTAL` wins.
pub fn no_incremental_under_ci() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if ci && std::env::var_os("CARGO_INCREMENTAL").is_none() {
        // SAFETY: called first thing in main, before any thread exists.
        unsafe { std::env::set_var("CARGO_INCREMENTAL", "0") };
    }
}

/// Runs `command`, returning its stdout; its stderr goes to ours. A failure names the command.
pub fn stdout_of(command: &mut Command) -> Result<String> {
    let line = display(command);
    let output = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not start `{line}`"))?;
    anyhow::ensure!(
        output.status.success(),
        "`{line}` failed ({})",
        output.status
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `cargo ARGS...`, run from the workspace root.
pub fn cargo<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = Command::new(cargo_program());
    command.args(args).current_dir(workspace_root());
    command
}

/// The command as a shell-like line, for printing.
pub fn display(command: &Command) -> String {
    let program = Path::new(command.get_program());
    // `$CARGO` is usually a long toolchain path; `cargo` says the same thing.
    let program = match program.file_name() {
        Some(name) if name == "cargo" => "cargo".into(),
        _ => program.to_string_lossy(),
    };
    std::iter::once(program.into_owned())
        .chain(command.get_args().map(|arg| quote(&arg.to_string_lossy())))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `arg` as a shell word: as is when that is unambiguous, else single-quoted.
pub fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Prints the command, runs it with inherited stdio and returns its status.
pub fn status(command: &mut Command) -> Result<ExitStatus> {
    let line = display(command);
    eprintln!("$ {line}");
    command
        .status()
        .with_context(|| format!("could not start `{line}`"))
}

/// Like [`status`], but an unsuccessful exit is an error.
pub fn run(command: &mut Command) -> Result<()> {
    let status = status(command)?;
    anyhow::ensure!(status.success(), "`{}` failed ({status})", display(command));
    Ok(())
}

/// The exit code to pass on for a child's status (128 + signal when it was killed).
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1)
}

/// The last `lines` lines of the file at `path` (what a step that ran beside another printed).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
