//! The real Codex CLI, installed once from the npm registry at a pinned version and cached under
//! `target/codex-cli/VERSION` (about 400 MiB; later runs reuse it).
//!
//! Where the registry cannot be reached the tests print one `skipped: ...` line, and fail when
//! `CI=true`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The `@openai/codex` version the tier compares against.
pub const CODEX_VERSION: &str = "0.169.0";
/// How long one `npm install` may take before it counts as failed.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// Where the cached install lives: `$CARGO_TARGET_DIR` (else the workspace's `target/`).
fn cache_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("codex-cli").join(CODEX_VERSION)
}

/// The `CODEX_HOME` one worker runs Codex with: beside the cache, since Codex refuses to set up
/// its helper links under a temporary folder, and one per worker, since runs sharing one
/// contend for its lock (both complain on stderr).
pub fn codex_home(worker: usize) -> PathBuf {
    let home = cache_dir()
        .with_extension("home")
        .join(format!("w{worker}"));
    std::fs::create_dir_all(&home).expect("create the Codex home");
    home
}

/// The Codex CLI's binary, installing it on first use; `None` after printing why it is not
/// there (a panic when `CI=true`).
pub fn codex() -> Option<PathBuf> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match FOUND.get_or_init(|| find_or_install(&cache_dir())) {
        Ok(path) => Some(path.clone()),
        Err(why) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true, so the Codex CLI tier may not skip: {why}");
            }
            println!("skipped: {why}");
            None
        }
    }
}

fn find_or_install(dir: &Path) -> Result<PathBuf, String> {
    if let Some(found) = native_binary(dir) {
        return Ok(found);
    }
    // Installed beside the cache and renamed into place, so an interrupted install is never
    // taken for a cached one.
    let partial = dir.with_extension(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(|err| format!("cannot create {partial:?}: {err}"))?;
    let package = format!("@openai/codex@{CODEX_VERSION}");
    let mut child = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&partial)
        .arg(&package)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("the Codex CLI tier needs npm to install {package}: {err}"))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|err| err.to_string())? {
            break status;
        }
        if started.elapsed() > INSTALL_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
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
        // npm's first lines say what failed (`npm error code ECONNREFUSED`, ...); its last only
        // where its log is.
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
    // Another test process may have finished first; either copy is the same package.
    if std::fs::rename(&partial, dir).is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    native_binary(dir).ok_or_else(|| {
        format!(
            "{package} installed in {dir:?} but holds no native `codex` binary for this platform"
        )
    })
}

/// The platform package's binary (`@openai/codex-linux-x64/vendor/TRIPLE/bin/codex`): run
/// directly, it starts without Node.
fn native_binary(dir: &Path) -> Option<PathBuf> {
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
