//! The tools from the npm registry that guard is compared with: the real Codex CLI (guard-user's
//! Codex test tier, `guard-user/tests/codex`, which includes this file) and Anthropic's
//! sandbox-runtime (`srt`, the start bench). Each is installed once at a pinned version with
//! `npm install` and cached under `target/CACHE/VERSION`; later runs reuse it.
//!
//! Plain `std` only: the Codex tier includes this file with `#[path]`, since guard-user cannot
//! depend on guard-tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `npm install` may take before it counts as failed.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// A package installed into a folder of its own under `target/`.
pub struct Package {
    /// The npm name, e.g. `@openai/codex`.
    pub name: &'static str,
    /// The pinned version.
    pub version: &'static str,
    /// The folder under `target/` that holds its versions.
    pub cache: &'static str,
    /// Where the installed package's program is, below the install folder.
    pub program: fn(&Path) -> Option<PathBuf>,
}

/// The Codex CLI (about 400 MiB: its native binary for each platform).
pub const CODEX: Package = Package {
    name: "@openai/codex",
    version: "0.169.0",
    cache: "codex-cli",
    program: codex_native_binary,
};

/// Anthropic's sandbox-runtime: `srt`, a Node program (it needs bubblewrap, socat and ripgrep
/// on the machine: `cargo xtask setup` installs them for the benches).
pub const SANDBOX_RUNTIME: Package = Package {
    name: "@anthropic-ai/sandbox-runtime",
    version: "0.0.83",
    cache: "sandbox-runtime",
    program: |dir| Some(dir.join("node_modules/.bin/srt")).filter(|p| p.is_file()),
};

/// `$CARGO_TARGET_DIR`, else the workspace's `target/` (both crates that build this file,
/// guard-user and guard-tests, sit one folder below the workspace).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

impl Package {
    /// `target/CACHE/VERSION`.
    pub fn dir(&self) -> PathBuf {
        target_dir().join(self.cache).join(self.version)
    }

    /// A folder beside the install for the tool's state (`CODEX_HOME`): Codex refuses to set up
    /// its helper links under a temporary folder, and runs sharing one contend for its lock.
    /// A clone under the temporary folder (a CI runner's, a scratch clone) would put it there
    /// too: then it goes under `$HOME/.cache/guard-tests/` instead.
    pub fn home(&self, name: &str) -> PathBuf {
        let beside = self.dir().with_extension("home");
        let base = if beside.starts_with(std::env::temp_dir()) {
            let cache = std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".cache"))
                .filter(|cache| !cache.starts_with(std::env::temp_dir()))
                .unwrap_or_else(|| PathBuf::from("/var/cache"))
                .join("guard-tests");
            cache.join(format!("{}-{}.home", self.cache, self.version))
        } else {
            beside
        };
        let home = base.join(name);
        std::fs::create_dir_all(&home).expect("create the tool's home folder");
        home
    }

    /// The program, installing the package on first use; why not, when it cannot be had.
    pub fn install(&self) -> Result<PathBuf, String> {
        let dir = self.dir();
        if let Some(found) = (self.program)(&dir) {
            return Ok(found);
        }
        // Installed beside the cache and renamed into place, so an interrupted install is never
        // taken for a cached one.
        let partial = dir.with_extension(format!("partial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&partial);
        std::fs::create_dir_all(&partial)
            .map_err(|err| format!("cannot create {partial:?}: {err}"))?;
        let package = format!("{}@{}", self.name, self.version);
        let mut child = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&partial)
            .arg(&package)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| format!("npm is needed to install {package}: {err}"))?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|err| err.to_string())? {
                break status;
            }
            if started.elapsed() > INSTALL_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(&partial);
                return Err(format!(
                    "`npm install {package}` took over {INSTALL_TIMEOUT:?}; the npm registry is \
                     unreachable or slow"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if !status.success() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                use std::io::Read;
                let _ = pipe.read_to_string(&mut stderr);
            }
            // npm's first lines say what failed (`npm error code ECONNREFUSED`, ...); its last
            // only where its log is.
            let said: Vec<&str> = stderr
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.contains("complete log"))
                .take(2)
                .collect();
            let _ = std::fs::remove_dir_all(&partial);
            return Err(format!(
                "`npm install {package}` failed ({status}); the npm registry cannot be reached: {}",
                if said.is_empty() {
                    "no output".to_string()
                } else {
                    said.join(" / ")
                }
            ));
        }
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|err| err.to_string())?;
        }
        // Another process may have finished first; either copy is the same package.
        if std::fs::rename(&partial, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&partial);
        }
        (self.program)(&dir).ok_or_else(|| {
            format!("{package} installed in {dir:?} but holds no program for this platform")
        })
    }
}

/// The Codex platform package's binary (`@openai/codex-linux-x64/vendor/TRIPLE/bin/codex`): run
/// directly, it starts without Node.
fn codex_native_binary(dir: &Path) -> Option<PathBuf> {
    let scope = dir.join("node_modules/@openai");
    for package in std::fs::read_dir(scope).ok()?.flatten() {
        let Ok(triples) = std::fs::read_dir(package.path().join("vendor")) else {
            continue;
        };
        for triple in triples.flatten() {
            let binary = triple.path().join("bin/codex");
            if binary.is_file() {
                return Some(binary);
            }
        }
    }
    None
}
