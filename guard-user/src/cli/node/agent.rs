//! `guard node`: the Kubernetes node agent (see `crate::node`), and `guard node crds`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::cli::daemon::service::{DaemonArgs, config_from};
use crate::cli::output::usage_error;

#[derive(Args, Debug)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "guard node runs on every node of a cluster (deploy/kubernetes: a DaemonSet). It \
holds the node's pods' parent cgroup ([node] pods_cgroup, `kubepods` by default) with the node's \
own policy (/etc/guard/rules) as every pod's floor, and each pod a GuardPolicy of its namespace \
selects with that policy's rules too: the stronger decision wins. A pod is held from its first \
moment by [node] unready = \"deny\" (every exec and connect refused) until its policies are in \
force. Each GuardPolicy's status says whether its rules were accepted (Accepted=False names the \
line and keeps what held the pods before) and how many pods of the node it holds.

Everything of `guard daemon` holds too: the config file, the control socket, `guard status`, \
`guard audit`, pinned programs that outlive the agent (a `kill -9` leaves every pod held; the \
next agent takes over without a gap).

Examples:
  guard node crds | kubectl apply -f -                 # the GuardPolicy CRD
  kubectl apply -k deploy/kubernetes                   # CRDs, RBAC and the DaemonSet
  sudo guard node --kubeconfig ~/.kube/config --node-name $(hostname)   # outside a cluster"
)]
pub struct NodeArgs {
    #[command(subcommand)]
    command: Option<NodeCommand>,
    /// The API server's kubeconfig; default: the pod's service account in a cluster, else
    /// $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// This node's name, as its Node object and its pods' spec.nodeName say (the DaemonSet
    /// passes it from the downward API).
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    node_name: Option<String>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

#[derive(Subcommand, Debug)]
enum NodeCommand {
    /// Print the CustomResourceDefinitions of guard's resources (YAML), as
    /// deploy/kubernetes/crds.yaml holds them.
    Crds,
}

pub fn node(args: &NodeArgs) -> ExitCode {
    if let Some(NodeCommand::Crds) = args.command {
        return match crate::node::api::crds_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("guard node crds: {err:#}");
                ExitCode::from(1)
            }
        };
    }
    let Some(node) = args.node_name.clone().filter(|n| !n.is_empty()) else {
        return usage_error(
            "guard node needs this node's name: pass --node-name NAME or set NODE_NAME (the \
             DaemonSet sets it from spec.nodeName)",
        );
    };
    let config = match config_from(&args.daemon) {
        Ok(config) => config,
        Err(err) => return usage_error(&format!("{err:#}")),
    };
    // The API client's TLS and the watches want a runtime with worker threads beside the
    // daemon's loop.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return usage_error(&format!("starting the runtime: {err}")),
    };
    let kubeconfig = args.kubeconfig.clone();
    let served = runtime.block_on(async move {
        let client = crate::node::client(kubeconfig.as_deref()).await?;
        crate::node::serve(config, node, client).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("guard node: cannot start: {err:#}");
            ExitCode::from(1)
        }
    }
}
