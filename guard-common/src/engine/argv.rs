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
//! argv[1..] is then read once, token by token, and every reading still in the trie steps with
//! it. The exec is decided by the strongest reading; an approval holds only if every reading
//! that prompts ended exactly at it. Where a walk cannot go on (argv unreadable, a token too
//! long to step over, more tokens than [`MAX_ARGV_TOKENS`]) each reading still in the trie
//! takes the strongest rule below it: the safe answer.
//!
//! [`Readings`] is the walk's state and every step of it; the kernel drives it from
//! `bpf_loop` callbacks over map memory (`guard-ebpf`'s `argv`), [`walk`] drives it over
//! in-memory tables. The trie keys are built by the same functions on both sides
//! ([`set_token`], [`set_long`]).

use crate::decision::Decision;
use crate::limits::{
    MAX_ARGV_TOKENS, NAME_LEN, TOKEN_BY_ID, TOKEN_LEN, TOKEN_MAX_LEN, TOKEN_SCAN_LEN,
    TOKEN_TOO_LONG,
};
use crate::maps::{ArgvEdge, ArgvNode, ExecIdentity, ExecName, LongToken, Verdict};

/// Readings of token 0 (see the module docs).
pub const READINGS: usize = 5;
pub const BY_NAME: usize = 0;
pub const BY_IDENTITY: usize = 1;
pub const BY_ARGV0: usize = 2;
pub const SPLIT_NAME: usize = 3;
pub const SPLIT_ARGV0: usize = 4;

/// [`Readings::state`]: not a reading of this exec (no start node, or the same as another's).
pub const UNUSED: u8 = 0;
/// Still in the trie: steps with the next token.
pub const FOLLOWING: u8 = 1;
/// Left the trie, or cut short: its verdict is final.
pub const ENDED: u8 = 2;

/// What the walk decided: the strongest reading, and whether a `prompt` there is an approved
/// retry of exactly this argv.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgvOutcome {
    pub verdict: Verdict,
    /// 1: approved (plain integer: the kernel stores it in map memory).
    pub approved: u32,
}

impl ArgvOutcome {
    /// Nothing compared: argv decides nothing.
    pub const UNKNOWN: ArgvOutcome = ArgvOutcome {
        verdict: Verdict::NONE,
        approved: 0,
    };
}

/// The state of the readings: where each is in the trie and what it has matched so far.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Readings {
    pub node: [ArgvNode; READINGS],
    pub verdict: [Verdict; READINGS],
    pub state: [u8; READINGS],
    /// 1 once argv ended with the readings still following at its last token (every token
    /// compared, so an approval there is exact).
    pub finished: u8,
    pub _pad: [u8; 2],
}

impl Readings {
    /// No reading started.
    #[inline(always)]
    pub fn reset(&mut self) {
        self.state = [UNUSED; READINGS];
        self.finished = 0;
    }

    /// Starts reading `r` at `node`, if there is one.
    #[inline(always)]
    pub fn start(&mut self, r: usize, node: Option<ArgvNode>) {
        if let Some(node) = node {
            self.node[r] = node;
            self.verdict[r] = node.here;
            self.state[r] = FOLLOWING;
        }
    }

    /// Starts reading `r` at the word `NAME-SUB` read as `NAME SUB`: `root` is NAME's node and
    /// `sub` SUB's below it. Only rules of NAME SUB and longer decide here, never NAME's own
    /// (a one-token rule for `ssh` is not one for `ssh-keygen`); with no node for SUB, the
    /// reading decides nothing.
    #[inline(always)]
    pub fn start_split(&mut self, r: usize, root: ArgvNode, sub: Option<ArgvNode>) {
        match sub {
            Some(sub) => {
                self.node[r] = sub;
                self.verdict[r] = sub.here;
                self.state[r] = FOLLOWING;
            }
            None => {
                self.node[r] = root;
                self.verdict[r] = Verdict::NONE;
                self.state[r] = ENDED;
            }
        }
    }

    /// A reading that starts where an earlier one does adds nothing (and would be walked twice).
    #[inline(always)]
    pub fn drop_repeats(&mut self) {
        let mut r = 1;
        while r < READINGS {
            let mut earlier = 0;
            while earlier < r {
                if self.state[r] == FOLLOWING
                    && self.state[earlier] == FOLLOWING
                    && self.node[r].id == self.node[earlier].id
                {
                    self.state[r] = UNUSED;
                }
                earlier += 1;
            }
            r += 1;
        }
    }

    // Not `contains`: on a byte slice it may call `memchr`, which the BPF target lacks.
    #[allow(clippy::manual_contains)]
    #[inline(always)]
    pub fn any_following(&self) -> bool {
        self.state.iter().any(|&s| s == FOLLOWING)
    }

