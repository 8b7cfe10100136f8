//! `cargo xtask setup`: make sure the machine has what building and testing guard needs.
//!
//! Each [`Item`] says how to tell it is there and how to get it. Setup goes through the list in
//! order and prints one line per item: `ok`, `installed`, or the command to run by hand. It is
//! idempotent and, when everything is there, quick: checking never installs and never touches the
//! network.
//!
//! To add an item (nightly `rust-src`, `bpf-linker`, a bpffs mount...), add it to [`ITEMS`],
//! with a new [`Fix`] variant if none of the existing ones fits.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Result, bail};

use crate::cmd;

/// What an item is needed for; commands check only what they use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Building guard at all (`run`, `bench`, `test`).
    Build,
    /// Only `cargo xtask test` (lints and formatting).
    Test,
}

/// One thing the project needs on the machine.
pub struct Item {
    /// What the line says, e.g. `C compiler (cc)`.
    pub name: &'static str,
    pub need: Need,
    /// Whether it is already there. Must be quick and must not change anything.
    pub present: fn() -> bool,
    pub fix: Fix,
}

/// How to install a missing item.
pub enum Fix {
    /// Debian packages, installed with `apt-get install -y` (after one `apt-get update` per run;
    /// recommended packages too: `gcc` needs `libc6-dev`); needs root.
    Apt(&'static [&'static str]),
    /// A `rustup` command, e.g. `["component", "add", "clippy"]`.
    Rustup(&'static [&'static str]),
}

/// Everything the project needs, in the order it is checked.
pub const ITEMS: &[Item] = &[
    Item {
        // tree-sitter-bash compiles its C parser in its build script (the `cc` crate, which honours
        // `CC`).
        name: "C compiler (cc)",
        need: Need::Build,
        present: c_compiler_present,
        fix: Fix::Apt(&["gcc"]),
    },
    Item {
        name: "clippy",
        need: Need::Test,
        present: || cargo_subcommand_works("clippy"),
        fix: Fix::Rustup(&["component", "add", "clippy"]),
    },
    Item {
        name: "rustfmt",
        need: Need::Test,
        present: || cargo_subcommand_works("fmt"),
        fix: Fix::Rustup(&["component", "add", "rustfmt"]),
    },
];

/// Where setup prints its lines: stdout for `cargo xtask setup`, stderr when it runs before
/// another task (so `cargo xtask run -- check --json ...` prints only JSON on stdout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    Stdout,
    Stderr,
}

impl Report {
    fn say(self, line: &str) {
        match self {
            Report::Stdout => println!("{line}"),
            Report::Stderr => eprintln!("{line}"),
        }
    }
}

/// State shared by the fixes of one run.
#[derive(Default)]
struct Installer {
    apt_updated: bool,
}

impl Installer {
    fn apply(&mut self, fix: &Fix) -> Result<()> {
        match fix {
            Fix::Apt(packages) => {
                if !self.apt_updated {
                    cmd::run(apt_get().arg("update"))?;
                    self.apt_updated = true;
                }
                cmd::run(apt_get().args(["install", "-y"]).args(*packages))
            }
            Fix::Rustup(args) => cmd::run(Command::new("rustup").args(*args)),
        }
    }
}

fn apt_get() -> Command {
    let mut command = Command::new("apt-get");
    command.env("DEBIAN_FRONTEND", "noninteractive");
    command
}

impl Fix {
    /// Why this fix cannot be applied here, if it cannot.
    fn unavailable(&self) -> Option<&'static str> {
        match self {
            Fix::Apt(_) if find_on_path("apt-get").is_none() => Some("apt-get is not available"),
            Fix::Apt(_) if !is_root() => Some("installing packages needs root"),
            Fix::Rustup(_) if find_on_path("rustup").is_none() => Some("rustup is not available"),
            _ => None,
        }
    }

    /// The command to run by hand.
    fn manual(&self) -> String {
        match self {
            Fix::Apt(packages) => format!(
                "sudo apt-get update && sudo apt-get install -y {}",
                packages.join(" ")
            ),
            Fix::Rustup(args) => format!("rustup {}", args.join(" ")),
        }
    }
}

/// Checks (and where possible installs) every item needed for `needs`; an error when something
/// is still missing.
pub fn setup(needs: &[Need], report: Report) -> Result<()> {
    let mut installer = Installer::default();
    let mut missing = Vec::new();
    for item in ITEMS.iter().filter(|item| needs.contains(&item.need)) {
        if (item.present)() {
            report.say(&format!("{}: ok", item.name));
            continue;
        }
        if let Some(reason) = item.fix.unavailable() {
            report.say(&format!(
                "{}: missing ({reason}); run: {}",
                item.name,
                item.fix.manual()
            ));
            missing.push(item.name);
            continue;
        }
        report.say(&format!("{}: missing, installing", item.name));
        let result = installer.apply(&item.fix);
        if result.is_ok() && (item.present)() {
            report.say(&format!("{}: installed", item.name));
        } else {
            if let Err(err) = result {
                eprintln!("{}: {err:#}", item.name);
            }
            report.say(&format!(
                "{}: still missing after installing; run: {}",
                item.name,
                item.fix.manual()
            ));
            missing.push(item.name);
        }
    }
    if !missing.is_empty() {
        bail!("setup incomplete, missing: {}", missing.join(", "));
    }
    Ok(())
}

fn c_compiler_present() -> bool {
    let compiler = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let compiler = Path::new(&compiler);
    if compiler.components().count() > 1 {
        is_executable(compiler)
    } else {
        find_on_path(compiler.as_os_str()).is_some()
    }
}

fn cargo_subcommand_works(subcommand: &str) -> bool {
    cmd::cargo([subcommand, "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The first executable file called `name` in `PATH`.
pub fn find_on_path(name: impl AsRef<OsStr>) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name.as_ref()))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Whether we run as root (effective uid 0), read from `/proc/self/status`.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}
