//! `rule_set(deny=[...], ask=[...], allow=[...])`: first-match lists of glob patterns over a
//! tool and its subject, the rule form agent tools use (`bash(rm -rf*)`, `read(*.env)`,
//! `write(.git/**)`).
//!
//! A pattern is `"tool"` or `"tool*"` (a glob on the tool's name alone, any subject or none),
//! `"tool(glob)"` (the tool-name glob and a glob on the subject) or `"*"` (everything). One set
//! is evaluated on its own: the first pattern that matches in `deny`, then `ask`, then `allow`
//! decides (forbidden, prompt, allow), else the set says nothing. Several sets (and the built-in
//! protected paths, [`super::protected`]) each give at most one decision, and those join every
//! other rule's under strongest-wins: an `allow` in one set never lifts a `deny` in another.
//!
//! Subjects are canonical text (see [`canonical_subject`]): a command line shell-quoted the way
//! `guard check` renders it, `host:port`, or an absolute, lexically normalised path. Path globs
//! follow gitignore habits; command and destination globs treat `/` as any other character.

use std::fmt;
use std::path::Path;

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};

use super::error::{PolicyError, Result};
use super::examples::render_example;
use super::paths::normalize_lexically;
use super::rule::{Decision, RuleMatch, RuleOrigin};

/// The tools a rule-set pattern can name, and what their subject is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tool {
    /// Running a program; the subject is its command line.
    Exec,
    /// Opening a connection; the subject is `host:port`.
    Connect,
    /// Reading a file; the subject is its absolute path.
    Read,
    /// Writing (creating, changing, removing) a file; the subject is its absolute path.
    Write,
}

/// How a tool's subject is matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SubjectKind {
    /// `*` matches anything, `/` and spaces included.
    Text,
    /// gitignore habits: `*` stops at `/`, `**` crosses folders.
    Path,
}

/// What the usage and load errors list as the accepted tool names.
pub const TOOL_NAMES: &str = "exec (also called bash), connect, read, write";

impl Tool {
    pub const ALL: [Tool; 4] = [Tool::Exec, Tool::Connect, Tool::Read, Tool::Write];

    /// The canonical name first, then the other names it answers to. `bash` is `exec` because
    /// people copy `bash(...)` rules from agent tools, where the shell tool runs commands.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Tool::Exec => &["exec", "bash"],
            Tool::Connect => &["connect"],
            Tool::Read => &["read"],
            Tool::Write => &["write"],
        }
    }

    pub fn name(self) -> &'static str {
        self.names()[0]
    }

    /// The tool called `name` (any of its names), exactly.
    pub fn parse(name: &str) -> Option<Tool> {
        Tool::ALL
            .into_iter()
            .find(|tool| tool.names().contains(&name))
    }

    fn subject_kind(self) -> SubjectKind {
        match self {
            Tool::Exec | Tool::Connect => SubjectKind::Text,
            Tool::Read | Tool::Write => SubjectKind::Path,
        }
    }
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The canonical subject of `raw` for `tool`, the text patterns are matched against:
/// - `exec`: the command line split like a shell would and shell-quoted again, as `guard check`
///   renders argv (so `rm  -rf  /` and `rm -rf /` are one subject);
/// - `connect`: `host:port` with the host in lower case;
/// - `read` / `write`: the path made absolute against `cwd` and lexically normalised (`..` and
///   `.` removed without following links).
pub fn canonical_subject(tool: Tool, raw: &str, cwd: &Path) -> std::result::Result<String, String> {
    match tool {
        Tool::Exec => shlex::split(raw)
            .map(|argv| render_example(&argv))
            .ok_or_else(|| format!("the command line {raw:?} has unbalanced quotes")),
        Tool::Connect => Ok(raw.trim().to_ascii_lowercase()),
        Tool::Read | Tool::Write => {
            if raw.is_empty() {
                return Err("a path cannot be empty".to_string());
            }
            let path = Path::new(raw);
            let absolute = if path.is_absolute() {
                path.to_path_buf()
            } else {
                cwd.join(path)
            };
            Ok(normalize_lexically(&absolute)
                .to_string_lossy()
                .into_owned())
        }
    }
}

/// The subject of an exec of `argv`: the command line as `guard check` renders it.
pub fn exec_subject(argv: &[String]) -> String {
    render_example(argv)
}

/// One pattern of a rule set, compiled.
#[derive(Clone, Debug)]
pub struct RuleSetPattern {
    /// As written.
    text: String,
    /// The tools whose name (or another name) the tool-name glob matches; never empty.
    tools: Vec<Tool>,
    /// `None` for a bare tool-name pattern, which matches any subject and none.
    subject: Option<SubjectGlob>,
}

