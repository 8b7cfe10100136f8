//! Pattern tables for the kernel: the exec rules that are patterns rather than exact names
//! (forbidden program regexes, forbidden argv substrings, rule-set `exec(...)` globs) compiled
//! to one DFA per input kind, in the [`guard_common::dfa`] table format.
//!
//! The kernel program will copy its input (the executed file's name, or argv as read from the
//! process) into a buffer, then walk the table one byte per step: look the byte's class up in
//! the header, read the row for the current state, move. A BPF program must end within a
//! bounded number of instructions, so the walk stops after [`DFA_MAX_INPUT`] bytes and rows are
//! capped at [`DFA_MAX_STATES`] × [`DFA_MAX_CLASSES`]. A walk that cannot finish (input past the
//! bound, a byte the table cannot judge) ends in [`Outcome::Bound`], and the
//! caller takes the table's safe answer ([`DfaHeader::bound`]): the strongest non-allow verdict
//! in the table, i.e. it fails closed. [`walk`] is the userspace twin of that walker, built from
//! the same shared steps ([`DfaWalk`]), so the two can be tested against each other.
//!
//! Each input kind and what its table reads:
//! - [`InputKind::ProgramName`]: the file name, searched unanchored as the legacy engine's
//!   `Regex::is_match` does (a policy anchors with `^...$` itself);
//! - [`InputKind::Argv`]: argv joined with NUL, no trailing NUL. A forbidden substring matches
//!   when any argument after `argv[0]` contains it (the legacy engine checks `args`): the
//!   regex is `\A[^\0]*\0(?s:.)*<substring>`, and since a substring has no NUL, a match never
//!   spans two arguments;
//! - [`InputKind::Path`]: a file's absolute path, matched whole by the regexes globset builds
//!   for the rule set's path globs ([`path_glob_regexes`]);
//! - [`InputKind::CommandLine`]: argv joined with NUL as well, read as the rule set's subject
//!   (argv shell-quoted and joined with spaces): the table is the glob's DFA composed with a
//!   model of that quoting ([`command_line`]), so the walk over raw bytes decides what the
//!   rule set decides over the quoted text; only input past the step bound takes the safe
//!   answer. The regex is the one globset builds
//!   for the rule set's glob ([`text_glob`]), so both read a glob the same way.

use std::collections::HashMap;
use std::fmt;

use guard_common::Decision;
use guard_common::dfa::{
    DFA_CLASS_UNSURE, DFA_ROW_DEAD, DfaHeader, DfaRow, DfaWalk, Outcome, Step,
};
use guard_common::limits::{DFA_MAX_CLASSES, DFA_MAX_INPUT, DFA_MAX_STATES};
use guard_common::maps::Verdict;
use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};

use crate::policy::rule_set::{path_glob_regexes, text_glob};

/// What a table's input is; see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputKind {
    ProgramName,
    Argv,
    CommandLine,
    /// A file's absolute path, as `bpf_d_path` gives it.
    Path,
}

/// One pattern to compile: as written (for errors), the regex it stands for, and its verdict.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DfaPattern {
    pub written: String,
    regex: String,
    pub verdict: Verdict,
}

impl DfaPattern {
    /// A `forbid_program_regex` regex, searched anywhere in the file name.
    pub fn program_regex(regex: &str, verdict: Verdict) -> Self {
        DfaPattern {
            written: regex.to_string(),
            regex: regex.to_string(),
            verdict,
        }
    }

    /// A `forbid_substrings` entry over the arguments after `argv[0]`. `None` for a substring
    /// with a NUL: no argument can contain one, so it never matches.
    pub fn argv_substring(substring: &str, verdict: Verdict) -> Option<Self> {
        if substring.contains('\0') {
            return None;
        }
        Some(DfaPattern {
            written: substring.to_string(),
            regex: format!(r"(?s-u)\A[^\x00]*\x00.*{}", regex::escape(substring)),
            verdict,
        })
    }

