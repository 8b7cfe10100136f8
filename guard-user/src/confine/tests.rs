use std::path::{Path, PathBuf};

use super::*;

fn rule(pattern: &str) -> WriteRule {
    WriteRule::parse(pattern, "t.rules:1", false).unwrap_or_else(|| panic!("{pattern}"))
}

fn rules(deny: &[&str], ask: &[&str]) -> WriteRules {
    WriteRules {
        deny: deny.iter().map(|p| rule(p)).collect(),
        ask: ask.iter().map(|p| rule(p)).collect(),
        sockets: Vec::new(),
    }
}

/// A temporary folder, canonical (so plans' canonical paths compare equal).
fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    (dir, path)
}

fn denied(plan: &WritePlan) -> Vec<(PathBuf, Hold)> {
    plan.denied
        .iter()
        .map(|d| (d.path.clone(), d.hold))
        .collect()
}

fn granted_below(plan: &WritePlan, dir: &Path) -> Vec<(String, bool)> {
    let (grants, errors) = plan.grants();
    assert!(errors.is_empty(), "{errors:?}");
    let mut below: Vec<(String, bool)> = grants
        .into_iter()
        .filter_map(|g| {
            let rel = g
                .path
                .strip_prefix(dir)
                .ok()?
                .to_string_lossy()
                .into_owned();
            Some((rel, g.folder))
        })
        .collect();
    below.sort();
    below
}

#[test]
fn the_literal_prefix_stops_at_the_first_metacharacter_and_reads_escapes() {
    assert_eq!(literal_prefix("/srv/data/**"), ("/srv/data/".into(), "**"));
    assert_eq!(literal_prefix("/srv/*.log"), ("/srv/".into(), "*.log"));
    assert_eq!(literal_prefix("/a/b"), ("/a/b".into(), ""));
    assert_eq!(literal_prefix("/a/[*]b/[[]x[]]"), ("/a/*b/[x]".into(), ""));
    assert_eq!(literal_prefix("/a/\\?b/**"), ("/a/?b/".into(), "**"));
    assert_eq!(literal_prefix("/a/[ab]"), ("/a/".into(), "[ab]"));
    assert_eq!(literal_prefix("/a/[!]"), ("/a/".into(), "[!]"));
    assert_eq!(literal_prefix("/a/{b,c}"), ("/a/".into(), "{b,c}"));
    assert_eq!(literal_prefix("/a/b?"), ("/a/b".into(), "?"));
}

#[test]
fn globs_name_a_folder_below_a_path_or_no_concrete_path() {
    let cwd = Path::new("/work/proj");
    let path = |glob: Option<&str>| match target(glob, cwd) {
        Target::Path {
            path,
            subtree,
            relative,
        } => Some((path.to_string_lossy().into_owned(), subtree, relative)),
        Target::Unholdable(_) => None,
    };
    assert_eq!(
        path(Some("/srv/data/**")),
        Some(("/srv/data".into(), true, false))
    );
    assert_eq!(
        path(Some("/etc/passwd")),
        Some(("/etc/passwd".into(), false, false))
    );
    assert_eq!(path(Some("/srv/*.log")), None);
    assert_eq!(path(Some("/srv/data/**/*.log")), None);
    assert_eq!(path(Some("/srv/data/*")), None);
    assert_eq!(path(Some("/srv/data**")), None);
    assert_eq!(
        path(Some(".git/**")),
        Some(("/work/proj/.git".into(), true, true))
    );
    assert_eq!(
        path(Some("./**/.git/**")),
        Some(("/work/proj/.git".into(), true, true))
    );
    assert_eq!(
        path(Some("secrets.txt")),
        Some(("/work/proj/secrets.txt".into(), false, true))
    );
    assert_eq!(path(Some("*.env")), None, "a file name anywhere");
    assert_eq!(path(Some("**/*.env")), None);
    // Every path: a bare `write`, `write(**)` and `write(/**)`.
    for glob in [None, Some("**"), Some("/**")] {
        assert_eq!(path(glob), Some(("/".into(), true, false)), "{glob:?}");
    }
    // The current folder's own glob characters are literal.
    match target(Some(".git/**"), Path::new("/w/a[1]*")) {
        Target::Path { path, .. } => assert_eq!(path, Path::new("/w/a[1]*/.git")),
        Target::Unholdable(why) => panic!("{why}"),
    }
}

