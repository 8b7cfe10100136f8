//! What the cluster says this node must enforce, as pure data: the node's pods and every
//! GuardPolicy, kept by `apply`, `delete` and `reset` (after a re-list, what the list no longer
//! has goes), and turned into a [`Desired`] snapshot (the policies holding each pod) and each
//! policy's [`Verdict`]. No client, no kernel: the watch feeds it, the daemon's loop enforces
//! what it says, and tests drive it with plain values.
//!
//! A policy whose rules do not parse, or whose selector cannot be understood, is not accepted
//! and changes nothing: the pods keep what held them before (its last accepted rules and
//! selector), so a broken edit is never half-applied.

use std::collections::BTreeMap;

pub use crate::daemon::pods::{Desired, PodDesired, PolicyRules};

use super::api::GuardPolicySpec;
use super::selector::Selector;
use crate::policy::LoadError;
use crate::policy::parser::PolicyParser;

/// A pod of this node as the index needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Container names by runtime id, from the pod's status.
    pub containers: BTreeMap<String, String>,
}

/// A GuardPolicy as the index needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyInfo {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub spec: GuardPolicySpec,
}

impl PolicyInfo {
    /// The name its rules go by in errors and audit records: `<namespace>/<name>`.
    pub fn file_name(&self) -> String {
        file_name(&self.namespace, &self.name)
    }
}

fn file_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Whether a policy's latest spec is in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// Not accepted: `reason` is a CamelCase word (`ParseError`, `InvalidSelector`), `message`
    /// names the file and line and says what to fix.
    Rejected {
        reason: &'static str,
        message: String,
    },
}

/// A policy's verdict and how many of this node's pods it holds, for its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyReport {
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub verdict: Verdict,
    pub matched_pods: i64,
}

/// The last spec of a policy that was accepted: what holds its pods.
#[derive(Clone, Debug)]
struct InForce {
    selector: Selector,
    rules: String,
}

#[derive(Clone, Debug)]
struct PolicyEntry {
    generation: Option<i64>,
    verdict: Verdict,
    in_force: Option<InForce>,
}

/// The node's pods and the cluster's policies.
#[derive(Debug, Default)]
pub struct Index {
    pods: BTreeMap<String, PodInfo>,
    /// By (namespace, name).
    policies: BTreeMap<(String, String), PolicyEntry>,
}

impl Index {
    pub fn apply_pod(&mut self, pod: PodInfo) {
        self.pods.insert(pod.uid.clone(), pod);
    }

    /// [`Index::apply_pod`] of a pod the API named fully (one without a uid is not yet made).
    pub fn apply_pod_if(&mut self, pod: Option<PodInfo>) {
        if let Some(pod) = pod {
            self.apply_pod(pod);
        }
    }

