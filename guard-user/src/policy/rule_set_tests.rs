use super::*;

fn set(deny: &[&str], ask: &[&str], allow: &[&str]) -> RuleSet {
    RuleSet::parse(deny, ask, allow, None).unwrap()
}

fn decide(set: &RuleSet, tool: Tool, subject: Option<&str>) -> Option<(Decision, String)> {
    set.evaluate(tool, subject)
        .map(|found| (found.decision, found.pattern.text().to_string()))
}

fn matches(pattern: &str, tool: Tool, subject: Option<&str>) -> bool {
    RuleSetPattern::parse(pattern)
        .unwrap()
        .matches(tool, subject)
}

#[test]
fn first_match_goes_deny_then_ask_then_allow() {
    let rules = set(&["exec(rm *)"], &["exec(rm -i*)", "exec(git *)"], &["exec"]);
    // Both a deny and an ask pattern match: deny is checked first.
    assert_eq!(
        decide(&rules, Tool::Exec, Some("rm -i x")),
        Some((Decision::Forbidden, "exec(rm *)".into()))
    );
    assert_eq!(
        decide(&rules, Tool::Exec, Some("git push")),
        Some((Decision::Prompt, "exec(git *)".into()))
    );
    assert_eq!(
        decide(&rules, Tool::Exec, Some("ls")),
        Some((Decision::Allow, "exec".into()))
    );
    assert_eq!(decide(&rules, Tool::Read, Some("/etc/passwd")), None);
    // Within one list the first pattern that matches is the one reported.
    let two = set(&["exec(g*)", "exec(git*)"], &[], &[]);
    assert_eq!(decide(&two, Tool::Exec, Some("git")).unwrap().1, "exec(g*)");
}

#[test]
fn no_subject_matches_only_bare_tool_names() {
    assert!(matches("exec", Tool::Exec, None));
    assert!(matches("ex*", Tool::Exec, None));
    assert!(matches("*", Tool::Write, None));
    assert!(!matches("exec(*)", Tool::Exec, None));
    assert!(matches("exec(*)", Tool::Exec, Some("")));
    assert!(matches("exec", Tool::Exec, Some("anything at all")));
}

#[test]
fn tool_name_globs_see_every_name_of_a_tool() {
    assert!(matches("bash", Tool::Exec, None));
    assert!(matches("bash*", Tool::Exec, None));
    assert!(matches("ba?h(ls)", Tool::Exec, Some("ls")));
    assert!(!matches("bash", Tool::Read, None));
    assert!(matches("*", Tool::Connect, Some("example.com:443")));
    assert!(matches("*(*.env)", Tool::Read, Some("/home/u/.env")));
    // `r*` is read only; `*e` is write only (`exec` and `connect` do not end in e... `bash`
    // neither), so a subject glob is compiled for the kinds those tools need.
    assert!(matches("r*", Tool::Read, None) && !matches("r*", Tool::Write, None));
    assert!(matches("*e(/x)", Tool::Write, Some("/x")));
    assert!(!matches("*e(/x)", Tool::Exec, Some("/x")));
    assert!(Tool::parse("bash") == Some(Tool::Exec) && Tool::parse("Bash").is_none());
}

#[test]
fn command_globs_star_crosses_slashes_and_spaces() {
    assert!(matches("bash(rm -rf*)", Tool::Exec, Some("rm -rf /")));
    assert!(matches("bash(rm -rf*)", Tool::Exec, Some("rm -rf")));
    assert!(!matches("bash(rm -rf*)", Tool::Exec, Some("rm -r -f /")));
    assert!(!matches("bash(rm -rf*)", Tool::Exec, Some("sudo rm -rf /")));
    assert!(matches(
        "exec(*/bin/* --help)",
        Tool::Exec,
        Some("/usr/bin/ls --help")
    ));
    assert!(matches(
        "exec(git {push,pull}*)",
        Tool::Exec,
        Some("git pull -r")
    ));
    assert!(matches(
        "connect(*:443)",
        Tool::Connect,
        Some("a.example.com:443")
    ));
    assert!(!matches(
        "connect(*:443)",
        Tool::Connect,
        Some("a.example.com:4433")
    ));
}

