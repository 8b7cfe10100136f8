//! The argv trie walk, under every reading of token 0 a program could act on.
//!
//! A multi-call program chooses what to do from `argv[0]` (`exec -a git-push git origin main`
//! pushes), a hard link under another name is the same program, and git-style dispatchers read
//! `NAME-SUB` as `NAME SUB`. So token 0 is read up to five ways, each a start node in the trie:
//!
//! 0. the executed file's name;
//! 1. the executed file's identity (`ARGV_ROOTS`: the program whose files it is, however named);
//! 2. `argv[0]`'s last path component, when the caller chose another name;
//! 3. and 4. `NAME SUB` for readings 0 and 2 spelled `NAME-SUB` (the first `-` splits).
//!
//! argv[1..] is then read once, token by token (`bpf_loop`, so the verifier checks one step),
//! and every reading still in the trie steps with it. The exec is decided by the strongest
//! reading; an approval holds only if every reading that prompts ended exactly at it.
//!
//! Where a walk cannot go on (argv unreadable, a token too long to step over, more tokens than
//! the bound) each reading still in the trie takes the strongest rule below it: the safe answer.

use core::ffi::c_void;

use aya_ebpf::helpers::bpf_probe_read_user_str_bytes;
use aya_ebpf::helpers::generated::bpf_loop;
use guard_common::Decision;
use guard_common::limits::{
    MAX_ARGV_TOKENS, NAME_LEN, TOKEN_BY_ID, TOKEN_LEN, TOKEN_MAX_LEN, TOKEN_SCAN_LEN,
    TOKEN_TOO_LONG,
};
use guard_common::maps::{ArgvEdge, ArgvNode, ExecIdentity, LongToken, Verdict, counter};

use crate::maps::{ARGV_ROOTS, ARGV_TRIE, EXEC_SCRATCH, LONG_TOKEN_IDS, count};

/// Readings of token 0 (see the module docs).
pub const READINGS: usize = 5;
const BY_NAME: usize = 0;
const BY_IDENTITY: usize = 1;
const BY_ARGV0: usize = 2;
const SPLIT_NAME: usize = 3;
const SPLIT_ARGV0: usize = 4;

/// [`ArgvWalk::state`]: not a reading of this exec (no start node, or the same as another's).
const UNUSED: u8 = 0;
/// Still in the trie: steps with the next token.
const FOLLOWING: u8 = 1;
/// Left the trie, or cut short: its verdict is final.
const ENDED: u8 = 2;

/// The walk's state, in the exec's per-CPU scratch: the `bpf_loop` callback steps it, and the
/// program reads it back after the loop (map memory, so every way out of the loop is one state
/// to the verifier).
#[repr(C)]
pub struct ArgvWalk {
    pub node: [ArgvNode; READINGS],
    pub verdict: [Verdict; READINGS],
    pub state: [u8; READINGS],
    /// 1 once argv ended with the readings still following at its last token (every token
    /// compared, so an approval there is exact).
    pub finished: u8,
    /// 1 when argv[0] could not be read or stepped over: the readings took the rules below
    /// them, and nothing after it is compared.
    pub argv0_unread: u8,
    pub _pad: [u8; 1],
    /// The executed file, for the identity reading.
    pub identity: ExecIdentity,
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

/// What the walk decided: the strongest reading, and whether a `prompt` there is an approved
/// retry of exactly this argv.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ArgvOutcome {
    pub verdict: Verdict,
    /// 1: approved (plain integer: stored in map memory).
    pub approved: u32,
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
    let unknown = ArgvOutcome {
        verdict: Verdict::NONE,
        approved: 0,
    };
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
            walk.finished = 0;
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
    walk.state = [UNUSED; READINGS];
    walk.finished = 0;
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
    start(walk, BY_NAME, by_name);
    let by_identity = unsafe { ARGV_ROOTS.get(&walk.identity) }.copied();
    start(walk, BY_IDENTITY, by_identity);
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
        take_below(walk);
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
    start(walk, BY_ARGV0, by_argv0);
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
    drop_repeats(walk);
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
    if walk.finished == 0 && walk.pos < walk.end {
        take_below(walk);
    }
    walk.outcome = outcome(walk);
    1
}

