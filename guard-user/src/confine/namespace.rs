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
//! The pseudo file systems that change the kernel (`/proc/sys`, every cgroup and bpf mount)
//! are made read-only the same way. The Landlock domain put on the command afterwards refuses
//! mount, umount and pivot_root, so none of this can be undone from inside.
//!
//! The plan is made in the parent ([`MountPlan::new`]: paths as C strings, nothing to
//! allocate later); [`MountPlan::apply_from_pre_exec`] makes only raw syscalls.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::WritePlan;

/// File system types whose writes change the kernel, not files.
const KERNEL_FILE_SYSTEMS: [&str; 3] = ["cgroup", "cgroup2", "bpf"];

/// One bind of a path onto itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub path: PathBuf,
    /// Remounted read-only (a denied path); else writable (a folder on the way).
    pub read_only: bool,
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
    /// kernel's pseudo file systems (`/proc/sys` and the cgroup and bpf mounts listed in
    /// `mountinfo`, the text of `/proc/self/mountinfo`).
    pub fn new(plan: &WritePlan, mountinfo: &str) -> MountPlan {
        let mut wanted: BTreeMap<PathBuf, bool> = BTreeMap::new();
        let held: Vec<PathBuf> = plan
            .denied
            .iter()
            .map(|d| d.path.clone())
            .chain(plan.missing_holders.iter().cloned())
            .collect();
        let pseudo = pseudo_file_systems(mountinfo);
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
        // Inside a read-only bind every later bind would be read-only too: not needed.
        let read_only_roots: Vec<PathBuf> = wanted
            .iter()
            .filter(|(_, ro)| **ro)
            .map(|(p, _)| p.clone())
            .collect();
        let mut binds: Vec<Bind> = wanted
            .into_iter()
            .filter(|(path, _)| {
                !read_only_roots
                    .iter()
                    .any(|root| root != path && path.starts_with(root))
            })
            .filter_map(|(path, read_only)| {
                let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
                Some(Bind {
                    may_vanish: pseudo.contains(&path) && !held.contains(&path),
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

/// `/proc/sys` and the mount points of cgroup and bpf file systems in `mountinfo`. A mount
/// point with an escaped character (`\040`) is skipped: such names are not made by systems.
pub fn pseudo_file_systems(mountinfo: &str) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("/proc/sys")];
    for line in mountinfo.lines() {
        let Some((mount, fs)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = mount.split(' ').nth(4);
        let fs_type = fs.split(' ').next();
        if let (Some(point), Some(kind)) = (mount_point, fs_type)
            && KERNEL_FILE_SYSTEMS.contains(&kind)
            && !point.contains('\\')
        {
            found.push(PathBuf::from(point));
        }
    }
    found
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
    fn cgroup_and_bpf_mounts_are_found_in_mountinfo() {
        assert_eq!(
            pseudo_file_systems(MOUNTINFO),
            [
                PathBuf::from("/proc/sys"),
                PathBuf::from("/sys/fs/cgroup/unified"),
                PathBuf::from("/sys/fs/bpf"),
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