/// A subject glob compiled for the kinds of subject its tools have.
#[derive(Clone, Debug)]
struct SubjectGlob {
    text: Option<GlobMatcher>,
    path: Option<GlobSet>,
}

impl RuleSetPattern {
    /// Parses one pattern string; the error says what is wrong and which forms are accepted.
    pub fn parse(raw: &str) -> Result<Self> {
        let invalid = |problem: String| {
            PolicyError::InvalidRule(format!(
                "rule_set pattern {raw:?} {problem}; the accepted forms are \"tool\", \"tool*\", \
                 \"tool(glob)\" and \"*\", where tool is one of {TOOL_NAMES}"
            ))
        };
        let (tool_glob, subject) = match raw.split_once('(') {
            None if raw.contains(')') => return Err(invalid("has `)` without `(`".into())),
            None => (raw, None),
            Some((tool, rest)) => {
                let subject = rest
                    .strip_suffix(')')
                    .ok_or_else(|| invalid("must end with `)`".into()))?;
                if subject.is_empty() {
                    return Err(invalid(
                        "has an empty subject glob (write the bare tool name to match any subject)"
                            .into(),
                    ));
                }
                (tool, Some(subject))
            }
        };
        if tool_glob.is_empty() {
            return Err(invalid("has no tool name".into()));
        }
        let tool_matcher = GlobBuilder::new(tool_glob)
            .build()
            .map_err(|err| invalid(format!("has an invalid tool-name glob: {}", err.kind())))?
            .compile_matcher();
        let tools: Vec<Tool> = Tool::ALL
            .into_iter()
            .filter(|tool| tool.names().iter().any(|name| tool_matcher.is_match(name)))
            .collect();
        if tools.is_empty() {
            return Err(invalid(format!("names no tool of guard's (`{tool_glob}`)")));
        }
        let subject = subject
            .map(|glob| SubjectGlob::compile(glob, &tools))
            .transpose()
            .map_err(|err| invalid(format!("has an invalid subject glob: {err}")))?;
        Ok(RuleSetPattern {
            text: raw.to_string(),
            tools,
            subject,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the tool-name glob covers `tool` (under any of its names).
    pub fn covers_tool(&self, tool: Tool) -> bool {
        self.tools.contains(&tool)
    }

    /// The subject glob as written (`.git/**` of `write(.git/**)`); `None` for a bare tool-name
    /// pattern, which matches every call of its tools.
    pub fn subject_glob(&self) -> Option<&str> {
        self.subject.as_ref()?;
        let (_, rest) = self.text.split_once('(')?;
        rest.strip_suffix(')')
    }

    /// Whether this pattern covers a call of `tool` with `subject` (canonical, see
    /// [`canonical_subject`]). A call with no subject matches only bare tool-name patterns:
    /// `bash(rm*)` cannot say anything about a call it has no command line for.
    pub fn matches(&self, tool: Tool, subject: Option<&str>) -> bool {
        if !self.tools.contains(&tool) {
            return false;
        }
        match (&self.subject, subject) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(glob), Some(subject)) => glob.matches(tool.subject_kind(), subject),
        }
    }
}

impl SubjectGlob {
    fn compile(glob: &str, tools: &[Tool]) -> std::result::Result<Self, String> {
        let needs = |kind| tools.iter().any(|tool| tool.subject_kind() == kind);
        let text = needs(SubjectKind::Text)
            .then(|| text_glob(glob).map(|glob| glob.compile_matcher()))
            .transpose()
            .map_err(|err| err.kind().to_string())?;
        let path = needs(SubjectKind::Path)
            .then(|| compile_path_glob(glob))
            .transpose()?;
        Ok(SubjectGlob { text, path })
    }