    /// An `exec(...)` subject glob of a rule set, over the command line.
    pub fn command_glob(glob: &str, verdict: Verdict) -> Result<Self, DfaError> {
        let compiled = text_glob(glob).map_err(|err| DfaError::Invalid {
            pattern: glob.to_string(),
            message: err.kind().to_string(),
        })?;
        Ok(DfaPattern {
            written: glob.to_string(),
            regex: compiled.regex().to_string(),
            verdict,
        })
    }
}

impl DfaPattern {
    /// One pattern that matches where any of `members` does, with `verdict`: patterns of one
    /// verdict as one match set, so a table of many holds the union, not every combination
    /// of them (`MatchKind::All` keeps a set per pattern: ten `*secretN*` globs need 2^10).
    ///
    /// Members that end in "anything" (a glob's trailing `*`, the regex's `.*$`) share one
    /// tail: `(?:A|B).*$` for `A.*$|B.*$`, the same language, but once one has matched the
    /// automaton is in one tail state whichever it was, instead of remembering every member
    /// that has matched so far (2^n states for n `*…*` globs).
    pub fn any_of(members: &[DfaPattern], verdict: Verdict) -> Self {
        let (mut tailed, mut whole) = (Vec::new(), Vec::new());
        for member in members {
            match strip_any_tail(&member.regex) {
                Some(head) => tailed.push(format!("(?:{head})")),
                None => whole.push(format!("(?:{})", member.regex)),
            }
        }
        let mut branches = whole;
        if !tailed.is_empty() {
            branches.insert(0, format!("(?-u)(?:{}){ANY_TAIL}", tailed.join("|")));
        }
        DfaPattern {
            written: members
                .iter()
                .map(|m| m.written.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            regex: branches.join("|"),
            verdict,
        }
    }

    /// A `read(...)` / `write(...)` subject glob of a rule set, over a file's absolute path:
    /// one pattern per glob it stands for (a `dir/**` pattern also covers `dir` itself).
    pub fn path_glob(glob: &str, verdict: Verdict) -> Result<Vec<Self>, DfaError> {
        let regexes = path_glob_regexes(glob).map_err(|message| DfaError::Invalid {
            pattern: glob.to_string(),
            message,
        })?;
        Ok(regexes
            .into_iter()
            .map(|regex| DfaPattern {
                written: glob.to_string(),
                regex,
                verdict,
            })
            .collect())
    }
}

/// How a glob's regex ends in "anything": globset writes a trailing `*` as `.*$`, with Unicode
/// off (`(?-u)` at its start).
const ANY_TAIL: &str = ".*$";

/// `regex` without its trailing [`ANY_TAIL`], when it has one (an escaped `\.*$` is a literal
/// dot, not "anything") and is byte-oriented as a glob's is (`(?-u)` first).
fn strip_any_tail(regex: &str) -> Option<&str> {
    let head = regex.strip_suffix(ANY_TAIL)?;
    let escapes = head.chars().rev().take_while(|&c| c == '\\').count();
    (regex.starts_with("(?-u)") && escapes % 2 == 0).then_some(head)
}

/// Why a pattern set has no table.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DfaError {
    #[error("the pattern {pattern:?} cannot be compiled for the kernel: {message}")]
    Invalid { pattern: String, message: String },
    #[error(
        "the kernel cannot hold the pattern table for {}: it needs {needs}, the limit is \
         {DFA_MAX_STATES} states and {DFA_MAX_CLASSES} byte classes",
        quoted(.patterns)
    )]
    TooLarge {
        patterns: Vec<String>,
        needs: String,
    },
}

fn quoted(patterns: &[String]) -> String {
    let quoted: Vec<String> = patterns.iter().map(|p| format!("{p:?}")).collect();
    quoted.join(", ")
}

/// A compiled table: what the header map and the rows map will hold.
#[derive(Clone, PartialEq, Eq)]
pub struct DfaTable {
    pub header: DfaHeader,
    pub rows: Vec<DfaRow>,
}

