//! Step 3 of `vm-test`: the kernel test binary and vm-init, built by cargo (debug profile, host
//! target) and found through its JSON messages, and the modules of the binary to run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::{KERNEL_TESTS, Options, VM_TESTS};
use crate::cmd;

/// What goes into the initramfs besides the host's files: vm-init and the test binary, as cargo
/// built them, and the modules of the binary that vm-init runs.
pub struct Binaries {
    pub init: PathBuf,
    /// (bin name, executable): guard-tests' other bins (`argv-racer`, `net-probe`), which the
    /// kernel tests find through `GUARD_TEST_HELPERS` (tests/src/kernel.rs).
    pub helpers: Vec<(String, PathBuf)>,
    /// guard-tests' test binary [`KERNEL_TESTS`] (`tests/tests/kernel/main.rs`).
    pub tests: PathBuf,
    /// Its modules to run, each on its own (`kernel_net` runs the tests `kernel_net::*`), in
    /// [`VM_TESTS`] order or as asked.
    pub modules: Vec<String>,
}

/// Builds guard-tests' bins and its kernel test binary, debug profile, host target, and picks
/// the modules asked for (by default those of [`VM_TESTS`] that exist).
pub fn build(options: &Options) -> Result<Binaries> {
    // Every bin of guard-tests: vm-init, and the helpers the kernel tests spawn; and `guard`
    // itself, for the tests that drive the command line (vm-init points GUARD_BIN at it).
    let mut init = None;
    let mut helpers = Vec::new();
    for (kind, name, path) in executables(cmd::cargo([
        "build",
        "-p",
        "guard-tests",
        "-p",
        "guard-user",
        "--bins",
        "--message-format=json-render-diagnostics",
    ]))? {
        match (kind.as_str(), name.as_str()) {
            ("bin", "vm-init") => init = Some(path),
            ("bin", _) => helpers.push((name, path)),
            _ => {}
        }
    }
    let init = init.context("cargo built no vm-init executable")?;

    let tests = executables(cmd::cargo([
        "test",
        "-p",
        "guard-tests",
        "--test",
        KERNEL_TESTS,
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]))?
    .into_iter()
    .find(|(kind, name, _)| kind == "test" && name == KERNEL_TESTS)
    .map(|(_, _, path)| path)
    .with_context(|| format!("cargo built no executable for the test `{KERNEL_TESTS}`"))?;

    let existing = modules(&tests)?;
    let mut modules = Vec::new();
    if options.tests.is_empty() {
        for &name in VM_TESTS {
            if existing.contains(name) {
                modules.push(name.to_string());
            } else {
                eprintln!(
                    "vm-test: note: no module `{name}` in guard-tests' `{KERNEL_TESTS}` tests yet; \
                     skipped"
                );
            }
        }
    } else {
        for name in &options.tests {
            if !existing.contains(name.as_str()) {
                bail!(
                    "guard-tests' `{KERNEL_TESTS}` tests have no module `{name}` (they have: {})",
                    existing.iter().cloned().collect::<Vec<_>>().join(", ")
                );
            }
            modules.push(name.clone());
        }
    }
    if modules.is_empty() {
        bail!("none of the VM tests ({}) exists", VM_TESTS.join(", "));
    }
    Ok(Binaries {
        init,
        helpers,
        tests,
        modules,
    })
}

/// The modules that hold tests in the test binary `tests`, from its `--list`.
fn modules(tests: &Path) -> Result<BTreeSet<String>> {
    let listed = cmd::stdout_of(Command::new(tests).args(["--list", "--format", "terse"]))?;
    Ok(listed
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .filter_map(|test| test.split_once("::").map(|(module, _)| module.to_string()))
        .collect())
}

/// Runs a cargo command with `--message-format=json-*` and returns (first target kind, target
/// name, executable) of each artifact that has an executable.
fn executables(mut command: Command) -> Result<Vec<(String, String, PathBuf)>> {
    eprintln!("$ {}", cmd::display(&command));
    let stdout = cmd::stdout_of(&mut command)?;
    let mut found = Vec::new();
    for text in stdout.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(text) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let (Some(path), Some(kind), Some(name)) = (
            message["executable"].as_str(),
            message["target"]["kind"][0].as_str(),
            message["target"]["name"].as_str(),
        ) else {
            continue;
        };
        found.push((kind.to_string(), name.to_string(), PathBuf::from(path)));
    }
    Ok(found)
}