#[test]
fn path_globs_follow_gitignore_habits() {
    // No `/`: a file name anywhere.
    assert!(matches("read(*.env)", Tool::Read, Some("/home/u/.env")));
    assert!(matches(
        "read(*.env)",
        Tool::Read,
        Some("/srv/app/prod.env")
    ));
    assert!(!matches(
        "read(*.env)",
        Tool::Read,
        Some("/srv/app/prod.env.bak")
    ));
    // `*` stops at `/`, `**` crosses folders.
    assert!(matches(
        "write(/srv/*.log)",
        Tool::Write,
        Some("/srv/a.log")
    ));
    assert!(!matches(
        "write(/srv/*.log)",
        Tool::Write,
        Some("/srv/x/a.log")
    ));
    assert!(matches(
        "write(/srv/**/*.log)",
        Tool::Write,
        Some("/srv/x/y/a.log")
    ));
    // A relative pattern with `/` matches below any folder.
    assert!(matches(
        "write(.git/**)",
        Tool::Write,
        Some("/repo/.git/config")
    ));
    assert!(matches(
        "write(.git/**)",
        Tool::Write,
        Some("/a/b/.git/refs/heads/main")
    ));
    assert!(matches("write(.git/**)", Tool::Write, Some("/repo/.git")));
    assert!(!matches(
        "write(.git/**)",
        Tool::Write,
        Some("/repo/.gitignore")
    ));
    assert!(matches(
        "write(src/*.rs)",
        Tool::Write,
        Some("/w/p/src/main.rs")
    ));
    assert!(!matches(
        "write(src/*.rs)",
        Tool::Write,
        Some("/w/p/src/bin/x.rs")
    ));
    // An absolute pattern is anchored at the root.
    assert!(matches("write(/etc/**)", Tool::Write, Some("/etc/hosts")));
    assert!(!matches(
        "write(/etc/**)",
        Tool::Write,
        Some("/home/u/etc/hosts")
    ));
}

#[test]
fn subjects_are_canonical() {
    let cwd = Path::new("/work/repo");
    assert_eq!(
        canonical_subject(Tool::Write, "../x/./y", cwd).unwrap(),
        "/work/x/y"
    );
    assert_eq!(
        canonical_subject(Tool::Read, "/a/b/../../etc/passwd", cwd).unwrap(),
        "/etc/passwd"
    );
    assert_eq!(
        canonical_subject(Tool::Exec, "rm   -rf  'a b'", cwd).unwrap(),
        "rm -rf 'a b'"
    );
    assert!(canonical_subject(Tool::Exec, "echo 'open", cwd).is_err());
    assert!(canonical_subject(Tool::Write, "", cwd).is_err());
    assert_eq!(
        canonical_subject(Tool::Connect, "API.GitHub.com:443", cwd).unwrap(),
        "api.github.com:443"
    );
    assert_eq!(exec_subject(&["echo".into(), "a b".into()]), "echo 'a b'");
}

#[test]
fn bad_patterns_say_what_is_accepted() {
    for (raw, problem) in [
        ("bash(rm", "must end with `)`"),
        ("bash)", "has `)` without `(`"),
        ("write()", "has an empty subject glob"),
        ("(x)", "has no tool name"),
        ("", "has no tool name"),
        (
            "tools_question",
            "names no tool of guard's (`tools_question`)",
        ),
        ("wrtie(/etc/**)", "names no tool of guard's (`wrtie`)"),
        ("write([)", "has an invalid subject glob"),
        ("{exec(ls)", "has an invalid tool-name glob"),
    ] {
        let err = RuleSetPattern::parse(raw).unwrap_err().to_string();
        assert!(err.contains(problem), "{raw:?}: {err}");
        assert!(
            err.contains("\"tool\", \"tool*\", \"tool(glob)\" and \"*\"")
                && err.contains(TOOL_NAMES),
            "{err}"
        );
    }
}

#[test]
fn strongest_wins_across_sets_and_ties_keep_the_first() {
    let allow_all = set(&[], &[], &["write(*)"]);
    let deny_etc = set(&["write(/etc/**)"], &[], &[]);
    let ask_etc = set(&[], &["write(/etc/*)"], &[]);
    let found = strongest(
        [&allow_all, &ask_etc, &deny_etc],
        Tool::Write,
        Some("/etc/x"),
    )
    .unwrap();
    assert_eq!(found.decision, Decision::Forbidden);
    assert_eq!(found.pattern.text(), "write(/etc/**)");
    let found = strongest([&allow_all, &ask_etc], Tool::Write, Some("/etc/x")).unwrap();
    assert_eq!(found.decision, Decision::Prompt);
    let first = set(&[], &[], &["write"]);
    let found = strongest([&allow_all, &first], Tool::Write, Some("/tmp/x")).unwrap();
    assert_eq!(found.pattern.text(), "write(*)");
    assert!(strongest([&deny_etc], Tool::Write, Some("/tmp/x")).is_none());
    assert!(RuleSet::default().is_empty() && !allow_all.is_empty());
}
