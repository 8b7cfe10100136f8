//! A Kubernetes node's pods as scopes (`guard node`). The pods' parent cgroup (`[node]
//! pods_cgroup`) holds three kinds of program sets:
//!
//! - the daemon's own (the node's `/etc/guard/rules`): the floor of every pod;
//! - the *unready* set (`[node] unready = "deny"`): every exec and connect refused, listed on
//!   the parent, so a pod's cgroup is held from its first moment, before the agent has seen
//!   the pod or while the agent is down; a pod is exempted from it only once what must hold it
//!   is in force;
//! - per pod held by GuardPolicies: an overlay (`overlays.rs`) with those policies' rules, one
//!   rules file each, attached to the pod's cgroup; the stronger decision of it and the floor
//!   wins.
//!
//! Every set's links are pinned in the daemon's generation folder, so a `kill -9` of the agent
//! leaves every pod held. A new agent releases the earlier generation only after its first
//! full picture of the node's pods is in force ([`Daemon::node_desired`]); until then its own
//! unready set lists nothing and the earlier agent's sets go on holding.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};

use super::Daemon;
use crate::daemon::pods::{CgroupDriver, Desired, PodDesired, PolicyRules, container_id_of_cgroup};
use crate::daemon::scopes::own_cgroup;
use crate::daemon::wire::protocol::OverlayFile;
use crate::daemon::wire::responses::ScopeKind;
use crate::kernel::pins;
use crate::kernel::scope::{cgroup_id, cgroup2_root};

/// The unready set's rules: nothing runs and nothing is reached.
pub const UNREADY_RULES: &str = "enforcement(unmatched_exec=\"forbidden\", \
     unmatched_network=\"forbidden\", unmatched_unix=\"forbidden\", anonymous_exec=\"forbidden\")\n";

/// The file name a spare set's (empty) rules go by.
const SPARE_FILE: &str = "<guard node: a spare set>";

/// Folders of one pod's cgroup looked through for a container's cgroup.
const CONTAINERS_LOOKED_AT: usize = 64;

/// The file name the unready set's rules go by in records.
const UNREADY_FILE: &str = "<guard node: a pod not yet in force>";

/// The node's pods and what holds each.
pub struct PodScopes {
    parent: PathBuf,
    parent_id: u64,
    driver: CgroupDriver,
    /// Whether the unready set is loaded (its key in `Daemon::overlays` is `parent_id`).
    unready: bool,
    pods: BTreeMap<String, PodScope>,
    /// The earlier agents' pin folders, released after the first picture is in force.
    earlier: Vec<PathBuf>,
    /// Overlays loaded for pods whose cgroup the kubelet has not made yet, with the policies
    /// each holds: loading (the verifier's walk) takes a second or two, attaching milliseconds,
    /// so the set is ready when the cgroup appears.
    prepared: BTreeMap<String, (Vec<PolicyRules>, super::overlays::Overlay)>,
    /// A set loaded ahead for the next pod (its rules written in milliseconds, where a load
    /// takes seconds), so a pod the kubelet starts at once is held by its policies from its
    /// sandbox's first exec.
    spare: Option<super::overlays::Overlay>,
    /// A spare is being loaded off the loop (the verifier's walk takes seconds; a policy
    /// change must not wait for it).
    spare_loading: bool,
    synced: bool,
}

/// One pod: what the cluster says holds it, and what does.
struct PodScope {
    wanted: PodDesired,
    /// Its cgroup, once the kubelet made it.
    cgroup: Option<(PathBuf, u64)>,
    /// The policies its overlay holds now (none: no overlay).
    holding: Vec<PolicyRules>,
    /// Why what it wants is not in force (logged once per change).
    failed: Option<String>,
}

impl PodScopes {
    /// How many pods' overlays are loaded (each a program set).
    pub fn overlays(&self) -> usize {
        self.pods.values().filter(|p| !p.holding.is_empty()).count()
    }

