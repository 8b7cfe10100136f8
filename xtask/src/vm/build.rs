//! Step 3 of `vm-test`: the test binaries and vm-init, built by cargo (debug profile, host target)
//! and found through its JSON messages.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::{Options, VM_TESTS, cargo_metadata};
use crate::cmd;

/// What goes into the initramfs besides the host's files: vm-init and the test binaries, as
/// cargo built them.
pub struct Binaries {
    pub init: PathBuf,
    /// (bin name, executable): guard-tests' other bins (`argv-racer`, `net-probe`), which the
    /// kernel tests find through `GUARD_TEST_HELPERS` (tests/src/kernel.rs).
    pub helpers: Vec<(String, PathBuf)>,
    /// (test name, executable), in [`VM_TESTS`] order.
    pub tests: Vec<(String, PathBuf)>,
}

/// Builds guard-tests' bins and the integration tests asked for (by default those of [`VM_TESTS`] that
/// exist), debug profile, host target.
pub fn build(options: &Options) -> Result<Binaries> {
    let existing = integration_tests()?;
    let mut wanted = Vec::new();
    if options.tests.is_empty() {
        for &name in VM_TESTS {
            if existing.contains(name) {
                wanted.push(name.to_string());
            } else {
                eprintln!(
                    "vm-test: note: no integration test `{name}` in guard-tests yet; skipped"
                );
            }
        }
    } else {
        for name in &options.tests {
            if !existing.contains(name.as_str()) {
                bail!(
                    "guard-tests has no integration test `{name}` (it has: {})",
                    existing.iter().cloned().collect::<Vec<_>>().join(", ")
                );
            }
            wanted.push(name.clone());
        }
    }
    if wanted.is_empty() {
        bail!("none of the VM tests ({}) exists", VM_TESTS.join(", "));
    }

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

    let mut test_build = cmd::cargo([
        "test",
        "-p",
        "guard-tests",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    for name in &wanted {
        test_build.args(["--test", name]);
    }
    let built = executables(test_build)?;
    let tests = wanted
        .iter()
        .map(|name| {
            built
                .iter()
                .find(|(kind, built_name, _)| kind == "test" && built_name == name)
                .map(|(_, _, path)| (name.clone(), path.clone()))
                .with_context(|| format!("cargo built no executable for the test `{name}`"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Binaries {
        init,
        helpers,
        tests,
    })
}

/// The names of guard-tests' integration tests, from `cargo metadata`.
fn integration_tests() -> Result<BTreeSet<String>> {
    let metadata = cargo_metadata()?;
    let package = metadata["packages"]
        .as_array()
        .and_then(|packages| packages.iter().find(|p| p["name"] == "guard-tests"))
        .context("`cargo metadata` lists no guard-tests package")?;
    Ok(package["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|target| {
            target["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "test"))
        })
        .filter_map(|target| target["name"].as_str().map(str::to_string))
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
