//! `guard legacy check` end to end: every behaviour of the legacy engine (docs/policy-language.md §8) as the
//! binary reports it, with the built-in policy or small policies written for one behaviour.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::{Run, Sandbox, display};
use serde_json::{Value, json};

impl Sandbox {
    /// `guard legacy check [options...] -- argv...`.
    fn legacy(&self, options: &[&str], argv: &[&str]) -> Run {
        let mut args = vec!["legacy", "check"];
        args.extend_from_slice(options);
        args.push("--");
        args.extend_from_slice(argv);
        self.run(&args)
    }

    /// `guard legacy check --json [options...] -- argv...`, parsed (exit 0 asserted).
    fn legacy_json(&self, options: &[&str], argv: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(options);
        self.legacy(&all, argv).json()
    }

    /// Writes `source` as a policy file and checks `argv` against it, as JSON.
    fn legacy_with(&self, source: &str, argv: &[&str]) -> Value {
        let policy = display(&self.write("test.policy", source));
        self.legacy_json(&["--policy", &policy], argv)
    }
}

/// The error object of an `unverified` result.
#[track_caller]
fn unverified(result: &Value) -> &Value {
    assert_eq!(result["result"], "unverified", "{result}");
    assert!(result.get("exec").is_none(), "{result}");
    &result["error"]
}

#[track_caller]
fn arg_types(result: &Value) -> Vec<(u64, String, String)> {
    result["exec"]["args"]
        .as_array()
        .unwrap_or_else(|| panic!("no exec.args in {result}"))
        .iter()
        .map(|arg| {
            (
                arg["index"].as_u64().unwrap(),
                arg["type"].as_str().unwrap().to_string(),
                arg["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn triple(index: u64, kind: &str, value: &str) -> (u64, String, String) {
    (index, kind.to_string(), value.to_string())
}

// ---------------------------------------------------------------------------------------------
// The done-when example and the JSON shape
// ---------------------------------------------------------------------------------------------

#[test]
fn ls_al_is_unverified_with_unknown_option_under_the_default_policy() {
    let sandbox = Sandbox::new();
    assert_eq!(
        sandbox.legacy_json(&[], &["ls", "-al"]),
        json!({
            "result": "unverified",
            "error": {"type": "UnknownOption", "program": "ls", "option": "-al"},
        })
    );
    let out = sandbox.legacy(&[], &["ls", "-al"]);
    out.assert_success();
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next(), Some("unverified  ls -al"));
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("  error: UnknownOption: `ls` has no option `-al`"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("policy: <embedded>/default.policy"));
}

#[test]
fn a_safe_exec_reports_every_field_of_exec() {
    let sandbox = Sandbox::new();
    assert_eq!(
        sandbox.legacy_json(&[], &["head", "-n", "5", "-c", "10", "a.txt", "b.txt"]),
        json!({
            "result": "safe",
            "exec": {
                "program": "head",
                "flags": [],
                "opts": [
                    {"name": "-n", "value": "5", "type": "PositiveInteger"},
                    {"name": "-c", "value": "10", "type": "PositiveInteger"},
                ],
                "args": [
                    {"index": 4, "type": "ReadableFile", "value": "a.txt"},
                    {"index": 5, "type": "ReadableFile", "value": "b.txt"},
                ],
                "system_path": ["/bin/head", "/usr/bin/head"],
            },
        })
    );
}

#[test]
fn flags_are_listed_by_name_and_positionals_keep_their_index() {
    let sandbox = Sandbox::new();
    let result = sandbox.legacy_json(&[], &["ls", "-a", "src", "-l", "docs"]);
    assert_eq!(result["result"], "safe");
    assert_eq!(
        result["exec"]["flags"],
        json!([{"name": "-a"}, {"name": "-l"}])
    );
    assert_eq!(
        arg_types(&result),
        [
            triple(1, "ReadableFile", "src"),
            triple(3, "ReadableFile", "docs")
        ]
    );
}

#[test]
fn json_has_no_folder_check_without_folders_and_no_reason_unless_forbidden() {
    let sandbox = Sandbox::new();
    let result = sandbox.legacy_json(&["--cwd", "/"], &["cat", "x"]);
    assert_eq!(result["result"], "safe");
    assert!(result.get("folder_check").is_none(), "{result}");
    assert!(result.get("reason").is_none(), "{result}");
    assert!(result.get("error").is_none(), "{result}");
}

// ---------------------------------------------------------------------------------------------
// The ARG_* matchers and literals
// ---------------------------------------------------------------------------------------------

#[test]
fn arg_opaque_value_takes_exactly_one_unchecked_value() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='echo', args=[ARG_OPAQUE_VALUE])";
    let result = sandbox.legacy_with(policy, &["echo", ""]);
    assert_eq!(result["result"], "safe");
    assert_eq!(arg_types(&result), [triple(0, "OpaqueNonFile", "")]);
    assert_eq!(
        *unverified(&sandbox.legacy_with(policy, &["echo"])),
        json!({"type": "RangeEndOutOfBounds", "end": 1, "len": 0})
    );
    assert_eq!(
        unverified(&sandbox.legacy_with(policy, &["echo", "a", "b"]))["type"],
        "UnexpectedArguments"
    );
}

#[test]
fn arg_rfile_takes_one_named_file() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='wc', args=[ARG_RFILE])";
    let result = sandbox.legacy_with(policy, &["wc", "f"]);
    assert_eq!(result["result"], "safe");
    assert_eq!(arg_types(&result), [triple(0, "ReadableFile", "f")]);
    assert_eq!(
        *unverified(&sandbox.legacy_with(policy, &["wc", ""])),
        json!({"type": "EmptyFileName"})
    );
}

