//! Loaded, verified program sets kept between stand-alone runs, so a `guard run` does not pay
//! the kernel's verifier again (most of a cold start: the exec program alone takes about two
//! thirds of it).
//!
//! A set is a folder on guard's bpffs, `CACHE_ROOT/<key>/<slot>`, holding the pinned programs
//! (`prog-NAME`) and maps (`map-NAME`) of one load of guard's object. The key is a hash of what
//! the programs were built from: the object's bytes, the backend, the boot (the running
//! kernel, whose offsets are patched into the programs), guard's build and the exec map sizes;
//! a set of another key is never reused, and is removed once nobody uses it.
//!
//! A set serves one run at a time. A run leases a slot by an exclusive `flock` on its lock file
//! (under `LOCK_DIR`, released by the kernel when the run dies), and takes it only when no link
//! in the kernel runs one of its programs: a run killed by `kill -9` leaves its scope enforced
//! through pinned links on its set's programs, and that set is not touched until those links
//! are gone (`remove_abandoned_scopes`, `guard release`). A set whose pinned programs use a map
//! that is not among its pinned maps (a pin removed by hand) is not trusted: it is removed.
//!
//! Before a leased set is used, every map it holds is emptied ([`super::map_reset`]), so a run
//! starts from what a fresh load has: no scope, no approval, no held socket, no event of the run
//! before it. The processes of a scope cannot reach any of this: the bpffs is hidden in a run's
//! mount namespace and the `bpf` system call is refused there (`confine`).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::pins::{DEFAULT_ROOT, ensure_bpffs, release};

/// Where the sets are pinned.
pub const CACHE_ROOT: &str = "/sys/fs/bpf/guard-cache";
/// Where their lock files are (a bpffs holds no regular files).
pub const LOCK_DIR: &str = "/run/guard/program-cache";

/// Where sets are kept: [`Store::default`] for guard's runs; a test keeps its own.
#[derive(Clone, Debug)]
pub struct Store {
    /// The folder of the sets, on a bpffs.
    pub root: PathBuf,
    /// The folder of their lock files.
    pub locks: PathBuf,
}

impl Default for Store {
    fn default() -> Store {
        Store {
            root: PathBuf::from(CACHE_ROOT),
            locks: PathBuf::from(LOCK_DIR),
        }
    }
}
/// The most sets of one key: more runs at once than this load their programs afresh.
const MAX_SLOTS: usize = 4;
/// Pin file prefixes (a bpffs refuses names with a dot: they are its own).
const PROGRAM_PREFIX: &str = "prog-";
const MAP_PREFIX: &str = "map-";
/// What stands for a dot in a pinned map's name: the object's own data maps (`.rodata`).
pub const DOT: char = '_';

/// What the programs of a set were built from, as a folder name.
pub fn key(object: &[u8], parameters: &[&[u8]]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(object);
    for part in parameters {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().to_hex()[..32].to_string()
}

/// A leased set: this run's alone until dropped.
pub struct CachedSet {
    paths: KeptPaths,
    /// Held for the lease (`flock`); closing it ends the lease.
    _lock: File,
    /// Whether the set held programs already (else this run fills it).
    reused: bool,
}

/// Where a set's programs and maps are pinned.
#[derive(Clone, Debug)]
pub struct KeptPaths {
    dir: PathBuf,
}

impl CachedSet {
    /// Leases a set of `key`: a filled one nobody uses if there is one, else an empty slot.
    /// `Ok(None)` when every slot is busy (the run loads afresh, without a set). Sets of other
    /// keys that nobody uses are removed first.
    pub fn lease(store: &Store, key: &str) -> Result<Option<CachedSet>> {
        ensure_bpffs(Path::new(DEFAULT_ROOT)).context("a bpffs to keep loaded programs in")?;
        for dir in [&store.root, &store.locks] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("creating {}", dir.display()))?;
        }
        remove_other_keys(store, key);
        let in_use = programs_in_use();
        let mut empty = None;
        let mut reuse = None;
        for slot in 0..MAX_SLOTS {
            let Some(lock) = try_lock(&lock_path(store, key, slot))? else {
                continue;
            };
            let dir = store.root.join(key).join(slot.to_string());
            let programs = pinned(&dir, PROGRAM_PREFIX);
            if programs.is_empty() {
                empty.get_or_insert((dir, lock));
                continue;
            }
            if program_ids(&programs).iter().any(|id| in_use.contains(id)) {
                // An abandoned scope still runs on it: its maps are that scope's policy.
                continue;
            }
            if !consistent(&dir) {
                tracing::warn!(
                    "the program set {} uses maps that are not pinned beside it: removed",
                    dir.display()
                );
                release(&dir)?;
                empty.get_or_insert((dir, lock));
            } else if reuse.is_none() {
                reuse = Some((dir, lock));
            } else {
                // One idle set is enough for the next run: each holds its maps' kernel memory
                // (about 170 MiB, preallocated), so the others left by runs at once go.
                release(&dir)?;
            }
        }
        if let Some((dir, lock)) = reuse {
            super::map_reset::empty_pinned_maps(&pinned(&dir, MAP_PREFIX))
                .with_context(|| format!("emptying the maps of {}", dir.display()))?;
            return Ok(Some(CachedSet {
                paths: KeptPaths { dir },
                _lock: lock,
                reused: true,
            }));
        }
        let Some((dir, lock)) = empty else {
            return Ok(None);
        };
        // Whatever a set that never got a program left (maps of a load that failed).
        release(&dir)?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        Ok(Some(CachedSet {
            paths: KeptPaths { dir },
            _lock: lock,
            reused: false,
        }))
    }

    pub fn reused(&self) -> bool {
        self.reused
    }

    pub fn paths(&self) -> &KeptPaths {
        &self.paths
    }
}