    /// The name of pod `uid`'s container whose cgroup is `cgroup_id`: the pod's cgroup's
    /// folders looked through (at most [`CONTAINERS_LOOKED_AT`]) for that inode.
    fn container(&self, uid: &str, cgroup_id: u64) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let pod = self.pods.get(uid)?;
        let (path, _) = pod.cgroup.as_ref()?;
        let folder = std::fs::read_dir(path)
            .ok()?
            .flatten()
            .take(CONTAINERS_LOOKED_AT)
            .find(|entry| {
                entry
                    .metadata()
                    .is_ok_and(|m| m.is_dir() && m.ino() == cgroup_id)
            })?;
        let folder = folder.file_name();
        let id = container_id_of_cgroup(folder.to_str()?);
        pod.wanted.containers.get(id).cloned()
    }

    /// Whether the unready set is loaded.
    pub fn unready_loaded(&self) -> bool {
        self.unready
    }

    /// The pin folder of a pod's overlay in `generation`.
    fn pins(generation: &std::path::Path, uid: &str) -> PathBuf {
        generation.join(format!("pod-{uid}"))
    }
}

impl Daemon {
    /// Holds the pods' parent (`[node]`): the unready set first (a cgroup's programs run in the
    /// order they were attached), then the daemon's. `earlier`: the pin folders of an earlier
    /// agent, which go on holding until the first picture of the pods is in force.
    pub(super) fn start_pods(&mut self, earlier: Vec<PathBuf>) -> Result<()> {
        let node = self.config.node.clone();
        let parent = if node.pods_cgroup.is_absolute() {
            node.pods_cgroup.clone()
        } else {
            cgroup2_root()?.join(&node.pods_cgroup)
        };
        // The kubelet makes it when it starts; a pod made after must be held from its first
        // moment, so the agent makes it if it is not there yet.
        std::fs::create_dir_all(&parent).with_context(|| {
            format!(
                "node.pods_cgroup: making {} (the pods' parent cgroup)",
                parent.display()
            )
        })?;
        let parent_id = cgroup_id(&parent)?;
        let unready = node.unready == "deny";
        if unready {
            let files = [OverlayFile {
                name: UNREADY_FILE.into(),
                text: UNREADY_RULES.into(),
            }];
            let policy = super::overlays::parse_files(&files, self.config.asks.approval())
                .map_err(|err| anyhow!("the unready set's rules: {err}"))?;
            let mut set = self.load_overlay(vec![UNREADY_FILE.into()], policy)?;
            set.attach(&parent)?;
            // The agent itself may run in a pod: it must never refuse itself.
            if let Ok(own) = own_cgroup() {
                set.exempt(cgroup_id(&own)?)?;
            }
            // With no earlier agent nothing holds the pods yet: list the parent at once.
            if earlier.is_empty() {
                set.list(parent_id)?;
            }
            self.overlays.insert(parent_id, set);
        }
        self.core.enforcer_mut().attach_cgroup(&parent)?;
        self.core.enforcer_mut().add_scope(parent_id)?;
        self.scopes.insert(ScopeKind::Pods, parent.clone())?;
        self.pods = Some(PodScopes {
            parent,
            parent_id,
            driver: CgroupDriver::parse(&node.cgroup_driver),
            unready,
            pods: BTreeMap::new(),
            earlier,
            prepared: BTreeMap::new(),
            spare: None,
            spare_loading: false,
            synced: false,
        });
        match watch_new_cgroups(&self.pods.as_ref().expect("just set").parent) {
            Ok(rx) => self.pod_cgroups = Some(rx),
            // Looked for each tick instead (250 ms): a pod may then be held by the unready
            // set for its first moment.
            Err(err) => tracing::warn!("new pod cgroups are looked for each tick: {err:#}"),
        }
        Ok(())
    }

