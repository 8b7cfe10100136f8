//! `guard hook claude-code` as Claude Code runs it: the hook's JSON on stdin, the answer on
//! stdout, the exit status Claude Code reads. The inputs are the examples of Claude Code's hooks
//! reference (https://code.claude.com/docs/en/hooks, "PreToolUse input": the common fields, the
//! Bash tool's `command`, `description`, `timeout`, `run_in_background`; and its guide's
//! `rm -rf /tmp/build`), decided with guard's policies.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::common::{Run, Sandbox};
use serde_json::{Value, json};

/// The README's policy.
const AGENT_RULES: &str = r#"prefix_rule(pattern = ["git", ["status", "log", "diff"]])
prefix_rule(pattern = ["git", "push"], decision = "prompt",
            justification = "pushes leave the machine")
prefix_rule(pattern = [["rm", "shred"], "-rf"], decision = "forbidden",
            justification = "deletes without asking")
prefix_rule(pattern = ["npm", "test"])
prefix_rule(pattern = ["ls"])
"#;

/// The reference's PreToolUse input for a Bash call, with `command` in it.
fn documented_bash_call(command: &str) -> Value {
    json!({
        "session_id": "abc123",
        "transcript_path": "/home/user/.claude/projects/my-project/00893aaf-19fa-41d2-8238-13269b9b3ca0.jsonl",
        "cwd": "/home/user/my-project",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {
            "command": command,
            "description": "Run test suite",
            "timeout": 120000,
            "run_in_background": false
        },
        "tool_use_id": "toolu_01ABC123"
    })
}

fn answer(decision: &str, reason: &str) -> Value {
    json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    }})
}

/// Runs `command` (a guard command line) with `stdin` written to it and closed.
fn run_with_stdin(mut command: Command, stdin: &[u8]) -> Run {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("start guard");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin)
        .expect("write the hook's input");
    let output = child.wait_with_output().expect("wait for guard");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

impl Sandbox {
    /// `guard hook claude-code [options...]` with `input` on stdin.
    fn hook(&self, options: &[&str], input: &[u8]) -> Run {
        let mut command = self.command();
        command.args(["hook", "claude-code"]).args(options);
        run_with_stdin(command, input)
    }

    /// The hook's answer for a documented Bash call of `script` under `rules`: exit 0 and the
    /// JSON printed, or `None` when it printed nothing.
    fn decide(&self, rules: &str, script: &str) -> Option<Value> {
        self.decide_with(rules, &[], script)
    }

    fn decide_with(&self, rules: &str, options: &[&str], script: &str) -> Option<Value> {
        let path = self.write("agent.rules", rules);
        let mut args = vec!["--rules", path.to_str().unwrap()];
        args.extend_from_slice(options);
        let input = documented_bash_call(script).to_string();
        let run = self.hook(&args, input.as_bytes());
        run.assert_success();
        (!run.stdout.is_empty()).then(|| run.one_json_line())
    }
}

#[test]
fn the_documented_examples_get_the_policys_decision_and_justification() {
    let sandbox = Sandbox::new();
    assert_eq!(
        sandbox.decide(AGENT_RULES, "npm test"),
        Some(answer("allow", "guard: the policy allows `npm test`"))
    );
    assert_eq!(
        sandbox.decide(AGENT_RULES, "rm -rf /tmp/build"),
        Some(answer(
            "deny",
            "guard: `rm -rf /tmp/build` rejected: deletes without asking"
        ))
    );
    assert_eq!(
        sandbox.decide(AGENT_RULES, "git push origin main"),
        Some(answer(
            "ask",
            "guard: `git push origin main` requires approval: pushes leave the machine"
        ))
    );
}

