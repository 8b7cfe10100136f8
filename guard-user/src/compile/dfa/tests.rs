//! Pattern tables: each input kind against the engine it stands in for, the verdicts a walk
//! keeps, the step bound and the size bound.

use std::sync::LazyLock;

use guard_common::Decision;
use proptest::prelude::*;

use super::*;
use crate::policy::rule_set::{RuleSetPattern, Tool, exec_subject};

fn forbidden(rule: u32) -> Verdict {
    Verdict::new(Decision::Forbidden, rule, false)
}

fn prompt(rule: u32) -> Verdict {
    Verdict::new(Decision::Prompt, rule, false)
}

fn allow(rule: u32) -> Verdict {
    Verdict::new(Decision::Allow, rule, false)
}

fn program_table(regexes: &[&str]) -> DfaTable {
    let patterns: Vec<DfaPattern> = regexes
        .iter()
        .enumerate()
        .map(|(rule, regex)| DfaPattern::program_regex(regex, forbidden(rule as u32)))
        .collect();
    compile(InputKind::ProgramName, &patterns).unwrap()
}

fn argv_table(substrings: &[&str]) -> DfaTable {
    let patterns: Vec<DfaPattern> = substrings
        .iter()
        .enumerate()
        .filter_map(|(rule, sub)| DfaPattern::argv_substring(sub, forbidden(rule as u32)))
        .collect();
    compile(InputKind::Argv, &patterns).unwrap()
}

fn glob_table(globs: &[(&str, Verdict)]) -> DfaTable {
    let patterns: Vec<DfaPattern> = globs
        .iter()
        .map(|(glob, verdict)| DfaPattern::command_glob(glob, *verdict).unwrap())
        .collect();
    compile(InputKind::CommandLine, &patterns).unwrap()
}

/// argv as the kernel reads it: NUL-joined, no trailing NUL.
fn kernel_argv(argv: &[&str]) -> Vec<u8> {
    argv.join("\0").into_bytes()
}

fn run(table: &DfaTable, input: &[u8]) -> Outcome {
    walk_kernel(table, input)
}

#[test]
fn program_regex_is_an_unanchored_search_unless_anchored() {
    let table = program_table(&["^rm$", "sudo"]);
    assert_eq!(run(&table, b"rm"), Outcome::Match(forbidden(0)));
    assert_eq!(run(&table, b"rmdir"), Outcome::NoMatch);
    assert_eq!(run(&table, b"farm"), Outcome::NoMatch);
    assert_eq!(run(&table, b"xsudox"), Outcome::Match(forbidden(1)));
    assert_eq!(run(&table, b""), Outcome::NoMatch);
}

#[test]
fn program_regex_that_matches_everything_matches_the_empty_name() {
    let table = program_table(&[""]);
    assert_eq!(run(&table, b""), Outcome::Match(forbidden(0)));
    assert_eq!(run(&table, b"ls"), Outcome::Match(forbidden(0)));
}

#[test]
fn argv_substring_looks_only_past_argv0() {
    let table = argv_table(&[";", "&&"]);
    assert_eq!(
        run(&table, &kernel_argv(&["sh", "-c", "a;b"])),
        Outcome::Match(forbidden(0))
    );
    assert_eq!(run(&table, &kernel_argv(&["x&&y", "ok"])), Outcome::NoMatch);
    assert_eq!(
        run(&table, &kernel_argv(&["x", "a&", "&b"])),
        Outcome::NoMatch,
        "not across args"
    );
    assert_eq!(
        run(&table, &kernel_argv(&["x", "a&&b"])),
        Outcome::Match(forbidden(1))
    );
    assert_eq!(run(&table, &kernel_argv(&["ls"])), Outcome::NoMatch);
}

#[test]
fn argv_substring_matches_non_ascii_as_its_utf8_bytes() {
    let table = argv_table(&["é"]);
    assert_eq!(
        run(&table, &kernel_argv(&["x", "café"])),
        Outcome::Match(forbidden(0))
    );
    assert_eq!(run(&table, &kernel_argv(&["x", "cafe"])), Outcome::NoMatch);
}

#[test]
fn argv_substring_with_nul_is_dropped_because_no_argument_holds_one() {
    assert_eq!(DfaPattern::argv_substring("a\0b", forbidden(0)), None);
}

#[test]
fn empty_substring_matches_any_exec_with_an_argument() {
    let table = argv_table(&[""]);
    assert_eq!(run(&table, &kernel_argv(&["ls"])), Outcome::NoMatch);
    assert_eq!(
        run(&table, &kernel_argv(&["ls", ""])),
        Outcome::Match(forbidden(0))
    );
}

