//! Free disk space under cargo's target directory. A clean `cargo xtask test` writes several GiB;
//! running out half-way fails a step with an error far from its cause (`No space left on device`
//! from rustc, LLVM or apt), so the run says up front, and again at a failed step, what is free.

use std::path::{Path, PathBuf};

/// What a clean `cargo xtask test` needs: `du -sh target` after a run in a fresh clone under
/// `CI=true` gave 5.9 GiB (2026-12-05; 29 GiB before the test profile dropped dependencies'
/// debug info), plus cargo's registry and bpf-linker, rounded up.
pub const CLEAN_TEST_RUN_GIB: f64 = 7.0;

/// Bytes free to an unprivileged writer on the file system holding `path` (or its nearest
/// existing ancestor, as the target directory may not exist yet).
pub fn free_bytes(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|dir| dir.exists())?;
    let c_path = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a valid NUL-terminated path and a buffer of the right type; read only on success.
    if unsafe { libc::statvfs(c_path.as_ptr(), stats.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the buffer.
    let stats = unsafe { stats.assume_init() };
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// One line on stderr: what is free under `target`, and a warning with the fix when a clean run
/// would not fit.
pub fn report(target: &Path) {
    let Some(free) = free_bytes(target) else {
        return;
    };
    let free = gib(free);
    if free < CLEAN_TEST_RUN_GIB {
        eprintln!(
            "warning: {free:.1} GiB free under {}; a clean `cargo xtask test` writes about \
             {CLEAN_TEST_RUN_GIB:.0} GiB there. Free space, or point CARGO_TARGET_DIR at a larger \
             file system.",
            target.display()
        );
    } else {
        eprintln!("disk: {free:.1} GiB free under {}", target.display());
    }
}

/// The target directory, or `target` beside the workspace when cargo cannot say.
pub fn target_or_default() -> PathBuf {
    crate::vm::target_directory().unwrap_or_else(|_| crate::cmd::workspace_root().join("target"))
}
