//! Unix socket rules as the kernel's two tables hold them: every name a rule (or the built-in
//! lists) names whole in the exact table, every prefix in the trie, one entry per name with the
//! rule [`crate::policy::unix::decide`] prefers among those naming it; and the trie's defaults, which decide what
//! nothing names: `/` (pathnames) and the abstract NUL take the policy's `unmatched_unix`
//! default, the empty prefix (a relative path, which no rule can name) is refused.

use std::collections::BTreeMap;

use guard_common::limits::NO_RULE;

use super::image::{KernelRule, KernelRuleKind, UnixEntry, Verdict};
use crate::policy::Policy;
use crate::policy::unix::UnixSocket;

/// What `relative_rule` says of a relative path.
pub const RELATIVE_SUMMARY: &str = "unix sockets named by a relative path";

/// The unix rules (built-in lists first) as kernel rules from `base` on, and the table entries.
pub fn compile_unix(policy: &Policy, base: u32) -> (Vec<KernelRule>, Vec<UnixEntry>) {
    let unix_rules = policy.unix_rules_with_builtins();
    let mut rules: Vec<KernelRule> = unix_rules
        .iter()
        .map(|rule| KernelRule {
            kind: KernelRuleKind::Unix,
            text: crate::policy::render::unix_rule_text(rule),
            summary: format!("the unix socket {}", rule.socket),
            decision: rule.decision,
            justification: rule.justification.clone(),
            origin: rule.origin.clone(),
        })
        .collect();
    let relative = base + rules.len() as u32;
    rules.push(KernelRule {
        kind: KernelRuleKind::Unix,
        text: "<a relative unix socket path>".to_string(),
        summary: RELATIVE_SUMMARY.to_string(),
        decision: crate::policy::Decision::Forbidden,
        justification: Some(
            "no rule can name it (it depends on the caller's folder): connect by the absolute path"
                .to_string(),
        ),
        origin: None,
    });
    let unmatched = policy.enforcement().unmatched_unix;
    // One entry per name: the rule `decide` prefers among those naming exactly it. The kernel
    // then takes the exact entry, else the longest prefix, as `decide` does.
    let mut entries: BTreeMap<UnixSocket, Verdict> = BTreeMap::new();
    for socket in unix_rules.iter().map(|rule| &rule.socket) {
        if let Some(verdict) = best_with_socket(&unix_rules, socket, base) {
            entries.entry(socket.clone()).or_insert(verdict);
        }
    }
    let defaults = [
        (b"/".to_vec(), unmatched_verdict(unmatched)),
        (vec![0], unmatched_verdict(unmatched)),
        (
            Vec::new(),
            Verdict {
                decision: crate::policy::Decision::Forbidden,
                rule: relative,
                audit_only: false,
            },
        ),
    ];
    for (bytes, verdict) in defaults {
        entries
            .entry(UnixSocket {
                bytes,
                prefix: true,
            })
            .or_insert(verdict);
    }
    let entries = entries
        .into_iter()
        .map(|(socket, verdict)| UnixEntry { socket, verdict })
        .collect();
    (rules, entries)
}

fn unmatched_verdict(decision: crate::policy::Decision) -> Verdict {
    Verdict {
        decision,
        rule: NO_RULE,
        audit_only: false,
    }
}

/// The verdict of the rule `decide` would pick among those naming exactly `socket` (rule ids
/// from `base` on, in the order of `rules`).
fn best_with_socket(
    rules: &[crate::policy::unix::UnixRule],
    socket: &UnixSocket,
    base: u32,
) -> Option<Verdict> {
    rules
        .iter()
        .enumerate()
        .filter(|(_, rule)| &rule.socket == socket)
        .max_by_key(|(_, rule)| rule.rank())
        .map(|(at, rule)| Verdict {
            decision: rule.decision,
            rule: base + at as u32,
            audit_only: false,
        })
}