impl KeptPaths {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where map `name` is pinned (aya pins it there at load when it is not yet).
    pub fn map_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!(
            "{MAP_PREFIX}{}",
            name.replace('.', &DOT.to_string())
        ))
    }

    /// Where program `name` is pinned.
    pub fn program_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{PROGRAM_PREFIX}{name}"))
    }

    /// Marks the set with `name` (an empty folder: a bpffs holds no regular files).
    pub fn mark(&self, name: &str) -> Result<()> {
        let path = self.dir.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(err) => Err(err).with_context(|| format!("creating {}", path.display())),
        }
    }

    pub fn has_mark(&self, name: &str) -> bool {
        self.dir.join(name).is_dir()
    }

    /// The programs pinned in the set, by name.
    pub fn programs(&self) -> Vec<String> {
        pinned(&self.dir, PROGRAM_PREFIX)
            .iter()
            .filter_map(|path| {
                let name = path.file_name()?.to_str()?;
                Some(name.strip_prefix(PROGRAM_PREFIX)?.to_string())
            })
            .collect()
    }
}

/// Removes every set nobody uses (`guard release`): the number removed. A set in use (leased,
/// or its programs attached) stays.
pub fn release_unused(store: &Store) -> Result<usize> {
    let root = store.root.as_path();
    if !root.exists() {
        return Ok(0);
    }
    let in_use = programs_in_use();
    let mut removed = 0;
    for key_dir in subfolders(root) {
        let Some(key) = key_dir
            .file_name()
            .and_then(|n| n.to_str())
            .map(String::from)
        else {
            continue;
        };
        for slot_dir in subfolders(&key_dir) {
            let Some(slot) = slot_dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            let Some(_lock) = try_lock(&lock_path(store, &key, slot))? else {
                continue;
            };
            let ids = program_ids(&pinned(&slot_dir, PROGRAM_PREFIX));
            if ids.iter().any(|id| in_use.contains(id)) {
                continue;
            }
            release(&slot_dir)?;
            let _ = std::fs::remove_dir(&slot_dir);
            let _ = std::fs::remove_file(lock_path(store, &key, slot));
            removed += 1;
        }
        let _ = std::fs::remove_dir(&key_dir);
    }
    let _ = std::fs::remove_dir(root);
    Ok(removed)
}

fn remove_other_keys(store: &Store, key: &str) {
    let root = store.root.as_path();
    let in_use = programs_in_use();
    for key_dir in subfolders(root) {
        let Some(other) = key_dir
            .file_name()
            .and_then(|n| n.to_str())
            .map(String::from)
        else {
            continue;
        };
        if other == key {
            continue;
        }
        for slot_dir in subfolders(&key_dir) {
            let slot = slot_dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<usize>().ok());
            let lock =
                slot.and_then(|slot| try_lock(&lock_path(store, &other, slot)).ok().flatten());
            let idle = !program_ids(&pinned(&slot_dir, PROGRAM_PREFIX))
                .iter()
                .any(|id| in_use.contains(id));
            if lock.is_some() && idle && release(&slot_dir).is_ok() {
                let _ = std::fs::remove_dir(&slot_dir);
                if let Some(slot) = slot {
                    let _ = std::fs::remove_file(lock_path(store, &other, slot));
                }
            }
        }
        let _ = std::fs::remove_dir(&key_dir);
    }
}

fn lock_path(store: &Store, key: &str, slot: usize) -> PathBuf {
    store.locks.join(format!("{key}-{slot}.lock"))
}

/// The lock file, locked: `None` when another process holds it.
fn try_lock(path: &Path) -> Result<Option<File>> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(Some(file))
    } else {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(err).with_context(|| format!("locking {}", path.display()))
        }
    }
}

fn subfolders(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect()
}

/// The pins in `dir` whose names start with `prefix`.
fn pinned(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .map(|entry| entry.path())
        .collect()
}

/// The kernel ids of the pinned programs (a pin that cannot be opened has none).
fn program_ids(pins: &[PathBuf]) -> Vec<u32> {
    pins.iter()
        .filter_map(|path| aya::programs::ProgramInfo::from_pin(path).ok())
        .map(|info| info.id())
        .collect()
}

/// The programs some link runs now, anywhere on the host.
fn programs_in_use() -> std::collections::HashSet<u32> {
    aya::programs::loaded_links()
        .flatten()
        .map(|link| link.program_id())
        .collect()
}

/// Whether every map the set's programs use is pinned in the set (the object's read-only
/// data is pinned too, for this check).
fn consistent(dir: &Path) -> bool {
    let maps: std::collections::HashSet<u32> = pinned(dir, MAP_PREFIX)
        .iter()
        .filter_map(|path| aya::maps::MapInfo::from_pin(path).ok())
        .map(|info| info.id())
        .collect();
    pinned(dir, PROGRAM_PREFIX).iter().all(|path| {
        aya::programs::ProgramInfo::from_pin(path)
            .ok()
            .and_then(|info| info.map_ids().ok().flatten())
            .is_some_and(|ids| ids.iter().all(|id| maps.contains(id)))
    })
}