    /// Cut short: every reading still in the trie takes the strongest rule below it.
    #[inline(always)]
    pub fn take_below(&mut self) {
        let mut r = 0;
        while r < READINGS {
            if self.state[r] == FOLLOWING {
                self.verdict[r] = self.verdict[r].strongest(self.node[r].below);
                self.state[r] = ENDED;
            }
            r += 1;
        }
    }

    /// Before a token at `pos` (argv ends at `end`): whether to read it. At the end of argv
    /// every token was compared (not a failure).
    #[inline(always)]
    pub fn wants_token(&mut self, pos: u64, end: u64) -> bool {
        if pos >= end {
            self.finished = 1;
            return false;
        }
        self.any_following()
    }

    /// Steps every reading still in the trie over one token: `child(parent)` looks up the
    /// token's edge from node `parent`. No edge: the rules passed decide (not a failure).
    #[inline(always)]
    pub fn step(&mut self, mut child: impl FnMut(u32) -> Option<ArgvNode>) {
        let mut r = 0;
        while r < READINGS {
            if self.state[r] == FOLLOWING {
                match child(self.node[r].id) {
                    Some(next) => {
                        self.node[r] = next;
                        self.verdict[r] = self.verdict[r].strongest(next.here);
                    }
                    None => self.state[r] = ENDED,
                }
            }
            r += 1;
        }
    }

    /// After stepping over a token of `len` bytes at `*pos`: moves `*pos` to the next one;
    /// whether to go on. A token too long to find where the next starts fails closed (the
    /// rules below count).
    #[inline(always)]
    pub fn advance(&mut self, pos: &mut u64, len: usize, end: u64) -> bool {
        if len >= TOKEN_SCAN_LEN - 1 {
            self.take_below();
            return false;
        }
        *pos += len as u64 + 1;
        if !self.any_following() {
            return false;
        }
        if *pos >= end {
            self.finished = 1;
            return false;
        }
        true
    }

    /// After the token loop (stopped at `pos`): readings cut short by the bound take the
    /// rules below, and the outcome. `held_here(node)`: whether the caller's scope was given
    /// the approval that trie node `node` is marked with (asked only of marked nodes).
    #[inline(always)]
    pub fn finish(&mut self, pos: u64, end: u64, held_here: impl Fn(u32) -> bool) -> ArgvOutcome {
        if self.finished == 0 && pos < end {
            self.take_below();
        }
        self.outcome(held_here)
    }

    #[inline(always)]
    fn outcome(&self, held_here: impl Fn(u32) -> bool) -> ArgvOutcome {
        let mut verdict = Verdict::NONE;
        let mut r = 0;
        while r < READINGS {
            if self.state[r] != UNUSED {
                verdict = verdict.strongest(self.verdict[r]);
            }
            r += 1;
        }
        // An approval is exact: some reading followed every token to a node approved for the
        // caller's scope, and each reading that prompts did. Anything cut short, a reading that
        // prompts elsewhere, or another scope's approval, is not approved (fails closed). The
        // prompt it approves may come from the walk, a name or identity rule, or the unmatched
        // default: the caller checks the final decision.
        let mut any_exact = false;
        let mut all_prompts_exact = true;
        let mut r = 0;
        while r < READINGS {
            if self.state[r] != UNUSED {
                let exact = self.finished != 0
                    && self.state[r] == FOLLOWING
                    && self.node[r].here.approved()
                    && held_here(self.node[r].id);
                any_exact |= exact;
                if self.verdict[r].decision == Decision::Prompt as u8 && !exact {
                    all_prompts_exact = false;
                }
            }
            r += 1;
        }
        ArgvOutcome {
            verdict,
            approved: u32::from(any_exact && all_prompts_exact),
        }
    }
}

/// Where a word's last path component starts, and its first `-` after that ([`NO_DASH`]:
/// none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WordMarks {
    pub base: usize,
    pub dash: usize,
}

pub const NO_DASH: usize = usize::MAX;

/// One byte of a word's scan for its [`WordMarks`] (`u32::MAX` for no dash): a `/` starts the
/// last component again.
#[inline(always)]
pub fn mark_byte(base: &mut u32, dash: &mut u32, index: u32, byte: u8) {
    match byte {
        b'/' => {
            *base = index + 1;
            *dash = u32::MAX;
        }
        b'-' if *dash == u32::MAX => *dash = index,
        _ => {}
    }
}

impl WordMarks {
    /// The marks of `word`'s first `len` bytes.
    pub fn of(word: &[u8], len: usize) -> WordMarks {
        let (mut base, mut dash) = (0, u32::MAX);
        for (index, &byte) in word.iter().take(len).enumerate() {
            mark_byte(&mut base, &mut dash, index as u32, byte);
        }
        WordMarks {
            base: base as usize,
            dash: if dash == u32::MAX {
                NO_DASH
            } else {
                dash as usize
            },
        }
    }

