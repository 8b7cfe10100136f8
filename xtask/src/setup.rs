//! `cargo xtask setup`: make sure the machine has what building and testing guard needs.
//!
//! Each [`Item`] says how to tell it is there and how to get it. Setup goes through the list in
//! order and prints one line per item: `ok`, `installed`, or the command to run by hand. It is
//! idempotent and, when everything is there, quick: checking never installs and never touches the
//! network.
//!
//! To add an item (nightly `rust-src`, `bpf-linker`, a bpffs mount...), add it to [`ITEMS`],
//! with a new [`Fix`] variant if none of the existing ones fits.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Result, bail};

use crate::cmd;

/// What an item is needed for; commands check only what they use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Building guard at all (`run`, `bench`, `test`).
    Build,
    /// Only `cargo xtask test` (lints and formatting).
    Test,
    /// `cargo xtask vm-test` (and the VM step of `cargo xtask test`): qemu, cpio and Debian's
    /// package tools, to boot a kernel that allows BPF LSM.
    VmTest,
    /// `cargo xtask bench` (and `setup`): what the tools the benches compare guard with need.
    Bench,
    /// The Kubernetes tier (`guard node` against a real API server): etcd, kubectl, openssl
    /// and kube-apiserver + kubelet built once per machine into [`KUBERNETES_CACHE`].
    Kubernetes,
}

/// Where Kubernetes v1.20.2's kube-apiserver and kubelet are built once per machine, outside
/// any clone (tests/src/k8s.rs names the same folder): Debian ships only their source.
pub const KUBERNETES_CACHE: &str = "/var/cache/guard-tests/kubernetes-v1.20.2";

/// One thing the project needs on the machine.
pub struct Item {
    /// What the line says, e.g. `C compiler (cc)`.
    pub name: &'static str,
    pub need: Need,
    /// Whether it is already there. Must be quick and must not change anything.
    pub present: fn() -> bool,
    pub fix: Fix,
}

/// How to install a missing item.
pub enum Fix {
    /// Debian packages, installed with `apt-get install -y` (after one `apt-get update` per run;
    /// recommended packages too: `gcc` needs `libc6-dev`); needs root.
    Apt(&'static [&'static str]),
    /// Debian packages, installed with `apt-get install -y --no-install-recommends`: for qemu,
    /// whose recommends are a GUI, firmware and block drivers the VM does not use.
    AptNoRecommends(&'static [&'static str]),
    /// A `rustup` command, e.g. `["component", "add", "clippy"]`.
    Rustup(&'static [&'static str]),
    /// `cargo install ARGS` (into `$CARGO_HOME/bin`, which every xtask puts on `PATH`).
    CargoInstall(&'static [&'static str]),
    /// A Debian package whose daemon the tests run privately, never as the machine's service:
    /// installed like [`Fix::AptNoRecommends`] while no service may start ([`ServicesHeld`]),
    /// and `daemon` stopped if it started all the same.
    AptNoServices {
        package: &'static str,
        /// The daemon's process name (`/proc/PID/comm`), e.g. `rsyslogd`.
        daemon: &'static str,
        /// Its systemd unit, e.g. `rsyslog.service`.
        unit: &'static str,
    },
    /// A command run as it is (needs root), e.g. [`SYSTEM_USER_ADD`].
    Run(&'static [&'static str]),
    /// Nothing setup can install; what to do instead.
    Manual(&'static str),
}

/// The user packaging/guard.service runs the daemon as (`User=guard`, `Group=guard`).
pub const SYSTEM_USER: &str = "guard";

/// Makes [`SYSTEM_USER`]: a system user with a group of its own, no home and no login shell.
/// The package's postinst runs the same command.
pub const SYSTEM_USER_ADD: &[&str] = &[
    "useradd",
    "--system",
    "--user-group",
    "--no-create-home",
    "--home-dir",
    "/var/lib/guard",
    "--shell",
    "/usr/sbin/nologin",
    SYSTEM_USER,
];

