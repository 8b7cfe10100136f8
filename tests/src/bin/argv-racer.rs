//! `argv-racer GIT WORKDIR N`: tries to slip `GIT push` past an argv rule by changing argv while
//! the kernel copies it. N times: fork; in the child, one thread flips a shared argument buffer
//! between `status` and `push` as fast as it can while the main thread calls
//! `execve(GIT, ["git", <that buffer>])` from `WORKDIR/<i>` (a fresh folder per iteration, so a
//! fake `git` that is really `touch` leaves a file named after the argument the new image got).
//!
//! It prints one line, `iterations=I killed=K exited=E other=O`: children killed by SIGKILL,
//! children that exited 0, and anything else. The folders are the test's evidence; the line is
//! for people. It stops early (printing what it did) after 100 s.
//!
//! docs/design.md ("Decisions in the kernel") is why this cannot win against guard: argv rules are
//! decided on the new image's own copy of argv, after the exec has copied it and every other
//! thread is gone; whatever the copy says is what the new image runs with.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The two arguments, each padded with NULs to 8 bytes, so one store switches between them.
const STATUS: [u8; 8] = *b"status\0\0";
const PUSH: [u8; 8] = *b"push\0\0\0\0";

/// The argument buffer `execve` reads argv[1] from (8 bytes, always NUL-terminated: byte 7 is
/// NUL in both values).
static ARGUMENT: AtomicU64 = AtomicU64::new(u64::from_ne_bytes(STATUS));
static FLIPPING: AtomicBool = AtomicBool::new(false);

const TIME_LIMIT: Duration = Duration::from_secs(100);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [git, work, n] = args.as_slice() else {
        eprintln!("usage: argv-racer GIT WORKDIR N");
        std::process::exit(2);
    };
    let Ok(n) = n.parse::<u32>() else {
        eprintln!("argv-racer: N must be a number, not {n:?}");
        std::process::exit(2);
    };
    let git = CString::new(git.as_bytes()).expect("GIT has no NUL byte");
    let work = PathBuf::from(work);
    let deadline = Instant::now() + TIME_LIMIT;
    let (mut iterations, mut killed, mut exited, mut other) = (0u32, 0u32, 0u32, 0u32);
    for i in 0..n {
        if Instant::now() > deadline {
            eprintln!("argv-racer: stopped after {TIME_LIMIT:?}");
            break;
        }
        let dir = work.join(i.to_string());
        std::fs::create_dir(&dir).unwrap_or_else(|err| panic!("creating {}: {err}", dir.display()));
        let dir = CString::new(dir.as_os_str().as_bytes()).expect("no NUL in a path");
        // SAFETY: this process is single-threaded here (threads are only made in the child), so
        // the child may allocate and spawn threads.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            panic!("fork failed: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            child(&git, &dir, i % 2 == 0);
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            panic!("waitpid failed: {}", std::io::Error::last_os_error());
        }
        iterations += 1;
        if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL {
            killed += 1;
        } else if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            exited += 1;
        } else {
            other += 1;
        }
    }
    println!("iterations={iterations} killed={killed} exited={exited} other={other}");
}

/// The forked child: start the flipper, wait until it runs, exec. Never returns.
fn child(git: &CString, dir: &CString, start_with_push: bool) -> ! {
    // SAFETY: chdir to a NUL-terminated path.
    if unsafe { libc::chdir(dir.as_ptr()) } != 0 {
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(120) };
    }
    let first = if start_with_push { PUSH } else { STATUS };
    ARGUMENT.store(u64::from_ne_bytes(first), Ordering::SeqCst);
    std::thread::spawn(|| {
        FLIPPING.store(true, Ordering::SeqCst);
        loop {
            ARGUMENT.store(u64::from_ne_bytes(PUSH), Ordering::Relaxed);
            ARGUMENT.store(u64::from_ne_bytes(STATUS), Ordering::Relaxed);
        }
    });
    while !FLIPPING.load(Ordering::SeqCst) {
        std::hint::spin_loop();
    }
    let name = c"git";
    let argv: [*const libc::c_char; 3] =
        [name.as_ptr(), ARGUMENT.as_ptr().cast(), std::ptr::null()];
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    // SAFETY: NUL-terminated path, argv and envp arrays ending in NULL; ARGUMENT is static and
    // always holds a NUL-terminated string.
    unsafe {
        libc::execve(git.as_ptr(), argv.as_ptr(), envp.as_ptr());
        libc::_exit(127)
    }
}