/// Starts reading `r` at `node`, if there is one.
#[inline(always)]
fn start(walk: &mut ArgvWalk, r: usize, node: Option<ArgvNode>) {
    if let Some(node) = node {
        walk.node[r] = node;
        walk.verdict[r] = node.here;
        walk.state[r] = FOLLOWING;
    }
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
    if marks.dash == NO_DASH || marks.dash <= marks.base || marks.dash + 1 >= len {
        return;
    }
    walk.edge.parent = 0;
    set_token(&mut walk.edge, bytes, marks.base, marks.dash - marks.base);
    // SAFETY (both lookups): plain keys.
    let root = unsafe { ARGV_TRIE.get(&walk.edge) }.copied();
    let Some(root) = short_word(root, marks.dash - marks.base) else {
        return;
    };
    walk.edge.parent = root.id;
    let sub_len = len - marks.dash - 1;
    set_token(&mut walk.edge, bytes, marks.dash + 1, sub_len);
    let sub = unsafe { ARGV_TRIE.get(&walk.edge) }.copied();
    match short_word(sub, sub_len) {
        Some(sub) => {
            walk.node[r] = sub;
            walk.verdict[r] = root.here.strongest(sub.here);
            walk.state[r] = FOLLOWING;
        }
        // `NAME` has rules, none for `SUB`: only NAME's own (the reading ends there).
        None => {
            walk.node[r] = root;
            walk.verdict[r] = root.here;
            walk.state[r] = ENDED;
        }
    }
}

/// A reading that starts where an earlier one does adds nothing (and would be walked twice).
#[inline(always)]
fn drop_repeats(walk: &mut ArgvWalk) {
    let mut r = 1;
    while r < READINGS {
        let mut earlier = 0;
        while earlier < r {
            if walk.state[r] == FOLLOWING
                && walk.state[earlier] == FOLLOWING
                && walk.node[r].id == walk.node[earlier].id
            {
                walk.state[r] = UNUSED;
            }
            earlier += 1;
        }
        r += 1;
    }
}

#[inline(always)]
fn any_following(walk: &ArgvWalk) -> bool {
    walk.state.iter().any(|&s| s == FOLLOWING)
}

/// Cut short: every reading still in the trie takes the strongest rule below it.
#[inline(always)]
fn take_below(walk: &mut ArgvWalk) {
    let mut r = 0;
    while r < READINGS {
        if walk.state[r] == FOLLOWING {
            walk.verdict[r] = walk.verdict[r].strongest(walk.node[r].below);
            walk.state[r] = ENDED;
        }
        r += 1;
    }
}

