//! Exec decisions: by program identity (device + inode of the file actually executed), by the
//! executed file's name, by argv prefix (the argv trie, under each reading of token 0: `argv`),
//! by pattern tables (`patterns`) and, for a file no path names, by the policy's default for
//! those; strongest wins.
//!
//! `tp_btf/sched_process_exec` runs after the new image is installed and before it executes a
//! single instruction: argv there is the new image's own (other threads are gone), so a racing
//! thread cannot change what is compared. A refusal there is SIGKILL. `lsm/bprm_check_security`
//! (where the kernel allows it) refuses by identity and name earlier, with EPERM.

use aya_ebpf::helpers::generated::{bpf_get_current_task, bpf_send_signal};
use aya_ebpf::helpers::{bpf_probe_read_kernel_str_bytes, bpf_probe_read_user_buf};
use aya_ebpf::macros::{btf_tracepoint, lsm};
use aya_ebpf::programs::{BtfTracePointContext, LsmContext};
use guard_common::engine::Decided;
use guard_common::engine::argv::str_len;
use guard_common::engine::exec::{ExecFindings, decide_exec, refuse_before_argv};
use guard_common::engine::outcome::Counters;
use guard_common::event::{TaskInfo, action, flag, kind};
use guard_common::limits::{ARGV_LEN, PATH_LEN, PATTERN_ARGV_LEN};
use guard_common::maps::{ExecIdentity, ExecName, Settings, Verdict, counter};

use crate::argv::walk_argv;
use crate::events::{Subject, conclude, emit};
use crate::kernel::{file_identity, file_is_anonymous, lsm_return, offsets, read_at};
use crate::maps::{EXEC_IDENTITIES, EXEC_NAMES, EXEC_SCRATCH, LSM_SCRATCH, TASKS, count, settings};
use crate::patterns::{PatternInput, exec_tables_loaded, pattern_verdict};
use crate::scope::{current_in_scope, current_scope};

const SIGKILL: u32 = 9;
const EPERM: i32 = 1;

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> i32 {
    // An error reading kernel or user memory fails open for this exec: the tracepoint cannot
    // refuse what it cannot see, and a half-read argv must not invent a match. Unreadable argv
    // is counted (ARGV_UNREADABLE) and takes the strongest rule below the last matched token.
    // Every such exec is counted (EXEC_FAILED_OPEN), shown by `guard status` and `guard run -v`.
    if unsafe { try_sched_process_exec(&ctx) }.is_err() {
        count(counter::EXEC_FAILED_OPEN);
    }
    0
}