    fn matches(&self, kind: SubjectKind, subject: &str) -> bool {
        match kind {
            SubjectKind::Text => self.text.as_ref().is_some_and(|m| m.is_match(subject)),
            SubjectKind::Path => self.path.as_ref().is_some_and(|m| m.is_match(subject)),
        }
    }
}

/// A command or destination glob as the rule set compiles it: `*` matches anything, `/` and
/// spaces included. The kernel's pattern tables (`compile::dfa`) build from this glob's regex,
/// so both read a glob the same way.
pub fn text_glob(glob: &str) -> std::result::Result<globset::Glob, globset::Error> {
    GlobBuilder::new(glob).literal_separator(false).build()
}

/// The globs a path pattern stands for, gitignore-style, for absolute subjects:
/// - an absolute pattern is anchored at `/`;
/// - any other pattern matches below any folder, as if it began with `**/` (`*.env` is a file
///   name anywhere, `.git/**` is inside any `.git`);
/// - a pattern ending in `/**` also matches the folder itself, so removing or renaming the
///   folder is covered by the rule that covers its contents.
fn path_globs(glob: &str) -> Vec<String> {
    let anchored = if glob.starts_with('/') {
        glob.to_string()
    } else {
        format!("**/{}", glob.trim_start_matches("./"))
    };
    let mut globs = vec![anchored.clone()];
    if let Some(folder) = anchored.strip_suffix("/**")
        && !folder.is_empty()
    {
        globs.push(folder.to_string());
    }
    globs
}

/// The regexes of the globs a path pattern stands for ([`path_globs`]), as the kernel's path
/// tables (`compile::dfa`) build them, so both read a path glob the same way.
pub fn path_glob_regexes(glob: &str) -> std::result::Result<Vec<String>, String> {
    path_globs(glob)
        .iter()
        .map(|pattern| {
            GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map(|glob| glob.regex().to_string())
                .map_err(|err| err.kind().to_string())
        })
        .collect()
}

fn compile_path_glob(glob: &str) -> std::result::Result<GlobSet, String> {
    let mut set = GlobSetBuilder::new();
    for pattern in path_globs(glob) {
        let glob = GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .map_err(|err| err.kind().to_string())?;
        set.add(glob);
    }
    set.build().map_err(|err| err.kind().to_string())
}

/// One `rule_set(...)` call: its three lists in order, and where it was written.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    /// Checked first; a match is `forbidden`.
    pub deny: Vec<RuleSetPattern>,
    /// Checked second; a match is `prompt`.
    pub ask: Vec<RuleSetPattern>,
    /// Checked last; a match is `allow`.
    pub allow: Vec<RuleSetPattern>,
    pub origin: Option<RuleOrigin>,
}

/// What one rule set decided for a call, and the pattern that decided it.
#[derive(Clone, Copy, Debug)]
pub struct RuleSetDecision<'a> {
    pub decision: Decision,
    pub pattern: &'a RuleSetPattern,
    pub origin: Option<&'a RuleOrigin>,
}

impl RuleSetDecision<'_> {
    /// As one of the matches `guard check` reports.
    pub fn to_rule_match(&self) -> RuleMatch {
        RuleMatch::RuleSetMatch {
            pattern: self.pattern.text().to_string(),
            decision: self.decision,
            origin: self.origin.cloned(),
        }
    }
}

impl RuleSet {
    /// Parses the three lists of a `rule_set` call.
    pub fn parse(
        deny: &[&str],
        ask: &[&str],
        allow: &[&str],
        origin: Option<RuleOrigin>,
    ) -> Result<Self> {
        let parse_all = |raw: &[&str]| -> Result<Vec<RuleSetPattern>> {
            raw.iter().map(|text| RuleSetPattern::parse(text)).collect()
        };
        Ok(RuleSet {
            deny: parse_all(deny)?,
            ask: parse_all(ask)?,
            allow: parse_all(allow)?,
            origin,
        })
    }

    /// Whether no list holds a pattern (the set never decides anything).
    pub fn is_empty(&self) -> bool {
        self.deny.is_empty() && self.ask.is_empty() && self.allow.is_empty()
    }

    /// The tiers in the order they are checked, with the decision each gives.
    pub fn tiers(&self) -> [(Decision, &[RuleSetPattern]); 3] {
        [
            (Decision::Forbidden, &self.deny),
            (Decision::Prompt, &self.ask),
            (Decision::Allow, &self.allow),
        ]
    }

    /// The first pattern that matches in `deny`, then `ask`, then `allow`; `None` when no
    /// pattern of any list matches (the caller decides what that means).
    pub fn evaluate(&self, tool: Tool, subject: Option<&str>) -> Option<RuleSetDecision<'_>> {
        self.tiers().into_iter().find_map(|(decision, patterns)| {
            patterns
                .iter()
                .find(|pattern| pattern.matches(tool, subject))
                .map(|pattern| RuleSetDecision {
                    decision,
                    pattern,
                    origin: self.origin.as_ref(),
                })
        })
    }
}

/// Each set's own decision for the call, in the order given, combined by strongest-wins: the
/// strongest decision, and on a tie the earliest set's. `None` when no set decides.
pub fn strongest<'a>(
    sets: impl IntoIterator<Item = &'a RuleSet>,
    tool: Tool,
    subject: Option<&str>,
) -> Option<RuleSetDecision<'a>> {
    sets.into_iter()
        .filter_map(|set| set.evaluate(tool, subject))
        .fold(
            None,
            |kept: Option<RuleSetDecision<'a>>, found| match kept {
                Some(kept) if kept.decision >= found.decision => Some(kept),
                _ => Some(found),
            },
        )
}

#[cfg(test)]
#[path = "rule_set_tests.rs"]
mod tests;