/// Where the OTLP test receiver's Python packages go (tests/src/otlp.rs: `PYTHON_PACKAGES`).
pub const OTLP_PYTHON_PACKAGES: &str = "/usr/local/lib/guard-tests/python";

/// Everything the project needs, in the order it is checked.
pub const ITEMS: &[Item] = &[
    Item {
        // tree-sitter-bash compiles its C parser in its build script (the `cc` crate, which honours
        // `CC`).
        name: "C compiler (cc)",
        need: Need::Build,
        present: c_compiler_present,
        fix: Fix::Apt(&["gcc"]),
    },
    Item {
        // The BPF object is built with nightly and `-Z build-std=core` (bpfel-unknown-none is a
        // tier-3 target with no prebuilt std), which needs the standard library's sources.
        name: "nightly Rust with rust-src",
        need: Need::Build,
        present: nightly_rust_src_present,
        fix: Fix::Rustup(&["component", "add", "rust-src", "--toolchain", "nightly"]),
    },
    Item {
        // bpf-linker 0.10.4 loads the nightly toolchain's own libLLVM (its `rust-llvm-22`
        // feature), so it needs no system LLVM; it works while that LLVM is 22.
        name: "nightly Rust on LLVM 22 (what bpf-linker 0.10.4 loads)",
        need: Need::Build,
        present: || nightly_llvm_major() == Some(22),
        fix: Fix::Manual(
            "the nightly toolchain is not on LLVM 22: install bpf-linker >= 0.11 built for its LLVM \
             (cargo install bpf-linker --no-default-features --features llvm-NN with LLVM NN's dev \
             package) and update BPF_LINKER_VERSION in xtask/src/setup.rs",
        ),
    },
    Item {
        name: "bpf-linker 0.10.4",
        need: Need::Build,
        present: bpf_linker_present,
        fix: Fix::CargoInstall(&["bpf-linker@0.10.4", "--locked"]),
    },
    Item {
        name: "clippy",
        need: Need::Test,
        present: || cargo_subcommand_works("clippy"),
        fix: Fix::Rustup(&["component", "add", "clippy"]),
    },
    Item {
        name: "rustfmt",
        need: Need::Test,
        present: || cargo_subcommand_works("fmt"),
        fix: Fix::Rustup(&["component", "add", "rustfmt"]),
    },
    Item {
        // The `fuzz` step of `cargo xtask test` builds and runs fuzz/'s targets with it (on
        // nightly, which is already needed). Installed into $CARGO_HOME/bin: about a minute.
        name: "cargo-fuzz 0.13.1",
        need: Need::Test,
        present: cargo_fuzz_present,
        fix: Fix::CargoInstall(&["cargo-fuzz@0.13.1", "--locked"]),
    },
    Item {
        // tests/tests/kernel/audit_syslog.rs sends records to an rsyslogd of its own (tests/src/rsyslog.rs:
        // its own config, ports and folder); only the program is needed, not the system service.
        name: "rsyslog (rsyslogd, for the syslog tests)",
        need: Need::Test,
        present: rsyslogd_present,
        fix: Fix::AptNoServices {
            package: "rsyslog",
            daemon: "rsyslogd",
            unit: "rsyslog.service",
        },
    },
    Item {
        // tests/tests/kernel/daemon_metrics.rs has a private Prometheus server (its own config, port and
        // storage in a temporary folder) scrape the daemon's /metrics; only the program is
        // needed, never the system service.
        name: "prometheus (a private server scrapes the daemon's metrics)",
        need: Need::Test,
        present: prometheus_present,
        fix: Fix::AptNoServices {
            package: "prometheus",
            daemon: "prometheus",
            unit: "prometheus.service",
        },
    },
    Item {
        // The OTLP test receiver (tests/src/otlp_receiver.py) is built on PyPI's
        // opentelemetry-proto; pip installs it below.
        name: "pip (python3-pip)",
        need: Need::Test,
        present: || {
            Command::new("python3")
                .args(["-m", "pip", "--version"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        },
        fix: Fix::AptNoRecommends(&["python3-pip"]),
    },
    Item {
        // tests/tests/kernel/audit_otlp.rs decodes what `[export.otlp]` sends with the official
        // OTLP protobuf definitions (PyPI's opentelemetry-proto and its protobuf), installed once
        // per machine outside the clone into OTLP_PYTHON_PACKAGES (tests/src/otlp.rs names it).
        name: "Python opentelemetry-proto (the OTLP test receiver)",
        need: Need::Test,
        present: || {
            Path::new(OTLP_PYTHON_PACKAGES)
                .join("opentelemetry/proto/collector/logs/v1/logs_service_pb2.py")
                .is_file()
        },
        fix: Fix::Run(&[
            "python3",
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--root-user-action=ignore",
            "--upgrade",
            "--target",
            OTLP_PYTHON_PACKAGES,
            "opentelemetry-proto==1.45.2",
        ]),
    },
    Item {
        // tests/tests/kernel/console.rs drives `guard console`'s page in a real browser:
        // Debian's headless Chromium and its WebDriver.
        name: "chromium and chromium-driver (the console's browser test)",
        need: Need::Test,
        present: || find_on_path("chromium").is_some() && find_on_path("chromedriver").is_some(),
        fix: Fix::AptNoRecommends(&["chromium", "chromium-driver"]),
    },
    Item {
        // The Kubernetes tier's etcd (tests/src/k8s.rs starts one of its own on loopback); the
        // program only, never the system service.
        name: "etcd (the Kubernetes tier's store)",
        need: Need::Kubernetes,
        present: || find_on_path("etcd").is_some(),
        fix: Fix::AptNoServices {
            package: "etcd-server",
            daemon: "etcd",
            unit: "etcd.service",
        },
    },
    Item {
        // The Kubernetes tier's real node: a containerd of its own (tests/src/kubelet.rs: its
        // own config, root, state and socket) under the kubelet; runc and busybox-static come
        // with the container item below.
        name: "containerd (the Kubernetes tier's container runtime)",
        need: Need::Kubernetes,
        present: || find_on_path("containerd").is_some() && find_on_path("ctr").is_some(),
        fix: Fix::AptNoServices {
            package: "containerd",
            daemon: "containerd",
            unit: "containerd.service",
        },
    },
    Item {
        name: "kubectl (the Kubernetes tier applies deploy/kubernetes with it)",
        need: Need::Kubernetes,
        present: || find_on_path("kubectl").is_some(),
        fix: Fix::AptNoRecommends(&["kubernetes-client"]),
    },
    Item {
        name: "openssl (the Kubernetes tier's certificates)",
        need: Need::Kubernetes,
        present: || find_on_path("openssl").is_some(),
        fix: Fix::AptNoRecommends(&["openssl"]),
    },
    Item {
        // No registry ships kube-apiserver: Debian's source package, built with Debian's Go
        // (xtask/k8s/build-kubernetes.sh says how and why), once per machine: ~6 min alone on
        // 2 cores, ~5 GB of disk while it builds.
        name: "kube-apiserver and kubelet v1.20.2 (built from Debian's source)",
        need: Need::Kubernetes,
        present: || {
            ["kube-apiserver", "kubelet"]
                .iter()
                .all(|b| Path::new(KUBERNETES_CACHE).join("bin").join(b).is_file())
        },
        fix: Fix::Run(&[
            "bash",
            concat!(env!("CARGO_MANIFEST_DIR"), "/k8s/build-kubernetes.sh"),
            KUBERNETES_CACHE,
        ]),
    },
    Item {
        // tests/tests/kernel/run_fds.rs starts a tmux server outside a scope and shows that a command
        // inside cannot have it run anything (its socket is on guard's built-in refused list).
        name: "tmux (a server outside the scope, for the unix socket tests)",
        need: Need::Test,
        present: || find_on_path("tmux").is_some(),
        fix: Fix::AptNoRecommends(&["tmux"]),
    },
    Item {
        // tests/tests/kernel/daemon_patterns.rs has podman start a container from a local image
        // (busybox-static's one binary, imported; no registry) in a cgroup a `[[scope.patterns]]`
        // pattern matches. runc, since crun refuses these machines' hybrid cgroup layout.
        name: "podman, runc and busybox-static (a container for the cgroup pattern tests)",
        need: Need::Test,
        present: || {
            ["podman", "runc"]
                .iter()
                .all(|tool| find_on_path(tool).is_some())
                && debian_package_installed("busybox-static")
        },
        fix: Fix::AptNoRecommends(&["podman", "runc", "busybox-static"]),
    },
    Item {
        // tests/tests/kernel/daemon_unit.rs rates packaging/guard.service's hardening offline
        // (`systemd-analyze security --offline=true`); systemd need not be running.
        name: "systemd-analyze (systemd, to rate the unit's hardening)",
        need: Need::Test,
        present: || find_on_path("systemd-analyze").is_some(),
        fix: Fix::AptNoRecommends(&["systemd"]),
    },
    Item {
        // The unit runs the daemon as this user with its capabilities ambient; the tests that
        // start the daemon as the unit does (tests/src/unit.rs) switch to it.
        name: "system user guard (the unit's User=)",
        need: Need::Test,
        present: || user_exists(SYSTEM_USER),
        fix: Fix::Run(SYSTEM_USER_ADD),
    },
    Item {
        // tests/benches/start.rs times Anthropic's sandbox-runtime (`srt`, from npm), which
        // refuses to start without bubblewrap, socat and ripgrep. (The Codex CLI's sandbox uses
        // bubblewrap when there is one and its own copy otherwise.)
        name: "bubblewrap, socat and ripgrep (sandbox-runtime, for the start bench)",
        need: Need::Bench,
        present: || {
            ["bwrap", "socat", "rg"]
                .iter()
                .all(|tool| find_on_path(tool).is_some())
        },
        fix: Fix::AptNoRecommends(&["bubblewrap", "socat", "ripgrep"]),
    },
    Item {
        // The VM's kernel is a Debian package, downloaded (never installed) and unpacked.
        name: "Debian package tools (apt-cache, apt-get, dpkg-deb)",
        need: Need::VmTest,
        present: || {
            ["apt-cache", "apt-get", "dpkg-deb"]
                .iter()
                .all(|tool| find_on_path(tool).is_some())
        },
        fix: Fix::Manual(
            "the VM tests fetch a Debian kernel package: run them on Debian or Ubuntu",
        ),
    },
    Item {
        // Software emulation only (KVM fails on the project's machines): qemu-system-x86_64 -accel
        // tcg. Note: on an image with a newer qemu-utils from backports (10.x), installing
        // bookworm's qemu-system-x86 (7.2) removes it: qemu-utils 10 `Breaks` qemu-system-common
        // (<< 8.0), recommends or not.
        name: "qemu (qemu-system-x86_64)",
        need: Need::VmTest,
        present: || find_on_path("qemu-system-x86_64").is_some(),
        fix: Fix::AptNoRecommends(&["qemu-system-x86"]),
    },
    Item {
        name: "cpio",
        need: Need::VmTest,
        present: || find_on_path("cpio").is_some(),
        fix: Fix::AptNoRecommends(&["cpio"]),
    },
    Item {
        // Strips debug info from the test binaries, which is most of their size.
        name: "objcopy (binutils)",
        need: Need::VmTest,
        present: || find_on_path("objcopy").is_some(),
        fix: Fix::AptNoRecommends(&["binutils"]),
    },
];

/// Where setup prints its lines: stdout for `cargo xtask setup`, stderr when it runs before
/// another task (so `cargo xtask run -- check --json ...` prints only JSON on stdout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    Stdout,
    Stderr,
}

impl Report {
    fn say(self, line: &str) {
        match self {
            Report::Stdout => println!("{line}"),
            Report::Stderr => eprintln!("{line}"),
        }
    }
}

/// State shared by the fixes of one run.
#[derive(Default)]
struct Installer {
    apt_updated: bool,
}

impl Installer {
    fn apply(&mut self, fix: &Fix) -> Result<()> {
        match fix {
            Fix::Apt(packages) => {
                self.apt_update()?;
                cmd::run(apt_get().args(["install", "-y"]).args(*packages))
            }
            Fix::AptNoRecommends(packages) => {
                self.apt_update()?;
                cmd::run(
                    apt_get()
                        .args(["install", "-y", "--no-install-recommends"])
                        .args(*packages),
                )
            }
            Fix::AptNoServices {
                package,
                daemon,
                unit,
            } => {
                self.apt_update()?;
                let running_before = pids_named(daemon);
                let held = ServicesHeld::hold(Path::new(POLICY_RC_D))?;
                let installed = cmd::run(
                    apt_get()
                        .args(["install", "-y", "--no-install-recommends"])
                        .arg(package),
                );
                held.release()?;
                stop_started(daemon, unit, &running_before);
                installed
            }
            Fix::Rustup(args) => cmd::run(Command::new("rustup").args(*args)),
            Fix::CargoInstall(args) => cmd::run(cmd::cargo(["install"]).args(*args)),
            Fix::Run(argv) => cmd::run(Command::new(argv[0]).args(&argv[1..])),
            Fix::Manual(what) => bail!("{what}"),
        }
    }

    /// `apt-get update`, once per run.
    fn apt_update(&mut self) -> Result<()> {
        if !self.apt_updated {
            cmd::run(apt_get().arg("update"))?;
            self.apt_updated = true;
        }
        Ok(())
    }
}

/// `apt-get`, never asking questions.
pub fn apt_get() -> Command {
    let mut command = Command::new("apt-get");
    command.env("DEBIAN_FRONTEND", "noninteractive");
    command
}

impl Fix {
    /// Why this fix cannot be applied here, if it cannot.
    fn unavailable(&self) -> Option<&'static str> {
        match self {
            Fix::Apt(_) | Fix::AptNoRecommends(_) | Fix::AptNoServices { .. }
                if find_on_path("apt-get").is_none() =>
            {
                Some("apt-get is not available")
            }
            Fix::Apt(_) | Fix::AptNoRecommends(_) | Fix::AptNoServices { .. } if !is_root() => {
                Some("installing packages needs root")
            }
            Fix::Rustup(_) if find_on_path("rustup").is_none() => Some("rustup is not available"),
            Fix::Run(_) if !is_root() => Some("it needs root"),
            Fix::Manual(_) => Some("setup cannot install it"),
            _ => None,
        }
    }

    /// The command to run by hand.
    fn manual(&self) -> String {
        match self {
            Fix::Apt(packages) => format!(
                "sudo apt-get update && sudo apt-get install -y {}",
                packages.join(" ")
            ),
            Fix::AptNoRecommends(packages) => format!(
                "sudo apt-get update && sudo apt-get install -y --no-install-recommends {}",
                packages.join(" ")
            ),
            Fix::AptNoServices { package, .. } => format!(
                "sudo apt-get update && sudo apt-get install -y --no-install-recommends {package} \
                 (then stop its service if it started; the tests run their own)"
            ),
            Fix::Rustup(args) => format!("rustup {}", args.join(" ")),
            Fix::CargoInstall(args) => format!("cargo install {}", args.join(" ")),
            Fix::Run(argv) => format!("sudo {}", argv.join(" ")),
            Fix::Manual(what) => what.to_string(),
        }
    }
}

