//! Loading policies from disk (docs/policy-language.md §3.1): files and folders, order, symlinks, overlays, the
//! defaults, and refusing the whole policy on any error.

use std::path::{Path, PathBuf};

use guard::policy::load::{
    EMBEDDED_DEFAULT_NAME, EMBEDDED_DEFAULT_RULES, RulesSource, SYSTEM_RULES_ENV, load_policy,
    rules_files,
};
use guard::policy::{Decision, LoadError, MatchOptions};

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn argv(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

#[test]
fn a_folder_means_its_regular_rules_files_sorted_by_path() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "b.rules", r#"prefix_rule(pattern=["b"])"#);
    write(dir.path(), "a.rules", r#"prefix_rule(pattern=["a"])"#);
    write(dir.path(), "c.rules.bak", "this is not starlark");
    write(dir.path(), "notes.txt", "neither is this");
    std::fs::create_dir(dir.path().join("sub.rules")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = write(
        outside.path(),
        "linked.rules",
        r#"prefix_rule(pattern=["linked"])"#,
    );
    std::os::unix::fs::symlink(&target, dir.path().join("0-linked.rules")).unwrap();

    let files = rules_files(dir.path()).unwrap();
    assert_eq!(
        files,
        [dir.path().join("a.rules"), dir.path().join("b.rules")]
    );

    let loaded = load_policy(&[dir.path().to_path_buf()], &[]).unwrap();
    let programs: Vec<&str> = loaded
        .policy
        .prefix_rules()
        .iter()
        .map(|r| r.program())
        .collect();
    assert_eq!(programs, ["a", "b"]);
}

#[test]
fn several_paths_are_one_policy_in_the_order_given() {
    let dir = tempfile::tempdir().unwrap();
    let first = write(
        dir.path(),
        "z.rules",
        r#"host_executable(name="git", paths=["/usr/bin/git"])"#,
    );
    let second = write(
        dir.path(),
        "a.rules",
        "host_executable(name=\"git\", paths=[\"/opt/git\"])\nprefix_rule(pattern=[\"git\"])",
    );
    let loaded = load_policy(&[first.clone(), second.clone()], &[]).unwrap();
    // The later definition replaces the earlier one: order is the order given, not by name.
    assert_eq!(
        loaded.policy.host_executables()["git"].as_ref(),
        [PathBuf::from("/opt/git")]
    );
    assert_eq!(
        loaded.sources,
        [RulesSource::File(first), RulesSource::File(second)]
    );
    let resolve = MatchOptions {
        resolve_host_executables: true,
    };
    assert_eq!(
        loaded
            .policy
            .check_with_options(&argv("/usr/bin/git x"), None, resolve)
            .decision,
        None
    );
}

#[test]
fn an_error_in_any_file_refuses_the_whole_policy_with_its_path_and_line() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.rules", r#"prefix_rule(pattern=["a"])"#);
    let bad = write(
        dir.path(),
        "b.rules",
        "prefix_rule(pattern=[\"b\"])\nprefix_rule(pattern=[\"c\"], decision=\"nope\")\n",
    );
    let err = load_policy(&[dir.path().to_path_buf()], &[]).unwrap_err();
    assert!(matches!(err, LoadError::Parse { .. }));
    assert_eq!(
        err.display_line(),
        format!(
            "{}:2: error: invalid decision: nope (problem is on or around line 2)",
            bad.display()
        )
    );
    assert!(
        err.to_string()
            .starts_with(&format!("failed to parse rules file {}: ", bad.display()))
    );
}

#[test]
fn unreadable_paths_are_errors_not_empty_policies() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.rules");
    let err = load_policy(std::slice::from_ref(&missing), &[]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("failed to read rules file {}", missing.display())),
        "{err}"
    );
    let not_utf8 = dir.path().join("binary.rules");
    std::fs::write(&not_utf8, [0xff, 0xfe, 0x00]).unwrap();
    assert!(matches!(
        load_policy(&[not_utf8], &[]).unwrap_err(),
        LoadError::ReadFile { .. }
    ));
}

#[test]
fn overlays_are_parsed_on_their_own_and_merged_on_top() {
    let dir = tempfile::tempdir().unwrap();
    let base = write(
        dir.path(),
        "base.rules",
        r#"prefix_rule(pattern=["curl"])
network_rule(host="evil.example", protocol="https", decision="allow")"#,
    );
    let overlay = write(
        dir.path(),
        "managed.rules",
        r#"prefix_rule(pattern=["curl"], decision="forbidden", justification="use the proxy")
network_rule(host="evil.example", protocol="https", decision="deny")"#,
    );
    let loaded = load_policy(&[base], std::slice::from_ref(&overlay)).unwrap();
    assert_eq!(loaded.overlay_sources, [RulesSource::File(overlay)]);
    assert_eq!(
        loaded.policy.check(&argv("curl x"), None).decision,
        Some(Decision::Forbidden)
    );
    assert_eq!(loaded.policy.network_domains().denied, ["evil.example"]);

    // A separate parser: an overlay's examples see only the overlay's own host executables.
    let strict = write(
        dir.path(),
        "strict.rules",
        r#"prefix_rule(pattern=["git"], match=["/usr/bin/git x"])"#,
    );
    let base_with_entry = write(
        dir.path(),
        "he.rules",
        r#"host_executable(name="git", paths=["/opt/git"])"#,
    );
    load_policy(&[base_with_entry], &[strict]).expect("overlay examples do not see base entries");
}

/// Tests that touch the process environment run in one test, one after the other, in a child
/// process of their own: set here, the variable would reach every `guard` the binary's other
/// tests spawn meanwhile.
#[test]
fn without_paths_the_system_folder_then_the_embedded_default_is_used() {
    if !guard_tests::alone_in_a_child(concat!(
        module_path!(),
        "::without_paths_the_system_folder_then_the_embedded_default_is_used"
    )) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: this process runs only this test (`alone_in_a_child`).
    unsafe { std::env::set_var(SYSTEM_RULES_ENV, dir.path().join("absent")) };
    let loaded = load_policy(&[], &[]).unwrap();
    assert_eq!(loaded.sources, [RulesSource::EmbeddedDefault]);
    let policy = &loaded.policy;
    assert_eq!(
        policy.check(&argv("git status"), None).decision,
        Some(Decision::Allow)
    );
    assert_eq!(
        policy.check(&argv("git push origin main"), None).decision,
        Some(Decision::Prompt)
    );
    assert_eq!(
        policy.check(&argv("rm -rf /"), None).decision,
        Some(Decision::Forbidden)
    );
    assert_eq!(policy.check(&argv("rm -rf build"), None).decision, None);
    assert!(policy.prefix_rules().iter().all(|rule| {
        rule.origin
            .as_ref()
            .is_some_and(|o| &*o.file == EMBEDDED_DEFAULT_NAME)
    }));
    assert!(EMBEDDED_DEFAULT_RULES.contains("prefix_rule"));

    let system = dir.path().join("rules");
    std::fs::create_dir(&system).unwrap();
    write(
        &system,
        "site.rules",
        r#"prefix_rule(pattern=["git", "status"], decision="forbidden")"#,
    );
    unsafe { std::env::set_var(SYSTEM_RULES_ENV, &system) };
    let loaded = load_policy(&[], &[]).unwrap();
    assert_eq!(
        loaded.sources,
        [RulesSource::File(system.join("site.rules"))]
    );
    assert_eq!(
        loaded.policy.check(&argv("git status"), None).decision,
        Some(Decision::Forbidden)
    );
    unsafe { std::env::remove_var(SYSTEM_RULES_ENV) };
}
