//! Exec decisions by pattern tables (`guard_common::dfa`): forbidden program regexes over the
//! executed file's name, forbidden substrings over argv, rule-set `exec(...)` globs over the
//! command line. Userspace compiles them to DFAs; here each table is walked one byte per step,
//! within [`DFA_MAX_INPUT`] bytes.
//!
//! The input is a program token, then argv after argv[0] with its NUL separators. The token is
//! read the ways the argv trie reads it (see `crate::argv`), and the exec gets the strongest
//! verdict of every reading: the executed file's name; argv[0]'s last path component, when the
//! caller chose another name (a multi-call program acts on it); and `NAME SUB` for either one
//! spelled `NAME-SUB` (git-style dispatch; the first `-` splits). A walk that cannot finish
//! (argv truncated or unreadable, past the step bound, a byte the table cannot judge) takes the
//! table's safe answer: the strongest verdict in it that is not an allow (fails closed).

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

/// Readings of the program token: the name, argv[0]'s last component, and each split.
pub const PATTERN_READINGS: usize = 4;
/// A [`Head`] in the exec scratch's name.
const HEAD_NAME: u32 = 0;
/// A [`Head`] in the exec scratch's pattern argv (argv[0]'s last component).
const HEAD_ARGV0: u32 = 1;
/// [`Head::split`] when no byte of the token is read as a separator.
const NO_SPLIT: u32 = u32::MAX;

/// Where one reading's program token lies: `len` bytes at `from` of the name ([`HEAD_NAME`])
/// or of the pattern argv ([`HEAD_ARGV0`]). Byte `split` of it (a `-`) is read as the NUL
/// between two tokens. Plain integers, for map memory (see [`PatternInput`]).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Head {
    /// 0: not a reading of this exec (none such, or the same as another).
    pub used: u32,
    pub source: u32,
    pub from: u32,
    pub len: u32,
    pub split: u32,
}

impl Head {
    /// The whole input's first `len` bytes as they are (a file's path; an exec's name).
    const fn whole(len: u32) -> Head {
        Head {
            used: 1,
            source: HEAD_NAME,
            from: 0,
            len,
            split: NO_SPLIT,
        }
    }
}

/// The exec's readings and what they decided, in the exec scratch: the `bpf_loop` callbacks
/// that find the readings and walk them read and write it there.
#[repr(C)]
pub struct PatternReadings {
    pub input: PatternInput,
    pub heads: [Head; PATTERN_READINGS],
    /// Where argv[0]'s last component starts, and the first `-` in it and in the name
    /// ([`NO_SPLIT`]: none).
    pub base: u32,
    pub argv0_dash: u32,
    pub name_dash: u32,
    /// 1 when argv[0]'s last component is not the name.
    pub differs: u32,
    pub verdict: Verdict,
}
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

/// The strongest verdict of the three tables under every reading of the program token (none
/// where no table is loaded). The readings are found by one `bpf_loop` over argv[0] and the
/// name, and the walks (reading × table) run as another, whose callback the verifier checks
/// once instead of twelve times.
#[inline(always)]
pub fn pattern_verdict(input: &PatternInput) -> Verdict {
    // The exec program took its scratch before calling: never missing here (fails open).
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return Verdict::NONE;
    };
    // SAFETY: our per-CPU scratch, only this program on this CPU.
    let readings = unsafe { &mut (*scratch).pattern_readings };
    readings.input = *input;
    readings.verdict = Verdict::NONE;
    find_readings(readings);
    // SAFETY: the callback takes its state from the scratch, not from the context pointer.
    let ok = unsafe {
        bpf_loop(
            (PATTERN_READINGS * EXEC_TABLES) as u32,
            walk_reading as *mut c_void,
            core::ptr::null_mut(),
            0,
        )
    };
    // SAFETY: as above; read back from map memory after the loop.
    let verdict = unsafe { core::ptr::read_volatile(&(*scratch).pattern_readings.verdict) };
    // The loop did not run (no bpf_loop: the program would not have loaded): the safe answer
    // of each table, as a walk that cannot run takes.
    if ok < 0 {
        return [table::PROGRAM_NAME, table::ARGV, table::COMMAND_LINE]
            .iter()
            .fold(Verdict::NONE, |kept, &t| kept.strongest(safe_verdict(t)));
    }
    verdict
}

