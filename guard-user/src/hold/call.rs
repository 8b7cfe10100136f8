//! What a held exec asks for, read from the caller's memory: the file it runs and its argv.
//!
//! The caller is stopped in its syscall while this runs, but another thread of it could
//! change the memory after it is read; that is why the reading only chooses whether to ask.
//! The kernel's BPF programs decide the exec that really happens, from the kernel's own copy.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::listener::Notification;

/// At most this many argv entries are read (past it the call is not held: the kernel decides).
const MAX_ARGS: usize = 1024;
/// At most this many bytes of all strings together.
const MAX_BYTES: usize = 128 * 1024;
const PATH_MAX: usize = 4096;

/// A held exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecCall {
    /// The file that would run, as the caller names it from its root (symlinks followed).
    pub file: PathBuf,
    pub argv: Vec<String>,
}

impl ExecCall {
    /// What an approval of it holds: the executed file's name, then `argv[1..]`.
    pub fn tokens(&self) -> Vec<String> {
        let name = self
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        std::iter::once(name)
            .chain(self.argv.iter().skip(1).cloned())
            .collect()
    }
}

/// Reads the exec of `call`; `Ok(None)` for a call that cannot be held (too large, a file that
/// does not exist, which the exec will fail on anyway).
pub fn read_exec(call: &Notification) -> io::Result<Option<ExecCall>> {
    let pid = call.pid;
    let (dirfd, path, argv, flags) = if call.nr == libc::SYS_execve as i32 {
        (libc::AT_FDCWD, call.args[0], call.args[1], 0)
    } else if call.nr == libc::SYS_execveat as i32 {
        (
            call.args[0] as i32,
            call.args[1],
            call.args[2],
            call.args[4] as i32,
        )
    } else {
        return Ok(None);
    };
    let mut budget = MAX_BYTES;
    let Some(path) = read_string(pid, path, PATH_MAX, &mut budget)? else {
        return Ok(None);
    };
    let Some(argv) = read_argv(pid, argv, &mut budget)? else {
        return Ok(None);
    };
    let Some(file) = executed_file(pid, dirfd, &path, flags) else {
        return Ok(None);
    };
    Ok(Some(ExecCall { file, argv }))
}

/// The file a path names for the caller: an absolute path as guard sees it, a relative one
/// from the caller's working folder or `dirfd`. guard's view is the caller's unless the caller
/// moved its root (a chroot): then the twin may misname the file, and the kernel, which decides
/// from the file it really runs, still decides it (the hold only chooses whether to ask).
fn executed_file(pid: u32, dirfd: i32, path: &str, flags: i32) -> Option<PathBuf> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let named = if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
        proc.join("fd").join(dirfd.to_string())
    } else if path.starts_with('/') {
        PathBuf::from(path)
    } else if dirfd == libc::AT_FDCWD {
        proc.join("cwd").join(path)
    } else {
        proc.join("fd").join(dirfd.to_string()).join(path)
    };
    // One open and one readlink (not a realpath walk of every component): the kernel follows
    // the links, the /proc magic ones included, and names the file it found.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(&named)
        .ok()?;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

fn read_argv(pid: u32, mut address: u64, budget: &mut usize) -> io::Result<Option<Vec<String>>> {
    let mut argv = Vec::new();
    if address == 0 {
        return Ok(Some(argv));
    }
    let mut pointers = [0u8; 8 * 64];
    while argv.len() < MAX_ARGS {
        // Up to 64 pointers a read, never across a page end (the next may not be mapped).
        let to_page_end = 4096 - (address % 4096) as usize;
        let want = pointers.len().min(to_page_end) / 8 * 8;
        let want = if want == 0 { 8 } else { want };
        if !read_memory(pid, address, &mut pointers[..want])? {
            return Ok(None);
        }
        for pointer in pointers[..want].chunks_exact(8) {
            let pointer = u64::from_ne_bytes(pointer.try_into().expect("8 bytes"));
            if pointer == 0 {
                return Ok(Some(argv));
            }
            let limit = *budget;
            let Some(arg) = read_string(pid, pointer, limit, budget)? else {
                return Ok(None);
            };
            argv.push(arg);
            if argv.len() == MAX_ARGS {
                return Ok(None);
            }
        }
        address += want as u64;
    }
    Ok(None)
}

/// A NUL-terminated string of at most `limit` bytes, charged to `budget`.
fn read_string(
    pid: u32,
    mut address: u64,
    limit: usize,
    budget: &mut usize,
) -> io::Result<Option<String>> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 256];
    while bytes.len() < limit.min(*budget) {
        // Never read across a page end in one go: the next page may not be mapped.
        let to_page_end = 4096 - (address % 4096) as usize;
        let want = chunk.len().min(to_page_end);
        if !read_memory(pid, address, &mut chunk[..want])? {
            return Ok(None);
        }
        if let Some(end) = chunk[..want].iter().position(|b| *b == 0) {
            bytes.extend_from_slice(&chunk[..end]);
            *budget = budget.saturating_sub(bytes.len() + 1);
            return Ok(Some(String::from_utf8_lossy(&bytes).into_owned()));
        }
        bytes.extend_from_slice(&chunk[..want]);
        address += want as u64;
    }
    Ok(None)
}

/// `process_vm_readv` of `buffer.len()` bytes; `false` for memory the caller does not have.
pub(super) fn read_memory(pid: u32, address: u64, buffer: &mut [u8]) -> io::Result<bool> {
    let local = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: buffer.len(),
    };
    // SAFETY: one local iovec over `buffer`; the remote one is only read by the kernel.
    let got = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
    if got < 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EFAULT) | Some(libc::ESRCH) => Ok(false),
            _ => Err(err),
        };
    }
    Ok(got as usize == buffer.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn reads_its_own_strings_and_argv() {
        let pid = std::process::id();
        let args = [CString::new("git").unwrap(), CString::new("push").unwrap()];
        let mut pointers: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        pointers.push(std::ptr::null());
        let mut budget = MAX_BYTES;
        let argv = read_argv(pid, pointers.as_ptr() as u64, &mut budget).unwrap();
        assert_eq!(argv, Some(vec!["git".to_string(), "push".to_string()]));
        assert!(budget < MAX_BYTES);
        let long = CString::new("x".repeat(5000)).unwrap();
        let mut budget = MAX_BYTES;
        assert_eq!(
            read_string(pid, long.as_ptr() as u64, PATH_MAX, &mut budget).unwrap(),
            None,
            "longer than the limit"
        );
    }

    #[test]
    fn an_absolute_path_is_the_file_it_names_with_links_followed() {
        let pid = std::process::id();
        let file = executed_file(pid, libc::AT_FDCWD, "/proc/self/exe", 0);
        assert_eq!(file, std::env::current_exe().ok());
        assert_eq!(executed_file(pid, libc::AT_FDCWD, "/no/such/file", 0), None);
    }
}