#[inline(always)]
fn outcome(walk: &ArgvWalk) -> ArgvOutcome {
    let mut verdict = Verdict::NONE;
    let mut r = 0;
    while r < READINGS {
        if walk.state[r] != UNUSED {
            verdict = verdict.strongest(walk.verdict[r]);
        }
        r += 1;
    }
    // An approval is exact: some reading followed every token to an approved node, and each
    // reading that prompts did. Anything cut short, or a reading that prompts elsewhere, is not
    // approved (fails closed). The prompt it approves may come from the walk, a name or
    // identity rule, or the unmatched default: the caller checks the final decision.
    let mut any_exact = false;
    let mut all_prompts_exact = true;
    let mut r = 0;
    while r < READINGS {
        if walk.state[r] != UNUSED {
            let exact =
                walk.finished != 0 && walk.state[r] == FOLLOWING && walk.node[r].here.approved();
            any_exact |= exact;
            if walk.verdict[r].decision == Decision::Prompt as u8 && !exact {
                all_prompts_exact = false;
            }
        }
        r += 1;
    }
    let approved = any_exact && all_prompts_exact;
    ArgvOutcome {
        verdict,
        approved: u32::from(approved),
    }
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
    if walk.pos >= walk.end {
        // argv ends: every token compared (not a failure).
        walk.finished = 1;
        return 1;
    }
    // Every reading has left the trie (or none started): nothing more to compare.
    if !any_following(walk) {
        return 1;
    }
    // SAFETY: user memory of the new image into our scratch buffer.
    let len =
        match unsafe { bpf_probe_read_user_str_bytes(walk.pos as *const u8, &mut scratch.scan) } {
            Ok(bytes) => bytes.len(),
            Err(_) => {
                // Fails closed: the strongest rule below counts as matched.
                count(counter::ARGV_UNREADABLE);
                take_below(walk);
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
    let mut r = 0;
    while r < READINGS {
        if walk.state[r] == FOLLOWING {
            walk.edge.parent = walk.node[r].id;
            // SAFETY: lookup with a plain key.
            match unsafe { ARGV_TRIE.get(&walk.edge) }.copied() {
                Some(next) => {
                    walk.node[r] = next;
                    walk.verdict[r] = walk.verdict[r].strongest(next.here);
                }
                // No rule continues with this token: the rules passed decide (not a failure).
                None => walk.state[r] = ENDED,
            }
        }
        r += 1;
    }
    if len >= TOKEN_SCAN_LEN - 1 {
        // Too long to find where the next token starts: fails closed (below counts).
        take_below(walk);
        return 1;
    }
    walk.pos += len as u64 + 1;
    if !any_following(walk) {
        return 1;
    }
    if walk.pos >= walk.end {
        walk.finished = 1;
        return 1;
    }
    0
}

/// `node` for a reading that starts at a word of `argv[0]` (its name, or a `NAME-SUB` part):
/// such a word longer than a trie key holds is not read (no reading from it, which adds no
/// allow; the file's own name and identity still read exactly).
#[inline(always)]
fn short_word(node: Option<ArgvNode>, len: usize) -> Option<ArgvNode> {
    if len > TOKEN_LEN { None } else { node }
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

/// No rule's long token.
const NO_LONG_TOKEN: u32 = u32::MAX;

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

/// Keys `edge` by a long token's id.
#[inline(always)]
fn set_long(edge: &mut ArgvEdge, id: u32) {
    let bytes = id.to_le_bytes();
    let mut i = 0;
    while i < TOKEN_LEN {
        edge.token[i] = if i < 4 { bytes[i] } else { 0 };
        i += 1;
    }
    edge.len = TOKEN_BY_ID;
}

/// Where a word's last path component starts, and its first `-` after that.
#[derive(Clone, Copy)]
struct WordMarks {
    base: usize,
    dash: usize,
}

const NO_DASH: usize = usize::MAX;
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
            mark_byte as *mut c_void,
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
extern "C" fn mark_byte(index: u64, ctx: *mut c_void) -> i64 {
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
        Some(b'/') => {
            state.base = index as u32 + 1;
            state.dash = NO_DASH_U32;
        }
        Some(b'-') if state.dash == NO_DASH_U32 => state.dash = index as u32,
        Some(_) => {}
        None => return 1,
    }
    0
}

#[inline(always)]
pub fn str_len(bytes: &[u8; NAME_LEN]) -> usize {
    let mut i = 0;
    while i < NAME_LEN {
        if bytes[i] == 0 {
            return i;
        }
        i += 1;
    }
    NAME_LEN
}

/// Puts the `len`-byte token at `bytes[from..]` in the edge key: its first `TOKEN_LEN` bytes,
/// zero-padded, and its length (or `TOKEN_TOO_LONG`); [`tail_matches`] compares the rest.
///
/// Branch-free over `len` (a byte is kept by an arithmetic mask, not an `if`): a branch per
/// byte would give the verifier one state per token length, and everything after it would be
/// verified that many times. Callers keep `from + len` within the word, so the index mask (`N`
/// is a power of two) changes nothing; it is there for the verifier.
#[inline(always)]
fn set_token<const N: usize>(edge: &mut ArgvEdge, bytes: &[u8; N], from: usize, len: usize) {
    let mut i = 0;
    while i < TOKEN_LEN {
        // All ones while i < len, else zero: the sign of i - len.
        let keep = ((i as i64).wrapping_sub(len as i64) >> 63) as u8;
        edge.token[i] = bytes[(from + i) & (N - 1)] & keep;
        i += 1;
    }
    edge.len = if len > TOKEN_MAX_LEN {
        TOKEN_TOO_LONG
    } else {
        len as u8
    };
}