#[test]
fn a_script_is_decided_by_its_strictest_command() {
    let sandbox = Sandbox::new();
    assert_eq!(
        sandbox.decide(AGENT_RULES, "ls && rm -rf /"),
        Some(answer(
            "deny",
            "guard: `rm -rf /` rejected: deletes without asking"
        ))
    );
    assert_eq!(
        sandbox.decide(AGENT_RULES, "git status; git push origin main || ls"),
        Some(answer(
            "ask",
            "guard: `git push origin main` requires approval: pushes leave the machine"
        ))
    );
    // A prompt and a forbidden part: the forbidden one decides, whichever comes first.
    assert_eq!(
        sandbox.decide(AGENT_RULES, "git push && shred -rf x"),
        Some(answer(
            "deny",
            "guard: `shred -rf x` rejected: deletes without asking"
        ))
    );
    assert_eq!(
        sandbox.decide(AGENT_RULES, "git status && git diff | ls -l"),
        Some(answer(
            "allow",
            "guard: the policy allows `git status`, `git diff`, `ls -l`"
        ))
    );
}

#[test]
fn an_allow_must_hold_for_every_command_of_the_script() {
    let sandbox = Sandbox::new();
    // `make` has no rule: guard does not allow the script, Claude Code's permissions decide.
    assert_eq!(sandbox.decide(AGENT_RULES, "git status && make"), None);
    assert_eq!(sandbox.decide(AGENT_RULES, "make"), None);
    // A script the split cannot take apart is one command, `bash -c SCRIPT`, as under
    // `guard check --split-shell`: no rule names it.
    assert_eq!(sandbox.decide(AGENT_RULES, "ls > listing.txt"), None);
}

#[test]
fn commands_no_rule_matches_get_the_policys_unmatched_exec_or_the_fallback() {
    let sandbox = Sandbox::new();
    let strict = format!("{AGENT_RULES}enforcement(unmatched_exec = \"deny\")\n");
    assert_eq!(
        sandbox.decide(&strict, "ls && make"),
        Some(answer(
            "deny",
            "guard: `make` matches no rule, and the policy's \
             enforcement(unmatched_exec=\"forbidden\") refuses it"
        ))
    );
    let asking = format!("{AGENT_RULES}enforcement(unmatched_exec = \"prompt\")\n");
    assert_eq!(
        sandbox.decide(&asking, "make"),
        Some(answer(
            "ask",
            "guard: `make` matches no rule, and the policy's \
             enforcement(unmatched_exec=\"prompt\") asks for it"
        ))
    );
    // --fallback replaces the policy's default, as for `guard check`.
    assert_eq!(
        sandbox.decide_with(&strict, &["--fallback", "prompt"], "make"),
        Some(answer(
            "ask",
            "guard: `make` matches no rule, and --fallback prompt asks for it"
        ))
    );
    assert_eq!(
        sandbox.decide_with(AGENT_RULES, &["--fallback", "allow"], "ls && make"),
        Some(answer("allow", "guard: the policy allows `ls`, `make`"))
    );
}

#[test]
fn other_tools_get_no_answer() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("agent.rules", AGENT_RULES);
    // The reference's Write input.
    let write = json!({
        "session_id": "abc123",
        "transcript_path": "/home/user/.claude/projects/my-project/t.jsonl",
        "cwd": "/home/user/my-project",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": "/path/to/file.txt", "content": "file content"},
        "tool_use_id": "toolu_01ABC123"
    });
    let run = sandbox.hook(
        &["--rules", rules.to_str().unwrap()],
        write.to_string().as_bytes(),
    );
    run.assert_success();
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr, "");
}