#[test]
fn arg_wfile_makes_a_match_not_safe() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='touch', args=[ARG_WFILE])";
    let result = sandbox.legacy_with(policy, &["touch", "out"]);
    assert_eq!(result["result"], "match");
    assert_eq!(arg_types(&result), [triple(0, "WriteableFile", "out")]);
    assert_eq!(
        *unverified(&sandbox.legacy_with(policy, &["touch", ""])),
        json!({"type": "EmptyFileName"})
    );
    let text = sandbox.legacy(&["--policy", "test.policy"], &["touch", "out"]);
    assert!(
        text.stdout.starts_with("match  touch out\n"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains("not safe: arg 0 `out` is WriteableFile"),
        "{}",
        text.stdout
    );
}

#[test]
fn arg_rfiles_takes_one_or_more() {
    let sandbox = Sandbox::new();
    let result = sandbox.legacy_json(&[], &["cat", "a", "b", "c"]);
    assert_eq!(
        arg_types(&result),
        [
            triple(0, "ReadableFile", "a"),
            triple(1, "ReadableFile", "b"),
            triple(2, "ReadableFile", "c")
        ]
    );
    assert_eq!(
        *unverified(&sandbox.legacy_json(&[], &["cat"])),
        json!({"type": "VarargMatcherDidNotMatchAnything", "program": "cat", "matcher": "ARG_RFILES"})
    );
    assert_eq!(
        *unverified(&sandbox.legacy_json(&[], &["cat", "a", ""])),
        json!({"type": "EmptyFileName"})
    );
}

#[test]
fn arg_rfiles_or_cwd_takes_zero_or_more() {
    let sandbox = Sandbox::new();
    let none = sandbox.legacy_json(&[], &["ls"]);
    assert_eq!(none["result"], "safe");
    assert_eq!(none["exec"]["args"], json!([]));
    let two = sandbox.legacy_json(&[], &["ls", "a", "b"]);
    assert_eq!(
        arg_types(&two),
        [
            triple(0, "ReadableFile", "a"),
            triple(1, "ReadableFile", "b")
        ]
    );
}

#[test]
fn arg_pos_int_is_a_plain_integer_above_zero() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='sleep', args=[ARG_POS_INT])";
    let result = sandbox.legacy_with(policy, &["sleep", "30"]);
    assert_eq!(arg_types(&result), [triple(0, "PositiveInteger", "30")]);
    for bad in ["0", "1.0", "+1", "x"] {
        assert_eq!(
            *unverified(&sandbox.legacy_with(policy, &["sleep", bad])),
            json!({"type": "InvalidPositiveInteger", "value": bad}),
            "{bad}"
        );
    }
}

#[test]
fn arg_sed_command_is_only_a_line_range_print() {
    let sandbox = Sandbox::new();
    let result = sandbox.legacy_json(&[], &["sed", "-n", "122,202p", "f"]);
    assert_eq!(result["result"], "safe");
    assert_eq!(
        arg_types(&result),
        [
            triple(1, "SedCommand", "122,202p"),
            triple(2, "ReadableFile", "f")
        ]
    );
    let policy = "define_program(program='sed', args=[ARG_SED_COMMAND])";
    for bad in ["5p", "1,2w out", "s/a/b/"] {
        assert_eq!(
            *unverified(&sandbox.legacy_with(policy, &["sed", bad])),
            json!({"type": "SedCommandNotProvablySafe", "command": bad}),
            "{bad}"
        );
    }
}

