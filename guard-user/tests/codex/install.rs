//! The real Codex CLI, installed once from the npm registry at a pinned version and cached under
//! `target/codex-cli/VERSION` (about 400 MiB; later runs reuse it). The install itself is
//! `tests/src/npm.rs`, which guard-tests' start bench shares.
//!
//! Where the registry cannot be reached the tests print one `skipped: ...` line, and fail when
//! `CI=true`.

use std::path::PathBuf;
use std::sync::OnceLock;

// The sandbox-runtime half is the start bench's.
#[allow(dead_code)]
#[path = "../../../tests/src/npm.rs"]
mod npm;

/// The `@openai/codex` version the tier compares against.
pub const CODEX_VERSION: &str = npm::CODEX.version;

/// The `CODEX_HOME` one worker runs Codex with: beside the cache, since Codex refuses to set up
/// its helper links under a temporary folder, and one per worker, since runs sharing one
/// contend for its lock (both complain on stderr).
pub fn codex_home(worker: usize) -> PathBuf {
    npm::CODEX.home(&format!("w{worker}"))
}

/// The Codex CLI's binary, installing it on first use; `None` after printing why it is not
/// there (a panic when `CI=true`).
pub fn codex() -> Option<PathBuf> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match FOUND.get_or_init(|| npm::CODEX.install()) {
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