impl fmt::Debug for DfaTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DfaTable")
            .field("states", &self.header.states)
            .field("classes", &self.header.classes)
            .field("bound", &self.header.bound)
            .finish_non_exhaustive()
    }
}

impl DfaTable {
    /// Bytes the table takes in the maps (header plus the rows in use).
    pub fn map_bytes(&self) -> usize {
        size_of::<DfaHeader>() + self.rows.len() * size_of::<DfaRow>()
    }
}

/// Determinizing more than this is far past any table the kernel could hold: give up early.
const BUILD_BYTES_LIMIT: usize = 8 << 20;

/// Compiles `patterns` (all of one input kind) into one table. A set too large for the kernel
/// is an error naming the patterns that are too large alone, or all of them if only the set is.
pub fn compile(kind: InputKind, patterns: &[DfaPattern]) -> Result<DfaTable, DfaError> {
    match compile_set(kind, patterns) {
        Err(DfaError::TooLarge { needs, .. }) => Err(DfaError::TooLarge {
            patterns: too_large_alone(kind, patterns)
                .unwrap_or_else(|| patterns.iter().map(|p| p.written.clone()).collect()),
            needs,
        }),
        other => other,
    }
}

fn too_large_alone(kind: InputKind, patterns: &[DfaPattern]) -> Option<Vec<String>> {
    let alone: Vec<String> = patterns
        .iter()
        .filter(|p| {
            matches!(
                compile_set(kind, std::slice::from_ref(p)),
                Err(DfaError::TooLarge { .. })
            )
        })
        .map(|p| p.written.clone())
        .collect();
    (!alone.is_empty()).then_some(alone)
}

/// [`compile`] without naming culprits: the error of a set too large names no pattern.
pub fn compile_set(kind: InputKind, patterns: &[DfaPattern]) -> Result<DfaTable, DfaError> {
    let dfa = build_dense(patterns)?;
    let start = dfa
        .start_state(&start::Config::new().anchored(Anchored::No))
        .map_err(|err| DfaError::Invalid {
            pattern: quoted(
                &patterns
                    .iter()
                    .map(|p| p.written.clone())
                    .collect::<Vec<_>>(),
            ),
            message: err.to_string(),
        })?;
    if kind == InputKind::CommandLine {
        return command_line::compile(&dfa, start, patterns);
    }
    let classes = ByteClassMap::of(&dfa, start);
    if classes.count > DFA_MAX_CLASSES {
        return Err(too_large(format!("{} byte classes", classes.count)));
    }
    let (order, index) = reachable_states(&dfa, start, &classes)?;
    let rows = order
        .iter()
        .map(|&id| row_of(&dfa, id, &classes, &index, patterns))
        .collect();
    Ok(DfaTable {
        header: DfaHeader {
            start: index[&start],
            states: order.len() as u16,
            classes: classes.count as u16,
            flags: 0,
            bound: safe_answer(patterns),
            class_of: classes.for_kernel(),
        },
        rows,
    })
}

fn too_large(needs: String) -> DfaError {
    DfaError::TooLarge {
        patterns: Vec::new(),
        needs,
    }
}

/// The minimal DFA of `patterns`. Minimizing a large DFA is the slow part of a set that does
/// not fit (seconds for ten `*secretN*` globs), so the DFA is first built as it comes: one far
/// larger than a table (more than [`UNMINIMIZED_STATES_LIMIT`] states) fails there, the rest
/// are built again and minimized.
fn build_dense(patterns: &[DfaPattern]) -> Result<dense::DFA<Vec<u32>>, DfaError> {
    let unminimized = build_dense_with(patterns, false)?;
    // About its state count: each state is a row of 4-byte transitions, 2^stride2 of them.
    let states = unminimized.memory_usage() / (4 << unminimized.stride2());
    if states > UNMINIMIZED_STATES_LIMIT {
        return Err(too_large(format!(
            "more than {UNMINIMIZED_STATES_LIMIT} states before minimizing"
        )));
    }
    build_dense_with(patterns, true)
}

