//! A real Kubernetes node for the `guard node` tests: Debian's containerd and runc, and the
//! kubelet v1.20.2 built beside kube-apiserver ([`crate::k8s::CACHE`]), joined to a
//! [`ControlPlane`] on loopback. Its pods run `hostNetwork` (no CNI) from two local images made
//! here from busybox-static's one binary (nothing is pulled: `imagePullPolicy: Never`), below a
//! cgroup root of the test's own (`cgroupRoot`), so the agent holds exactly these pods.
//!
//! The kubelet changes the host; Drop undoes each change: the sysctls it sets
//! (`vm.overcommit_memory`, `kernel.panic`, `kernel.panic_on_oops`), the folders it makes
//! outside its root (`/var/lib/kubelet`, `/var/log/pods`, `/var/log/containers`,
//! `/run/containerd`), its mounts, its cgroups in every hierarchy, and the runtime's processes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::k8s::{CACHE, ControlPlane};
use crate::kernel::skip;

/// The pods' image: `/bin/busybox` and its applets as links.
pub const IMAGE: &str = "docker.io/library/guard-test-busybox:local";
/// The sandbox image: busybox sleeping.
const PAUSE_IMAGE: &str = "docker.io/library/guard-test-pause:local";
const SYSCTLS: [&str; 3] = [
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
];
const HOST_FOLDERS: [&str; 4] = [
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/run/containerd",
];
/// How long the node may take to register (about 20 s here; a bound, not a measure).
const REGISTERED_WITHIN: Duration = Duration::from_secs(120);

/// Whether a node can run here: containerd, runc, busybox-static and the kubelet. `false` after
/// saying why (a failure under `CI=true`).
pub fn can_run() -> bool {
    let kubelet = Path::new(CACHE).join("bin/kubelet");
    if !kubelet.is_file() {
        skip(&format!(
            "no kubelet at {} (cargo xtask setup builds it)",
            kubelet.display()
        ));
        return false;
    }
    crate::k8s::tools_or_skip(&["containerd", "ctr", "runc", "/bin/busybox"])
}

pub struct Node {
    pub name: String,
    /// The pods' parent cgroup below the cgroup2 mount (`<cgroupRoot>/kubepods`).
    pub pods_cgroup: PathBuf,
    dir: tempfile::TempDir,
    cgroup_root: String,
    containerd: Child,
    kubelet: Child,
    sysctls: Vec<(String, String)>,
    made_folders: Vec<&'static str>,
}

fn run(command: &mut Command) {
    let out = command.output().expect("starting a command");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The cgroup hierarchies mounted here (v1 controllers and the unified one).
fn hierarchies() -> Vec<PathBuf> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        for entry in entries.flatten() {
            if entry.path().join("cgroup.procs").exists() {
                found.push(entry.path());
            }
        }
    }
    if Path::new("/sys/fs/cgroup/cgroup.procs").exists() {
        found.push(PathBuf::from("/sys/fs/cgroup"));
    }
    found
}

/// Writes an OCI archive of one layer (`root`) named `name` with `entrypoint`.
fn oci_archive(root: &Path, name: &str, entrypoint: serde_json::Value, out: &Path) {
    let work = out.with_extension("layout");
    let blobs = work.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| -> (String, usize) {
        let tmp = blobs.join("incoming");
        std::fs::write(&tmp, bytes).unwrap();
        let sum = Command::new("sha256sum").arg(&tmp).output().unwrap().stdout;
        let digest = String::from_utf8_lossy(&sum)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        std::fs::rename(&tmp, blobs.join(&digest)).unwrap();
        (digest, bytes.len())
    };
    let layer = Command::new("tar")
        .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
        .arg(root)
        .args(["-cf", "-", "."])
        .output()
        .unwrap()
        .stdout;
    let (layer, layer_size) = put(&layer);
    let config = json!({"architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer}")]}});
    let (config, config_size) = put(config.to_string().as_bytes());
    let manifest = json!({"schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{config}"), "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": format!("sha256:{layer}"), "size": layer_size}]});
    let (manifest, manifest_size) = put(manifest.to_string().as_bytes());
    let index = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": format!("sha256:{manifest}"), "size": manifest_size,
        "annotations": {"io.containerd.image.name": name}}]});
    std::fs::write(work.join("index.json"), index.to_string()).unwrap();
    std::fs::write(work.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    run(Command::new("tar")
        .arg("-C")
        .arg(&work)
        .arg("-cf")
        .arg(out)
        .args(["oci-layout", "index.json", "blobs"]));
}

