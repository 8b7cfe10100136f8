//! Pinned links, so enforcement outlives the process that set it up (a daemon's restart, clean
//! or `kill -9`), and the handover from one daemon to the next has no gap.
//!
//! A pinned link stays attached until its pin file is removed and no descriptor holds it; its
//! program keeps its maps alive, so it goes on deciding with the maps' last contents. guard pins
//! only links, never maps: a new daemon loads fresh programs and maps, fills them, attaches and
//! pins them in a new generation folder, and only then releases the old generation:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! # let image: guard::compile::EnforcementImage = todo!();
//! # let (scope, scope_id) = (std::path::Path::new("/sys/fs/cgroup"), 1);
//! use guard::kernel::{Backend, Enforcer, pins};
//! let root = std::path::Path::new(pins::DEFAULT_ROOT).join("guard");
//! pins::ensure_bpffs(std::path::Path::new(pins::DEFAULT_ROOT))?;
//! let old = pins::generations(&root);
//! let mut enforcer = Enforcer::load(Backend::detect().0)?;
//! enforcer.apply(&image)?;
//! enforcer.attach_cgroup(scope)?;
//! enforcer.add_scope(scope_id)?;
//! enforcer.pin_links(&pins::next_generation(&root))?;
//! // Both generations enforce now (each with its own maps); the old one can go.
//! for generation in old {
//!     pins::release(&generation)?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! While both generations are attached, a call is refused if either refuses it; events of the
//! old generation go to a ring buffer nobody reads any more (counted there as lost).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use aya::programs::links::{FdLink, PinnedLink};

/// Where the daemon mounts (or finds) its bpffs.
pub const DEFAULT_ROOT: &str = "/sys/fs/bpf";
/// Where a stand-alone `guard run` pins its links: a folder per run, named like its scope
/// (`run-PID-N`), so a run that dies by `kill -9` leaves its scope enforced until the next
/// start or `guard release` kills the scope and removes the pins.
pub const RUNS_ROOT: &str = "/sys/fs/bpf/guard-runs";
/// `statfs` `f_type` of a bpffs.
pub const BPF_FS_MAGIC: u32 = 0xcafe_4a11;
/// Prefix of the generation folders [`next_generation`] names: `gen-1`, `gen-2`, ...
pub const GENERATION_PREFIX: &str = "gen-";
/// Folder levels [`release`] descends (guard makes two: root and generation).
const MAX_RELEASE_DEPTH: usize = 8;

/// Whether `path` is on a bpffs.
pub fn is_bpffs(path: &Path) -> Result<bool> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{} has a NUL byte", path.display()))?;
    // SAFETY: a NUL-terminated path and a zeroed out-parameter of the right type.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statfs {}", path.display()));
    }
    // f_type's integer type differs between architectures; the magic is 32 bits.
    Ok(stat.f_type as u32 == BPF_FS_MAGIC)
}

/// Makes sure `root` is a bpffs: if it is not one, creates it if missing and mounts a bpffs
/// there (`mount -t bpf bpf <root>`, mode 0700, nosuid, nodev, noexec). Idempotent. Needs
/// CAP_SYS_ADMIN for the mount.
pub fn ensure_bpffs(root: &Path) -> Result<()> {
    if root.exists() && is_bpffs(root)? {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .with_context(|| format!("creating {}", root.display()))?;
    let target = CString::new(root.as_os_str().as_bytes())
        .with_context(|| format!("{} has a NUL byte", root.display()))?;
    let (source, fstype, data) = (c"bpf", c"bpf", c"mode=0700");
    // SAFETY: NUL-terminated strings that outlive the call.
    let mounted = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            data.as_ptr().cast(),
        )
    };
    if mounted != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("mount -t bpf bpf {}", root.display()));
    }
    if !is_bpffs(root)? {
        bail!("mounted a bpffs on {}, yet it is not one", root.display());
    }
    Ok(())
}

