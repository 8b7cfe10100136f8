//! Ring-buffer records for refusals and audit-only matches. A record that does not fit is
//! counted in `EVENTS_LOST`, never dropped silently.

use aya_ebpf::helpers::generated::{bpf_get_current_cgroup_id, bpf_ktime_get_boot_ns};
use aya_ebpf::helpers::{
    bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_uid_gid,
    bpf_probe_read_kernel_buf,
};
use guard_common::engine::outcome::{Counters, Outcome};
use guard_common::event::{Event, TaskInfo, action, flag};
use guard_common::limits::{ARGV_LEN, EVENTS_BYTES, FILE_PATH_BUF, SCOPE_EVENTS_PER_SECOND};
use guard_common::maps::{ScopeEvents, Settings, Verdict, counter};

use crate::maps::{EVENTS, SCOPE_EVENTS, TASKS, count};
use crate::scope::current_scope;

/// What a decision site knows about the call, beyond the current task.
pub struct Subject<'a> {
    pub kind: u8,
    pub verdict: Verdict,
    pub action: u8,
    pub flags: u8,
    /// Exec: the new image's details; connect: looked up in `TASKS`.
    pub task: Option<&'a TaskInfo>,
    /// A file event's path and its length, carried in the event's `argv`.
    pub path: Option<(&'a [u8; FILE_PATH_BUF], u16)>,
    pub dev: u64,
    pub ino: u64,
    pub family: u16,
    pub port: u16,
    pub transport: u8,
    pub addr: [u8; 16],
}

/// The tail every decision shares (`guard_common::engine::outcome`): counts the decision, and
/// for one that is recorded returns the action the event names (`refusal`, the hook's way of
/// refusing, when it is enforced; the caller enforces it) and `flags` with the audit-only flag
/// added where it applies. `None`: an allow nobody records (no event).
#[inline(always)]
pub fn conclude(
    settings: &Settings,
    verdict: Verdict,
    counters: Counters,
    flags: u8,
    refusal: u8,
) -> Option<(u8, u8)> {
    count(counters.slot(verdict));
    let outcome = Outcome::of(settings, verdict);
    if !outcome.recorded {
        return None;
    }
    if outcome.audit_only {
        count(counter::AUDIT_ONLY);
        return Some((action::NONE, flags | flag::AUDIT_ONLY));
    }
    Some((
        if outcome.refused {
            refusal
        } else {
            action::NONE
        },
        flags,
    ))
}

/// `bpf_ringbuf_query`: the bytes written and not yet read.
const BPF_RB_AVAIL_DATA: u64 = 0;
/// Past this many unread bytes (half the ring), only scopes within their share of events this
/// second may add to it: the other half is kept for the scopes that are not flooding. Below it,
/// every event goes in, so a reader that keeps up loses nothing of any scope.
const RING_CONTENDED: u64 = EVENTS_BYTES as u64 / 2;

/// The current scope's share of the ring buffer on this CPU, with this event counted in its
/// second. `None` (no entry could be made, or no scope): the event is not held to a share.
#[inline(always)]
fn scope_share(scope: u64) -> Option<&'static mut ScopeEvents> {
    if scope == 0 {
        return None;
    }
    // SAFETY: a helper with no arguments.
    let second = unsafe { bpf_ktime_get_boot_ns() } / 1_000_000_000;
    if SCOPE_EVENTS.get_ptr_mut(&scope).is_none() {
        let fresh = ScopeEvents {
            second,
            ..ScopeEvents::default()
        };
        let _ = SCOPE_EVENTS.insert(&scope, &fresh, 0);
    }
    // SAFETY: this CPU's value of a per-CPU entry; only this CPU writes it, and a program
    // runs to its end without moving CPU.
    let share = unsafe { &mut *SCOPE_EVENTS.get_ptr_mut(&scope)? };
    if share.second != second {
        share.second = second;
        share.in_second = 0;
    }
    share.in_second += 1;
    Some(share)
}

#[inline(always)]
pub fn emit(subject: &Subject) {
    // A lost record never loses the decision: the refusal stands (the caller enforces after
    // emitting), and the loss is counted, in all and for the scope.
    let scope = current_scope();
    let mut share = scope_share(scope);
    if let Some(share) = share.as_deref_mut()
        && share.in_second > SCOPE_EVENTS_PER_SECOND
        && EVENTS.query(BPF_RB_AVAIL_DATA) > RING_CONTENDED
    {
        share.lost += 1;
        count(counter::EVENTS_OVER_BUDGET);
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        if let Some(share) = share.as_deref_mut() {
            share.lost += 1;
        }
        count(counter::EVENTS_LOST);
        return;
    };
    if let Some(share) = share {
        share.submitted += 1;
    }
    let event = entry.as_mut_ptr();
    let pid_tgid = bpf_get_current_pid_tgid();
    let uid_gid = bpf_get_current_uid_gid();
    // SAFETY: `event` points at reserved ring-buffer memory the size of an Event; every field
    // userspace reads is written below (exe/argv are read only up to exe_len/argv_len).
    unsafe {
        (*event).time_ns = bpf_ktime_get_boot_ns();
        (*event).cgroup_id = bpf_get_current_cgroup_id();
        (*event).scope = scope;
        (*event).dev = subject.dev;
        (*event).ino = subject.ino;
        (*event).kind = subject.kind;
        (*event).decision = subject.verdict.decision;
        (*event).action = subject.action;
        (*event).flags = subject.flags;
        (*event).rule = subject.verdict.rule;
        (*event).pid = pid_tgid as u32;
        (*event).tgid = (pid_tgid >> 32) as u32;
        (*event).uid = uid_gid as u32;
        (*event).gid = (uid_gid >> 32) as u32;
        (*event).family = subject.family;
        (*event).port = subject.port;
        (*event).transport = subject.transport;
        (*event)._pad = [0; 3];
        (*event).addr = subject.addr;
        (*event).comm = bpf_get_current_comm().unwrap_or([0; 16]);
        let tgid = (pid_tgid >> 32) as u32;
        let task = match subject.task {
            Some(task) => Some(task),
            None => TASKS.get(&tgid),
        };
        match task {
            Some(task) => {
                (*event).ppid = task.ppid;
                (*event).exe_len = task.exe_len;
                (*event).argv_len = task.argv_len;
                // One helper copy each: cheaper for the verifier than a byte loop.
                let _ = bpf_probe_read_kernel_buf(task.exe.as_ptr(), &mut (*event).exe);
                let _ = bpf_probe_read_kernel_buf(task.argv.as_ptr(), &mut (*event).argv);
            }
            None => {
                // Not exec'd in scope (e.g. the first process): userspace fills in from /proc.
                (*event).ppid = 0;
                (*event).exe_len = 0;
                (*event).argv_len = 0;
            }
        }
        if let Some((path, len)) = subject.path {
            let _ = bpf_probe_read_kernel_buf(path.as_ptr(), &mut (*event).argv);
            (*event).argv_len = if len as usize > ARGV_LEN {
                ARGV_LEN as u16
            } else {
                len
            };
        }
    }
    entry.submit(0);
    count(counter::EVENTS_SUBMITTED);
}
