//! The command-line table: rule-set `exec(...)` globs are written against the rule set's
//! subject (argv shell-quoted by `shlex::try_join` and joined with spaces), the kernel reads
//! raw argv (NUL-separated words). The table reads the raw bytes and accepts exactly what the
//! glob accepts over the quoted join: it is the product of the glob's DFA with a model of
//! shlex's quoting ([`quoting`]), determinized by subset construction and minimized.
//!
//! shlex quotes a word chunk by chunk, choosing each chunk's quoting (none, `'...'` or
//! `"..."`) only when the chunk ends, so the quote written before a chunk depends on bytes
//! after it. The model guesses the quoting at each chunk start and checks the guess at the
//! chunk's end; for a whole input exactly one guess survives, so a table row's end verdict is
//! the verdict of the one true rendering.

use std::collections::{BTreeMap, HashMap};

use guard_common::dfa::{DfaHeader, DfaRow};
use guard_common::limits::{DFA_MAX_CLASSES, DFA_MAX_STATES};
use guard_common::maps::Verdict;
use regex_automata::dfa::{Automaton, dense};
use regex_automata::util::primitives::StateID;

use super::{DfaError, DfaPattern, DfaTable, match_verdict, safe_answer, too_large};

pub(crate) mod quoting;

use quoting::Mode;

/// Subset construction may make many states that minimizing merges (the quoting guesses
/// differ, the glob's states agree); past this many it gives up.
const BUILD_STATES_LIMIT: usize = 16 * DFA_MAX_STATES;

/// A byte's moves from one quoting mode, the byte itself blanked out of the texts.
type BlankedMoves = Vec<(Vec<u16>, Mode)>;

/// One thread of the product: where the glob's DFA is after the text rendered so far, and
/// where the quoting model is.
type Thread = (StateID, Mode);

/// The table for `patterns`, whose combined glob DFA is `dfa` starting at `start`.
pub(super) fn compile(
    dfa: &dense::DFA<Vec<u32>>,
    start: StateID,
    patterns: &[DfaPattern],
) -> Result<DfaTable, DfaError> {
    let product = Product { dfa, patterns };
    let subsets = product.determinize(start)?;
    let minimal = minimize(&subsets);
    if minimal.at_end.len() > DFA_MAX_STATES {
        return Err(too_large(format!("more than {DFA_MAX_STATES} states")));
    }
    let classes = ByteClasses::of(&minimal.next);
    if classes.count > DFA_MAX_CLASSES {
        return Err(too_large(format!("{} byte classes", classes.count)));
    }
    let rows = (0..minimal.at_end.len())
        .map(|state| {
            let mut row = DfaRow::EMPTY;
            row.at_end = minimal.at_end[state];
            if minimal.dead[state] {
                row.flags |= guard_common::dfa::DFA_ROW_DEAD;
            }
            for (class, &byte) in classes.representative.iter().enumerate() {
                row.next[class] = minimal.next[state][byte as usize] as u16;
            }
            row
        })
        .collect();
    Ok(DfaTable {
        header: DfaHeader {
            start: minimal.start as u16,
            states: minimal.at_end.len() as u16,
            classes: classes.count as u16,
            // Empty words are rendered (`''`) by the table itself, no word flag needed.
            flags: 0,
            bound: safe_answer(patterns),
            class_of: classes.class_of,
        },
        rows,
    })
}

/// A DFA over raw bytes: every state's next state for each of the 256 bytes, its end verdict
/// and whether it is dead (no input leads from it to a match).
struct ByteDfa {
    start: u32,
    next: Vec<[u32; 256]>,
    at_end: Vec<Verdict>,
    dead: Vec<bool>,
}

struct Product<'a> {
    dfa: &'a dense::DFA<Vec<u32>>,
    patterns: &'a [DfaPattern],
}

