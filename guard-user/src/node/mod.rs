//! `guard node`: the Kubernetes node agent, the third front end over the one enforcement core
//! (beside `guard run` and `guard daemon`). It is the daemon (`crate::daemon`), holding the
//! node's pods' parent cgroup with the node's own policy as the floor, fed by the cluster:
//!
//! ```text
//! API server ──list+watch──▶ watch ──apply/delete/reset──▶ index ──Desired──▶ daemon loop
//!  (pods of this node,        (watch.rs)                  (index.rs,        (service/pods.rs:
//!   GuardPolicies)               │                          selector.rs)      a set per pod)
//!                                └──status (Accepted, matchedPods)──▶ API server
//! ```
//!
//! `api` holds the custom resource's types and its CRD.

pub mod api;
pub mod asks;
pub mod index;
pub mod reports;
pub mod selector;
pub mod watch;

use anyhow::{Context, Result};
use kube::Client;

use crate::daemon::config::Config;

/// A client of the API server: from `kubeconfig` when given, else the pod's service account
/// (in a cluster) or the user's kubeconfig.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("the kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no cluster to talk to: run in a pod with a service account, or pass --kubeconfig FILE",
        )?,
    };
    Client::try_from(config).context("making the API client")
}

/// Runs the node agent for `node` until SIGTERM or SIGINT: the daemon with the pods of
/// `config`'s `[node]` as its scopes, fed by the cluster through `client`.
pub async fn serve(mut config: Config, node: String, client: Client) -> Result<()> {
    config.node_agent = Some(node.clone());
    crate::daemon::server::serve_with(config, move |port| {
        tokio::spawn(asks::run(client.clone(), node.clone(), port.clone()));
        tokio::spawn(reports::run(client.clone(), node.clone(), port.clone()));
        tokio::spawn(watch::run(client, node, port));
    })
    .await
}
