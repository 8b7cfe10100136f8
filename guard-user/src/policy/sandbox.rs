//! The Codex CLI's filesystem sandbox modes, as paths: which folders a command may write under
//! `read-only`, `workspace-write` and `danger-full-access`, and whether a path is among them.
//! Paths are judged lexically (joined to the working folder, `.` and `..` folded), as the
//! reference judges a patch's paths.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where writes may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Nothing may be written (but `/dev/null` and the terminal).
    ReadOnly,
    /// Writes only below the writable roots: the workspace, the temporary folders and each
    /// extra root, with the workspace's `.git` (hooks, config) still read-only.
    WorkspaceWrite,
    /// No write confinement.
    DangerFullAccess,
    /// Confinement is someone else's (an external sandbox): guard judges nothing.
    External,
}

impl SandboxMode {
    /// The modes `guard run` holds, by name (`external` is another sandbox's, so not one).
    pub const RUNNABLE: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];

    /// A mode `guard run` holds, by its name.
    pub fn runnable(name: &str) -> Option<SandboxMode> {
        Self::RUNNABLE
            .into_iter()
            .find(|mode| mode.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
            SandboxMode::External => "external",
        }
    }

    /// Whether the filesystem is confined at all (read-only and workspace-write).
    pub fn is_restricted(self) -> bool {
        matches!(self, SandboxMode::ReadOnly | SandboxMode::WorkspaceWrite)
    }
}

/// A rules file's `sandbox(mode=..., writable=[...])` (a guard-only builtin): the write
/// confinement `guard run` holds when its `--sandbox` does not choose one. The last call wins.
/// The daemon's `[sandbox]` is one too, sent to each `guard run` under it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSetting {
    pub mode: SandboxMode,
    /// Extra writable roots (relative ones are below the command's working folder).
    pub writable: Vec<PathBuf>,
    /// Where it was written (`agent.rules:4`).
    pub from: String,
}

/// Folders under a writable root that stay read-only: a command must not plant git hooks or
/// rewrite the repository's configuration.
const READ_ONLY_SUBPATHS: &[&str] = &[".git", ".codex"];

/// One folder writes may go below, and the folders below it that stay read-only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WritableRoot {
    pub root: PathBuf,
    pub read_only: Vec<PathBuf>,
}

impl WritableRoot {
    fn new(root: PathBuf) -> WritableRoot {
        let read_only = READ_ONLY_SUBPATHS
            .iter()
            .map(|sub| root.join(sub))
            .collect();
        WritableRoot { root, read_only }
    }

    fn covers(&self, path: &Path) -> bool {
        path.starts_with(&self.root) && !self.read_only.iter().any(|ro| path.starts_with(ro))
    }
}

/// The writable roots of a mode: under `workspace-write`, `workspace`, `/tmp`, `$TMPDIR` (from
/// `tmpdir`) and each of `extra`, each normalised; none under `read-only`.
pub fn writable_roots(
    mode: SandboxMode,
    workspace: &Path,
    tmpdir: Option<&Path>,
    extra: &[PathBuf],
) -> Vec<WritableRoot> {
    if mode != SandboxMode::WorkspaceWrite {
        return Vec::new();
    }
    let mut roots: Vec<PathBuf> = vec![normalize(workspace, workspace), PathBuf::from("/tmp")];
    roots.extend(tmpdir.map(|t| normalize(t, workspace)));
    roots.extend(extra.iter().map(|e| normalize(e, workspace)));
    let mut unique: Vec<WritableRoot> = Vec::new();
    for root in roots {
        if !unique.iter().any(|r| r.root == root) {
            unique.push(WritableRoot::new(root));
        }
    }
    unique
}

/// Whether `path` (relative to `cwd`, or absolute) may be written under `mode` with `roots`.
pub fn is_writable(mode: SandboxMode, roots: &[WritableRoot], path: &Path, cwd: &Path) -> bool {
    match mode {
        SandboxMode::DangerFullAccess | SandboxMode::External => true,
        SandboxMode::ReadOnly => false,
        SandboxMode::WorkspaceWrite => {
            let path = normalize(path, cwd);
            roots.iter().any(|root| root.covers(&path))
        }
    }
}

/// `path` joined to `cwd` when relative, with `.` dropped and `..` folded lexically (never
/// above `/`); no symlink is followed.
pub fn normalize(path: &Path, cwd: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> Vec<WritableRoot> {
        writable_roots(
            SandboxMode::WorkspaceWrite,
            Path::new("/work/project"),
            Some(Path::new("/var/tmp/me")),
            &[PathBuf::from("../cache")],
        )
    }

    #[test]
    fn workspace_write_allows_the_roots_but_not_their_git_folder_nor_escapes() {
        let cwd = Path::new("/work/project");
        let ok = |p: &str| is_writable(SandboxMode::WorkspaceWrite, &roots(), Path::new(p), cwd);
        assert!(ok("src/main.rs"));
        assert!(ok("/tmp/x"));
        assert!(ok("/var/tmp/me/y"));
        assert!(
            ok("/work/cache/z"),
            "an extra root, relative to the workspace"
        );
        assert!(!ok(".git/hooks/pre-commit"));
        assert!(!ok("../other/file"), "`..` escapes the workspace");
        assert!(!ok("src/../../other"));
        assert!(!ok("/etc/passwd"));
        assert!(ok("a/./b/../c"));
    }

    #[test]
    fn read_only_allows_nothing_and_full_access_everything() {
        let cwd = Path::new("/w");
        assert!(!is_writable(
            SandboxMode::ReadOnly,
            &[],
            Path::new("a"),
            cwd
        ));
        assert!(is_writable(
            SandboxMode::DangerFullAccess,
            &[],
            Path::new("/etc/x"),
            cwd
        ));
    }

    #[test]
    fn normalize_never_climbs_above_the_root() {
        assert_eq!(
            normalize(Path::new("../../../../etc"), Path::new("/a")),
            PathBuf::from("/etc")
        );
    }
}