#[test]
fn arg_unverified_varargs_takes_anything_and_makes_a_match() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='make', args=[ARG_UNVERIFIED_VARARGS])";
    let empty = sandbox.legacy_with(policy, &["make"]);
    assert_eq!(empty["result"], "safe", "no argument, nothing unverified");
    let result = sandbox.legacy_with(policy, &["make", "all", ""]);
    assert_eq!(result["result"], "match");
    assert_eq!(
        arg_types(&result),
        [triple(0, "Unknown", "all"), triple(1, "Unknown", "")]
    );
}

#[test]
fn a_string_in_args_is_a_literal_that_must_be_equal() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='git', args=['status', ARG_RFILES_OR_CWD])";
    let result = sandbox.legacy_with(policy, &["git", "status", "src"]);
    assert_eq!(result["result"], "safe");
    assert_eq!(
        arg_types(&result),
        [
            triple(0, "Literal", "status"),
            triple(1, "ReadableFile", "src")
        ]
    );
    assert_eq!(
        *unverified(&sandbox.legacy_with(policy, &["git", "push"])),
        json!({"type": "LiteralValueDidNotMatch", "expected": "status", "actual": "push"})
    );
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

const RG_LIKE: &str = "define_program(program='grep', options=[flag('-i'), opt('-m', ARG_POS_INT), \
    opt('--max-count', ARG_POS_INT), opt('-e', ARG_OPAQUE_VALUE, required=True), \
    opt('-f', ARG_RFILE, required=True)], args=[ARG_RFILES_OR_CWD])";

#[test]
fn an_opt_takes_the_next_token_as_its_value_and_checks_it() {
    let sandbox = Sandbox::new();
    let result = sandbox.legacy_with(
        RG_LIKE,
        &["grep", "-i", "-m", "3", "-e", "x", "-f", "pats", "src"],
    );
    assert_eq!(result["result"], "safe", "{result}");
    assert_eq!(result["exec"]["flags"], json!([{"name": "-i"}]));
    assert_eq!(
        result["exec"]["opts"],
        json!([
            {"name": "-m", "value": "3", "type": "PositiveInteger"},
            {"name": "-e", "value": "x", "type": "OpaqueNonFile"},
            {"name": "-f", "value": "pats", "type": "ReadableFile"},
        ])
    );
    assert_eq!(arg_types(&result), [triple(7, "ReadableFile", "src")]);
    assert_eq!(
        *unverified(&sandbox.legacy_with(RG_LIKE, &["grep", "-m", "0", "-e", "x", "-f", "p"])),
        json!({"type": "InvalidPositiveInteger", "value": "0"})
    );
}

#[test]
fn an_opt_with_equals_is_not_split() {
    let sandbox = Sandbox::new();
    assert_eq!(
        *unverified(
            &sandbox.legacy_with(RG_LIKE, &["grep", "--max-count=1", "-e", "x", "-f", "p"])
        ),
        json!({"type": "UnknownOption", "program": "grep", "option": "--max-count=1"})
    );
    // The same value as the next token is read.
    let result = sandbox.legacy_with(RG_LIKE, &["grep", "--max-count", "1", "-e", "x", "-f", "p"]);
    assert_eq!(
        result["exec"]["opts"][0],
        json!({"name": "--max-count", "value": "1", "type": "PositiveInteger"})
    );
}

#[test]
fn unknown_options_include_bundles_and_a_lone_dash() {
    let sandbox = Sandbox::new();
    for option in ["-x", "-il", "-", "--ignore-case"] {
        assert_eq!(
            *unverified(&sandbox.legacy_with(RG_LIKE, &["grep", option])),
            json!({"type": "UnknownOption", "program": "grep", "option": option}),
            "{option}"
        );
    }
}

#[test]
fn an_opt_needs_a_value_that_is_not_an_option() {
    let sandbox = Sandbox::new();
    assert_eq!(
        *unverified(&sandbox.legacy_with(RG_LIKE, &["grep", "-m", "-i"])),
        json!({"type": "OptionFollowedByOptionInsteadOfValue", "program": "grep", "option": "-m", "value": "-i"})
    );
    assert_eq!(
        *unverified(&sandbox.legacy_with(RG_LIKE, &["grep", "-e", "x", "-m"])),
        json!({"type": "OptionMissingValue", "program": "grep", "option": "-m"})
    );
}

