//! Scopes: the cgroup v2 groups whose processes guard enforces on. `guard run` makes a fresh
//! one per command and removes it at exit.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` or, on hybrid systems,
/// `/sys/fs/cgroup/unified`).
pub fn cgroup2_root() -> Result<PathBuf> {
    let mounts =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    mounts
        .lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            let mount_point = left.split_whitespace().nth(4)?;
            (fstype == "cgroup2").then(|| PathBuf::from(mount_point))
        })
        .ok_or_else(|| {
            anyhow!("no cgroup v2 hierarchy is mounted (mount -t cgroup2 none /sys/fs/cgroup)")
        })
}

/// The cgroup id the kernel's `bpf_get_current_cgroup_id` reports: the directory's inode number.
pub fn cgroup_id(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .with_context(|| format!("reading cgroup {}", path.display()))?
        .ino())
}

/// The cgroup (under the cgroup2 root) that holds a stand-alone `guard run`'s scopes.
pub const STANDALONE_PARENT: &str = "guard";

/// The cgroup2 path of process `pid` (from `/proc/PID/cgroup`'s `0::` line).
pub fn cgroup_of_pid(pid: u32) -> Result<PathBuf> {
    let file = format!("/proc/{pid}/cgroup");
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?;
    let relative = text
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or_else(|| anyhow!("{file} names no cgroup v2 group"))?;
    Ok(cgroup2_root()?.join(relative.trim_start_matches('/')))
}

/// A fresh cgroup, removed (its processes killed first) on drop.
pub struct ScopeCgroup {
    path: PathBuf,
    id: u64,
    procs: CString,
    /// Made by [`ScopeCgroup::create`] under the shared `guard` parent, which goes with the
    /// last such scope; a [`ScopeCgroup::child`] leaves its parent to the parent's own drop.
    under_shared_parent: bool,
}

impl ScopeCgroup {
    /// Creates `<cgroup2 root>/guard/<name>`.
    pub fn create(name: &str) -> Result<Self> {
        let parent = cgroup2_root()?.join(STANDALONE_PARENT);
        let path = parent.join(name);
        // Another scope's drop may remove the shared parent between the two calls: retry.
        let mut attempts = 0;
        loop {
            std::fs::create_dir_all(&parent)
                .with_context(|| format!("creating {}", parent.display()))?;
            match std::fs::create_dir(&path) {
                Ok(()) => break,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound && attempts < 3 => {
                    attempts += 1;
                }
                Err(err) => {
                    return Err(err).with_context(|| format!("creating cgroup {}", path.display()));
                }
            }
        }
        let id = cgroup_id(&path)?;
        let procs = CString::new(path.join("cgroup.procs").as_os_str().as_bytes())?;
        Ok(ScopeCgroup {
            path,
            id,
            procs,
            under_shared_parent: true,
        })
    }