#[test]
fn command_glob_reads_nul_as_the_space_between_arguments() {
    let table = glob_table(&[("rm -rf*", forbidden(0)), ("git push *", prompt(1))]);
    assert_eq!(
        run(&table, &kernel_argv(&["rm", "-rf", "/"])),
        Outcome::Match(forbidden(0))
    );
    assert_eq!(
        run(&table, &kernel_argv(&["rm", "-rf"])),
        Outcome::Match(forbidden(0))
    );
    assert_eq!(run(&table, &kernel_argv(&["rm", "-r"])), Outcome::NoMatch);
    assert_eq!(
        run(&table, &kernel_argv(&["git", "push", "origin"])),
        Outcome::Match(prompt(1))
    );
    assert_eq!(
        run(&table, &kernel_argv(&["git", "pull"])),
        Outcome::NoMatch
    );
}

#[test]
fn command_glob_reads_arguments_as_shell_quoting_renders_them() {
    let table = glob_table(&[("*push*", forbidden(0)), ("echo '$HOME'", prompt(1))]);
    let decide = |argv: &[&str]| run(&table, &kernel_argv(argv));
    assert_eq!(decide(&["bash", "-c", "echo hi there"]), Outcome::NoMatch);
    assert_eq!(decide(&["echo", "it's"]), Outcome::NoMatch);
    assert_eq!(decide(&["echo", "é", ""]), Outcome::NoMatch);
    assert_eq!(decide(&["echo", "$HOME"]), Outcome::Match(prompt(1)));
    assert_eq!(decide(&["echo", "push it"]), Outcome::Match(forbidden(0)));
    assert_eq!(decide(&["git", "push"]), Outcome::Match(forbidden(0)));
    // `*push*` is over the quoted text: `'pu'"'"'sh'` holds no `push`.
    assert_eq!(decide(&["echo", "pu'sh"]), Outcome::NoMatch);
    let quoted = glob_table(&[("echo '' x", forbidden(0)), ("echo \"it's\"", forbidden(1))]);
    assert_eq!(
        run(&quoted, &kernel_argv(&["echo", "", "x"])),
        Outcome::Match(forbidden(0)),
        "an empty word renders as ''"
    );
    assert_eq!(
        run(&quoted, &kernel_argv(&["echo", "it's"])),
        Outcome::Match(forbidden(1))
    );
}

#[test]
fn command_glob_past_the_step_bound_takes_the_safe_answer() {
    let table = glob_table(&[("*push*", forbidden(0))]);
    let long = "a b".repeat(DFA_MAX_INPUT / 3 + 1);
    assert_eq!(run(&table, &kernel_argv(&["echo", &long])), Outcome::Bound);
}

#[test]
fn quoting_model_renders_as_shlex_does() {
    let words = [
        "",
        "a",
        "a b",
        "it's",
        "$HOME",
        "^x",
        "a^b",
        "x\\y",
        "say \"hi\"",
        "é",
        "!x",
        "a'b^c",
        "`x`'",
        "'",
        "\"",
        "^",
        "^^",
        "a\\'b",
    ];
    for first in words {
        for second in words {
            let argv = [first, second];
            let input = argv.join("\0");
            let want = shlex::try_join(argv).unwrap().into_bytes();
            assert_eq!(
                command_line::quoting::renderings(input.as_bytes()),
                vec![want],
                "{argv:?}"
            );
        }
    }
}

#[test]
fn walk_keeps_the_strongest_verdict_and_the_first_rule_on_a_tie() {
    let table = glob_table(&[
        ("git *", allow(0)),
        ("git push*", prompt(1)),
        ("git push --force*", forbidden(2)),
        ("git push --force", forbidden(3)),
    ]);
    assert_eq!(
        run(&table, &kernel_argv(&["git", "status"])),
        Outcome::Match(allow(0))
    );
    assert_eq!(
        run(&table, &kernel_argv(&["git", "push"])),
        Outcome::Match(prompt(1))
    );
    assert_eq!(
        run(&table, &kernel_argv(&["git", "push", "--force"])),
        Outcome::Match(forbidden(2))
    );
}

#[test]
fn the_safe_answer_is_the_strongest_verdict_that_is_not_an_allow() {
    let mixed = glob_table(&[
        ("ls*", allow(0)),
        ("cat*", prompt(1)),
        ("rm*", forbidden(2)),
    ]);
    assert_eq!(mixed.header.bound, forbidden(2));
    assert_eq!(Outcome::Bound.verdict(&mixed.header), forbidden(2));
    let allow_only = glob_table(&[("ls*", allow(0))]);
    assert_eq!(Outcome::Bound.verdict(&allow_only.header), Verdict::NONE);
}