#[test]
fn input_guard_cannot_read_is_a_non_blocking_error() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("agent.rules", AGENT_RULES);
    let rules = rules.to_str().unwrap();
    for (input, said) in [
        ("not json", "stdin is not a Claude Code hook call"),
        ("", "stdin is not a Claude Code hook call"),
        (
            r#"{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{}}"#,
            "the Bash call's tool_input has no command string",
        ),
        (
            r#"{"hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}"#,
            "this is a `PostToolUse` event; guard answers `PreToolUse` only",
        ),
    ] {
        let run = sandbox.hook(&["--rules", rules], input.as_bytes());
        // 1, not 2: Claude Code blocks a call on 2 and goes on after any other status.
        run.assert_code(1);
        assert_eq!(run.stdout, "", "no answer for {input:?}");
        assert!(
            run.stderr.starts_with("guard hook claude-code: ") && run.stderr.contains(said),
            "for {input:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn a_policy_that_does_not_load_blocks_the_call_and_names_the_line() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write(
        "broken.rules",
        "prefix_rule(pattern = [\"ls\"])\nprefix_rule(pattern = [\"git\"], decision = \"maybe\")\n",
    );
    let input = documented_bash_call("ls").to_string();
    let run = sandbox.hook(&["--rules", rules.to_str().unwrap()], input.as_bytes());
    run.assert_code(2);
    assert_eq!(run.stdout, "");
    assert!(
        run.first_stderr_line()
            .starts_with(&format!("{}:2: ", rules.display())),
        "{}",
        run.stderr
    );
}

#[test]
fn without_rules_it_reads_the_system_rules_else_the_embedded_default() {
    let sandbox = Sandbox::new();
    let input = documented_bash_call("git status && rm -rf /").to_string();
    // The embedded default (the sandbox's GUARD_SYSTEM_RULES does not exist).
    let run = sandbox.hook(&[], input.as_bytes());
    assert_eq!(
        run.json(),
        answer(
            "deny",
            "guard: `rm -rf /` rejected: recursive delete of / or the home folder"
        )
    );
    // A system rules folder replaces it.
    let system = sandbox.path().join("system-rules");
    sandbox.write(
        "system-rules/site.rules",
        "prefix_rule(pattern = [\"rm\"])\nprefix_rule(pattern = [\"git\"])\n",
    );
    let mut command = sandbox.command();
    command
        .env("GUARD_SYSTEM_RULES", &system)
        .args(["hook", "claude-code"]);
    let run = run_with_stdin(command, input.as_bytes());
    assert_eq!(
        run.json(),
        answer("allow", "guard: the policy allows `git status`, `rm -rf /`")
    );
}

/// Bodies of `cat <<EOF ... EOF` in which bash runs `touch pwned`: a backtick command, a
/// `$(...)`, and a `$(...)` whose `$` and `(` a backslash-newline joins.
const COMMAND_BODIES: &[&str] = &["`touch pwned`", "$(touch pwned)", "$\\\n(touch pwned)"];

/// Runs `script` with /bin/bash in a fresh folder of the sandbox; whether it made `pwned` there.
fn bash_makes_pwned(sandbox: &Sandbox, folder: &str, script: &str) -> bool {
    let dir = sandbox.path().join(folder);
    std::fs::create_dir(&dir).expect("make the folder");
    let status = Command::new("/bin/bash")
        .args(["-c", script])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .status()
        .expect("run /bin/bash");
    assert!(status.success(), "bash -c {script:?}: {status}");
    dir.join("pwned").exists()
}

#[test]
fn a_heredoc_whose_body_bash_runs_a_command_in_is_never_allowed() {
    let sandbox = Sandbox::new();
    let rules = "prefix_rule(pattern = [\"cat\"])\n";
    let asking = format!("{rules}enforcement(unmatched_exec = \"prompt\")\n");
    for (n, body) in COMMAND_BODIES.iter().enumerate() {
        let script = format!("cat <<EOF\n{body}\nEOF");
        // The attack is real: bash runs the command inside the body.
        assert!(
            bash_makes_pwned(&sandbox, &format!("unquoted-{n}"), &script),
            "{script:?}"
        );
        // Not allowed: no answer (Claude Code's permissions decide), or the policy's ask.
        assert_eq!(sandbox.decide(rules, &script), None, "{script:?}");
        let asked = sandbox.decide(&asking, &script).expect("an answer");
        assert_eq!(
            asked["hookSpecificOutput"]["permissionDecision"], "ask",
            "{script:?}"
        );
        // A quoted delimiter: bash runs nothing, and the heredoc is still reduced to `cat`.
        let quoted = format!("cat <<'EOF'\n{body}\nEOF");
        assert!(!bash_makes_pwned(&sandbox, &format!("quoted-{n}"), &quoted));
        assert_eq!(
            sandbox.decide(rules, &quoted),
            Some(answer("allow", "guard: the policy allows `cat`"))
        );
    }
    // A variable is expanded too (`${X:=...}` assigns, `${X@P}` runs a prompt expansion).
    assert_eq!(sandbox.decide(rules, "cat <<EOF\n${VAR}\nEOF"), None);
    assert_eq!(
        sandbox.decide(rules, "cat <<'EOF'\n${VAR}\nEOF"),
        Some(answer("allow", "guard: the policy allows `cat`"))
    );
}