    /// Pins the unready set beside the daemon's links (once the generation folder is named).
    pub(super) fn pin_pods_parent(&mut self) -> Result<()> {
        let Some(pods) = &self.pods else {
            return Ok(());
        };
        let dir = self.generation.join("unready");
        if let Some(set) = self.overlays.get_mut(&pods.parent_id) {
            set.pin(&dir)?;
        }
        Ok(())
    }

    /// Puts the cluster's picture of the node's pods in force: a pod gone loses its scope and
    /// sets, a new or changed one gets what holds it. The first picture also lists the pods'
    /// parent in the unready set and lets an earlier agent's pins go.
    pub fn node_desired(&mut self, desired: Desired) {
        let Some(mut pods) = self.pods.take() else {
            tracing::warn!("a picture of the node's pods, but this daemon holds no pods");
            return;
        };
        let gone: Vec<String> = pods
            .pods
            .keys()
            .filter(|uid| !desired.pods.contains_key(*uid))
            .cloned()
            .collect();
        for uid in gone {
            if let Some(pod) = pods.pods.remove(&uid) {
                self.end_pod(&mut pods, &uid, pod);
            }
        }
        for (uid, wanted) in desired.pods {
            let pod = pods.pods.entry(uid.clone()).or_insert_with(|| PodScope {
                wanted: wanted.clone(),
                cgroup: None,
                holding: Vec::new(),
                failed: None,
            });
            if pod.wanted != wanted {
                pod.failed = None;
            }
            pod.wanted = wanted;
            self.settle_pod(&mut pods, &uid);
        }
        if !pods.synced {
            pods.synced = true;
            self.first_picture_in_force(&mut pods);
        }
        self.pods = Some(pods);
    }

    /// After the first picture: the unready set lists the parent, and an earlier agent's sets
    /// go (this agent's hold every pod they held).
    fn first_picture_in_force(&mut self, pods: &mut PodScopes) {
        if let Some(set) = self.overlays.get_mut(&pods.parent_id)
            && let Err(err) = set.list(pods.parent_id)
        {
            tracing::error!("the unready set does not hold new pods: {err:#}");
        }
        for old in std::mem::take(&mut pods.earlier) {
            if old != self.generation
                && let Err(err) = pins::release(&old)
            {
                tracing::error!(
                    "releasing the earlier agent's pins {}: {err:#}",
                    old.display()
                );
            }
        }
        tracing::info!(
            "the node's {} pods are in force ({} held by GuardPolicies)",
            pods.pods.len(),
            pods.overlays()
        );
    }

    /// Which pod scope `id` is, for its records: namespace, pod, uid and node, and the
    /// container whose cgroup (`cgroup_id`, below the pod's) the process was in, when the
    /// pod's status names it.
    pub(super) fn pod_identity(&self, id: u64, cgroup_id: u64) -> Option<serde_json::Value> {
        let ScopeKind::Pod {
            namespace,
            name,
            uid,
            ..
        } = &self.scopes.by_id.get(&id)?.kind
        else {
            return None;
        };
        let mut identity = serde_json::json!({
            "namespace": namespace,
            "pod": name,
            "uid": uid,
            "node": self.config.node_agent,
        });
        if let Some(container) = self.pods.as_ref().and_then(|p| p.container(uid, cgroup_id)) {
            identity["container"] = serde_json::json!(container);
        }
        Some(identity)
    }

    /// Pods whose cgroup the kubelet had not made yet, looked for again (every tick).
    pub fn watch_pods(&mut self) {
        let Some(pods) = self.pods.take() else {
            return;
        };
        let waiting: Vec<String> = pods
            .pods
            .iter()
            .filter(|(_, p)| p.cgroup.is_none())
            .map(|(uid, _)| uid.clone())
            .collect();
        let mut pods = pods;
        for uid in waiting {
            self.settle_pod(&mut pods, &uid);
        }
        self.load_spare(&mut pods);
        self.pods = Some(pods);
    }