/// Checks (and where possible installs) every item needed for `needs`; an error when something
/// is still missing.
pub fn setup(needs: &[Need], report: Report) -> Result<()> {
    ServicesHeld::remove_leftover(Path::new(POLICY_RC_D));
    let mut installer = Installer::default();
    let mut missing = Vec::new();
    for item in ITEMS.iter().filter(|item| needs.contains(&item.need)) {
        if (item.present)() {
            report.say(&format!("{}: ok", item.name));
            continue;
        }
        if let Some(reason) = item.fix.unavailable() {
            report.say(&format!(
                "{}: missing ({reason}); run: {}",
                item.name,
                item.fix.manual()
            ));
            missing.push(item.name);
            continue;
        }
        report.say(&format!("{}: missing, installing", item.name));
        let result = installer.apply(&item.fix);
        if result.is_ok() && (item.present)() {
            report.say(&format!("{}: installed", item.name));
        } else {
            if let Err(err) = result {
                eprintln!("{}: {err:#}", item.name);
            }
            report.say(&format!(
                "{}: still missing after installing; run: {}",
                item.name,
                item.fix.manual()
            ));
            missing.push(item.name);
        }
    }
    if !missing.is_empty() {
        bail!("setup incomplete, missing: {}", missing.join(", "));
    }
    Ok(())
}