    /// The `NAME-SUB` split of a `len`-byte word: NAME's and SUB's (start, length), or `None`
    /// with no `-` after a non-empty NAME (no such reading, not a failure).
    #[inline(always)]
    pub fn split(&self, len: usize) -> Option<((usize, usize), (usize, usize))> {
        if self.dash == NO_DASH || self.dash <= self.base || self.dash + 1 >= len {
            return None;
        }
        Some((
            (self.base, self.dash - self.base),
            (self.dash + 1, len - self.dash - 1),
        ))
    }
}

/// `node` for a reading that starts at a word of `argv[0]` (its name, or a `NAME-SUB` part):
/// such a word longer than a trie key holds is not read (no reading from it, which adds no
/// allow; the file's own name and identity still read exactly).
#[inline(always)]
pub fn short_word(node: Option<ArgvNode>, len: usize) -> Option<ArgvNode> {
    if len > TOKEN_LEN { None } else { node }
}

/// The id of no rule's long token: an edge nothing matches, so the walk leaves the trie there.
pub const NO_LONG_TOKEN: u32 = u32::MAX;

/// Keys `edge` by a long token's id.
#[inline(always)]
pub fn set_long(edge: &mut ArgvEdge, id: u32) {
    let bytes = id.to_le_bytes();
    let mut i = 0;
    while i < TOKEN_LEN {
        edge.token[i] = if i < 4 { bytes[i] } else { 0 };
        i += 1;
    }
    edge.len = TOKEN_BY_ID;
}