impl Node {
    /// Starts containerd and a kubelet registered as `name` with `plane`, and waits until its
    /// Node object exists.
    pub fn start(plane: &ControlPlane, name: &str) -> Node {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let d = dir.path().to_path_buf();
        let sysctls = SYSCTLS
            .iter()
            .map(|k| {
                let value = std::fs::read_to_string(Path::new("/proc/sys").join(k)).unwrap();
                (k.to_string(), value.trim().to_string())
            })
            .collect();
        let made_folders = HOST_FOLDERS
            .iter()
            .copied()
            .filter(|f| !Path::new(f).exists())
            .collect();
        let cgroup_root = format!("guard-test-kubelet-{}", std::process::id());
        for hierarchy in hierarchies() {
            std::fs::create_dir_all(hierarchy.join(&cgroup_root)).unwrap();
        }
        // The images.
        let root = d.join("image-root");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
        for applet in ["sh", "sleep", "touch", "echo", "nc", "cat", "true"] {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
        }
        oci_archive(
            &root,
            IMAGE,
            serde_json::Value::Null,
            &d.join("busybox.tar"),
        );
        oci_archive(
            &root,
            PAUSE_IMAGE,
            json!(["/bin/busybox", "sleep", "2147483647"]),
            &d.join("pause.tar"),
        );
        // containerd with a root, state and socket of its own.
        let socket = d.join("containerd.sock");
        std::fs::write(
            d.join("containerd.toml"),
            format!(
                "version = 2\nroot = {root:?}\nstate = {state:?}\n[grpc]\n  address = {socket:?}\n\
                 [ttrpc]\n  address = {ttrpc:?}\n\
                 [plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = {PAUSE_IMAGE:?}\n  \
                 restrict_oom_score_adj = true\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  \
                 runtime_type = \"io.containerd.runc.v2\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = {cni:?}\n  conf_dir = {cni:?}\n",
                root = d.join("containerd-root"),
                state = d.join("containerd-state"),
                ttrpc = d.join("containerd.ttrpc"),
                cni = d.join("cni"),
            ),
        )
        .unwrap();
        let containerd = Command::new("containerd")
            .arg("--config")
            .arg(d.join("containerd.toml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("containerd.log")).unwrap())
            .spawn()
            .expect("starting containerd");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "containerd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        for archive in ["busybox.tar", "pause.tar"] {
            run(Command::new("ctr")
                .arg("--address")
                .arg(&socket)
                .args(["-n", "k8s.io", "images", "import"])
                .arg(d.join(archive)));
        }
        // The kubelet: cgroupfs, no swap check, no iptables, loopback only.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::fs::write(
            d.join("kubelet.yaml"),
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 cgroupDriver: cgroupfs\ncgroupRoot: /{cgroup_root}\nfailSwapOn: false\n\
                 makeIPTablesUtilChains: false\nreadOnlyPort: 0\naddress: 127.0.0.1\nport: {port}\n\
                 healthzPort: 0\nauthentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}\n\
                 authorization: {{mode: AlwaysAllow}}\nenforceNodeAllocatable: []\nevictionHard: {{}}\n\
                 volumePluginDir: {plugins:?}\n",
                plugins = d.join("volume-plugins"),
            ),
        )
        .unwrap();
        let kubelet = Command::new(Path::new(CACHE).join("bin/kubelet"))
            .arg(format!("--kubeconfig={}", plane.kubeconfig.display()))
            .arg(format!("--config={}", d.join("kubelet.yaml").display()))
            .arg("--container-runtime=remote")
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                socket.display()
            ))
            .arg(format!("--root-dir={}", d.join("kubelet").display()))
            .arg(format!("--cert-dir={}", d.join("kubelet-pki").display()))
            .arg(format!("--hostname-override={name}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("kubelet.log")).unwrap())
            .spawn()
            .expect("starting the kubelet");
        let node = Node {
            name: name.to_string(),
            pods_cgroup: Path::new(&cgroup_root).join("kubepods"),
            dir,
            cgroup_root,
            containerd,
            kubelet,
            sysctls,
            made_folders,
        };
        let deadline = Instant::now() + REGISTERED_WITHIN;
        while !plane.kubectl(&["get", "node", name]).status.success() {
            assert!(
                Instant::now() < deadline,
                "the kubelet did not register within {REGISTERED_WITHIN:?}:\n{}",
                node.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        node
    }

    /// The kubelet's log (its last lines).
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("kubelet.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// The mount points below `dir`, deepest first.
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(PathBuf::from)
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.kubelet.kill();
        let _ = self.kubelet.wait();
        // The pods' processes, then the runtime's shims (in the host's root cgroup).
        let unified = guard::kernel::scope::cgroup2_root()
            .map(|r| r.join(&self.cgroup_root))
            .ok();
        if let Some(unified) = &unified {
            let _ = std::fs::write(unified.join("cgroup.kill"), "1");
        }
        let socket = self.dir.path().join("containerd.sock");
        let _ = Command::new("pkill")
            .args([
                "-9",
                "-f",
                &format!("containerd-shim-runc-v2 .*{}", socket.display()),
            ])
            .status();
        let _ = self.containerd.kill();
        let _ = self.containerd.wait();
        for mount in mounts_below(self.dir.path()) {
            if let Ok(target) = std::ffi::CString::new(mount.as_os_str().as_encoded_bytes()) {
                // SAFETY: a NUL-terminated path that outlives the call.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
        }
        for hierarchy in hierarchies() {
            crate::k8s::remove_cgroup_tree(&hierarchy.join(&self.cgroup_root));
        }
        for (key, value) in &self.sysctls {
            let _ = std::fs::write(Path::new("/proc/sys").join(key), value);
        }
        for folder in &self.made_folders {
            let _ = std::fs::remove_dir_all(folder);
        }
        // The pods' logs the kubelet wrote outside its root, when those folders were there.
        for folder in ["/var/log/pods", "/var/log/containers"] {
            if self.made_folders.contains(&folder) {
                continue;
            }
            for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.contains("guard-test-") {
                    let _ = std::fs::remove_dir_all(entry.path());
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
}
