//! Shell wrappers: what policy evaluation sees for one argv (docs/policy-language.md §4).
//!
//! Agents usually run commands as `bash -lc "<script>"`. A rule on `rm` should still catch
//! `bash -lc "ls && rm -rf x"`, so a wrapper whose script is a plain sequence of word-only commands
//! is split into those commands. Anything the split cannot prove harmless to take apart
//! (redirections, expansions, subshells, control flow, ...) is refused, and the argv is then
//! matched as it stands, except for the narrow heredoc reduction of step 2.

use std::ops::Range;
use std::path::Path;

use tree_sitter::{Node, Parser, Tree};

/// What policy evaluation sees for one argv (§4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPolicyCommands {
    /// The commands to evaluate separately; the strongest decision wins.
    pub commands: Vec<Vec<String>>,
    /// True when the heredoc reduction produced `commands`: the result is then only an
    /// approximation of the script, so no amendment may be derived from it.
    pub used_complex_parsing: bool,
}

/// §4: plain split of `[bash|zsh|sh (or a path whose file stem is one), -c|-lc, script]`, then the
/// heredoc reduction, else `[argv]` unchanged.
pub fn commands_for_exec_policy(argv: &[String]) -> ExecPolicyCommands {
    split_wrapper(argv, HeredocBodies::Ignored)
}

/// Which heredoc bodies the reduction (step 2) may leave unread.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HeredocBodies {
    /// The reference's: every body.
    Ignored,
    /// Only the body of a quoted delimiter (`<<'EOF'`), which bash does not expand; a `$`, a
    /// backtick or a backslash-newline anywhere else in the script refuses the reduction.
    OnlyQuoted,
}

/// The deepest nesting of `bash|zsh|sh -c|-lc` scripts [`agent_commands`] opens.
pub const MAX_NESTED_SHELLS: usize = 8;

/// What the agent hook evaluates for one Bash tool call's script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommands {
    pub commands: Vec<Vec<String>>,
    /// A shell wrapper nested deeper than [`MAX_NESTED_SHELLS`] is among `commands`, unopened:
    /// no allow may cover the script.
    pub too_deep: bool,
}

/// The commands bash runs for `bash -c SCRIPT`, read more strictly than §4 because an allow is
/// answered from them: a heredoc is reduced only when bash expands nothing in the script
/// ([`HeredocBodies::OnlyQuoted`]), and a command that is itself `bash|zsh|sh -c|-lc SCRIPT` is
/// split again as the top is, [`MAX_NESTED_SHELLS`] deep. A nested script holding a backslash
/// stays whole: the split keeps backslashes (`"a\"b"` → `a\"b`), so it would read a script other
/// than the one bash runs.
pub fn agent_commands(script: &str) -> AgentCommands {
    let mut found = AgentCommands {
        commands: Vec::new(),
        too_deep: false,
    };
    let argv = ["bash", "-c", script].map(String::from);
    collect_agent_commands(&argv, 0, &mut found);
    found
}

fn collect_agent_commands(argv: &[String], depth: usize, found: &mut AgentCommands) {
    for command in split_wrapper(argv, HeredocBodies::OnlyQuoted).commands {
        let nested = command != argv
            && wrapped_script(&command).is_some_and(|script| !script.contains('\\'));
        if !nested {
            found.commands.push(command);
        } else if depth == MAX_NESTED_SHELLS {
            found.too_deep = true;
            found.commands.push(command);
        } else {
            collect_agent_commands(&command, depth + 1, found);
        }
    }
}

/// Steps 1 to 3 of §4, with `bodies` for the heredoc reduction.
fn split_wrapper(argv: &[String], bodies: HeredocBodies) -> ExecPolicyCommands {
    let unchanged = || ExecPolicyCommands {
        commands: vec![argv.to_vec()],
        used_complex_parsing: false,
    };
    let Some(script) = wrapped_script(argv) else {
        return unchanged();
    };
    // One parse serves both the plain split and the heredoc reduction.
    let Some(tree) = parse_bash(script).filter(|tree| !tree.root_node().has_error()) else {
        return unchanged();
    };
    if let Some(commands) = split_plain_tree(&tree, script).filter(|c| !c.is_empty()) {
        return ExecPolicyCommands {
            commands,
            used_complex_parsing: false,
        };
    }
    if let Some(command) = reduce_heredoc_tree(&tree, script, bodies) {
        return ExecPolicyCommands {
            commands: vec![command],
            used_complex_parsing: true,
        };
    }
    unchanged()
}