#[test]
fn double_dash_is_not_supported() {
    let sandbox = Sandbox::new();
    assert_eq!(
        *unverified(&sandbox.legacy_json(&[], &["cat", "--", "-n"])),
        json!({"type": "DoubleDashNotSupportedYet", "program": "cat"})
    );
}

#[test]
fn missing_required_options_are_listed_sorted() {
    let sandbox = Sandbox::new();
    assert_eq!(
        *unverified(&sandbox.legacy_with(RG_LIKE, &["grep", "-i", "src"])),
        json!({"type": "MissingRequiredOptions", "program": "grep", "options": ["-e", "-f"]})
    );
}

// ---------------------------------------------------------------------------------------------
// Positional patterns
// ---------------------------------------------------------------------------------------------

#[test]
fn patterns_after_the_vararg_take_the_last_arguments() {
    let sandbox = Sandbox::new();
    let result = sandbox.legacy_json(&[], &["cp", "a", "b", "dst"]);
    assert_eq!(result["result"], "match");
    assert_eq!(
        arg_types(&result),
        [
            triple(0, "ReadableFile", "a"),
            triple(1, "ReadableFile", "b"),
            triple(2, "WriteableFile", "dst")
        ]
    );
    assert_eq!(
        *unverified(&sandbox.legacy_json(&[], &["cp"])),
        json!({"type": "NotEnoughArgs", "program": "cp", "args": [], "arg_patterns": ["ARG_RFILES", "ARG_WFILE"]})
    );
    assert_eq!(
        unverified(&sandbox.legacy_json(&[], &["cp", "dst"]))["type"],
        "VarargMatcherDidNotMatchAnything"
    );
}

#[test]
fn leftover_arguments_are_unexpected() {
    let sandbox = Sandbox::new();
    assert_eq!(
        *unverified(&sandbox.legacy_json(&[], &["pwd", "-L", "here"])),
        json!({"type": "UnexpectedArguments", "program": "pwd", "args": [{"index": 1, "value": "here"}]})
    );
}

#[test]
fn head_and_tail_patterns_cannot_share_an_argument() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='p', args=['a', ARG_UNVERIFIED_VARARGS, ARG_WFILE])";
    assert_eq!(
        *unverified(&sandbox.legacy_with(policy, &["p", "a"])),
        json!({"type": "PrefixOverlapsSuffix"})
    );
}

#[test]
fn a_second_variadic_pattern_is_refused_when_checked() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='p', args=[ARG_RFILES, ARG_RFILES_OR_CWD])";
    assert_eq!(
        *unverified(&sandbox.legacy_with(policy, &["p", "a"])),
        json!({"type": "MultipleVarargPatterns", "program": "p", "first": "ARG_RFILES", "second": "ARG_RFILES_OR_CWD"})
    );
}

// ---------------------------------------------------------------------------------------------
// Programs, forbidden substrings and regexes
// ---------------------------------------------------------------------------------------------

#[test]
fn program_names_match_exactly() {
    let sandbox = Sandbox::new();
    for program in ["/bin/ls", "rm", "LS"] {
        assert_eq!(
            *unverified(&sandbox.legacy_json(&[], &[program])),
            json!({"type": "NoSpecForProgram", "program": program})
        );
    }
}

#[test]
fn the_first_spec_that_reads_the_exec_wins_else_the_last_error() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='p', args=[ARG_RFILE])\n\
                  define_program(program='p', args=[ARG_WFILE], forbidden='never')\n\
                  define_program(program='p', options=[flag('-x')], args=['x'])\n";
    // The first spec reads it: safe, although the second would forbid it.
    assert_eq!(sandbox.legacy_with(policy, &["p", "f"])["result"], "safe");
    // None reads it: the third spec's error.
    assert_eq!(
        *unverified(&sandbox.legacy_with(policy, &["p", "-y"])),
        json!({"type": "UnknownOption", "program": "p", "option": "-y"})
    );
    assert_eq!(
        *unverified(&sandbox.legacy_with(policy, &["p", "-x", "x", "b"])),
        json!({"type": "UnexpectedArguments", "program": "p", "args": [{"index": 2, "value": "b"}]})
    );
}

