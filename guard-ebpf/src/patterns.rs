//! Exec decisions by pattern tables (`guard_common::dfa`): forbidden program regexes over the
//! executed file's name, forbidden substrings over argv, rule-set `exec(...)` globs over the
//! command line. Userspace compiles them to DFAs; here each table is walked one byte per step,
//! within [`DFA_MAX_INPUT`] bytes.
//!
//! The input is the executed file's name, then argv after argv[0] with its NUL separators
//! (argv[0] is the caller's choice, so the name stands in for it, as in the argv trie). A walk
//! that cannot finish (argv truncated or unreadable, past the step bound, a byte the table
//! cannot judge) takes the table's safe answer: the strongest verdict in it that is not an
//! allow (fails closed).

use core::ffi::c_void;

use aya_ebpf::helpers::generated::bpf_loop;
use guard_common::dfa::{DfaHeader, DfaWalk, Outcome, Step, header_index, row_index, table};
use guard_common::limits::{DFA_MAX_INPUT, PATTERN_ARGV_LEN};
use guard_common::maps::Verdict;

use crate::maps::{DFA_HEADERS, DFA_ROWS, DFA_SLOTS, EXEC_SCRATCH, FILE_SCRATCH};

/// Where the input lies in the exec's scratch (`EXEC_SCRATCH`: the name, and the pattern
/// tables' copy of argv). Byte `i` of the input is `name[i]` below `name_len`, then
/// `argv[args_from + i - name_len]`.
///
/// Plain integers, no `Option` or `bool`: a `None` would leave its payload undefined, and the
/// verifier refuses a store of an undefined register into map memory.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PatternInput {
    /// [`SOURCE_EXEC`] or [`SOURCE_FILE`].
    pub source: u32,
    pub name_len: u32,
    /// Where argv[0]'s NUL is (the separator before argv[1]); [`NO_ARGS`] when argv could not
    /// be read or argv[0] does not end within the copy.
    pub args_from: u32,
    /// Bytes of argv from `args_from` to walk (the trailing NUL excluded).
    pub args_len: u32,
    /// 1: the copy holds all of argv (else a walk that reaches its end takes the safe answer).
    pub complete: u32,
}

/// [`PatternInput::args_from`] when argv after argv[0] cannot be found.
const NO_ARGS: u32 = u32::MAX;
/// Bytes of argv searched for the end of argv[0].
const ARGV0_SCAN_LEN: usize = 512;
/// The input is an exec's (`EXEC_SCRATCH`: the file's name, then argv).
pub const SOURCE_EXEC: u32 = 0;
/// The input is a file's path (`FILE_SCRATCH`), `name_len` bytes of it; `complete` 0 when
/// the path is unknown.
pub const SOURCE_FILE: u32 = 1;

impl PatternInput {
    /// The input of one exec: `argv` holds `len` bytes of the `total` argv bytes
    /// (NUL-terminated strings), read into the exec scratch's `pattern_argv`.
    #[inline(always)]
    pub fn new(name_len: usize, argv: &[u8; PATTERN_ARGV_LEN], len: usize, total: u64) -> Self {
        let complete = len > 0 && len as u64 == total;
        // A complete copy ends with argv's last NUL, which separates nothing.
        let end = if complete { len - 1 } else { len };
        // argv[0] is looked for in its first bytes only (a bounded loop the verifier walks
        // once); a longer argv[0] leaves the arguments unknown (the safe answer).
        let mut args_from = NO_ARGS;
        let mut i = 0;
        while i < ARGV0_SCAN_LEN {
            if i >= len {
                break;
            }
            if argv[i] == 0 {
                args_from = i as u32;
                break;
            }
            i += 1;
        }
        PatternInput {
            source: SOURCE_EXEC,
            name_len: name_len as u32,
            args_from,
            args_len: if args_from == NO_ARGS {
                0
            } else {
                (end as u32).saturating_sub(args_from)
            },
            complete: u32::from(complete),
        }
    }
}

impl PatternInput {
    /// A path of `len` bytes in `FILE_SCRATCH`.
    #[inline(always)]
    pub fn file(len: u32) -> Self {
        PatternInput {
            source: SOURCE_FILE,
            name_len: len,
            args_from: NO_ARGS,
            args_len: 0,
            complete: 1,
        }
    }

    /// A path that could not be read: every walk takes the safe answer.
    #[inline(always)]
    pub fn unknown_file() -> Self {
        PatternInput {
            complete: 0,
            ..Self::file(0)
        }
    }
}

/// The strongest verdict of the three tables for this exec (none where no table is loaded).
#[inline(always)]
pub fn pattern_verdict(input: &PatternInput) -> Verdict {
    walk_table(table::PROGRAM_NAME, input)
        .strongest(walk_table(table::ARGV, input))
        .strongest(walk_table(table::COMMAND_LINE, input))
}

/// Whether any of the exec tables (program name, argv, command line) holds patterns.
#[inline(always)]
pub fn exec_tables_loaded() -> bool {
    [table::PROGRAM_NAME, table::ARGV, table::COMMAND_LINE]
        .iter()
        .any(|&t| table_header(t).is_some_and(|(_, h)| !h.is_empty()))
}

/// The header in force for `table` (none before userspace wrote one).
#[inline(always)]
fn table_header(table: u32) -> Option<(u32, &'static DfaHeader)> {
    let slot = *DFA_SLOTS.get(table)? & 1;
    Some((slot, DFA_HEADERS.get(header_index(table, slot))?))
}