/// Whether Debian package `name` is installed (`dpkg-query`).
fn debian_package_installed(name: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
}

fn c_compiler_present() -> bool {
    let compiler = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let compiler = Path::new(&compiler);
    if compiler.components().count() > 1 {
        is_executable(compiler)
    } else {
        find_on_path(compiler.as_os_str()).is_some()
    }
}

/// `rsyslogd` on `PATH`, or in `/usr/sbin` (which a user's `PATH` may leave out).
fn rsyslogd_present() -> bool {
    find_on_path("rsyslogd").is_some() || is_executable(Path::new("/usr/sbin/rsyslogd"))
}

/// `prometheus` on `PATH`, or in `/usr/bin` (Debian's package puts it there).
fn prometheus_present() -> bool {
    find_on_path("prometheus").is_some() || is_executable(Path::new("/usr/bin/prometheus"))
}

/// Debian's hook for "may this service start now?": invoke-rc.d and deb-systemd-invoke, which
/// package scripts start services with, both ask it, and exit status 101 means no.
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";
/// Marks a policy-rc.d as ours, so that one left behind by an interrupted run is removed by the
/// next run rather than taken for the machine's own (it would keep every service from starting).
const POLICY_RC_D_MARK: &str = "# cargo xtask setup: no service starts during this install";