    /// Brings one pod to what it wants: its cgroup found, its overlay loaded or changed, then
    /// the unready set lets go of it. Anything that fails leaves the unready set holding it
    /// (fails closed) and is logged once per change.
    fn settle_pod(&mut self, pods: &mut PodScopes, uid: &str) {
        let generation = self.generation.clone();
        let Some(pod) = pods.pods.get_mut(uid) else {
            return;
        };
        let kind = ScopeKind::Pod {
            namespace: pod.wanted.namespace.clone(),
            name: pod.wanted.name.clone(),
            uid: uid.to_string(),
            policies: pod.wanted.policies.iter().map(|p| p.name.clone()).collect(),
        };
        let (path, id) = match &pod.cgroup {
            Some(found) => found.clone(),
            None => {
                let found = pods
                    .driver
                    .pod_cgroups(uid)
                    .into_iter()
                    .map(|relative| pods.parent.join(relative))
                    .find(|path| path.join("cgroup.procs").exists());
                // Not made yet: the unready set holds it from its first moment, and its set
                // is loaded now, to be attached when it appears.
                let Some(path) = found else {
                    let wanted = pod.wanted.policies.clone();
                    self.prepare_pod(pods, uid, wanted);
                    return;
                };
                let Ok(id) = cgroup_id(&path) else { return };
                // Listed in the daemon's set too: its events are counted and recorded as its own.
                let listed = self
                    .scopes
                    .insert(kind.clone(), path.clone())
                    .and_then(|_| self.core.enforcer_mut().add_scope(id));
                if let Err(err) = listed {
                    tracing::error!("pod {uid}: listing {}: {err:#}", path.display());
                    return;
                }
                pod.cgroup = Some((path.clone(), id));
                (path, id)
            }
        };
        if let Some(scope) = self.scopes.by_id.get_mut(&id) {
            scope.kind = kind;
        }
        if pod.holding != pod.wanted.policies {
            let wanted = pod.wanted.policies.clone();
            let prepared = pods
                .prepared
                .remove(uid)
                .filter(|(policies, _)| *policies == wanted)
                .map(|(_, overlay)| overlay);
            let prepared = prepared.or_else(|| pods.spare.take());
            let pins = PodScopes::pins(&generation, uid);
            match self.hold_pod(&path, id, &pins, &wanted, prepared) {
                Ok(()) => {
                    pod.holding = wanted;
                    pod.failed = None;
                }
                Err(err) => {
                    let err = format!("{err:#}");
                    if pod.failed.as_deref() != Some(err.as_str()) {
                        tracing::error!(
                            "pod {}/{} keeps what held it before: {err}",
                            pod.wanted.namespace,
                            pod.wanted.name
                        );
                    }
                    pod.failed = Some(err);
                    return;
                }
            }
        }
        if pods.unready
            && let Some(set) = self.overlays.get_mut(&pods.parent_id)
            && let Err(err) = set.exempt(id)
        {
            tracing::error!("pod {uid}: the unready set still holds it: {err:#}");
        }
    }

    /// A set holding `policies`: `ready` (a spare or a set loaded ahead) with its rules
    /// replaced, else one loaded now.
    fn overlay_for(
        &self,
        policies: &[PolicyRules],
        ready: Option<super::overlays::Overlay>,
    ) -> Result<super::overlays::Overlay> {
        if let Some(mut overlay) = ready {
            self.set_rules(&mut overlay, policies)?;
            return Ok(overlay);
        }
        let files = overlay_files(policies);
        let names = files.iter().map(|f| f.name.clone()).collect();
        let policy = super::overlays::parse_files(&files, self.config.asks.approval())
            .map_err(|err| anyhow!(err))?;
        self.load_overlay(names, policy)
    }

    /// Writes `policies` into `overlay`'s maps (new entries before stale ones go).
    fn set_rules(
        &self,
        overlay: &mut super::overlays::Overlay,
        policies: &[PolicyRules],
    ) -> Result<()> {
        let files = overlay_files(policies);
        let policy = super::overlays::parse_files(&files, self.config.asks.approval())
            .map_err(|err| anyhow!(err))?;
        overlay
            .in_force_mut()
            .replace_policy(policy, self.core.names(), self.core.approvals())?;
        overlay.files = files.into_iter().map(|f| f.name).collect();
        Ok(())
    }