    pub fn delete_pod(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    /// The pods after a re-list: those not in it are gone.
    pub fn reset_pods(&mut self, pods: Vec<PodInfo>) {
        self.pods = pods.into_iter().map(|p| (p.uid.clone(), p)).collect();
    }

    /// Takes a policy's latest spec: in force when it is accepted, otherwise the verdict says
    /// why and the last accepted spec stays in force.
    pub fn apply_policy(&mut self, policy: PolicyInfo) {
        let key = (policy.namespace.clone(), policy.name.clone());
        let before = self.policies.remove(&key).and_then(|e| e.in_force);
        let (verdict, in_force) = match check(&policy) {
            Ok(accepted) => (Verdict::Accepted, Some(accepted)),
            Err(rejected) => (rejected, before),
        };
        self.policies.insert(
            key,
            PolicyEntry {
                generation: policy.generation,
                verdict,
                in_force,
            },
        );
    }

    pub fn delete_policy(&mut self, namespace: &str, name: &str) {
        self.policies
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// The policies after a re-list: those not in it are gone; the others are taken as
    /// [`Index::apply_policy`] takes them (a broken one keeps what it held before).
    pub fn reset_policies(&mut self, policies: Vec<PolicyInfo>) {
        let listed: std::collections::BTreeSet<(String, String)> = policies
            .iter()
            .map(|p| (p.namespace.clone(), p.name.clone()))
            .collect();
        self.policies.retain(|key, _| listed.contains(key));
        for policy in policies {
            self.apply_policy(policy);
        }
    }

    /// The policies holding each pod of the node, in the order of their names.
    pub fn desired(&self) -> Desired {
        let pods = self
            .pods
            .values()
            .map(|pod| {
                let policies = self
                    .holding(pod)
                    .map(|((namespace, name), in_force)| PolicyRules {
                        name: file_name(namespace, name),
                        text: in_force.rules.clone(),
                    })
                    .collect();
                let desired = PodDesired {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    policies,
                    containers: pod.containers.clone(),
                };
                (pod.uid.clone(), desired)
            })
            .collect();
        Desired { pods }
    }

    /// Every policy's verdict and the pods of this node it holds.
    pub fn reports(&self) -> Vec<PolicyReport> {
        self.policies
            .iter()
            .map(|((namespace, name), entry)| {
                let matched = entry.in_force.as_ref().map_or(0, |in_force| {
                    self.pods
                        .values()
                        .filter(|pod| {
                            &pod.namespace == namespace && in_force.selector.matches(&pod.labels)
                        })
                        .count()
                });
                PolicyReport {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    generation: entry.generation,
                    verdict: entry.verdict.clone(),
                    matched_pods: i64::try_from(matched).unwrap_or(i64::MAX),
                }
            })
            .collect()
    }

    /// The policies in force that select `pod`: only those of its namespace.
    fn holding<'a>(
        &'a self,
        pod: &'a PodInfo,
    ) -> impl Iterator<Item = (&'a (String, String), &'a InForce)> + 'a {
        let namespace = pod.namespace.clone();
        self.policies
            .range((namespace.clone(), String::new())..)
            .take_while(move |((ns, _), _)| *ns == namespace)
            .filter_map(|(key, entry)| entry.in_force.as_ref().map(|f| (key, f)))
            .filter(|(_, in_force)| in_force.selector.matches(&pod.labels))
    }
}

