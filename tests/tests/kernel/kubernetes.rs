//! `guard node` against a real kube-apiserver (tests/src/k8s.rs) and the real kernel: pods are
//! Pod objects in the API server whose cgroups the test makes where the kubelet's cgroupfs
//! driver puts them (`<pods parent>/besteffort/pod<uid>/<container>`), under a parent cgroup of
//! the test's own; their "containers" are processes the test starts in those cgroups.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run, text};
use guard_tests::k8s::{self, ControlPlane};

/// The node the tests' pods are on.
const NODE: &str = "guard-test-node";

const FORBID_TOUCH_AND_A_HOST: &str = "prefix_rule(pattern=[\"touch\"], decision=\"forbidden\", \
     justification=\"agents do not touch\")\n\
     address_rule(addresses=[\"127.77.46.1\"], decision=\"forbidden\")\n";

/// The pods' parent cgroup, made by the test, with everything below it removed at the end
/// (processes killed first), pass or fail.
struct PodsParent(PathBuf);

impl PodsParent {
    fn new() -> PodsParent {
        let root = guard::kernel::scope::cgroup2_root().unwrap();
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let top = root.join(format!("guard-test-k8s-{}-{n}", std::process::id()));
        std::fs::create_dir_all(top.join("kubepods")).unwrap();
        PodsParent(top)
    }

    fn kubepods(&self) -> PathBuf {
        self.0.join("kubepods")
    }

    /// A pod's container cgroup, as the kubelet's cgroupfs driver makes it for a BestEffort pod.
    fn container(&self, uid: &str) -> PathBuf {
        let path = self
            .kubepods()
            .join("besteffort")
            .join(format!("pod{uid}"))
            .join("c1");
        std::fs::create_dir_all(&path).unwrap();
        path
    }
}

impl Drop for PodsParent {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        k8s::remove_cgroup_tree(&self.0);
    }
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("deploy/kubernetes")
}

/// The control plane with deploy/kubernetes applied and a namespace `team`.
fn cluster() -> ControlPlane {
    let plane = ControlPlane::start();
    let deploy = deploy_dir().display().to_string();
    plane.kubectl_ok(&["apply", "-k", &deploy], None);
    plane.kubectl_ok(
        &[
            "wait",
            "--for=condition=established",
            "crd/guardpolicies.guard.dev",
            "--timeout=60s",
        ],
        None,
    );
    let reports = deploy_dir().join("policyreports").display().to_string();
    plane.kubectl_ok(&["apply", "-k", &reports], None);
    plane.kubectl_ok(&["create", "namespace", "team"], None);
    plane
}

/// Creates pod `name` in `team` on the test node with label app=`app`; its uid.
fn create_pod(plane: &ControlPlane, name: &str, app: &str) -> String {
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: team\n  labels:\n    \
         app: {app}\nspec:\n  nodeName: {NODE}\n  automountServiceAccountToken: false\n  \
         containers:\n  - name: c1\n    image: busybox:local\n    imagePullPolicy: Never\n"
    );
    plane.kubectl_ok(&["apply", "-f", "-"], Some(&pod));
    plane.get_json(&["pod", "-n", "team", name])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Says in pod `name`'s status, as the kubelet would, that its container `c1` runs with
/// runtime id `c1` (the folder name of its cgroup, [`PodsParent::container`]).
fn report_container(plane: &ControlPlane, name: &str) {
    let status = r#"{"status":{"phase":"Running","containerStatuses":[{"name":"c1","ready":true,"restartCount":0,"image":"busybox:local","imageID":"","containerID":"containerd://c1"}]}}"#;
    plane.kubectl_ok(
        &[
            "patch",
            "pod",
            name,
            "-n",
            "team",
            "--subresource=status",
            "--type=merge",
            "-p",
            status,
        ],
        None,
    );
}

fn apply_policy(plane: &ControlPlane, app: &str, rules: &str) {
    let indented: String = rules.lines().map(|l| format!("    {l}\n")).collect();
    let policy = format!(
        "apiVersion: guard.dev/v1alpha1\nkind: GuardPolicy\nmetadata:\n  name: agents\n  \
         namespace: team\nspec:\n  podSelector:\n    matchLabels:\n      app: {app}\n  \
         rules: |\n{indented}"
    );
    plane.kubectl_ok(&["apply", "-f", "-"], Some(&policy));
}

