//! Unix socket decisions: `cgroup/connect_unix` (a connect of any unix socket type) and
//! `cgroup/sendmsg_unix` (a datagram sent with an address), kernel 6.7+, on both backends: the
//! servers outside the scope that act on requests (tmux, container engines, systemd, D-Bus)
//! are reached only through them.
//!
//! The address is read from the kernel's own copy (`bpf_sock_addr_kern.uaddr`, made before the
//! hook runs, so another thread cannot change it), as the bytes the caller named: a pathname up
//! to its first NUL, or an abstract name (a leading NUL) whole. The exact table decides first,
//! then the longest prefix in the trie, where userspace keeps the defaults (`/`, the abstract
//! NUL, and the empty prefix for a relative path, which no rule could name). A person's
//! approval marks the exact entry of the name approved ([`Verdict::approved`]; an entry that
//! only carries the mark decides nothing, the prefix does) and is held for its scope in
//! `APPROVALS`, keyed by the entry's rule id: a `prompt` goes through for that scope alone.
//!
//! aya 0.14 knows neither attach type: the sections are named as connect4 programs (aya-obj
//! parses the object whole or not at all), and userspace loads these two itself with the unix
//! attach types (`kernel::unix_hooks`). Never load them through aya.

use aya_ebpf::bindings::bpf_sock_addr;
use aya_ebpf::helpers::{
    bpf_probe_read_kernel, bpf_probe_read_kernel_buf, bpf_probe_read_kernel_str_bytes,
};
use guard_common::Decision;
use guard_common::engine::outcome::Counters;
use guard_common::event::{action, flag, kind};
use guard_common::limits::{NO_RULE, UNIX_PATH_LEN};
use guard_common::maps::{Verdict, counter};

use crate::approvals::unix_approved;
use crate::events::{Subject, conclude, emit};
use crate::kernel::offsets;
use crate::maps::{UNIX_EXACT, UNIX_PREFIX, UNIX_SCRATCH, count, settings};
use crate::scope::current_scope;

/// `offsetof(struct sockaddr_un, sun_path)`.
const SUN_PATH_OFFSET: usize = 2;
const AF_UNIX: u16 = 1;

// cgroup sock_addr programs: return 1 to let the call through, 0 to fail it with EPERM.

#[unsafe(no_mangle)]
#[unsafe(link_section = "cgroup/connect4/connect_unix")]
pub fn connect_unix(ctx: *mut bpf_sock_addr) -> i32 {
    decide(ctx, 0)
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "cgroup/connect4/sendmsg_unix")]
pub fn sendmsg_unix(ctx: *mut bpf_sock_addr) -> i32 {
    decide(ctx, 1)
}

#[inline(always)]
fn decide(ctx: *mut bpf_sock_addr, call: u16) -> i32 {
    // Not configured or not in scope: let through (fails open, as every hook: nothing is
    // enforced before the maps are filled, and processes outside the scope are not guard's).
    let Some(settings) = settings() else {
        return 1;
    };
    let scope = current_scope();
    if scope == 0 {
        return 1;
    }
    let Some(scratch) = UNIX_SCRATCH.get_ptr_mut(0) else {
        // Fails open: the per-CPU scratch always exists; counted so it would show.
        count(counter::NET_FAILED_OPEN);
        return 1;
    };
    // SAFETY: the per-CPU scratch is this program's alone while it runs.
    let scratch = unsafe { &mut *scratch };
    if read_address(ctx, &mut scratch.key).is_err() {
        // Fails open: the kernel's own copy of the address could not be read (counted).
        count(counter::NET_FAILED_OPEN);
        return 1;
    }
    let len = scratch.key.len;
    // SAFETY: copies between two buffers of the scratch, of the key's size.
    let copied =
        unsafe { bpf_probe_read_kernel_buf(scratch.key.path.as_ptr(), &mut scratch.prefix.data) };
    scratch.prefix.prefix_len = len * 8;
    // An exact entry that only carries an approval's mark decides nothing: the prefix does.
    // Plain values, each set on every path: the verifier refuses a spill of an unset register,
    // which an `Option` of the entry's copy made.
    let mut verdict = unmatched(settings.unmatched_network);
    let mut decided = false;
    let mut marked = false;
    let mut mark_rule = 0u32;
    // SAFETY: lookup of a key in the scratch.
    if let Some(found) = unsafe { UNIX_EXACT.get(&scratch.key) } {
        marked = found.approved();
        mark_rule = found.rule;
        if !found.is_none() {
            verdict = *found;
            decided = true;
        }
    }
    if !decided
        && copied.is_ok()
        && let Some(found) = UNIX_PREFIX.get(&scratch.prefix)
    {
        verdict = *found;
    }
    // A person approved this socket for some scope: a `prompt` (never a `forbidden`) goes
    // through when it was this scope (looked up last, only for a marked prompt).
    if marked && verdict.decision == Decision::Prompt as u8 && unix_approved(scope, mark_rule) {
        verdict.decision = Decision::Allow as u8;
    }
    let flags = if verdict.rule == NO_RULE {
        flag::UNMATCHED
    } else {
        0
    };
    let Some((act, flags)) = conclude(&settings, verdict, Counters::UNIX, flags, action::EPERM)
    else {
        return 1;
    };
    let shown = (len as usize).min(UNIX_PATH_LEN);
    // SAFETY: copies the address bytes into the event's buffer, within both.
    let _ = unsafe {
        bpf_probe_read_kernel_buf(
            scratch.key.path.as_ptr(),
            &mut scratch.event_path[..UNIX_PATH_LEN],
        )
    };
    emit(&Subject {
        kind: kind::UNIX,
        verdict,
        action: act,
        flags,
        task: None,
        path: Some((&scratch.event_path, shown as u16)),
        dev: 0,
        ino: 0,
        family: AF_UNIX,
        port: call,
        transport: 0,
        addr: [0; 16],
    });
    if act == action::EPERM { 0 } else { 1 }
}

