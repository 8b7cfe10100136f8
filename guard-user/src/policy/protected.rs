//! Protected paths: built-in `write(...)` deny rules that no policy can lift, so a guarded
//! process can never change the policy that guards it (guard's configuration, its rules, the
//! amendments file and state folder, the control socket, the audit log).
//!
//! They are ordinary rule sets, evaluated by the same engine as written ones, and a deny
//! (forbidden) is the strongest decision: an `allow=["write(*)"]` elsewhere cannot outvote them.
//! Each is its own one-pattern set whose origin is `<built-in protected paths>` and whose "line"
//! is its position in [`protected_paths`]'s list, so a decision names the protected path exactly.

use std::path::{Path, PathBuf};

use super::paths::normalize_lexically;
use super::rule::RuleOrigin;
use super::rule_set::{RuleSet, RuleSetPattern, Tool};

/// The file name decisions made by a protected path report.
pub const PROTECTED_PATHS_ORIGIN: &str = "<built-in protected paths>";

/// The fixed protected folders and why each is protected. The daemon's defaults (see
/// `daemon::config`); a folder pattern `/**` also covers the folder itself.
const FIXED: [(&str, &str); 5] = [
    (
        "/etc/guard/**",
        "guard's own configuration (guard.toml, the authorization policy)",
    ),
    ("/etc/guard/rules/**", "the system rules folder"),
    (
        "/var/lib/guard/**",
        "the daemon's state folder, with the amendments file rules/default.rules",
    ),
    ("/run/guard/**", "the daemon's control socket"),
    ("/var/log/guard/**", "the audit log folder"),
];

/// One protected path: a one-pattern deny rule set, and why it is there.
#[derive(Clone, Debug)]
pub struct ProtectedPath {
    pub rule_set: RuleSet,
    pub why: String,
}

impl ProtectedPath {
    /// The `write(...)` pattern, as `policy show` and decisions print it.
    pub fn pattern(&self) -> &str {
        self.rule_set.deny[0].text()
    }
}

/// The fixed protected paths, then every rules path the policy was loaded from (a file as
/// itself, a folder with everything below it) that those do not already cover. Relative paths
/// are made absolute against the current folder.
pub fn protected_paths(loaded_from: &[PathBuf]) -> Vec<ProtectedPath> {
    protected_paths_with(loaded_from, &[])
}

/// [`protected_paths`], then each of `also` (a path and why it is protected) that the others do
/// not already cover: the daemon's configured state folder, control socket, audit log and
/// configuration files, which need not be at the fixed places. A folder is protected with
/// everything below it, anything else (a file, a socket, a path not made yet) as itself.
pub fn protected_paths_with(
    loaded_from: &[PathBuf],
    also: &[(PathBuf, &str)],
) -> Vec<ProtectedPath> {
    let mut protected: Vec<ProtectedPath> = Vec::new();
    for (glob, why) in FIXED {
        push(&mut protected, glob.to_string(), why);
    }
    let rules = loaded_from.iter().map(|path| {
        (
            path,
            "a rules folder this policy was loaded from",
            "a rules file this policy was loaded from",
        )
    });
    let others = also.iter().map(|(path, why)| (path, *why, *why));
    for (path, folder_why, file_why) in rules.chain(others) {
        let absolute = absolute(path);
        let subject = absolute.to_string_lossy().into_owned();
        if covered(protected_sets(&protected), &subject) {
            continue;
        }
        // A path may hold glob characters (`[`, `*`); they are literal here.
        let escaped = globset::escape(&subject);
        let (glob, why) = if absolute.is_dir() {
            (format!("{}/**", escaped.trim_end_matches('/')), folder_why)
        } else {
            (escaped, file_why)
        };
        push(&mut protected, glob, why);
    }
    protected
}

/// Appends `write(path_glob)` as the next protected path; its line is its position.
fn push(protected: &mut Vec<ProtectedPath>, path_glob: String, why: &str) {
    let text = format!("write({path_glob})");
    let pattern = RuleSetPattern::parse(&text).expect("protected path patterns are valid globs");
    let line = protected.len() + 1;
    protected.push(ProtectedPath {
        rule_set: RuleSet {
            deny: vec![pattern],
            origin: Some(RuleOrigin {
                file: PROTECTED_PATHS_ORIGIN.into(),
                line,
            }),
            ..RuleSet::default()
        },
        why: why.to_string(),
    });
}

fn protected_sets(protected: &[ProtectedPath]) -> impl Iterator<Item = &RuleSet> {
    protected.iter().map(|p| &p.rule_set)
}

fn covered<'a>(mut sets: impl Iterator<Item = &'a RuleSet>, subject: &str) -> bool {
    sets.any(|set| set.evaluate(Tool::Write, Some(subject)).is_some())
}

