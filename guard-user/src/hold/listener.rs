//! The seccomp listener: receive a held call, say whether it still waits, and answer it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// How a held call goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The call runs as if never held: the kernel's BPF programs decide it, as every call.
    Continue,
    /// The call fails with this errno and never runs.
    Fail(i32),
}

/// One held call as the kernel gave it.
#[derive(Clone, Copy, Debug)]
pub struct Notification {
    pub id: u64,
    pub pid: u32,
    pub nr: i32,
    pub args: [u64; 6],
}

/// `linux/seccomp.h` (not in the libc crate yet).
const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;

pub struct Listener(OwnedFd);

impl Listener {
    pub fn new(fd: OwnedFd) -> Listener {
        // The held process and guard hand over to each other on one CPU (Linux 6.6+): a call
        // that is read and let go at once costs less. Older kernels refuse it; nothing else
        // changes.
        // SAFETY: the ioctl takes its flags by value.
        unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
            )
        };
        Listener(fd)
    }

    pub fn raw(&self) -> i32 {
        self.0.as_raw_fd()
    }

    /// The next held call (there is one when the descriptor polls readable). `Ok(None)`: the
    /// call went before it could be read (its process was killed).
    pub fn receive(&self) -> io::Result<Option<Notification>> {
        // SAFETY: the struct is plain data; the kernel requires it zeroed.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl writes one `seccomp_notif` into `notif`.
        let rc = unsafe {
            libc::ioctl(
                self.raw(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notif as *mut libc::seccomp_notif,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::EINTR) => Ok(None),
                _ => Err(err),
            };
        }
        Ok(Some(Notification {
            id: notif.id,
            pid: notif.pid,
            nr: notif.data.nr,
            args: notif.data.args,
        }))
    }

    /// The call is still waiting (its process did not die, so a pid read meanwhile is still
    /// the caller's).
    pub fn still_waiting(&self, id: u64) -> bool {
        // SAFETY: the ioctl reads one u64.
        unsafe {
            libc::ioctl(
                self.raw(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &id as *const u64,
            ) == 0
        }
    }

    /// Answers a held call. An error for a call that went meanwhile (ENOENT) is not one.
    pub fn reply(&self, id: u64, reply: Reply) -> io::Result<()> {
        let (error, flags) = match reply {
            Reply::Continue => (0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
            Reply::Fail(errno) => (-errno, 0),
        };
        let mut response = libc::seccomp_notif_resp {
            id,
            val: 0,
            error,
            flags,
        };
        // SAFETY: the ioctl reads one `seccomp_notif_resp`.
        let rc = unsafe {
            libc::ioctl(
                self.raw(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut response as *mut libc::seccomp_notif_resp,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ENOENT) {
                return Err(err);
            }
        }
        Ok(())
    }
}
