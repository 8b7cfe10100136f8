//! Patch safety (the Codex CLI's `assess_patch_safety`): whether a patch in the `apply_patch`
//! format may be applied without asking, must be asked about, or is rejected, judged by the
//! paths it writes against the sandbox mode's writable roots and the approval policy.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::approval::ApprovalPolicy;
use super::sandbox::{SandboxMode, WritableRoot, is_writable, normalize};

/// What one hunk of a patch does to a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PatchChange {
    Add {
        path: PathBuf,
    },
    Delete {
        path: PathBuf,
    },
    Update {
        path: PathBuf,
        move_to: Option<PathBuf>,
    },
}

impl PatchChange {
    /// The paths it writes: the file, and a move's destination.
    pub fn written(&self) -> Vec<&Path> {
        match self {
            PatchChange::Add { path } | PatchChange::Delete { path } => vec![path.as_path()],
            PatchChange::Update { path, move_to } => {
                let mut paths = vec![path.as_path()];
                paths.extend(move_to.as_deref());
                paths
            }
        }
    }
}

/// A patch that does not read as `*** Begin Patch` ... `*** End Patch`: the line (1-based)
/// and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct PatchError {
    pub line: usize,
    pub message: String,
}

/// The files a patch changes, in order.
pub fn parse_patch(text: &str) -> Result<Vec<PatchChange>, PatchError> {
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    let error = |line: usize, message: &str| PatchError {
        line,
        message: message.to_string(),
    };
    let first = lines.iter().position(|l| !l.trim().is_empty());
    match first {
        Some(i) if lines[i].trim() == "*** Begin Patch" => {}
        Some(i) => return Err(error(i + 1, "a patch starts with `*** Begin Patch`")),
        None => return Ok(Vec::new()),
    }
    let start = first.unwrap_or(0) + 1;
    let mut changes = Vec::new();
    let mut ended = false;
    for (i, line) in lines.iter().enumerate().skip(start) {
        let number = i + 1;
        if ended {
            if !line.trim().is_empty() {
                return Err(error(number, "text after `*** End Patch`"));
            }
            continue;
        }
        if line.trim() == "*** End Patch" {
            ended = true;
        } else if let Some(path) = line.strip_prefix("*** Add File: ") {
            changes.push(PatchChange::Add {
                path: path.trim().into(),
            });
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            changes.push(PatchChange::Delete {
                path: path.trim().into(),
            });
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            changes.push(PatchChange::Update {
                path: path.trim().into(),
                move_to: None,
            });
        } else if let Some(to) = line.strip_prefix("*** Move to: ") {
            match changes.last_mut() {
                Some(PatchChange::Update { move_to, .. }) if move_to.is_none() => {
                    *move_to = Some(to.trim().into());
                }
                _ => {
                    return Err(error(
                        number,
                        "`*** Move to:` follows only `*** Update File:`",
                    ));
                }
            }
        } else if line.starts_with("***") && *line != "*** End of File" {
            return Err(error(number, &format!("unknown patch line `{line}`")));
        } else if changes.is_empty() && !line.trim().is_empty() {
            return Err(error(
                number,
                "a hunk starts with `*** Add File:`, `*** Delete File:` or `*** Update File:`",
            ));
        }
    }
    if !ended {
        return Err(error(
            lines.len(),
            "the patch does not end with `*** End Patch`",
        ));
    }
    Ok(changes)
}

/// The reference's `SafetyCheck`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum PatchSafety {
    /// Apply without asking; `sandboxed`: inside guard's sandbox (else with none).
    AutoApprove {
        sandboxed: bool,
    },
    AskUser,
    Reject {
        reason: String,
    },
}

/// How a patch is judged: the modes and where it applies.
pub struct PatchContext<'a> {
    pub approval: ApprovalPolicy,
    pub sandbox: SandboxMode,
    pub roots: &'a [WritableRoot],
    pub cwd: &'a Path,
    /// A sandbox can hold the command here (Landlock): an auto-approved patch runs in it.
    pub sandbox_available: bool,
}

/// The decision for `changes` in `context`, and each written path (normalised) with whether
/// it is writable.
pub fn assess_patch(
    changes: &[PatchChange],
    context: &PatchContext<'_>,
) -> (PatchSafety, Vec<(PathBuf, bool)>) {
    let paths: Vec<(PathBuf, bool)> = changes
        .iter()
        .flat_map(PatchChange::written)
        .map(|p| {
            let writable = is_writable(context.sandbox, context.roots, p, context.cwd);
            (normalize(p, context.cwd), writable)
        })
        .collect();
    if changes.is_empty() {
        return (
            PatchSafety::Reject {
                reason: "empty patch".to_string(),
            },
            paths,
        );
    }
    if context.approval == ApprovalPolicy::Untrusted {
        return (PatchSafety::AskUser, paths);
    }
    let rejects = matches!(
        context.approval,
        ApprovalPolicy::Never
            | ApprovalPolicy::Granular {
                sandbox_approval: false,
                ..
            }
    );
    let all_writable = paths.iter().all(|(_, writable)| *writable);
    let verdict = if all_writable || context.approval == ApprovalPolicy::OnFailure {
        if !context.sandbox.is_restricted() {
            PatchSafety::AutoApprove { sandboxed: false }
        } else if context.sandbox_available {
            PatchSafety::AutoApprove { sandboxed: true }
        } else if rejects {
            rejection(context)
        } else {
            PatchSafety::AskUser
        }
    } else if rejects {
        rejection(context)
    } else {
        PatchSafety::AskUser
    };
    (verdict, paths)
}

fn rejection(context: &PatchContext<'_>) -> PatchSafety {
    let reason = if context.sandbox == SandboxMode::ReadOnly || context.roots.is_empty() {
        "writing is blocked by read-only sandbox; rejected by user approval settings"
    } else {
        "writing outside of the project; rejected by user approval settings"
    };
    PatchSafety::Reject {
        reason: reason.to_string(),
    }
}

#[cfg(test)]
#[path = "patch_tests.rs"]
mod tests;