#[test]
fn a_forbidden_spec_that_matches_gives_its_reason_and_the_exec() {
    let sandbox = Sandbox::new();
    let policy =
        "define_program(program='shred', args=[ARG_WFILE], forbidden='shred destroys data')";
    let result = sandbox.legacy_with(policy, &["shred", "disk"]);
    assert_eq!(result["result"], "forbidden");
    assert_eq!(result["reason"], "shred destroys data");
    assert_eq!(arg_types(&result), [triple(0, "WriteableFile", "disk")]);
    // A forbidden spec that does not read the exec does not forbid it.
    assert_eq!(
        unverified(&sandbox.legacy_with(policy, &["shred"]))["type"],
        "RangeEndOutOfBounds"
    );
}

#[test]
fn forbidden_substrings_refuse_any_argument_containing_them() {
    let sandbox = Sandbox::new();
    let policy = "forbid_substrings(['secret', '/etc/shadow'])\n\
                  define_program(program='cat', args=[ARG_RFILES])\n";
    assert_eq!(
        sandbox.legacy_with(policy, &["cat", "ok", "/etc/shadow.bak"]),
        json!({"result": "forbidden", "reason": "arg `/etc/shadow.bak` contains forbidden substring"})
    );
    // Checked before the specs: an exec no spec reads is forbidden all the same.
    assert_eq!(
        sandbox.legacy_with(policy, &["vim", "--my-secret"])["result"],
        "forbidden"
    );
    // The program name is not an argument.
    assert_eq!(
        unverified(&sandbox.legacy_with(policy, &["secret"]))["type"],
        "NoSpecForProgram"
    );
}

#[test]
fn forbidden_program_regexes_search_the_name_and_come_first() {
    let sandbox = Sandbox::new();
    let policy = "forbid_program_regex('^(sudo|doas)$', 'no privilege escalation')\n\
                  forbid_program_regex('python', 'no interpreters')\n\
                  forbid_substrings(['x'])\n\
                  define_program(program='sudo', args=[ARG_UNVERIFIED_VARARGS])\n";
    assert_eq!(
        sandbox.legacy_with(policy, &["sudo", "x"]),
        json!({"result": "forbidden", "reason": "no privilege escalation"})
    );
    // Unanchored: found anywhere in the name, a path included.
    assert_eq!(
        sandbox.legacy_with(policy, &["/usr/bin/python3"])["reason"],
        "no interpreters"
    );
    // Anchored: `sudoedit` is not `sudo`.
    assert_eq!(
        unverified(&sandbox.legacy_with(policy, &["sudoedit"]))["type"],
        "NoSpecForProgram"
    );
    let text = sandbox.legacy(&["--policy", "test.policy"], &["doas", "sh"]);
    assert!(
        text.stdout
            .starts_with("forbidden  doas sh\n  reason: no privilege escalation\n"),
        "{}",
        text.stdout
    );
}

// ---------------------------------------------------------------------------------------------
// The folder check and system_path
// ---------------------------------------------------------------------------------------------

/// A policy for `cp` whose system_path is a missing file, a file without an x bit, then an
/// executable one, all in the sandbox.
fn fake_cp(sandbox: &Sandbox) -> (String, String) {
    let plain = sandbox.write("bin/plain-cp", "");
    let exe = sandbox.write("bin/cp", "#!/bin/sh\n");
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o744)).unwrap();
    let policy = format!(
        "define_program(program='cp', options=[opt('--backup-dir', ARG_WFILE), opt('--from', ARG_RFILE)],\n\
         args=[ARG_RFILES, ARG_WFILE],\n\
         system_path=['{missing}', '{plain}', '{exe}'])\n",
        missing = display(&sandbox.file("bin/missing")),
        plain = display(&plain),
        exe = display(&exe),
    );
    let path = display(&sandbox.write("cp.policy", &policy));
    (path, display(&exe))
}

#[test]
fn folder_check_ok_names_the_first_executable_on_system_path() {
    let sandbox = Sandbox::new();
    let (policy, exe) = fake_cp(&sandbox);
    let result = sandbox.legacy_json(
        &[
            "--policy",
            &policy,
            "--readable",
            "/src",
            "--writeable",
            "/dst",
        ],
        &["cp", "/src/a", "/src/sub/../b", "/dst/c"],
    );
    assert_eq!(result["result"], "match");
    assert_eq!(result["folder_check"], json!({"ok": exe}));
    let text = sandbox.legacy(
        &[
            "--policy",
            &policy,
            "--readable",
            "/src",
            "--writeable",
            "/dst",
        ],
        &["cp", "/src/a", "/dst/c"],
    );
    assert!(
        text.stdout.contains(&format!("folders: ok, runs {exe}\n")),
        "{}",
        text.stdout
    );
}