unsafe fn try_sched_process_exec(ctx: &BtfTracePointContext) -> Result<(), i32> {
    // Not configured yet, or not ours: let it run (fails open; nothing is enforced before the
    // maps are filled, and processes outside the scope are none of guard's business).
    let Some(settings) = settings() else {
        return Ok(());
    };
    let scope = current_scope();
    if scope == 0 {
        return Ok(());
    }
    let task: *const u8 = ctx.arg(0);
    let bprm: *const u8 = ctx.arg(2);
    let scratch = unsafe { &mut *EXEC_SCRATCH.get_ptr_mut(0).ok_or(0)? };
    // Kept in the scratch for the argv walk's approvals, not in a register across the program
    // (the verifier would carry it through every path).
    scratch.argv.scope = scope;
    let off = offsets();

    let file: *const u8 = unsafe { read_at(bprm, off.bprm_file)? };
    let identity = unsafe { file_identity(file, &mut scratch.name)? };
    // Unreadable: decided as a file with a path (fails open to the rules, which still decide,
    // and counted; `file_identity` read the same file just before, so this is not expected).
    let anonymous = unsafe { file_is_anonymous(file) }.unwrap_or_else(|_| {
        count(counter::EXEC_FAILED_OPEN);
        false
    });
    // SAFETY (each volatile access here and below): our per-CPU scratch, only this program on
    // this CPU.
    unsafe {
        core::ptr::write_volatile(
            &mut scratch.identity_verdict,
            identity_verdict(&identity, &scratch.name),
        );
        core::ptr::write_volatile(&mut scratch.anonymous, u32::from(anonymous));
    }

    // The new image's argv, and what the events of this process will name. Bounds that cannot
    // be read must not let an identity refusal through: with (0, 0) the argv walk fails to
    // read address 0 and takes the safe answer, and identity and name still decide.
    let (arg_start, arg_end) = unsafe { argv_bounds(task) }.unwrap_or((0, 0));
    fill_task_info(task, bprm, arg_start, arg_end, scratch);

    // The pattern tables first, on the straight path, so the verifier checks them once rather
    // than once per way out of the argv walk. Input and verdict go through our per-CPU scratch
    // (plain stores and loads, volatile so what is read back is map memory, not the registers
    // the loops that found it left behind: see `ExecScratch`).
    // With no exec table loaded (no pattern rule in the policy), argv is not copied for them:
    // nothing to decide (not a failure).
    let by_pattern = if exec_tables_loaded() {
        let total = arg_end.saturating_sub(arg_start);
        let read = read_pattern_argv(arg_start, total, &mut scratch.pattern_argv);
        let input = PatternInput::new(
            str_len(&scratch.name.name),
            &scratch.pattern_argv,
            read,
            total,
        );
        unsafe { core::ptr::write_volatile(&mut scratch.patterns, input) };
        let input = unsafe { core::ptr::read_volatile(&scratch.patterns) };
        pattern_verdict(&input)
    } else {
        Verdict::NONE
    };
    unsafe { core::ptr::write_volatile(&mut scratch.pattern_verdict, by_pattern) };

    // Strongest wins; a file no path names adds its default; nothing matched takes the
    // unmatched default; an approval of exactly this argv lets a `prompt` run (see
    // `guard_common::engine::exec`).
    let by_argv = walk_argv(&identity, arg_start, arg_end);
    let found = unsafe {
        ExecFindings {
            by_file: core::ptr::read_volatile(&scratch.identity_verdict),
            by_argv,
            by_pattern: core::ptr::read_volatile(&scratch.pattern_verdict),
            anonymous: core::ptr::read_volatile(&scratch.anonymous) != 0,
        }
    };
    let Decided { verdict, mut flags } = decide_exec(&settings, &found);
    let tgid = (aya_ebpf::helpers::bpf_get_current_pid_tgid() >> 32) as u32;
    let _ = TASKS.insert(&tgid, &scratch.task, 0);
    if scratch.task.argv_len as u64 != arg_end.saturating_sub(arg_start) {
        flags |= flag::ARGV_TRUNCATED;
    }
    if decide(
        &settings,
        verdict,
        flags,
        &identity,
        Some(&scratch.task),
        action::SIGKILL,
    ) {
        // SAFETY: signals the current task, the one exec'ing; it dies before the new image runs.
        unsafe { bpf_send_signal(SIGKILL) };
    }
    Ok(())
}

/// `mm->arg_start` and `mm->arg_end` of `task` (the new image, at sched_process_exec).
#[inline(always)]
unsafe fn argv_bounds(task: *const u8) -> Result<(u64, u64), i32> {
    let off = offsets();
    unsafe {
        let mm: *const u8 = read_at(task, off.task_mm)?;
        Ok((read_at(mm, off.mm_arg_start)?, read_at(mm, off.mm_arg_end)?))
    }
}

#[lsm(hook = "bprm_check_security")]
pub fn bprm_check_security(ctx: LsmContext) -> i32 {
    // A previous LSM's refusal stands.
    let previous: i32 = ctx.arg(1);
    if previous != 0 {
        return lsm_return(previous);
    }
    // An error reading the bprm fails open here; sched_process_exec decides again (identity,
    // name and argv) after the image is installed, and kills what it refuses.
    lsm_return(unsafe { try_bprm_check_security(&ctx) }.unwrap_or(0))
}

unsafe fn try_bprm_check_security(ctx: &LsmContext) -> Result<i32, i32> {
    // Not configured yet, or not ours: let it run (fails open, as sched_process_exec does).
    let Some(settings) = settings() else {
        return Ok(0);
    };
    if !current_in_scope() {
        return Ok(0);
    }
    let bprm: *const u8 = ctx.arg(0);
    let scratch = unsafe { &mut *LSM_SCRATCH.get_ptr_mut(0).ok_or(0)? };
    let file: *const u8 = unsafe { read_at(bprm, offsets().bprm_file)? };
    let identity = unsafe { file_identity(file, &mut scratch.name)? };
    // Only matched identity and name rules (and the default for a file no path names) decide
    // here: the unmatched default needs argv, which sched_process_exec has.
    let by_file = identity_verdict(&identity, &scratch.name);
    // Unreadable: sched_process_exec decides it again (fails open here only).
    let anonymous = unsafe { file_is_anonymous(file) }.unwrap_or(false);
    // Nothing this hook may refuse (an allow, no rule, a prompt an approval of the new argv
    // may lift, audit-only): a decision, not a failure; sched_process_exec decides everything
    // again after the image is installed, and kills what it refuses (so while approvals exist
    // a `prompt` is refused there, with SIGKILL instead of EPERM).
    let Some(Decided { verdict, flags }) = refuse_before_argv(&settings, by_file, anonymous) else {
        return Ok(0);
    };
    let flags = flags | flag::LSM;
    // The event describes this exec, not what TASKS remembers of the caller's last one (nothing,
    // for a process that has not exec'd in scope yet; the wrong program, for one that has).
    // SAFETY: the current task, as the helper returns it.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let info = &mut scratch.task;
    info.ppid = parent_tgid(task);
    info.exe_len = exec_path(bprm, &mut info.exe);
    info.argv_len = 0;
    let refused = decide(
        &settings,
        verdict,
        flags,
        &identity,
        Some(&scratch.task),
        action::EPERM,
    );
    Ok(if refused { -EPERM } else { 0 })
}

