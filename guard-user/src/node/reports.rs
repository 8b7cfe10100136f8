//! A `PolicyReport` (the Kubernetes policy working group's `wgpolicyk8s.io/v1alpha2` shape, as
//! Kyverno and Policy Reporter read them) per namespace with pods on this node: its refusals
//! summed by pod and rule, one result each, named `guard-<node>` (each node reports what its
//! own kernel refused). Made from the daemon's live audit records, written at most every
//! [`REPORT_EVERY`] when something changed, by server-side apply.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use super::watch::FIELD_MANAGER;
use crate::audit::filter::AuditFilter;
use crate::daemon::control_port::ControlPort;
use crate::daemon::peer::PeerCredentials;

/// How often changed reports are written.
pub const REPORT_EVERY: Duration = Duration::from_secs(2);

/// Results one report holds at most (the busiest pod-and-rule pairs); reports that outgrow
/// etcd's object size stop updating.
const MAX_RESULTS: usize = 500;

/// One pod's refusals by one rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub count: u64,
    /// The GuardPolicy (`<namespace>/<name>`) or the node's rules file that decided.
    pub policy: String,
    /// The rule as written, and where.
    pub rule: String,
    pub message: String,
    pub last: String,
    pub pod_uid: String,
}

/// Refusals by namespace, then by (pod, rule place).
#[derive(Debug, Default)]
pub struct Tally {
    pub namespaces: BTreeMap<String, BTreeMap<(String, String), Row>>,
    changed: BTreeSet<String>,
}

impl Tally {
    /// Counts one audit record (a JSON line, or a live `{"event":"record","record":...}`
    /// line): a refusal or prompt in a pod.
    pub fn take(&mut self, line: &str) {
        let Ok(mut record) = serde_json::from_str::<Value>(line) else {
            return;
        };
        if record["event"] == "record" {
            record = record["record"].take();
        }
        let refused = matches!(record["decision"].as_str(), Some("forbidden" | "prompt"))
            && record["audit_only"] != true;
        let pod = &record["k8s"];
        let (Some(namespace), Some(name)) = (pod["namespace"].as_str(), pod["pod"].as_str()) else {
            return;
        };
        if !refused {
            return;
        }
        let (policy, place, rule) = match record["rule"].as_object() {
            Some(rule) => {
                let file = rule["file"].as_str().unwrap_or_default().to_string();
                let place = format!("{file}:{}", rule["line"].as_u64().unwrap_or(0));
                (
                    file,
                    place,
                    rule["text"].as_str().unwrap_or_default().to_string(),
                )
            }
            None => (
                "(unmatched default)".into(),
                "unmatched".into(),
                "unmatched default".into(),
            ),
        };
        let row = self
            .namespaces
            .entry(namespace.to_string())
            .or_default()
            .entry((name.to_string(), place))
            .or_default();
        row.count += 1;
        row.policy = policy;
        row.rule = rule;
        row.message = record["message"].as_str().unwrap_or_default().to_string();
        row.last = record["time"].as_str().unwrap_or_default().to_string();
        row.pod_uid = pod["uid"].as_str().unwrap_or_default().to_string();
        self.changed.insert(namespace.to_string());
    }

    /// The namespaces whose report changed since this was last asked.
    pub fn take_changed(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.changed)
    }

    /// The PolicyReport of `namespace` as this node would write it.
    pub fn report(&self, namespace: &str, node: &str) -> Value {
        let rows = self.namespaces.get(namespace).cloned().unwrap_or_default();
        let mut rows: Vec<((String, String), Row)> = rows.into_iter().collect();
        rows.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(&b.0)));
        rows.truncate(MAX_RESULTS);
        let results: Vec<Value> = rows
            .iter()
            .map(|((pod, place), row)| {
                json!({
                    "source": "guard",
                    "policy": row.policy,
                    "rule": place,
                    "category": "exec and network",
                    "severity": "medium",
                    "result": "fail",
                    "scored": true,
                    "message": format!("{} refusals; last: {}", row.count, row.message),
                    "resources": [{"apiVersion": "v1", "kind": "Pod", "namespace": namespace,
                                   "name": pod, "uid": row.pod_uid}],
                    "properties": {"count": row.count.to_string(), "rule": row.rule,
                                   "last": row.last, "node": node},
                })
            })
            .collect();
        json!({
            "apiVersion": "wgpolicyk8s.io/v1alpha2",
            "kind": "PolicyReport",
            "metadata": {"name": format!("guard-{node}"), "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "guard-node"}},
            "summary": {"pass": 0, "fail": results.len(), "warn": 0, "error": 0, "skip": 0},
            "results": results,
        })
    }
}