/// The exec tables, walked for each reading.
const EXEC_TABLES: usize = 3;

/// Table `i` of the exec tables.
#[inline(always)]
fn exec_table(i: u64) -> u32 {
    match i {
        0 => table::PROGRAM_NAME,
        1 => table::ARGV,
        _ => table::COMMAND_LINE,
    }
}

/// The safe answer of `table` (none when it holds nothing).
#[inline(always)]
fn safe_verdict(table: u32) -> Verdict {
    match table_header(table) {
        Some((_, header)) if !header.is_empty() => Outcome::Bound.verdict(header),
        _ => Verdict::NONE,
    }
}

/// Fills `readings.heads` (see the module docs): scans argv[0] for its last component and the
/// first `-` in it, the name for its first `-`, then compares the component with the name.
#[inline(always)]
fn find_readings(readings: &mut PatternReadings) {
    let input = readings.input;
    readings.base = 0;
    readings.argv0_dash = NO_SPLIT;
    readings.name_dash = NO_SPLIT;
    readings.differs = 0;
    let argv0_len = if input.args_from == NO_ARGS {
        0
    } else {
        input.args_from
    };
    // SAFETY (both loops): the callbacks take their state from the scratch.
    unsafe {
        bpf_loop(
            argv0_len.max(input.name_len),
            scan_byte as *mut c_void,
            core::ptr::null_mut(),
            0,
        )
    };
    // What the callbacks wrote, read back as map memory (volatile: the compiler cannot see
    // bpf_loop's callbacks write it, and would reuse the values stored before the loop).
    let scanned = |field: &u32| unsafe { core::ptr::read_volatile(field) };
    let base = scanned(&readings.base).min(argv0_len);
    let base_len = argv0_len - base;
    readings.differs = u32::from(base_len != input.name_len);
    if readings.differs == 0 {
        unsafe {
            bpf_loop(
                input.name_len,
                compare_byte as *mut c_void,
                core::ptr::null_mut(),
                0,
            )
        };
    }
    // A split needs a NAME and a SUB: a `-` neither first nor last (as the argv trie reads it).
    let split_at = |dash: u32, len: u32| dash != NO_SPLIT && dash > 0 && dash + 1 < len;
    let by_argv0 = argv0_len > 0 && base_len > 0 && scanned(&readings.differs) != 0;
    let (name_dash, argv0_dash) = (scanned(&readings.name_dash), scanned(&readings.argv0_dash));
    let name = Head::whole(input.name_len);
    let argv0 = Head {
        used: u32::from(by_argv0),
        source: HEAD_ARGV0,
        from: base,
        len: base_len,
        split: NO_SPLIT,
    };
    let argv0_split = argv0_dash.saturating_sub(base);
    readings.heads = [
        name,
        argv0,
        Head {
            used: u32::from(split_at(name_dash, input.name_len)),
            split: name_dash,
            ..name
        },
        Head {
            used: u32::from(by_argv0 && argv0_dash != NO_SPLIT && split_at(argv0_split, base_len)),
            split: argv0_split,
            ..argv0
        },
    ];
}

