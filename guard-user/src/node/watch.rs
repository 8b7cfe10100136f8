//! The only part of `guard node` that talks to the API server: list + watch of this node's
//! pods (`spec.nodeName`) and of every GuardPolicy, each with backoff and a re-list after a
//! broken watch (kube's `watcher`), fed into the [`Index`]; each change's picture goes to the
//! daemon's loop, and each policy's verdict to its status.
//!
//! Nothing is put in force until both lists are complete (`InitDone`): a first picture made
//! from half a list would let an earlier agent's sets go while pods it held are not yet held
//! again. A watch that breaks keeps the last picture in force (nothing is pruned) until its
//! re-list completes.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};

use super::api::{GuardPolicy, GuardPolicyStatus};
use super::index::{Index, PodInfo, PolicyInfo, PolicyReport, Verdict};
use crate::daemon::control_port::ControlPort;
use crate::daemon::pods::Desired;

/// The field manager of the status guard's agents write.
pub const FIELD_MANAGER: &str = "guard-node";

/// How long changes are gathered before a picture is made: a burst of events (a re-list, a
/// rollout) becomes one change of the maps, well within the second a change may take.
const GATHER: Duration = Duration::from_millis(50);

/// One kind's list + watch as it goes: complete, or being listed again.
struct Listing<T> {
    /// The objects of a list under way (`Init` .. `InitDone`).
    relisting: Option<Vec<T>>,
    /// A list has completed at least once.
    complete: bool,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Listing {
            relisting: None,
            complete: false,
        }
    }
}

/// What one watch event does to the index.
enum Step<T> {
    Apply(T),
    Delete(T),
    /// A re-list completed: what it listed is all there is.
    Relisted(Vec<T>),
    /// A re-list goes on.
    Listing,
}

impl<T> Listing<T> {
    fn take(&mut self, event: Event<T>) -> Step<T> {
        match event {
            Event::Init => {
                self.relisting = Some(Vec::new());
                Step::Listing
            }
            Event::InitApply(object) => {
                self.relisting.get_or_insert_with(Vec::new).push(object);
                Step::Listing
            }
            Event::InitDone => {
                self.complete = true;
                Step::Relisted(self.relisting.take().unwrap_or_default())
            }
            Event::Apply(object) => Step::Apply(object),
            Event::Delete(object) => Step::Delete(object),
        }
    }
}

fn pod_info(pod: Pod) -> Option<PodInfo> {
    let uid = pod.metadata.uid.clone()?;
    let statuses = pod.status.as_ref().into_iter().flat_map(|status| {
        let init = status.init_container_statuses.iter().flatten();
        status.container_statuses.iter().flatten().chain(init)
    });
    let containers = statuses
        .filter_map(|c| {
            // `containerd://<id>`, `cri-o://<id>`, `docker://<id>`.
            let (_, id) = c.container_id.as_deref()?.split_once("://")?;
            Some((id.to_string(), c.name.clone()))
        })
        .collect();
    Some(PodInfo {
        uid,
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        labels: pod.metadata.labels.unwrap_or_default(),
        containers,
    })
}

fn policy_info(policy: GuardPolicy) -> PolicyInfo {
    PolicyInfo {
        namespace: policy.namespace().unwrap_or_default(),
        name: policy.name_any(),
        generation: policy.metadata.generation,
        spec: policy.spec,
    }
}

