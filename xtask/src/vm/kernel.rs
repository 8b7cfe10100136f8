//! Step 2 of `vm-test`: the VM's kernel, a Debian package downloaded (never installed) into
//! `target/vm/` and its `vmlinuz` extracted, both once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use super::{Dirs, remove_dir_if_present};
use crate::{cmd, setup};

/// Debian's meta package for the newest 6.12 cloud kernel: a third of the generic kernel's size,
/// boots to `/init` in about 2 s under TCG, and its built-in LSM list has `bpf`.
pub const KERNEL_META_PACKAGE: &str = "linux-image-6.12-cloud-amd64";

/// The `vmlinuz` of the kernel package, downloaded and extracted once into `target/vm/`.
pub fn kernel(dirs: &Dirs) -> Result<PathBuf> {
    let (package, version) = match kernel_package() {
        Ok(found) => found,
        Err(err) => {
            // Offline, or apt's lists are gone: a kernel extracted before still does the job.
            if let Some(cached) = cached_vmlinuz(&dirs.vm.join("kernel"))? {
                eprintln!(
                    "vm-test: {err:#}; using the kernel extracted before: {}",
                    cached.display()
                );
                return Ok(cached);
            }
            return Err(err);
        }
    };
    match fetch(dirs, &package, &version) {
        Ok(vmlinuz) => Ok(vmlinuz),
        // bookworm-security keeps only its newest kernel: lists older than the last upload name
        // a package that is gone. Newer lists name the one that is there.
        Err(err) if setup::is_root() => {
            eprintln!("vm-test: {err:#}; updating apt's lists and trying again");
            cmd::run(setup::apt_get().arg("update"))?;
            let (package, version) = kernel_package()?;
            fetch(dirs, &package, &version)
        }
        Err(err) => Err(err),
    }
}

/// The `vmlinuz` of `package` at `version`: extracted before, or extracted from its .deb,
/// downloaded before or now.
fn fetch(dirs: &Dirs, package: &str, version: &str) -> Result<PathBuf> {
    let name = format!("{package}_{version}");
    let extracted = dirs.vm.join("kernel").join(&name);
    if let Some(vmlinuz) = find_vmlinuz(&extracted)? {
        eprintln!("vm-test: kernel {} (cached)", vmlinuz.display());
        return Ok(vmlinuz);
    }
    let deb = dirs
        .vm
        .join(format!("{}_amd64.deb", name.replace(':', "%3a")));
    if deb.is_file() {
        eprintln!("vm-test: kernel package {} (cached)", deb.display());
    } else {
        download(package, version, &dirs.vm, &deb)?;
    }
    // Into a scratch directory first, so an interrupted run never leaves half a kernel behind.
    let scratch = dirs.vm.join("kernel").join(".extracting");
    remove_dir_if_present(&scratch)?;
    std::fs::create_dir_all(&scratch)?;
    extract_vmlinuz(&deb, &scratch)?;
    find_vmlinuz(&scratch)?
        .with_context(|| format!("{} has no ./boot/vmlinuz-*", deb.display()))?;
    remove_dir_if_present(&extracted)?;
    std::fs::rename(&scratch, &extracted)?;
    find_vmlinuz(&extracted)?.context("the extracted kernel vanished")
}

/// `dpkg-deb --fsys-tarfile DEB | tar -x -C INTO './boot/vmlinuz-*'`, both statuses checked.
fn extract_vmlinuz(deb: &Path, into: &Path) -> Result<()> {
    let mut unpack = Command::new("dpkg-deb");
    unpack.arg("--fsys-tarfile").arg(deb).stdout(Stdio::piped());
    let mut untar = Command::new("tar");
    untar
        .arg("-x")
        .arg("-C")
        .arg(into)
        .args(["--wildcards", "./boot/vmlinuz-*"]);
    eprintln!("$ {} | {}", cmd::display(&unpack), cmd::display(&untar));
    let mut dpkg = unpack.spawn().context("could not start dpkg-deb")?;
    let tar_status = untar
        .stdin(dpkg.stdout.take().expect("stdout was piped"))
        .status()
        .context("could not start tar")?;
    let dpkg_status = dpkg.wait()?;
    anyhow::ensure!(dpkg_status.success(), "dpkg-deb failed ({dpkg_status})");
    anyhow::ensure!(tar_status.success(), "tar failed ({tar_status})");
    Ok(())
}

