//! Step 4 of `vm-test`: the initramfs, a newc cpio of a staging directory under `target/vm/`.
//! The test binary and vm-init are glibc-dynamic (cargo's defaults), so it carries their libraries, found
//! with `ldd`, at the host's paths.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::build::Binaries;
use super::{Dirs, remove_dir_if_present};
use crate::cmd;

/// Programs the kernel tests exec, copied into the guest at the same paths (with their
/// libraries). Add to it when a test execs something new; keep it small, no interpreters.
const GUEST_PROGRAMS: &[&str] = &[
    "/bin/sh",
    "/bin/true",
    "/bin/false",
    "/bin/cat",
    "/bin/cp",
    "/bin/ln",
    "/bin/echo",
    "/bin/sleep",
    "/bin/mkdir",
    "/bin/rm",
    "/bin/chmod",
    "/bin/mv",
    "/bin/rmdir",
    "/usr/bin/truncate",
    "/usr/bin/touch",
    "/usr/bin/env",
];

/// Builds `target/vm/initramfs.cpio` (newc, uncompressed: the kernel unpacks it faster under
/// emulation than it would decompress it) from a staging directory made afresh each run and
/// removed once archived.
pub fn initramfs(dirs: &Dirs, binaries: &Binaries) -> Result<PathBuf> {
    let staging = dirs.vm.join("initramfs");
    remove_dir_if_present(&staging)?;
    std::fs::create_dir_all(&staging)?;
    let mut tree = Tree::new(&staging);

    // The host's merged-/usr links (`/bin -> usr/bin`...), so every path a test might use for a
    // program (`/bin/true`, `/usr/bin/true`) means the same file in the guest as on the host.
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(top);
        if host
            .symlink_metadata()
            .is_ok_and(|meta| meta.file_type().is_symlink())
        {
            std::os::unix::fs::symlink(std::fs::read_link(&host)?, staging.join(top))?;
        }
    }
    for dir in [
        "proc", "sys", "dev", "tmp", "run", "root", "etc", "tests", "helpers",
    ] {
        std::fs::create_dir_all(staging.join(dir))?;
    }

    // Debug info is most of a debug test binary's size; the symbols stay, so backtraces still
    // name functions.
    strip_copy(&binaries.init, &staging.join("init"))?;
    tree.libraries_of(&binaries.init)?;
    // The one test binary, and the modules of it that vm-init runs, one a line.
    strip_copy(
        &binaries.tests,
        &staging.join("tests").join(super::KERNEL_TESTS),
    )?;
    tree.libraries_of(&binaries.tests)?;
    std::fs::write(
        staging.join("tests").join("modules"),
        binaries.modules.join("\n") + "\n",
    )?;
    // Beside /tests, where tests/src/kernel.rs also looks; vm-init sets GUARD_TEST_HELPERS too.
    for (name, executable) in &binaries.helpers {
        strip_copy(executable, &staging.join("helpers").join(name))?;
        tree.libraries_of(executable)?;
    }
    for program in GUEST_PROGRAMS {
        let resolved = tree.add(Path::new(program))?;
        tree.libraries_of(&resolved)?;
    }

    let etc = staging.join("etc");
    std::fs::write(
        etc.join("passwd"),
        concat!(
            "root:x:0:0:root:/root:/bin/sh\n",
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        ),
    )?;
    std::fs::write(etc.join("group"), "root:x:0:\nnogroup:x:65534:\n")?;
    std::fs::write(etc.join("hosts"), "127.0.0.1\tlocalhost\n::1\tlocalhost\n")?;

    let archive = dirs.vm.join("initramfs.cpio");
    write_cpio(&staging, &archive)?;
    // The archive holds all of it; the staging copy would double the VM tier's disk use.
    remove_dir_if_present(&staging)?;
    let size = archive.metadata()?.len();
    eprintln!(
        "vm-test: initramfs {} ({:.1} MB, {} files from the host)",
        archive.display(),
        size as f64 / 1e6,
        tree.added.len()
    );
    Ok(archive)
}

/// Host files copied into the staging directory at their own paths.
struct Tree {
    root: PathBuf,
    /// Host paths (with a canonical parent) already copied.
    added: BTreeSet<PathBuf>,
}

impl Tree {
    fn new(root: &Path) -> Tree {
        Tree {
            root: root.to_path_buf(),
            added: BTreeSet::new(),
        }
    }