/// A policy's spec checked as the daemon will load it: the selector understood, the rules
/// parsed as one rules file named `<namespace>/<name>`.
fn check(policy: &PolicyInfo) -> Result<InForce, Verdict> {
    let selector =
        Selector::parse(&policy.spec.pod_selector).map_err(|message| Verdict::Rejected {
            reason: "InvalidSelector",
            message: format!("{}: {message}", policy.file_name()),
        })?;
    let path = policy.file_name();
    let mut parser = PolicyParser::new();
    parser
        .parse(&path, &policy.spec.rules)
        .map_err(|source| Verdict::Rejected {
            reason: "ParseError",
            message: format!(
                "{}; fix the rules and apply the policy again (the pods keep what held them \
                 before)",
                LoadError::Parse { path, source }.display_line()
            ),
        })?;
    Ok(InForce {
        selector,
        rules: policy.spec.rules.clone(),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;

    const FORBID_TOUCH: &str = "prefix_rule(pattern=[\"touch\"], decision=\"forbidden\")\n";

    fn mk_pod(uid: &str, namespace: &str, labels: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            namespace: namespace.into(),
            name: format!("pod-{uid}"),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            containers: BTreeMap::new(),
        }
    }

    fn mk_policy(namespace: &str, name: &str, app: Option<&str>, rules: &str) -> PolicyInfo {
        PolicyInfo {
            namespace: namespace.into(),
            name: name.into(),
            generation: Some(1),
            spec: GuardPolicySpec {
                pod_selector: LabelSelector {
                    match_labels: app.map(|a| [("app".to_string(), a.to_string())].into()),
                    ..Default::default()
                },
                rules: rules.into(),
            },
        }
    }

    fn held_by(index: &Index, uid: &str) -> Vec<String> {
        index.desired().pods[uid]
            .policies
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    #[test]
    fn a_policy_holds_the_pods_of_its_namespace_it_selects_and_no_other() {
        let mut index = Index::default();
        index.apply_pod(mk_pod("a", "team", &[("app", "agent")]));
        index.apply_pod(mk_pod("b", "team", &[("app", "web")]));
        index.apply_pod(mk_pod("c", "other", &[("app", "agent")]));
        index.apply_policy(mk_policy("team", "agents", Some("agent"), FORBID_TOUCH));
        assert_eq!(held_by(&index, "a"), ["team/agents"]);
        assert!(held_by(&index, "b").is_empty());
        assert!(held_by(&index, "c").is_empty());
        let reports = index.reports();
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].verdict, Verdict::Accepted);
        assert_eq!(reports[0].matched_pods, 1);
    }

    #[test]
    fn several_policies_all_hold_a_pod_and_an_empty_selector_holds_the_namespace() {
        let mut index = Index::default();
        index.apply_pod(mk_pod("a", "team", &[("app", "agent")]));
        index.apply_policy(mk_policy("team", "z-agents", Some("agent"), FORBID_TOUCH));
        index.apply_policy(mk_policy("team", "a-all", None, FORBID_TOUCH));
        assert_eq!(held_by(&index, "a"), ["team/a-all", "team/z-agents"]);
    }

    #[test]
    fn a_broken_edit_is_rejected_with_its_line_and_the_pod_keeps_what_held_it() {
        let mut index = Index::default();
        index.apply_pod(mk_pod("a", "team", &[("app", "agent")]));
        index.apply_policy(mk_policy("team", "agents", Some("agent"), FORBID_TOUCH));
        let before = index.desired();
        let mut broken = mk_policy(
            "team",
            "agents",
            Some("other"),
            "# a comment\nprefix_rule(pattern=[\"rm\"], decision=\"forbiden\")\n",
        );
        broken.generation = Some(2);
        index.apply_policy(broken);
        assert_eq!(
            index.desired(),
            before,
            "nothing of the broken edit applies"
        );
        let report = &index.reports()[0];
        assert_eq!(report.generation, Some(2));
        match &report.verdict {
            Verdict::Rejected { reason, message } => {
                assert_eq!(*reason, "ParseError");
                assert!(message.starts_with("team/agents:2:"), "{message}");
            }
            other => panic!("accepted: {other:?}"),
        }
    }

    #[test]
    fn a_broken_first_version_holds_nothing_and_says_why() {
        let mut index = Index::default();
        index.apply_pod(mk_pod("a", "team", &[("app", "agent")]));
        let mut policy = mk_policy("team", "agents", Some("agent"), FORBID_TOUCH);
        policy.spec.pod_selector.match_expressions = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                key: "app".into(),
                operator: "Equals".into(),
                values: None,
            },
        ]);
        index.apply_policy(policy);
        assert!(held_by(&index, "a").is_empty());
        assert!(matches!(
            index.reports()[0].verdict,
            Verdict::Rejected {
                reason: "InvalidSelector",
                ..
            }
        ));
    }

    #[test]
    fn a_relist_drops_what_it_no_longer_has_and_order_does_not_matter() {
        let pods = vec![
            mk_pod("a", "team", &[("app", "agent")]),
            mk_pod("b", "team", &[("app", "agent")]),
        ];
        let policies = vec![
            mk_policy("team", "one", Some("agent"), FORBID_TOUCH),
            mk_policy("team", "two", None, FORBID_TOUCH),
        ];
        let mut forward = Index::default();
        for pod in pods.clone() {
            forward.apply_pod(pod);
        }
        for policy in policies.clone() {
            forward.apply_policy(policy);
        }
        let mut backward = Index::default();
        for policy in policies.iter().rev().cloned() {
            backward.apply_policy(policy);
        }
        for pod in pods.iter().rev().cloned() {
            backward.apply_pod(pod);
        }
        assert_eq!(forward.desired(), backward.desired());

        forward.apply_pod(mk_pod("gone", "team", &[]));
        forward.apply_policy(mk_policy("team", "gone", None, FORBID_TOUCH));
        forward.reset_pods(pods);
        forward.reset_policies(policies);
        assert_eq!(forward.desired(), backward.desired());
        assert_eq!(forward.reports().len(), 2);
    }
}
