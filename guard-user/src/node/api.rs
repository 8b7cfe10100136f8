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

/// The CRDs of guard's resources, as YAML documents (`guard node crds`).
pub fn crds_yaml() -> anyhow::Result<String> {
    use kube::CustomResourceExt;
    let crd = GuardPolicy::crd();
    let body = serde_saphyr::to_string(&crd)
        .map_err(|err| anyhow::anyhow!("writing the GuardPolicy CRD as YAML: {err}"))?;
    Ok(format!(
        "# Made by `guard node crds` from guard-user/src/node/api.rs; do not edit.\n---\n{body}"
    ))
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
