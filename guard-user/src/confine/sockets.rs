//! The unix sockets a scope reaches by name, held in place. The kernel's unix hooks decide by
//! the name a program connects to, before the kernel resolves it: an allowed name reaches
//! whatever file is there. So every whole name an allow rule (the policy's `unix_rule` or the
//! built-in list) names is held like a denied path: the socket a read-only bind of itself
//! (it cannot be removed, renamed over or replaced: EBUSY), the folders on the way binds of
//! themselves (they cannot be moved aside), and the folder of every symlink on the way
//! (`/dev/log` → `/run/systemd/journal/dev-log`) read-only as a whole, so the link cannot be
//! pointed elsewhere. A connect through a read-only bind still works (connecting needs write
//! permission on the socket, which a read-only mount does not take away).
//!
//! Without root, Landlock holds the same paths (no write right on them or in the folders on
//! the way). Prefixes and abstract names have no file to hold, and a socket that is not there
//! when the command starts has nothing to hold yet: each is reported, never silently dropped.

use std::path::{Component, Path, PathBuf};

use super::{DeniedPath, Hold, NotHeld, WriteRule};
use crate::policy::Decision;
use crate::policy::Policy;

/// How many symlinks one socket path may go through (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Every socket an allow rule names, as write rules whose glob is the socket's path (a prefix
/// or abstract name keeps its text, to be reported as not held).
pub fn allowed_sockets(policy: &Policy) -> Vec<WriteRule> {
    policy
        .unix_rules_with_builtins()
        .iter()
        .filter(|rule| rule.decision == Decision::Allow)
        .map(|rule| WriteRule {
            pattern: crate::policy::render::unix_rule_text(rule),
            glob: Some(rule.socket.to_string()),
            from: rule
                .origin
                .as_ref()
                .map(|o| format!("{}:{}", o.file, o.line))
                .unwrap_or_else(|| "<policy>".to_string()),
            builtin: rule.is_builtin(),
        })
        .collect()
}

/// What holding `rule`'s socket takes: the paths to hold, or why it cannot be held.
pub fn hold(rule: &WriteRule) -> Result<Vec<DeniedPath>, NotHeld> {
    let not_held = |why: String| NotHeld {
        rule: rule.clone(),
        why,
    };
    let name = rule.glob.as_deref().unwrap_or_default();
    if name.ends_with('*') {
        return Err(not_held(format!(
            "{name} is a prefix: any socket below it (and `PREFIX/../elsewhere`) is allowed, \
             and no file holds them all"
        )));
    }
    if !name.starts_with('/') {
        return Err(not_held(format!(
            "{name} is an abstract name: there is no file to hold (anyone may bind it first)"
        )));
    }
    let (resolved, link_folders) = walk(Path::new(name)).map_err(not_held)?;
    let mut held: Vec<DeniedPath> = link_folders
        .into_iter()
        .map(|folder| DeniedPath {
            path: folder,
            hold: Hold::Entries,
            rule: rule.clone(),
        })
        .collect();
    held.push(DeniedPath {
        path: resolved,
        hold: Hold::Beneath,
        rule: rule.clone(),
    });
    Ok(held)
}

/// `path` resolved one component at a time as the kernel would: the file it reaches, and the
/// folder of every symlink met on the way (resolved themselves). An error says what is missing.
fn walk(path: &Path) -> Result<(PathBuf, Vec<PathBuf>), String> {
    let mut pending: Vec<PathBuf> = components(path);
    pending.reverse();
    let mut at = PathBuf::from("/");
    let mut link_folders = Vec::new();
    let mut links = 0;
    while let Some(next) = pending.pop() {
        if next == Path::new("..") {
            at.pop();
            continue;
        }
        let candidate = at.join(&next);
        let meta = std::fs::symlink_metadata(&candidate).map_err(|err| {
            format!(
                "{} {}: nothing there to hold (a process in the scope could make it first)",
                candidate.display(),
                if err.kind() == std::io::ErrorKind::NotFound {
                    "does not exist when the command starts".to_string()
                } else {
                    err.to_string()
                }
            )
        })?;
        if !meta.file_type().is_symlink() {
            at = candidate;
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(format!("{}: too many symlinks", path.display()));
        }
        if !link_folders.contains(&at) {
            link_folders.push(at.clone());
        }
        let target = std::fs::read_link(&candidate)
            .map_err(|err| format!("{}: {err}", candidate.display()))?;
        if target.is_absolute() {
            at = PathBuf::from("/");
        }
        let mut inner = components(&target);
        inner.reverse();
        pending.extend(inner);
    }
    Ok((at, link_folders))
}

/// The normal components of `path` and its `..`s, in order (`.` and `/` dropped).
fn components(path: &Path) -> Vec<PathBuf> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(PathBuf::from(name)),
            Component::ParentDir => Some(PathBuf::from("..")),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(socket: &str) -> WriteRule {
        WriteRule {
            pattern: format!("unix_rule(socket=\"{socket}\", decision=\"allow\")"),
            glob: Some(socket.to_string()),
            from: "t.rules:1".to_string(),
            builtin: false,
        }
    }

    #[test]
    fn a_socket_is_held_itself_and_a_symlink_on_the_way_by_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let real = base.join("real");
        std::fs::create_dir(&real).unwrap();
        let socket = real.join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let links = base.join("links");
        std::fs::create_dir(&links).unwrap();
        std::os::unix::fs::symlink("../real/s.sock", links.join("rel")).unwrap();
        std::os::unix::fs::symlink(links.join("rel"), base.join("abs")).unwrap();

        let held = hold(&rule(&socket.display().to_string())).unwrap();
        assert_eq!(
            held.iter()
                .map(|d| (d.path.clone(), d.hold))
                .collect::<Vec<_>>(),
            [(socket.clone(), Hold::Beneath)]
        );
        let held = hold(&rule(&base.join("abs").display().to_string())).unwrap();
        assert_eq!(
            held.iter()
                .map(|d| (d.path.clone(), d.hold))
                .collect::<Vec<_>>(),
            [
                (base.clone(), Hold::Entries),
                (links.clone(), Hold::Entries),
                (socket.clone(), Hold::Beneath)
            ]
        );
    }

    #[test]
    fn what_has_no_file_to_hold_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("not-yet.sock");
        let why = hold(&rule(&missing.display().to_string())).unwrap_err().why;
        assert!(why.contains("does not exist"), "{why}");
        assert!(
            hold(&rule("/srv/socks/*"))
                .unwrap_err()
                .why
                .contains("prefix")
        );
        assert!(hold(&rule("@name")).unwrap_err().why.contains("abstract"));
    }

    #[test]
    fn the_policys_allowed_sockets_are_the_ones_to_hold() {
        let mut parser = crate::policy::PolicyParser::new();
        parser
            .parse(
                "t.rules",
                "unix_rule(socket=\"/srv/a.sock\", decision=\"allow\")\n\
                 unix_rule(socket=\"/srv/b.sock\", decision=\"deny\")\n",
            )
            .unwrap();
        let rules = allowed_sockets(&parser.build());
        let globs: Vec<&str> = rules
            .iter()
            .filter(|r| !r.builtin)
            .filter_map(|r| r.glob.as_deref())
            .collect();
        assert_eq!(globs, ["/srv/a.sock"]);
        assert!(
            rules
                .iter()
                .filter(|r| r.builtin)
                .all(|r| { crate::policy::unix::is_socket(r.glob.as_deref().unwrap()) })
        );
    }
}