/// The verdict of one table for `input` (none when the table holds nothing).
#[inline(always)]
pub fn table_verdict(table: u32, input: &PatternInput) -> Verdict {
    walk_table(table, input)
}

#[inline(always)]
fn walk_table(table: u32, input: &PatternInput) -> Verdict {
    // No slot or header: the maps hold no table yet (fails open, as before any policy).
    let Some((slot, header)) = table_header(table) else {
        return Verdict::NONE;
    };
    // No pattern of this kind in the policy (not a failure).
    if header.is_empty() {
        return Verdict::NONE;
    }
    walk(table, slot, header, input).verdict(header)
}

/// A walk's state, shared with [`walk_byte`] through `bpf_loop`.
#[repr(C)]
struct WalkState {
    source: u32,
    table: u32,
    slot: u32,
    name_len: u32,
    args_from: u32,
    walk: DfaWalk,
    /// [`GOING`], [`ENDED`] (decided: `walk.seen` holds the outcome) or [`BOUND`].
    result: u8,
}

const GOING: u8 = 0;
const ENDED: u8 = 1;
const BOUND: u8 = 2;

/// Walks the input through one table. The bytes are stepped by `bpf_loop`, so the verifier
/// checks one step instead of every iteration of a 575-byte loop (which it cannot: too many
/// jumps to track).
#[inline(always)]
fn walk(table: u32, slot: u32, header: &DfaHeader, input: &PatternInput) -> Outcome {
    // An unknown path: the safe answer (fails closed).
    if input.source == SOURCE_FILE && input.complete == 0 {
        return Outcome::Bound;
    }
    let name_only = table != table::ARGV && table != table::COMMAND_LINE;
    let (args_from, args_len) = if name_only {
        (0, 0)
    } else if input.args_from == NO_ARGS {
        // argv unreadable, or argv[0] longer than the copy: the safe answer (fails closed).
        return Outcome::Bound;
    } else {
        (input.args_from, input.args_len)
    };
    let total = input.name_len + args_len;
    let mut state = WalkState {
        source: input.source,
        table,
        slot,
        name_len: input.name_len,
        args_from,
        walk: DfaWalk::start(header),
        result: GOING,
    };
    let steps = if total as usize > DFA_MAX_INPUT {
        DFA_MAX_INPUT as u32
    } else {
        total
    };
    // SAFETY: `walk_byte` reads `state` as the `WalkState` it is, on this stack, for the call.
    let ok = unsafe {
        bpf_loop(
            steps,
            walk_byte as *mut c_void,
            (&mut state as *mut WalkState).cast(),
            0,
        )
    };
    // The loop did not run (a kernel without bpf_loop would not have loaded the program): the
    // safe answer.
    if ok < 0 {
        return Outcome::Bound;
    }
    match state.result {
        ENDED => state.walk.outcome(),
        GOING => {
            // Past the step bound, or the copy ended before argv did: the safe answer.
            if total as usize > DFA_MAX_INPUT || (!name_only && input.complete == 0) {
                return Outcome::Bound;
            }
            match DFA_ROWS.get(row_index(table, slot, state.walk.state)) {
                Some(row) => state.walk.finish(header, row),
                None => Outcome::Bound,
            }
        }
        _ => Outcome::Bound,
    }
}

/// One byte of the input (`bpf_loop` callback): 0 to go on, 1 when the walk is over.
#[inline(never)]
extern "C" fn walk_byte(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `walk` passes its `WalkState`, alive for the whole loop.
    let state = unsafe { &mut *ctx.cast::<WalkState>() };
    let Some(outcome) = step(state, index as usize) else {
        return 0;
    };
    state.result = match outcome {
        Outcome::Bound => BOUND,
        _ => ENDED,
    };
    1
}

/// Byte `index` of the walk's input.
#[inline(always)]
fn input_byte(state: &WalkState, index: usize) -> Option<u8> {
    if state.source == SOURCE_FILE {
        return FILE_SCRATCH.get(0)?.path.get(index).copied();
    }
    let scratch = EXEC_SCRATCH.get(0)?;
    let name_len = state.name_len as usize;
    if index < name_len {
        scratch.name.name.get(index).copied()
    } else {
        scratch
            .pattern_argv
            .get(state.args_from as usize + (index - name_len))
            .copied()
    }
}

#[inline(always)]
fn step(state: &mut WalkState, index: usize) -> Option<Outcome> {
    // Scratch, header or row unreadable: a table userspace did not finish, the safe answer.
    let Some(byte) = input_byte(state, index) else {
        return Some(Outcome::Bound);
    };
    let Some(header) = DFA_HEADERS.get(header_index(state.table, state.slot)) else {
        return Some(Outcome::Bound);
    };
    let Some(from) = DFA_ROWS.get(row_index(state.table, state.slot, state.walk.state)) else {
        return Some(Outcome::Bound);
    };
    if let Step::Done(outcome) = state.walk.leave(header, from, byte) {
        return Some(outcome);
    }
    // A row outside the table: a corrupt table, the safe answer.
    if state.walk.state >= header.states {
        return Some(Outcome::Bound);
    }
    let Some(to) = DFA_ROWS.get(row_index(state.table, state.slot, state.walk.state)) else {
        return Some(Outcome::Bound);
    };
    match state.walk.arrive(header, to) {
        Step::Done(outcome) => Some(outcome),
        Step::Go => None,
    }
}