    /// Starts loading a spare set for the next pod, on a thread of its own, when there is none
    /// (once the pods are in force); [`Daemon::spare_loaded`] takes it.
    fn load_spare(&self, pods: &mut PodScopes) {
        if !pods.synced || pods.spare.is_some() || pods.spare_loading {
            return;
        }
        let files = [OverlayFile {
            name: SPARE_FILE.into(),
            text: String::new(),
        }];
        let policy = match super::overlays::parse_files(&files, self.config.asks.approval()) {
            Ok(policy) => policy,
            Err(err) => {
                tracing::error!("a spare set's rules: {err}");
                return;
            }
        };
        let backend = self.core.enforcer().backend();
        let resolver_port = self
            .name_server
            .as_ref()
            .map(crate::resolve::Resolver::port);
        let modes = crate::in_force::Modes {
            audit_only: self.config.audit_only,
            record_allowed: self.config.audit.record_allowed,
        };
        let sink = self.overlay_sink.clone();
        let done = self.spare_sink.clone();
        pods.spare_loading = true;
        tokio::task::spawn_blocking(move || {
            // Empty rules: what is known of the names and the approvals come with its real
            // rules, when a pod takes it.
            let names = crate::resolve::known::KnownNames::new(
                crate::resolve::lookup::DnsCache::new(),
                true,
            );
            let approvals = crate::asks::Approvals::default();
            let env = super::overlays::OverlayEnv {
                backend,
                resolver_port,
                names: &names,
                approvals: &approvals,
                modes,
            };
            let loaded =
                super::overlays::Overlay::load(vec![SPARE_FILE.into()], policy, &env, sink);
            let _ = done.send(loaded);
        });
    }

    /// A spare set loaded off the loop: kept for the next pod.
    pub fn spare_loaded(&mut self, loaded: Result<super::overlays::Overlay>) {
        let Some(pods) = self.pods.as_mut() else {
            return;
        };
        pods.spare_loading = false;
        match loaded {
            Ok(overlay) => pods.spare = Some(overlay),
            Err(err) => tracing::warn!("loading a spare set for the next pod: {err:#}"),
        }
    }

    /// Loads the set of a pod whose cgroup is not there yet (once per change of its policies).
    fn prepare_pod(&self, pods: &mut PodScopes, uid: &str, policies: Vec<PolicyRules>) {
        if policies.is_empty() {
            pods.prepared.remove(uid);
            return;
        }
        if pods.prepared.get(uid).is_some_and(|(p, _)| *p == policies) {
            return;
        }
        let spare = pods.spare.take();
        let loaded = self.overlay_for(&policies, spare);
        match loaded {
            Ok(overlay) => {
                pods.prepared.insert(uid.to_string(), (policies, overlay));
            }
            // Loaded again when its cgroup appears (and held closed until then).
            Err(err) => tracing::warn!("pod {uid}: loading its set ahead: {err:#}"),
        }
    }

    /// Puts `policies` in force on a pod's cgroup: its overlay loaded, attached, listed and
    /// pinned in `pins`, or its rules replaced; none: the overlay goes. On an error what held
    /// the pod before still does.
    fn hold_pod(
        &mut self,
        path: &std::path::Path,
        id: u64,
        pins: &std::path::Path,
        policies: &[PolicyRules],
        prepared: Option<super::overlays::Overlay>,
    ) -> Result<()> {
        if policies.is_empty() {
            if self.overlays.remove(&id).is_some() {
                pins::release(pins)?;
            }
            return Ok(());
        }
        if let Some(mut overlay) = self.overlays.remove(&id) {
            // Its rules replaced in place; on an error it keeps the ones it had.
            let changed = self.set_rules(&mut overlay, policies);
            self.overlays.insert(id, overlay);
            return changed;
        }
        let mut overlay = self.overlay_for(policies, prepared)?;
        overlay.attach(path)?;
        overlay.list(id)?;
        // Last: a set that fails before it is pinned goes with its links.
        if let Err(err) = overlay.pin(pins) {
            let _ = pins::release(pins);
            return Err(err);
        }
        self.overlays.insert(id, overlay);
        Ok(())
    }