/// What no entry decides (the trie's defaults missing): the policy's unmatched network default.
#[inline(always)]
fn unmatched(decision: u8) -> Verdict {
    Verdict {
        decision,
        flags: 0,
        _pad: 0,
        rule: NO_RULE,
    }
}

/// Reads the address the caller named into `key`, from `bpf_sock_addr_kern` (what the context
/// register points at; its offsets come from the kernel's BTF).
#[inline(always)]
fn read_address(ctx: *mut bpf_sock_addr, key: &mut guard_common::maps::UnixKey) -> Result<(), i32> {
    let off = offsets();
    if off.sock_addr_uaddrlen == 0 {
        return Err(0);
    }
    let base = ctx as *const u8;
    // SAFETY: reads of kernel memory through the helper, which fails rather than faults.
    unsafe {
        let uaddr: *const u8 =
            bpf_probe_read_kernel(base.add(off.sock_addr_uaddr as usize).cast::<*const u8>())?;
        let uaddrlen: u32 =
            bpf_probe_read_kernel(base.add(off.sock_addr_uaddrlen as usize).cast::<u32>())?;
        let family: u16 = bpf_probe_read_kernel(uaddr.cast::<u16>())?;
        // The kernel checked the length (unix_validate_addr: more than the family, at most a
        // sockaddr_un); another family never reaches these hooks.
        if family != AF_UNIX
            || uaddrlen as usize <= SUN_PATH_OFFSET
            || uaddrlen as usize > SUN_PATH_OFFSET + UNIX_PATH_LEN
        {
            return Err(0);
        }
        let n = uaddrlen as usize - SUN_PATH_OFFSET;
        let src = uaddr.add(SUN_PATH_OFFSET);
        key.path = [0; UNIX_PATH_LEN];
        let first: u8 = bpf_probe_read_kernel(src)?;
        if first == 0 {
            // Abstract: exactly n bytes, NULs included.
            bpf_probe_read_kernel_buf(src, &mut key.path[..n])?;
            key.len = n as u32;
        } else {
            // A pathname: up to its first NUL within n bytes, as the kernel reads it.
            let room = if n < UNIX_PATH_LEN {
                n + 1
            } else {
                UNIX_PATH_LEN
            };
            let mut len = bpf_probe_read_kernel_str_bytes(src, &mut key.path[..room])?.len();
            // A path of the full 108 bytes has no NUL: the helper kept 107 of them.
            if len == UNIX_PATH_LEN - 1 && n == UNIX_PATH_LEN {
                let last: u8 = bpf_probe_read_kernel(src.add(UNIX_PATH_LEN - 1))?;
                if last != 0 {
                    key.path[UNIX_PATH_LEN - 1] = last;
                    len = UNIX_PATH_LEN;
                }
            }
            key.len = len as u32;
        }
    }
    Ok(())
}
