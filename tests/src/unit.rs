//! A process started the way `packaging/guard.service` starts the daemon, as far as a test can
//! without systemd: the unit's `User=` and `Group=` with its `AmbientCapabilities=`, its
//! `CapabilityBoundingSet=` and `NoNewPrivileges=`, and the mount side of its `PrivateMounts=`,
//! `ProtectSystem=`, `ProtectHome=`, `ProtectKernelTunables=` with its `ReadWritePaths=`,
//! `ProtectProc=` and `ProcSubset=` (a mount namespace of its own, read-only folders, a /proc
//! that shows only processes). Not emulated: `SystemCallFilter=` (systemd compiles it with
//! libseccomp), `PrivateDevices=`, `RestrictAddressFamilies=`, `RestrictNamespaces=` and the
//! other seccomp-based settings, and `RemoveIPC=` (what it removes is left when the unit
//! stops).

use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `packaging/guard.service`.
pub fn unit_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../packaging/guard.service")
}

/// The values of `key=` in the unit, in order.
pub fn unit_values(key: &str) -> Vec<String> {
    let unit = std::fs::read_to_string(unit_path()).expect("reading packaging/guard.service");
    unit.lines()
        .filter_map(|line| line.trim().strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
        .collect()
}

/// The one value of `key=` in the unit; `None` when it has none.
fn unit_value(key: &str) -> Option<String> {
    let mut values = unit_values(key);
    assert!(values.len() <= 1, "one {key}= line: {values:?}");
    values.pop()
}

/// The unit's `CapabilityBoundingSet=`.
pub fn unit_capabilities() -> Vec<caps::Capability> {
    let value = unit_value("CapabilityBoundingSet").expect("a CapabilityBoundingSet= line");
    value
        .split_whitespace()
        .map(|name| {
            name.parse()
                .unwrap_or_else(|err| panic!("CapabilityBoundingSet= names {name}: {err}"))
        })
        .collect()
}

/// The user and group of the unit's `User=` and `Group=` (`None`: root), from /etc/passwd and
/// /etc/group. Panics when they are not on this machine: `cargo xtask setup` makes them.
pub fn unit_user() -> Option<(libc::uid_t, libc::gid_t)> {
    let user = unit_value("User")?;
    let group = unit_value("Group").unwrap_or_else(|| user.clone());
    let id_in = |file: &str, name: &str| {
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .find_map(|line| {
                let mut fields = line.split(':');
                (fields.next() == Some(name)).then(|| fields.nth(1)?.parse::<u32>().ok())?
            })
            .unwrap_or_else(|| {
                panic!("no {name} in {file}: the unit runs as it (`cargo xtask setup` makes it)")
            })
    };
    Some((id_in("/etc/passwd", &user), id_in("/etc/group", &group)))
}

/// What the unit takes from the daemon, ready to apply between fork and exec (nothing there
/// may allocate, so every string is made before).
pub struct UnitConfinement {
    /// Capabilities to drop from the bounding set.
    dropped: Vec<u8>,
    /// `User=` and `Group=`, and the capabilities it keeps across the exec (ambient).
    user: Option<(libc::uid_t, libc::gid_t)>,
    ambient: Vec<u8>,
    /// Folders bound read-only.
    read_only: Vec<CString>,
    /// Mount points made read-only where they are (`/sys` and its submounts), with the flags
    /// (`MS_NOSUID`...) each already has, which a remount must repeat.
    remount_read_only: Vec<(CString, libc::c_ulong)>,
    /// A /proc of its own, with these options (`hidepid=...`, `subset=pid`).
    proc_options: Option<CString>,
}

impl UnitConfinement {
    /// Read from the unit. Panics on a value of these settings that it does not emulate, so
    /// a change to them is emulated here too.
    pub fn of_unit() -> UnitConfinement {
        assert_eq!(
            unit_value("NoNewPrivileges").as_deref(),
            Some("yes"),
            "the emulation always sets no_new_privs"
        );
        assert_eq!(
            unit_value("PrivateMounts").as_deref(),
            Some("yes"),
            "the emulation always gives the daemon a mount namespace of its own"
        );
        let kept = unit_capabilities();
        let user = unit_user();
        let ambient: Vec<u8> = unit_value("AmbientCapabilities")
            .unwrap_or_default()
            .split_whitespace()
            .map(|name| {
                let capability: caps::Capability = name
                    .parse()
                    .unwrap_or_else(|err| panic!("AmbientCapabilities= names {name}: {err}"));
                assert!(
                    kept.contains(&capability),
                    "{name} is ambient but not in CapabilityBoundingSet="
                );
                capability.index()
            })
            .collect();
        assert!(
            user.is_some() || ambient.is_empty(),
            "ambient capabilities without User= are not emulated"
        );
        match unit_value("RemoveIPC").as_deref() {
            None | Some("no") | Some("yes") => {}
            Some(other) => panic!("RemoveIPC={other} is not emulated"),
        }
        let last = last_capability();
        let dropped = caps::all()
            .into_iter()
            .filter(|c| !kept.contains(c) && u32::from(c.index()) <= last)
            .map(|c| c.index())
            .collect();
        let mut read_only: Vec<&str> = match unit_value("ProtectSystem").as_deref() {
            None | Some("no") => vec![],
            Some("yes") => vec!["/usr", "/boot", "/efi"],
            Some("full") => vec!["/usr", "/boot", "/efi", "/etc"],
            Some(other) => panic!("ProtectSystem={other} is not emulated"),
        };
        match unit_value("ProtectHome").as_deref() {
            None | Some("no") => {}
            Some("read-only") => read_only.extend(["/home", "/root", "/run/user"]),
            Some(other) => panic!("ProtectHome={other} is not emulated"),
        }
        let writable: Vec<PathBuf> = unit_values("ReadWritePaths")
            .iter()
            .flat_map(|value| value.split_whitespace())
            .map(|path| PathBuf::from(path.trim_start_matches(['-', '+'])))
            .collect();
        let remount_read_only = match unit_value("ProtectKernelTunables").as_deref() {
            None | Some("no") => vec![],
            Some("yes") => mount_points_below(Path::new("/sys"))
                .into_iter()
                .filter(|point| !writable.iter().any(|w| point.starts_with(w)))
                .map(|point| {
                    let flags = mount_flags(&point);
                    (
                        CString::new(point.into_os_string().into_encoded_bytes()).unwrap(),
                        flags,
                    )
                })
                .collect(),
            Some(other) => panic!("ProtectKernelTunables={other} is not emulated"),
        };
        let read_only = read_only
            .into_iter()
            .filter(|path| Path::new(path).is_dir())
            .map(|path| CString::new(path).unwrap())
            .collect();
        let mut proc_options = Vec::new();
        match unit_value("ProtectProc").as_deref() {
            None | Some("default") => {}
            Some(mode @ ("invisible" | "noaccess" | "ptraceable")) => {
                proc_options.push(format!("hidepid={mode}"));
            }
            Some(other) => panic!("ProtectProc={other} is not emulated"),
        }
        match unit_value("ProcSubset").as_deref() {
            None | Some("all") => {}
            Some("pid") => proc_options.push("subset=pid".to_string()),
            Some(other) => panic!("ProcSubset={other} is not emulated"),
        }
        UnitConfinement {
            dropped,
            user,
            ambient,
            read_only,
            remount_read_only,
            proc_options: (!proc_options.is_empty())
                .then(|| CString::new(proc_options.join(",")).unwrap()),
        }
    }

    /// Applies it to `command`'s child between fork and exec.
    pub fn install(self, command: &mut Command) {
        // SAFETY: `apply` makes only async-signal-safe calls (unshare, mount, prctl) on strings
        // made before the fork.
        unsafe { command.pre_exec(move || self.apply()) };
    }

    /// The mounts first (they need CAP_SYS_ADMIN), then the bounding set, then the user with
    /// its ambient capabilities, then no_new_privs.
    fn apply(&self) -> io::Result<()> {
        fn check(rc: libc::c_int) -> io::Result<()> {
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
        let none = std::ptr::null::<libc::c_char>();
        // SAFETY (every call below): NUL-terminated strings that outlive the call, or null.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            // As systemd does: mounts made outside still reach it, none of its own leave.
            check(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ))?;
            for path in &self.read_only {
                check(libc::mount(
                    path.as_ptr(),
                    path.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    none,
                    path.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                    std::ptr::null(),
                ))?;
            }
            for (point, flags) in &self.remount_read_only {
                check(libc::mount(
                    none,
                    point.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | flags,
                    std::ptr::null(),
                ))?;
            }
            if let Some(options) = &self.proc_options {
                check(libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    options.as_ptr().cast(),
                ))?;
            }
            for &capability in &self.dropped {
                check(libc::prctl(
                    libc::PR_CAPBSET_DROP,
                    libc::c_ulong::from(capability),
                    0,
                    0,
                    0,
                ))?;
            }
            if let Some((uid, gid)) = self.user {
                // As systemd does for User= with AmbientCapabilities=: keep the permitted set
                // across the uid change, narrow it to the ambient ones, raise those (an exec by
                // a non-root user keeps only ambient capabilities).
                check(libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0))?;
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setresgid(gid, gid, gid))?;
                check(libc::setresuid(uid, uid, uid))?;
                let mask = self
                    .ambient
                    .iter()
                    .fold(0u64, |mask, &c| mask | (1u64 << c));
                let header = CapHeader {
                    version: LINUX_CAPABILITY_VERSION_3,
                    pid: 0,
                };
                let half = |shift: u32| CapData {
                    effective: (mask >> shift) as u32,
                    permitted: (mask >> shift) as u32,
                    inheritable: (mask >> shift) as u32,
                };
                let data = [half(0), half(32)];
                if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
                for &capability in &self.ambient {
                    check(libc::prctl(
                        libc::PR_CAP_AMBIENT,
                        libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                        libc::c_ulong::from(capability),
                        0,
                        0,
                    ))?;
                }
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        }
    }
}

/// `capset`'s header and data (`linux/capability.h`, version 3: two data structs for 64 bits).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The mount points at or below `root`, from /proc/self/mountinfo, parents first.
fn mount_points_below(root: &Path) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("reading mountinfo");
    let mut points: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        // Spaces and tabs in mount points are octal escapes; the emulation skips those.
        .filter(|point| !point.contains('\\'))
        .map(PathBuf::from)
        .filter(|point| point.starts_with(root))
        .collect();
    points.sort();
    points.dedup();
    points
}

/// The per-mount flags a bind remount of `point` must keep (`MS_NOSUID`, `MS_NODEV`,
/// `MS_NOEXEC` and the atime flags), from statvfs.
fn mount_flags(point: &Path) -> libc::c_ulong {
    let path = CString::new(point.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a zeroed struct the call fills.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return 0;
    }
    [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ]
    .into_iter()
    .filter(|(st, _)| stat.f_flag & *st != 0)
    .fold(0, |flags, (_, ms)| flags | ms)
}

/// The highest capability number this kernel knows (`/proc/sys/kernel/cap_last_cap`).
fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(40)
}