    /// A pod is gone: its overlay and pins go, its listings too (the cgroup is gone or going).
    fn end_pod(&mut self, pods: &mut PodScopes, uid: &str, pod: PodScope) {
        pods.prepared.remove(uid);
        let Some((_, id)) = pod.cgroup else {
            return;
        };
        self.overlays.remove(&id);
        if let Err(err) = pins::release(&PodScopes::pins(&self.generation, uid)) {
            tracing::warn!("pod {uid}: releasing its pins: {err:#}");
        }
        if let Some(set) = self.overlays.get_mut(&pods.parent_id) {
            let _ = set.unlist(id);
        }
        let _ = self.core.enforcer_mut().remove_scope(id);
        self.scopes.by_id.remove(&id);
        self.end_scope_names(id);
    }
}

/// A pod's policies as an overlay's files: one each, named `<namespace>/<name>`.
fn overlay_files(policies: &[PolicyRules]) -> Vec<OverlayFile> {
    policies
        .iter()
        .map(|p| OverlayFile {
            name: p.name.clone(),
            text: p.text.clone(),
        })
        .collect()
}

/// Folders below the pods' parent where the kubelet makes pods' cgroups (one per QoS class,
/// either driver).
const QOS_FOLDERS: [&str; 4] = [
    "burstable",
    "besteffort",
    "kubepods-burstable.slice",
    "kubepods-besteffort.slice",
];

/// A wake-up each time a folder is made in the pods' parent or one of its QoS folders (inotify),
/// so a pod's cgroup is found the moment the kubelet makes it.
fn watch_new_cgroups(parent: &std::path::Path) -> Result<tokio::sync::mpsc::UnboundedReceiver<()>> {
    use futures_util::StreamExt;
    use inotify::{Inotify, WatchMask};
    let inotify = Inotify::init().context("inotify_init")?;
    let mut watches = inotify.watches();
    let mask = WatchMask::CREATE | WatchMask::ONLYDIR;
    let parent_watch = watches
        .add(parent, mask)
        .with_context(|| format!("watching {}", parent.display()))?;
    for folder in QOS_FOLDERS {
        let _ = watches.add(parent.join(folder), mask);
    }
    let mut events = inotify
        .into_event_stream(vec![0u8; 4096])
        .context("inotify's event stream")?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let parent = parent.to_path_buf();
    tokio::spawn(async move {
        while let Some(Ok(event)) = events.next().await {
            // A QoS folder the kubelet made after the start is watched from now on.
            if event.wd == parent_watch
                && let Some(name) = event.name.as_ref().and_then(|n| n.to_str())
                && QOS_FOLDERS.contains(&name)
            {
                let _ = watches.add(parent.join(name), mask);
            }
            if tx.send(()).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Decision;
    use crate::policy::approval::ApprovalPolicy;

    #[test]
    fn the_unready_set_refuses_every_exec_and_connect() {
        let files = [OverlayFile {
            name: UNREADY_FILE.into(),
            text: UNREADY_RULES.into(),
        }];
        let policy =
            crate::daemon::service::overlays::parse_files(&files, ApprovalPolicy::OnRequest)
                .unwrap();
        let settings = policy.enforcement();
        assert_eq!(settings.unmatched_exec, Decision::Forbidden);
        assert_eq!(settings.unmatched_network, Decision::Forbidden);
        assert_eq!(settings.anonymous_exec, Decision::Forbidden);
    }
}
