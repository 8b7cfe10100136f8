//! The argv trie walk in the kernel: `guard_common::engine::argv` holds the walk's state and
//! every step of it (the readings of token 0, the token steps, the safe answer); this file reads
//! argv from the new image and drives those steps from `bpf_loop` callbacks over per-CPU map
//! memory, so the verifier checks each part once.

use core::ffi::c_void;

use aya_ebpf::helpers::bpf_probe_read_user_str_bytes;
use aya_ebpf::helpers::generated::bpf_loop;
use guard_common::engine::argv::{
    ArgvOutcome, BY_ARGV0, BY_IDENTITY, BY_NAME, NO_DASH, NO_LONG_TOKEN, Readings, SPLIT_ARGV0,
    SPLIT_NAME, WordMarks, mark_byte, set_long, set_token, short_word, str_len,
};
use guard_common::limits::{MAX_ARGV_TOKENS, NAME_LEN, TOKEN_LEN, TOKEN_MAX_LEN, TOKEN_SCAN_LEN};
use guard_common::maps::{ArgvEdge, ExecIdentity, LongToken, counter};

use crate::maps::{ARGV_ROOTS, ARGV_TRIE, EXEC_SCRATCH, LONG_TOKEN_IDS, count};

/// The walk's state, in the exec's per-CPU scratch: the `bpf_loop` callback steps it, and the
/// program reads it back after the loop (map memory, so every way out of the loop is one state
/// to the verifier).
#[repr(C)]
pub struct ArgvWalk {
    pub readings: Readings,
    /// 1 when argv[0] could not be read or stepped over: the readings took the rules below
    /// them, and nothing after it is compared.
    pub argv0_unread: u8,
    pub _pad: [u8; 3],
    /// The executed file, for the identity reading.
    pub identity: ExecIdentity,
    /// The scope the exec is decided in (set by the program before the walk): only its
    /// approvals count.
    pub scope: u64,
    /// Where argv starts, where the next token starts, where it ends.
    pub start: u64,
    pub pos: u64,
    pub end: u64,
    /// What [`walk_argv`] returns, written by its last callback.
    pub outcome: ArgvOutcome,
    /// Lengths and marks passed through map memory ([`opaque`]).
    pub opaque: [u64; 4],
    /// A long token's whole text, the key of `LONG_TOKEN_IDS`.
    pub long_key: LongToken,
    /// The trie key being looked up: in map memory, so that the bytes a token leaves in it
    /// are not part of the verifier's state (on the stack, each token length made one more).
    pub edge: ArgvEdge,
}

/// `value`, read back from map memory: to the verifier an unknown in its range rather than
/// the exact value of each path that computed it (a length found by a byte loop is one of 256
/// exact values otherwise, and everything after it would be verified once per value).
#[inline(always)]
fn opaque(slot: &mut u64, value: usize) -> usize {
    // SAFETY: a field of our per-CPU scratch.
    unsafe {
        core::ptr::write_volatile(slot, value as u64);
        core::ptr::read_volatile(slot) as usize
    }
}

/// Walks argv (`arg_start..arg_end` of the new image) for an exec of the file `identity`, whose
/// name is the scratch's `name`.
///
/// Each part runs as a `bpf_loop` callback (the set-up and the outcome as one iteration), and
/// the outcome is read back from the scratch: the verifier checks each part once, instead of
/// once per combination of the branches before it (inline, the readings took it past its
/// million instructions).
#[inline(always)]
pub fn walk_argv(identity: &ExecIdentity, arg_start: u64, arg_end: u64) -> ArgvOutcome {
    let unknown = ArgvOutcome::UNKNOWN;
    // No scratch: nothing can be compared (fails open for argv; identity, name and the
    // unmatched default still decide).
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return unknown;
    };
    // SAFETY: our per-CPU scratch, only this program on this CPU.
    let walk = unsafe { &mut (*scratch).argv };
    walk.identity = *identity;
    walk.start = arg_start;
    walk.pos = arg_start;
    walk.end = arg_end;
    walk.outcome = unknown;
    // SAFETY (each call): the callbacks find their state in the scratch; no context.
    unsafe {
        // Not run: no reading starts, so argv decides nothing (fails open for argv only;
        // a kernel without bpf_loop would not have loaded the program). Four callbacks, not
        // one: each one's branches end with it, so the verifier checks each part once rather
        // than once per way through the parts before it.
        let null = core::ptr::null_mut();
        if bpf_loop(1, start_name_readings as *mut c_void, null, 0) < 0
            || bpf_loop(1, split_name_reading as *mut c_void, null, 0) < 0
            || bpf_loop(1, start_argv0_reading as *mut c_void, null, 0) < 0
            || bpf_loop(1, split_argv0_reading as *mut c_void, null, 0) < 0
        {
            return unknown;
        }
        if bpf_loop(
            (MAX_ARGV_TOKENS - 1) as u32,
            walk_token as *mut c_void,
            core::ptr::null_mut(),
            0,
        ) < 0
        {
            // Nothing after argv[0] compared: the safe answer (fails closed).
            walk.readings.finished = 0;
            walk.pos = 0;
        }
        bpf_loop(1, finish_walk as *mut c_void, core::ptr::null_mut(), 0);
        core::ptr::read_volatile(&walk.outcome)
    }
}