    /// Creates `<this cgroup>/<name>`, removed on drop like this one. Drop it first: a cgroup
    /// with children cannot be removed.
    pub fn child(&self, name: &str) -> Result<ScopeCgroup> {
        let path = self.path.join(name);
        std::fs::create_dir(&path)
            .with_context(|| format!("creating cgroup {}", path.display()))?;
        let id = cgroup_id(&path)?;
        let procs = CString::new(path.join("cgroup.procs").as_os_str().as_bytes())?;
        Ok(ScopeCgroup {
            path,
            id,
            procs,
            under_shared_parent: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// `cgroup.procs` of this cgroup, for a child to move itself in between fork and exec
    /// (only async-signal-safe calls there): see [`join_from_pre_exec`].
    pub fn procs_path(&self) -> &CString {
        &self.procs
    }

    /// Moves a running process in.
    pub fn add_pid(&self, pid: u32) -> Result<()> {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving pid {pid} into {}", self.path.display()))
    }

    pub fn pids(&self) -> Vec<u32> {
        cgroup_pids(&self.path)
    }

    /// Kills every process in this cgroup and below it (`cgroup.kill`), at once; the folder
    /// stays until the drop.
    pub fn kill(&self) {
        if std::fs::write(self.path.join("cgroup.kill"), "1").is_err() {
            for pid in self.pids() {
                // SAFETY: sending a signal.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs`. Only
/// async-signal-safe calls: usable between fork and exec.
pub fn join_from_pre_exec(procs: &CString) -> std::io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and a static buffer.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let written = libc::write(fd, b"0".as_ptr().cast(), 1);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if written != 1 {
            return Err(err);
        }
    }
    Ok(())
}

/// The processes of cgroup `path` (not of its children); none when it cannot be read.
pub fn cgroup_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills what is left in cgroup `path` and removes it, within 2 s. Returns how many processes
/// were there to kill; the folder may outlive the bound (a process stuck in the kernel).
fn kill_and_remove(path: &Path) -> usize {
    // Child cgroups first (a cgroup with children cannot be removed); `cgroup.kill` below
    // reaches their processes too, this only removes their folders.
    let mut found = 0;
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.filter_map(|e| e.ok()) {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                found += kill_and_remove(&entry.path());
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    let kill = path.join("cgroup.kill");
    found += cgroup_pids(path).len();
    while Instant::now() < deadline {
        let pids = cgroup_pids(path);
        if pids.is_empty() {
            break;
        }
        if std::fs::write(&kill, "1").is_err() {
            for pid in pids {
                // SAFETY: sending a signal.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    while std::fs::remove_dir(path).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    found
}

/// A stand-alone scope whose `guard run` died without removing it (a `kill -9`), removed by
/// [`remove_abandoned_scopes`].
#[derive(Debug)]
pub struct AbandonedScope {
    pub path: PathBuf,
    /// The `guard run` (or other session) process that made it.
    pub owner_pid: u32,
    /// Its processes, killed: they ran on under the run's pinned programs, with nobody to
    /// answer their asks.
    pub killed: usize,
    /// Still there after the bound (its processes would not die in time).
    pub left: bool,
    /// The run's pinned links removed (detached) once its processes were gone.
    pub released: usize,
}

impl std::fmt::Display for AbandonedScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} of an earlier `guard run` (pid {}, gone without cleaning up: kill -9?); \
             {} process(es) left in it, still enforced by its {} pinned links, {}",
            if self.left {
                "could not remove the scope"
            } else {
                "removed the scope"
            },
            self.path.display(),
            self.owner_pid,
            self.killed,
            self.released,
            if self.left {
                "would not die within 2 s (the pins stay)"
            } else {
                "were killed and the pins removed"
            }
        )
    }
}

/// The `guard run` pid in a stand-alone scope's or pin folder's name (`run-PID-N`).
fn run_owner(name: &std::ffi::OsStr) -> Option<u32> {
    name.to_str()?
        .strip_prefix("run-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// The entries of `dir` named `run-PID-N` whose PID is no longer running.
fn abandoned_runs(dir: &Path) -> Vec<(std::ffi::OsString, u32)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|entry| {
            let owner = run_owner(&entry.file_name())?;
            let gone = !Path::new(&format!("/proc/{owner}")).exists();
            gone.then(|| (entry.file_name(), owner))
        })
        .collect()
}

/// Removes the stand-alone scopes (`<cgroup2>/guard/run-PID-N`) whose owner PID is no longer
/// running, killing what is left in them, then their pinned links (`pins::RUNS_ROOT/run-PID-N`),
/// which enforced on those processes until then. `guard run`, `guard daemon` and `guard
/// release` call it, so a `kill -9` of a `guard run` leaves nothing behind past the next
/// start. A PID reused by another process keeps its folder until that process ends (a leftover,
/// never a removal of a live one).
pub fn remove_abandoned_scopes() -> Vec<AbandonedScope> {
    let pins_root = Path::new(super::pins::RUNS_ROOT);
    let release = |name: &std::ffi::OsStr| super::pins::release(&pins_root.join(name)).unwrap_or(0);
    let mut removed = Vec::new();
    if let Ok(root) = cgroup2_root() {
        let parent = root.join(STANDALONE_PARENT);
        for (name, owner_pid) in abandoned_runs(&parent) {
            let path = parent.join(&name);
            let killed = kill_and_remove(&path);
            let left = path.exists();
            // Pins go only once nothing is left for them to enforce on.
            let released = if left { 0 } else { release(&name) };
            removed.push(AbandonedScope {
                path,
                owner_pid,
                killed,
                left,
                released,
            });
        }
        // The shared parent goes when nothing else is in it (EBUSY otherwise).
        let _ = std::fs::remove_dir(&parent);
    }
    // Pins whose scope is gone already (the run died between removing it and its pins).
    for (name, _) in abandoned_runs(pins_root) {
        release(&name);
    }
    let _ = std::fs::remove_dir(pins_root);
    removed
}

impl Drop for ScopeCgroup {
    fn drop(&mut self) {
        kill_and_remove(&self.path);
        // The shared `guard` parent goes with the last scope (EBUSY while others remain).
        if self.under_shared_parent
            && let Some(parent) = self.path.parent()
        {
            let _ = std::fs::remove_dir(parent);
        }
    }
}