/// The concrete kernel package behind [`KERNEL_META_PACKAGE`] and its candidate version, from
/// apt's lists (running `apt-get update` once if they do not know it).
fn kernel_package() -> Result<(String, String)> {
    let resolve = || -> Result<(String, String)> {
        // One `apt-cache` call (they take most of a second each here): the meta package's
        // Depends names the kernel package with its exact version, `linux-image-X (= V)`.
        let show = cmd::stdout_of(Command::new("apt-cache").args([
            "show",
            "--no-all-versions",
            KERNEL_META_PACKAGE,
        ]))?;
        let depends = show
            .lines()
            .find_map(|line| line.strip_prefix("Depends:"))
            .with_context(|| format!("`apt-cache show {KERNEL_META_PACKAGE}` has no Depends"))?;
        parse_kernel_dependency(depends).with_context(|| {
            format!(
                "`apt-cache show {KERNEL_META_PACKAGE}` depends on no \
                 `linux-image-… (= version)`: {depends}"
            )
        })
    };
    match resolve() {
        Ok(found) => Ok(found),
        Err(first) if setup::is_root() => {
            eprintln!("vm-test: {first:#}; updating apt's lists and trying again");
            cmd::run(setup::apt_get().arg("update"))?;
            resolve()
        }
        Err(first) => Err(first.context(format!(
            "run `sudo apt-get update`, or check that {KERNEL_META_PACKAGE} is in apt's sources"
        ))),
    }
}

/// The `linux-image-…` package and its version in a Depends field such as
/// `linux-image-6.12.117+deb12-cloud-amd64 (= 6.12.117-1~deb12u1), initramfs-tools`.
fn parse_kernel_dependency(depends: &str) -> Option<(String, String)> {
    depends
        .split([',', '|'])
        .map(str::trim)
        .find(|dependency| dependency.starts_with("linux-image-"))
        .and_then(|dependency| {
            let (package, version) = dependency.split_once('(')?;
            let version = version
                .trim()
                .strip_prefix('=')?
                .trim_end_matches(')')
                .trim();
            Some((package.trim().to_string(), version.to_string()))
        })
}

/// `apt-get download PACKAGE=VERSION` into a scratch directory, then the .deb renamed to `deb`.
fn download(package: &str, version: &str, vm: &Path, deb: &Path) -> Result<()> {
    let scratch = vm.join(".download");
    remove_dir_if_present(&scratch)?;
    std::fs::create_dir_all(&scratch)?;
    cmd::run(
        setup::apt_get()
            .arg("download")
            .arg(format!("{package}={version}"))
            .current_dir(&scratch),
    )?;
    let downloaded = std::fs::read_dir(&scratch)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .find(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .with_context(|| format!("`apt-get download {package}` left no .deb"))?;
    std::fs::rename(&downloaded, deb)?;
    remove_dir_if_present(&scratch)
}

fn find_vmlinuz(root: &Path) -> Result<Option<PathBuf>> {
    let boot = root.join("boot");
    if !boot.is_dir() {
        return Ok(None);
    }
    let mut found = std::fs::read_dir(&boot)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("vmlinuz-"))
        })
        .collect::<Vec<_>>();
    found.sort();
    Ok(found.pop())
}

/// The newest `vmlinuz` extracted by an earlier run, by directory name.
fn cached_vmlinuz(kernels: &Path) -> Result<Option<PathBuf>> {
    if !kernels.is_dir() {
        return Ok(None);
    }
    let mut dirs = std::fs::read_dir(kernels)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            !path
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with('.'))
        })
        .collect::<Vec<_>>();
    dirs.sort();
    for dir in dirs.iter().rev() {
        if let Some(vmlinuz) = find_vmlinuz(dir)? {
            return Ok(Some(vmlinuz));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_package_and_version_come_from_the_meta_package() {
        assert_eq!(
            parse_kernel_dependency(
                " linux-image-6.12.117+deb12-cloud-amd64 (= 6.12.117-1~deb12u1), other"
            ),
            Some((
                "linux-image-6.12.117+deb12-cloud-amd64".to_string(),
                "6.12.117-1~deb12u1".to_string()
            ))
        );
        assert_eq!(
            parse_kernel_dependency("linux-image-6.12.1-cloud-amd64"),
            None
        );
    }
}
