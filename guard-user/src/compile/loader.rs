//! Direct execs of the dynamic loader: `/lib64/ld-linux-x86-64.so.2 /usr/bin/touch x` runs
//! `touch` while the kernel sees an exec of the loader, so no rule for `touch` (by identity,
//! name or argv) would hold. The kernel cannot resolve the loader's argument to a file, so the
//! loader itself is refused where it is the executed file, unless a rule names it.
//!
//! This costs nothing for ordinary programs: the kernel maps a dynamically linked program's
//! loader without an exec of its own, so only a command line that starts with the loader is
//! refused (`ldd` is one: it runs the loader directly).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::exec::kernel_dev;
use super::image::{IdentityEntry, KernelRule, NameEntry, Verdict};
use crate::policy::{Decision, RuleKind, RuleOrigin};

/// Where the built-in rule says it comes from.
pub const LOADER_RULE_ORIGIN: &str = "<built-in dynamic loader rule>";

/// The folders dynamic loaders live in: the usual library folders and their multiarch
/// subfolders (`/usr/lib/x86_64-linux-gnu`).
pub fn system_loader_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "/lib",
        "/lib64",
        "/lib32",
        "/libx32",
        "/usr/lib",
        "/usr/lib64",
        "/usr/lib32",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    for base in ["/lib", "/usr/lib"] {
        let Ok(entries) = std::fs::read_dir(base) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.contains("-linux-") && entry.path().is_dir() {
                dirs.push(entry.path());
            }
        }
    }
    dirs
}

/// A file name a dynamic loader has: glibc's `ld-linux*.so*` and `ld-2.NN.so`, musl's
/// `ld-musl-ARCH.so.1`, and `ld.so`.
fn is_loader_name(name: &str) -> bool {
    name == "ld.so" || (name.starts_with("ld-") && name.contains(".so"))
}

/// One loader file found: its identity and where.
struct Loader {
    dev: u64,
    ino: u64,
    path: PathBuf,
}

/// How long a folder must have been unchanged when it was read for that read to be kept: its
/// ctime ticks are coarse, so a change just after a read could keep the ctime it had.
const SETTLED: Duration = Duration::from_secs(1);

/// The loader names last read in a folder, with the folder's identity and ctime then (a path
/// such as `/lib` may be a symlink that is pointed elsewhere).
struct FolderRead {
    stamp: (u64, u64, i64, i64),
    names: Vec<OsString>,
}

/// Each library folder's last read. Reading them (thousands of entries in
/// `/usr/lib/x86_64-linux-gnu`) was about a third of a small policy's compile, which every
/// reload and approval makes. A folder whose ctime has not changed has the same entries: an
/// entry added, removed or renamed changes it, and no call sets it.
static FOLDER_READS: Mutex<BTreeMap<PathBuf, FolderRead>> = Mutex::new(BTreeMap::new());

/// The loader names in `dir` (`None`: it cannot be read), read again only when it changed.
fn loader_names(dir: &Path, settled: Duration) -> Option<Vec<OsString>> {
    let meta = std::fs::metadata(dir).ok()?;
    let ctime = (meta.ctime(), meta.ctime_nsec());
    let stamp = (meta.dev(), meta.ino(), ctime.0, ctime.1);
    let mut reads = FOLDER_READS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(read) = reads.get(dir).filter(|read| read.stamp == stamp) {
        return Some(read.names.clone());
    }
    let read_at = SystemTime::now();
    let names: Vec<OsString> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|entry| entry.file_name())
        .filter(|name| is_loader_name(&name.to_string_lossy()))
        .collect();
    let changed_at = std::time::UNIX_EPOCH
        + Duration::new(ctime.0.max(0) as u64, ctime.1.clamp(0, 999_999_999) as u32);
    if changed_at + settled <= read_at {
        reads.insert(
            dir.to_path_buf(),
            FolderRead {
                stamp,
                names: names.clone(),
            },
        );
    } else {
        reads.remove(dir);
    }
    Some(names)
}

fn loaders_in(dirs: &[PathBuf]) -> Vec<Loader> {
    loaders_in_settled(dirs, SETTLED)
}