/// Removes every link pin under `dir` (recursively), which detaches each link once no
/// descriptor holds it any more (a live Enforcer holds its own until it is dropped), then the
/// folders left empty (`dir` included, unless it is a mount point). Returns how many links it
/// released. A missing `dir` releases nothing; a `dir` not on a bpffs is an error. Pins of
/// other kinds (maps, programs) are left where they are.
pub fn release(dir: &Path) -> Result<usize> {
    if !dir.exists() {
        return Ok(0);
    }
    if !is_bpffs(dir)? {
        bail!(
            "{} is not on a bpffs: it holds no pins to release",
            dir.display()
        );
    }
    release_in(dir, 0)
}

fn release_in(dir: &Path, depth: usize) -> Result<usize> {
    if depth > MAX_RELEASE_DEPTH {
        bail!(
            "{} is more than {MAX_RELEASE_DEPTH} folders deep: not one guard made",
            dir.display()
        );
    }
    let mut released = 0;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err).with_context(|| format!("reading {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .with_context(|| format!("stat {}", path.display()))?;
        if kind.is_dir() {
            released += release_in(&path, depth + 1)?;
        } else if is_link_pin(&path) {
            std::fs::remove_file(&path)
                .with_context(|| format!("removing the pin {}", path.display()))?;
            released += 1;
        }
    }
    // Not empty (other pins) or a mount point: it stays.
    let _ = std::fs::remove_dir(dir);
    Ok(released)
}

/// Whether the pin at `path` is a link (the kernel answers a link-info query about it).
fn is_link_pin(path: &Path) -> bool {
    match PinnedLink::from_pin(path) {
        // Dropping the descriptor (opened just for this question) changes nothing.
        Ok(pinned) => FdLink::from(pinned).info().is_ok(),
        Err(_) => false,
    }
}

/// The generation folders under `root` (every subfolder), oldest first: by the number after
/// [`GENERATION_PREFIX`] where there is one, else by name after those. Empty when `root` is
/// missing or unreadable.
pub fn generations(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut found: Vec<(Option<u64>, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| (generation_number(&entry.path()), entry.path()))
        .collect();
    found.sort_by(|(a_n, a), (b_n, b)| match (a_n, b_n) {
        (Some(x), Some(y)) => x.cmp(y).then_with(|| a.cmp(b)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    });
    found.into_iter().map(|(_, path)| path).collect()
}

/// `<root>/gen-<N>` with N one more than the highest generation under `root` (1 for none).
pub fn next_generation(root: &Path) -> PathBuf {
    let highest = generations(root)
        .iter()
        .filter_map(|path| generation_number(path))
        .max()
        .unwrap_or(0);
    root.join(format!("{GENERATION_PREFIX}{}", highest + 1))
}

fn generation_number(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_prefix(GENERATION_PREFIX)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_are_oldest_first_by_number_then_by_name() {
        let root = tempfile::tempdir().unwrap();
        for name in ["gen-10", "gen-2", "other", "gen-1", "gen-x"] {
            std::fs::create_dir(root.path().join(name)).unwrap();
        }
        std::fs::write(root.path().join("gen-99"), "a file, not a generation").unwrap();
        let names: Vec<String> = generations(root.path())
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["gen-1", "gen-2", "gen-10", "gen-x", "other"]);
        assert_eq!(next_generation(root.path()), root.path().join("gen-11"));
    }

    #[test]
    fn a_missing_root_has_no_generations_and_releases_nothing() {
        let root = tempfile::tempdir().unwrap();
        let missing = root.path().join("missing");
        assert!(generations(&missing).is_empty());
        assert_eq!(next_generation(&missing), missing.join("gen-1"));
        assert_eq!(release(&missing).unwrap(), 0);
    }

    #[test]
    fn release_refuses_a_folder_that_is_not_on_a_bpffs() {
        let root = tempfile::tempdir().unwrap();
        let err = release(root.path()).unwrap_err();
        assert!(format!("{err:#}").contains("not on a bpffs"), "{err:#}");
        assert!(!is_bpffs(root.path()).unwrap());
    }
}
