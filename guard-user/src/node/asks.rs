//! Asks and answers in the cluster: a prompt in a pod of this node becomes a `GuardAsk` in the
//! pod's namespace (named `<node>-<ask id>`, owned by the pod) and an Event on the pod with the
//! blocked-request message and how to answer; a person answers by creating a `GuardApproval`
//! naming it, which Kubernetes RBAC lets only those allowed create in that namespace. The agent
//! carries the answer out through the daemon's loop as root (`once`, `session`, `deny`), or
//! for `always` amends the GuardPolicy whose rule asked, and says what it did in the
//! approval's status.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::api::{GuardApproval, GuardAsk, GuardAskSpec};
use super::watch::FIELD_MANAGER;
use crate::asks::{ApprovalMode, Ask, AskState, AskTarget};
use crate::daemon::control_port::ControlPort;
use crate::daemon::peer::PeerCredentials;
use crate::daemon::wire::protocol::Request;
use crate::daemon::wire::responses::WatchEvent;
use crate::policy::amend::{network_amendment_line, prefix_amendment_line};

/// Where a pod's ask lives in the cluster.
#[derive(Clone, Debug)]
struct Published {
    namespace: String,
    name: String,
    ask: Ask,
}

/// Follows the daemon's asks and the cluster's approvals for node `node` until the loop
/// behind `port` stops.
pub async fn run(client: Client, node: String, port: ControlPort) {
    let peer = PeerCredentials::this_process;
    let (_, mut lines) = port.watch(peer()).await;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "guard-node".into(),
            instance: Some(node.clone()),
        },
    );
    let approvals: Api<GuardApproval> = Api::all(client.clone());
    let mut approval_events = watcher::watcher(approvals, watcher::Config::default())
        .default_backoff()
        .boxed();
    // The asks this agent published, by their GuardAsk's (namespace, name).
    let mut published: BTreeMap<(String, String), Published> = BTreeMap::new();
    loop {
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line else { return };
                let Ok(event) = serde_json::from_str::<WatchEvent>(&line) else { continue };
                match event {
                    WatchEvent::Ask { ask } => {
                        if let Some(p) = publish(&client, &recorder, &node, ask).await {
                            published.insert((p.namespace.clone(), p.name.clone()), p);
                        }
                    }
                    WatchEvent::Resolved { ask } => {
                        let key = published
                            .iter()
                            .find(|(_, p)| p.ask.id == ask.id)
                            .map(|(k, _)| k.clone());
                        if let Some(key) = key {
                            retire(&client, &key, &ask).await;
                            published.remove(&key);
                        }
                    }
                }
            }
            event = approval_events.next() => match event {
                Some(Ok(Event::Apply(approval) | Event::InitApply(approval))) => {
                    let key = (
                        approval.namespace().unwrap_or_default(),
                        approval.spec.ask.clone(),
                    );
                    let done = approval.status.as_ref().is_some_and(|s| s.applied);
                    if let (false, Some(asked)) = (done, published.get(&key)) {
                        let outcome = answer(&client, &port, asked, &approval).await;
                        write_outcome(&client, &approval, outcome).await;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => tracing::warn!("watching GuardApprovals: {err}"),
                None => return,
            }
        }
    }
}

/// The few words a GuardAsk's `request` column shows.
fn request_of(ask: &Ask) -> String {
    match &ask.target {
        AskTarget::Exec { tokens, .. } => format!("exec {}", tokens.join(" ")),
        AskTarget::Network {
            host,
            address,
            port,
            ..
        } => format!(
            "connect {}:{port}",
            host.clone().unwrap_or_else(|| address.to_string())
        ),
        AskTarget::Unix { socket, .. } => format!("unix {socket}"),
    }
}

/// The GuardPolicy (`<namespace>/<name>`) whose rule asked, when one of the pod's own
/// namespace did: a node rules file whose path merely looks like one names no policy there, so
/// an `always` answer can never amend another namespace's policy.
fn policy_of(ask: &Ask, namespace: &str) -> Option<String> {
    let file = &ask.record.rule.as_ref()?.file;
    names_policy_in(file, namespace).then(|| file.clone())
}