#[test]
fn a_relative_deny_is_held_at_the_current_folder_and_the_rest_is_reported() {
    let (_dir, cwd) = tempdir();
    std::fs::create_dir(cwd.join(".git")).unwrap();
    std::fs::write(cwd.join(".git/config"), "x").unwrap();
    std::fs::write(cwd.join("other"), "").unwrap();
    std::fs::create_dir(cwd.join("src")).unwrap();
    std::os::unix::fs::symlink(cwd.join(".git"), cwd.join("link")).unwrap();
    let plan = WritePlan::new(
        &rules(
            &[
                "write(.git/**)",
                "write(/srv/*.log)",
                "write(*.env)",
                "write(/nonexistent-guard-test/**)",
            ],
            &["write(notes/**)"],
        ),
        &cwd,
    );
    assert_eq!(denied(&plan), [(cwd.join(".git"), Hold::Beneath)]);
    let not_held: Vec<&str> = plan
        .not_held
        .iter()
        .map(|n| n.rule.pattern.as_str())
        .collect();
    assert_eq!(
        not_held,
        [
            "write(/srv/*.log)",
            "write(*.env)",
            "write(/nonexistent-guard-test/**)"
        ]
    );
    assert!(
        plan.not_held[0].why.contains("\"/srv/\""),
        "{:?}",
        plan.not_held
    );
    assert!(plan.not_held[2].why.contains("does not exist"));
    assert_eq!(plan.partly.len(), 1);
    assert!(plan.partly[0].why.contains("below any folder"));
    assert_eq!(plan.not_enforced, [rule("write(notes/**)")]);
    assert_eq!(plan.unheld_written_rules(), 3 + 1 + 1);

    // Every folder from `/` down to the current one is on the way; the siblings there get
    // rights, the symlink and the denied folder none.
    let ways = plan.ways();
    for ancestor in cwd.ancestors() {
        assert!(ways.contains(ancestor), "{}", ancestor.display());
    }
    assert!(!ways.contains(&cwd.join(".git")));
    assert_eq!(
        granted_below(&plan, &cwd),
        [("other".to_string(), false), ("src".to_string(), true)]
    );
    let (grants, _) = plan.grants();
    assert!(grants.contains(&Grant {
        path: "/usr".into(),
        folder: true
    }));
    assert!(!grants.iter().any(|g| g.path == Path::new("/")));
    assert!(!plan.denies_everything());
}

#[test]
fn a_folder_named_without_stars_keeps_its_entries_and_nested_denials_fold() {
    let (_dir, root) = tempdir();
    for folder in ["a/b/c", "d", "e"] {
        std::fs::create_dir_all(root.join(folder)).unwrap();
    }
    std::fs::write(root.join("a/file"), "").unwrap();
    std::fs::write(root.join("d/inside"), "").unwrap();
    let r = root.to_string_lossy();
    let plan = WritePlan::new(
        &rules(
            &[
                &format!("write({r}/a/**)"),
                &format!("write({r}/a/b/**)"),
                &format!("write({r}/a/b)"),
                &format!("write({r}/d)"),
            ],
            &[],
        ),
        Path::new("/"),
    );
    assert_eq!(plan.not_held, []);
    let ways = plan.ways();
    assert!(
        ways.contains(&root.join("d")),
        "an exact folder is on the way"
    );
    assert!(!ways.contains(&root.join("a/b")), "inside a denied folder");
    assert_eq!(
        granted_below(&plan, &root),
        [("d/inside".to_string(), false), ("e".to_string(), true)]
    );
}

#[test]
fn symlinks_are_followed_to_what_they_name() {
    let (_dir, root) = tempdir();
    std::fs::create_dir(root.join("real")).unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
    let plan = WritePlan::new(
        &rules(&[&format!("write({}/alias/**)", root.display())], &[]),
        Path::new("/"),
    );
    assert_eq!(denied(&plan), [(root.join("real"), Hold::Beneath)]);
    // The symlink gets nothing either (a write through it is decided at `real`).
    assert_eq!(granted_below(&plan, &root), []);
}

#[test]
fn a_pattern_for_every_path_denies_every_write() {
    let plan = WritePlan::new(&rules(&["write"], &[]), Path::new("/"));
    assert!(plan.denies_everything());
    assert_eq!(plan.grants(), (Vec::new(), Vec::new()));
    let plan = WritePlan::new(&rules(&[], &[]), Path::new("/"));
    assert!(plan.is_empty());
    assert!(!plan.denies_everything());
}