#[test]
fn a_walk_past_the_step_bound_ends_in_bound() {
    let table = program_table(&["z$"]);
    assert_eq!(walk(&table, b"aaaz", 3), Outcome::Bound);
    assert_eq!(walk(&table, b"aaaz", 4), Outcome::Match(forbidden(0)));
    let long = vec![b'a'; DFA_MAX_INPUT + 1];
    assert_eq!(walk_kernel(&table, &long), Outcome::Bound);
}

#[test]
fn a_walk_decided_before_the_bound_needs_no_more_steps() {
    // A forbidden match is the strongest there is: nothing later could change it.
    let table = program_table(&["^rm"]);
    assert_eq!(walk(&table, b"rmxxxxxxxx", 3), Outcome::Match(forbidden(0)));
    // A dead state: no match is possible any more.
    assert_eq!(walk(&table, b"lsxxxxxxxx", 3), Outcome::NoMatch);
}

#[test]
fn too_many_states_names_the_pattern_that_is_too_large_alone() {
    // `a` then 10 bytes: the DFA remembers where the last 11 bytes had an `a`, 2^11 states.
    let patterns = [
        DfaPattern::program_regex("^ls$", forbidden(0)),
        DfaPattern::program_regex("(?s-u)a.{10}", forbidden(1)),
    ];
    let err = compile(InputKind::ProgramName, &patterns).unwrap_err();
    let DfaError::TooLarge {
        patterns: named, ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(named, &["(?s-u)a.{10}".to_string()]);
    assert!(err.to_string().contains("1024 states"), "{err}");
}

#[test]
fn too_many_byte_classes_is_a_size_error() {
    // Every other ASCII byte is a literal of its own: about 128 classes.
    let alternation: Vec<String> = (1..128u8)
        .step_by(2)
        .map(|b| format!(r"\x{b:02x}"))
        .collect();
    let regex = format!("(?-u){}", alternation.join("|"));
    let err = compile(
        InputKind::ProgramName,
        &[DfaPattern::program_regex(&regex, forbidden(0))],
    )
    .unwrap_err();
    assert!(err.to_string().contains("byte classes"), "{err}");
}

#[test]
fn an_invalid_regex_is_named() {
    let err = compile(
        InputKind::ProgramName,
        &[
            DfaPattern::program_regex("ok", forbidden(0)),
            DfaPattern::program_regex("(", forbidden(1)),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(&err, DfaError::Invalid { pattern, .. } if pattern == "("),
        "{err}"
    );
}

#[test]
fn a_unicode_word_boundary_is_unsure_on_non_ascii_bytes() {
    let table = program_table(&[r"\bgit\b"]);
    assert_eq!(run(&table, b"my-git"), Outcome::Match(forbidden(0)));
    assert_eq!(run(&table, b"mygit"), Outcome::NoMatch);
    assert_eq!(run(&table, "égit".as_bytes()), Outcome::Bound);
}

/// Realistic sets fit well inside the kernel's bounds; `--nocapture` prints their sizes.
#[test]
fn realistic_sets_fit() {
    let regexes = program_table(&[
        "^(sudo|su|doas)$",
        "^(mkfs|fdisk|parted)",
        r"^python[0-9.]*$",
    ]);
    let substrings = argv_table(&[";", "&&", "||", "|", "`", "$(", ">", "<", "../"]);
    let globs = glob_table(&[
        ("rm -rf*", forbidden(0)),
        ("rm -fr*", forbidden(1)),
        ("git push --force*", forbidden(2)),
        ("git reset --hard*", prompt(3)),
        ("git push*", prompt(4)),
        ("curl * | sh", forbidden(5)),
        ("chmod -R 777 *", forbidden(6)),
        ("docker run --privileged*", forbidden(7)),
        ("npm publish*", prompt(8)),
        ("kubectl delete *", prompt(9)),
    ]);
    for (name, table) in [
        ("program regexes", &regexes),
        ("argv substrings", &substrings),
        ("exec globs", &globs),
    ] {
        println!(
            "{name}: {} states, {} classes, {} bytes",
            table.header.states,
            table.header.classes,
            table.map_bytes()
        );
        assert!(
            (table.header.states as usize) < DFA_MAX_STATES / 4,
            "{name}: {table:?}"
        );
    }
}

/// Bytes drawn mostly from the patterns' own letters, so matches are frequent.
fn name_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(b"rmsudogitx-._/ ".to_vec()),
            1 => any::<u8>(),
        ],
        0..24,
    )
}

