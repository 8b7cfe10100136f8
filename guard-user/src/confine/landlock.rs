//! A [`WritePlan`] as a Landlock ruleset: made in the parent before the fork (opening paths,
//! allocating: none of it is allowed between fork and exec), then put on the child between fork
//! and exec by [`restrict_from_pre_exec`], which makes only raw syscalls.
//!
//! The ruleset handles the write rights only (`WRITE_FILE`, `REMOVE_DIR`, `REMOVE_FILE`, every
//! `MAKE_*`, and `REFER` and `TRUNCATE` where the ABI has them), so reads and execs are never
//! decided by it. Each [`Grant`] of the plan gets every one of them below a folder, or the ones
//! that apply to a file (`WRITE_FILE`, `TRUNCATE`); the folders on the way to a denied path,
//! and the denied paths, get none. The `landlock` crate builds the ruleset (its best-effort
//! mode leaves out what an older kernel lacks); the restriction itself is two syscalls here.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::{Context, Result};
use landlock::{
    ABI, AccessFs, BitFlags, PathBeneath, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    Scope,
};

use super::{Grant, WritePlan};

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` answers the ABI version.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The Landlock ABI version of this kernel (1 or more), or why there is none: `ENOSYS` (not
/// built in) or `EOPNOTSUPP` (built in, not enabled at boot).
pub fn abi() -> io::Result<u32> {
    // SAFETY: with a NULL attribute and size 0 the kernel reads no memory; it only answers the
    // version (or an error).
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(version as u32)
}

/// Why Landlock is absent, for a person: the errno and what it means.
pub fn absent_because(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no Landlock (ENOSYS)".to_string(),
        Some(libc::EOPNOTSUPP) => "Landlock is built in but not enabled (EOPNOTSUPP: add \
                                   `landlock` to the kernel's `lsm=` boot parameter)"
            .to_string(),
        _ => format!("Landlock does not answer: {err}"),
    }
}

/// Every write right guard handles: ABI 4's write set is ABI 1's plus `REFER` (2) and
/// `TRUNCATE` (3). Later ABIs add `IOCTL_DEV` and `RESOLVE_UNIX` to the crate's write set;
/// they are not writes, so they are never handled.
fn write_rights() -> BitFlags<AccessFs> {
    AccessFs::from_write(ABI::V4)
}

/// The write rights that apply to a file (not a folder).
fn file_rights() -> BitFlags<AccessFs> {
    write_rights() & (AccessFs::WriteFile | AccessFs::Truncate)
}

/// A ruleset ready for [`restrict_from_pre_exec`]; keep it alive until the command has
/// started (the child uses its file descriptor between fork and exec; it is close-on-exec).
#[derive(Debug)]
pub struct LandlockRuleset {
    fd: OwnedFd,
    /// The kernel's ABI version.
    pub abi: u32,
    /// How many hierarchies got write rights.
    pub granted: usize,
    /// Folders on the way that could not be listed (nothing below them is writable).
    pub errors: Vec<String>,
}

impl LandlockRuleset {
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// What the command gets for its writes.
#[derive(Debug)]
pub enum Confinement {
    /// Landlock is there, and nothing to deny: no ruleset (writes are as without guard).
    Nothing,
    /// This ruleset, put on the command between fork and exec.
    Landlock(LandlockRuleset),
    /// Landlock is absent (why): writes are not confined.
    Unavailable(String),
}

impl Confinement {
    /// The ruleset's file descriptor, when there is one to restrict the child with.
    pub fn ruleset_fd(&self) -> Option<RawFd> {
        match self {
            Confinement::Landlock(ruleset) => Some(ruleset.raw_fd()),
            _ => None,
        }
    }
}

/// The ABI of a Landlock that can confine, or the confinement that says why there is none.
fn usable_abi() -> std::result::Result<u32, Confinement> {
    match abi() {
        Ok(version) if version >= 1 => Ok(version),
        Ok(version) => Err(Confinement::Unavailable(format!(
            "Landlock answers ABI {version}"
        ))),
        Err(err) => Err(Confinement::Unavailable(absent_because(&err))),
    }
}

/// Turns `plan` into a ruleset: every grant opened (`O_PATH`, not following symlinks, checked
/// to still be a folder or not) and added with its rights. An error is a ruleset that could not
/// be made on a kernel that has Landlock.
pub fn confinement(plan: &WritePlan) -> Result<Confinement> {
    // Asked first, whatever the plan: a kernel without Landlock is worth one line on every run
    // (the protected paths are not held), even when nothing of them exists yet.
    let abi = match usable_abi() {
        Ok(abi) => abi,
        Err(unavailable) => return Ok(unavailable),
    };
    if plan.is_empty() {
        return Ok(Confinement::Nothing);
    }
    let (grants, errors) = plan.grants();
    let mut ruleset = write_ruleset()?;
    let mut granted = 0;
    for grant in &grants {
        let Some(file) = open_grant(grant) else {
            continue;
        };
        ruleset = grant_writes(ruleset, file, grant.folder, &grant.path)?;
        granted += 1;
    }
    finish(ruleset, abi, granted, errors)
}

/// A new ruleset that handles (so refuses unless granted) the write rights, and keeps the
/// command's signals inside its domain (ABI 6; left out on older kernels): a root command
/// cannot kill the `guard run` that holds its asks, nor any other process outside the scope.
fn write_ruleset() -> Result<RulesetCreated> {
    Ruleset::default()
        .handle_access(write_rights())
        .context("asking Landlock to handle the write rights")?
        .scope(Scope::Signal)
        .context("asking Landlock to keep signals inside the scope")?
        .create()
        .context("creating a Landlock ruleset")
}

/// Adds write rights below `file` (every one for a folder, a file's own for anything else).
fn grant_writes(
    ruleset: RulesetCreated,
    file: std::fs::File,
    folder: bool,
    path: &std::path::Path,
) -> Result<RulesetCreated> {
    let rights = if folder {
        write_rights()
    } else {
        file_rights()
    };
    ruleset
        .add_rule(PathBeneath::new(file, rights))
        .with_context(|| format!("granting writes below {}", path.display()))
}

/// The ruleset's descriptor, ready for [`restrict_from_pre_exec`].
fn finish(
    ruleset: RulesetCreated,
    abi: u32,
    granted: usize,
    errors: Vec<String>,
) -> Result<Confinement> {
    let fd: Option<OwnedFd> = ruleset.into();
    let fd = fd.context("Landlock made no ruleset file descriptor")?;
    Ok(Confinement::Landlock(LandlockRuleset {
        fd,
        abi,
        granted,
        errors,
    }))
}

/// `grant`'s path opened `O_PATH | O_NOFOLLOW`, if it is still what the plan saw (a folder or
/// not, and no symlink); `None` when it went away or changed.
fn open_grant(grant: &Grant) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(&grant.path)
        .ok()?;
    let kind = file.metadata().ok()?.file_type();
    (!kind.is_symlink() && kind.is_dir() == grant.folder).then_some(file)
}

/// Puts the calling process under the Landlock ruleset `fd`. Only raw syscalls (no allocation,
/// no locks): async-signal-safe, so usable between fork and exec, next to
/// `kernel::scope::join_from_pre_exec`.
///
/// `landlock_restrict_self` needs either `no_new_privs` or `CAP_SYS_ADMIN`. guard runs as root,
/// so the first try goes without `no_new_privs`: a root command keeps the same set-user-ID and
/// file-capability behaviour it has unguarded (the Landlock domain stays on every process it
/// starts, set-user-ID or not). Only when the kernel refuses (`EPERM`: no `CAP_SYS_ADMIN`) is
/// `PR_SET_NO_NEW_PRIVS` set and the call made again.
pub fn restrict_from_pre_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: two syscalls with integer arguments; nothing is read from or written to memory.
    unsafe {
        if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0 as libc::c_uint) == 0 {
            return Ok(());
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0 as libc::c_uint) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A ruleset that grants every write right below `/`: it decides no write, but a process under
/// any Landlock domain that handles file rights cannot mount, unmount or pivot_root, so the
/// read-only binds of [`super::namespace`] stay. `Unavailable` without Landlock.
pub fn mount_lock() -> Result<Confinement> {
    let abi = match usable_abi() {
        Ok(abi) => abi,
        Err(unavailable) => return Ok(unavailable),
    };
    let root = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open("/")
        .context("opening / for the Landlock ruleset")?;
    let ruleset = write_ruleset()?
        .add_rule(PathBeneath::new(root, write_rights()))
        .context("granting writes below /")?;
    let fd: Option<OwnedFd> = ruleset.into();
    let fd = fd.context("Landlock made no ruleset file descriptor")?;
    Ok(Confinement::Landlock(LandlockRuleset {
        fd,
        abi,
        granted: 1,
        errors: Vec::new(),
    }))
}

/// What a sandbox mode lets write whatever its roots: the null device and the terminal.
pub const ALWAYS_WRITABLE: [&str; 4] = ["/dev/null", "/dev/tty", "/dev/ptmx", "/dev/pts"];

/// The ruleset of a sandbox mode (`read-only`: no roots; `workspace-write`: its roots): writes
/// only below `roots` (those that exist; canonical) and to [`ALWAYS_WRITABLE`]. Like
/// [`mount_lock`], it also keeps the read-only binds in place. `Unavailable` without Landlock.
pub fn sandbox(roots: &[PathBuf]) -> Result<Confinement> {
    let abi = match usable_abi() {
        Ok(abi) => abi,
        Err(unavailable) => return Ok(unavailable),
    };
    let mut ruleset = write_ruleset()?;
    let mut granted = 0;
    let always = ALWAYS_WRITABLE.iter().map(PathBuf::from);
    for path in roots.iter().cloned().chain(always) {
        // A root that does not exist has nothing to grant (nothing can be made there either).
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&path)
        else {
            continue;
        };
        let folder = file.metadata().is_ok_and(|m| m.is_dir());
        ruleset = grant_writes(ruleset, file, folder, &path)?;
        granted += 1;
    }
    finish(ruleset, abi, granted, Vec::new())
}