/// Watches the cluster for node `node` until the loop behind `port` stops.
pub async fn run(client: Client, node: String, port: ControlPort) {
    let pods: Api<Pod> = Api::all(client.clone());
    let policies: Api<GuardPolicy> = Api::all(client.clone());
    let by_node = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut pod_events = watcher::watcher(pods, by_node).default_backoff().boxed();
    let mut policy_events = watcher::watcher(policies.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut index = Index::default();
    let mut pod_listing = Listing::<Pod>::default();
    let mut policy_listing = Listing::<GuardPolicy>::default();
    let mut sent: Option<Desired> = None;
    let mut written: BTreeMap<(String, String), (PolicyReport, Time)> = BTreeMap::new();
    let mut gather = false;
    loop {
        tokio::select! {
            event = pod_events.next() => match event {
                Some(Ok(event)) => {
                    match pod_listing.take(event) {
                        Step::Apply(pod) => index.apply_pod_if(pod_info(pod)),
                        Step::Delete(pod) => index.delete_pod(&pod.metadata.uid.unwrap_or_default()),
                        Step::Relisted(list) => {
                            index.reset_pods(list.into_iter().filter_map(pod_info).collect())
                        }
                        Step::Listing => {}
                    }
                    gather = true;
                }
                Some(Err(err)) => tracing::warn!("watching the node's pods: {err}"),
                None => return,
            },
            event = policy_events.next() => match event {
                Some(Ok(event)) => {
                    match policy_listing.take(event) {
                        Step::Apply(policy) => index.apply_policy(policy_info(policy)),
                        Step::Delete(policy) => index.delete_policy(
                            &policy.namespace().unwrap_or_default(),
                            &policy.name_any(),
                        ),
                        Step::Relisted(list) => {
                            index.reset_policies(list.into_iter().map(policy_info).collect())
                        }
                        Step::Listing => {}
                    }
                    gather = true;
                }
                Some(Err(err)) => tracing::warn!("watching GuardPolicies: {err}"),
                None => return,
            },
            () = tokio::time::sleep(GATHER), if gather => {
                gather = false;
                if !(pod_listing.complete && policy_listing.complete) {
                    continue;
                }
                let desired = index.desired();
                if sent.as_ref() != Some(&desired) {
                    if !port.node_desired(desired.clone()).await {
                        return;
                    }
                    sent = Some(desired);
                }
                write_statuses(&policies, &index.reports(), &mut written).await;
            }
        }
    }
}

/// Writes each policy's status whose verdict or count changed since it was last written.
async fn write_statuses(
    policies: &Api<GuardPolicy>,
    reports: &[PolicyReport],
    written: &mut BTreeMap<(String, String), (PolicyReport, Time)>,
) {
    written.retain(|key, _| {
        reports
            .iter()
            .any(|r| (&r.namespace, &r.name) == (&key.0, &key.1))
    });
    for report in reports {
        let key = (report.namespace.clone(), report.name.clone());
        let since = match written.get(&key) {
            Some((before, _)) if before == report => continue,
            // The condition's time moves only when its verdict does.
            Some((before, since)) if before.verdict == report.verdict => since.clone(),
            _ => Time(jiff_now()),
        };
        let status = status_of(report, since.clone());
        let body = serde_json::json!({
            "apiVersion": "guard.dev/v1alpha1",
            "kind": "GuardPolicy",
            "status": status,
        });
        let api: Api<GuardPolicy> =
            Api::namespaced(policies.clone().into_client(), &report.namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api
            .patch_status(&report.name, &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => {
                written.insert(key, (report.clone(), since));
            }
            // Gone meanwhile, or the API is away: written again with the next change.
            Err(err) => tracing::warn!(
                "writing the status of GuardPolicy {}/{}: {err}",
                report.namespace,
                report.name
            ),
        }
    }
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// A policy's status as its report says.
fn status_of(report: &PolicyReport, since: Time) -> GuardPolicyStatus {
    let (status, reason, message) = match &report.verdict {
        Verdict::Accepted => (
            "True",
            "Parsed".to_string(),
            "the rules parse and are in force on the pods the selector selects".to_string(),
        ),
        Verdict::Rejected { reason, message } => ("False", reason.to_string(), message.clone()),
    };
    GuardPolicyStatus {
        observed_generation: report.generation,
        conditions: vec![Condition {
            type_: "Accepted".into(),
            status: status.into(),
            reason,
            message,
            last_transition_time: since,
            observed_generation: report.generation,
        }],
        matched_pods: Some(report.matched_pods),
    }
}