fn word() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(
            &[
                "r", "m", "-", "f", "g", "i", "t", " ", "'", "*", ";", "&", "$", "\"", "\\", "^",
                "!", "é", "`", "=",
            ][..],
        ),
        0..6,
    )
    .prop_map(|parts| parts.concat())
}

fn argv() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(word(), 1..5)
}

const PROGRAM_REGEXES: [&str; 5] = ["^rm$", "sudo", r"^g.t\b", "(?i)DO", "[0-9]{2}$"];
const SUBSTRINGS: [&str; 4] = [";", "&&", "rm -", "-f"];
const GLOBS: [&str; 8] = [
    "rm -rf*",
    "git *",
    "*;*",
    "r?m *",
    "[gr]* -*f",
    "*'$*",
    "* '* *",
    "*\\\"*",
];

// Compiled once: building a DFA in a debug build is slow enough to dominate the cases.
static PROGRAM_TABLE: LazyLock<DfaTable> = LazyLock::new(|| program_table(&PROGRAM_REGEXES));
static ARGV_TABLE: LazyLock<DfaTable> = LazyLock::new(|| argv_table(&SUBSTRINGS));
static GLOB_TABLE: LazyLock<DfaTable> = LazyLock::new(|| {
    let globs: Vec<(&str, Verdict)> = GLOBS
        .iter()
        .enumerate()
        .map(|(rule, glob)| (*glob, forbidden(rule as u32)))
        .collect();
    glob_table(&globs)
});

/// What a walk over an all-forbidden table should say, given the rules that match.
fn forbidden_outcome(first_rule: Option<usize>) -> Outcome {
    first_rule.map_or(Outcome::NoMatch, |rule| {
        Outcome::Match(forbidden(rule as u32))
    })
}

proptest! {
    #[test]
    fn program_table_agrees_with_regex_is_match(name in name_bytes()) {
        let matching: Vec<u32> = PROGRAM_REGEXES
            .iter()
            .enumerate()
            .filter(|(_, r)| regex::bytes::Regex::new(r).unwrap().is_match(&name))
            .map(|(rule, _)| rule as u32)
            .collect();
        match run(&PROGRAM_TABLE, &name) {
            // Only `\b` makes a byte unsure, and only a non-ASCII one.
            Outcome::Bound => prop_assert!(!name.is_ascii()),
            // The walk stops at the first forbidden match in input order: any matching rule.
            Outcome::Match(verdict) => prop_assert!(matching.contains(&verdict.rule)),
            Outcome::NoMatch => prop_assert!(matching.is_empty(), "expected one of {matching:?}"),
        }
    }

    #[test]
    fn argv_table_agrees_with_the_legacy_substring_check(argv in argv()) {
        let matching: Vec<u32> = SUBSTRINGS
            .iter()
            .enumerate()
            .filter(|(_, sub)| argv[1..].iter().any(|arg| arg.contains(*sub)))
            .map(|(rule, _)| rule as u32)
            .collect();
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        match run(&ARGV_TABLE, &kernel_argv(&refs)) {
            // The walk stops at the first forbidden match in input order: any matching rule.
            Outcome::Match(verdict) => prop_assert!(matching.contains(&verdict.rule)),
            other => prop_assert!(matching.is_empty(), "{other:?}, expected one of {matching:?}"),
        }
    }

    #[test]
    fn glob_table_agrees_with_the_rule_set(argv in argv()) {
        let subject = exec_subject(&argv);
        let matching: Vec<u32> = GLOBS
            .iter()
            .enumerate()
            .filter(|(_, glob)| {
                RuleSetPattern::parse(&format!("exec({glob})"))
                    .unwrap()
                    .matches(Tool::Exec, Some(&subject))
            })
            .map(|(rule, _)| rule as u32)
            .collect();
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        // Globs match the whole line, so every match is seen at the end: the first rule.
        prop_assert_eq!(
            run(&GLOB_TABLE, &kernel_argv(&refs)),
            forbidden_outcome(matching.first().map(|&r| r as usize)),
            "subject {}", subject
        );
    }

    #[test]
    fn quoting_model_agrees_with_shlex(argv in argv()) {
        let want = shlex::try_join(argv.iter().map(String::as_str)).unwrap().into_bytes();
        prop_assert_eq!(command_line::quoting::renderings(argv.join("\0").as_bytes()), vec![want]);
    }
}
