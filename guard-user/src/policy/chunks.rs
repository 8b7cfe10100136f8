//! A large `.rules` file cut into runs of whole top-level statements, so the parser can hold one
//! run's syntax tree at a time instead of the whole file's (Starlark's tree of 100 000 rules
//! takes about 150 MiB).
//!
//! The cut is a light scan, not a parse: it tracks brackets, strings and comments, and cuts only
//! before a line that starts at column 0 outside all of them and is not `else`/`elif`. A cut it
//! gets wrong leaves a run that does not parse; the parser then reads the whole file at once, so
//! a wrong cut costs memory, never meaning.

/// One run of statements: its text and the number of lines before it in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub text: &'a str,
    pub lines_before: usize,
}

/// `source` cut before top-level statements into runs of at least `size` bytes (the last may be
/// shorter). A source without such a cut is one run.
pub fn statement_chunks(source: &str, size: usize) -> Vec<Chunk<'_>> {
    let mut chunks = Vec::new();
    let (mut start, mut start_line) = (0, 0);
    for (offset, line) in statement_starts(source) {
        if offset - start >= size {
            chunks.push(Chunk {
                text: &source[start..offset],
                lines_before: start_line,
            });
            (start, start_line) = (offset, line);
        }
    }
    chunks.push(Chunk {
        text: &source[start..],
        lines_before: start_line,
    });
    chunks
}

/// The byte offsets (and line numbers, from 0) of the lines that start a top-level statement.
fn statement_starts(source: &str) -> Vec<(usize, usize)> {
    let bytes = source.as_bytes();
    let mut starts = Vec::new();
    let (mut depth, mut line, mut i) = (0usize, 0usize, 0usize);
    // Whether the current line continues the previous one (`\` at its end).
    let mut continued = false;
    let mut at_line_start = true;
    while i < bytes.len() {
        if at_line_start {
            at_line_start = false;
            let rest = &bytes[i..];
            let opens_statement = depth == 0
                && !continued
                && !matches!(rest[0], b' ' | b'\t' | b'\r' | b'\n' | b'#')
                && !starts_with_keyword(rest, b"else")
                && !starts_with_keyword(rest, b"elif");
            if opens_statement {
                starts.push((i, line));
            }
            continued = false;
        }
        match bytes[i] {
            b'\n' => {
                line += 1;
                at_line_start = true;
            }
            b'\\' if bytes.get(i + 1) == Some(&b'\n') => continued = true,
            b'#' => {
                while i + 1 < bytes.len() && bytes[i + 1] != b'\n' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            quote @ (b'"' | b'\'') => {
                let triple = bytes[i..].starts_with(&[quote; 3]);
                let end = if triple { 3 } else { 1 };
                i += end;
                while i < bytes.len() {
                    if bytes[i] == b'\\' {
                        i += 1;
                        if bytes.get(i) == Some(&b'\n') {
                            line += 1;
                        }
                    } else if bytes[i..].starts_with(&[quote; 3][..end]) {
                        i += end - 1;
                        break;
                    } else if bytes[i] == b'\n' {
                        if !triple {
                            // An unclosed string (it will not parse): the newline ends the line.
                            i -= 1;
                            break;
                        }
                        line += 1;
                    }
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    starts
}

fn starts_with_keyword(text: &[u8], keyword: &[u8]) -> bool {
    text.starts_with(keyword)
        && text
            .get(keyword.len())
            .is_none_or(|next| !(next.is_ascii_alphanumeric() || *next == b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuts(source: &str) -> Vec<usize> {
        statement_starts(source)
            .into_iter()
            .map(|(_, line)| line)
            .collect()
    }

    #[test]
    fn statements_start_at_column_zero_outside_brackets_strings_and_comments() {
        let source = "a(1)\n\
                      b = [\n\
                      2,\n\
                      ]\n\
                      # c(3)\n\
                      s = \"\"\"\n\
                      d(4)\n\
                      \"\"\"\n\
                      if x:\n  e(5)\n\
                      else:\n  f(6)\n\
                      elif_rule(7)\n\
                      g = 1 + \\\n\
                      h(8)\n\
                      t = 'x\\'y' # (\n\
                      i(9)\n";
        // Lines: 0 a, 1 b, 4 comment, 5 s, 8 if, 10 else, 12 elif_rule, 13 g, 14 its
        // continuation, 15 t, 16 i.
        assert_eq!(cuts(source), [0, 1, 5, 8, 12, 13, 15, 16]);
    }

    #[test]
    fn runs_cover_the_source_and_keep_their_line_numbers() {
        let source: String = (0..100).map(|i| format!("rule({i})\n")).collect();
        let chunks = statement_chunks(&source, 100);
        assert!(chunks.len() > 5, "{}", chunks.len());
        assert_eq!(
            chunks.iter().map(|c| c.text).collect::<String>(),
            source,
            "the runs are the file, in order"
        );
        for chunk in &chunks {
            let first = chunk.text.lines().next().unwrap();
            assert_eq!(first, format!("rule({})", chunk.lines_before));
            assert!(chunk.text.ends_with('\n'));
        }
        assert_eq!(
            statement_chunks("x = 1", 100),
            [Chunk {
                text: "x = 1",
                lines_before: 0
            }]
        );
    }
}