/// The plain split alone (step 1): Some(commands) only when argv is a recognised shell wrapper
/// whose script is plainly splittable into a non-empty list of commands.
pub fn split_plain_shell_wrapper(argv: &[String]) -> Option<Vec<Vec<String>>> {
    let script = wrapped_script(argv)?;
    // An empty or whitespace-only script yields no commands; callers then fall through.
    split_plain_script(script).filter(|commands| !commands.is_empty())
}

/// Parses one script with the plain-split rules; None if refused.
///
/// An empty or whitespace-only script is not refused: it yields `Some(vec![])`.
pub fn split_plain_script(script: &str) -> Option<Vec<Vec<String>>> {
    let tree = parse_bash(script)?;
    if tree.root_node().has_error() {
        return None;
    }
    split_plain_tree(&tree, script)
}

/// The plain split of an already parsed, error-free script.
fn split_plain_tree(tree: &Tree, script: &str) -> Option<Vec<Vec<String>>> {
    let root = tree.root_node();
    let mut command_nodes = Vec::new();
    for node in all_nodes(root) {
        if node.is_named() {
            if !PLAIN_NAMED_KINDS.contains(&node.kind()) {
                return None;
            }
            if node.kind() == "command" {
                command_nodes.push(node);
            }
        } else if !is_plain_anonymous_token(node.kind()) {
            return None;
        }
    }

    // Policy evaluation reports commands in the order the script runs them.
    command_nodes.sort_by_key(Node::start_byte);
    command_nodes
        .into_iter()
        .map(|command| plain_command_argv(command, script))
        .collect()
}

/// Named node kinds a plainly splittable script may contain; anything else (redirections,
/// expansions, assignments, comments, subshells, control flow, ...) refuses the split.
const PLAIN_NAMED_KINDS: &[&str] = &[
    "program",
    "list",
    "pipeline",
    "command",
    "command_name",
    "word",
    "number",
    "concatenation",
    "string",
    "string_content",
    "raw_string",
];

/// Operators that only sequence or pipe commands, so splitting around them loses nothing.
const PLAIN_OPERATORS: &[&str] = &["&&", "||", ";", "|"];

/// Anonymous tokens allowed in a plain script: the sequencing operators, quotes and whitespace.
/// Any other token containing `&`, `;` or `|` (`&`, `|&`, `;;`, ...) or any other punctuation
/// (`!`, `(`, `{`, `>`, `$`, backtick, keywords, ...) refuses the split.
fn is_plain_anonymous_token(kind: &str) -> bool {
    if PLAIN_OPERATORS.contains(&kind) {
        return true;
    }
    if kind.contains(['&', ';', '|']) {
        return false;
    }
    kind == "\"" || kind == "'" || kind.trim().is_empty()
}

/// One `command` node of a plain script as an argv; None if a part is not a literal.
fn plain_command_argv(command: Node<'_>, src: &str) -> Option<Vec<String>> {
    let mut argv = Vec::new();
    let mut cursor = command.walk();
    for child in command.named_children(&mut cursor) {
        let token = match child.kind() {
            // The program name must be a bare word: `"ls"` or `123` in that position is refused.
            "command_name" => {
                let name = child.named_child(0)?;
                if name.kind() != "word" {
                    return None;
                }
                node_text(name, src)?.to_owned()
            }
            "word" | "number" => node_text(child, src)?.to_owned(),
            "string" => double_quoted_contents(child, src)?,
            "raw_string" => single_quoted_contents(child, src)?,
            "concatenation" => concatenated_parts(child, src)?,
            _ => return None,
        };
        argv.push(token);
    }
    Some(argv)
}

/// Glues the parts of a concatenation (`-g"*.py"` → `-g*.py`); an empty result is refused.
fn concatenated_parts(concatenation: Node<'_>, src: &str) -> Option<String> {
    let mut glued = String::new();
    let mut cursor = concatenation.walk();
    for part in concatenation.named_children(&mut cursor) {
        match part.kind() {
            "word" | "number" => glued.push_str(node_text(part, src)?),
            "string" => glued.push_str(&double_quoted_contents(part, src)?),
            "raw_string" => glued.push_str(&single_quoted_contents(part, src)?),
            _ => return None,
        }
    }
    if glued.is_empty() { None } else { Some(glued) }
}

/// A `"..."` string holding only plain content, without its quotes. The text between the quotes is
/// taken as written: backslashes are not unescaped (`"a\"b"` → `a\"b`).
fn double_quoted_contents(string: Node<'_>, src: &str) -> Option<String> {
    let mut cursor = string.walk();
    if string
        .named_children(&mut cursor)
        .any(|part| part.kind() != "string_content")
    {
        return None;
    }
    let text = node_text(string, src)?;
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    Some(inner.to_owned())
}

