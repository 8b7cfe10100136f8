//! Command classification for commands no policy rule matched (docs/policy-language.md §5.4, §5.5).
//!
//! `is_known_safe_command` recognises read-only commands that may run without asking;
//! `is_dangerous_command` flags commands that must always be confirmed. Both look through
//! plainly splittable shell wrappers (§4), so `bash -lc "ls && rm -rf x"` is judged by its parts.

use std::path::Path;

use guard_common::Decision;

use crate::policy::shell::split_plain_shell_wrapper;

/// §5.4: true if the command only reads, either as a plain exec or as a plainly splittable
/// `bash|zsh|sh -c|-lc` script whose every command is safe as a plain exec.
pub fn is_known_safe_command(argv: &[String]) -> bool {
    // zsh is judged exactly like bash.
    let argv: Vec<String> = argv
        .iter()
        .map(|token| {
            if token == "zsh" {
                "bash".to_owned()
            } else {
                token.clone()
            }
        })
        .collect();

    if is_safe_exec(&argv) {
        return true;
    }
    split_plain_shell_wrapper(&argv).is_some_and(|commands| {
        !commands.is_empty() && commands.iter().all(|command| is_safe_exec(command))
    })
}

/// §5.5: true if the command, a `sudo` prefix of it, or any command of a plainly splittable shell
/// script is `rm -f` / `rm -rf`. Unsplittable scripts are not inspected.
pub fn is_dangerous_command(argv: &[String]) -> bool {
    if is_dangerous_exec(argv) {
        return true;
    }
    split_plain_shell_wrapper(argv)
        .is_some_and(|commands| commands.iter().any(|command| is_dangerous_exec(command)))
}

/// guard's `--fallback heuristics`: known-safe → Allow, dangerous → Prompt, otherwise Prompt.
pub fn heuristics_decision(argv: &[String]) -> Decision {
    // A dangerous command is never known-safe, and both it and the unclassified rest prompt.
    if is_known_safe_command(argv) {
        Decision::Allow
    } else {
        Decision::Prompt
    }
}

/// The programs that are known-safe with any arguments (on this OS): what the kernel can allow
/// by name alone under the `untrusted` approval policy.
pub fn always_safe_programs() -> impl Iterator<Item = &'static str> {
    let linux: &[&str] = if cfg!(target_os = "linux") {
        ALWAYS_SAFE_ON_LINUX
    } else {
        &[]
    };
    ALWAYS_SAFE.iter().chain(linux).copied()
}

/// Programs that only read, whatever their arguments.
const ALWAYS_SAFE: &[&str] = &[
    "cat", "cd", "cut", "echo", "expr", "false", "grep", "head", "id", "ls", "nl", "paste", "pwd",
    "rev", "seq", "stat", "tail", "tr", "true", "uname", "uniq", "wc", "which", "whoami",
];

/// GNU coreutils only, so safe only on Linux.
const ALWAYS_SAFE_ON_LINUX: &[&str] = &["numfmt", "tac"];

/// One argv judged without looking inside shell scripts; the program is named by the file name of
/// argv[0], so `/bin/ls` and `./sed` count as `ls` and `sed`.
fn is_safe_exec(argv: &[String]) -> bool {
    let Some(program) = argv.first().and_then(|arg0| file_name(arg0)) else {
        return false;
    };
    let args = &argv[1..];
    match program {
        _ if ALWAYS_SAFE.contains(&program) => true,
        _ if cfg!(target_os = "linux") && ALWAYS_SAFE_ON_LINUX.contains(&program) => true,
        "base64" => !args.iter().any(|arg| is_base64_output_option(arg)),
        "find" => !args
            .iter()
            .any(|arg| FIND_UNSAFE_OPTIONS.contains(&arg.as_str())),
        "rg" => !args.iter().any(|arg| is_rg_unsafe_option(arg)),
        "git" => is_safe_git(argv),
        "sed" => is_print_only_sed(argv),
        _ => false,
    }
}

fn file_name(path: &str) -> Option<&str> {
    Path::new(path).file_name()?.to_str()
}

/// `-o FILE`, `-oFILE`, `--output FILE` and `--output=FILE` write a file.
fn is_base64_output_option(arg: &str) -> bool {
    arg == "-o" || arg == "--output" || arg.starts_with("--output=") || arg.starts_with("-o")
}

/// `find` options that run commands, delete files or write to files.
const FIND_UNSAFE_OPTIONS: &[&str] = &[
    "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint", "-fprint0", "-fprintf",
];