#[test]
fn a_loaded_policy_gives_its_protected_paths_and_its_write_rules() {
    let (_dir, root) = tempdir();
    let file = root.join("a*.rules");
    std::fs::write(
        &file,
        "rule_set(deny=[\"write(.git/**)\", \"read(*.env)\", \"bash(rm*)\", \"*\"],\n\
         ask=[\"w*(/srv/**)\"], allow=[\"write\"])\n",
    )
    .unwrap();
    let loaded = crate::policy::load::load_policy(std::slice::from_ref(&file), &[]).unwrap();
    let rules = WriteRules::of_policy(&loaded.policy);
    let deny: Vec<(&str, bool)> = rules
        .deny
        .iter()
        .map(|r| (r.pattern.as_str(), r.builtin))
        .collect();
    let escaped = format!("write({})", globset::escape(&file.to_string_lossy()));
    assert_eq!(
        deny,
        [
            ("write(/etc/guard/**)", true),
            ("write(/etc/guard/rules/**)", true),
            ("write(/var/lib/guard/**)", true),
            ("write(/run/guard/**)", true),
            ("write(/var/log/guard/**)", true),
            (escaped.as_str(), true),
            ("write(.git/**)", false),
            ("*", false),
        ]
    );
    assert_eq!(rules.deny[6].from, format!("{}:1", file.display()));
    assert_eq!(rules.deny[7].glob, None);
    assert_eq!(
        rules.ask,
        [WriteRule {
            from: rules.ask[0].from.clone(),
            ..rule("w*(/srv/**)")
        }]
    );

    // The rules file (its `*` literal) is held exactly; its folder is on the way.
    let without_star = WriteRules {
        deny: rules.deny[..6].to_vec(),
        ask: Vec::new(),
        sockets: Vec::new(),
    };
    let plan = WritePlan::new(&without_star, &root);
    assert!(denied(&plan).contains(&(file.clone(), Hold::Beneath)));
    assert!(plan.ways().contains(&root));
    // Missing fixed folders are not worth a note.
    assert_eq!(plan.unheld_written_rules(), 0);
}

#[test]
fn the_fixed_rules_hold_the_fixed_folders_and_the_files_named() {
    let rules = WriteRules::fixed(&[PathBuf::from("/run/guard-test.sock")]);
    assert_eq!(rules.deny.len(), 6);
    assert!(rules.deny.iter().all(|r| r.builtin));
    assert_eq!(rules.deny[5].glob.as_deref(), Some("/run/guard-test.sock"));
}

#[test]
fn a_missing_protected_path_is_held_by_guards_own_folder_above_it_only() {
    let (_dir, root) = tempdir();
    std::fs::create_dir_all(root.join("guard")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    let builtin = |path: &Path| {
        WriteRule::parse(&format!("write({})", path.display()), "<b>:1", true).unwrap()
    };
    let written = WriteRule::parse(
        &format!("write({}/guard/mine/**)", root.display()),
        "t.rules:1",
        false,
    )
    .unwrap();
    let rules = WriteRules {
        deny: vec![
            builtin(&root.join("guard/rules")),
            builtin(&root.join("guard/rules/deeper")),
            builtin(&root.join("etc/guard/rules")),
            written,
        ],
        ask: vec![],
        sockets: vec![],
    };
    let plan = WritePlan::new(&rules, &root);
    // Once for both rules below `guard`; `etc` is not guard's; a written rule is not held.
    assert_eq!(plan.missing_holders, [root.join("guard")]);
    assert_eq!(plan.not_held.len(), 4);
}

#[test]
fn an_allowed_unix_socket_is_held_like_a_denied_file_and_its_folder_is_on_the_way() {
    let (_dir, root) = tempdir();
    let socket = root.join("srv.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mut parser = crate::policy::PolicyParser::new();
    parser
        .parse(
            "t.rules",
            &format!(
                "unix_rule(socket=\"{}\", decision=\"allow\")\n\
                 unix_rule(socket=\"{}/later.sock\", decision=\"allow\")\n",
                socket.display(),
                root.display()
            ),
        )
        .unwrap();
    let rules = WriteRules::of_policy(&parser.build());
    let plan = WritePlan::new(&rules, &root);
    assert!(denied(&plan).contains(&(socket.clone(), Hold::Beneath)));
    assert!(plan.ways().contains(&root));
    // The socket no server made yet has nothing to hold, and is said to.
    assert!(
        plan.not_held
            .iter()
            .any(|n| n.rule.pattern.contains("later.sock") && n.why.contains("does not exist")),
        "{:?}",
        plan.not_held
    );
    assert!(plan.unheld_written_rules() >= 1);
}