/// `path` as the loader opened it: resolved the way open(2) does (`dir/link/../x.rules` is
/// `x.rules` beside the link's target, not in `dir`) when it exists, else made absolute and
/// lexically normalised (a path not made yet has no symlinks to follow).
fn absolute(path: &Path) -> PathBuf {
    if let Ok(resolved) = path.canonicalize() {
        return resolved;
    }
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    normalize_lexically(&joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Decision;

    fn decide(protected: &[ProtectedPath], path: &str) -> Option<(Decision, String, usize)> {
        super::super::rule_set::strongest(protected_sets(protected), Tool::Write, Some(path)).map(
            |found| {
                (
                    found.decision,
                    found.pattern.text().to_string(),
                    found.origin.unwrap().line,
                )
            },
        )
    }

    #[test]
    fn fixed_paths_refuse_writes_below_and_to_the_folder_itself() {
        let protected = protected_paths(&[]);
        assert_eq!(protected.len(), FIXED.len());
        assert_eq!(
            decide(&protected, "/etc/guard/rules/x.rules"),
            Some((Decision::Forbidden, "write(/etc/guard/**)".into(), 1))
        );
        for path in [
            "/etc/guard",
            "/var/lib/guard/rules/default.rules",
            "/run/guard/guard.sock",
            "/var/log/guard/audit.jsonl",
        ] {
            assert_eq!(decide(&protected, path).unwrap().0, Decision::Forbidden);
        }
        assert_eq!(decide(&protected, "/etc/guardian"), None);
        assert_eq!(decide(&protected, "/tmp/etc/guard/x"), None);
        // Only writes: reading guard's rules is not what these rules are about.
        assert!(
            protected[0]
                .rule_set
                .evaluate(Tool::Read, Some("/etc/guard/guard.toml"))
                .is_none()
        );
    }

    #[test]
    fn a_rules_path_through_a_symlink_and_dotdot_is_the_file_open_reaches() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(d.join("dir")).unwrap();
        std::fs::create_dir_all(d.join("real/sub")).unwrap();
        std::os::unix::fs::symlink(d.join("real/sub"), d.join("dir/link")).unwrap();
        std::fs::write(d.join("real/x.rules"), "").unwrap();
        std::fs::write(d.join("dir/x.rules"), "").unwrap();
        let protected = protected_paths(&[d.join("dir/link/../x.rules")]);
        let loaded = d.join("real/x.rules").display().to_string();
        assert_eq!(
            protected.last().unwrap().pattern(),
            format!("write({loaded})")
        );
    }

    #[test]
    fn loaded_rules_paths_are_protected_escaped_and_not_twice() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("rules[1]");
        std::fs::create_dir(&folder).unwrap();
        let file = dir.path().join("a*.rules");
        std::fs::write(&file, "").unwrap();
        let protected = protected_paths(&[
            folder.clone(),
            file.clone(),
            PathBuf::from("/etc/guard/rules"),
        ]);
        assert_eq!(
            protected.len(),
            FIXED.len() + 2,
            "/etc/guard/rules is covered"
        );
        assert_eq!(
            protected[5].why,
            "a rules folder this policy was loaded from"
        );
        let inside = folder.join("new.rules");
        assert_eq!(decide(&protected, &inside.to_string_lossy()).unwrap().2, 6);
        assert_eq!(decide(&protected, &file.to_string_lossy()).unwrap().2, 7);
        // The file's `*` is literal: its neighbours stay writable.
        let neighbour = dir.path().join("ab.rules");
        assert_eq!(decide(&protected, &neighbour.to_string_lossy()), None);
    }

    #[test]
    fn the_daemons_configured_paths_are_protected_unless_already_covered() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let socket = dir.path().join("guard.sock");
        let audit = dir.path().join("audit.jsonl");
        let protected = protected_paths_with(
            &[],
            &[
                (state.clone(), "the daemon's state folder"),
                (socket.clone(), "the daemon's control socket"),
                (audit.clone(), "the audit log"),
                (PathBuf::from("/var/lib/guard"), "already covered"),
            ],
        );
        assert_eq!(protected.len(), FIXED.len() + 3);
        assert_eq!(protected[5].why, "the daemon's state folder");
        assert!(protected[5].pattern().ends_with("/state/**)"));
        let amendments = state.join("rules").join("default.rules");
        assert_eq!(
            decide(&protected, &amendments.to_string_lossy()).unwrap().2,
            6
        );
        assert_eq!(decide(&protected, &socket.to_string_lossy()).unwrap().2, 7);
        assert_eq!(decide(&protected, &audit.to_string_lossy()).unwrap().2, 8);
        let neighbour = dir.path().join("other");
        assert_eq!(decide(&protected, &neighbour.to_string_lossy()), None);
    }
}
