//! `cargo xtask deb`: a Debian package of guard, built with `dpkg-deb` from a staging tree:
//!
//! - `/usr/bin/guard`: the release binary with its debug info split off (`objcopy
//!   --only-keep-debug`, then `--strip-debug --add-gnu-debuglink`); the debug info is left beside
//!   the package as `guard.debug`;
//! - `/lib/systemd/system/guard.service` and `/etc/guard/guard.toml` (a conffile) from
//!   `packaging/`;
//! - man pages (`guard.1` and `guard-SUBCOMMAND.1`, from `guard man`) and bash, zsh and fish
//!   completions (from `guard completions`), both made by the binary being packaged.
//!
//! The package does not enable or start the service: `systemctl enable --now guard` does. An RPM
//! takes the same tree (docs/daemon.md says how).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// The subcommands that get a page of their own.
const MAN_PAGES: [&str; 13] = [
    "check", "hook", "policy", "run", "doctor", "daemon", "prompts", "approve", "deny", "reload",
    "status", "audit", "replay",
];

pub fn build() -> Result<PathBuf> {
    let root = cmd::workspace_root();
    let status = cmd::status(&mut cmd::cargo(["build", "--release", "-p", "guard-user"]))?;
    if !status.success() {
        bail!("the release build failed");
    }
    let built = root.join("target/release/guard");
    let version = package_version(&built)?;
    let arch = cmd::stdout_of(Command::new("dpkg").arg("--print-architecture"))?
        .trim()
        .to_string();
    let dist = root.join("target/dist");
    let stage = dist.join(format!("guard_{version}_{arch}"));
    if stage.exists() {
        std::fs::remove_dir_all(&stage).with_context(|| format!("clearing {}", stage.display()))?;
    }
    let bin = stage.join("usr/bin/guard");
    create_parent(&bin)?;
    let debug = dist.join("guard.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&built)
        .arg(&debug))?;
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(&built)
        .arg(&bin))?;
    install(
        &root.join("packaging/guard.service"),
        &stage.join("lib/systemd/system/guard.service"),
    )?;
    install(
        &root.join("packaging/guard.toml"),
        &stage.join("etc/guard/guard.toml"),
    )?;
    let man = stage.join("usr/share/man/man1");
    std::fs::create_dir_all(&man)?;
    write_gzipped(&man.join("guard.1.gz"), &output_of(&bin, &["man"])?)?;
    for sub in MAN_PAGES {
        write_gzipped(
            &man.join(format!("guard-{sub}.1.gz")),
            &output_of(&bin, &["man", sub])?,
        )?;
    }
    for (shell, path) in [
        ("bash", "usr/share/bash-completion/completions/guard"),
        ("zsh", "usr/share/zsh/vendor-completions/_guard"),
        ("fish", "usr/share/fish/vendor_completions.d/guard.fish"),
    ] {
        let file = stage.join(path);
        create_parent(&file)?;
        std::fs::write(&file, output_of(&bin, &["completions", shell])?)?;
    }
    let control = stage.join("DEBIAN");
    std::fs::create_dir_all(&control)?;
    std::fs::write(
        control.join("control"),
        control_file(&version, &arch, &stage)?,
    )?;
    std::fs::write(control.join("conffiles"), "/etc/guard/guard.toml\n")?;
    let postinst = control.join("postinst");
    std::fs::write(
        &postinst,
        format!(
            "#!/bin/sh\nset -e\n# The unit runs the daemon as this user (User=guard).\n\
             getent passwd {user} >/dev/null || {add}\n\
             # The unit is known to systemd; enabling it is the admin's choice.\n\
             if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n",
            user = crate::setup::SYSTEM_USER,
            add = crate::setup::SYSTEM_USER_ADD.join(" "),
        ),
    )?;
    set_mode(&postinst, 0o755)?;
    let deb = dist.join(format!("guard_{version}_{arch}.deb"));
    run(Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(&stage)
        .arg(&deb))?;
    println!("{}", deb.display());
    Ok(deb)
}

