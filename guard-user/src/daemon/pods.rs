//! What a node's pods must hold, as `guard node` hands it to the daemon's loop: every pod of
//! the node and the GuardPolicies that hold it. The loop puts it in force
//! (`service/pods.rs`); the cluster side (`crate::node`) makes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The rules of one policy as they hold a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRules {
    /// `<namespace>/<name>`: the file name its errors and records give.
    pub name: String,
    pub text: String,
}

/// A pod and the policies that hold it (none: the node's floor alone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDesired {
    pub namespace: String,
    pub name: String,
    pub policies: Vec<PolicyRules>,
    /// Its containers' names by their runtime id (`status.containerStatuses[].containerID`
    /// without the `containerd://` part), to name the container in records.
    pub containers: BTreeMap<String, String>,
}

/// The runtime's container id in the name of a container's cgroup folder: the folder itself
/// under cgroupfs (`<id>`), `cri-containerd-<id>.scope`, `crio-<id>.scope` or
/// `docker-<id>.scope` under systemd.
pub fn container_id_of_cgroup(folder: &str) -> &str {
    let id = folder.strip_suffix(".scope").unwrap_or(folder);
    ["cri-containerd-", "crio-", "docker-"]
        .iter()
        .find_map(|prefix| id.strip_prefix(prefix))
        .unwrap_or(id)
}

/// What this node must enforce: every pod of the node, by uid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    pub pods: BTreeMap<String, PodDesired>,
}

/// How the kubelet names a pod's cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

impl CgroupDriver {
    pub fn parse(name: &str) -> CgroupDriver {
        match name {
            "systemd" => CgroupDriver::Systemd,
            _ => CgroupDriver::Cgroupfs,
        }
    }

    /// Where the pod with `uid` may have its cgroup below the pods' parent, one place per QoS
    /// class (Guaranteed, Burstable, BestEffort): the kubelet picks by the pod's resources.
    pub fn pod_cgroups(self, uid: &str) -> [PathBuf; 3] {
        match self {
            CgroupDriver::Cgroupfs => {
                let pod = format!("pod{uid}");
                [
                    PathBuf::from(&pod),
                    Path::new("burstable").join(&pod),
                    Path::new("besteffort").join(&pod),
                ]
            }
            CgroupDriver::Systemd => {
                // systemd slice names may not hold `-` but as the hierarchy's separator.
                let uid = uid.replace('-', "_");
                [
                    PathBuf::from(format!("kubepods-pod{uid}.slice")),
                    Path::new("kubepods-burstable.slice")
                        .join(format!("kubepods-burstable-pod{uid}.slice")),
                    Path::new("kubepods-besteffort.slice")
                        .join(format!("kubepods-besteffort-pod{uid}.slice")),
                ]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_containers_id_is_read_from_its_cgroups_name_under_either_driver() {
        assert_eq!(container_id_of_cgroup("0123abcd"), "0123abcd");
        assert_eq!(
            container_id_of_cgroup("cri-containerd-0123abcd.scope"),
            "0123abcd"
        );
        assert_eq!(container_id_of_cgroup("crio-0123abcd.scope"), "0123abcd");
    }

    #[test]
    fn a_pods_cgroup_is_where_each_kubelet_driver_puts_it_for_every_qos_class() {
        let uid = "0a1b2c3d-1111-2222-3333-444455556666";
        let cgroupfs = CgroupDriver::Cgroupfs.pod_cgroups(uid);
        assert_eq!(
            cgroupfs[0],
            Path::new("pod0a1b2c3d-1111-2222-3333-444455556666")
        );
        assert_eq!(
            cgroupfs[2],
            Path::new("besteffort/pod0a1b2c3d-1111-2222-3333-444455556666")
        );
        let systemd = CgroupDriver::Systemd.pod_cgroups(uid);
        assert_eq!(
            systemd[1],
            Path::new(
                "kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_1111_2222_3333_444455556666.slice"
            )
        );
    }
}