/// A `'...'` string without its quotes.
fn single_quoted_contents(raw_string: Node<'_>, src: &str) -> Option<String> {
    let text = node_text(raw_string, src)?;
    let inner = text.strip_prefix('\'')?.strip_suffix('\'')?;
    Some(inner.to_owned())
}

/// Step 2, on the parsed script of `[shell, -c|-lc, "cmd args <<EOF ... EOF"]`: the argv of that
/// single command, so a rule on `python3` still sees `python3 <<'PY' ... PY`. None unless every
/// §4 condition holds.
fn reduce_heredoc_tree(tree: &Tree, script: &str, bodies: HeredocBodies) -> Option<Vec<String>> {
    let root = tree.root_node();
    let named = named_nodes(root);
    if !named.iter().any(|node| node.kind() == "heredoc_redirect") {
        return None;
    }
    if bodies == HeredocBodies::OnlyQuoted && expands_outside_quoted_bodies(&named, script) {
        return None;
    }
    // Other redirects may write files, which the executable prefix alone would hide.
    if named.iter().any(|node| node.kind() == "file_redirect") {
        return None;
    }
    let mut commands = named.into_iter().filter(|node| node.kind() == "command");
    let command = commands.next()?;
    if commands.next().is_some() {
        return None;
    }
    heredoc_command_argv(command, script)
}

/// The literal words of the single heredoc command; heredoc and here-string attachments and
/// comments are skipped, anything else (assignments, strings, expansions) refuses the reduction.
fn heredoc_command_argv(command: Node<'_>, src: &str) -> Option<Vec<String>> {
    let mut argv = Vec::new();
    let mut cursor = command.walk();
    for child in command.named_children(&mut cursor) {
        match child.kind() {
            "command_name" => {
                let name = child.named_child(0)?;
                if !is_literal_word(name) {
                    return None;
                }
                argv.push(node_text(name, src)?.to_owned());
            }
            "word" | "number" => {
                if !is_literal_word(child) {
                    return None;
                }
                argv.push(node_text(child, src)?.to_owned());
            }
            "comment"
            | "heredoc_body"
            | "simple_heredoc_body"
            | "heredoc_redirect"
            | "herestring_redirect"
            | "redirected_statement" => {}
            _ => return None,
        }
    }
    if argv.is_empty() { None } else { Some(argv) }
}