/// `rg` options that run another program: decompressors, `--pre` and `--hostname-bin`.
fn is_rg_unsafe_option(arg: &str) -> bool {
    matches!(arg, "--search-zip" | "-z" | "--pre" | "--hostname-bin")
        || arg.starts_with("--pre=")
        || arg.starts_with("--hostname-bin=")
}

/// Read-only git subcommands; everything else may write.
const GIT_SAFE_SUBCOMMANDS: &[&str] = &["status", "log", "diff", "show", "branch"];

/// Long global git options that take a value, as `--git-dir x` or `--git-dir=x`.
const GIT_LONG_OPTIONS_WITH_VALUE: &[&str] = &[
    "--config-env",
    "--exec-path",
    "--git-dir",
    "--namespace",
    "--super-prefix",
    "--work-tree",
];

fn is_safe_git(argv: &[String]) -> bool {
    let Some(index) = git_subcommand_index(argv) else {
        return false;
    };
    let subcommand = argv[index].as_str();
    if !GIT_SAFE_SUBCOMMANDS.contains(&subcommand) {
        return false;
    }
    if argv[1..index]
        .iter()
        .any(|arg| is_git_unsafe_global_option(arg))
    {
        return false;
    }
    let args = &argv[index + 1..];
    if args.iter().any(|arg| is_git_unsafe_subcommand_option(arg)) {
        return false;
    }
    subcommand != "branch" || args.iter().all(|arg| is_git_branch_listing_option(arg))
}

/// Index of git's subcommand: the first token that is not a global option or an option's value.
fn git_subcommand_index(argv: &[String]) -> Option<usize> {
    let mut index = 1;
    while let Some(arg) = argv.get(index) {
        let arg = arg.as_str();
        if is_git_option_with_inline_value(arg) {
            index += 1;
        } else if is_git_option_taking_next_token(arg) {
            index += 2;
        } else if arg.starts_with('-') {
            // Covers `--` and every flag without a value (`--no-pager`, `-p`, ...).
            index += 1;
        } else {
            return Some(index);
        }
    }
    None
}

/// `--git-dir=x` and friends, or `-Cdir` / `-ckey=value`.
fn is_git_option_with_inline_value(arg: &str) -> bool {
    let long_with_value = GIT_LONG_OPTIONS_WITH_VALUE.iter().any(|option| {
        arg.strip_prefix(option)
            .is_some_and(|rest| rest.starts_with('='))
    });
    let short_with_value = (arg.starts_with("-C") || arg.starts_with("-c")) && arg.len() > 2;
    long_with_value || short_with_value
}

/// `-C`, `-c` or a long option written without `=`: its value is the next token.
fn is_git_option_taking_next_token(arg: &str) -> bool {
    matches!(arg, "-C" | "-c") || GIT_LONG_OPTIONS_WITH_VALUE.contains(&arg)
}

/// Every value-taking global option points git at another directory, repository, configuration
/// or helper program; `-p`/`--paginate` start a pager. None of these is read-only.
fn is_git_unsafe_global_option(arg: &str) -> bool {
    matches!(arg, "-p" | "--paginate")
        || is_git_option_taking_next_token(arg)
        || is_git_option_with_inline_value(arg)
}

/// Subcommand options that write files or run external diff/textconv/exec programs.
fn is_git_unsafe_subcommand_option(arg: &str) -> bool {
    matches!(arg, "--output" | "--ext-diff" | "--textconv" | "--exec")
        || arg.starts_with("--output=")
        || arg.starts_with("--exec=")
}

/// `git branch` options that only list; any other argument may create, rename or delete.
fn is_git_branch_listing_option(arg: &str) -> bool {
    matches!(
        arg,
        "--list"
            | "-l"
            | "--show-current"
            | "-a"
            | "--all"
            | "-r"
            | "--remotes"
            | "-v"
            | "-vv"
            | "--verbose"
    ) || arg.starts_with("--format=")
}

/// `sed -n <N>p [file]` or `sed -n <N>,<M>p [file]`: prints lines, nothing else.
fn is_print_only_sed(argv: &[String]) -> bool {
    argv.len() <= 4
        && argv.get(1).is_some_and(|flag| flag == "-n")
        && argv.get(2).is_some_and(|script| is_sed_line_print(script))
}