/// The agent: `guard node` for node `node`, holding the pods below cgroup `pods_cgroup`.
fn agent(plane: &ControlPlane, pods_cgroup: &Path, node: &str) -> TestDaemon {
    TestDaemon::start(&DaemonSetup {
        rules: "# the node's floor: nothing of its own\n".into(),
        extra_config: format!(
            "[node]\npods_cgroup = {:?}\nunready = \"deny\"\n{}",
            pods_cgroup.display().to_string(),
            guard_tests::daemon::NAMES_RESOLVED_BY_THE_DAEMON
        ),
        front: vec![
            "node".into(),
            "--kubeconfig".into(),
            plane.kubeconfig.display().to_string(),
            "--node-name".into(),
            node.into(),
        ],
        ..Default::default()
    })
}

/// Waits (a bound, not a measure) until `done` holds; panics with `what` otherwise.
fn wait_for(what: &str, bound: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if done() {
            return started.elapsed();
        }
        assert!(started.elapsed() < bound, "not within {bound:?}: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The agent's pod scopes by pod name, with the policies holding each.
fn pod_scopes(agent: &TestDaemon) -> Vec<(String, Vec<String>)> {
    let status = agent.json(&["status", "--json"]);
    status["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"]["kind"] == "pod")
        .map(|s| {
            let policies = s["kind"]["policies"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string())
                .collect();
            (s["kind"]["name"].as_str().unwrap().to_string(), policies)
        })
        .collect()
}

fn accepted(plane: &ControlPlane) -> (String, String, i64) {
    let policy = plane.get_json(&["guardpolicy", "-n", "team", "agents"]);
    let condition = policy["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Accepted").cloned())
        .unwrap_or_default();
    (
        condition["status"].as_str().unwrap_or("").to_string(),
        condition["message"].as_str().unwrap_or("").to_string(),
        policy["status"]["matchedPods"].as_i64().unwrap_or(-1),
    )
}

/// `touch FILE` in `cgroup`: whether FILE was made.
fn touches(cgroup: &Path, file: &Path) -> bool {
    let _ = std::fs::remove_file(file);
    let out = TestDaemon::in_cgroup(
        cgroup,
        Path::new("/usr/bin/touch"),
        &[file.to_str().unwrap()],
    );
    out.status.success() && file.exists()
}

/// Whether a connect from `cgroup` to 127.77.46.1 is refused with EPERM.
fn connect_refused(cgroup: &Path) -> bool {
    let out = TestDaemon::in_cgroup(
        cgroup,
        Path::new("/bin/busybox"),
        &["sh", "-c", "nc -w 1 127.77.46.1 9 </dev/null"],
    );
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    println!("nc from {}: {:?} {said}", cgroup.display(), out.status);
    said.contains("Operation not permitted")
}

