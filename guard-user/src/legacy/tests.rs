//! The engine from policy text to classification, without the CLI.

use super::*;

fn exec(argv: &[&str]) -> ExecCall {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    ExecCall::from_argv(&argv).expect("non-empty argv")
}

fn default_policy() -> Policy {
    load_policy(None).expect("the built-in policy parses")
}

fn policy(source: &str) -> Policy {
    parse_policy("test.policy", source).unwrap_or_else(|err| panic!("{err}"))
}

fn parse_error(source: &str) -> String {
    match parse_policy("bad.policy", source) {
        Ok(_) => panic!("expected a parse error for:\n{source}"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn ls_al_is_unverified_because_options_are_not_bundled() {
    assert_eq!(
        classify(&default_policy(), &exec(&["ls", "-al"])),
        Classification::Unverified(Error::UnknownOption {
            program: "ls".into(),
            option: "-al".into(),
        })
    );
}

#[test]
fn the_default_policy_reads_its_programs_as_the_table_says() {
    let policy = default_policy();
    let cases: &[(&[&str], &str)] = &[
        (&["ls"], "safe"),
        (&["ls", "-a", "-l", "-1", "src"], "safe"),
        (&["cat", "-n", "a", "b"], "safe"),
        (&["cat"], "unverified"),
        (&["cp", "-r", "a", "b", "dst"], "match"),
        (&["head", "-n", "5", "f"], "safe"),
        (&["head", "-n", "0", "f"], "unverified"),
        (&["printenv"], "safe"),
        (&["printenv", "HOME"], "safe"),
        (&["printenv", "HOME", "PATH"], "unverified"),
        (&["pwd", "-P"], "safe"),
        (&["pwd", "dir"], "unverified"),
        (
            &["rg", "-n", "-g", "*.rs", "--max-depth", "2", "TODO", "src"],
            "safe",
        ),
        (&["rg", "--max-count=1", "x"], "unverified"),
        (&["sed", "-n", "122,202p", "f"], "safe"),
        (&["sed", "-n", "-e", "1,2p", "f"], "safe"),
        (&["sed", "-n", "5p", "f"], "unverified"),
        (&["sed", "-i", "s/a/b/", "f"], "unverified"),
        (&["which", "-a", "ls"], "safe"),
        (&["rm", "-rf", "/"], "unverified"),
    ];
    for (argv, expected) in cases {
        assert_eq!(
            classify(&policy, &exec(argv)).name(),
            *expected,
            "{argv:?}: {:?}",
            classify(&policy, &exec(argv))
        );
    }
}

#[test]
fn with_several_specs_the_last_ones_error_is_returned() {
    // sed's second spec requires -e: its error is the one reported.
    assert_eq!(
        classify(&default_policy(), &exec(&["sed", "-n", "f"])),
        Classification::Unverified(Error::MissingRequiredOptions {
            program: "sed".into(),
            options: vec!["-e".into()],
        })
    );
}

#[test]
fn option_bundling_and_combined_format_are_accepted_but_change_nothing() {
    let policy = policy(
        "define_program(program='ls', option_bundling=True, combined_format=True,\n\
         options=[flag('-a'), flag('-l'), opt('--width', ARG_POS_INT)], args=[ARG_RFILES_OR_CWD])\n",
    );
    let spec = &policy.specs("ls")[0];
    assert!(spec.option_bundling && spec.combined_format);
    for (argv, option) in [
        (&["ls", "-al"][..], "-al"),
        (&["ls", "--width=80"][..], "--width=80"),
    ] {
        assert_eq!(
            classify(&policy, &exec(argv)),
            Classification::Unverified(Error::UnknownOption {
                program: "ls".into(),
                option: option.into()
            })
        );
    }
}

#[test]
fn examples_are_checked_only_when_asked() {
    // Loading succeeds although both lists are wrong.
    let policy = policy(
        "define_program(program='cat', args=[ARG_RFILE],\n\
         should_match=[['a'], ['a', 'b']], should_not_match=[[], ['b']])\n",
    );
    let failing = policy.check_each_good_list_individually();
    assert_eq!(failing.len(), 1);
    assert_eq!(failing[0].0, "cat");
    assert_eq!(failing[0].1, ["a", "b"]);
    assert_eq!(
        policy.check_each_bad_list_individually(),
        [("cat".to_string(), vec!["b".to_string()])]
    );
}

#[test]
fn duplicate_option_names_fail_to_load() {
    let message =
        parse_error("define_program(program='ls', options=[flag('-a'), opt('-a', ARG_POS_INT)])\n");
    assert!(message.contains("duplicate flag: -a"), "{message}");
}

#[test]
fn an_invalid_program_regex_fails_to_load() {
    let message = parse_error("forbid_program_regex('(', 'unbalanced')\n");
    assert!(message.contains("invalid regex"), "{message}");
}

#[test]
fn options_and_args_must_be_declared_with_the_builtins() {
    let message = parse_error("define_program(program='ls', options=['-a'])\n");
    assert!(
        message.contains("options must be flag(NAME) or opt(NAME, TYPE)"),
        "{message}"
    );
    let message = parse_error("define_program(program='ls', args=[1])\n");
    assert!(
        message.contains("must be an ARG_* matcher or a string literal"),
        "{message}"
    );
}

#[test]
fn the_policy_language_is_starlark_with_typing_and_f_strings() {
    let policy = policy(
        "def readonly(name: str):\n\
         \x20   define_program(program=name, args=[ARG_RFILES], system_path=[f'/bin/{name}'])\n\
         [readonly(n) for n in ['cat', 'tac']]\n",
    );
    assert_eq!(policy.specs("tac")[0].system_path, ["/bin/tac"]);
    assert_eq!(
        classify(&policy, &exec(&["cat", "x"])).name(),
        "safe",
        "list comprehension defined cat"
    );
}

#[test]
fn load_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.policy");
    std::fs::write(
        &path,
        "\n\ndefine_program(program='ls', options=[flag('-a'), flag('-a')])\n",
    )
    .unwrap();
    let err = load_policy(Some(&path)).unwrap_err();
    let expected = format!("{}:3: ", path.display());
    assert!(err.to_string().starts_with(&expected), "{err}");
    assert!(err.to_string().contains("duplicate flag: -a"), "{err}");

    let missing = dir.path().join("missing.policy");
    assert!(matches!(
        load_policy(Some(&missing)),
        Err(LoadError::Read { path, .. }) if path == missing.display().to_string()
    ));
}
