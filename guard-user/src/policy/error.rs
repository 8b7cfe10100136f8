//! The errors a `.rules` file can produce, with the exact texts of the reference engine.
//!
//! Tools and people match on these strings, so every message here is the one
//! `spec/policy-language.md` quotes. Locations are kept apart from the text, as the reference does;
//! [`PolicyError::location`] and the CLI's renderer put them together.

use std::fmt;

pub type Result<T, E = PolicyError> = std::result::Result<T, E>;

/// A 1-based line and column in a rules file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextPosition {
    pub line: usize,
    pub column: usize,
}

/// Where in which file an error was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorLocation {
    pub path: String,
    pub start: TextPosition,
}

impl ErrorLocation {
    /// Where a Starlark span starts, 1-based (Starlark counts from 0).
    pub fn from_span(span: &starlark::codemap::FileSpan) -> Self {
        let resolved = span.resolve_span();
        ErrorLocation {
            path: span.filename().to_string(),
            start: TextPosition {
                line: resolved.begin.line + 1,
                column: resolved.begin.column + 1,
            },
        }
    }
}

impl fmt::Display for ErrorLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.path, self.start.line)
    }
}

/// What went wrong while building a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid decision: {0}")]
    InvalidDecision(String),
    #[error("invalid pattern element: {0}")]
    InvalidPattern(String),
    #[error("invalid example: {0}")]
    InvalidExample(String),
    #[error("invalid rule: {0}")]
    InvalidRule(String),
    #[error(
        "expected every example to match at least one rule. rules: {rules:?}; unmatched examples: {examples:?}"
    )]
    ExampleDidNotMatch {
        rules: Vec<String>,
        examples: Vec<String>,
        location: Option<ErrorLocation>,
    },
    #[error("expected example to not match rule `{rule}`: {example}")]
    ExampleDidMatch {
        rule: String,
        example: String,
        location: Option<ErrorLocation>,
    },
    /// The evaluation ran past a bound on its steps or memory (`parser::MAX_EVALUATION_STEPS`,
    /// `parser::MAX_EVALUATION_HEAP`).
    #[error("rules file too costly to evaluate: {0}")]
    OverBound(String),
    /// Syntax errors, type errors and the errors above when raised inside a builtin.
    #[error("starlark error: {0}")]
    Starlark(starlark::Error),
}

impl PolicyError {
    /// The file and line the error points at, when it has one.
    pub fn location(&self) -> Option<ErrorLocation> {
        match self {
            PolicyError::ExampleDidNotMatch { location, .. }
            | PolicyError::ExampleDidMatch { location, .. } => location.clone(),
            PolicyError::Starlark(err) => err.span().map(ErrorLocation::from_span),
            _ => None,
        }
    }
}

/// Errors of loading rules from disk: the file or folder that failed and why.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("failed to read rules files from {dir}: {source}")]
    ReadDir { dir: String, source: std::io::Error },
    #[error("failed to read rules file {path}: {source}")]
    ReadFile {
        path: String,
        source: std::io::Error,
    },
    #[error("failed to parse rules file {path}: {source}")]
    Parse { path: String, source: PolicyError },
}

impl LoadError {
    /// The one-line form people see first: `PATH:LINE: MESSAGE (problem is on or around line LINE)`
    /// for parse errors (the reference's `format_exec_policy_error_with_source`), the plain message
    /// otherwise.
    pub fn display_line(&self) -> String {
        match self.located() {
            (Some((file, line)), message) => {
                format!("{file}:{line}: {message} (problem is on or around line {line})")
            }
            (None, message) => match self {
                LoadError::Parse { path, .. } => format!("{path}: {message}"),
                _ => message,
            },
        }
    }

    /// Where the error points (file and 1-based line), when it points somewhere, and the one
    /// line that says what is wrong: what [`LoadError::display_line`] and the CLI's JSON
    /// errors are made of.
    pub fn located(&self) -> (Option<(String, usize)>, String) {
        let LoadError::Parse { source, .. } = self else {
            return (None, self.to_string());
        };
        let rendered = source.to_string();
        let structured = source.location().map(|loc| (loc.path, loc.start.line));
        let parsed = line_from_rendered_message(&rendered);
        // A builtin error can carry line 1 while the traceback names the real call further down.
        let location = match (structured, parsed) {
            (Some((_, 1)), Some(parsed)) if parsed.1 > 1 => Some(parsed),
            (Some(structured), _) => Some(structured),
            (None, parsed) => parsed,
        };
        (location, message_for_display(&rendered))
    }
}

/// The first line that reads `error: …`, else what follows `: starlark error: `, else the first
/// line: the one line of a multi-line Starlark diagnostic that says what is wrong.
fn message_for_display(rendered: &str) -> String {
    if let Some(line) = rendered
        .lines()
        .find(|line| line.trim_start().starts_with("error: "))
    {
        return line.trim_start().to_string();
    }
    let first = rendered.lines().next().unwrap_or_default();
    if let Some((_, rest)) = first.rsplit_once(": starlark error: ") {
        return rest.trim().to_string();
    }
    first.trim().to_string()
}

/// Reads `PATH:LINE:COL: starlark error:` or a ` --> PATH:LINE:COL` diagnostic pointer.
fn line_from_rendered_message(rendered: &str) -> Option<(String, usize)> {
    let first = rendered.lines().next()?;
    if let Some((prefix, _)) = first.split_once(": starlark error:")
        && let Some(found) = split_path_line_col(prefix)
    {
        return Some(found);
    }
    rendered
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("--> "))
        .and_then(|pointer| split_path_line_col(pointer.trim()))
}

fn split_path_line_col(text: &str) -> Option<(String, usize)> {
    let mut parts = text.rsplitn(3, ':');
    let _column: usize = parts.next()?.trim().parse().ok()?;
    let line: usize = parts.next()?.trim().parse().ok()?;
    let path = parts.next()?;
    (!path.is_empty()).then(|| (path.to_string(), line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_message_prefers_error_line() {
        let rendered = "error: invalid decision: deny\n --> r.rules:5:1\n  |\n5 | prefix_rule()\n";
        assert_eq!(
            message_for_display(rendered),
            "error: invalid decision: deny"
        );
        assert_eq!(
            line_from_rendered_message(rendered),
            Some(("r.rules".to_string(), 5))
        );
    }

    #[test]
    fn display_message_falls_back_to_starlark_prefix_then_first_line() {
        assert_eq!(
            message_for_display("a.rules:3:1: starlark error: boom\nmore"),
            "boom"
        );
        assert_eq!(
            line_from_rendered_message("a.rules:3:1: starlark error: boom"),
            Some(("a.rules".to_string(), 3))
        );
        assert_eq!(message_for_display("  plain\nsecond"), "plain");
    }
}