/// Whether rules file `file` is a GuardPolicy of `namespace` (`<namespace>/<name>`).
fn names_policy_in(file: &str, namespace: &str) -> bool {
    file.split_once('/')
        .is_some_and(|(policy_namespace, name)| {
            policy_namespace == namespace && !name.is_empty() && !name.contains('/')
        })
}

/// Makes the GuardAsk of a new ask from a pod, and the Event on the pod.
async fn publish(client: &Client, recorder: &Recorder, node: &str, ask: Ask) -> Option<Published> {
    let pod = ask.k8s.as_ref()?;
    let namespace = pod["namespace"].as_str()?.to_string();
    let pod_name = pod["pod"].as_str()?.to_string();
    let uid = pod["uid"].as_str()?.to_string();
    let name = format!("{node}-{}", ask.id);
    let spec = GuardAskSpec {
        node: node.to_string(),
        pod: pod_name.clone(),
        ask: ask.id,
        request: request_of(&ask),
        message: ask.message.clone(),
        policy: policy_of(&ask, &namespace),
    };
    let mut object = GuardAsk::new(&name, spec);
    object.metadata.namespace = Some(namespace.clone());
    // It goes with its pod.
    object.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod_name.clone(),
        uid: uid.clone(),
        ..Default::default()
    }]);
    let asks: Api<GuardAsk> = Api::namespaced(client.clone(), &namespace);
    if let Err(err) = asks.create(&PostParams::default(), &object).await {
        tracing::warn!("making GuardAsk {namespace}/{name}: {err}");
        return None;
    }
    let status = json!({"apiVersion": "guard.dev/v1alpha1", "kind": "GuardAsk",
                        "status": {"state": "pending"}});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let _ = asks
        .patch_status(&name, &params, &Patch::Apply(&status))
        .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    if let Ok(pod) = pods.get(&pod_name).await {
        let note = format!(
            "{} To answer: kubectl create -n {namespace} -f - <<EOF\napiVersion: guard.dev/v1alpha1\n\
             kind: GuardApproval\nmetadata: {{generateName: {name}-}}\nspec: {{ask: {name}, decision: once}}\nEOF\n\
             (decision: once, session, always or deny)",
            ask.message
        );
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: "GuardAsk".into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Ask".into(),
            secondary: None,
        };
        if let Err(err) = recorder.publish(&event, &pod.object_ref(&())).await {
            tracing::warn!(
                "the Event of ask {} on pod {namespace}/{pod_name}: {err}",
                ask.id
            );
        }
    }
    Some(Published {
        namespace,
        name,
        ask,
    })
}

/// An ask was answered or expired: its GuardAsk says so.
async fn retire(client: &Client, (namespace, name): &(String, String), ask: &Ask) {
    let (state, by) = match &ask.state {
        AskState::Approved { by, .. } => ("approved", Some(by.clone())),
        AskState::Denied { by, .. } => ("denied", Some(by.clone())),
        AskState::Expired => ("expired", None),
        AskState::Pending => return,
    };
    let asks: Api<GuardAsk> = Api::namespaced(client.clone(), namespace);
    let status = json!({"apiVersion": "guard.dev/v1alpha1", "kind": "GuardAsk",
                        "status": {"state": state, "answeredBy": by}});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Err(err) = asks
        .patch_status(name, &params, &Patch::Apply(&status))
        .await
    {
        tracing::warn!("the status of GuardAsk {namespace}/{name}: {err}");
    }
}