/// The readings from the executed file: by its name and by its identity (`bpf_loop`
/// callback, one iteration, as the three after it).
#[inline(never)]
extern "C" fn start_name_readings(_index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: our per-CPU scratch, only this program on this CPU.
    let scratch = unsafe { &mut *scratch };
    let walk = &mut scratch.argv;
    walk.readings.reset();
    walk.argv0_unread = 0;

    walk.edge.parent = 0;
    let name_len = opaque(&mut walk.opaque[0], str_len(&scratch.name.name)) & (NAME_LEN * 2 - 1);
    set_token(&mut walk.edge, &scratch.name.name, 0, name_len);
    if name_len > TOKEN_LEN {
        // A long name: keyed by its id. The name buffer is NUL-padded, so its 64 bytes are
        // the whole key's start.
        clear_long_key(walk);
        walk.long_key.bytes[..NAME_LEN].copy_from_slice(&scratch.name.name);
        let id = long_token_id(walk);
        set_long(&mut walk.edge, id);
    }
    // SAFETY (every lookup): plain keys.
    let by_name = unsafe { ARGV_TRIE.get(&walk.edge) }.copied();
    walk.readings.start(BY_NAME, by_name);
    let by_identity = unsafe { ARGV_ROOTS.get(&walk.identity) }.copied();
    walk.readings.start(BY_IDENTITY, by_identity);
    1
}

/// The executed file's name read as `NAME SUB`.
#[inline(never)]
extern "C" fn split_name_reading(_index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: our per-CPU scratch, only this program on this CPU.
    let scratch = unsafe { &mut *scratch };
    let walk = &mut scratch.argv;
    // SAFETY: the name's length, as `start_name_readings` stored it.
    let name_len =
        unsafe { core::ptr::read_volatile(&walk.opaque[0]) } as usize & (NAME_LEN * 2 - 1);
    let name_marks = word_marks(WORD_NAME, name_len);
    let name_marks = WordMarks {
        base: opaque(&mut walk.opaque[1], name_marks.base),
        dash: opaque(&mut walk.opaque[2], name_marks.dash),
    };
    split_reading(walk, SPLIT_NAME, &scratch.name.name, name_marks, name_len);
    1
}

/// The reading by argv[0]'s last path component; argv[0]'s length and marks are left in
/// `opaque` for [`split_argv0_reading`].
#[inline(never)]
extern "C" fn start_argv0_reading(_index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: our per-CPU scratch, only this program on this CPU.
    let scratch = unsafe { &mut *scratch };
    let walk = &mut scratch.argv;
    // SAFETY: user memory of the new image into our scratch buffer.
    let argv0 =
        unsafe { bpf_probe_read_user_str_bytes(walk.start as *const u8, &mut scratch.scan) };
    let argv0_len = match argv0 {
        Ok(bytes) => bytes.len(),
        Err(_) => TOKEN_SCAN_LEN,
    };
    let argv0_len = opaque(&mut walk.opaque[3], argv0_len);
    if argv0_len >= TOKEN_SCAN_LEN - 1 {
        // argv unreadable, or argv[0] too long to step over: fails closed (each reading takes
        // the strongest rule below it; no approval).
        count(counter::ARGV_UNREADABLE);
        walk.readings.take_below();
        walk.argv0_unread = 1;
        return 1;
    }
    let argv0_marks = word_marks(WORD_SCAN, argv0_len);
    let base = opaque(&mut walk.opaque[1], argv0_marks.base);
    opaque(&mut walk.opaque[2], argv0_marks.dash);
    let base_len = argv0_len.saturating_sub(base);
    walk.edge.parent = 0;
    set_token(&mut walk.edge, &scratch.scan, base, base_len);
    // SAFETY: lookup with a plain key.
    let by_argv0 = unsafe { ARGV_TRIE.get(&walk.edge) }.copied();
    let by_argv0 = short_word(by_argv0, base_len);
    walk.readings.start(BY_ARGV0, by_argv0);
    1
}