/// Byte `index` of argv[0] and of the name (`bpf_loop` callback): tracks argv[0]'s last `/`
/// and first `-` after it, and the name's first `-`.
#[inline(never)]
extern "C" fn scan_byte(index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: our per-CPU scratch.
    let scratch = unsafe { &mut *scratch };
    let i = index as usize;
    let readings = &mut scratch.pattern_readings;
    let args_from = readings.input.args_from;
    if args_from != NO_ARGS && index < args_from as u64 {
        match scratch.pattern_argv.get(i) {
            Some(b'/') => {
                readings.base = i as u32 + 1;
                readings.argv0_dash = NO_SPLIT;
            }
            Some(b'-') if readings.argv0_dash == NO_SPLIT => readings.argv0_dash = i as u32,
            _ => {}
        }
    }
    if index < readings.input.name_len as u64
        && readings.name_dash == NO_SPLIT
        && scratch.name.name.get(i) == Some(&b'-')
    {
        readings.name_dash = i as u32;
    }
    0
}

/// Byte `index` of the name against argv[0]'s last component (`bpf_loop` callback): sets
/// `differs` and stops at the first difference.
#[inline(never)]
extern "C" fn compare_byte(index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: our per-CPU scratch.
    let scratch = unsafe { &mut *scratch };
    let i = index as usize;
    let at = scratch.pattern_readings.base as usize + i;
    if scratch.name.name.get(i) != scratch.pattern_argv.get(at) {
        scratch.pattern_readings.differs = 1;
        return 1;
    }
    0
}

/// One (reading, table) walk (`bpf_loop` callback): reading `index / 3`, exec table
/// `index % 3`, its verdict kept if stronger.
#[inline(never)]
extern "C" fn walk_reading(index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: our per-CPU scratch; re-read after the walk, which only reads it.
    let (head, input) = unsafe {
        let readings = &(*scratch).pattern_readings;
        let Some(head) = readings.heads.get((index / EXEC_TABLES as u64) as usize) else {
            return 1;
        };
        (*head, readings.input)
    };
    if head.used == 0 {
        return 0;
    }
    let verdict = walk_table(exec_table(index % EXEC_TABLES as u64), &input, &head);
    // SAFETY: as above.
    unsafe {
        let readings = &mut (*scratch).pattern_readings;
        readings.verdict = readings.verdict.strongest(verdict);
    }
    0
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

/// The verdict of one table for `input` as it is (a file's path; none when the table holds
/// nothing).
#[inline(always)]
pub fn table_verdict(table: u32, input: &PatternInput) -> Verdict {
    walk_table(table, input, &Head::whole(input.name_len))
}

#[inline(always)]
fn walk_table(table: u32, input: &PatternInput, head: &Head) -> Verdict {
    // No slot or header: the maps hold no table yet (fails open, as before any policy).
    let Some((slot, header)) = table_header(table) else {
        return Verdict::NONE;
    };
    // No pattern of this kind in the policy (not a failure).
    if header.is_empty() {
        return Verdict::NONE;
    }
    walk(table, slot, header, input, head).verdict(header)
}

/// A walk's state, shared with [`walk_byte`] through `bpf_loop`.
#[repr(C)]
struct WalkState {
    source: u32,
    table: u32,
    slot: u32,
    /// The program token (the whole path, for a file), as [`Head`] says.
    head_source: u32,
    head_from: u32,
    head_len: u32,
    split: u32,
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
fn walk(table: u32, slot: u32, header: &DfaHeader, input: &PatternInput, head: &Head) -> Outcome {
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
    // The program-name table reads the program alone: NAME of a split reading.
    let (head_len, split) = if name_only && head.split != NO_SPLIT {
        (head.split, NO_SPLIT)
    } else {
        (head.len, head.split)
    };
    let total = head_len + args_len;
    let mut state = WalkState {
        source: input.source,
        table,
        slot,
        head_source: head.source,
        head_from: head.from,
        head_len,
        split,
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
                Some(row) => state.walk.finish(row),
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
    let head_len = state.head_len as usize;
    if index < head_len {
        if index == state.split as usize {
            Some(0)
        } else if state.head_source == HEAD_ARGV0 {
            scratch
                .pattern_argv
                .get(state.head_from as usize + index)
                .copied()
        } else {
            scratch.name.name.get(index).copied()
        }
    } else {
        scratch
            .pattern_argv
            .get(state.args_from as usize + (index - head_len))
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