/// Carries out `approval` of `asked`: what was done, or why not.
async fn answer(
    client: &Client,
    port: &ControlPort,
    asked: &Published,
    approval: &GuardApproval,
) -> Result<String, String> {
    let id = asked.ask.id;
    let request = match approval.spec.decision.as_str() {
        "once" | "always" => Request::Approve {
            id,
            mode: ApprovalMode::Once,
            prefix: None,
        },
        "session" => Request::Approve {
            id,
            mode: ApprovalMode::Session,
            prefix: None,
        },
        "deny" => Request::Deny { id, always: false },
        other => {
            return Err(format!(
                "decision {other:?}: use once, session, always or deny"
            ));
        }
    };
    let response = port.request(PeerCredentials::this_process(), request).await;
    if !response.ok {
        return Err(response
            .error
            .map_or_else(|| "the agent refused it".to_string(), |e| e.message));
    }
    if approval.spec.decision != "always" {
        return Ok(format!(
            "ask {} answered: {}",
            asked.name, approval.spec.decision
        ));
    }
    amend_policy(client, asked).await.map(|line| {
        format!(
            "ask {} approved, and its GuardPolicy {} now has: {line}",
            asked.name,
            policy_of(&asked.ask, &asked.namespace).unwrap_or_default()
        )
    })
}

/// `always`: the GuardPolicy whose rule asked gets the rule that allows what was asked.
async fn amend_policy(client: &Client, asked: &Published) -> Result<String, String> {
    let policy = policy_of(&asked.ask, &asked.namespace).ok_or(
        "the node's own policy asked, not a GuardPolicy: approved once; change the node's rules \
         to allow it always",
    )?;
    if asked.ask.target.by_rule() {
        return Err(format!(
            "approved once; a prompt rule of {policy} asked, and an allow rule cannot override \
             it: change that rule to allow it always"
        ));
    }
    let line = match &asked.ask.target {
        AskTarget::Exec { tokens, .. } => prefix_amendment_line(tokens),
        AskTarget::Network {
            host,
            address,
            protocol,
            ..
        } => network_amendment_line(
            &host.clone().unwrap_or_else(|| address.to_string()),
            *protocol,
            crate::policy::Decision::Allow,
            None,
        ),
        AskTarget::Unix { .. } => {
            return Err(
                "approved once; a unix socket has no amendment line: add a unix_rule".into(),
            );
        }
    }
    .map_err(|err| format!("approved once; no amendment line: {err}"))?;
    let (namespace, name) = policy.split_once('/').unwrap_or_default();
    let policies: Api<super::api::GuardPolicy> = Api::namespaced(client.clone(), namespace);
    let mut current = policies
        .get(name)
        .await
        .map_err(|err| format!("approved once; reading GuardPolicy {policy}: {err}"))?;
    if !current.spec.rules.ends_with('\n') && !current.spec.rules.is_empty() {
        current.spec.rules.push('\n');
    }
    current.spec.rules.push_str(&line);
    current.spec.rules.push('\n');
    // A replace with the resourceVersion read: a concurrent edit fails it rather than being
    // overwritten.
    policies
        .replace(name, &PostParams::default(), &current)
        .await
        .map_err(|err| format!("approved once; amending GuardPolicy {policy}: {err}"))?;
    Ok(line)
}

async fn write_outcome(client: &Client, approval: &GuardApproval, outcome: Result<String, String>) {
    let namespace = approval.namespace().unwrap_or_default();
    let approvals: Api<GuardApproval> = Api::namespaced(client.clone(), &namespace);
    let (applied, message) = match outcome {
        Ok(message) => (true, message),
        Err(message) => (false, message),
    };
    let status = json!({"apiVersion": "guard.dev/v1alpha1", "kind": "GuardApproval",
                        "status": {"applied": applied, "message": message}});
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Err(err) = approvals
        .patch_status(&approval.name_any(), &params, &Patch::Apply(&status))
        .await
    {
        tracing::warn!(
            "the status of GuardApproval {namespace}/{}: {err}",
            approval.name_any()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::names_policy_in;

    #[test]
    fn only_a_policy_of_the_asking_pods_namespace_is_the_one_that_asked() {
        assert!(names_policy_in("team/agents", "team"));
        assert!(
            !names_policy_in("other/agents", "team"),
            "another namespace's"
        );
        assert!(
            !names_policy_in("/etc/guard/rules/a.rules", "team"),
            "the node's rules"
        );
        assert!(
            !names_policy_in("team/rules/a.rules", "team"),
            "a path that looks like one"
        );
        assert!(!names_policy_in("team/", "team"));
    }
}
