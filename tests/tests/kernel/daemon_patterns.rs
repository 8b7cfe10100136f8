//! `[[scope.patterns]]`: a container that podman starts after the daemon, from a local image (no
//! registry), lands in a cgroup the pattern matches (`libpod_parent/libpod-<id>` with podman's
//! cgroupfs manager here) and holds the pattern's rules from its first exec; a cgroup in the same
//! folder that the pattern does not match does not. The container has no network (only its own
//! loopback), so no traffic leaves it.

use std::path::{Path, PathBuf};
use std::process::Command;

use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run, text};
use guard_tests::kernel::skip;

/// The image the containers run: busybox-static's one binary and its applets' links, imported.
const IMAGE: &str = "localhost/guard-pattern-test:latest";
/// The folder podman (cgroupfs manager) makes its containers' cgroups in, below the cgroup2
/// mount, and the pattern that matches them.
const PODMAN_FOLDER: &str = "libpod_parent";
const PATTERN: &str = "libpod_parent/libpod-*";

/// `podman` with what these machines need: runc (crun refuses the hybrid cgroup layout), the
/// cgroupfs manager (no systemd), and limits root may set without CAP_SYS_RESOURCE.
fn podman() -> Command {
    let mut command = Command::new("podman");
    command.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
    command
}

/// The image, imported once from /bin/busybox (busybox-static); `false` after saying why when
/// podman or busybox-static is missing (`cargo xtask setup` installs both).
fn image_or_skip() -> bool {
    let busybox = Path::new("/bin/busybox");
    if Command::new("podman").arg("--version").output().is_err() || !busybox.exists() {
        skip("podman or busybox-static is not installed (cargo xtask setup installs them)");
        return false;
    }
    let exists = podman()
        .args(["image", "exists", IMAGE])
        .status()
        .is_ok_and(|s| s.success());
    if exists {
        return true;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rootfs");
    for folder in ["bin", "proc", "sys", "dev", "etc", "tmp"] {
        std::fs::create_dir_all(root.join(folder)).unwrap();
    }
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    for applet in ["sh", "ls", "echo", "cat", "nc", "true"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    let tar = dir.path().join("rootfs.tar");
    let packed = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(packed.success(), "tar of the image's root");
    let out = podman()
        .arg("import")
        .arg(&tar)
        .arg(IMAGE)
        .output()
        .unwrap();
    // Another test process may have imported it meanwhile.
    assert!(
        out.status.success()
            || podman()
                .args(["image", "exists", IMAGE])
                .status()
                .is_ok_and(|s| s.success()),
        "podman import: {}",
        text(&out.stderr)
    );
    true
}

/// Runs `argv` in a fresh container with no network (podman's runtime execs it: busybox's
/// shell runs its applets in its own process, with no exec to decide): its exit code and
/// output.
fn in_container(argv: &[&str]) -> (i32, String) {
    let out = podman()
        .args([
            "run",
            "--rm",
            "--network=none",
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=32768:32768",
            IMAGE,
        ])
        .args(argv)
        .output()
        .expect("podman run");
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

/// A cgroup the test made in podman's folder, removed when the test ends, pass or fail (its one
/// process has exited by then).
struct Sibling(PathBuf);

impl Drop for Sibling {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_container_started_later_in_a_configured_pattern_holds_its_rules_and_a_sibling_does_not() {
    if !can_run() || !image_or_skip() {
        return;
    }
    let rules_dir = tempfile::tempdir().unwrap();
    let rules = rules_dir.path().join("containers.rules");
    std::fs::write(
        &rules,
        "prefix_rule(pattern=[\"ls\"], decision=\"forbidden\", justification=\"not in containers\")\n\
         address_rule(addresses=[\"127.77.46.1\"], decision=\"forbidden\")\n",
    )
    .unwrap();
    // A cgroup in podman's folder that the pattern does not match, made before the daemon.
    let folder = guard::kernel::scope::cgroup2_root()
        .unwrap()
        .join(PODMAN_FOLDER);
    std::fs::create_dir_all(&folder).unwrap();
    let sibling = Sibling(folder.join(format!("guard-test-other-{}", std::process::id())));
    std::fs::create_dir_all(&sibling.0).unwrap();
    let daemon = TestDaemon::start(&DaemonSetup {
        extra_config: format!(
            "[[scope.patterns]]\ncgroup = {PATTERN:?}\nrules = [{:?}]\n",
            rules.display().to_string()
        ),
        ..Default::default()
    });

    let (_, out) = in_container(&["cat", "/proc/self/cgroup"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("0::/libpod_parent/libpod-")),
        "podman put the container where the pattern looks: {out}"
    );
    let (code, out) = in_container(&["ls", "/"]);
    assert_ne!(code, 0, "the container's ls is refused: {out}");
    assert!(!out.contains("proc"), "ls listed nothing: {out}");
    let (code, out) = in_container(&["echo", "ran"]);
    assert_eq!((code, out.trim()), (0, "ran"), "what the rules allow runs");
    let (_, out) = in_container(&[
        "sh",
        "-c",
        "nc 127.77.46.1 9 </dev/null; nc 127.77.46.2 9 </dev/null",
    ]);
    let refused = |line: &str| {
        out.lines()
            .any(|l| l.contains(line) && l.contains("Operation not permitted"))
    };
    assert!(
        refused("127.77.46.1"),
        "the forbidden address: EPERM: {out}"
    );
    assert!(
        out.contains("127.77.46.2") && !refused("127.77.46.2"),
        "another address is only refused by the empty loopback: {out}"
    );
    let log = daemon.guard(&["audit", "--json"]);
    let records = text(&log.stdout);
    assert!(
        records
            .lines()
            .any(|l| l.contains("\"ls\"") && l.contains("containers.rules")),
        "the refusal is audited with the pattern's rule: {records}"
    );

    // The sibling, sorted at the daemon's start, is exempt: its ls runs.
    let ran = TestDaemon::in_cgroup(&sibling.0, Path::new("/bin/busybox"), &["ls", "/"]);
    assert!(
        ran.status.success(),
        "a cgroup the pattern does not match runs ls: {}",
        text(&ran.stderr)
    );
    let status = daemon.json(&["status", "--json"]);
    assert!(
        status["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["kind"]["kind"] == "pattern"
                && s["overlay"][0] == rules.display().to_string()),
        "status lists the pattern's folder with its rules: {status}"
    );
    drop(daemon);
    // After the daemon, containers run ls again (nothing is left attached).
    let (code, out) = in_container(&["ls", "/"]);
    assert_eq!(code, 0, "{out}");
}
