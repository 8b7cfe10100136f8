//! The cluster's objects `guard node` reads and writes: the `GuardPolicy` custom resource
//! (group `guard.dev`, version `v1alpha1`, namespaced). Its CRD, with the structural schema
//! derived from these types, is what `guard node crds` prints and `deploy/kubernetes/crds.yaml`
//! holds (a test checks the two agree).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of guard's resources.
pub const GROUP: &str = "guard.dev";

/// Which pods of its namespace a policy holds, and the `.rules` text it holds them to.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "guard.dev",
    version = "v1alpha1",
    kind = "GuardPolicy",
    plural = "guardpolicies",
    shortname = "gpol",
    namespaced,
    status = "GuardPolicyStatus",
    printcolumn = r#"{"name":"Accepted","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name":"Pods","type":"integer","jsonPath":".status.matchedPods"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GuardPolicySpec {
    /// The pods of the namespace this policy holds: a standard label selector; empty selects
    /// every pod of the namespace.
    #[serde(default)]
    pub pod_selector: LabelSelector,
    /// The policy in the `.rules` language (prefix_rule, network_rule, host_rule, ...), as one
    /// rules file named `<namespace>/<name>` in errors and audit records.
    pub rules: String,
}

/// What the node agents made of a policy.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuardPolicyStatus {
    /// The `metadata.generation` the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`: `True` when the rules parse and are in force, `False` (reason `ParseError`
    /// or `InvalidSelector`) with the file, line and fix; the pods keep what held them before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// How many pods hold this policy on the node whose agent wrote the status last (one agent
    /// writes per node; see docs/kubernetes.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_pods: Option<i64>,
}

/// A prompt in a pod, waiting for a person's answer: made by the node agent whose pod asked
/// (named `<node>-<ask id>`), answered by a [`GuardApproval`] naming it.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "guard.dev",
    version = "v1alpha1",
    kind = "GuardAsk",
    plural = "guardasks",
    namespaced,
    status = "GuardAskStatus",
    printcolumn = r#"{"name":"Pod","type":"string","jsonPath":".spec.pod"}"#,
    printcolumn = r#"{"name":"Request","type":"string","jsonPath":".spec.request"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GuardAskSpec {
    /// The node whose agent holds the ask.
    pub node: String,
    /// The pod that asked.
    pub pod: String,
    /// The ask's number on its node (`guard prompts` there).
    pub ask: u64,
    /// What was asked, in a few words: `exec curl example.com`, `connect example.com:443`.
    pub request: String,
    /// The blocked-request message the pod's process was given.
    pub message: String,
    /// The GuardPolicy whose rule asked (`<namespace>/<name>`), which an `always` answer
    /// amends; none: the node's own policy asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// How an ask went.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuardAskStatus {
    /// `pending`, `approved`, `denied` or `expired`.
    pub state: String,
    /// Who answered (the GuardApproval), when answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
}

/// A person's answer to a [`GuardAsk`] of the same namespace. Kubernetes RBAC decides who may
/// create one, so who may answer which namespace's asks (deploy/kubernetes/rbac.yaml's
/// `guard-approver` role).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "guard.dev",
    version = "v1alpha1",
    kind = "GuardApproval",
    plural = "guardapprovals",
    namespaced,
    status = "GuardApprovalStatus",
    printcolumn = r#"{"name":"Ask","type":"string","jsonPath":".spec.ask"}"#,
    printcolumn = r#"{"name":"Decision","type":"string","jsonPath":".spec.decision"}"#,
    printcolumn = r#"{"name":"Applied","type":"string","jsonPath":".status.applied"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GuardApprovalSpec {
    /// The GuardAsk answered (its name).
    pub ask: String,
    /// `once` (the call may be made again within a minute), `session` (for the pod's life),
    /// `always` (the asking GuardPolicy gets a rule that allows it), or `deny`.
    #[schemars(regex(pattern = "^(once|session|always|deny)$"))]
    pub decision: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuardApprovalStatus {
    /// Whether the node agent carried it out.
    pub applied: bool,
    /// What it did, or why not.
    pub message: String,
}

/// The CRDs of guard's resources, as YAML documents (`guard node crds`).
pub fn crds_yaml() -> anyhow::Result<String> {
    use kube::CustomResourceExt;
    let mut out =
        String::from("# Made by `guard node crds` from guard-user/src/node/api.rs; do not edit.\n");
    for crd in [GuardPolicy::crd(), GuardAsk::crd(), GuardApproval::crd()] {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let body = serde_saphyr::to_string(&crd)
            .map_err(|err| anyhow::anyhow!("writing the CRD {name} as YAML: {err}"))?;
        out.push_str("---\n");
        out.push_str(&body);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn deploy_kubernetes_holds_the_crds_the_types_make() {
        let committed = include_str!("../../../deploy/kubernetes/crds.yaml");
        assert_eq!(
            committed,
            super::crds_yaml().unwrap(),
            "deploy/kubernetes/crds.yaml is not what the types make: run \
             `guard node crds > deploy/kubernetes/crds.yaml`"
        );
    }
}
