//! shlex 1.3's quoting (`shlex::try_join`, what the rule set's `exec_subject` renders) as a
//! nondeterministic transducer over raw argv bytes (NUL between words): each move reads one
//! raw byte and writes the text it adds to the rendering.
//!
//! shlex splits a word into chunks: a chunk grows while some quoting can hold all of it
//! (none, single or double quotes; the set only shrinks), and is written in the first of
//! them that still can; a chunk starting with `^` is single-quoted. The model guesses the
//! quoting when a chunk starts and drops the guess when the chunk ends under another one.
//! The property tests in `compile::dfa::tests` check the model against shlex itself.

/// Quotings, as a bit set.
const UNQUOTED: u8 = 1;
const SINGLE: u8 = 2;
const DOUBLE: u8 = 4;
/// In the order shlex prefers them.
const QUOTINGS: [u8; 3] = [UNQUOTED, SINGLE, DOUBLE];

/// Where the model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Before a word's first byte.
    WordStart,
    /// Inside a chunk written in `quoting` (the guess), which every quoting in `can` could
    /// still hold.
    Chunk { quoting: u8, can: u8 },
}

/// The quotings that can hold `byte` (shlex's `unquoted_ok`, `single_quoted_ok`,
/// `double_quoted_ok`).
fn can_hold(byte: u8) -> u8 {
    if !byte.is_ascii() {
        return SINGLE | DOUBLE;
    }
    let unquoted = byte.is_ascii_alphanumeric() || b"+-./:@]_".contains(&byte);
    let single = !matches!(byte, b'\'' | b'^' | b'\\');
    let double = !matches!(byte, b'`' | b'$' | b'!' | b'^');
    (if unquoted { UNQUOTED } else { 0 })
        | (if single { SINGLE } else { 0 })
        | (if double { DOUBLE } else { 0 })
}

/// The quoting shlex writes a chunk in, given the quotings that can hold all of it.
fn preferred(can: u8) -> u8 {
    QUOTINGS.into_iter().find(|&q| can & q != 0).unwrap_or(0)
}

fn quote_mark(quoting: u8) -> &'static [u8] {
    match quoting {
        SINGLE => b"'",
        DOUBLE => b"\"",
        _ => b"",
    }
}

/// `byte` as written inside a chunk quoted `quoting`.
fn written(quoting: u8, byte: u8) -> Vec<u8> {
    if quoting == DOUBLE && matches!(byte, b'"' | b'\\') {
        vec![b'\\', byte]
    } else {
        vec![byte]
    }
}

/// What closes a chunk quoted `quoting` that `can` could hold: its closing mark, or `None`
/// if shlex would have chosen another quoting (the guess was wrong).
fn chunk_end(quoting: u8, can: u8) -> Option<&'static [u8]> {
    (preferred(can) == quoting).then(|| quote_mark(quoting))
}

/// The chunks that can start with `byte` (not NUL), each with the text it writes.
fn chunk_start(byte: u8, before: &[u8]) -> Vec<(Vec<u8>, Mode)> {
    let can = if byte == b'^' { SINGLE } else { can_hold(byte) };
    QUOTINGS
        .into_iter()
        .filter(|&q| can & q != 0)
        .map(|quoting| {
            let mut text = before.to_vec();
            text.extend_from_slice(quote_mark(quoting));
            text.extend(written(quoting, byte));
            (text, Mode::Chunk { quoting, can })
        })
        .collect()
}

/// The moves from `mode` on raw `byte`: the text each writes and where it leads.
pub fn moves(mode: Mode, byte: u8) -> Vec<(Vec<u8>, Mode)> {
    match (mode, byte) {
        // An empty word, then the space between words.
        (Mode::WordStart, 0) => vec![(b"'' ".to_vec(), Mode::WordStart)],
        (Mode::WordStart, _) => chunk_start(byte, b""),
        (Mode::Chunk { quoting, can }, 0) => chunk_end(quoting, can)
            .map(|end| vec![([end, b" "].concat(), Mode::WordStart)])
            .unwrap_or_default(),
        (Mode::Chunk { quoting, can }, _) => {
            let still = can & can_hold(byte);
            if still == 0 {
                // The chunk ends before `byte`, which starts the next one.
                return chunk_end(quoting, can)
                    .map(|end| chunk_start(byte, end))
                    .unwrap_or_default();
            }
            if still & quoting == 0 {
                // The guessed quoting cannot hold this chunk.
                return Vec::new();
            }
            vec![(
                written(quoting, byte),
                Mode::Chunk {
                    quoting,
                    can: still,
                },
            )]
        }
    }
}

/// Every mode the model can be in: `moves` from each of them tell two raw bytes apart.
pub fn all_modes() -> impl Iterator<Item = Mode> {
    let chunks = QUOTINGS.into_iter().flat_map(|quoting| {
        (0..=(UNQUOTED | SINGLE | DOUBLE)).map(move |can| Mode::Chunk { quoting, can })
    });
    std::iter::once(Mode::WordStart).chain(chunks)
}

/// The text that ends the input in `mode` (the last word's end), `None` for a wrong guess.
/// An input always has a word (the executed file's name), so ending at a word start ends an
/// empty word: `''`.
pub fn word_end(mode: Mode) -> Option<&'static [u8]> {
    match mode {
        Mode::WordStart => Some(b"''"),
        Mode::Chunk { quoting, can } => chunk_end(quoting, can),
    }
}

/// Every rendering the model allows for `input` (raw argv, NUL-separated): for tests, which
/// check it is exactly shlex's one.
#[cfg(test)]
pub fn renderings(input: &[u8]) -> Vec<Vec<u8>> {
    let mut paths: Vec<(Vec<u8>, Mode)> = vec![(Vec::new(), Mode::WordStart)];
    for &byte in input {
        paths = paths
            .into_iter()
            .flat_map(|(text, mode)| {
                moves(mode, byte).into_iter().map(move |(more, to)| {
                    let mut text = text.clone();
                    text.extend(more);
                    (text, to)
                })
            })
            .collect();
    }
    paths
        .into_iter()
        .filter_map(|(mut text, mode)| {
            text.extend_from_slice(word_end(mode)?);
            Some(text)
        })
        .collect()
}