/// argv[0] read as `NAME SUB`, repeated readings dropped, and argv[0] stepped over.
#[inline(never)]
extern "C" fn split_argv0_reading(_index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: our per-CPU scratch, only this program on this CPU.
    let scratch = unsafe { &mut *scratch };
    let walk = &mut scratch.argv;
    if walk.argv0_unread != 0 {
        // Cut short at argv[0] (see `start_argv0_reading`): nothing more starts.
        return 1;
    }
    // SAFETY (each read): what `start_argv0_reading` stored.
    let (argv0_len, marks) = unsafe {
        (
            core::ptr::read_volatile(&walk.opaque[3]) as usize,
            WordMarks {
                base: core::ptr::read_volatile(&walk.opaque[1]) as usize,
                dash: core::ptr::read_volatile(&walk.opaque[2]) as usize,
            },
        )
    };
    if argv0_len >= TOKEN_SCAN_LEN - 1 {
        // Checked by the part before; again here for the verifier (bounds the index).
        return 1;
    }
    split_reading(walk, SPLIT_ARGV0, &scratch.scan, marks, argv0_len);
    walk.readings.drop_repeats();
    walk.pos = walk.start + argv0_len as u64 + 1;
    1
}

/// After the token loop: cut-short readings take the rules below, then the outcome
/// (`bpf_loop` callback, one iteration).
#[inline(never)]
extern "C" fn finish_walk(_index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: our per-CPU scratch, only this program on this CPU.
    let walk = unsafe { &mut (*scratch).argv };
    // More tokens than the kernel compares (or the loop did not run): the rules below count
    // as matched.
    // An approval another scope was given is no approval here (fails closed).
    let scope = walk.scope;
    walk.outcome = walk.readings.finish(walk.pos, walk.end, |node| {
        crate::approvals::exec_approved(scope, node)
    });
    1
}

/// Reading `r`: the word (`NAME-SUB`, at `marks`) as the two tokens `NAME SUB`.
#[inline(always)]
fn split_reading<const N: usize>(
    walk: &mut ArgvWalk,
    r: usize,
    bytes: &[u8; N],
    marks: WordMarks,
    len: usize,
) {
    // No `-` after a non-empty NAME: no such reading (not a failure).
    let Some(((name_at, name_len), (sub_at, sub_len))) = marks.split(len) else {
        return;
    };
    walk.edge.parent = 0;
    set_token(&mut walk.edge, bytes, name_at, name_len);
    // SAFETY (both lookups): plain keys.
    let root = unsafe { ARGV_TRIE.get(&walk.edge) }.copied();
    let Some(root) = short_word(root, name_len) else {
        return;
    };
    walk.edge.parent = root.id;
    set_token(&mut walk.edge, bytes, sub_at, sub_len);
    let sub = unsafe { ARGV_TRIE.get(&walk.edge) }.copied();
    walk.readings.start_split(r, root, short_word(sub, sub_len));
}

