//! Root hardening for the command: capabilities that let a root process undo or go around
//! guard (mounting, loading kernel code or BPF, tracing other processes, raw devices and
//! sockets, making device nodes, immutable flags, opening files by handle) or move, rewrite or
//! hide a call after guard decided it (NAT, policy routing and traffic control rewrite an
//! allowed connect's destination; `chroot` changes what a unix socket's allowed name reaches;
//! choosing a new process's pid makes a pid-based check see another process) are dropped
//! between fork and exec from every set (bounding, ambient, permitted, effective,
//! inheritable), so neither the command nor anything it executes (set-user-ID or with file
//! capabilities) gets them back.
//!
//! What a root command keeps, and why none of it moves a decided call: `CAP_CHOWN`,
//! `CAP_DAC_OVERRIDE`, `CAP_FOWNER`, `CAP_FSETID` (files; guard's own are held by read-only
//! binds), `CAP_KILL` (signals; Landlock scopes them to the run on 6.12+),
//! `CAP_SETUID`/`CAP_SETGID`/`CAP_SETPCAP`/`CAP_SETFCAP` (another user stays in the same cgroup
//! and under the same filter; the bounding set cannot grow), `CAP_NET_BIND_SERVICE` (a port of
//! its own), `CAP_IPC_*`, `CAP_SYS_NICE`, `CAP_SYS_RESOURCE`, `CAP_SYS_PACCT`,
//! `CAP_SYS_TTY_CONFIG`, `CAP_LEASE`, `CAP_AUDIT_*`, `CAP_SYSLOG`, `CAP_WAKE_ALARM`,
//! `CAP_BLOCK_SUSPEND`, `CAP_NET_BROADCAST`.

use std::io;

/// The dropped capabilities and their names (`linux/capability.h` numbers).
pub const DROPPED: [(u32, &str); 17] = [
    (9, "CAP_LINUX_IMMUTABLE"),
    // NAT, policy routing, tc, SO_MARK: an allowed connect rewritten to a refused address
    // after the only decision point.
    (12, "CAP_NET_ADMIN"),
    (13, "CAP_NET_RAW"),
    (16, "CAP_SYS_MODULE"),
    (17, "CAP_SYS_RAWIO"),
    // chroot(2) gives an allowed unix socket's name another meaning.
    (18, "CAP_SYS_CHROOT"),
    (19, "CAP_SYS_PTRACE"),
    (21, "CAP_SYS_ADMIN"),
    (22, "CAP_SYS_BOOT"),
    // open_by_handle_at(2) reaches a file without its path, past any read-only bind.
    (2, "CAP_DAC_READ_SEARCH"),
    (25, "CAP_SYS_TIME"),
    // mknod(2) of a block device reaches a disk below every file rule.
    (27, "CAP_MKNOD"),
    (32, "CAP_MAC_OVERRIDE"),
    (33, "CAP_MAC_ADMIN"),
    (38, "CAP_PERFMON"),
    (39, "CAP_BPF"),
    // clone3's set_tid and ns_last_pid pick a new process's pid: a pid-based check of a peer
    // that is gone would see the impostor.
    (40, "CAP_CHECKPOINT_RESTORE"),
];

/// The bits of [`DROPPED`], as `/proc/PID/status` shows capability sets.
pub fn dropped_mask() -> u64 {
    DROPPED.iter().fold(0, |mask, (cap, _)| mask | 1 << cap)
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The calling thread's effective capability set.
pub fn effective() -> io::Result<u64> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: the header and two data structs are what capget(2) version 3 reads and writes.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from(data[0].effective) | u64::from(data[1].effective) << 32)
}

/// Whether this process may make a mount namespace (`CAP_SYS_ADMIN` is effective).
pub fn can_make_mount_namespace() -> bool {
    effective().is_ok_and(|caps| caps & (1 << 21) != 0)
}

/// Drops [`DROPPED`] from every set of the calling process. Only raw syscalls on the stack:
/// usable between fork and exec. A capability this kernel does not know (`EINVAL`) is not
/// there to drop. Fails closed: any other error stops the command from starting.
pub fn drop_from_pre_exec() -> io::Result<()> {
    // SAFETY: prctl and capget/capset with integer arguments and stack structs.
    unsafe {
        for (cap, _) in DROPPED {
            let cap = libc::c_ulong::from(cap);
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
            {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_LOWER, cap, 0, 0) != 0
                && io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
            {
                return Err(io::Error::last_os_error());
            }
        }
        let mut header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mask = dropped_mask();
        for (half, entry) in data.iter_mut().enumerate() {
            let keep = !((mask >> (32 * half)) as u32);
            entry.effective &= keep;
            entry.permitted &= keep;
            entry.inheritable &= keep;
        }
        if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