    /// Copies the host file `path` to the same path in the tree: a symlink stays a symlink (and
    /// its target is copied too), a file keeps its mode. Returns the path of the file at the end
    /// of the symlinks.
    fn add(&mut self, path: &Path) -> Result<PathBuf> {
        let parent = path
            .parent()
            .context("a file to copy has a parent directory")?
            .canonicalize()
            .with_context(|| format!("{} is not on this host", path.display()))?;
        let name = path.file_name().context("a file to copy has a name")?;
        let host = parent.join(name);
        let meta = host
            .symlink_metadata()
            .with_context(|| format!("{} is not on this host", host.display()))?;
        let dest = self.root.join(host.strip_prefix("/").unwrap_or(&host));
        if meta.file_type().is_symlink() {
            let link = std::fs::read_link(&host)?;
            if self.added.insert(host.clone()) {
                std::fs::create_dir_all(dest.parent().unwrap_or(&self.root))?;
                std::os::unix::fs::symlink(&link, &dest)?;
            }
            return self.add(&parent.join(link));
        }
        anyhow::ensure!(meta.is_file(), "{} is not a regular file", host.display());
        if self.added.insert(host.clone()) {
            std::fs::create_dir_all(dest.parent().unwrap_or(&self.root))?;
            std::fs::copy(&host, &dest)
                .with_context(|| format!("copying {} into the initramfs", host.display()))?;
        }
        Ok(host)
    }

    /// Adds every shared library `executable` needs (the dynamic loader too), as `ldd` lists them.
    fn libraries_of(&mut self, executable: &Path) -> Result<()> {
        for library in shared_libraries(executable)? {
            self.add(&library)?;
        }
        Ok(())
    }
}

/// The absolute paths `ldd` gives for `executable`; none for a static executable.
fn shared_libraries(executable: &Path) -> Result<Vec<PathBuf>> {
    let output = Command::new("ldd")
        .arg(executable)
        .output()
        .context("could not run ldd")?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        if text.contains("not a dynamic executable")
            || String::from_utf8_lossy(&output.stderr).contains("not a dynamic executable")
        {
            return Ok(Vec::new());
        }
        bail!(
            "`ldd {}` failed: {}",
            executable.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    parse_ldd(&text).with_context(|| format!("reading `ldd {}`", executable.display()))
}

/// `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and `/lib64/ld-linux-x86-64.so.2
/// (0x...)` give a path each; `linux-vdso.so.1 (0x...)` is in the kernel; `=> not found` is an
/// error.
fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some((name, rest)) = line.split_once("=>") {
            let target = rest.split_whitespace().next().unwrap_or("");
            if target.starts_with('/') {
                paths.push(PathBuf::from(target));
            } else if rest.contains("not found") {
                bail!("{} not found", name.trim());
            }
        } else if let Some(path) = line
            .split_whitespace()
            .next()
            .filter(|w| w.starts_with('/'))
        {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

fn strip_copy(from: &Path, to: &Path) -> Result<()> {
    cmd::run(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(from)
            .arg(to),
    )
}

/// `cpio -o -H newc` of everything under `staging`, owned by root, parents before children.
fn write_cpio(staging: &Path, archive: &Path) -> Result<()> {
    let mut entries = Vec::new();
    walk(staging, Path::new(""), &mut entries)?;
    entries.sort();
    let partial = archive.with_extension("cpio.partial");
    let mut child = Command::new("cpio")
        .args(["-o", "-H", "newc", "-R", "0:0", "--quiet"])
        .current_dir(staging)
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&partial)?)
        .spawn()
        .context("could not start cpio")?;
    {
        let mut stdin = child.stdin.take().expect("stdin was piped");
        for entry in &entries {
            writeln!(stdin, "{}", entry.display())?;
        }
    }
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "cpio failed ({status})");
    std::fs::rename(&partial, archive)?;
    Ok(())
}

/// Every path under `root/relative`, relative to `root`, symlinks not followed.
fn walk(root: &Path, relative: &Path, entries: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(root.join(relative))? {
        let entry = entry?;
        let path = relative.join(entry.file_name());
        let is_dir = entry.file_type()?.is_dir();
        entries.push(path.clone());
        if is_dir {
            walk(root, &path, entries)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_libraries_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f01)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f02)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f03)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }
}
