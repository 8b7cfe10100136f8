//! The process on the other end of a unix socket, held by a pidfd (`SO_PEERPIDFD`, Linux
//! 6.5+): "is this peer inside a scope" is asked of that very process, never of a pid that can
//! have exited and been taken by another process since it connected. Every question fails
//! closed: a peer that is gone, or whose cgroup cannot be read, gives an error, and callers
//! treat an error as "inside".

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};

/// `SO_PEERPIDFD` (`asm-generic/socket.h`).
const SO_PEERPIDFD: libc::c_int = 77;

/// The peer process of a connected unix socket, as it was when it connected.
#[derive(Debug)]
pub struct PeerProcess {
    pidfd: OwnedFd,
}

impl PeerProcess {
    /// The peer of `socket`, from the kernel's `SO_PEERPIDFD`. On a kernel without it (before
    /// 6.5) the pid of `SO_PEERCRED` is opened instead, which a peer that has already exited
    /// and whose pid was taken could defeat (docs/limits.md).
    pub fn of(socket: BorrowedFd<'_>) -> io::Result<PeerProcess> {
        let mut fd: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: an int out-parameter of the size passed.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERPIDFD,
                (&mut fd as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc == 0 && fd >= 0 {
            // SAFETY: the kernel made a new descriptor for this caller.
            return Ok(PeerProcess {
                pidfd: unsafe { OwnedFd::from_raw_fd(fd) },
            });
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ENOPROTOOPT) {
            return Err(err);
        }
        let cred =
            nix::sys::socket::getsockopt(&socket, nix::sys::socket::sockopt::PeerCredentials)
                .map_err(io::Error::from)?;
        Self::open(cred.pid())
    }

    /// A pidfd of process `pid` now (`pidfd_open`).
    pub fn open(pid: libc::pid_t) -> io::Result<PeerProcess> {
        // SAFETY: pidfd_open with integer arguments.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel made a new descriptor for this caller.
        Ok(PeerProcess {
            pidfd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
        })
    }

    /// The peer's pid in this pid namespace while it lives: an error when it has exited (or
    /// lives in a pid namespace this one cannot see).
    pub fn pid(&self) -> Result<u32> {
        let fdinfo = format!("/proc/self/fdinfo/{}", self.pidfd.as_raw_fd());
        let text = std::fs::read_to_string(&fdinfo).with_context(|| format!("reading {fdinfo}"))?;
        let pid: i64 = text
            .lines()
            .find_map(|line| line.strip_prefix("Pid:"))
            .and_then(|value| value.trim().parse().ok())
            .ok_or_else(|| anyhow!("{fdinfo} names no pid"))?;
        match u32::try_from(pid) {
            Ok(pid) if pid > 0 => Ok(pid),
            _ => bail!("the peer process has exited"),
        }
    }

    /// Whether the peer still lives: its pid then still names it, not another process.
    pub fn alive(&self) -> bool {
        // SAFETY: pidfd_send_signal with signal 0 only checks; no siginfo.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                0,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        // EPERM: it lives, and is not ours to signal.
        rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }

    /// Reads something of the peer by its pid, and only if the peer still lived once it was
    /// read (so the pid named the peer throughout, not a process that took the pid since).
    pub fn read<T>(&self, read: impl FnOnce(u32) -> Result<T>) -> Result<T> {
        let pid = self.pid()?;
        let value = read(pid)?;
        if !self.alive() {
            bail!("the peer process (pid {pid}) exited while it was looked at");
        }
        Ok(value)
    }

    /// The peer's cgroup v2 folder now (fails when it is gone or cannot be read).
    pub fn cgroup(&self) -> Result<PathBuf> {
        self.read(super::scope::cgroup_of_pid)
    }
}

impl AsFd for PeerProcess {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_peer_that_lives_is_named_and_one_that_exited_is_an_error() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let peer = PeerProcess::of(ours.as_fd()).unwrap();
        assert_eq!(peer.pid().unwrap(), std::process::id());
        assert!(peer.alive());
        assert!(peer.cgroup().is_ok());
        drop(theirs);

        // A child connects, and exits: its pidfd says so, whatever process takes its pid.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = PeerProcess::open(child.id() as libc::pid_t).unwrap();
        child.wait().unwrap();
        assert!(!gone.alive());
        let err = gone.cgroup().unwrap_err().to_string();
        assert!(err.contains("exited"), "{err}");
    }
}
