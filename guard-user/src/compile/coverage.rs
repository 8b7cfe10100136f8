//! What a backend does not hold of a compiled policy, so that `guard doctor`, `guard policy
//! show`, `guard run` and the daemon's audit log can say so instead of letting people believe a
//! rule is enforced. The `cgroup` backend has no file hooks: `read(...)` and `write(...)`
//! patterns and the protected paths are not enforced there (DESIGN.md, "Enforcement
//! backends"; the README's table of what each backend enforces).

use serde::Serialize;

use super::image::EnforcementImage;
use crate::kernel::Backend;

/// One rule the backend does not enforce, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NotEnforced {
    /// The rule as written, with where: `rule_set(deny=["write(.git/**)"]) (team.rules:4)`.
    pub rule: String,
    pub reason: String,
}

/// Why the `cgroup` backend holds no file rule.
pub const CGROUP_FILE_RULES: &str = "the cgroup backend has no file hooks, so the kernel does not \
     enforce read and write rules there (they are enforced on the lsm backend; `guard check` and \
     `guard policy evaluate` still decide them)";

/// The rules of `image` that `backend` does not enforce.
pub fn not_enforced(image: &EnforcementImage, backend: Backend) -> Vec<NotEnforced> {
    if backend == Backend::Lsm {
        return Vec::new();
    }
    image
        .patterns
        .file_rules
        .iter()
        .filter_map(|&id| image.rules.get(id as usize))
        .map(|rule| NotEnforced {
            rule: match &rule.origin {
                Some(origin) => format!("{} ({origin})", rule.text),
                None => rule.text.clone(),
            },
            reason: CGROUP_FILE_RULES.to_string(),
        })
        .collect()
}