/// Sums this node's refusals in pods into PolicyReports until the loop behind `port` stops.
pub async fn run(client: Client, node: String, port: ControlPort) {
    let filter = AuditFilter {
        types: vec!["decision".into()],
        ..Default::default()
    };
    let Some(mut lines) = port
        .follow_audit(PeerCredentials::this_process(), filter)
        .await
    else {
        tracing::warn!("no audit records to make PolicyReports from");
        return;
    };
    let gvk = GroupVersionKind::gvk("wgpolicyk8s.io", "v1alpha2", "PolicyReport");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "policyreports");
    let mut tally = Tally::default();
    let mut every = tokio::time::interval(REPORT_EVERY);
    let mut said_missing = false;
    loop {
        tokio::select! {
            line = lines.recv() => match line {
                Some(line) => tally.take(&line),
                None => return,
            },
            _ = every.tick() => {
                for namespace in tally.take_changed() {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), &namespace, &resource);
                    let body = tally.report(&namespace, &node);
                    let params = PatchParams::apply(FIELD_MANAGER).force();
                    if let Err(err) = api
                        .patch(&format!("guard-{node}"), &params, &Patch::Apply(&body))
                        .await
                    {
                        // Without the wgpolicyk8s.io CRD (Kyverno or Policy Reporter install it;
                        // deploy/kubernetes/policyreports has it) there is nowhere to write.
                        if !said_missing {
                            tracing::warn!("writing PolicyReport {namespace}/guard-{node}: {err}");
                            said_missing = true;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(namespace: &str, pod: &str, decision: &str, line: u64) -> String {
        json!({
            "type": "decision", "decision": decision, "time": "2026-12-07T00:00:00Z",
            "message": "guard: refused", "rule": {"file": "team/agents", "line": line,
            "text": "prefix_rule(...)"},
            "k8s": {"namespace": namespace, "pod": pod, "uid": "u-1", "node": "n"},
        })
        .to_string()
    }

    #[test]
    fn refusals_are_summed_by_pod_and_rule_per_namespace() {
        let mut tally = Tally::default();
        tally.take(&record("team", "agent", "forbidden", 1));
        let live = json!({"v": 1, "event": "record",
                          "record": serde_json::from_str::<Value>(&record("team", "agent", "forbidden", 1)).unwrap()});
        tally.take(&live.to_string());
        tally.take(&record("team", "agent", "prompt", 2));
        tally.take(&record("team", "web", "allow", 1));
        tally.take(&record("other", "x", "forbidden", 1));
        tally.take(&json!({"decision": "forbidden"}).to_string());
        assert_eq!(
            tally.take_changed().into_iter().collect::<Vec<_>>(),
            ["other", "team"]
        );
        let report = tally.report("team", "n");
        assert_eq!(report["kind"], "PolicyReport");
        assert_eq!(report["summary"]["fail"], 2);
        let results = report["results"].as_array().unwrap();
        assert_eq!(results[0]["rule"], "team/agents:1");
        assert_eq!(results[0]["properties"]["count"], "2");
        assert_eq!(results[0]["resources"][0]["name"], "agent");
        assert_eq!(results[1]["rule"], "team/agents:2");
        assert!(tally.take_changed().is_empty());
    }
}
