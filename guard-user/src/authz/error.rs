//! What can go wrong reading an authorization policy or the facts of a request.

use std::path::PathBuf;

pub type Result<T, E = AuthzError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    /// JSON that does not parse, or parses into the wrong shape; serde_json's position and text.
    #[error("line {line}, column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    /// An [`AuthzError::Json`] inside a policy file: `FILE:LINE:COLUMN: MESSAGE`, the form editors
    /// jump to.
    #[error("{}:{line}:{column}: {message}", path.display())]
    File {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: cannot read the authorization policy: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "expected a JSON object of attributes, {{\"NAME\": \"VALUE\" or [\"VALUE\", ...], ...}}, not {found}"
    )]
    NotAnObject { found: &'static str },
    #[error("attribute \"{key}\": expected a string or a list of strings, not {found}")]
    AttributeValue { key: String, found: &'static str },
    /// `$sub` stands for the caller: an empty one would match any record whose owner is empty.
    #[error("\"sub\" is empty: a subject needs the caller's identity")]
    EmptySub,
}

impl AuthzError {
    /// serde_json's error split into its position and its text (its Display appends the
    /// position, which [`AuthzError::Json`] and [`AuthzError::File`] place themselves).
    pub(crate) fn json(err: &serde_json::Error) -> Self {
        let (line, column) = (err.line(), err.column());
        let text = err.to_string();
        let suffix = format!(" at line {line} column {column}");
        let message = text.strip_suffix(&suffix).unwrap_or(&text).to_string();
        AuthzError::Json {
            line,
            column,
            message,
        }
    }

    /// The same error, named after the file it came from.
    pub(crate) fn in_file(self, path: PathBuf) -> Self {
        match self {
            AuthzError::Json {
                line,
                column,
                message,
            } => AuthzError::File {
                path,
                line,
                column,
                message,
            },
            other => other,
        }
    }
}