/// True when bash may expand part of the script: a `$`, a backtick or a backslash-newline (which
/// joins `$\` + newline and `(cmd)` into `$(cmd)`) outside the bodies of quoted delimiters; or
/// when a heredoc's body is not where bash reads it ([`heredoc_body`]).
fn expands_outside_quoted_bodies(named: &[Node<'_>], script: &str) -> bool {
    let mut unread = Vec::new();
    for redirect in named
        .iter()
        .filter(|node| node.kind() == "heredoc_redirect")
    {
        match heredoc_body(*redirect, script) {
            Some((body, true)) => unread.push(body),
            Some((_, false)) => {}
            None => return true,
        }
    }
    unread.sort_by_key(|range| range.start);
    let expands = |text: &str| text.contains(['$', '`']) || text.contains("\\\n");
    // A range that is not text of the script (overlapping bodies) counts as expanded.
    let outside_expands = |range: Range<usize>| script.get(range).is_none_or(expands);
    let mut at = 0;
    for body in unread {
        if body.start < at || outside_expands(at..body.start) {
            return true;
        }
        at = body.end;
    }
    outside_expands(at..script.len())
}

/// A heredoc's body as bash reads it, and whether its delimiter is quoted (bash then expands
/// nothing in it). None unless the delimiter is a word of letters, digits and `_`, bare or
/// quoted as a whole (`'EOF'`, `"EOF"`, `\EOF`), the body starts a line, and bash's end (the
/// first line that is the delimiter, after leading tabs for `<<-`) is where tree-sitter ended it:
/// else commands bash runs after the end could hide in what tree-sitter calls the body.
fn heredoc_body(redirect: Node<'_>, script: &str) -> Option<(Range<usize>, bool)> {
    let child = |kind: &str| {
        let mut cursor = redirect.walk();
        redirect
            .named_children(&mut cursor)
            .find(|node| node.kind() == kind)
    };
    let (start, body, end) = (
        child("heredoc_start")?,
        child("heredoc_body")?,
        child("heredoc_end")?,
    );
    let (delimiter, quoted) = heredoc_delimiter(node_text(start, script)?)?;
    let strip_tabs = node_text(redirect, script)?.starts_with("<<-");
    let is_delimiter = |line: &str| {
        let line = if strip_tabs {
            line.trim_start_matches('\t')
        } else {
            line
        };
        line == delimiter
    };
    // Tree-sitter starts a `<<-` body after the tabs that bash strips.
    let before_body = script.get(..body.start_byte())?;
    let before_body = if strip_tabs {
        before_body.trim_end_matches('\t')
    } else {
        before_body
    };
    if !before_body.ends_with('\n') {
        return None;
    }
    let lines: Vec<&str> = script
        .get(body.start_byte()..end.end_byte())?
        .split('\n')
        .collect();
    let (last, before) = lines.split_last()?;
    (is_delimiter(last) && !before.iter().any(|line| is_delimiter(line)))
        .then(|| (body.byte_range(), quoted))
}

/// The word a heredoc's delimiter ends at, and whether it is quoted: `EOF`, or `'EOF'`, `"EOF"`,
/// `\EOF` quoted as a whole. None for any other form.
fn heredoc_delimiter(start: &str) -> Option<(&str, bool)> {
    let quoted = start
        .strip_prefix('\'')
        .and_then(|rest| rest.strip_suffix('\''))
        .or_else(|| {
            start
                .strip_prefix('"')
                .and_then(|rest| rest.strip_suffix('"'))
        })
        .or_else(|| start.strip_prefix('\\'));
    let word = quoted.unwrap_or(start);
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    plain.then_some((word, quoted.is_some()))
}

/// A word or number with no expansion nodes inside it.
fn is_literal_word(node: Node<'_>) -> bool {
    matches!(node.kind(), "word" | "number") && node.named_child_count() == 0
}

/// The script of `[shell, -c|-lc, script]` when `shell` is bash, zsh or sh. Other forms
/// (`bash -l -c x`, `-cl`, extra arguments) are not unwrapped.
fn wrapped_script(argv: &[String]) -> Option<&str> {
    let [shell, flag, script] = argv else {
        return None;
    };
    if matches!(flag.as_str(), "-c" | "-lc") && is_unwrappable_shell(shell) {
        Some(script)
    } else {
        None
    }
}

/// bash, zsh or sh, by exact name or by file stem (`/bin/bash`, `bash.exe`). The stem is taken
/// repeatedly until it stops changing, so `bash.exe.exe` counts too; `dash`, `fish`, `ksh` do not.
fn is_unwrappable_shell(shell: &str) -> bool {
    let mut name = Path::new(shell);
    loop {
        if matches!(name.to_str(), Some("bash" | "zsh" | "sh")) {
            return true;
        }
        match name.file_stem() {
            Some(stem) if stem != name.as_os_str() => name = Path::new(stem),
            _ => return false,
        }
    }
}

/// Parses a script with tree-sitter-bash; None only if the grammar cannot be loaded, which then
/// refuses every split rather than guessing.
fn parse_bash(script: &str) -> Option<Tree> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .ok()?;
    parser.parse(script, None)
}

/// Every node under `root`, named and anonymous, in pre-order.
fn all_nodes(root: Node<'_>) -> Vec<Node<'_>> {
    descendants(root, |node, cursor| node.children(cursor).collect())
}

/// Every named node under `root` (including `root`), in pre-order.
fn named_nodes(root: Node<'_>) -> Vec<Node<'_>> {
    descendants(root, |node, cursor| node.named_children(cursor).collect())
}

/// Pre-order walk with an explicit stack, so deeply nested scripts cannot overflow the call stack.
fn descendants<'tree>(
    root: Node<'tree>,
    children: impl Fn(Node<'tree>, &mut tree_sitter::TreeCursor<'tree>) -> Vec<Node<'tree>>,
) -> Vec<Node<'tree>> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut cursor = root.walk();
    while let Some(node) = stack.pop() {
        out.push(node);
        stack.extend(children(node, &mut cursor).into_iter().rev());
    }
    out
}

