//! Pattern tables: a DFA over bytes, compiled in userspace from regexes, substrings and globs
//! (`guard::compile::dfa`), stored in an array map (a [`DfaHeader`] and [`DfaRow`]s indexed by
//! state) and walked by the kernel one byte per step. The step itself lives here so the kernel
//! and the userspace walker run the same code.
//!
//! Match information is *delayed* by one byte, as in `regex-automata`: a row's [`DfaRow::here`]
//! is what matched up to (not including) the byte that led to it, and [`DfaRow::at_end`] is
//! what matches if the input ends at that row. A walk keeps the strongest verdict seen.

use crate::limits::DFA_MAX_CLASSES;
use crate::maps::Verdict;

/// [`DfaHeader::class_of`]: a byte the table cannot judge (a byte that would make the
/// userspace subject differ from the kernel's bytes, e.g. one shell quoting would quote). A
/// walk that meets it ends with the safe answer.
pub const DFA_CLASS_UNSURE: u8 = 0xff;
/// [`DfaHeader::flags`]: the input is NUL-separated words (argv, no trailing NUL) rendered as
/// space-separated text; an empty word renders as `''`, so it ends the walk with the safe answer.
pub const DFA_INPUT_WORDS: u16 = 1;
/// [`DfaRow::flags`]: no input leads from here to a match; the walk can stop.
pub const DFA_ROW_DEAD: u16 = 1;

/// Index 0 of a table's header map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DfaHeader {
    /// The row a walk starts at.
    pub start: u16,
    /// Rows in use (`< DFA_MAX_STATES`).
    pub states: u16,
    /// Byte classes in use (`<= DFA_MAX_CLASSES`).
    pub classes: u16,
    pub flags: u16,
    /// The safe answer when a walk cannot finish: the strongest verdict in the table that is
    /// not an allow (an allow that cannot be checked in full does not allow), else none.
    pub bound: Verdict,
    /// The class of every byte, or [`DFA_CLASS_UNSURE`].
    pub class_of: [u8; 256],
}

/// One state of a table.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DfaRow {
    /// The strongest verdict of the patterns that matched just before the byte leading here.
    pub here: Verdict,
    /// The strongest verdict of the patterns that match if the input ends here.
    pub at_end: Verdict,
    pub flags: u16,
    pub _pad: u16,
    /// The next row for each byte class (only the first `classes` are meaningful).
    pub next: [u16; DFA_MAX_CLASSES],
}

impl DfaRow {
    pub const EMPTY: DfaRow = DfaRow {
        here: Verdict::NONE,
        at_end: Verdict::NONE,
        flags: 0,
        _pad: 0,
        next: [0; DFA_MAX_CLASSES],
    };
}

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// At least one pattern matched; the strongest verdict among them.
    Match(Verdict),
    /// No pattern matched.
    NoMatch,
    /// The walk could not finish (step bound, unsure byte, empty word): the caller takes
    /// [`DfaHeader::bound`], see [`Outcome::verdict`].
    Bound,
}

impl Outcome {
    /// The verdict to act on: a match's, none, or past the bound the safe answer.
    pub fn verdict(self, header: &DfaHeader) -> Verdict {
        match self {
            Outcome::Match(verdict) => verdict,
            Outcome::NoMatch => Verdict::NONE,
            Outcome::Bound => header.bound,
        }
    }
}

/// A walk in progress: the row it is at, the strongest verdict so far and whether the last
/// byte was a word separator (for [`DFA_INPUT_WORDS`]).
#[derive(Clone, Copy, Debug)]
pub struct DfaWalk {
    pub state: u16,
    pub seen: Verdict,
    pub after_separator: bool,
}

/// What one step says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read the row [`DfaWalk::state`] and call [`DfaWalk::arrive`].
    Go,
    /// The walk is over with this outcome.
    Done(Outcome),
}

impl DfaWalk {
    pub const fn start(header: &DfaHeader) -> Self {
        DfaWalk {
            state: header.start,
            seen: Verdict::NONE,
            // The first word starts here: an input that begins with NUL has an empty word.
            after_separator: true,
        }
    }

    /// Leaves `row` (the row at [`DfaWalk::state`]) on `byte`.
    #[inline(always)]
    pub fn leave(&mut self, header: &DfaHeader, row: &DfaRow, byte: u8) -> Step {
        let class = header.class_of[byte as usize];
        if class == DFA_CLASS_UNSURE || class as usize >= DFA_MAX_CLASSES {
            return Step::Done(Outcome::Bound);
        }
        if header.flags & DFA_INPUT_WORDS != 0 {
            let separator = byte == 0;
            if separator && self.after_separator {
                return Step::Done(Outcome::Bound);
            }
            self.after_separator = separator;
        }
        self.state = row.next[class as usize];
        Step::Go
    }

    /// Arrives at `row` (the new [`DfaWalk::state`]): keeps its verdict and says whether the
    /// walk is already decided (a dead row, or nothing stronger left to find).
    #[inline(always)]
    pub fn arrive(&mut self, header: &DfaHeader, row: &DfaRow) -> Step {
        self.seen = self.seen.strongest(row.here);
        if row.flags & DFA_ROW_DEAD != 0 {
            return Step::Done(self.outcome());
        }
        if !self.seen.is_none()
            && !header.bound.is_none()
            && self.seen.strongest(header.bound) == self.seen
        {
            return Step::Done(self.outcome());
        }
        Step::Go
    }

    /// The input ended at `row` (the row at [`DfaWalk::state`]).
    #[inline(always)]
    pub fn finish(&mut self, header: &DfaHeader, row: &DfaRow) -> Outcome {
        if header.flags & DFA_INPUT_WORDS != 0 && self.after_separator {
            // An empty input or a trailing NUL: the last word is empty.
            return Outcome::Bound;
        }
        self.seen = self.seen.strongest(row.at_end);
        self.outcome()
    }

    fn outcome(&self) -> Outcome {
        if self.seen.is_none() {
            Outcome::NoMatch
        } else {
            Outcome::Match(self.seen)
        }
    }
}
