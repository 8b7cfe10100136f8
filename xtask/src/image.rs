//! `cargo xtask image`: guard's container image for `deploy/kubernetes`, made from the release
//! binary without pulling anything from a registry: the binary (debug info stripped), the
//! shared libraries `ldd` names, and busybox-static's one binary for the DaemonSet's init
//! container (`sh`, `mount`, `mountpoint`), in one layer of an OCI image layout, archived as
//! `target/dist/guard-image.tar` and tagged `guard:latest`: `ctr -n k8s.io images import` and
//! `podman load` take it as it is.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::cmd;

/// The image's name as the DaemonSet names it.
pub const IMAGE_REF: &str = "guard:latest";

/// Where busybox-static puts its binary.
const BUSYBOX: &str = "/bin/busybox";

/// Builds the image from `binary` (the release build); its archive's path.
pub fn build(binary: &Path) -> Result<PathBuf> {
    let dist = cmd::workspace_root().join("target/dist");
    let work = dist.join("image");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    let root = work.join("root");
    std::fs::create_dir_all(root.join("usr/bin"))?;
    cmd::run(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(binary)
            .arg(root.join("usr/bin/guard")),
    )?;
    for library in shared_libraries(binary)? {
        let to = root.join(library.strip_prefix("/").unwrap_or(&library));
        std::fs::create_dir_all(to.parent().unwrap())?;
        std::fs::copy(&library, &to).with_context(|| format!("copying {}", library.display()))?;
    }
    if !Path::new(BUSYBOX).is_file() {
        bail!("no {BUSYBOX}: `apt-get install busybox-static` (cargo xtask setup does)");
    }
    std::fs::create_dir_all(root.join("bin"))?;
    std::fs::copy(BUSYBOX, root.join("bin/busybox"))?;
    for applet in ["sh", "mount", "mountpoint", "cat", "ls"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))?;
    }
    for dir in [
        "etc/guard",
        "var/lib/guard",
        "var/log/guard",
        "run/guard",
        "sys",
        "proc",
        "tmp",
    ] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n")?;
    std::fs::write(root.join("etc/group"), "root:x:0:\n")?;

    let layout = work.join("layout");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let layer = work.join("layer.tar");
    cmd::run(
        Command::new("tar")
            .args(["--numeric-owner", "--owner=0", "--group=0", "--sort=name"])
            .args(["--mtime=@0", "-C"])
            .arg(&root)
            .args(["-cf"])
            .arg(&layer)
            .arg("."),
    )?;
    let (layer_digest, layer_size) = store(&blobs, &std::fs::read(&layer)?)?;
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": ["/usr/bin/guard"],
            "Env": ["PATH=/usr/bin:/bin"],
            "Labels": {"org.opencontainers.image.title": "guard"},
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
    });
    let (config_digest, config_size) = store(&blobs, config.to_string().as_bytes())?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{config_digest}"), "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": format!("sha256:{layer_digest}"), "size": layer_size}],
    });
    let (manifest_digest, manifest_size) = store(&blobs, manifest.to_string().as_bytes())?;
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest_size,
            "annotations": {
                // podman reads the first, containerd the second.
                "org.opencontainers.image.ref.name": IMAGE_REF,
                "io.containerd.image.name": format!("docker.io/library/{IMAGE_REF}"),
            },
        }],
    });
    std::fs::write(layout.join("index.json"), index.to_string())?;
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    let archive = dist.join("guard-image.tar");
    cmd::run(
        Command::new("tar")
            .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
            .arg(&layout)
            .args(["-cf"])
            .arg(&archive)
            .args(["oci-layout", "index.json", "blobs"]),
    )?;
    std::fs::remove_dir_all(&work)?;
    Ok(archive)
}

/// Writes `bytes` as a blob named by its sha256; (digest, size).
fn store(blobs: &Path, bytes: &[u8]) -> Result<(String, u64)> {
    let tmp = blobs.join("incoming");
    std::fs::write(&tmp, bytes)?;
    let sum = cmd::stdout_of(Command::new("sha256sum").arg(&tmp))?;
    let digest = sum
        .split_whitespace()
        .next()
        .context("sha256sum printed nothing")?
        .to_string();
    std::fs::rename(&tmp, blobs.join(&digest))?;
    Ok((digest, bytes.len() as u64))
}

/// The shared libraries `binary` loads, as `ldd` resolves them (the loader included).
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let listed = cmd::stdout_of(Command::new("ldd").arg(binary))?;
    let mut found = Vec::new();
    for line in listed.lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` or `/lib64/ld-linux-x86-64.so.2 (0x...)`
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            found.push(PathBuf::from(path));
        }
    }
    if found.is_empty() {
        bail!("ldd named no library of {}: {listed}", binary.display());
    }
    Ok(found)
}

/// Loads the archive with podman and runs `guard --version` in it (podman as these machines
/// allow: runc, cgroupfs, no network).
pub fn check(archive: &Path) -> Result<()> {
    if crate::setup::find_on_path("podman").is_none() {
        bail!("no podman to check the image with (cargo xtask setup installs it)");
    }
    cmd::run(Command::new("podman").arg("load").arg("-i").arg(archive))?;
    let version = cmd::stdout_of(Command::new("podman").args([
        "run",
        "--rm",
        "--runtime",
        "runc",
        "--cgroup-manager",
        "cgroupfs",
        "--network",
        "none",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=4096:4096",
        IMAGE_REF,
        "--version",
    ]))?;
    if !version.starts_with("guard ") {
        bail!("the image's guard --version printed {version:?}");
    }
    eprintln!("image: {IMAGE_REF} runs: {}", version.trim());
    Ok(())
}