/// A DFA this much larger than a table is not minimized into one.
const UNMINIMIZED_STATES_LIMIT: usize = 8 * DFA_MAX_STATES;

/// `MatchKind::All` so every pattern's matches show in the match states (strongest-wins needs
/// all of them, not the leftmost-first one); byte-oriented like `regex::bytes` so the table
/// works on any bytes; ASCII-only `\b` is allowed, its non-ASCII bytes become quit bytes.
fn build_dense_with(
    patterns: &[DfaPattern],
    minimize: bool,
) -> Result<dense::DFA<Vec<u32>>, DfaError> {
    let regexes: Vec<&str> = patterns.iter().map(|p| p.regex.as_str()).collect();
    dense::Builder::new()
        .configure(
            dense::Config::new()
                .match_kind(MatchKind::All)
                .start_kind(StartKind::Unanchored)
                .byte_classes(true)
                .minimize(minimize)
                .unicode_word_boundary(true)
                .dfa_size_limit(Some(BUILD_BYTES_LIMIT))
                .determinize_size_limit(Some(BUILD_BYTES_LIMIT)),
        )
        .syntax(regex_automata::util::syntax::Config::new().utf8(false))
        .thompson(thompson::Config::new().utf8(false))
        .build_many(&regexes)
        .map_err(|err| build_error(patterns, err))
}

fn build_error(patterns: &[DfaPattern], err: dense::BuildError) -> DfaError {
    if err.is_size_limit_exceeded() {
        return too_large(format!("more than {BUILD_BYTES_LIMIT} bytes to build"));
    }
    // Name the pattern that fails alone; a set fails only through one of its members.
    let culprit = patterns
        .iter()
        .find(|p| patterns.len() == 1 || build_dense_with(std::slice::from_ref(p), false).is_err());
    DfaError::Invalid {
        pattern: culprit.map_or_else(String::new, |p| p.written.clone()),
        message: err.to_string(),
    }
}

/// The dense DFA's byte classes, renumbered without the end-of-input class, with one
/// representative byte per class and the quit bytes (non-ASCII after an ASCII `\b`) marked.
struct ByteClassMap {
    class_of: [u8; 256],
    representative: Vec<u8>,
    quit: [bool; 256],
    count: usize,
}

impl ByteClassMap {
    fn of(dfa: &dense::DFA<Vec<u32>>, start: StateID) -> Self {
        let classes = dfa.byte_classes();
        let mut class_of = [0u8; 256];
        let mut quit = [false; 256];
        let mut representative: Vec<u8> = Vec::new();
        for byte in 0..=255u8 {
            let class = classes.get(byte);
            class_of[byte as usize] = class;
            quit[byte as usize] = dfa.is_quit_state(dfa.next_state(start, byte));
            if representative.len() <= class as usize {
                representative.resize(class as usize + 1, byte);
            }
        }
        // Each class's first byte (bytes of a class are visited in order, classes too).
        for byte in (0..=255u8).rev() {
            representative[classes.get(byte) as usize] = byte;
        }
        ByteClassMap {
            class_of,
            count: representative.len(),
            representative,
            quit,
        }
    }

    /// The header's class table: quit bytes (non-ASCII after an ASCII `\b`) are unsure.
    fn for_kernel(&self) -> [u8; 256] {
        let mut table = self.class_of;
        for byte in 0..=255u8 {
            if self.quit[byte as usize] {
                table[byte as usize] = DFA_CLASS_UNSURE;
            }
        }
        table
    }
}