/// Matches `^(\d+,)?\d+p$`.
fn is_sed_line_print(script: &str) -> bool {
    let Some(range) = script.strip_suffix('p') else {
        return false;
    };
    let is_number = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    match range.split_once(',') {
        Some((start, end)) => is_number(start) && is_number(end),
        None => is_number(range),
    }
}

/// One argv judged without looking inside shell scripts. Unlike the safe list, the program name
/// is compared exactly: `/bin/rm -rf x` is not flagged, and neither are `-fr` or a later `-f`.
fn is_dangerous_exec(argv: &[String]) -> bool {
    match argv.first().map(String::as_str) {
        Some("rm") => matches!(argv.get(1).map(String::as_str), Some("-f" | "-rf")),
        Some("sudo") => is_dangerous_exec(&argv[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    #[track_caller]
    fn assert_safe(argv: &[&str]) {
        assert!(
            is_known_safe_command(&strings(argv)),
            "expected safe: {argv:?}"
        );
    }

    #[track_caller]
    fn assert_not_safe(argv: &[&str]) {
        assert!(
            !is_known_safe_command(&strings(argv)),
            "expected not safe: {argv:?}"
        );
    }

    #[track_caller]
    fn assert_dangerous(argv: &[&str]) {
        assert!(
            is_dangerous_command(&strings(argv)),
            "expected dangerous: {argv:?}"
        );
    }

    #[track_caller]
    fn assert_not_dangerous(argv: &[&str]) {
        assert!(
            !is_dangerous_command(&strings(argv)),
            "expected not dangerous: {argv:?}"
        );
    }

    // ---- §5.4 always-safe programs ----

    #[test]
    fn always_safe_programs_with_any_arguments() {
        for &program in ALWAYS_SAFE {
            assert_safe(&[program]);
            assert_safe(&[program, "--anything", "-x", "file"]);
        }
        assert_safe(&["nl", "-nrz", "Cargo.toml"]);
    }

    #[test]
    fn numfmt_and_tac_only_on_linux() {
        for argv in [&["numfmt", "1000"][..], &["tac", "Cargo.toml"][..]] {
            assert_eq!(
                is_known_safe_command(&strings(argv)),
                cfg!(target_os = "linux"),
                "{argv:?}"
            );
        }
    }

    #[test]
    fn unknown_programs_are_not_safe() {
        assert_not_safe(&["cargo", "check"]);
        assert_not_safe(&["foo"]);
        assert_not_safe(&["rm", "x"]);
        assert_not_safe(&["python3", "-c", "print(1)"]);
        assert_not_safe(&[]);
        assert_not_safe(&[""]);
        assert_not_safe(&["LS"]);
    }

    #[test]
    fn program_is_named_by_file_name() {
        assert_safe(&["/bin/ls"]);
        assert_safe(&["/usr/bin/cat", "f"]);
        assert_safe(&["./sed", "-n", "1p", "f"]);
        assert_safe(&["/usr/bin/git", "status"]);
        assert_not_safe(&["/bin/ls.exe"]);
        assert_not_safe(&["/"]);
    }

    // ---- §5.4 base64 ----

    #[test]
    fn base64_rules() {
        assert_safe(&["base64"]);
        assert_safe(&["base64", "-d", "file"]);
        assert_safe(&["base64", "--decode", "-w", "0"]);
        for argv in [
            &["base64", "-o", "out.bin"][..],
            &["base64", "--output", "out.bin"][..],
            &["base64", "--output=out.bin"][..],
            &["base64", "-ob64.txt"][..],
            &["base64", "in", "-o", "out"][..],
        ] {
            assert_not_safe(argv);
        }
    }

    // ---- §5.4 find ----

    #[test]
    fn find_rules() {
        assert_safe(&["find", ".", "-name", "file.txt"]);
        assert_safe(&["find", ".", "-type", "f", "-print"]);
        // Only exact option names count.
        assert_safe(&["find", ".", "-name", "-exec-like"]);
        for &option in FIND_UNSAFE_OPTIONS {
            assert_not_safe(&["find", ".", option, "x"]);
        }
        assert_not_safe(&["find", ".", "-name", "file.txt", "-exec", "rm", "{}", ";"]);
        assert_not_safe(&["find", ".", "-fprintf", "/root/suid.txt", "%#m %u %p\n"]);
    }

    // ---- §5.4 rg ----

    #[test]
    fn rg_rules() {
        assert_safe(&["rg", "Cargo.toml", "-n"]);
        assert_safe(&["rg", "-g", "*.py", "pattern"]);
        for argv in [
            &["rg", "--search-zip", "files"][..],
            &["rg", "-z", "files"][..],
            &["rg", "--pre", "pwned", "files"][..],
            &["rg", "--pre=pwned", "files"][..],
            &["rg", "--hostname-bin", "pwned", "files"][..],
            &["rg", "--hostname-bin=pwned", "files"][..],
        ] {
            assert_not_safe(argv);
        }
    }

    // ---- §5.4 git ----

    #[test]
    fn git_read_only_subcommands_are_safe() {
        assert_safe(&["git", "status"]);
        assert_safe(&["git", "log", "-1"]);
        assert_safe(&["git", "log", "-p", "-1"]);
        assert_safe(&["git", "diff", "-p"]);
        assert_safe(&["git", "diff", "HEAD~1..HEAD"]);
        assert_safe(&["git", "show", "-p", "HEAD"]);
        assert_safe(&["git", "branch"]);
    }

    #[test]
    fn git_other_subcommands_are_not_safe() {
        assert_not_safe(&["git"]);
        assert_not_safe(&["git", "fetch"]);
        assert_not_safe(&["git", "commit", "-m", "status"]);
        assert_not_safe(&["git", "push"]);
        // The first non-option token is the subcommand, so a later `status` does not count.
        assert_not_safe(&["git", "checkout", "status"]);
    }

    #[test]
    fn git_skips_harmless_global_flags() {
        assert_safe(&["git", "--no-pager", "log"]);
        assert_safe(&["git", "--bare", "status"]);
        assert_safe(&["git", "--", "status"]);
    }

    #[test]
    fn git_options_with_a_separate_value_are_skipped_with_it() {
        // The value is skipped, so the subcommand is found, and the option makes it unsafe.
        assert_not_safe(&["git", "-C", "status", "log"]);
        assert_not_safe(&["git", "--git-dir", "status", "branch", "-d", "x"]);
        // Skipping the value means `status` (a value) is not taken as the subcommand.
        assert_not_safe(&["git", "-c", "status"]);
    }

    #[test]
    fn git_subcommand_is_found_past_global_options() {
        let index = |argv: &[&str]| git_subcommand_index(&strings(argv));
        assert_eq!(index(&["git", "status"]), Some(1));
        assert_eq!(index(&["git", "--no-pager", "-p", "--", "log"]), Some(4));
        // A separate value is skipped together with its option ...
        assert_eq!(index(&["git", "-C", "status", "log"]), Some(3));
        assert_eq!(index(&["git", "-c", "a=b", "log"]), Some(3));
        assert_eq!(index(&["git", "--git-dir", "status", "log"]), Some(3));
        assert_eq!(
            index(&["git", "--work-tree", "x", "--namespace", "y", "log"]),
            Some(5)
        );
        // ... an inline one is not.
        assert_eq!(index(&["git", "-Cstatus", "log"]), Some(2));
        assert_eq!(index(&["git", "--git-dir=status", "log"]), Some(2));
        assert_eq!(index(&["git", "-c"]), None);
        assert_eq!(index(&["git", "--no-pager"]), None);
    }

    #[test]
    fn git_unsafe_global_options() {
        for argv in [
            &["git", "-C", ".", "status"][..],
            &["git", "-C.", "status"][..],
            &["git", "-c", "core.pager=cat", "log", "-n", "1"][..],
            &["git", "-ccore.pager=cat", "status"][..],
            &["git", "-p", "log", "-1"][..],
            &["git", "--paginate", "log", "-1"][..],
            &["git", "--config-env", "core.pager=PAGER", "show", "HEAD"][..],
            &["git", "--config-env=core.pager=PAGER", "show", "HEAD"][..],
            &["git", "--exec-path", ".git/helpers", "show", "HEAD"][..],
            &["git", "--exec-path=.git/helpers", "show", "HEAD"][..],
            &["git", "--git-dir", ".evil-git", "diff", "HEAD~1..HEAD"][..],
            &["git", "--git-dir=.evil-git", "diff", "HEAD~1..HEAD"][..],
            &["git", "--namespace", "attacker", "show", "HEAD"][..],
            &["git", "--namespace=attacker", "show", "HEAD"][..],
            &["git", "--super-prefix", "attacker/", "show", "HEAD"][..],
            &["git", "--super-prefix=attacker/", "show", "HEAD"][..],
            &["git", "--work-tree", ".", "status"][..],
            &["git", "--work-tree=.", "status"][..],
        ] {
            assert_not_safe(argv);
        }
    }

    #[test]
    fn git_unsafe_subcommand_options() {
        for argv in [
            &["git", "log", "--output=/tmp/out", "-n", "1"][..],
            &["git", "diff", "--output", "/tmp/out"][..],
            &["git", "show", "--output=/tmp/out", "HEAD"][..],
            &["git", "diff", "--ext-diff"][..],
            &["git", "log", "-p", "--textconv"][..],
            &["git", "show", "--exec"][..],
            &["git", "show", "--exec=x"][..],
            &["git", "status", "--output=x"][..],
        ] {
            assert_not_safe(argv);
        }
    }

    #[test]
    fn git_branch_is_safe_only_when_listing() {
        assert_safe(&["git", "branch"]);
        for flag in [
            "--list",
            "-l",
            "--show-current",
            "-a",
            "--all",
            "-r",
            "--remotes",
            "-v",
            "-vv",
            "--verbose",
            "--format=%(refname)",
        ] {
            assert_safe(&["git", "branch", flag]);
        }
        assert_safe(&["git", "branch", "-a", "-v", "--format=%(refname)"]);
        assert_not_safe(&["git", "branch", "new-branch"]);
        assert_not_safe(&["git", "branch", "-d", "feature"]);
        assert_not_safe(&["git", "branch", "-D", "feature"]);
        assert_not_safe(&["git", "branch", "-m", "a", "b"]);
        assert_not_safe(&["git", "branch", "--list", "x"]);
        assert_not_safe(&["git", "branch", "--output=x"]);
    }

    // ---- §5.4 sed ----

    #[test]
    fn sed_rules() {
        assert_safe(&["sed", "-n", "1p"]);
        assert_safe(&["sed", "-n", "10p", "file.txt"]);
        assert_safe(&["sed", "-n", "1,5p", "file.txt"]);
        for argv in [
            &["sed", "-n", "xp", "file.txt"][..],
            &["sed", "-n", "1,5p", "a", "b"][..],
            &["sed", "-n", "p", "f"][..],
            &["sed", "-n", ",5p", "f"][..],
            &["sed", "-n", "1,p", "f"][..],
            &["sed", "-n", "1,2,3p", "f"][..],
            &["sed", "-n", "1", "f"][..],
            &["sed", "-n", "1d", "f"][..],
            &["sed", "-n"][..],
            &["sed", "1p", "f"][..],
            &["sed", "-i", "1p", "f"][..],
            &["sed", "-n", "+1p", "f"][..],
            &["sed"][..],
        ] {
            assert_not_safe(argv);
        }
    }

    // ---- §5.4 shell wrappers ----

    #[test]
    fn wrapped_scripts_of_safe_commands_are_safe() {
        for script in [
            "ls",
            "ls -1",
            "git status",
            "grep -R \"Cargo.toml\" -n",
            "sed -n 1,5p file.txt",
            "sed -n '1,5p' file.txt",
            "find . -name file.txt",
            "grep -R \"Cargo.toml\" -n || true",
            "ls && pwd",
            "echo 'hi' ; ls",
            "ls | wc -l",
            "/bin/ls\npwd",
        ] {
            assert_safe(&["bash", "-lc", script]);
        }
        assert_safe(&["sh", "-c", "ls"]);
        assert_safe(&["/bin/bash", "-c", "ls && pwd"]);
    }

    #[test]
    fn zsh_is_treated_like_bash() {
        assert_safe(&["zsh", "-lc", "ls"]);
        assert_safe(&["zsh", "-c", "ls && git status"]);
        assert_safe(&["/usr/bin/zsh", "-lc", "ls"]);
        assert_not_safe(&["zsh", "-lc", "rm x"]);
    }

    #[test]
    fn wrapped_scripts_with_unsafe_parts_are_not_safe() {
        for script in [
            "ls && rm -rf /",
            "find . -name file.txt -delete",
            "git branch -d feature",
            "git --paginate log -1",
            "git -C .project-deps/test-fixtures status",
            "(ls)",
            "ls || (pwd && echo hi)",
            "ls > out.txt",
            "echo $HOME",
            "'git status'",
            "",
            "cat <<EOF\nx\nEOF",
        ] {
            assert_not_safe(&["bash", "-lc", script]);
        }
        assert_not_safe(&["bash", "-lc", "git", "status"]);
        assert_not_safe(&["bash", "-l", "-c", "ls"]);
        assert_not_safe(&["bash", "-cl", "ls"]);
        assert_not_safe(&["dash", "-c", "ls"]);
        assert_not_safe(&["fish", "-c", "ls"]);
        // Only one level of wrapper is looked through.
        assert_not_safe(&["bash", "-lc", "bash -lc ls"]);
    }

    // ---- §5.5 dangerous ----

    #[test]
    fn forced_rm_is_dangerous() {
        assert_dangerous(&["rm", "-f", "x"]);
        assert_dangerous(&["rm", "-rf", "/"]);
        assert_dangerous(&["rm", "-rf"]);
    }

    #[test]
    fn other_rm_spellings_are_not_dangerous() {
        for argv in [
            &["rm", "-fr", "x"][..],
            &["rm", "-r", "x"][..],
            &["rm", "-r", "-f", "x"][..],
            &["rm", "x", "-f"][..],
            &["rm", "--force", "x"][..],
            &["rm", "-Rf", "x"][..],
            &["/bin/rm", "-rf", "x"][..],
            &["./rm", "-f", "x"][..],
            &["rm"][..],
            &["rm", "x"][..],
            &[][..],
        ] {
            assert_not_dangerous(argv);
        }
    }

    #[test]
    fn git_subcommands_are_not_dangerous() {
        for argv in [
            &["git", "reset", "--hard"][..],
            &["git", "rm", "x"][..],
            &["git", "branch", "-D", "x"][..],
            &["git", "push", "--force"][..],
            &["git", "clean", "-fdx"][..],
        ] {
            assert_not_dangerous(argv);
        }
    }

    #[test]
    fn sudo_recurses() {
        assert_dangerous(&["sudo", "rm", "-rf", "x"]);
        assert_dangerous(&["sudo", "rm", "-f", "x"]);
        assert_dangerous(&["sudo", "sudo", "rm", "-f", "x"]);
        assert_not_dangerous(&["sudo"]);
        assert_not_dangerous(&["sudo", "rm", "x"]);
        assert_not_dangerous(&["sudo", "-u", "root", "rm", "-rf", "x"]);
        assert_not_dangerous(&["/usr/bin/sudo", "rm", "-rf", "x"]);
        // The sudo check stays at the plain-exec level.
        assert_not_dangerous(&["sudo", "bash", "-lc", "rm -rf x"]);
    }

    #[test]
    fn dangerous_parts_of_wrapped_scripts() {
        assert_dangerous(&["bash", "-lc", "ls && rm -rf x"]);
        assert_dangerous(&["bash", "-c", "rm -f x"]);
        assert_dangerous(&["zsh", "-lc", "ls | rm -f x"]);
        assert_dangerous(&["/bin/sh", "-c", "echo hi; sudo rm -rf /tmp/x"]);
        assert_dangerous(&["bash", "-lc", "rm \"-rf\" x"]);
    }

    #[test]
    fn unsplittable_or_unrecognised_scripts_are_not_inspected() {
        for argv in [
            &["bash", "-lc", "rm -rf x > /dev/null"][..],
            &["bash", "-lc", "rm -rf \"$TARGET\""][..],
            &["bash", "-lc", "if true; then rm -rf x; fi"][..],
            &["bash", "-lc", "echo $(rm -rf x)"][..],
            &["bash", "-lc", "echo 'rm -rf x'"][..],
            &["bash", "-l", "-c", "rm -rf x"][..],
            &["dash", "-c", "rm -rf x"][..],
            &["bash", "-lc", "rm -fr x"][..],
        ] {
            assert_not_dangerous(argv);
        }
    }

    // ---- fallback decision ----

    #[test]
    fn heuristics_decision_allows_only_known_safe_commands() {
        assert_eq!(
            heuristics_decision(&strings(&["ls", "-la"])),
            Decision::Allow
        );
        assert_eq!(
            heuristics_decision(&strings(&["bash", "-lc", "ls && pwd"])),
            Decision::Allow
        );
        assert_eq!(
            heuristics_decision(&strings(&["rm", "-rf", "x"])),
            Decision::Prompt
        );
        assert_eq!(
            heuristics_decision(&strings(&["bash", "-lc", "ls && rm -rf x"])),
            Decision::Prompt
        );
        assert_eq!(
            heuristics_decision(&strings(&["cargo", "build"])),
            Decision::Prompt
        );
        assert_eq!(heuristics_decision(&[]), Decision::Prompt);
    }
}