#[test]
fn folder_check_ok_falls_back_to_the_program_name() {
    let sandbox = Sandbox::new();
    let policy = "define_program(program='cat', args=[ARG_RFILES], system_path=['/no/such/cat'])";
    let result = sandbox.legacy_with(policy, &["cat", "/r/x"]);
    assert!(result.get("folder_check").is_none());
    let path = display(&sandbox.file("test.policy"));
    let checked = sandbox.legacy_json(&["--policy", &path, "--readable", "/r"], &["cat", "/r/x"]);
    assert_eq!(checked["folder_check"], json!({"ok": "cat"}));
    assert_eq!(checked["exec"]["system_path"], json!(["/no/such/cat"]));
}

#[test]
fn a_read_outside_the_readable_folders_is_refused_component_wise() {
    let sandbox = Sandbox::new();
    let result = sandbox.legacy_json(
        &["--readable", "/work", "--readable", "/opt"],
        &["cat", "/work2/x"],
    );
    assert_eq!(result["result"], "safe", "the classification stands");
    assert_eq!(
        result["folder_check"],
        json!({"type": "ReadablePathNotInReadableFolders", "file": "/work2/x", "folders": ["/work", "/opt"]})
    );
    // `..` is resolved before the comparison: it cannot climb out of the folder.
    assert_eq!(
        sandbox.legacy_json(&["--readable", "/work"], &["cat", "/work/../etc/passwd"])["folder_check"],
        json!({"type": "ReadablePathNotInReadableFolders", "file": "/etc/passwd", "folders": ["/work"]})
    );
    let text = sandbox.legacy(&["--readable", "/work"], &["cat", "/work2/x"]);
    assert!(
        text.stdout
            .contains("folders: ReadablePathNotInReadableFolders: `/work2/x` is read"),
        "{}",
        text.stdout
    );
}

#[test]
fn a_write_outside_the_writeable_folders_is_refused() {
    let sandbox = Sandbox::new();
    // Readable is not writeable.
    let result = sandbox.legacy_json(&["--readable", "/w"], &["cp", "/w/a", "/w/b"]);
    assert_eq!(
        result["folder_check"],
        json!({"type": "WriteablePathNotInWriteableFolders", "file": "/w/b", "folders": []})
    );
    let ok = sandbox.legacy_json(
        &["--readable", "/w", "--writeable", "/w"],
        &["cp", "/w/a", "/w/b"],
    );
    assert!(ok["folder_check"]["ok"].is_string(), "{ok}");
}

#[test]
fn args_are_checked_before_opts() {
    let sandbox = Sandbox::new();
    let (policy, _) = fake_cp(&sandbox);
    // The opt's file (checked last) and the first arg are both outside; the arg is reported.
    let result = sandbox.legacy_json(
        &["--policy", &policy, "--readable", "/r", "--writeable", "/w"],
        &["cp", "--backup-dir", "/elsewhere/bak", "/outside/a", "/w/b"],
    );
    assert_eq!(result["folder_check"]["file"], "/outside/a", "{result}");
    // With the args inside, the opt is checked too.
    let result = sandbox.legacy_json(
        &["--policy", &policy, "--readable", "/r", "--writeable", "/w"],
        &["cp", "--from", "/etc/x", "/r/a", "/w/b"],
    );
    assert_eq!(
        result["folder_check"],
        json!({"type": "ReadablePathNotInReadableFolders", "file": "/etc/x", "folders": ["/r"]})
    );
}

#[test]
fn relative_files_need_an_absolute_cwd() {
    let sandbox = Sandbox::new();
    assert_eq!(
        sandbox.legacy_json(&["--readable", "/w"], &["cat", "notes.txt"])["folder_check"],
        json!({"type": "CannotCheckRelativePath", "file": "notes.txt"})
    );
    assert_eq!(
        sandbox.legacy_json(
            &["--readable", "/w", "--cwd", "/w/sub"],
            &["cat", "../notes.txt"]
        )["folder_check"]["ok"],
        first_executable(&["/bin/cat", "/usr/bin/cat"])
    );
    let result = sandbox.legacy_json(&["--readable", "/w", "--cwd", "rel"], &["cat", "notes.txt"]);
    assert_eq!(result["folder_check"]["type"], "CannotCanonicalizePath");
    assert_eq!(result["folder_check"]["file"], "notes.txt");
    assert!(
        result["folder_check"]["error"]
            .as_str()
            .unwrap()
            .contains("not absolute")
    );
}