fn loaders_in_settled(dirs: &[PathBuf], settled: Duration) -> Vec<Loader> {
    let mut found: Vec<Loader> = Vec::new();
    for dir in dirs {
        let Some(names) = loader_names(dir, settled) else {
            continue;
        };
        for name in names {
            let path = dir.join(name);
            // Symlinks followed, every time: the kernel sees the file they lead to.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() || meta.mode() & 0o111 == 0 {
                continue;
            }
            let (dev, ino) = (kernel_dev(meta.dev()), meta.ino());
            if !found.iter().any(|l| (l.dev, l.ino) == (dev, ino)) {
                found.push(Loader {
                    dev,
                    ino,
                    path: std::fs::canonicalize(&path).unwrap_or(path),
                });
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Adds a forbidden identity for each loader in `dirs` that no rule names (by identity, i.e.
/// its path, or by its file name), with one built-in rule appended to `rules`. A rule that
/// names the loader decides it instead, so `prefix_rule(["/lib64/ld-linux-x86-64.so.2"],
/// "allow")` lets `ldd` work again.
pub fn forbid_direct_loader_execs(
    dirs: &[PathBuf],
    rules: &mut Vec<KernelRule>,
    identities: &mut Vec<IdentityEntry>,
    names: &[NameEntry],
) {
    let unnamed: Vec<Loader> = loaders_in(dirs)
        .into_iter()
        .filter(|loader| {
            let named_by_path = identities
                .iter()
                .any(|e| (e.dev, e.ino) == (loader.dev, loader.ino));
            let file_name = file_name(&loader.path);
            let named_by_name = names.iter().any(|n| Some(n.name.as_str()) == file_name);
            !named_by_path && !named_by_name
        })
        .collect();
    if unnamed.is_empty() {
        return;
    }
    let rule = rules.len() as u32;
    let example = unnamed[0].path.display().to_string();
    rules.push(KernelRule {
        kind: RuleKind::Prefix,
        text: format!("prefix_rule(pattern=[\"{example}\"], decision=\"forbidden\")"),
        summary: "running a program through the dynamic loader (the loader as the executed \
                  file, which no rule for the program it loads would see)"
            .to_string(),
        decision: Decision::Forbidden,
        justification: Some(format!(
            "allow it with prefix_rule(pattern=[\"{example}\"], decision=\"allow\") if this \
             command needs it (ldd does)"
        )),
        origin: Some(RuleOrigin {
            file: LOADER_RULE_ORIGIN.into(),
            line: 1,
        }),
    });
    for loader in unnamed {
        identities.push(IdentityEntry {
            dev: loader.dev,
            ino: loader.ino,
            path: loader.path,
            verdict: Verdict {
                decision: Decision::Forbidden,
                rule,
                audit_only: false,
            },
        });
    }
}

fn file_name(path: &Path) -> Option<&str> {
    path.file_name().and_then(|n| n.to_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loader_names_are_recognised_and_libraries_are_not() {
        for name in [
            "ld-linux-x86-64.so.2",
            "ld-linux-aarch64.so.1",
            "ld-musl-x86_64.so.1",
            "ld-2.31.so",
            "ld.so",
        ] {
            assert!(is_loader_name(name), "{name}");
        }
        for name in ["libc.so.6", "ldconfig", "ld", "ld.bfd", "libld-foo.so"] {
            assert!(!is_loader_name(name), "{name}");
        }
    }

    fn fake_loader_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let loader = dir.path().join("ld-linux-x86-64.so.2");
        std::fs::write(&loader, b"\x7fELF").unwrap();
        std::fs::set_permissions(&loader, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        // A symlink to it is the same file: one identity.
        std::os::unix::fs::symlink(&loader, dir.path().join("ld-linux.so.2")).unwrap();
        std::fs::write(dir.path().join("libc.so.6"), b"").unwrap();
        dir
    }

    #[test]
    fn an_unnamed_loader_is_forbidden_by_identity_with_one_builtin_rule() {
        let dir = fake_loader_dir();
        let mut rules = Vec::new();
        let mut identities = Vec::new();
        forbid_direct_loader_execs(
            &[dir.path().to_path_buf()],
            &mut rules,
            &mut identities,
            &[],
        );
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].decision, Decision::Forbidden);
        assert_eq!(
            rules[0].origin.as_ref().map(|o| &*o.file),
            Some(LOADER_RULE_ORIGIN)
        );
        assert_eq!(identities.len(), 1, "{identities:?}");
        assert_eq!(identities[0].verdict.rule, 0);
        assert_eq!(identities[0].verdict.decision, Decision::Forbidden);
    }

    #[test]
    fn a_folder_read_before_is_read_again_once_it_changed() {
        let dir = fake_loader_dir();
        let dirs = [dir.path().to_path_buf()];
        let paths = |found: Vec<Loader>| -> Vec<PathBuf> {
            found.into_iter().map(|l| l.path).collect::<Vec<_>>()
        };
        // Kept at once (no settling), so the next reads come from what was kept.
        assert_eq!(paths(loaders_in_settled(&dirs, Duration::ZERO)).len(), 1);
        // Its file's mode is read every time: a loader that is no longer executable is none.
        let loader = dir.path().join("ld-linux-x86-64.so.2");
        let mode = |m| std::os::unix::fs::PermissionsExt::from_mode(m);
        std::fs::set_permissions(&loader, mode(0o644)).unwrap();
        assert!(paths(loaders_in_settled(&dirs, Duration::ZERO)).is_empty());
        std::fs::set_permissions(&loader, mode(0o755)).unwrap();
        // A loader added later changes the folder, which is read again.
        std::thread::sleep(Duration::from_millis(50));
        let added = dir.path().join("ld-musl-x86_64.so.1");
        std::fs::write(&added, b"\x7fELF").unwrap();
        std::fs::set_permissions(&added, mode(0o755)).unwrap();
        let found = paths(loaders_in_settled(&dirs, Duration::ZERO));
        assert_eq!(found.len(), 2, "{found:?}");
        // And one removed is gone.
        std::thread::sleep(Duration::from_millis(50));
        std::fs::remove_file(&added).unwrap();
        assert_eq!(paths(loaders_in_settled(&dirs, Duration::ZERO)).len(), 1);
    }

    #[test]
    fn a_folder_path_pointed_at_another_folder_is_read_again() {
        // `/lib` is a symlink on merged-/usr systems: the path is the same, the folder is not.
        let glibc = fake_loader_dir();
        let musl = tempfile::tempdir().unwrap();
        let musl_loader = musl.path().join("ld-musl-x86_64.so.1");
        std::fs::write(&musl_loader, b"\x7fELF").unwrap();
        std::fs::set_permissions(
            &musl_loader,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let links = tempfile::tempdir().unwrap();
        let lib = links.path().join("lib");
        let names = |found: Vec<Loader>| -> Vec<String> {
            found
                .into_iter()
                .map(|l| l.path.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        std::os::unix::fs::symlink(glibc.path(), &lib).unwrap();
        let dirs = [lib.clone()];
        assert_eq!(
            names(loaders_in_settled(&dirs, Duration::ZERO)),
            ["ld-linux-x86-64.so.2"]
        );
        std::fs::remove_file(&lib).unwrap();
        std::os::unix::fs::symlink(musl.path(), &lib).unwrap();
        assert_eq!(
            names(loaders_in_settled(&dirs, Duration::ZERO)),
            ["ld-musl-x86_64.so.1"]
        );
    }

    #[test]
    fn a_rule_that_names_the_loader_decides_it_instead() {
        let dir = fake_loader_dir();
        let mut rules = Vec::new();
        let mut identities = Vec::new();
        let names = [NameEntry {
            name: "ld-linux-x86-64.so.2".to_string(),
            verdict: Verdict {
                decision: Decision::Allow,
                rule: 0,
                audit_only: false,
            },
        }];
        forbid_direct_loader_execs(
            &[dir.path().to_path_buf()],
            &mut rules,
            &mut identities,
            &names,
        );
        assert!(rules.is_empty() && identities.is_empty());
    }
}