#[test]
fn guard_check_split_shell_keeps_the_references_heredoc_reduction() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("agent.rules", "prefix_rule(pattern = [\"cat\"])\n");
    let script = "cat <<EOF\n`touch pwned`\nEOF";
    let run = sandbox.run([
        "check",
        "--json",
        "--rules",
        rules.to_str().unwrap(),
        "--split-shell",
        "--",
        "bash",
        "-c",
        script,
    ]);
    // §4 step 2 as the Codex CLI answers it; only the hook is stricter.
    assert_eq!(run.json()["commands"], json!([["cat"]]));
    assert_eq!(run.json()["decision"], "allow");
}

/// The README's policy with `git push` decided `push`.
fn push_rules(push: &str) -> String {
    format!(
        "prefix_rule(pattern = [\"git\", \"status\"])\n\
         prefix_rule(pattern = [\"git\", \"push\"], decision = \"{push}\",\n\
         justification = \"pushes leave the machine\")\n"
    )
}

/// `bash -c '<script>'` `depth` times around `inner`, quoted without backslashes.
fn nested(depth: usize, inner: &str) -> String {
    (0..depth).fold(inner.to_owned(), |script, _| {
        format!("bash -c '{}'", script.replace('\'', "'\"'\"'"))
    })
}

#[test]
fn nested_shell_scripts_are_decided_by_the_commands_inside() {
    let sandbox = Sandbox::new();
    let prompt = push_rules("prompt");
    let forbidden = push_rules("forbidden");
    assert_eq!(
        sandbox.decide(&prompt, "bash -lc 'git push'"),
        Some(answer(
            "ask",
            "guard: `git push` requires approval: pushes leave the machine"
        ))
    );
    let twice = "sh -c \"bash -c 'git push origin main'\"";
    assert_eq!(
        sandbox.decide(&prompt, twice),
        Some(answer(
            "ask",
            "guard: `git push origin main` requires approval: pushes leave the machine"
        ))
    );
    for script in ["bash -lc 'git push'", twice, &nested(8, "git push")] {
        assert_eq!(
            sandbox.decide(&forbidden, script).expect("an answer")["hookSpecificOutput"]["permissionDecision"],
            "deny",
            "{script:?}"
        );
    }
    // An allowed nested command is still allowed.
    assert_eq!(
        sandbox.decide(&prompt, "bash -lc 'git status'"),
        Some(answer("allow", "guard: the policy allows `git status`"))
    );
    // Past 8 nested shells guard does not look inside, and does not allow.
    assert_eq!(sandbox.decide(&prompt, &nested(9, "git status")), None);
    assert_eq!(
        sandbox.decide(&prompt, &nested(8, "git status")),
        Some(answer("allow", "guard: the policy allows `git status`"))
    );
}

#[test]
fn a_nested_script_with_a_backslash_is_not_looked_into() {
    let sandbox = Sandbox::new();
    let rules = "prefix_rule(pattern = [\"ls\"])\n";
    // Bash unescapes `\`` inside the double quotes, so the nested bash runs `touch pwned`.
    let script = "bash -c \"ls \\`touch pwned\\`\"";
    assert!(bash_makes_pwned(&sandbox, "nested", script));
    assert_eq!(sandbox.decide(rules, script), None);
    assert_eq!(
        sandbox.decide(rules, "bash -c 'ls -l'"),
        Some(answer("allow", "guard: the policy allows `ls -l`"))
    );
}
