//! A sandbox mode (`guard run --sandbox MODE`, see [`crate::policy::sandbox`]) held for the
//! command: under `read-only` and `workspace-write` the Landlock domain grants writes only below
//! the writable roots (and to the null device and the terminal), and the roots' `.git` and
//! `.codex` are read-only binds in the command's mount namespace, as the policy's own denials
//! are. `danger-full-access` confines nothing beyond the policy.

use std::path::{Path, PathBuf};

use crate::kernel::events::KernelEvent;
use crate::policy::sandbox::{SandboxMode, WritableRoot, is_writable, writable_roots};

use super::{DeniedPath, Hold, WritePlan, WriteRule};

/// What a restricted mode lets the command write.
#[derive(Clone, Debug)]
pub struct SandboxPlan {
    pub mode: SandboxMode,
    /// As given (normalised), for people.
    pub roots: Vec<WritableRoot>,
    /// The command's working folder when it started: a relative path a refused write names
    /// is below it, when the process's own folder could no longer be read.
    pub workspace: PathBuf,
}

impl SandboxPlan {
    /// The plan of `mode` with `workspace` as the workspace, `$TMPDIR` from `tmpdir`, and the
    /// `extra` writable folders.
    pub fn new(
        mode: SandboxMode,
        workspace: &Path,
        tmpdir: Option<&Path>,
        extra: &[PathBuf],
    ) -> SandboxPlan {
        SandboxPlan {
            mode,
            roots: writable_roots(mode, workspace, tmpdir, extra),
            workspace: workspace.to_path_buf(),
        }
    }

    /// Whether writes are confined at all.
    pub fn is_restricted(&self) -> bool {
        self.mode.is_restricted()
    }

    /// The roots that exist, canonical (Landlock holds inodes, not names).
    pub fn existing_roots(&self) -> Vec<PathBuf> {
        self.roots
            .iter()
            .filter_map(|r| r.root.canonicalize().ok())
            .collect()
    }

    /// The read-only folders inside the roots that exist, canonical.
    pub fn existing_read_only(&self) -> Vec<PathBuf> {
        self.roots
            .iter()
            .flat_map(|r| r.read_only.iter())
            .filter_map(|p| p.canonicalize().ok())
            .collect()
    }

    /// `plan` with the roots' read-only folders added as denied paths (held by the binds).
    pub fn with_read_only(&self, plan: &WritePlan) -> WritePlan {
        let mut plan = plan.clone();
        for path in self.existing_read_only() {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            plan.denied.push(DeniedPath {
                path: path.clone(),
                hold: Hold::Beneath,
                rule: WriteRule {
                    pattern: format!("write({}/**)", path.display()),
                    glob: Some(format!("{}/**", path.display())),
                    from: format!("--sandbox {} ({name} stays read-only)", self.mode.as_str()),
                    builtin: true,
                },
            });
        }
        plan
    }

    /// `writes only below /w, /tmp (read-only inside them: /w/.git)` or `no writes`.
    pub fn describe(&self) -> String {
        let always = "/dev/null and the terminal";
        if self.mode == SandboxMode::ReadOnly {
            return format!("no writes but to {always}");
        }
        let roots: Vec<String> = self
            .roots
            .iter()
            .map(|r| r.root.display().to_string())
            .collect();
        let read_only: Vec<String> = self
            .existing_read_only()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let inside = if read_only.is_empty() {
            String::new()
        } else {
            format!(" (read-only inside them: {})", read_only.join(", "))
        };
        format!(
            "writes only below {}{inside}, and to {always}",
            roots.join(", ")
        )
    }
}

/// Where the daemon's sandbox is set (a [`crate::policy::sandbox::SandboxSetting::from`]).
pub const DAEMON_SANDBOX: &str = "guard.toml [sandbox]";

impl SandboxPlan {
    /// Whether the mode lets `path` (absolute) be written: below a root as written or as it
    /// resolves (Landlock holds the resolved one), and not in a read-only folder.
    pub fn may_write(&self, path: &Path) -> bool {
        let root = Path::new("/");
        if is_writable(self.mode, &self.roots, path, root) {
            return true;
        }
        let read_only = self.existing_read_only();
        self.mode == SandboxMode::WorkspaceWrite
            && self.existing_roots().iter().any(|r| path.starts_with(r))
            && !read_only.iter().any(|ro| path.starts_with(ro))
    }

