//! What a backend does not hold of a compiled policy, so that `guard doctor`, `guard policy
//! show`, `guard run` and the daemon's audit log can say so instead of letting people believe a
//! rule is enforced. The `cgroup` backend has no file hooks: `read(...)` and `write(...)`
//! patterns and the protected paths are not enforced there (docs/design.md,
//! "Backends"; docs/enforcement.md's table of what each backend enforces).

use serde::Serialize;

use super::Backend;
use crate::compile::image::EnforcementImage;
use crate::policy::Decision;

/// One rule the backend does not enforce, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
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

pub const ENFORCES: [Enforces; 9] = [
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
        rules: "host names: network_rule hosts, address_rule names and *.DOMAIN patterns",
        lsm: "guard's resolver, in the path of the scope's DNS: a forbidden name is refused \
              (REFUSED or NXDOMAIN), an answered name's addresses are in the maps before the \
              answer",
        cgroup: "guard's resolver, in the path of the scope's DNS: a forbidden name is refused \
                 (REFUSED or NXDOMAIN), an answered name's addresses are in the maps before the \
                 answer",
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
    let left_out = image.patterns.left_out.iter().filter_map(|left| {
        Some(NotEnforced {
            rule: described(left.rule)?,
            reads: false,
            writes: false,
            reason: format!("{}; {LEFT_OUT}", left.why),
        })
    });
    files.chain(connects).chain(left_out).collect()
}

/// Why a pattern is missing from the kernel's tables.
pub const LEFT_OUT: &str = "the kernel's pattern tables do not hold it (`guard check` still \
     decides it)";

/// How to make a left-out pattern fit.
pub const LEFT_OUT_FIX: &str = "merge or shorten the patterns (globs of one decision in one \
     rule_set, which the kernel holds as one; one `exec(*secret*)` instead of one glob per \
     name; fewer `?` and `*` in a row), or write exact commands as prefix_rule";

/// Deny rules the kernel cannot hold: guard refuses to enforce a policy with one, rather than
/// run the command with a denial that silently holds nothing.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct UnheldDenials(pub Vec<String>);

/// A pattern left out of the kernel's tables, as one sentence: the rule as written with its
/// file and line, why, and (for a denial) the fix.
pub fn left_out_sentences(image: &EnforcementImage) -> Vec<(Decision, String)> {
    image
        .patterns
        .left_out
        .iter()
        .map(|left| {
            let rule = image.rules.get(left.rule as usize);
            let written = rule.map_or_else(String::new, |rule| match &rule.origin {
                Some(origin) => format!("{} ({origin})", rule.text),
                None => rule.text.clone(),
            });
            (left.decision, format!("{written}: {}", left.why))
        })
        .collect()
}

/// `Err` naming every deny rule the kernel cannot hold, with the limit and the fix.
pub fn refuse_unheld_denials(image: &EnforcementImage) -> Result<(), UnheldDenials> {
    let denials: Vec<String> = left_out_sentences(image)
        .into_iter()
        .filter(|(decision, _)| *decision == Decision::Forbidden)
        .map(|(_, sentence)| {
            format!("the kernel cannot hold the deny rule {sentence}; fix: {LEFT_OUT_FIX}")
        })
        .collect();
    if denials.is_empty() {
        Ok(())
    } else {
        Err(UnheldDenials(denials))
    }
}

/// The allow and ask patterns the kernel cannot hold, as warnings: the kernel decides those
/// commands by its other rules and its default.
pub fn unheld_allowances(image: &EnforcementImage) -> Vec<String> {
    left_out_sentences(image)
        .into_iter()
        .filter(|(decision, _)| *decision != Decision::Forbidden)
        .map(|(_, sentence)| format!("the kernel does not hold {sentence}; {LEFT_OUT}"))
        .collect()
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

    /// Ten `exec(*secretN*)` globs, each in a `rule_set` of its own: ten match sets, which no
    /// table holds (one rule set's tier is one match set, and fits).
    fn secret_globs(tier: &str) -> String {
        let sets: String = (0..10)
            .map(|i| format!("rule_set({tier}=[\"exec(*secret{i}*)\"])\n"))
            .collect();
        format!("# team\n{sets}")
    }

    #[test]
    fn a_deny_pattern_the_kernel_cannot_hold_refuses_the_policy_naming_file_line_limit_and_fix() {
        let ten = image(&secret_globs("deny"));
        let err = refuse_unheld_denials(&ten).unwrap_err().to_string();
        assert!(err.contains("t.rules:1"), "a rule late in the file: {err}");
        assert!(err.contains("the limit is"), "{err}");
        assert!(err.contains("fix: merge or shorten"), "{err}");
        assert!(unheld_allowances(&ten).is_empty());
        // Listed as not enforced on both backends.
        for backend in [Backend::Lsm, Backend::Cgroup] {
            let gaps = not_enforced(&ten, backend);
            assert!(
                gaps.iter().any(|g| g.reason.contains(LEFT_OUT)),
                "{gaps:#?}"
            );
        }
        // One glob fits: nothing to refuse.
        let one = image("rule_set(deny=[\"exec(*secret1*)\"])\n");
        assert!(refuse_unheld_denials(&one).is_ok());
    }

    #[test]
    fn an_ask_or_allow_pattern_left_out_is_a_warning_not_an_error() {
        for tier in ["ask", "allow"] {
            let image = image(&secret_globs(tier));
            assert!(refuse_unheld_denials(&image).is_ok());
            let warnings = unheld_allowances(&image);
            assert!(!warnings.is_empty(), "{tier}");
            assert!(warnings[0].contains("t.rules:1") && warnings[0].contains(tier));
        }
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