/// The release the binary says it is (`guard 0.1.0 (commit ...)`).
fn package_version(bin: &Path) -> Result<String> {
    let said = String::from_utf8(output_of(bin, &["--version"])?)?;
    said.split_whitespace()
        .nth(1)
        .map(str::to_string)
        .context("`guard --version` printed no version")
}

fn control_file(version: &str, arch: &str, stage: &Path) -> Result<String> {
    let kib = du_kib(stage)?;
    Ok(format!(
        "Package: guard\nVersion: {version}\nArchitecture: {arch}\nMaintainer: guard developers \
         <guard@localhost>\nInstalled-Size: {kib}\nDepends: libc6\nSection: admin\nPriority: \
         optional\nDescription: kernel-enforced approval policy for commands and hosts\n guard \
         reads .rules files (the Codex CLI's exec policy format) and holds them in the kernel\n \
         with BPF programs: which programs may run and which hosts may be reached, with asks,\n \
         approvals that become one-line amendments, and an audit log.\n"
    ))
}

fn du_kib(dir: &Path) -> Result<u64> {
    let mut bytes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                bytes += meta.len();
            }
        }
    }
    Ok(bytes.div_ceil(1024))
}

fn output_of(bin: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new(bin)
        .args(args)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "`guard {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

fn write_gzipped(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut gzip = Command::new("gzip")
        .args(["-9", "-n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::fs::File::create(path)?)
        .spawn()
        .context("running gzip")?;
    gzip.stdin
        .take()
        .context("gzip's stdin")?
        .write_all(bytes)?;
    if !gzip.wait()?.success() {
        bail!("gzip failed for {}", path.display());
    }
    Ok(())
}

fn install(from: &Path, to: &Path) -> Result<()> {
    create_parent(to)?;
    std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    set_mode(to, 0o644)
}

fn create_parent(path: &Path) -> Result<()> {
    let parent = path.parent().context("a path with a parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn run(command: &mut Command) -> Result<()> {
    let status = cmd::status(command)?;
    if !status.success() {
        bail!("{} failed ({status})", cmd::display(command));
    }
    Ok(())
}

/// What `cargo xtask test` checks of the package: it builds, holds the binary, unit, conffile,
/// man pages and completions, and the binary it holds runs (unpacked into a scratch folder, so
/// the machine's own files are not touched).
pub fn check() -> Result<()> {
    let deb = build()?;
    let contents = cmd::stdout_of(Command::new("dpkg-deb").arg("--contents").arg(&deb))?;
    for wanted in [
        "./usr/bin/guard",
        "./lib/systemd/system/guard.service",
        "./etc/guard/guard.toml",
        "./usr/share/man/man1/guard.1.gz",
        "./usr/share/man/man1/guard-run.1.gz",
        "./usr/share/bash-completion/completions/guard",
    ] {
        if !contents.lines().any(|line| line.ends_with(wanted)) {
            bail!("the package lacks {wanted}");
        }
    }
    let conffiles = cmd::stdout_of(
        Command::new("dpkg-deb")
            .arg("--info")
            .arg(&deb)
            .arg("conffiles"),
    )?;
    if conffiles.trim() != "/etc/guard/guard.toml" {
        bail!("the package's conffiles are {conffiles:?}");
    }
    let postinst = cmd::stdout_of(
        Command::new("dpkg-deb")
            .arg("--info")
            .arg(&deb)
            .arg("postinst"),
    )?;
    if !postinst.contains(&crate::setup::SYSTEM_USER_ADD.join(" ")) {
        bail!("the package's postinst does not make the unit's user: {postinst:?}");
    }
    let scratch = cmd::workspace_root().join("target/dist/unpacked");
    let _ = std::fs::remove_dir_all(&scratch);
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&scratch))?;
    let said = String::from_utf8(output_of(&scratch.join("usr/bin/guard"), &["--version"])?)?;
    if !said.contains("(commit ") {
        bail!("the packaged guard says {said:?}");
    }
    println!("package ok: {said}", said = said.trim());
    Ok(())
}