#[inline(always)]
fn identity_verdict(identity: &ExecIdentity, name: &ExecName) -> Verdict {
    let mut verdict = Verdict::NONE;
    // SAFETY: lookups with plain keys.
    if let Some(v) = unsafe { EXEC_IDENTITIES.get(identity) } {
        verdict = verdict.strongest(*v);
    }
    if let Some(v) = unsafe { EXEC_NAMES.get(name) } {
        verdict = verdict.strongest(*v);
    }
    verdict
}

/// Counts the decision, and for a refusal or a recorded match emits the event naming
/// `refusal` (the hook's way of refusing) when it is enforced; whether the caller must refuse.
#[inline(always)]
fn decide(
    settings: &Settings,
    verdict: Verdict,
    flags: u8,
    identity: &ExecIdentity,
    task: Option<&TaskInfo>,
    refusal: u8,
) -> bool {
    // An allow nobody records: counted, no event (a decision, not a failure).
    let Some((act, flags)) = conclude(settings, verdict, Counters::EXEC, flags, refusal) else {
        return false;
    };
    emit(&Subject {
        kind: kind::EXEC,
        verdict,
        action: act,
        flags,
        task,
        path: None,
        dev: identity.dev,
        ino: identity.ino,
        family: 0,
        port: 0,
        transport: 0,
        addr: [0; 16],
    });
    act == refusal
}

/// Fills the per-CPU TaskInfo: parent, the path given to exec, and argv (bounded).
#[inline(always)]
fn fill_task_info(
    task: *const u8,
    bprm: *const u8,
    arg_start: u64,
    arg_end: u64,
    scratch: &mut crate::maps::ExecScratch,
) {
    let info = &mut scratch.task;
    info.ppid = parent_tgid(task);
    info.exe_len = exec_path(bprm, &mut info.exe);
    let total = arg_end.saturating_sub(arg_start);
    let len = if total > ARGV_LEN as u64 {
        ARGV_LEN
    } else {
        total as usize
    };
    info.argv_len = 0;
    if len > 0 && len <= ARGV_LEN {
        // SAFETY: user memory of the new image into the scratch buffer.
        if unsafe { bpf_probe_read_user_buf(arg_start as *const u8, &mut info.argv[..len]) }.is_ok()
        {
            info.argv_len = len as u16;
        }
    }
}

/// Reads up to `PATTERN_ARGV_LEN` bytes of the new image's argv into `buf`; how many (0 when
/// unreadable: the pattern walks then take their safe answer).
#[inline(always)]
fn read_pattern_argv(arg_start: u64, total: u64, buf: &mut [u8; PATTERN_ARGV_LEN]) -> usize {
    let len = if total > PATTERN_ARGV_LEN as u64 {
        PATTERN_ARGV_LEN
    } else {
        total as usize
    };
    if len == 0 || len > PATTERN_ARGV_LEN {
        return 0;
    }
    // SAFETY: user memory of the new image into our scratch buffer.
    match unsafe { bpf_probe_read_user_buf(arg_start as *const u8, &mut buf[..len]) } {
        Ok(()) => len,
        Err(_) => 0,
    }
}

/// The tgid of `task`'s parent (0 when unreadable).
#[inline(always)]
fn parent_tgid(task: *const u8) -> u32 {
    let off = offsets();
    // SAFETY: kernel reads through the helper; a failure reads as 0.
    unsafe {
        read_at::<*const u8>(task, off.task_real_parent)
            .and_then(|parent| read_at::<u32>(parent, off.task_tgid))
            .unwrap_or(0)
    }
}

/// Copies the path given to exec (`bprm->filename`) into `exe`; its length (0 when unreadable).
#[inline(always)]
fn exec_path(bprm: *const u8, exe: &mut [u8; PATH_LEN]) -> u16 {
    // SAFETY: kernel reads through the helpers.
    // Unreadable: the event has no path (only what is reported; the decision does not use it).
    let Ok(filename) = (unsafe { read_at::<*const u8>(bprm, offsets().bprm_filename) }) else {
        return 0;
    };
    match unsafe { bpf_probe_read_kernel_str_bytes(filename, exe) } {
        Ok(path) => path.len() as u16,
        Err(_) => 0,
    }
}
