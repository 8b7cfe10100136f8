//! The daemon's vocabulary (its actions and entities) and the built-in default policy.

use std::collections::BTreeMap;

use super::conditions::{RESOURCE_PREFIX, SUB_TEMPLATE};
use super::policy::AuthzPolicy;
use super::rule::{ANY_ACTION, Effect, Rule};

/// The daemon's actions, each with what it lets the caller do.
pub const ACTIONS: &[(&str, &str)] = &[
    ("status", "read the daemon's status"),
    ("prompts", "list pending asks"),
    ("approve", "approve an ask"),
    ("deny", "deny an ask"),
    ("amend", "append an amendment line to the policy"),
    ("reload", "re-read the policy"),
    ("run", "run a command in a fresh scope of the daemon"),
    ("audit", "read audit records"),
];

/// What an action may be about (a request's `entity`).
pub const ENTITIES: &[(&str, &str)] = &[
    ("policy", "the rules and their amendments"),
    ("prompt", "a pending ask"),
    ("audit", "an audit record"),
    ("status", "the daemon's status"),
];

/// The subject attribute holding the caller's numeric user id, as a decimal string.
pub const UID_ATTRIBUTE: &str = "uid";
/// The subject attribute holding the names of the caller's groups.
pub const GROUPS_ATTRIBUTE: &str = "groups";
/// The subject attribute naming the kind of guard scope the caller runs in: `run`, `cgroup`,
/// `standalone`, `host`, `none` or `unknown`.
pub const SCOPE_ATTRIBUTE: &str = "scope";
/// The subject attribute that is `true` when the caller runs inside a scope guard confines
/// (anything but the host-wide scope or none; an unreadable one counts), else `false`.
pub const IN_GUARD_SCOPE_ATTRIBUTE: &str = "in_guard_scope";
/// What a process inside a guard scope may not ask the daemon for, whoever runs it: answering
/// asks and changing the policy would let the automation approve itself.
pub const REFUSED_IN_SCOPE: &[&str] = &["approve", "amend", "reload"];
/// The resource attribute holding the `sub` of whoever a record belongs to.
pub const OWNER_ATTRIBUTE: &str = "owner";
/// The resource attribute of an answer to an ask: `true` when it writes an amendment line to
/// the daemon's policy (`--always`, a prefix), which every scope would then hold.
pub const AMENDS_ATTRIBUTE: &str = "amends";

pub fn is_known_action(action: &str) -> bool {
    ACTIONS.iter().any(|(name, _)| *name == action)
}

pub fn is_known_entity(entity: &str) -> bool {
    ENTITIES.iter().any(|(name, _)| *name == entity)
}

impl AuthzPolicy {
    /// Nobody inside a guard scope may approve, amend or reload (not even root: a guarded
    /// process must not answer its own asks); past that, root and `admin_group` may do
    /// everything. Anyone else, from outside a guard scope or from a run of the daemon, may run
    /// their own commands in a fresh scope of the daemon (that only takes rights away), list and answer the asks of
    /// their own runs once or for the session (an approval holds for that run's scope alone;
    /// `--always` would amend everyone's policy), and read the audit records of their own
    /// processes. Written as ordinary rules so a decision can name the one that made it.
    pub fn builtin(admin_group: Option<&str>) -> Self {
        let everything_when = |key: &str, value: &str| Rule {
            effect: Effect::Allow,
            actions: vec![ANY_ACTION.to_string()],
            when: BTreeMap::from([(key.to_string(), vec![value.to_string()])]),
            obligations: Vec::new(),
        };
        let mut rules = vec![
            Rule {
                effect: Effect::Deny,
                actions: REFUSED_IN_SCOPE.iter().map(|a| a.to_string()).collect(),
                when: BTreeMap::from([(
                    IN_GUARD_SCOPE_ATTRIBUTE.to_string(),
                    vec!["true".to_string()],
                )]),
                obligations: Vec::new(),
            },
            everything_when(UID_ATTRIBUTE, "0"),
        ];
        if let Some(group) = admin_group {
            rules.push(everything_when(GROUPS_ATTRIBUTE, group));
        }
        // From a run of the daemon too: its client hands over its command's hold from there,
        // and a fresh run scope holds the same policy without the run's approvals.
        rules.push(Rule {
            effect: Effect::Allow,
            actions: vec!["run".to_string()],
            when: BTreeMap::from([(
                SCOPE_ATTRIBUTE.to_string(),
                ["none", "host", "run"].map(String::from).to_vec(),
            )]),
            obligations: Vec::new(),
        });
        rules.push(Rule {
            effect: Effect::Allow,
            actions: ["prompts", "approve", "deny"].map(String::from).to_vec(),
            when: BTreeMap::from([
                ("entity".to_string(), vec!["prompt".to_string()]),
                (
                    format!("{RESOURCE_PREFIX}{OWNER_ATTRIBUTE}"),
                    vec![SUB_TEMPLATE.to_string()],
                ),
                (
                    format!("{RESOURCE_PREFIX}{AMENDS_ATTRIBUTE}"),
                    vec!["false".to_string()],
                ),
            ]),
            obligations: Vec::new(),
        });
        rules.push(Rule {
            effect: Effect::Allow,
            actions: vec!["audit".to_string()],
            when: BTreeMap::from([
                ("entity".to_string(), vec!["audit".to_string()]),
                (
                    format!("{RESOURCE_PREFIX}{OWNER_ATTRIBUTE}"),
                    vec![SUB_TEMPLATE.to_string()],
                ),
            ]),
            obligations: Vec::new(),
        });
        AuthzPolicy { rules }
    }
}

/// The built-in default as pretty JSON: where a custom policy starts
/// (`guard authz default > /etc/guard/authz.json`).
pub fn builtin_json(admin_group: Option<&str>) -> String {
    AuthzPolicy::builtin(admin_group).to_json_pretty()
}
