//! Exact write protection in a private mount namespace: the command gets its own copy of the
//! mount table (propagation made slave, so nothing it mounts reaches the host) in which every
//! denied path is bind-mounted onto itself read-only, and every folder on the way to one is
//! bind-mounted onto itself (writable). A write, chmod, chown, xattr, timestamp or `chattr`
//! change of a denied path fails with EROFS; a mount point cannot be removed or renamed
//! (EBUSY), so no folder on the way can be moved aside to put another file in the denied
//! path's place. Everything else (new files beside a denied one, `/tmp`, the current folder)
//! is written as without guard.
//!
//! A folder held as [`super::Hold::Entries`] (named without `/**`) is read-only as a whole:
//! a read-only mount cannot refuse new entries while letting what is inside be written.
//!
//! The pseudo file systems that change the kernel (`/proc/sys`, every cgroup mount) are made
//! read-only the same way. Every bpf file system is hidden: an empty read-only file system is
//! mounted over it, so the command cannot name guard's pinned programs and links (a read-only
//! bind would not do: `BPF_OBJ_GET` of a pin only reads it, and a link got that way can be
//! detached). The Landlock domain put on the command afterwards refuses mount, umount and
//! pivot_root, so none of this can be undone from inside.
//!
//! The plan is made in the parent ([`MountPlan::new`]: paths as C strings, nothing to
//! allocate later); [`MountPlan::apply_from_pre_exec`] makes only raw syscalls.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::WritePlan;

/// File system types whose writes change the kernel, not files: made read-only.
const KERNEL_FILE_SYSTEMS: [&str; 2] = ["cgroup", "cgroup2"];
/// File system types whose contents are guard's own kernel objects: hidden.
const HIDDEN_FILE_SYSTEMS: [&str; 1] = ["bpf"];

/// One bind of a path onto itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub path: PathBuf,
    /// Remounted read-only (a denied path); else writable (a folder on the way).
    pub read_only: bool,
    /// Not a bind: an empty read-only file system mounted over the path (a bpf file system).
    pub hidden: bool,
    /// A kernel file system's mount point (cgroup, bpffs), which may be unmounted and removed
    /// between the plan and the command's start: gone, it has nothing left to hold, so a
    /// missing one is skipped instead of stopping the command.
    pub may_vanish: bool,
    c_path: CString,
}

/// The binds for one command, in the order they are made (folders before what is inside).
#[derive(Clone, Debug, Default)]
pub struct MountPlan {
    pub binds: Vec<Bind>,
}

impl MountPlan {
    /// The binds for `plan`'s denied paths and the folders on the way to them, then the
    /// kernel's pseudo file systems (`/proc/sys` and the cgroup mounts listed in `mountinfo`,
    /// the text of `/proc/self/mountinfo`), and the bpf mounts listed there hidden.
    pub fn new(plan: &WritePlan, mountinfo: &str) -> MountPlan {
        let mut wanted: BTreeMap<PathBuf, bool> = BTreeMap::new();
        let held: Vec<PathBuf> = plan
            .denied
            .iter()
            .map(|d| d.path.clone())
            .chain(plan.missing_holders.iter().cloned())
            .collect();
        let pseudo = pseudo_file_systems(mountinfo);
        let hidden = mount_points(mountinfo, &HIDDEN_FILE_SYSTEMS);
        for path in held.iter().chain(&pseudo).cloned() {
            wanted.insert(path, true);
        }
        for path in &held {
            for ancestor in path.ancestors().skip(1) {
                if ancestor != Path::new("/") {
                    wanted.entry(ancestor.to_path_buf()).or_insert(false);
                }
            }
        }
        // Inside a read-only bind every later bind would be read-only too, and inside a hidden
        // file system there is nothing left to bind: not needed.
        let read_only_roots: Vec<PathBuf> = wanted
            .iter()
            .filter(|(_, ro)| **ro)
            .map(|(p, _)| p.clone())
            .chain(hidden.iter().cloned())
            .collect();
        for path in &hidden {
            wanted.insert(path.clone(), true);
        }
        let mut binds: Vec<Bind> = wanted
            .into_iter()
            .filter(|(path, _)| {
                !read_only_roots
                    .iter()
                    .any(|root| root != path && path.starts_with(root))
            })
            .filter_map(|(path, read_only)| {
                let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
                let kernel_mount = pseudo.contains(&path) || hidden.contains(&path);
                Some(Bind {
                    may_vanish: kernel_mount && !held.contains(&path),
                    hidden: hidden.contains(&path),
                    path,
                    read_only,
                    c_path,
                })
            })
            .collect();
        binds.sort_by_key(|b| (b.path.components().count(), b.path.clone()));
        MountPlan { binds }
    }