/// One token of argv[1..] (`bpf_loop` callback): 0 to go on, 1 when the walk is over.
#[inline(never)]
extern "C" fn walk_token(_index: u64, _ctx: *mut c_void) -> i64 {
    // No scratch: cannot happen once the program ran this far; ends the walk.
    let Some(scratch) = EXEC_SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: our per-CPU scratch, only this program on this CPU.
    let scratch = unsafe { &mut *scratch };
    let walk = &mut scratch.argv;
    // argv ends (every token compared), or every reading has left the trie (or none started):
    // nothing more to compare (not a failure).
    if !walk.readings.wants_token(walk.pos, walk.end) {
        return 1;
    }
    // SAFETY: user memory of the new image into our scratch buffer.
    let len =
        match unsafe { bpf_probe_read_user_str_bytes(walk.pos as *const u8, &mut scratch.scan) } {
            Ok(bytes) => bytes.len(),
            Err(_) => {
                // Fails closed: the strongest rule below counts as matched.
                count(counter::ARGV_UNREADABLE);
                walk.readings.take_below();
                return 1;
            }
        };
    set_token(&mut walk.edge, &scratch.scan, 0, len);
    if len > TOKEN_LEN && len <= TOKEN_MAX_LEN {
        // A long token: its whole text, NUL-padded, names its id (read again into the zeroed
        // key: the scan buffer holds older bytes past this token's end).
        clear_long_key(walk);
        // SAFETY: user memory of the new image into our scratch key. Unreadable now: an id
        // no rule has (the walk leaves the trie here; it read this token a moment ago).
        let _ = unsafe {
            bpf_probe_read_user_str_bytes(walk.pos as *const u8, &mut walk.long_key.bytes)
        };
        let id = long_token_id(walk);
        set_long(&mut walk.edge, id);
    }
    let edge = &mut walk.edge;
    walk.readings.step(|parent| {
        edge.parent = parent;
        // SAFETY: lookup with a plain key.
        unsafe { ARGV_TRIE.get(&*edge) }.copied()
    });
    // A token too long to step over fails closed inside (the rules below count).
    if walk.readings.advance(&mut walk.pos, len, walk.end) {
        0
    } else {
        1
    }
}

/// The id `LONG_TOKEN_IDS` gives the token now in `walk.long_key` ([`NO_LONG_TOKEN`] when no
/// rule holds it: an edge nothing matches, so the walk leaves the trie there).
#[inline(always)]
fn long_token_id(walk: &ArgvWalk) -> u32 {
    // SAFETY: lookup with a plain key.
    unsafe { LONG_TOKEN_IDS.get(&walk.long_key) }
        .copied()
        .unwrap_or(NO_LONG_TOKEN)
}

/// Zeroes the long-token key (volatile stores, so no `memset` the BPF target lacks).
#[inline(always)]
fn clear_long_key(walk: &mut ArgvWalk) {
    let words = walk.long_key.bytes.as_mut_ptr().cast::<u64>();
    let mut i = 0;
    while i < TOKEN_SCAN_LEN / 8 {
        // SAFETY: within the 256-byte key, 8-byte aligned (the struct is).
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
        i += 1;
    }
}

/// The word is the scratch's `name` (the executed file's name).
const WORD_NAME: u32 = 0;
/// The word is the scratch's `scan` (argv[0]).
const WORD_SCAN: u32 = 1;

/// State of [`word_marks`]'s loop, on its stack.
#[repr(C)]
struct MarksState {
    word: u32,
    base: u32,
    dash: u32,
}

const NO_DASH_U32: u32 = u32::MAX;

/// Marks of the first `len` bytes of a word in the scratch (`bpf_loop`: a byte scan whose
/// result is an index, which the verifier could not prune if it unrolled it).
#[inline(always)]
fn word_marks(word: u32, len: usize) -> WordMarks {
    let mut state = MarksState {
        word,
        base: 0,
        dash: NO_DASH_U32,
    };
    let bound = if word == WORD_NAME {
        NAME_LEN
    } else {
        TOKEN_SCAN_LEN
    };
    let steps = if len > bound { bound } else { len };
    // SAFETY: `mark_byte` reads `state` as the `MarksState` it is, on this stack, for the call.
    let ran = unsafe {
        bpf_loop(
            steps as u32,
            mark_word_byte as *mut c_void,
            (&mut state as *mut MarksState).cast(),
            0,
        )
    };
    // Not scanned: no split, the whole word as its own name (argv[0] as given).
    if ran < 0 {
        return WordMarks {
            base: 0,
            dash: NO_DASH,
        };
    }
    WordMarks {
        base: state.base as usize,
        dash: if state.dash == NO_DASH_U32 {
            NO_DASH
        } else {
            state.dash as usize
        },
    }
}

#[inline(never)]
extern "C" fn mark_word_byte(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `word_marks` passes its `MarksState`, alive for the whole loop.
    let state = unsafe { &mut *ctx.cast::<MarksState>() };
    let Some(scratch) = EXEC_SCRATCH.get(0) else {
        return 1;
    };
    let byte = if state.word == WORD_NAME {
        scratch.name.name.get(index as usize).copied()
    } else {
        scratch.scan.get(index as usize).copied()
    };
    match byte {
        Some(byte) => mark_byte(&mut state.base, &mut state.dash, index as u32, byte),
        None => return 1,
    }
    0
}
