//! A sandbox mode (`guard run --sandbox MODE`, see [`crate::policy::sandbox`]) held for the
//! command: under `read-only` and `workspace-write` the Landlock domain grants writes only below
//! the writable roots (and to the null device and the terminal), and the roots' `.git` and
//! `.codex` are read-only binds in the command's mount namespace, as the policy's own denials
//! are. `danger-full-access` confines nothing beyond the policy.

use std::path::{Path, PathBuf};

use crate::policy::sandbox::{SandboxMode, WritableRoot, writable_roots};

use super::{DeniedPath, Hold, WritePlan, WriteRule};

/// What a restricted mode lets the command write.
#[derive(Clone, Debug)]
pub struct SandboxPlan {
    pub mode: SandboxMode,
    /// As given (normalised), for people.
    pub roots: Vec<WritableRoot>,
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