/// Keeps services from starting while a package installs. Debian's rsyslog postinst starts
/// rsyslog.service where systemd runs (elsewhere, bookworm's package has no init script and
/// starts nothing), and a system syslog daemon (binding /dev/log, writing /var/log) is not ours
/// to start. A policy-rc.d the machine already has (container images often have one that
/// refuses everything) is left as it is: it is not ours to replace or remove, and
/// [`stop_started`] covers one that allows starts.
///
/// Where systemd runs, the package still enables its unit as Debian does on install, so it starts
/// at the next boot (`systemctl disable rsyslog` if that is not wanted).
struct ServicesHeld {
    /// The policy-rc.d we wrote, to remove on release.
    ours: Option<PathBuf>,
}

impl ServicesHeld {
    fn hold(path: &Path) -> Result<ServicesHeld> {
        if path.exists() {
            let ours =
                std::fs::read_to_string(path).is_ok_and(|text| text.contains(POLICY_RC_D_MARK));
            return Ok(ServicesHeld {
                ours: ours.then(|| path.to_path_buf()),
            });
        }
        std::fs::write(path, format!("#!/bin/sh\n{POLICY_RC_D_MARK}\nexit 101\n"))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
        Ok(ServicesHeld {
            ours: Some(path.to_path_buf()),
        })
    }