    /// Between fork and exec: a new mount namespace, slave to the host's, with every bind made.
    /// Fails closed: a bind that cannot be made stops the command from starting.
    pub fn apply_from_pre_exec(&self) -> io::Result<()> {
        let none = c"none";
        let root = c"/";
        // SAFETY: unshare and mount with C strings made before the fork.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::mount(
                none.as_ptr(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            for bind in &self.binds {
                let path = bind.c_path.as_ptr();
                if bind.hidden {
                    // Empty, read-only, nothing to run or open as a device.
                    if libc::mount(
                        c"guard-hidden".as_ptr(),
                        path,
                        c"tmpfs".as_ptr(),
                        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        c"size=4k,mode=0555".as_ptr().cast(),
                    ) != 0
                    {
                        let err = io::Error::last_os_error();
                        if bind.may_vanish && err.raw_os_error() == Some(libc::ENOENT) {
                            continue;
                        }
                        return Err(err);
                    }
                    continue;
                }
                if libc::mount(
                    path,
                    path,
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) != 0
                {
                    let err = io::Error::last_os_error();
                    if bind.may_vanish && err.raw_os_error() == Some(libc::ENOENT) {
                        continue;
                    }
                    return Err(err);
                }
                if bind.read_only
                    && libc::mount(
                        none.as_ptr(),
                        path,
                        std::ptr::null(),
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
                        std::ptr::null(),
                    ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            // The current folder still points into the mounts under the binds (a relative
            // `.git/config` would reach the writable file): enter it again by its path, which
            // now goes through them. A current folder with no path fails closed.
            let mut cwd = [0 as libc::c_char; libc::PATH_MAX as usize];
            if libc::getcwd(cwd.as_mut_ptr(), cwd.len()).is_null() || libc::chdir(cwd.as_ptr()) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// `/proc/sys` and the mount points of cgroup file systems in `mountinfo`.
pub fn pseudo_file_systems(mountinfo: &str) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("/proc/sys")];
    found.extend(mount_points(mountinfo, &KERNEL_FILE_SYSTEMS));
    found
}

/// The mount points of the file systems of `kinds` in `mountinfo`, with the kernel's octal
/// escapes (`\040` for a space) read back: a bpf file system mounted at an odd name is hidden
/// too.
fn mount_points(mountinfo: &str, kinds: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        let Some((mount, fs)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = mount.split(' ').nth(4);
        let fs_type = fs.split(' ').next();
        if let (Some(point), Some(kind)) = (mount_point, fs_type)
            && kinds.contains(&kind)
        {
            found.push(PathBuf::from(std::ffi::OsString::from_vec(unescape(point))));
        }
    }
    found
}

/// A mountinfo field with its `\ooo` escapes (space, tab, newline, backslash) as bytes.
fn unescape(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confine::{DeniedPath, Hold, WriteRule};

    fn denied(path: &str) -> DeniedPath {
        DeniedPath {
            path: PathBuf::from(path),
            hold: Hold::Beneath,
            rule: WriteRule::parse(&format!("write({path})"), "t.rules:1", false).unwrap(),
        }
    }

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw
31 22 0:27 / /sys/fs/bpf rw,nosuid shared:10 - bpf bpf rw,mode=700
32 22 0:28 / /tmp rw shared:11 - tmpfs tmpfs rw
33 22 0:29 / /mnt/a\\040b rw - cgroup2 cgroup2 rw
34 22 0:30 / /run/x\\134y rw - bpf bpf rw
";

    #[test]
    fn denied_paths_are_read_only_and_the_folders_on_the_way_are_bound_first() {
        let plan = WritePlan {
            denied: vec![denied("/tmp/w/x.rules"), denied("/tmp/w/sub/y")],
            ..WritePlan::default()
        };
        let mounts = MountPlan::new(&plan, "");
        let shown: Vec<(String, bool)> = mounts
            .binds
            .iter()
            .map(|b| (b.path.display().to_string(), b.read_only))
            .collect();
        assert_eq!(
            shown,
            [
                ("/tmp".to_string(), false),
                ("/proc/sys".to_string(), true),
                ("/tmp/w".to_string(), false),
                ("/tmp/w/sub".to_string(), false),
                ("/tmp/w/x.rules".to_string(), true),
                ("/tmp/w/sub/y".to_string(), true),
            ]
        );
    }

    #[test]
    fn nothing_is_bound_inside_a_read_only_bind() {
        let plan = WritePlan {
            denied: vec![denied("/srv/data"), denied("/srv/data/inner/file")],
            ..WritePlan::default()
        };
        let paths: Vec<PathBuf> = MountPlan::new(&plan, "")
            .binds
            .into_iter()
            .map(|b| b.path)
            .collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("/srv"),
                PathBuf::from("/proc/sys"),
                PathBuf::from("/srv/data")
            ]
        );
    }

    #[test]
    fn cgroup_and_bpf_mounts_are_found_in_mountinfo_escaped_names_too() {
        assert_eq!(
            pseudo_file_systems(MOUNTINFO),
            [
                PathBuf::from("/proc/sys"),
                PathBuf::from("/sys/fs/cgroup/unified"),
                PathBuf::from("/mnt/a b"),
            ]
        );
        assert_eq!(
            mount_points(MOUNTINFO, &HIDDEN_FILE_SYSTEMS),
            [PathBuf::from("/sys/fs/bpf"), PathBuf::from("/run/x\\y")]
        );
    }

    #[test]
    fn bpf_mounts_are_hidden_not_bound_and_nothing_is_bound_inside_them() {
        let plan = WritePlan {
            denied: vec![denied("/sys/fs/bpf/guard/x"), denied("/tmp/w/x.rules")],
            ..WritePlan::default()
        };
        let shown: Vec<(String, bool)> = MountPlan::new(&plan, MOUNTINFO)
            .binds
            .iter()
            .filter(|b| b.path.starts_with("/sys/fs/bpf") || b.path.starts_with("/run"))
            .map(|b| (b.path.display().to_string(), b.hidden))
            .collect();
        assert_eq!(
            shown,
            [
                ("/run/x\\y".to_string(), true),
                ("/sys/fs/bpf".to_string(), true)
            ]
        );
    }

    #[test]
    fn only_kernel_mounts_may_vanish_before_the_command_starts() {
        let plan = WritePlan {
            denied: vec![denied("/sys/fs/bpf"), denied("/tmp/w/x.rules")],
            ..WritePlan::default()
        };
        let vanishing: Vec<(String, bool)> = MountPlan::new(&plan, MOUNTINFO)
            .binds
            .iter()
            .map(|b| (b.path.display().to_string(), b.may_vanish))
            .collect();
        // A path the policy denies is held even where it is also a kernel mount.
        assert!(
            vanishing.contains(&("/sys/fs/bpf".to_string(), false)),
            "{vanishing:?}"
        );
        assert!(vanishing.contains(&("/sys/fs/cgroup/unified".to_string(), true)));
        assert!(vanishing.contains(&("/tmp/w/x.rules".to_string(), false)));
    }
}
