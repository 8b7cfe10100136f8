//! File decisions (`lsm` backend only): rule-set `read(...)` and `write(...)` globs and the
//! built-in protected paths, over the file's absolute path as `bpf_d_path` names it, walked
//! through the `READ_PATH` and `WRITE_PATH` pattern tables. A refusal fails the call with
//! EACCES. `file_open` decides reads and writes of an open; the path hooks decide what
//! changes a folder: make a folder (`path_mkdir`), remove (`path_unlink`, `path_rmdir`), rename
//! (both names) and truncate. A new file is decided at `file_open`, just after the kernel made
//! it: `path_mknod` would be earlier, but the kernel refuses `bpf_d_path` there, so an open
//! with O_CREAT that is refused leaves an empty file behind.
//!
//! A file no rule names is allowed: files have no unmatched default. A path that cannot be read
//! takes the table's safe answer, its strongest verdict that is not an allow (fails closed).

use aya_ebpf::bindings::path;
use aya_ebpf::helpers::bpf_probe_read_kernel_str_bytes;
use aya_ebpf::helpers::generated::bpf_d_path;
use aya_ebpf::macros::lsm;
use aya_ebpf::programs::LsmContext;
use guard_common::dfa::table;
use guard_common::engine::outcome::{Counters, Outcome};
use guard_common::event::{action, flag, kind};
use guard_common::limits::{FILE_NAME_LEN, FILE_PATH_BUF, FILE_PATH_LEN};
use guard_common::maps::{Settings, Verdict, counter};

use crate::events::{Subject, conclude, emit};
use crate::kernel::{lsm_return, offsets, read_at};
use crate::maps::{FILE_SCRATCH, or_failed_open, settings};
use crate::patterns::{PatternInput, table_verdict};
use crate::scope::current_in_scope;

const EACCES: i32 = 13;
const FMODE_READ: u32 = 1;
const FMODE_WRITE: u32 = 2;

/// One file hook: a previous LSM's refusal stands; otherwise `$decide` says. An error there
/// (the scratch map, or the file's mode, unreadable) fails open, counted: nothing can be
/// compared, and refusing every such call in the scope would stop the machine's programs, not the
/// policy's.
macro_rules! file_hook {
    ($name:ident, $hook:literal, $ret_arg:literal, $decide:ident) => {
        #[lsm(hook = $hook)]
        pub fn $name(ctx: LsmContext) -> i32 {
            let previous: i32 = ctx.arg($ret_arg);
            if previous != 0 {
                return lsm_return(previous);
            }
            lsm_return(or_failed_open(
                unsafe { $decide(&ctx) },
                counter::FILE_FAILED_OPEN,
            ))
        }
    };
}

// `path_mknod` is left out: the kernel refuses `bpf_d_path` there (see the module doc).
file_hook!(file_open, "file_open", 1, try_file_open);
file_hook!(path_mkdir, "path_mkdir", 3, try_dir_entry);
file_hook!(path_unlink, "path_unlink", 2, try_dir_entry);
file_hook!(path_rmdir, "path_rmdir", 2, try_dir_entry);
file_hook!(path_rename, "path_rename", 5, try_path_rename);
file_hook!(path_truncate, "path_truncate", 1, try_path_truncate);

/// The settings, when this call is guard's to decide. `None` lets it through: before the maps
/// are filled nothing is enforced (fails open), and processes outside the scope are none of
/// guard's business.
#[inline(always)]
fn scoped_settings() -> Option<Settings> {
    settings().filter(|_| current_in_scope())
}

unsafe fn try_file_open(ctx: &LsmContext) -> Result<i32, i32> {
    let Some(settings) = scoped_settings() else {
        return Ok(0);
    };
    let file: *const u8 = ctx.arg(0);
    let off = offsets();
    let mode: u32 = unsafe { read_at(file, off.file_f_mode)? };
    let wants_write = mode & FMODE_WRITE != 0;
    let wants_read = mode & FMODE_READ != 0;
    if !wants_read && !wants_write {
        // Neither (e.g. an O_PATH open): no read or write rule is about it (not a failure).
        return Ok(0);
    }
    // SAFETY: `file` is the hook's `struct file *`, so this is its embedded `f_path`.
    let file_path = unsafe { file.add(off.file_f_path as usize) } as *mut path;
    let input = file_path_input(file_path, None)?;
    let mut verdict = Verdict::NONE;
    let mut event = kind::FILE_READ;
    if wants_write {
        verdict = table_verdict(table::WRITE_PATH, &input);
        event = kind::FILE_WRITE;
    }
    if wants_read {
        let read = table_verdict(table::READ_PATH, &input);
        if verdict.strongest(read) != verdict {
            verdict = read;
            event = kind::FILE_READ;
        }
    }
    Ok(decide(&settings, verdict, event, input.name_len))
}

unsafe fn try_dir_entry(ctx: &LsmContext) -> Result<i32, i32> {
    let Some(settings) = scoped_settings() else {
        return Ok(0);
    };
    let dir: *mut path = ctx.arg(0);
    let dentry: *const u8 = ctx.arg(1);
    let input = file_path_input(dir, Some(dentry))?;
    let verdict = table_verdict(table::WRITE_PATH, &input);
    Ok(decide(&settings, verdict, kind::FILE_WRITE, input.name_len))
}