impl Product<'_> {
    /// The glob's DFA after `text`, `None` where no match can follow (dead: the thread ends).
    fn feed(&self, mut state: StateID, text: &[u8]) -> Result<Option<StateID>, DfaError> {
        for &byte in text {
            state = self.dfa.next_state(state, byte);
            if self.dfa.is_quit_state(state) {
                // Only a Unicode `\b` has quit bytes; a glob never does.
                return Err(DfaError::Invalid {
                    pattern: String::new(),
                    message: "a command glob cannot hold a word boundary".to_string(),
                });
            }
            if self.dfa.is_dead_state(state) {
                return Ok(None);
            }
        }
        Ok(Some(state))
    }

    /// The threads after raw `byte`, sorted and without repeats (a subset's identity).
    fn next(&self, threads: &[Thread], byte: u8) -> Result<Vec<Thread>, DfaError> {
        let mut next = Vec::new();
        for &(state, mode) in threads {
            for (text, to) in quoting::moves(mode, byte) {
                if let Some(fed) = self.feed(state, &text)? {
                    next.push((fed, to));
                }
            }
        }
        next.sort_unstable();
        next.dedup();
        Ok(next)
    }

    /// The verdict if the input ends with `threads`: the glob's match at the end of the
    /// rendering (the one thread whose guesses all hold).
    fn at_end(&self, threads: &[Thread]) -> Result<Verdict, DfaError> {
        let mut verdict = Verdict::NONE;
        for &(state, mode) in threads {
            let Some(text) = quoting::word_end(mode) else {
                continue;
            };
            if let Some(fed) = self.feed(state, text)? {
                let end = self.dfa.next_eoi_state(fed);
                verdict = verdict.strongest(match_verdict(self.dfa, end, self.patterns));
            }
        }
        Ok(verdict)
    }

    /// The raw bytes that no subset can tell apart, grouped: bytes the glob's DFA puts in
    /// one class and that every quoting mode moves on alike (the same texts once the byte
    /// itself is blanked out, to the same modes). Subset construction then steps once per
    /// group instead of once per byte (a set that does not fit failed after seconds).
    fn raw_classes(&self) -> Vec<Vec<u8>> {
        const BLANK: u16 = u16::MAX;
        let classes = self.dfa.byte_classes();
        let mut groups: HashMap<(u8, Vec<BlankedMoves>), Vec<u8>> = HashMap::new();
        for byte in 0..=255u8 {
            let moves = quoting::all_modes()
                .map(|mode| {
                    quoting::moves(mode, byte)
                        .into_iter()
                        .map(|(text, to)| {
                            let text = text
                                .iter()
                                .map(|&b| if b == byte { BLANK } else { u16::from(b) })
                                .collect();
                            (text, to)
                        })
                        .collect()
                })
                .collect();
            groups
                .entry((classes.get(byte), moves))
                .or_default()
                .push(byte);
        }
        let mut groups: Vec<Vec<u8>> = groups.into_values().collect();
        groups.sort_unstable();
        groups
    }

    /// Subset construction over raw bytes, breadth-first from `start`.
    fn determinize(&self, start: StateID) -> Result<ByteDfa, DfaError> {
        let first: Vec<Thread> = vec![(start, Mode::WordStart)];
        let mut index: HashMap<Vec<Thread>, u32> = HashMap::from([(first.clone(), 0)]);
        let mut order = vec![first];
        let mut out = ByteDfa {
            start: 0,
            next: Vec::new(),
            at_end: Vec::new(),
            dead: Vec::new(),
        };
        let classes = self.raw_classes();
        let mut done = 0;
        while let Some(threads) = order.get(done).cloned() {
            done += 1;
            let mut row = [0u32; 256];
            for members in &classes {
                let next = self.next(&threads, members[0])?;
                let id = match index.get(&next) {
                    Some(&id) => id,
                    None => {
                        if order.len() >= BUILD_STATES_LIMIT {
                            return Err(too_large(format!(
                                "more than {BUILD_STATES_LIMIT} states before minimizing"
                            )));
                        }
                        let id = order.len() as u32;
                        index.insert(next.clone(), id);
                        order.push(next);
                        id
                    }
                };
                for &byte in members {
                    row[byte as usize] = id;
                }
            }
            out.next.push(row);
            out.at_end.push(self.at_end(&threads)?);
            out.dead.push(threads.is_empty());
        }
        Ok(out)
    }
}

/// Moore's partition refinement: states with the same end verdict and the same successors'
/// blocks are merged. Cheap at these sizes (at most 1024 states × 256 bytes per round).
fn minimize(dfa: &ByteDfa) -> ByteDfa {
    let states = dfa.at_end.len();
    // First split: by end verdict and deadness.
    let mut block: Vec<usize> = {
        let mut first: BTreeMap<(u8, u32, u8, bool), usize> = BTreeMap::new();
        (0..states)
            .map(|s| {
                let v = dfa.at_end[s];
                let key = (v.decision, v.rule, v.flags, dfa.dead[s]);
                let len = first.len();
                *first.entry(key).or_insert(len)
            })
            .collect()
    };
    loop {
        let mut signatures: HashMap<(usize, Vec<usize>), usize> = HashMap::new();
        let refined: Vec<usize> = (0..states)
            .map(|s| {
                let successors = dfa.next[s].iter().map(|&t| block[t as usize]).collect();
                let len = signatures.len();
                *signatures.entry((block[s], successors)).or_insert(len)
            })
            .collect();
        let stable = signatures.len() == block.iter().max().map_or(0, |m| m + 1);
        block = refined;
        if stable {
            break;
        }
    }
    // Renumber so the start state's block comes first and blocks follow first appearance.
    let mut renumber: HashMap<usize, u32> = HashMap::new();
    let mut members: Vec<usize> = Vec::new();
    for s in std::iter::once(dfa.start as usize).chain(0..states) {
        if let std::collections::hash_map::Entry::Vacant(e) = renumber.entry(block[s]) {
            e.insert(members.len() as u32);
            members.push(s);
        }
    }
    ByteDfa {
        start: 0,
        next: members
            .iter()
            .map(|&s| dfa.next[s].map(|t| renumber[&block[t as usize]]))
            .collect(),
        at_end: members.iter().map(|&s| dfa.at_end[s]).collect(),
        dead: members.iter().map(|&s| dfa.dead[s]).collect(),
    }
}

/// Bytes grouped into classes by their column of transitions (bytes every state treats alike
/// share a class), one representative byte per class.
struct ByteClasses {
    class_of: [u8; 256],
    representative: Vec<u8>,
    count: usize,
}

impl ByteClasses {
    fn of(next: &[[u32; 256]]) -> Self {
        let mut class_of = [0u8; 256];
        let mut representative = Vec::new();
        let mut seen: HashMap<Vec<u32>, u8> = HashMap::new();
        for byte in 0..=255u8 {
            let column: Vec<u32> = next.iter().map(|row| row[byte as usize]).collect();
            let class = *seen.entry(column).or_insert_with(|| {
                representative.push(byte);
                (representative.len() - 1) as u8
            });
            class_of[byte as usize] = class;
        }
        ByteClasses {
            class_of,
            count: representative.len(),
            representative,
        }
    }
}