    fn release(self) -> Result<()> {
        if let Some(path) = self.ours {
            std::fs::remove_file(path)?;
        }
        Ok(())
    }

    /// Removes a policy-rc.d an interrupted run left (one with our mark; any other stays).
    fn remove_leftover(path: &Path) {
        if std::fs::read_to_string(path).is_ok_and(|text| text.contains(POLICY_RC_D_MARK)) {
            match std::fs::remove_file(path) {
                Ok(()) => eprintln!(
                    "setup: removed {} that an interrupted run left",
                    path.display()
                ),
                Err(err) => eprintln!("setup: could not remove {}: {err}", path.display()),
            }
        }
    }
}

/// The processes called `name` (`/proc/PID/comm`).
fn pids_named(name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
        .collect()
}

/// Stops a `daemon` that the install started despite [`ServicesHeld`] (the machine's own
/// policy-rc.d may allow starts): through systemd where it runs, so that it stays stopped, else
/// with SIGTERM. Ones running before the install are left alone.
fn stop_started(daemon: &str, unit: &str, running_before: &[u32]) {
    let started = || -> Vec<u32> {
        pids_named(daemon)
            .into_iter()
            .filter(|pid| !running_before.contains(pid))
            .collect()
    };
    let pids = started();
    if pids.is_empty() {
        return;
    }
    eprintln!("setup: the install started {daemon} (pid {pids:?}); stopping it");
    if Path::new("/run/systemd/system").is_dir()
        && let Err(err) = cmd::run(Command::new("systemctl").args(["stop", unit]))
    {
        eprintln!("setup: {err:#}");
    }
    for pid in started() {
        // SAFETY: no memory is involved; `pid` is a process called `daemon` that just started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    }
}

/// The version bpf-linker must report.
const BPF_LINKER_VERSION: &str = "0.10.4";

fn bpf_linker_present() -> bool {
    Command::new("bpf-linker")
        .arg("--version")
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| {
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains(BPF_LINKER_VERSION)
        })
}