/// What the folder check should name for a system_path on this machine.
fn first_executable(candidates: &[&str]) -> String {
    candidates
        .iter()
        .find(|path| {
            fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .map_or("cat", |path| path)
        .to_string()
}

#[test]
fn no_folder_check_for_an_exec_the_policy_did_not_read() {
    let sandbox = Sandbox::new();
    let result = sandbox.legacy_json(&["--readable", "/w"], &["ls", "-al"]);
    assert_eq!(result["result"], "unverified");
    assert!(result.get("folder_check").is_none(), "{result}");
}

// ---------------------------------------------------------------------------------------------
// Policy load errors, usage errors, output
// ---------------------------------------------------------------------------------------------

#[track_caller]
fn assert_policy_error(out: &Run, file: &str, line: usize, message: &str) {
    out.assert_code(2);
    assert_eq!(out.stdout, "");
    let expected = format!("{file}:{line}: ");
    assert!(
        out.first_stderr_line().starts_with(&expected) && out.first_stderr_line().contains(message),
        "first stderr line should start with {expected:?} and contain {message:?}\n--- stderr:\n{}",
        out.stderr
    );
}

#[test]
fn policy_errors_name_the_file_and_line() {
    let sandbox = Sandbox::new();
    let cases = [
        (
            "dup.policy",
            "\ndefine_program(program='ls',\n  options=[flag('-a'), flag('-a')])\n",
            2,
            "duplicate flag: -a",
        ),
        (
            "regex.policy",
            "\n\nforbid_program_regex('(', 'r')\n",
            3,
            "invalid regex",
        ),
        (
            "syntax.policy",
            "define_program(program='ls')\ndefine_program(program=\n",
            3,
            "rror",
        ),
        (
            "unknown.policy",
            "\n\n\nprefix_rule(pattern=['ls'])\n",
            4,
            "prefix_rule",
        ),
        (
            "kwarg.policy",
            "define_program(program='ls', flags=[])\n",
            1,
            "flags",
        ),
        (
            "matcher.policy",
            "\ndefine_program(program='ls', args=[ARG_NOPE])\n",
            2,
            "ARG_NOPE",
        ),
    ];
    for (name, source, line, message) in cases {
        let path = display(&sandbox.write(name, source));
        let out = sandbox.legacy(&["--policy", &path], &["ls"]);
        assert_policy_error(&out, &path, line, message);
    }
    let dup = display(&sandbox.file("dup.policy"));
    let out = sandbox.legacy(&["--json", "--policy", &dup], &["ls"]);
    assert!(
        out.stderr.contains("The legacy policy was not loaded"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_missing_policy_file_is_a_policy_error() {
    let sandbox = Sandbox::new();
    let out = sandbox.legacy(&["--policy", "nope.policy"], &["ls"]);
    out.assert_code(2);
    assert!(
        out.first_stderr_line()
            .starts_with("failed to read legacy policy file nope.policy: "),
        "{}",
        out.stderr
    );
}

#[test]
fn usage_errors_exit_2() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(["legacy", "check"]);
    out.assert_code(2);
    assert_eq!(out.stdout, "");
    let out = sandbox.legacy(&["--readable", "rel"], &["ls"]);
    out.assert_code(2);
    assert!(
        out.stderr.contains("absolute folders (got `rel`)"),
        "{}",
        out.stderr
    );
}

#[test]
fn help_has_examples_and_the_results() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(["legacy", "check", "--help"]);
    out.assert_success();
    for needle in [
        "Examples:",
        "guard legacy check -- ls -a -l src",
        "unverified",
        "--readable <DIR>",
    ] {
        assert!(out.stdout.contains(needle), "{needle}\n{}", out.stdout);
    }
}

#[test]
fn colour_only_on_request_or_a_terminal() {
    let sandbox = Sandbox::new();
    let plain = sandbox.legacy(&[], &["ls", "-al"]);
    assert!(!plain.stdout.contains('\x1b'), "{:?}", plain.stdout);
    let mut command = sandbox.command();
    command
        .env("CLICOLOR_FORCE", "1")
        .args(["legacy", "check", "--", "ls", "-al"]);
    let coloured = crate::common::run_command(&mut command);
    assert!(coloured.stdout.contains("\x1b["), "{:?}", coloured.stdout);
}

// Legacy policy files loaded beside `.rules` files (`--rules FILE.policy`, or a folder's
// `*.policy` files): their forbidden regexes and substrings join every other decision.

#[test]
fn a_legacy_policy_beside_the_rules_forbids_in_guard_check_with_its_file_and_line() {
    let sandbox = Sandbox::new();
    let rules = display(&sandbox.write(
        "team.rules",
        "prefix_rule(pattern=[\"git\"], decision=\"allow\")\n",
    ));
    let legacy = display(&sandbox.write(
        "team.policy",
        "# legacy\nforbid_substrings([\"--force\"])\nforbid_program_regex(\"^evil\", \"no evil tools\")\n",
    ));
    let out = sandbox.run([
        "check", "--json", "--rules", &rules, "--rules", &legacy, "--", "git", "push", "--force",
    ]);
    let result = out.json();
    assert_eq!(result["decision"], "forbidden", "{result}");
    let matched = result["matched_rules"].as_array().unwrap();
    let legacy_match = matched
        .iter()
        .find(|m| m.get("legacy").is_some())
        .unwrap_or_else(|| panic!("{result}"));
    assert_eq!(legacy_match["legacy"]["line"], 2);
    assert_eq!(
        legacy_match["legacy"]["rule"],
        "forbid_substrings([\"--force\"])"
    );
    // The program regex reads the file name of argv[0], as the kernel does.
    let result = sandbox
        .run([
            "check",
            "--json",
            "--rules",
            &legacy,
            "--",
            "/opt/bin/evil-x",
        ])
        .json();
    assert_eq!(result["decision"], "forbidden", "{result}");
    assert_eq!(
        result["matched_rules"][0]["legacy"]["reason"],
        "no evil tools"
    );
    // Not forbidden: the allow rule decides.
    let result = sandbox
        .run([
            "check", "--json", "--rules", &rules, "--rules", &legacy, "--", "git", "status",
        ])
        .json();
    assert_eq!(result["decision"], "allow", "{result}");
}

#[test]
fn a_rules_folder_loads_its_policy_files_and_policy_show_lists_them() {
    let sandbox = Sandbox::new();
    sandbox.write("rules/a.rules", "rule_set(deny=[\"write(.git/**)\"])\n");
    sandbox.write("rules/b.policy", "forbid_substrings([\"DROP\"])\n");
    let folder = display(&sandbox.file("rules"));
    let shown = sandbox
        .run(["policy", "show", "--json", "--rules", &folder])
        .json();
    let legacy = &shown["legacy_policies"][0];
    assert!(
        legacy["file"].as_str().unwrap().ends_with("b.policy"),
        "{shown}"
    );
    assert_eq!(legacy["forbidden_substrings"][0]["substring"], "DROP");
    // What the cgroup backend would not enforce: the write rule and the protected paths.
    let cgroup = shown["not_enforced"]["cgroup"].as_array().unwrap();
    assert!(
        cgroup
            .iter()
            .any(|g| g["rule"].as_str().unwrap().contains("write(.git/**)")),
        "{shown}"
    );
    assert_eq!(shown["not_enforced"]["lsm"], json!([]));
    let text = sandbox.run(["policy", "show", "--rules", &folder]);
    let stdout = &text.stdout;
    assert!(stdout.contains("Legacy policies (1"), "{stdout}");
    assert!(stdout.contains("Not enforced by the kernel"), "{stdout}");
}

#[test]
fn a_broken_policy_file_beside_the_rules_refuses_the_whole_load_naming_file_and_line() {
    let sandbox = Sandbox::new();
    let rules = display(&sandbox.write(
        "team.rules",
        "prefix_rule(pattern=[\"git\"], decision=\"allow\")\n",
    ));
    let legacy = display(&sandbox.write(
        "team.policy",
        "# ok\n\nforbid_program_regex(\"(\", \"x\")\n",
    ));
    let out = sandbox.run([
        "check", "--rules", &rules, "--rules", &legacy, "--", "git", "status",
    ]);
    out.assert_code(2);
    let line = out.first_stderr_line();
    assert!(line.contains("team.policy:3"), "{line}");
    assert!(line.contains("invalid regex"), "{line}");
}
