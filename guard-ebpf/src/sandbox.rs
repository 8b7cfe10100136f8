//! Writes a sandbox mode refused. Landlock, which holds `guard run --sandbox`, refuses a write
//! with EACCES and tells nobody (its audit records are off on these kernels), so this program
//! watches the way out of the write-like syscalls of the processes in scope and reports each one
//! that failed with EACCES, with the path(s) it named. Userspace keeps the ones outside the
//! sandbox's writable roots (an EACCES inside them is the file's own permissions).
//!
//! Attached (`tp_btf/sys_exit`) only while a restricted sandbox mode is held, and only on
//! x86_64, whose syscall numbers and `pt_regs` layout (both user ABI) are used below. It decides
//! nothing: every early return only leaves a refusal unreported.

use aya_ebpf::helpers::{
    bpf_probe_read_kernel, bpf_probe_read_user, bpf_probe_read_user_str_bytes,
};
use aya_ebpf::macros::btf_tracepoint;
use aya_ebpf::programs::BtfTracePointContext;
use guard_common::Decision;
use guard_common::event::{action, flag, kind, sandbox};
use guard_common::limits::NO_RULE;
use guard_common::maps::Verdict;

use crate::events::{Subject, emit};
use crate::maps::FILE_SCRATCH;
use crate::scope::current_in_scope;

const EACCES: i64 = 13;

/// `struct pt_regs` on x86_64 (arch/x86/include/uapi/asm/ptrace.h): byte offsets of the syscall
/// number and the argument registers, in syscall-argument order.
const ORIG_AX: usize = 15 * 8;
const ARG_REGS: [usize; 4] = [14 * 8, 13 * 8, 12 * 8, 7 * 8]; // di, si, dx, r10

const O_WRONLY: u64 = 0o1;
const O_RDWR: u64 = 0o2;
const O_CREAT: u64 = 0o100;
const O_TRUNC: u64 = 0o1000;
const O_WRITES: u64 = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC;

/// What a write-like syscall names: the argument positions of its dirfd and path, and of a
/// second pair (rename, link, symlink), and whether an open's flags decide if it writes.
#[derive(Clone, Copy)]
struct Names {
    first: (Option<usize>, usize),
    second: Option<(Option<usize>, usize)>,
    /// The open flags: in the argument (`Some(n)`) or, for `openat2`, at `how->flags`.
    flags: Flags,
}

#[derive(Clone, Copy)]
enum Flags {
    /// Always a write (mkdir, unlink, ...).
    None,
    Arg(usize),
    OpenHow(usize),
}

#[inline(always)]
fn names(nr: u64) -> Option<Names> {
    let plain = |dirfd, path| Names {
        first: (dirfd, path),
        second: None,
        flags: Flags::None,
    };
    let pair = |first, second| Names {
        first,
        second: Some(second),
        flags: Flags::None,
    };
    Some(match nr {
        2 => Names {
            flags: Flags::Arg(1),
            ..plain(None, 0)
        }, // open
        257 => Names {
            flags: Flags::Arg(2),
            ..plain(Some(0), 1)
        }, // openat
        437 => Names {
            flags: Flags::OpenHow(2),
            ..plain(Some(0), 1)
        }, // openat2
        85 | 83 | 133 | 87 | 84 | 76 => plain(None, 0), // creat mkdir mknod unlink rmdir truncate
        258 | 259 | 263 => plain(Some(0), 1),           // mkdirat mknodat unlinkat
        82 | 86 => pair((None, 0), (None, 1)),          // rename link
        264 | 316 | 265 => pair((Some(0), 1), (Some(2), 3)), // renameat renameat2 linkat
        88 => plain(None, 1),                           // symlink: the link is written
        266 => plain(Some(1), 2),                       // symlinkat
        _ => return None,
    })
}

#[btf_tracepoint(function = "sys_exit")]
pub fn sandbox_refusal(ctx: BtfTracePointContext) -> i32 {
    // Reports only; an error leaves one refusal unreported (the refusal itself stands: it is
    // Landlock's).
    let _ = unsafe { try_sandbox_refusal(&ctx) };
    0
}

unsafe fn try_sandbox_refusal(ctx: &BtfTracePointContext) -> Result<(), i32> {
    let ret: i64 = ctx.arg(1);
    if ret != -EACCES {
        return Ok(());
    }
    // Processes outside the scope are none of guard's business.
    if !current_in_scope() {
        return Ok(());
    }
    let regs: *const u8 = ctx.arg(0);
    let reg = |offset: usize| -> Result<u64, i32> {
        unsafe { bpf_probe_read_kernel(regs.add(offset).cast::<u64>()) }
    };
    let nr = reg(ORIG_AX)?;
    let Some(names) = names(nr) else {
        return Ok(());
    };
    let arg = |n: usize| reg(ARG_REGS[n]);
    let open_flags = match names.flags {
        Flags::None => O_WRITES,
        Flags::Arg(n) => arg(n)?,
        // `struct open_how` starts with its u64 flags.
        Flags::OpenHow(n) => unsafe { bpf_probe_read_user(arg(n)? as *const u64)? },
    };
    if open_flags & O_WRITES == 0 {
        // A read refused: not the sandbox's (it confines writes only).
        return Ok(());
    }
    let scratch = unsafe { &mut *FILE_SCRATCH.get_ptr_mut(0).ok_or(0)? };
    let (first, second) = scratch.path.split_at_mut(sandbox::PATH_HALF);
    first[0] = 0;
    second[0] = 0;
    let (dirfd, path) = names.first;
    let _ = unsafe { bpf_probe_read_user_str_bytes(arg(path)? as *const u8, first) };
    let first_dirfd = match dirfd {
        Some(n) => arg(n)? as i32,
        None => sandbox::AT_FDCWD,
    };
    let mut second_dirfd = sandbox::AT_FDCWD;
    if let Some((dirfd, path)) = names.second {
        let _ = unsafe { bpf_probe_read_user_str_bytes(arg(path)? as *const u8, second) };
        if let Some(n) = dirfd {
            second_dirfd = arg(n)? as i32;
        }
    }
    let mut addr = [0u8; 16];
    addr[..4].copy_from_slice(&second_dirfd.to_ne_bytes());
    emit(&Subject {
        kind: kind::FILE_WRITE,
        verdict: Verdict {
            decision: Decision::Forbidden as u8,
            flags: 0,
            _pad: 0,
            rule: NO_RULE,
        },
        action: action::EACCES,
        flags: flag::SANDBOX,
        task: None,
        path: Some((&scratch.path, (2 * sandbox::PATH_HALF) as u16)),
        dev: first_dirfd as i64 as u64,
        ino: nr,
        family: 0,
        port: 0,
        transport: 0,
        addr,
    });
    Ok(())
}