fn nightly_output(args: &[&str]) -> Option<String> {
    let out = Command::new("rustup")
        .args(["run", "nightly"])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn nightly_rust_src_present() -> bool {
    nightly_output(&["rustc", "--print", "sysroot"]).is_some_and(|sysroot| {
        Path::new(&sysroot)
            .join("lib/rustlib/src/rust/library/core/Cargo.toml")
            .is_file()
    })
}

fn nightly_llvm_major() -> Option<u32> {
    let verbose = nightly_output(&["rustc", "-vV"])?;
    let version = verbose
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))?;
    version.split('.').next()?.trim().parse().ok()
}

/// The cargo-fuzz `cargo xtask setup` installs (also in its [`ITEMS`] entry).
const CARGO_FUZZ_VERSION: &str = "0.13.1";

fn cargo_fuzz_present() -> bool {
    cmd::cargo(["fuzz", "--version"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| {
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains(CARGO_FUZZ_VERSION)
        })
}

fn cargo_subcommand_works(subcommand: &str) -> bool {
    cmd::cargo([subcommand, "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The first executable file called `name` in `PATH`.
pub fn find_on_path(name: impl AsRef<OsStr>) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name.as_ref()))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Whether we run as root (effective uid 0), read from `/proc/self/status`.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Whether `name` is a user of this machine (a line of /etc/passwd).
fn user_exists(name: &str) -> bool {
    std::fs::read_to_string("/etc/passwd").is_ok_and(|passwd| {
        passwd
            .lines()
            .any(|line| line.split(':').next() == Some(name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-setup-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn services_are_held_by_a_policy_rc_d_that_goes_away_after() {
        let dir = scratch("hold");
        let path = dir.join("policy-rc.d");
        let held = ServicesHeld::hold(&path).unwrap();
        let status = Command::new(&path).status().unwrap();
        assert_eq!(
            status.code(),
            Some(101),
            "a held install refuses every start"
        );
        held.release().unwrap();
        assert!(!path.exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_machines_own_policy_rc_d_is_left_as_it_is() {
        let dir = scratch("theirs");
        let path = dir.join("policy-rc.d");
        std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
        ServicesHeld::hold(&path).unwrap().release().unwrap();
        ServicesHeld::remove_leftover(&path);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "#!/bin/sh\nexit 0\n"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_leftover_of_ours_is_removed() {
        let dir = scratch("leftover");
        let path = dir.join("policy-rc.d");
        // An interrupted run: held, never released.
        std::mem::forget(ServicesHeld::hold(&path).unwrap());
        assert!(path.exists());
        ServicesHeld::remove_leftover(&path);
        assert!(!path.exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
