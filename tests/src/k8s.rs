//! A real Kubernetes control plane on loopback for the `guard node` tests: Debian's etcd and
//! kube-apiserver v1.20.2, built once per machine from Debian's source into [`CACHE`] (`cargo
//! xtask setup`'s Kubernetes items; ../shared/notes/k8s-control-plane.md says how), with their
//! own data folder, certificates (openssl), tokens and ports. `kubectl` talks to it through a
//! kubeconfig of its own. Drop stops both and removes everything.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::kernel::skip;

/// Where kube-apiserver and kubelet are built once per machine (xtask's `KUBERNETES_CACHE`).
pub const CACHE: &str = "/var/cache/guard-tests/kubernetes-v1.20.2";

/// How long the API server may take to be ready (about 5 s here; a bound, not a measure).
const READY_WITHIN: Duration = Duration::from_secs(90);

/// The tokens the API server knows (`--token-auth-file`): the admin, and two people for the
/// RBAC tests.
pub const ADMIN_TOKEN: &str = "guard-test-admin-token";

pub struct ControlPlane {
    pub dir: tempfile::TempDir,
    /// A kubeconfig that reaches the API server as the admin.
    pub kubeconfig: PathBuf,
    pub server: String,
    etcd: Child,
    apiserver: Child,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn run(command: &mut Command) -> Output {
    let output = command.output().expect("starting a command");
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Whether the tier can run here: root, etcd, kubectl, openssl and the built binaries. `false`
/// after saying why (a failure under `CI=true`).
pub fn can_run() -> bool {
    let bin = Path::new(CACHE).join("bin/kube-apiserver");
    if !bin.is_file() {
        skip(&format!(
            "no kube-apiserver at {} (cargo xtask setup builds it)",
            bin.display()
        ));
        return false;
    }
    tools_or_skip(&["etcd", "kubectl", "openssl"])
}

/// Whether every program of `tools` is here (a name on `PATH` or a path); `false` after
/// saying which is not (a failure under `CI=true`).
pub fn tools_or_skip(tools: &[&str]) -> bool {
    for tool in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            skip(&format!("no {tool} (cargo xtask setup installs it)"));
            return false;
        }
    }
    true
}

/// Removes the cgroup `top` and everything below it, deepest first, retrying (a bound of 100
/// rounds, 2 s) while the kernel still counts exited processes in them.
pub fn remove_cgroup_tree(top: &Path) {
    for _ in 0..100 {
        let mut dirs = Vec::new();
        let mut todo = vec![top.to_path_buf()];
        while let Some(dir) = todo.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    todo.push(entry.path());
                }
            }
            dirs.push(dir);
        }
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in &dirs {
            let _ = std::fs::remove_dir(dir);
        }
        if !top.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl ControlPlane {
    /// Starts etcd and the API server and waits until it is ready.
    pub fn start() -> ControlPlane {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let d = dir.path();
        let (client, peer, secure) = (free_port(), free_port(), free_port());
        let etcd = Command::new("etcd")
            .args([
                "--name=default",
                &format!("--data-dir={}", d.join("etcd").display()),
                &format!("--listen-client-urls=http://127.0.0.1:{client}"),
                &format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                &format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                &format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                &format!("--initial-cluster=default=http://127.0.0.1:{peer}"),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("etcd.log")).unwrap())
            .spawn()
            .expect("starting etcd");
        // A CA, a serving certificate for 127.0.0.1, and the service accounts' key.
        let openssl = |args: &[&str]| run(Command::new("openssl").args(args).current_dir(d));
        openssl(&["genrsa", "-out", "ca.key", "2048"]);
        openssl(&[
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-key",
            "ca.key",
            "-subj",
            "/CN=guard-test-ca",
            "-days",
            "2",
            "-out",
            "ca.crt",
        ]);
        openssl(&["genrsa", "-out", "server.key", "2048"]);
        openssl(&[
            "req",
            "-new",
            "-key",
            "server.key",
            "-subj",
            "/CN=kube-apiserver",
            "-out",
            "server.csr",
        ]);
        std::fs::write(
            d.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ]);
        openssl(&["genrsa", "-out", "sa.key", "2048"]);
        std::fs::write(
            d.join("tokens.csv"),
            format!(
                "{ADMIN_TOKEN},admin,admin,system:masters\n\
                 guard-test-alice-token,alice,alice\n\
                 guard-test-bob-token,bob,bob\n"
            ),
        )
        .unwrap();
        let p = |name: &str| d.join(name).display().to_string();
        let apiserver = Command::new(Path::new(CACHE).join("bin/kube-apiserver"))
            .args([
                "--bind-address=127.0.0.1".to_string(),
                "--advertise-address=127.0.0.1".to_string(),
                format!("--secure-port={secure}"),
                "--insecure-port=0".to_string(),
                format!("--etcd-servers=http://127.0.0.1:{client}"),
                format!("--client-ca-file={}", p("ca.crt")),
                format!("--tls-cert-file={}", p("server.crt")),
                format!("--tls-private-key-file={}", p("server.key")),
                format!("--token-auth-file={}", p("tokens.csv")),
                "--authorization-mode=Node,RBAC".to_string(),
                "--service-account-issuer=https://kubernetes.default.svc".to_string(),
                format!("--service-account-key-file={}", p("sa.key")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                "--api-audiences=https://kubernetes.default.svc".to_string(),
                "--service-cluster-ip-range=10.96.0.0/24".to_string(),
                "--allow-privileged=true".to_string(),
                // Pods are made here without a controller-manager to make their namespace's
                // service account.
                "--disable-admission-plugins=ServiceAccount".to_string(),
                format!("--cert-dir={}", p("certs")),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("apiserver.log")).unwrap())
            .spawn()
            .expect("starting kube-apiserver");
        let server = format!("https://127.0.0.1:{secure}");
        let kubeconfig = d.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    \
                 server: {server}\n    certificate-authority: {}\nusers:\n- name: admin\n  \
                 user:\n    token: {ADMIN_TOKEN}\ncontexts:\n- name: test\n  context:\n    \
                 cluster: test\n    user: admin\ncurrent-context: test\n",
                p("ca.crt")
            ),
        )
        .unwrap();
        let plane = ControlPlane {
            dir,
            kubeconfig,
            server,
            etcd,
            apiserver,
        };
        plane.wait_ready();
        plane
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let out = self.kubectl(&["get", "--raw", "/readyz"]);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready within {READY_WITHIN:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The API server's log (its last lines).
    pub fn log(&self) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("apiserver.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `kubectl ARGS` as the admin.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(&[], args, None)
    }

    /// `kubectl ARGS` as the admin, `stdin` fed to it; panics unless it succeeds.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_with(&[], args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl` with extra flags before ARGS (`--token=...` to act as another person).
    pub fn kubectl_with(&self, flags: &[&str], args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(flags)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting kubectl");
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        child.wait_with_output().expect("waiting for kubectl")
    }

    /// `kubectl get ARGS -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&all, None)).expect("kubectl's JSON")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for child in [&mut self.apiserver, &mut self.etcd] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
