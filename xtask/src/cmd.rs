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