unsafe fn try_path_rename(ctx: &LsmContext) -> Result<i32, i32> {
    let Some(settings) = scoped_settings() else {
        return Ok(0);
    };
    // The old name goes away and the new one appears: both are writes. The old one first; a
    // refusal there is the one reported.
    let input = file_path_input(ctx.arg(0), Some(ctx.arg(1)))?;
    let verdict = table_verdict(table::WRITE_PATH, &input);
    if refuses(&settings, verdict) {
        return Ok(decide(&settings, verdict, kind::FILE_WRITE, input.name_len));
    }
    let input = file_path_input(ctx.arg(2), Some(ctx.arg(3)))?;
    let verdict = table_verdict(table::WRITE_PATH, &input);
    Ok(decide(&settings, verdict, kind::FILE_WRITE, input.name_len))
}

unsafe fn try_path_truncate(ctx: &LsmContext) -> Result<i32, i32> {
    let Some(settings) = scoped_settings() else {
        return Ok(0);
    };
    let input = file_path_input(ctx.arg(0), None)?;
    let verdict = table_verdict(table::WRITE_PATH, &input);
    Ok(decide(&settings, verdict, kind::FILE_WRITE, input.name_len))
}

/// Writes the absolute path of `at` (and, with `entry`, `/` and that dentry's name) into the
/// file scratch and says where it is. A path `bpf_d_path` cannot give, or a name that cannot be
/// read, is an unknown path, which every walk answers with its table's safe answer (fails
/// closed).
#[inline(always)]
fn file_path_input(at: *mut path, entry: Option<*const u8>) -> Result<PatternInput, i32> {
    // No scratch: fails open (counted by the entry points, see `file_hook!`).
    let scratch = unsafe { &mut *FILE_SCRATCH.get_ptr_mut(0).ok_or(0)? };
    let unknown = PatternInput::unknown_file();
    // SAFETY: `at` is a `struct path *` the hook was given (or one embedded in its file), and
    // the buffer is our scratch, FILE_PATH_LEN bytes of it offered.
    let written = unsafe { bpf_d_path(at, scratch.path.as_mut_ptr().cast(), FILE_PATH_LEN as u32) };
    if written <= 0 || written as usize > FILE_PATH_LEN {
        return Ok(unknown);
    }
    // `written` counts the NUL. The masks change no value; they show the verifier the bound.
    let mut end = (written as usize - 1) & (FILE_PATH_LEN - 1);
    let Some(dentry) = entry else {
        return Ok(PatternInput::file(end as u32));
    };
    // The folder `/` already ends in the separator; no room for one more: unknown.
    if end > 1 {
        if end + 1 >= FILE_PATH_LEN {
            return Ok(unknown);
        }
        scratch.path[end] = b'/';
        end += 1;
    }
    let end = end & (FILE_PATH_LEN - 1);
    let Ok(name) = (unsafe { read_at::<*const u8>(dentry, offsets().dentry_name) }) else {
        return Ok(unknown);
    };
    let Some(room) = scratch.path.get_mut(end..end + FILE_NAME_LEN) else {
        return Ok(unknown);
    };
    // SAFETY: a kernel string (the dentry's name) into our scratch.
    match unsafe { bpf_probe_read_kernel_str_bytes(name, room) } {
        Ok(bytes) if bytes.len() < FILE_NAME_LEN - 1 => {
            Ok(PatternInput::file((end + bytes.len()) as u32))
        }
        _ => Ok(unknown),
    }
}

/// Whether `verdict` refuses the call (a prompt refuses too: a file operation cannot wait for
/// an answer).
#[inline(always)]
fn refuses(settings: &Settings, verdict: Verdict) -> bool {
    !verdict.is_none() && Outcome::of(settings, verdict).refused
}

/// Counts and records the decision; the hook's return value (0, or -EACCES for a refusal).
#[inline(always)]
fn decide(settings: &Settings, verdict: Verdict, event_kind: u8, path_len: u32) -> i32 {
    // No rule names the file: let it through (a decision, not a failure).
    if verdict.is_none() {
        return 0;
    }
    // An allow nobody records: counted, no event (a decision, not a failure).
    let Some((act, flags)) = conclude(settings, verdict, Counters::FILE, flag::LSM, action::EACCES)
    else {
        return 0;
    };
    let refused = act == action::EACCES;
    let Some(scratch) = FILE_SCRATCH.get(0) else {
        return if refused { -EACCES } else { 0 };
    };
    emit(&Subject {
        kind: event_kind,
        verdict,
        action: act,
        flags,
        task: None,
        path: Some((&scratch.path, path_len.min(FILE_PATH_LEN as u32) as u16)),
        dev: 0,
        ino: 0,
        family: 0,
        port: 0,
        transport: 0,
        addr: [0; 16],
    });
    if refused { -EACCES } else { 0 }
}

/// [`FILE_PATH_BUF`] holds a path of up to [`FILE_PATH_LEN`] bytes and one more name.
const _: () = assert!(FILE_PATH_BUF >= FILE_PATH_LEN + FILE_NAME_LEN);