    /// Makes the paths of a sandbox report absolute: a relative one the kernel's /proc could
    /// no longer place (the process had exited) is below the command's starting folder.
    pub fn resolve_paths(&self, event: &mut KernelEvent) {
        let absolute = |path: &mut String| {
            *path = crate::policy::sandbox::normalize(Path::new(path.as_str()), &self.workspace)
                .display()
                .to_string();
        };
        if let Some(second) = event.sandbox.as_mut().and_then(|w| w.second_path.as_mut()) {
            absolute(second);
        }
        if let Some(path) = event.path.as_mut().filter(|_| event.sandbox.is_some()) {
            absolute(path);
        }
    }

    /// The line for a write this sandbox refused, `None` when `event` is not one: not a
    /// sandbox report, or every path it names may be written here (an EACCES there is the
    /// file's own permissions, not the sandbox's). `from` says where the mode was chosen
    /// (`--sandbox`, `guard.toml [sandbox]`, `agent.rules:3`), so the fix names the right place.
    pub fn refusal(&self, event: &KernelEvent, from: &str) -> Option<String> {
        let write = event.sandbox.as_ref()?;
        let root = Path::new("/");
        let refused = std::iter::once(event.path.as_deref())
            .chain(std::iter::once(write.second_path.as_deref()))
            .flatten()
            .map(|path| crate::policy::sandbox::normalize(Path::new(path), &self.workspace))
            .find(|path| !self.may_write(path))?;
        let refused = refused.as_path();
        let folder = refused.parent().filter(|p| *p != root).unwrap_or(root);
        let who = if event.comm.is_empty() {
            format!("pid {}", event.pid)
        } else {
            format!("`{}`, pid {}", event.comm, event.pid)
        };
        let folder = folder.display();
        let fix = match (self.mode, from) {
            (SandboxMode::ReadOnly, "--sandbox") => {
                format!("run with --sandbox workspace-write --writable {folder}")
            }
            (_, "--sandbox") => format!("add --writable {folder}"),
            (_, DAEMON_SANDBOX) => {
                format!("add \"{folder}\" to `writable` in the daemon's {DAEMON_SANDBOX}")
            }
            (_, from) => format!(
                "add \"{folder}\" to sandbox(writable=[...]) ({from}) or --writable {folder} to \
                 the run"
            ),
        };
        Some(format!(
            "guard: sandbox {} refused a write of {} ({} by {who}, EACCES): {}; to allow it, \
             {fix}, or choose --sandbox danger-full-access",
            self.mode.as_str(),
            refused.display(),
            write.syscall,
            self.describe()
        ))
    }
}

/// Which sandbox modes this machine can hold for `guard run`, and why: the restricted ones need
/// Landlock (ABI >= 1) and a mount namespace (root).
#[derive(Clone, Debug, serde::Serialize)]
pub struct SandboxSupport {
    pub modes: Vec<&'static str>,
    pub detail: String,
}

pub fn support() -> SandboxSupport {
    let all = || SandboxMode::RUNNABLE.iter().map(|m| m.as_str()).collect();
    let only_full = vec![SandboxMode::DangerFullAccess.as_str()];
    match super::landlock::abi() {
        Ok(abi) if abi >= 1 && super::capabilities::can_make_mount_namespace() => SandboxSupport {
            modes: all(),
            detail: format!("Landlock ABI {abi} and a mount namespace"),
        },
        Ok(abi) if abi >= 1 => SandboxSupport {
            modes: only_full,
            detail: "read-only and workspace-write need root (a mount namespace)".to_string(),
        },
        Ok(abi) => SandboxSupport {
            modes: only_full,
            detail: format!("Landlock answers ABI {abi}"),
        },
        Err(err) => SandboxSupport {
            modes: only_full,
            detail: super::landlock::absent_because(&err),
        },
    }
}