#[test]
fn a_guard_policy_holds_the_pods_it_selects_changes_within_a_second_and_a_broken_one_changes_nothing()
 {
    if !can_run() || !k8s::can_run() {
        return;
    }
    let plane = cluster();
    let parent = PodsParent::new();
    let agent_uid = create_pod(&plane, "agent", "agent");
    let web_uid = create_pod(&plane, "web", "web");
    let (agent_pod, web_pod) = (parent.container(&agent_uid), parent.container(&web_uid));
    report_container(&plane, "agent");
    apply_policy(&plane, "agent", FORBID_TOUCH_AND_A_HOST);
    let node = agent(&plane, &parent.kubepods(), NODE);
    wait_for(
        "both pods are scopes, the agent pod held by the policy",
        Duration::from_secs(30),
        || {
            let scopes = pod_scopes(&node);
            scopes.contains(&("agent".into(), vec!["team/agents".into()]))
                && scopes.contains(&("web".into(), vec![]))
        },
    );
    wait_for(
        "the policy's status says Accepted and 1 pod",
        Duration::from_secs(30),
        || {
            let (status, _, pods) = accepted(&plane);
            status == "True" && pods == 1
        },
    );

    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("touched");
    assert!(
        !touches(&agent_pod, &file),
        "the selected pod's touch is refused"
    );
    assert!(
        connect_refused(&agent_pod),
        "and its connect to the host gets EPERM"
    );
    assert!(
        touches(&web_pod, &file),
        "the pod without the label runs touch"
    );
    assert!(!connect_refused(&web_pod), "and reaches the host");

    // A change reaches the running pod within a second.
    let mkdir_target = scratch.path().join("made");
    let mkdirs = || {
        let _ = std::fs::remove_dir(&mkdir_target);
        let out = TestDaemon::in_cgroup(
            &agent_pod,
            Path::new("/usr/bin/mkdir"),
            &[mkdir_target.to_str().unwrap()],
        );
        out.status.success()
    };
    assert!(mkdirs(), "mkdir runs before the change");
    apply_policy(
        &plane,
        "agent",
        &format!(
            "{FORBID_TOUCH_AND_A_HOST}prefix_rule(pattern=[\"mkdir\"], decision=\"forbidden\")\n"
        ),
    );
    let took = wait_for(
        "the changed policy holds in the running pod",
        Duration::from_secs(1),
        || !mkdirs(),
    );
    println!("a changed GuardPolicy held in the running pod {took:?} after kubectl apply returned");

    // A broken edit: Accepted=False with the line, nothing changes.
    apply_policy(
        &plane,
        "agent",
        "prefix_rule(pattern=[\"touch\"], decision=\"forbidden\")\nprefix_rule(pattern=[\"ls\"], decision=\"forbiden\")\n",
    );
    wait_for(
        "the broken policy's status says why",
        Duration::from_secs(30),
        || {
            let (status, message, _) = accepted(&plane);
            status == "False" && message.contains("team/agents:2:")
        },
    );
    assert!(
        !mkdirs(),
        "what held the pod before still holds: mkdir refused"
    );
    assert!(!touches(&agent_pod, &file), "and touch");
    assert!(touches(&web_pod, &file), "the other pod is untouched");

    // The namespace's PolicyReport sums the refusals by pod and rule.
    let report_of = || {
        let out = plane.kubectl(&[
            "get",
            "policyreport",
            "-n",
            "team",
            &format!("guard-{NODE}"),
            "-o",
            "json",
        ]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    let sums = |report: &serde_json::Value| {
        report["results"].as_array().is_some_and(|results| {
            results.iter().any(|r| {
                r["resources"][0]["name"] == "agent"
                    && r["rule"] == "team/agents:1"
                    && r["result"] == "fail"
                    && r["properties"]["count"]
                        .as_str()
                        .is_some_and(|c| c.parse::<u64>().unwrap_or(0) >= 1)
            })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let report = report_of();
        if sums(&report) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no PolicyReport sums the pod's refusals: {report}\n{}",
            node.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The records name the pod.
    let records = text(&node.guard(&["audit", "--json"]).stdout);
    assert!(
        records.lines().any(|l| l.contains("\"touch\"")
            && l.contains("\"namespace\":\"team\"")
            && l.contains("\"pod\":\"agent\"")
            && l.contains("\"container\":\"c1\"")
            && l.contains(&format!("\"node\":\"{NODE}\""))),
        "the refusal's record names the pod: {records}"
    );
}

#[test]
fn a_killed_agent_leaves_every_pod_held_and_a_pod_made_meanwhile_is_held_closed() {
    if !can_run() || !k8s::can_run() {
        return;
    }
    let plane = cluster();
    let parent = PodsParent::new();
    let agent_uid = create_pod(&plane, "agent", "agent");
    let agent_pod = parent.container(&agent_uid);
    apply_policy(&plane, "agent", FORBID_TOUCH_AND_A_HOST);
    let mut node = agent(&plane, &parent.kubepods(), NODE);
    wait_for(
        "the agent pod is held by its policy",
        Duration::from_secs(30),
        || pod_scopes(&node).contains(&("agent".into(), vec!["team/agents".into()])),
    );
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("touched");
    assert!(!touches(&agent_pod, &file));

    node.stop_with(libc::SIGKILL);
    assert!(
        !touches(&agent_pod, &file),
        "with the agent gone the pod is still held"
    );
    assert!(connect_refused(&agent_pod));

    // A pod made while the agent is down: nothing runs in it until an agent has seen it.
    let late_uid = create_pod(&plane, "late", "web");
    let late_pod = parent.container(&late_uid);
    let ran = TestDaemon::in_cgroup(&late_pod, Path::new("/usr/bin/true"), &[]);
    assert!(
        !ran.status.success(),
        "the unready default refuses its exec"
    );
    assert!(!touches(&late_pod, &file));

    node.spawn();
    // From its start on, the pods are held without a gap.
    assert!(
        !touches(&agent_pod, &file),
        "held while the new agent starts"
    );
    wait_for(
        "the new agent takes over the late pod",
        Duration::from_secs(30),
        || pod_scopes(&node).contains(&("late".into(), vec![])),
    );
    wait_for(
        "the late pod, not selected, runs once seen",
        Duration::from_secs(5),
        || {
            TestDaemon::in_cgroup(&late_pod, Path::new("/usr/bin/true"), &[])
                .status
                .success()
        },
    );
    assert!(touches(&late_pod, &file));
    assert!(
        !touches(&agent_pod, &file),
        "the selected pod is still held"
    );
    assert!(connect_refused(&agent_pod));
}

/// A GuardApproval answering `ask` with `decision`, as YAML.
fn approval(ask: &str, decision: &str) -> String {
    format!(
        "apiVersion: guard.dev/v1alpha1\nkind: GuardApproval\nmetadata:\n  generateName: {ask}-\n  \
         namespace: team\nspec:\n  ask: {ask}\n  decision: {decision}\n"
    )
}

#[test]
fn a_prompt_in_a_pod_becomes_an_event_and_an_ask_that_only_whom_rbac_allows_answers() {
    if !can_run() || !k8s::can_run() {
        return;
    }
    let plane = cluster();
    // alice may answer team's asks; bob may not.
    plane.kubectl_ok(
        &[
            "create",
            "rolebinding",
            "alice-answers",
            "-n",
            "team",
            "--clusterrole=guard-approver",
            "--user=alice",
        ],
        None,
    );
    let parent = PodsParent::new();
    let agent_uid = create_pod(&plane, "agent", "agent");
    let agent_pod = parent.container(&agent_uid);
    apply_policy(
        &plane,
        "agent",
        "prefix_rule(pattern=[\"mkdir\"], decision=\"prompt\", justification=\"ask first\")\n",
    );
    let node = agent(&plane, &parent.kubepods(), NODE);
    wait_for(
        "the agent pod is held by its policy",
        Duration::from_secs(30),
        || pod_scopes(&node).contains(&("agent".into(), vec!["team/agents".into()])),
    );
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("made");
    let mkdirs = || {
        let _ = std::fs::remove_dir(&target);
        TestDaemon::in_cgroup(
            &agent_pod,
            Path::new("/usr/bin/mkdir"),
            &[target.to_str().unwrap()],
        )
        .status
        .success()
    };
    assert!(!mkdirs(), "the prompted mkdir does not run unanswered");

    let mut ask = String::new();
    wait_for(
        "a GuardAsk in the pod's namespace",
        Duration::from_secs(30),
        || {
            let asks = plane.get_json(&["guardasks", "-n", "team"]);
            let found = asks["items"].as_array().unwrap().iter().find(|a| {
                a["spec"]["pod"] == "agent"
                    && a["spec"]["request"]
                        .as_str()
                        .unwrap_or("")
                        .contains("mkdir")
                    && a["status"]["state"] == "pending"
            });
            if let Some(found) = found {
                ask = found["metadata"]["name"].as_str().unwrap().to_string();
            }
            found.is_some()
        },
    );
    assert!(ask.starts_with(&format!("{NODE}-")), "{ask}");
    let listed = plane.kubectl_ok(&["get", "guardasks", "-n", "team"], None);
    assert!(
        listed.contains(&ask) && listed.contains("exec mkdir"),
        "kubectl get guardasks: {listed}"
    );
    wait_for(
        "an Event on the pod says how to answer",
        Duration::from_secs(30),
        || {
            let events = plane.get_json(&["events.events.k8s.io", "-n", "team"]);
            events["items"].as_array().unwrap().iter().any(|e| {
                e["reason"] == "GuardAsk"
                    && e["regarding"]["name"] == "agent"
                    && e["note"]
                        .as_str()
                        .unwrap_or("")
                        .contains("kind: GuardApproval")
            })
        },
    );

    // bob may not answer: Kubernetes refuses his GuardApproval.
    let bob = plane.kubectl_with(
        &["--token=guard-test-bob-token"],
        &["create", "-f", "-"],
        Some(&approval(&ask, "once")),
    );
    assert!(!bob.status.success(), "bob's answer is refused");
    assert!(
        text(&bob.stderr).contains("forbidden"),
        "by RBAC: {}",
        text(&bob.stderr)
    );
    assert!(!mkdirs(), "and nothing was approved");

    // alice may.
    let alice = plane.kubectl_with(
        &["--token=guard-test-alice-token"],
        &["create", "-f", "-"],
        Some(&approval(&ask, "once")),
    );
    assert!(
        alice.status.success(),
        "alice answers: {}",
        text(&alice.stderr)
    );
    wait_for(
        "the agent carries alice's answer out",
        Duration::from_secs(30),
        || {
            let answers = plane.get_json(&["guardapprovals", "-n", "team"]);
            answers["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["spec"]["ask"] == ask.as_str() && a["status"]["applied"] == true)
        },
    );
    assert!(mkdirs(), "the approved mkdir runs when tried again");
    let state = plane.get_json(&["guardask", "-n", "team", &ask]);
    assert_eq!(state["status"]["state"], "approved", "{state}");
}

/// A pod for the real kubelet: `hostNetwork`, the local busybox image, `command` as its
/// container's whole life, restarted only on failure.
fn real_pod(name: &str, app: &str, node: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: team\n  labels:\n    \
         app: {app}\nspec:\n  nodeName: {node}\n  hostNetwork: true\n  restartPolicy: OnFailure\n  \
         automountServiceAccountToken: false\n  enableServiceLinks: false\n  containers:\n  \
         - name: work\n    image: {image}\n    imagePullPolicy: Never\n    \
         command: [\"/bin/touch\", \"/tmp/touched\"]\n",
        image = guard_tests::kubelet::IMAGE
    )
}

/// The exit codes pod `name`'s container ended with so far (its last state and its state).
fn exit_codes(plane: &ControlPlane, name: &str) -> Vec<i64> {
    let pod = plane.get_json(&["pod", "-n", "team", name]);
    let status = &pod["status"]["containerStatuses"][0];
    ["lastState", "state"]
        .iter()
        .filter_map(|s| status[s]["terminated"]["exitCode"].as_i64())
        .collect()
}

#[test]
fn a_real_pod_of_a_real_kubelet_is_held_by_its_policy_and_a_pod_without_the_label_is_not() {
    if !can_run() || !k8s::can_run() || !guard_tests::kubelet::can_run() {
        return;
    }
    let plane = cluster();
    let kubelet = guard_tests::kubelet::Node::start(&plane, "guard-test-kubelet-node");
    apply_policy(&plane, "agent", FORBID_TOUCH_AND_A_HOST);
    let node = agent(&plane, &kubelet.pods_cgroup, &kubelet.name);
    wait_for(
        "the agent's first picture of the node",
        Duration::from_secs(60),
        || node.log().contains("pods are in force"),
    );
    let pods = format!(
        "{}---\n{}",
        real_pod("agent", "agent", &kubelet.name),
        real_pod("web", "web", &kubelet.name)
    );
    plane.kubectl_ok(&["apply", "-f", "-"], Some(&pods));
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(
            "the web pod's touch runs (exit 0)",
            Duration::from_secs(120),
            || exit_codes(&plane, "web").contains(&0),
        );
        wait_for(
            "the agent pod's touch is killed (exit 137)",
            Duration::from_secs(120),
            || exit_codes(&plane, "agent").contains(&137),
        );
    }));
    assert!(
        waited.is_ok(),
        "kubelet:\n{}\nagent:\n{}",
        kubelet.log(),
        node.log()
    );
    assert!(
        !exit_codes(&plane, "agent").contains(&0),
        "the agent pod's touch never ran"
    );
    let records = text(&node.guard(&["audit", "--json"]).stdout);
    assert!(
        records.lines().any(|l| l.contains("\"touch\"")
            && l.contains("team/agents")
            && l.contains("\"pod\":\"agent\"")),
        "the refusal names the pod and the policy: {records}"
    );
}