/// The states reachable from `start` in breadth-first order, and each one's row index. Quit
/// bytes are never walked (the kernel stops on them), so the quit state gets no row.
fn reachable_states(
    dfa: &dense::DFA<Vec<u32>>,
    start: StateID,
    classes: &ByteClassMap,
) -> Result<(Vec<StateID>, HashMap<StateID, u16>), DfaError> {
    let mut order = vec![start];
    let mut index = HashMap::from([(start, 0u16)]);
    let mut next = 0;
    while let Some(&id) = order.get(next) {
        next += 1;
        for &byte in &classes.representative {
            let to = dfa.next_state(id, byte);
            if classes.quit[byte as usize] || index.contains_key(&to) {
                continue;
            }
            if order.len() >= DFA_MAX_STATES {
                return Err(too_large(format!("more than {DFA_MAX_STATES} states")));
            }
            index.insert(to, order.len() as u16);
            order.push(to);
        }
    }
    Ok((order, index))
}

fn row_of(
    dfa: &dense::DFA<Vec<u32>>,
    id: StateID,
    classes: &ByteClassMap,
    index: &HashMap<StateID, u16>,
    patterns: &[DfaPattern],
) -> DfaRow {
    let mut row = DfaRow::EMPTY;
    row.here = match_verdict(dfa, id, patterns);
    row.at_end = match_verdict(dfa, dfa.next_eoi_state(id), patterns);
    if dfa.is_dead_state(id) {
        row.flags |= DFA_ROW_DEAD;
    }
    for (class, &byte) in classes.representative.iter().enumerate() {
        // A quit byte's transition is never taken; leave it at row 0.
        row.next[class] = index.get(&dfa.next_state(id, byte)).copied().unwrap_or(0);
    }
    row
}

/// The strongest verdict of the patterns a match state reports (none for other states); on a
/// tie the earlier pattern's, as the rule set's first match would report.
fn match_verdict(dfa: &dense::DFA<Vec<u32>>, id: StateID, patterns: &[DfaPattern]) -> Verdict {
    if !dfa.is_match_state(id) {
        return Verdict::NONE;
    }
    let mut matched: Vec<usize> = (0..dfa.match_len(id))
        .map(|i| dfa.match_pattern(id, i).as_usize())
        .collect();
    matched.sort_unstable();
    matched
        .into_iter()
        .fold(Verdict::NONE, |seen, p| seen.strongest(patterns[p].verdict))
}

/// What a walk that cannot finish answers: the strongest verdict that is not an allow.
fn safe_answer(patterns: &[DfaPattern]) -> Verdict {
    patterns
        .iter()
        .map(|p| p.verdict)
        .filter(|v| v.decision != Decision::Allow as u8)
        .fold(Verdict::NONE, Verdict::strongest)
}

/// Walks `input` through `table` exactly as the kernel will: one byte per step, at most
/// `max_steps` bytes (the kernel's is [`DFA_MAX_INPUT`]); an input longer than that ends in
/// [`Outcome::Bound`] unless the walk was decided before.
pub fn walk(table: &DfaTable, input: &[u8], max_steps: usize) -> Outcome {
    let header = &table.header;
    let row = |state: u16| table.rows.get(state as usize);
    let mut walk = DfaWalk::start(header);
    for (steps, &byte) in input.iter().enumerate() {
        if steps >= max_steps {
            return Outcome::Bound;
        }
        // A missing row is a corrupt table: the kernel's map lookup fails the same way.
        let Some(from) = row(walk.state) else {
            return Outcome::Bound;
        };
        if let Step::Done(outcome) = walk.leave(header, from, byte) {
            return outcome;
        }
        let Some(to) = row(walk.state) else {
            return Outcome::Bound;
        };
        if let Step::Done(outcome) = walk.arrive(header, to) {
            return outcome;
        }
    }
    match row(walk.state) {
        Some(last) => walk.finish(last),
        None => Outcome::Bound,
    }
}

/// [`walk`] with the kernel's bound.
pub fn walk_kernel(table: &DfaTable, input: &[u8]) -> Outcome {
    walk(table, input, DFA_MAX_INPUT)
}

pub(crate) mod command_line;

#[cfg(test)]
mod tests;
