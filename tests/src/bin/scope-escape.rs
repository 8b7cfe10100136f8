//! `scope-escape WAY ARGS...`: one way out of a guard scope that no exec or connect hook sees,
//! tried from inside it. Each prints one line, `WAY: ok` or `WAY: ERRNO_NAME (message)`, and
//! exits 0 when the way worked, 3 when the kernel refused it (2: a usage error).
//!
//! - `clone3-into CGROUP_DIR MARKER`: `clone3(CLONE_INTO_CGROUP)` into another cgroup; the child
//!   makes MARKER there. Then a plain `fork` (what the C library falls back to) must still work.
//! - `tiocsti TEXT`: pushes TEXT into the controlling terminal's input, byte by byte.
//! - `tioclinux`: the console's paste-selection `TIOCLINUX` on the controlling terminal.
//! - `open-device NODE read|write`: opens a device node for reading or writing (writes nothing).
//! - `mknod PATH`: makes a block device node (of the loop device 7:0) at PATH.
//! - `unix-connect ADDRESS`: connects a stream socket to a unix socket (`@name`: abstract).
//! - `unix-send ADDRESS`: sends one datagram to a unix socket.
//! - `bpf-detach-pins DIR`: every file below DIR (a bpffs folder of pinned links) opened with
//!   `bpf(BPF_OBJ_GET)` and detached with `BPF_LINK_DETACH`: `ok` when one was detached, else
//!   the first refusal (`ENOENT` when DIR is not there to read).
//! - `bpf-obj-get PATH`: one `bpf(BPF_OBJ_GET)` of PATH (`/` is no BPF object: `EACCES` or
//!   `EINVAL` from a kernel that looked at it, `EPERM` from a filter that refused the call).
//! - `unshare-user`: a new user namespace (`unshare(CLONE_NEWUSER)`).
//! - `so-mark`: `SO_MARK` on a socket (what policy routing and NAT rules match on; needs
//!   `CAP_NET_ADMIN`).
//! - `chroot DIR`: `chroot(DIR)`.

