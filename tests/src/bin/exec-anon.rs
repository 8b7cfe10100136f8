//! `exec-anon MODE PROGRAM ARGS...`: runs a copy of PROGRAM from a file that no path names, the
//! way a program slips past rules that name files.
//!
//! - `memfd`: the copy is a memfd (`memfd_create`), executed as `/proc/self/fd/N`;
//! - `deleted`: the copy is a file in the current folder, opened, unlinked, then executed as
//!   `/proc/self/fd/N`.
//!
//! argv[0] of the new image is `PROGRAM`'s file name. On an exec that fails it prints
//! `exec-anon: exec failed: ERROR` and exits 126 (so a test tells a refusal by EPERM from a
//! program that ran).

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, program, rest @ ..] = args.as_slice() else {
        eprintln!("usage: exec-anon memfd|deleted PROGRAM ARGS...");
        std::process::exit(2);
    };
    let bytes =
        std::fs::read(program).unwrap_or_else(|err| fail(&format!("reading {program}: {err}")));
    let fd = match mode.as_str() {
        "memfd" => memfd_copy(&bytes),
        "deleted" => deleted_copy(&bytes),
        other => fail(&format!("unknown mode {other:?}: use memfd or deleted")),
    };
    let name = Path::new(program)
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_else(|| program.as_bytes().to_vec());
    let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    let argv: Vec<CString> = std::iter::once(CString::new(name).unwrap())
        .chain(rest.iter().map(|a| CString::new(a.as_str()).unwrap()))
        .collect();
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    // SAFETY: NUL-terminated strings and a NULL-terminated array that outlive the call.
    unsafe { libc::execv(path.as_ptr(), argv_ptrs.as_ptr()) };
    eprintln!(
        "exec-anon: exec failed: {}",
        std::io::Error::last_os_error()
    );
    std::process::exit(126);
}

fn memfd_copy(bytes: &[u8]) -> OwnedFd {
    let name = CString::new("exec-anon").unwrap();
    // SAFETY: a NUL-terminated name; the fd returned is ours.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
    if fd < 0 {
        fail(&format!(
            "memfd_create: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a new fd nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(fd.try_clone().unwrap());
    file.write_all(bytes)
        .unwrap_or_else(|err| fail(&format!("writing the memfd: {err}")));
    fd
}

fn deleted_copy(bytes: &[u8]) -> OwnedFd {
    let path = Path::new("exec-anon.copy");
    std::fs::write(path, bytes).unwrap_or_else(|err| fail(&format!("writing {path:?}: {err}")));
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap_or_else(|err| fail(&format!("chmod {path:?}: {err}")));
    // Opened read-only after the writer is closed, so the exec is not "text file busy".
    let file =
        std::fs::File::open(path).unwrap_or_else(|err| fail(&format!("opening {path:?}: {err}")));
    std::fs::remove_file(path).unwrap_or_else(|err| fail(&format!("unlinking {path:?}: {err}")));
    OwnedFd::from(file)
}

fn fail(why: &str) -> ! {
    eprintln!("exec-anon: {why}");
    std::process::exit(2);
}