/// Puts the `len`-byte token at `bytes[from..]` in the edge key: its first `TOKEN_LEN` bytes,
/// zero-padded, and its length (or `TOKEN_TOO_LONG`); a token longer than `TOKEN_LEN` is then
/// keyed by its id ([`set_long`]).
///
/// Branch-free over `len` (a byte is kept by an arithmetic mask, not an `if`): a branch per
/// byte would give the verifier one state per token length, and everything after it would be
/// verified that many times. Callers keep `from + len` within the word, so the index mask (`N`
/// is a power of two) changes nothing; it is there for the verifier.
#[inline(always)]
pub fn set_token<const N: usize>(edge: &mut ArgvEdge, bytes: &[u8; N], from: usize, len: usize) {
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

/// The length of a NUL-padded name.
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

/// The argv trie as a walk reads it.
pub trait ArgvTables {
    /// `ARGV_TRIE`: the node an edge leads to.
    fn child(&self, edge: &ArgvEdge) -> Option<ArgvNode>;
    /// `ARGV_ROOTS`: the start node of the program whose file this is.
    fn root(&self, identity: &ExecIdentity) -> Option<ArgvNode>;
    /// `LONG_TOKEN_IDS`: a long token's id.
    fn long_token_id(&self, token: &LongToken) -> Option<u32>;
}

/// Walks `argv` (the new image's argv area: NUL-terminated tokens, as the kernel reads it
/// between `arg_start` and `arg_end`) for an exec of the file `identity` named `name`: the
/// walk the exec program makes, step for step.
pub fn walk<T: ArgvTables>(
    tables: &T,
    identity: &ExecIdentity,
    name: &ExecName,
    argv: &[u8],
    held_here: impl Fn(u32) -> bool,
) -> ArgvOutcome {
    let mut readings = Readings {
        node: [ArgvNode {
            id: 0,
            here: Verdict::NONE,
            below: Verdict::NONE,
        }; READINGS],
        verdict: [Verdict::NONE; READINGS],
        state: [UNUSED; READINGS],
        finished: 0,
        _pad: [0; 2],
    };
    let mut edge = ArgvEdge::new(0, b"");
    let long_id = |token: &[u8]| {
        LongToken::new(token)
            .and_then(|key| tables.long_token_id(&key))
            .unwrap_or(NO_LONG_TOKEN)
    };
    let key = |edge: &mut ArgvEdge, bytes: &[u8], from: usize, len: usize| {
        let mut word = [0u8; TOKEN_SCAN_LEN];
        let kept = bytes.len().min(TOKEN_SCAN_LEN);
        word[..kept].copy_from_slice(&bytes[..kept]);
        set_token(edge, &word, from, len);
        if len > TOKEN_LEN && len <= TOKEN_MAX_LEN {
            set_long(edge, long_id(&word[from..from + len]));
        }
    };
    let split = |readings: &mut Readings, r: usize, word: &[u8], len: usize| {
        let Some(((name_at, name_len), (sub_at, sub_len))) = WordMarks::of(word, len).split(len)
        else {
            return;
        };
        let mut edge = ArgvEdge::new(0, b"");
        key(&mut edge, word, name_at, name_len);
        let Some(root) = short_word(tables.child(&edge), name_len) else {
            return;
        };
        edge.parent = root.id;
        key(&mut edge, word, sub_at, sub_len);
        readings.start_split(r, root, short_word(tables.child(&edge), sub_len));
    };

    // Token 0 by the file: its name and its identity, and the name split.
    let name_len = str_len(&name.name);
    key(&mut edge, &name.name, 0, name_len);
    readings.start(BY_NAME, tables.child(&edge));
    readings.start(BY_IDENTITY, tables.root(identity));
    split(&mut readings, SPLIT_NAME, &name.name, name_len);

    // Token 0 by argv[0]: unreadable (none) or too long to step over fails closed.
    let end = argv.len() as u64;
    let Some(argv0) = read_token(argv, 0) else {
        readings.take_below();
        return readings.finish(0, end, held_here);
    };
    if argv0.len() >= TOKEN_SCAN_LEN - 1 {
        readings.take_below();
        return readings.finish(0, end, held_here);
    }
    let marks = WordMarks::of(argv0, argv0.len());
    let base_len = argv0.len().saturating_sub(marks.base);
    key(&mut edge, argv0, marks.base, base_len);
    readings.start(BY_ARGV0, short_word(tables.child(&edge), base_len));
    split(&mut readings, SPLIT_ARGV0, argv0, argv0.len());
    readings.drop_repeats();

    // argv[1..], token by token, as far as the kernel's bound.
    let mut pos = argv0.len() as u64 + 1;
    for _ in 0..MAX_ARGV_TOKENS - 1 {
        if !readings.wants_token(pos, end) {
            break;
        }
        let token = read_token(argv, pos as usize).unwrap_or_default();
        key(&mut edge, token, 0, token.len());
        readings.step(|parent| {
            edge.parent = parent;
            tables.child(&edge)
        });
        if !readings.advance(&mut pos, token.len(), end) {
            break;
        }
    }
    readings.finish(pos, end, held_here)
}

/// The token at `at` as the kernel's string read gives it: up to its NUL, at most
/// `TOKEN_SCAN_LEN - 1` bytes. `None` past the end.
fn read_token(argv: &[u8], at: usize) -> Option<&[u8]> {
    let rest = argv.get(at..).filter(|rest| !rest.is_empty())?;
    let len = rest
        .iter()
        .take(TOKEN_SCAN_LEN - 1)
        .position(|&b| b == 0)
        .unwrap_or(rest.len().min(TOKEN_SCAN_LEN - 1));
    Some(&rest[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_find_the_last_component_and_its_first_dash() {
        let marks = WordMarks::of(b"/usr/lib/git-core/git-push", 26);
        assert_eq!(marks.base, 18);
        assert_eq!(marks.dash, 21);
        assert_eq!(marks.split(26), Some(((18, 3), (22, 4))));
        assert_eq!(WordMarks::of(b"-x", 2).split(2), None, "NAME is empty");
        assert_eq!(WordMarks::of(b"git-", 4).split(4), None, "SUB is empty");
        assert_eq!(WordMarks::of(b"git", 3).dash, NO_DASH);
    }

    #[test]
    fn token_keys_match_the_encoders_for_every_length() {
        let token = [b'a'; TOKEN_SCAN_LEN];
        // Short tokens, and those too long for any argv the kernel reads, are keyed by bytes.
        for len in [0, 1, TOKEN_LEN, TOKEN_MAX_LEN + 1] {
            let mut edge = ArgvEdge::new(7, b"zz");
            set_token(&mut edge, &token, 0, len);
            assert_eq!(edge, ArgvEdge::new(7, &token[..len]), "len {len}");
        }
        // A long token is keyed by its id, as the encoder keys it.
        for len in [TOKEN_LEN + 1, TOKEN_MAX_LEN] {
            let mut edge = ArgvEdge::new(7, b"zz");
            set_token(&mut edge, &token, 0, len);
            set_long(&mut edge, 42);
            assert_eq!(edge, ArgvEdge::long(7, 42), "len {len}");
        }
    }

    #[test]
    fn a_token_is_read_to_its_nul_and_no_further_than_the_scan() {
        assert_eq!(read_token(b"git\0push\0", 0), Some(&b"git"[..]));
        assert_eq!(read_token(b"git\0push\0", 4), Some(&b"push"[..]));
        assert_eq!(read_token(b"git\0", 4), None);
        let long = [b'x'; 300];
        assert_eq!(
            read_token(&long, 0).map(<[u8]>::len),
            Some(TOKEN_SCAN_LEN - 1)
        );
    }
}