use std::ffi::CString;
use std::io::Error;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` (`linux/sched.h`, size version 2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

fn c_path(path: &str) -> CString {
    CString::new(Path::new(path).as_os_str().as_bytes()).expect("no NUL in a path")
}

/// Prints the result line and exits.
fn report(way: &str, result: Result<(), Error>) -> ! {
    match result {
        Ok(()) => {
            println!("{way}: ok");
            std::process::exit(0)
        }
        Err(err) => {
            let name = match err.raw_os_error() {
                Some(libc::EPERM) => "EPERM",
                Some(libc::ENOSYS) => "ENOSYS",
                Some(libc::EACCES) => "EACCES",
                Some(libc::ENXIO) => "ENXIO",
                Some(libc::EIO) => "EIO",
                Some(libc::ENOENT) => "ENOENT",
                Some(libc::EINVAL) => "EINVAL",
                _ => "OTHER",
            };
            println!("{way}: {name} ({err})");
            std::process::exit(3)
        }
    }
}

fn check(rc: libc::c_long) -> Result<libc::c_long, Error> {
    if rc < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn clone3_into(cgroup: &str, marker: &str) -> Result<(), Error> {
    // SAFETY: open of a NUL-terminated path.
    let dir =
        check(
            unsafe { libc::open(c_path(cgroup).as_ptr(), libc::O_DIRECTORY | libc::O_CLOEXEC) }
                as libc::c_long,
        )?;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir as u64,
        ..CloneArgs::default()
    };
    let marker = c_path(marker);
    // SAFETY: clone3 with a valid argument struct and no new stack: the child returns here
    // like fork's, makes the marker and exits without touching the parent's state.
    let pid = check(unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    })?;
    if pid == 0 {
        // SAFETY: async-signal-safe calls only in the child.
        unsafe {
            let fd = libc::open(marker.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
            libc::close(fd);
            libc::_exit(0);
        }
    }
    // SAFETY: waiting for the child just made.
    unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0) };
    Ok(())
}

/// A plain fork still works (the fallback of the C library when clone3 is missing).
fn fork_works() -> bool {
    // SAFETY: the child exits at once.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: exit of the child.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child just made.
    pid > 0 && unsafe { libc::waitpid(pid, &mut status, 0) } == pid && status == 0
}

fn tty_ioctl(request: libc::c_ulong, bytes: &[u8]) -> Result<(), Error> {
    // SAFETY: open of a static path.
    let tty = check(unsafe { libc::open(c"/dev/tty".as_ptr(), libc::O_RDWR) } as libc::c_long)?;
    for byte in bytes {
        // SAFETY: TIOCSTI and TIOCLINUX read one byte at the pointer.
        check(unsafe { libc::ioctl(tty as i32, request, byte as *const u8) } as libc::c_long)?;
    }
    Ok(())
}

fn open_device(node: &str, write: bool) -> Result<(), Error> {
    let flags = if write {
        libc::O_WRONLY
    } else {
        libc::O_RDONLY
    };
    // SAFETY: open of a NUL-terminated path; closed at once, nothing written.
    let fd = check(unsafe { libc::open(c_path(node).as_ptr(), flags) } as libc::c_long)?;
    // SAFETY: the descriptor just opened.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

/// A connect (stream) or a send (datagram) to `address` (`@name`: abstract).
fn unix_call(address: &str, send: bool) -> Result<(), Error> {
    let kind = if send {
        libc::SOCK_DGRAM
    } else {
        libc::SOCK_STREAM
    };
    // SAFETY: socket with integer arguments.
    let fd = check(unsafe { libc::socket(libc::AF_UNIX, kind, 0) } as libc::c_long)? as i32;
    // SAFETY: a zeroed sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes: Vec<u8> = match address.strip_prefix('@') {
        Some(name) => std::iter::once(0).chain(name.bytes()).collect(),
        None => address.bytes().collect(),
    };
    for (slot, byte) in addr.sun_path.iter_mut().zip(&bytes) {
        *slot = *byte as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len()) as libc::socklen_t;
    let target = &addr as *const libc::sockaddr_un as *const libc::sockaddr;
    // SAFETY: the address and its length are valid for the call.
    let rc = unsafe {
        if send {
            libc::sendto(fd, b"x".as_ptr().cast(), 1, 0, target, len) as libc::c_long
        } else {
            libc::connect(fd, target, len) as libc::c_long
        }
    };
    // SAFETY: the socket made above.
    unsafe { libc::close(fd) };
    check(rc).map(drop)
}

/// `enum bpf_cmd`.
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_LINK_DETACH: libc::c_long = 34;

/// `bpf(cmd)` with an attribute of the kernel's size (the rest zero).
fn bpf(cmd: libc::c_long, attr: &[u64; 8]) -> Result<libc::c_long, Error> {
    // SAFETY: the attribute is a zero-padded `union bpf_attr` of the size passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_ptr(),
            std::mem::size_of_val(attr),
        )
    })
}

fn bpf_obj_get(path: &Path) -> Result<i32, Error> {
    let name = CString::new(path.as_os_str().as_bytes()).expect("no NUL in a path");
    let attr = [name.as_ptr() as u64, 0, 0, 0, 0, 0, 0, 0];
    bpf(BPF_OBJ_GET, &attr).map(|fd| fd as i32)
}

/// Every pin below `dir` (at most 4 folders deep, 512 files) opened and detached.
fn detach_pins(dir: &Path) -> Result<(), Error> {
    let mut folders = vec![(dir.to_path_buf(), 0)];
    let (mut detached, mut first_error, mut seen) = (0, None, 0);
    while let Some((folder, depth)) = folders.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(err) => {
                first_error.get_or_insert(err);
                continue;
            }
        };
        for entry in entries.flatten().take(512) {
            seen += 1;
            let path = entry.path();
            if path.is_dir() {
                if depth < 4 {
                    folders.push((path, depth + 1));
                }
                continue;
            }
            match bpf_obj_get(&path).and_then(|fd| {
                let attr = [u64::from(fd as u32), 0, 0, 0, 0, 0, 0, 0];
                let detach = bpf(BPF_LINK_DETACH, &attr);
                // SAFETY: the descriptor BPF_OBJ_GET returned.
                unsafe { libc::close(fd) };
                detach
            }) {
                Ok(_) => detached += 1,
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
            if seen >= 512 {
                break;
            }
        }
    }
    match (detached, first_error) {
        (0, Some(err)) => Err(err),
        (0, None) => Err(Error::from_raw_os_error(libc::ENOENT)),
        _ => {
            println!("detached {detached}");
            Ok(())
        }
    }
}

fn so_mark() -> Result<(), Error> {
    // SAFETY: socket with integer arguments.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) } as libc::c_long)? as i32;
    let mark: libc::c_int = 1;
    // SAFETY: an int option of the right size on the socket just made.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&mark as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    // SAFETY: the socket made above.
    unsafe { libc::close(fd) };
    check(rc as libc::c_long).map(drop)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let strs: Vec<&str> = args.iter().map(String::as_str).collect();
    match strs.as_slice() {
        ["clone3-into", cgroup, marker] => {
            let result = clone3_into(cgroup, marker);
            if !fork_works() {
                println!("fork: failed ({})", Error::last_os_error());
                std::process::exit(4);
            }
            report("clone3-into", result)
        }
        ["tiocsti", text] => {
            let text = text.replace("\\n", "\n");
            report("tiocsti", tty_ioctl(libc::TIOCSTI, text.as_bytes()))
        }
        // Subcode 2: set the selection; a harmless first step of a paste.
        ["tioclinux"] => report("tioclinux", tty_ioctl(libc::TIOCLINUX, &[2])),
        ["open-device", node, mode @ ("read" | "write")] => {
            report("open-device", open_device(node, *mode == "write"))
        }
        ["unix-connect", address] => report("unix-connect", unix_call(address, false)),
        ["unix-send", address] => report("unix-send", unix_call(address, true)),
        ["bpf-detach-pins", dir] => report("bpf-detach-pins", detach_pins(Path::new(dir))),
        ["bpf-obj-get", path] => report(
            "bpf-obj-get",
            bpf_obj_get(Path::new(path)).map(|fd| {
                // SAFETY: the descriptor BPF_OBJ_GET returned.
                unsafe { libc::close(fd) };
            }),
        ),
        ["unshare-user"] => report(
            "unshare-user",
            // SAFETY: unshare with a flag.
            check(unsafe { libc::unshare(libc::CLONE_NEWUSER) } as libc::c_long).map(drop),
        ),
        ["so-mark"] => report("so-mark", so_mark()),
        ["chroot", dir] => report(
            "chroot",
            // SAFETY: chroot of a NUL-terminated path.
            check(unsafe { libc::chroot(c_path(dir).as_ptr()) } as libc::c_long).map(drop),
        ),
        ["mknod", path] => {
            // SAFETY: mknod of a NUL-terminated path.
            let rc = unsafe {
                libc::mknod(
                    c_path(path).as_ptr(),
                    libc::S_IFBLK | 0o600,
                    libc::makedev(7, 0),
                )
            };
            report("mknod", check(rc as libc::c_long).map(drop))
        }
        _ => {
            eprintln!(
                "usage: scope-escape clone3-into CGROUP_DIR MARKER | tiocsti TEXT | tioclinux | \
                 open-device NODE read|write | mknod PATH | unix-connect ADDRESS | \
                 unix-send ADDRESS | bpf-detach-pins DIR | bpf-obj-get PATH | unshare-user | \
                 so-mark | chroot DIR"
            );
            std::process::exit(2);
        }
    }
}
