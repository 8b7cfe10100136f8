//! Pattern tables: a DFA over bytes, compiled in userspace from regexes, substrings and globs
//! (`guard::compile::dfa`), stored in an array map (a [`DfaHeader`] and [`DfaRow`]s indexed by
//! state) and walked by the kernel one byte per step. The step itself lives here so the kernel
//! and the userspace walker run the same code.
//!
//! Match information is *delayed* by one byte, as in `regex-automata`: a row's [`DfaRow::here`]
//! is what matched up to (not including) the byte that led to it, and [`DfaRow::at_end`] is
//! what matches if the input ends at that row. A walk keeps the strongest verdict seen.

use crate::limits::{DFA_MAX_CLASSES, DFA_MAX_STATES};
use crate::maps::Verdict;

/// The pattern tables the exec programs walk, by what they read. Each has two slots in the
/// maps: an update fills the slot not in use, then switches `DFA_SLOTS` to it with one
/// 4-byte write, so a walk never sees half of an old table and half of a new one.
pub mod table {
    /// The executed file's name (forbidden program regexes).
    pub const PROGRAM_NAME: u32 = 0;
    /// The executed file's name, then argv after argv[0], NUL-separated (forbidden substrings).
    pub const ARGV: u32 = 1;
    /// The same bytes read as a command line (rule-set `exec(...)` globs).
    pub const COMMAND_LINE: u32 = 2;
    /// A file's absolute path, opened for reading (rule-set `read(...)` globs).
    pub const READ_PATH: u32 = 3;
    /// A file's absolute path, written, created, removed or renamed (rule-set `write(...)`
    /// globs and the protected paths).
    pub const WRITE_PATH: u32 = 4;
    pub const COUNT: u32 = 5;
    pub const NAMES: [&str; COUNT as usize] = [
        "program_name",
        "argv",
        "command_line",
        "read_path",
        "write_path",
    ];
}

/// Slots per table (see [`table`]).
pub const DFA_SLOTS_PER_TABLE: u32 = 2;

/// The index of a table's slot in the headers map.
#[inline(always)]
pub const fn header_index(table: u32, slot: u32) -> u32 {
    table * DFA_SLOTS_PER_TABLE + slot
}

/// The index of a row of a table's slot in the rows map.
#[inline(always)]
pub const fn row_index(table: u32, slot: u32, state: u16) -> u32 {
    header_index(table, slot) * DFA_MAX_STATES as u32 + state as u32
}

/// Entries of the headers map.
pub const DFA_HEADER_ENTRIES: u32 = table::COUNT * DFA_SLOTS_PER_TABLE;
/// Entries of the rows map.
pub const DFA_ROW_ENTRIES: u32 = DFA_HEADER_ENTRIES * DFA_MAX_STATES as u32;

/// [`DfaHeader::class_of`]: a byte the table cannot judge (a byte that would make the
/// userspace subject differ from the kernel's bytes, e.g. one shell quoting would quote). A
/// walk that meets it ends with the safe answer.
pub const DFA_CLASS_UNSURE: u8 = 0xff;
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
    /// Reserved: 0 (keeps the layout the programs and maps share).
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

impl DfaHeader {
    /// A slot that holds no table (`states` 0): nothing to walk, nothing matches.
    pub const EMPTY: DfaHeader = DfaHeader {
        start: 0,
        states: 0,
        classes: 0,
        flags: 0,
        bound: Verdict::NONE,
        class_of: [0; 256],
    };

    pub const fn is_empty(&self) -> bool {
        self.states == 0
    }
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

/// A walk in progress: the row it is at and the strongest verdict so far.
#[derive(Clone, Copy, Debug)]
pub struct DfaWalk {
    pub state: u16,
    pub seen: Verdict,
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
        }
    }

    /// Leaves `row` (the row at [`DfaWalk::state`]) on `byte`.
    #[inline(always)]
    pub fn leave(&mut self, header: &DfaHeader, row: &DfaRow, byte: u8) -> Step {
        let class = header.class_of[byte as usize];
        if class == DFA_CLASS_UNSURE || class as usize >= DFA_MAX_CLASSES {
            return Step::Done(Outcome::Bound);
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
    pub fn finish(&mut self, row: &DfaRow) -> Outcome {
        self.seen = self.seen.strongest(row.at_end);
        self.outcome()
    }

    /// What the walk found so far, as the outcome of a walk that ended here.
    pub fn outcome(&self) -> Outcome {
        if self.seen.is_none() {
            Outcome::NoMatch
        } else {
            Outcome::Match(self.seen)
        }
    }
}
