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
    /// It is about reading files (`read(...)`), about writing them, or both.
    pub reads: bool,
    pub writes: bool,
    pub reason: String,
}

/// Why the `cgroup` backend holds no file rule.
pub const CGROUP_FILE_RULES: &str = "the cgroup backend has no file hooks, so the kernel does not \
     enforce read and write rules there (the lsm backend does; `guard run` holds the write \
     denials that name existing paths with Landlock; `guard check` and `guard policy evaluate` \
     still decide them)";

/// One kind of rule and how each backend holds it: the table `guard doctor` prints for the
/// running backend and the README gives in full.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Enforces {
    pub rules: &'static str,
    pub lsm: &'static str,
    pub cgroup: &'static str,
}

pub const ENFORCES: [Enforces; 8] = [
    Enforces {
        rules: "one-token prefix_rule (program identity and name)",
        lsm: "EPERM from execve, before the exec",
        cgroup: "SIGKILL after the exec, before the new image runs",
    },
    Enforces {
        rules: "longer prefix_rule (argv), approvals of exact argv",
        lsm: "SIGKILL before the new image runs",
        cgroup: "SIGKILL before the new image runs",
    },
    Enforces {
        rules: "rule_set exec(...), legacy forbid_program_regex and forbid_substrings",
        lsm: "SIGKILL before the new image runs (pattern tables)",
        cgroup: "SIGKILL before the new image runs (pattern tables)",
    },
    Enforces {
        rules: "network_rule, address_rule, approvals of exact destinations",
        lsm: "EPERM from connect and sendmsg",
        cgroup: "EPERM from connect and sendmsg",
    },
    Enforces {
        rules: "rule_set write(...) and the protected paths",
        lsm: "EACCES from open for writing, mkdir, unlink, rmdir, rename, truncate",
        cgroup: "not enforced by the kernel; `guard run` holds deny patterns that name existing \
                 paths with Landlock (EACCES)",
    },
    Enforces {
        rules: "rule_set read(...)",
        lsm: "EACCES from open for reading",
        cgroup: "not enforced",
    },
    Enforces {
        rules: "rule_set connect(...)",
        lsm: "not enforced by the kernel (it sees addresses; write a network_rule)",
        cgroup: "not enforced by the kernel (it sees addresses; write a network_rule)",
    },
    Enforces {
        rules: "legacy define_program specs and readable/writeable folders",
        lsm: "not enforced by the kernel (`guard legacy check` decides them)",
        cgroup: "not enforced by the kernel (`guard legacy check` decides them)",
    },
];

impl Enforces {
    /// How `backend` holds these rules.
    pub fn on(&self, backend: Backend) -> &'static str {
        match backend {
            Backend::Lsm => self.lsm,
            Backend::Cgroup => self.cgroup,
        }
    }
}

/// Why no backend holds a rule set's `connect(...)` patterns.
pub const CONNECT_PATTERNS: &str = "the kernel sees addresses, not the `host:port` a connect(...) \
     pattern names, so no backend enforces it (`guard check` and `guard policy evaluate` decide \
     it; write a network_rule or address_rule for the kernel)";

/// The rules of `image` that `backend` does not enforce.
pub fn not_enforced(image: &EnforcementImage, backend: Backend) -> Vec<NotEnforced> {
    let described = |id: u32| {
        let rule = image.rules.get(id as usize)?;
        Some(match &rule.origin {
            Some(origin) => format!("{} ({origin})", rule.text),
            None => rule.text.clone(),
        })
    };
    let files = image
        .patterns
        .file_rules
        .iter()
        .filter(|_| backend == Backend::Cgroup)
        .filter_map(|file_rule| {
            Some(NotEnforced {
                rule: described(file_rule.rule)?,
                reads: file_rule.reads,
                writes: file_rule.writes,
                reason: CGROUP_FILE_RULES.to_string(),
            })
        });
    let connects = image.patterns.connect_rules.iter().filter_map(|&id| {
        Some(NotEnforced {
            rule: described(id)?,
            reads: false,
            writes: false,
            reason: CONNECT_PATTERNS.to_string(),
        })
    });
    files.chain(connects).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{CompileEnv, NoResolver, compile};
    use crate::policy::PolicyParser;

    fn image(rules: &str) -> EnforcementImage {
        let mut parser = PolicyParser::new();
        parser.parse("t.rules", rules).unwrap();
        compile(&parser.build(), &NoResolver, &CompileEnv::default())
    }

    #[test]
    fn file_rules_are_gaps_on_cgroup_only_and_connect_patterns_on_both() {
        let image = image(
            "rule_set(deny=[\"write(.git/**)\", \"bash(rm -rf*)\"], ask=[\"connect(*:22)\", \"read(*.env)\"])\n",
        );
        let lsm = not_enforced(&image, Backend::Lsm);
        assert_eq!(lsm.len(), 1, "{lsm:#?}");
        assert!(lsm[0].rule.contains("connect(*:22)") && lsm[0].rule.contains("t.rules:1"));
        assert_eq!(lsm[0].reason, CONNECT_PATTERNS);
        let cgroup = not_enforced(&image, Backend::Cgroup);
        let rules: Vec<(&str, bool, bool)> = cgroup
            .iter()
            .map(|g| (g.rule.as_str(), g.reads, g.writes))
            .collect();
        assert_eq!(
            rules,
            [
                (
                    "rule_set(deny=[\"write(.git/**)\"]) (t.rules:1)",
                    false,
                    true
                ),
                ("rule_set(ask=[\"read(*.env)\"]) (t.rules:1)", true, false),
                (
                    "rule_set(ask=[\"connect(*:22)\"]) (t.rules:1)",
                    false,
                    false
                ),
            ]
        );
        // The exec pattern is held everywhere: never a gap.
        assert!(cgroup.iter().all(|g| !g.rule.contains("rm -rf")));
    }

    #[test]
    fn the_enforcement_table_says_not_enforced_where_the_reports_do() {
        let files = ENFORCES
            .iter()
            .find(|row| row.rules.contains("write(...)"))
            .unwrap();
        assert!(files.on(Backend::Cgroup).starts_with("not enforced"));
        assert!(!files.on(Backend::Lsm).starts_with("not enforced"));
    }
}