fn node_text<'src>(node: Node<'_>, src: &'src str) -> Option<&'src str> {
    src.get(node.byte_range())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    fn commands(items: &[&[&str]]) -> Vec<Vec<String>> {
        items.iter().map(|command| strings(command)).collect()
    }

    fn wrapper(shell: &str, flag: &str, script: &str) -> Vec<String> {
        strings(&[shell, flag, script])
    }

    #[track_caller]
    fn assert_split(script: &str, expected: &[&[&str]]) {
        assert_eq!(
            split_plain_script(script),
            Some(commands(expected)),
            "script {script:?}"
        );
    }

    #[track_caller]
    fn assert_refused(script: &str) {
        assert_eq!(split_plain_script(script), None, "script {script:?}");
    }

    // ---- step 1: accepted forms ----

    #[test]
    fn splits_a_single_command() {
        assert_split("ls -1", &[&["ls", "-1"]]);
    }

    #[test]
    fn splits_on_every_plain_separator() {
        assert_split(
            "ls && pwd; echo 'hi there' | wc -l || true",
            &[
                &["ls"],
                &["pwd"],
                &["echo", "hi there"],
                &["wc", "-l"],
                &["true"],
            ],
        );
    }

    #[test]
    fn splits_on_newlines_and_accepts_a_trailing_semicolon() {
        assert_split("ls\npwd\n", &[&["ls"], &["pwd"]]);
        assert_split("ls;", &[&["ls"]]);
        assert_split("ls; pwd;", &[&["ls"], &["pwd"]]);
    }

    #[test]
    fn takes_quoted_strings_without_their_quotes() {
        assert_split("echo \"hello world\"", &[&["echo", "hello world"]]);
        assert_split("echo 'hi there'", &[&["echo", "hi there"]]);
        assert_split("echo \"\"", &[&["echo", ""]]);
        // Operator characters inside quotes are content, not operators.
        assert_split(
            "echo 'a;b' \"c|d\" 'e&&f'",
            &[&["echo", "a;b", "c|d", "e&&f"]],
        );
    }

    #[test]
    fn accepts_multi_line_double_quoted_strings() {
        assert_split(
            "git commit -m \"line1\nline2\"",
            &[&["git", "commit", "-m", "line1\nline2"]],
        );
    }

    #[test]
    fn takes_numbers_as_words() {
        assert_split("echo 123 456", &[&["echo", "123", "456"]]);
    }

    #[test]
    fn glues_concatenations() {
        assert_split(
            "rg -n \"foo\" -g\"*.py\"",
            &[&["rg", "-n", "foo", "-g*.py"]],
        );
        assert_split(
            "grep -n 'pattern' -g'*.txt'",
            &[&["grep", "-n", "pattern", "-g*.txt"]],
        );
        assert_split(
            r#"echo "/usr"'/'"local"/bin"#,
            &[&["echo", "/usr/local/bin"]],
        );
        assert_split(
            r#"echo '/usr'"/"'local'/bin"#,
            &[&["echo", "/usr/local/bin"]],
        );
    }

    #[test]
    fn keeps_globs_tilde_and_braces_literal() {
        assert_split("ls *.py", &[&["ls", "*.py"]]);
        assert_split("cat ~/x", &[&["cat", "~/x"]]);
        assert_split("echo {a,b}", &[&["echo", "{a,b}"]]);
    }

    #[test]
    fn does_not_unescape_backslashes() {
        assert_split(r"echo hi\ there", &[&["echo", r"hi\ there"]]);
        assert_split(r#"echo "a\"b""#, &[&["echo", r#"a\"b"#]]);
    }

    #[test]
    fn empty_or_whitespace_script_yields_no_commands() {
        assert_eq!(split_plain_script(""), Some(vec![]));
        assert_eq!(split_plain_script("  \n\t  "), Some(vec![]));
    }

    // ---- step 1: refused forms ----

    #[test]
    fn refuses_redirections() {
        for script in [
            "ls > out.txt",
            "ls 2>&1",
            "cat < in",
            "cat <<< hi",
            "ls >> log",
        ] {
            assert_refused(script);
        }
    }

    #[test]
    fn refuses_background_pipe_stderr_and_negation() {
        for script in ["ls &", "echo hi & echo bye", "ls |& wc", "! ls"] {
            assert_refused(script);
        }
    }

    #[test]
    fn refuses_subshells_and_groups() {
        for script in ["(ls)", "ls || (pwd && echo hi)", "{ ls; }"] {
            assert_refused(script);
        }
    }

    #[test]
    fn refuses_expansions_and_substitutions() {
        for script in [
            "echo $HOME",
            "echo ${HOME}",
            "echo \"$HOME\"",
            "echo \"hi ${USER}\"",
            "echo $(pwd)",
            "echo `pwd`",
            "echo \"$(pwd)\"",
            "rg -g\"$VAR\" pattern",
            "rg -g\"$(echo '*.py')\" pattern",
            "echo $'ansi'",
            "echo $((1+2))",
            "diff <(ls) <(ls)",
        ] {
            assert_refused(script);
        }
    }

    #[test]
    fn refuses_assignments() {
        assert_refused("FOO=bar ls");
        assert_refused("FOO=bar");
    }

    #[test]
    fn refuses_comments() {
        assert_refused("ls # list");
        assert_refused("# only a comment");
    }

    #[test]
    fn refuses_control_flow() {
        for script in [
            "if true; then ls; fi",
            "for f in a b; do echo $f; done",
            "for f in a b; do echo x; done",
            "while true; do ls; done",
            "case x in x) ls;; esac",
            "f() { ls; }",
        ] {
            assert_refused(script);
        }
    }

    #[test]
    fn refuses_empty_command_positions() {
        for script in ["ls &&", "&& ls", "ls ;; pwd", "ls | | wc", "ls ||", "; ls"] {
            assert_refused(script);
        }
    }

    #[test]
    fn refuses_a_non_word_program_name() {
        // The program position takes only a bare word.
        assert_refused("\"ls\" -l");
        assert_refused("'git status'");
        assert_refused("123 x");
    }

    #[test]
    fn refuses_an_empty_concatenation() {
        assert_refused("echo \"\"''");
    }

    // ---- step 1: wrapper recognition ----

    #[test]
    fn unwraps_every_recognised_shell_and_flag() {
        for shell in [
            "bash",
            "zsh",
            "sh",
            "/bin/bash",
            "/usr/bin/zsh",
            "/bin/sh",
            "/usr/local/bin/bash",
            "bash.exe",
            "zsh.exe",
        ] {
            for flag in ["-c", "-lc"] {
                assert_eq!(
                    split_plain_shell_wrapper(&wrapper(shell, flag, "ls && pwd")),
                    Some(commands(&[&["ls"], &["pwd"]])),
                    "{shell} {flag}"
                );
            }
        }
    }

    #[test]
    fn does_not_recognise_other_shells() {
        for shell in [
            "dash",
            "fish",
            "ksh",
            "/bin/dash",
            "bash5",
            "pwsh",
            "cmd",
            "",
        ] {
            assert_eq!(
                split_plain_shell_wrapper(&wrapper(shell, "-lc", "ls")),
                None,
                "{shell}"
            );
        }
    }

    #[test]
    fn does_not_unwrap_other_argv_shapes() {
        for argv in [
            strings(&["bash", "-l", "-c", "ls"]),
            strings(&["bash", "-cl", "ls"]),
            strings(&["bash", "-lc"]),
            strings(&["bash", "-lc", "git", "status"]),
            strings(&["bash", "--login", "ls"]),
            strings(&["bash", "ls"]),
            strings(&["bash"]),
            strings(&[]),
        ] {
            assert_eq!(split_plain_shell_wrapper(&argv), None, "{argv:?}");
        }
    }

    #[test]
    fn wrapper_with_empty_script_is_not_split() {
        assert_eq!(split_plain_shell_wrapper(&wrapper("bash", "-lc", "")), None);
        assert_eq!(
            split_plain_shell_wrapper(&wrapper("bash", "-lc", " \n ")),
            None
        );
    }

    // ---- commands_for_exec_policy ----

    #[test]
    fn plain_split_result_is_not_complex() {
        assert_eq!(
            commands_for_exec_policy(&wrapper("bash", "-lc", "ls && rm -rf x")),
            ExecPolicyCommands {
                commands: commands(&[&["ls"], &["rm", "-rf", "x"]]),
                used_complex_parsing: false,
            }
        );
    }

    #[test]
    fn non_wrapper_argv_is_kept() {
        let argv = strings(&["rm", "-rf", "x"]);
        assert_eq!(
            commands_for_exec_policy(&argv),
            ExecPolicyCommands {
                commands: vec![argv.clone()],
                used_complex_parsing: false,
            }
        );
    }

    #[test]
    fn unsplittable_script_is_kept_as_the_literal_argv() {
        for argv in [
            wrapper("bash", "-lc", "ls > out.txt"),
            wrapper("bash", "-lc", "echo $HOME"),
            wrapper("dash", "-c", "ls"),
            strings(&["bash", "-l", "-c", "ls"]),
        ] {
            assert_eq!(
                commands_for_exec_policy(&argv),
                ExecPolicyCommands {
                    commands: vec![argv.clone()],
                    used_complex_parsing: false,
                },
                "{argv:?}"
            );
        }
    }

    #[test]
    fn empty_or_whitespace_script_falls_through() {
        for script in ["", "  \n\t  "] {
            let argv = wrapper("bash", "-lc", script);
            assert_eq!(
                commands_for_exec_policy(&argv),
                ExecPolicyCommands {
                    commands: vec![argv.clone()],
                    used_complex_parsing: false,
                }
            );
        }
    }

    // ---- step 2: heredoc reduction ----

    #[track_caller]
    fn assert_heredoc(script: &str, expected: &[&str]) {
        assert_eq!(
            commands_for_exec_policy(&wrapper("bash", "-lc", script)),
            ExecPolicyCommands {
                commands: vec![strings(expected)],
                used_complex_parsing: true,
            },
            "script {script:?}"
        );
    }

    #[track_caller]
    fn assert_not_reduced(script: &str) {
        let argv = wrapper("bash", "-lc", script);
        assert_eq!(
            commands_for_exec_policy(&argv),
            ExecPolicyCommands {
                commands: vec![argv.clone()],
                used_complex_parsing: false,
            },
            "script {script:?}"
        );
    }

    #[test]
    fn heredoc_reduces_to_the_command_prefix() {
        assert_heredoc("python3 <<'PY'\nprint('hello')\nPY", &["python3"]);
        assert_heredoc("python3 << PY\nprint('hello')\nPY", &["python3"]);
        assert_heredoc("cat <<-EOF\n\thello\n\tEOF", &["cat"]);
        assert_heredoc(
            "python3 -u script.py 1 <<PY\nx\nPY",
            &["python3", "-u", "script.py", "1"],
        );
    }

    #[test]
    fn heredoc_reduction_works_for_every_recognised_wrapper() {
        let script = "python3 <<'PY'\nprint('hello')\nPY";
        for argv in [
            wrapper("zsh", "-lc", script),
            wrapper("sh", "-c", script),
            wrapper("/bin/bash", "-c", script),
        ] {
            assert_eq!(
                commands_for_exec_policy(&argv),
                ExecPolicyCommands {
                    commands: commands(&[&["python3"]]),
                    used_complex_parsing: true,
                }
            );
        }
    }

    #[test]
    fn heredoc_reduction_drops_a_bare_dash() {
        assert_heredoc("python3 -u - <<PY\nprint(1)\nPY", &["python3", "-u"]);
    }

    #[test]
    fn heredoc_reduction_ignores_comments_and_here_strings() {
        assert_heredoc("cat <<EOF # note\nhello\nEOF", &["cat"]);
        assert_heredoc("cat <<< hi <<EOF\nhello\nEOF", &["cat"]);
    }

    #[test]
    fn heredoc_reduction_requires_a_heredoc() {
        assert_not_reduced("cat <<< hi");
        assert_not_reduced("echo hello > /tmp/out.txt");
        assert_not_reduced("echo $((1<<2))");
    }

    #[test]
    fn heredoc_reduction_rejects_file_redirects() {
        assert_not_reduced("python3 <<'PY' > /tmp/out.txt\nprint('hello')\nPY");
        assert_not_reduced("python3 <<'PY' 2>&1\nprint('hello')\nPY");
    }

    #[test]
    fn heredoc_reduction_rejects_assignments() {
        assert_not_reduced("PATH=/tmp/evil:$PATH cat <<'EOF'\nhello\nEOF");
        assert_not_reduced("FOO=bar cat <<'EOF'\nhello\nEOF");
    }

    #[test]
    fn heredoc_reduction_needs_exactly_one_command() {
        assert_not_reduced("python3 <<'PY'\nprint('hello')\nPY\necho done");
        assert_not_reduced("cat <<EOF && ls\nx\nEOF");
        assert_not_reduced("python3 <<< \"$(rm -rf /)\" <<EOF\nx\nEOF");
    }

    #[test]
    fn heredoc_reduction_rejects_non_literal_words() {
        assert_not_reduced("python3 $((1<<2)) <<'PY'\nprint('hello')\nPY");
        assert_not_reduced("python3 \"$X\" <<'PY'\nprint('hello')\nPY");
        assert_not_reduced("python3 'quoted' <<'PY'\nprint('hello')\nPY");
        assert_not_reduced("$PY <<'PY'\nprint('hello')\nPY");
    }

    #[test]
    fn heredoc_reduction_rejects_parse_errors() {
        assert_not_reduced("python3 <<'PY'\nprint('hello')\nPY\n&&");
    }

    #[test]
    fn heredoc_reduction_needs_a_wrapper() {
        let argv = strings(&["bash", "-l", "-c", "python3 <<'PY'\nx\nPY"]);
        assert_eq!(
            commands_for_exec_policy(&argv),
            ExecPolicyCommands {
                commands: vec![argv.clone()],
                used_complex_parsing: false,
            }
        );
    }

    // ---- agent_commands: the hook's stricter split ----

    #[track_caller]
    fn assert_agent(script: &str, expected: &[&[&str]]) {
        assert_eq!(
            agent_commands(script),
            AgentCommands {
                commands: commands(expected),
                too_deep: false,
            },
            "script {script:?}"
        );
    }

    /// Bodies bash expands in an unquoted heredoc; the first two the reference reduces away.
    const EXPANDED_BODIES: &[&str] = &[
        "`touch /tmp/x`",
        "$\\\n(touch x)",
        "$(touch x)",
        "${VAR}",
        "$HOME",
        "a\\\nb",
    ];

    #[test]
    fn the_reference_reduces_a_heredoc_whose_body_bash_expands() {
        // What `guard check --split-shell` keeps (§4): tree-sitter finds no command in these.
        assert_heredoc("cat <<EOF\n`touch /tmp/x`\nEOF", &["cat"]);
        assert_heredoc("cat <<EOF\n$\\\n(touch x)\nEOF", &["cat"]);
        assert_heredoc("cat <<EOF\n${VAR}\nEOF", &["cat"]);
    }

    #[test]
    fn agent_split_keeps_a_heredoc_whose_body_bash_expands_whole() {
        for body in EXPANDED_BODIES {
            for head in ["cat <<EOF", "cat <<-EOF", "python3 - <<EOF"] {
                let script = format!("{head}\n{body}\nEOF");
                assert_agent(&script, &[&["bash", "-c", &script]]);
            }
        }
    }

    #[test]
    fn agent_split_reduces_a_heredoc_with_a_quoted_delimiter() {
        for body in EXPANDED_BODIES {
            for delimiter in ["'EOF'", "\"EOF\"", "\\EOF"] {
                let script = format!("cat <<{delimiter}\n{body}\nEOF");
                assert_agent(&script, &[&["cat"]]);
            }
            assert_agent(&format!("cat <<-'EOF'\n\t{body}\n\tEOF"), &[&["cat"]]);
        }
        // Nothing to expand: the unquoted delimiter reduces too.
        assert_agent("python3 <<PY\nprint('hello')\nPY", &[&["python3"]]);
    }

    #[test]
    fn agent_split_reads_the_script_as_bash_does_around_the_bodies() {
        // A here-string is expanded as well.
        let script = "cat <<< ${VAR} <<'EOF'\nx\nEOF";
        assert_heredoc(script, &["cat"]);
        assert_agent(script, &[&["bash", "-c", script]]);
        // Bash's end of the body is a line that is the delimiter; `\tEOF` is none for `<<`, so
        // bash reads on where tree-sitter stopped: the body is taken as expanded.
        for script in ["cat <<'EOF'\n$x\n\tEOF", "cat <<EOF\nx\n\tEOF"] {
            assert_heredoc(script, &["cat"]);
            assert_agent(script, &[&["bash", "-c", script]]);
        }
        // A partly quoted delimiter is not read as quoted.
        let script = "cat <<'E'OF\n$x\nEOF";
        assert_agent(script, &[&["bash", "-c", script]]);
    }

    #[test]
    fn agent_split_opens_nested_shells() {
        assert_agent("bash -lc 'git push'", &[&["git", "push"]]);
        assert_agent(
            "sh -c \"bash -c 'git push origin main'\"",
            &[&["git", "push", "origin", "main"]],
        );
        assert_agent(
            "ls && zsh -c 'git status; rm -rf x' | wc",
            &[&["ls"], &["git", "status"], &["rm", "-rf", "x"], &["wc"]],
        );
        // The reference matches the nested wrapper as it stands.
        assert_eq!(
            commands_for_exec_policy(&wrapper("bash", "-c", "bash -lc 'git push'")).commands,
            commands(&[&["bash", "-lc", "git push"]])
        );
        // Not a wrapper (four arguments, another shell): kept as it stands, as at the top.
        assert_agent(
            "bash -l -c 'git push'",
            &[&["bash", "-l", "-c", "git push"]],
        );
        assert_agent("dash -c 'git push'", &[&["dash", "-c", "git push"]]);
        // An unsplittable nested script is one command, as an unsplittable top one is.
        assert_agent("bash -c 'ls > x'", &[&["bash", "-c", "ls > x"]]);
    }

    #[test]
    fn agent_split_keeps_a_nested_script_with_a_backslash_whole() {
        // Bash unescapes `\``: the nested script runs `touch x`; read with its backslashes it
        // would be `git status` with two words.
        let script = "bash -c \"git status \\`touch x\\`\"";
        assert_agent(script, &[&["bash", "-c", "git status \\`touch x\\`"]]);
    }

    /// `bash -c '<script>'` `depth` times around `inner`, quoted without backslashes.
    fn nested(depth: usize, inner: &str) -> String {
        (0..depth).fold(inner.to_owned(), |script, _| {
            format!("bash -c '{}'", script.replace('\'', "'\"'\"'"))
        })
    }

    #[test]
    fn agent_split_opens_at_most_max_nested_shells() {
        assert_agent(&nested(MAX_NESTED_SHELLS, "git push"), &[&["git", "push"]]);
        let too_deep = nested(MAX_NESTED_SHELLS + 1, "git push");
        let found = agent_commands(&too_deep);
        assert!(found.too_deep);
        // The innermost wrapper is left unopened.
        assert_eq!(found.commands, commands(&[&["bash", "-c", "git push"]]));
    }
}
