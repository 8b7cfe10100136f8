//! What `guard legacy check` reports: the classification of one exec (docs/policy-language.md §8.2) and the
//! readable / writeable folder check of a matched one (§8.3).

use std::path::{Component, Path, PathBuf};

use super::error::Error;
use super::matchers::ArgType;
use super::policy::Policy;
use super::program::{ExecCall, MatchedExec, ValidExec};

/// One exec, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Classification {
    /// Matched, and reads at most: nothing it does needs approval.
    Safe(ValidExec),
    /// Matched, but writes a file or takes unverified arguments.
    Match(ValidExec),
    /// Refused by a forbidden program regex, substring, or a spec's `forbidden=`.
    Forbidden {
        reason: String,
        exec: Option<ValidExec>,
    },
    /// No spec could read it; `error` says why (the last spec's error).
    Unverified(Error),
}

impl Classification {
    pub fn name(&self) -> &'static str {
        match self {
            Classification::Safe(_) => "safe",
            Classification::Match(_) => "match",
            Classification::Forbidden { .. } => "forbidden",
            Classification::Unverified(_) => "unverified",
        }
    }

    /// The exec the policy read, for every result but `unverified`.
    pub fn exec(&self) -> Option<&ValidExec> {
        match self {
            Classification::Safe(exec) | Classification::Match(exec) => Some(exec),
            Classification::Forbidden { exec, .. } => exec.as_ref(),
            Classification::Unverified(_) => None,
        }
    }
}

pub fn classify(policy: &Policy, exec: &ExecCall) -> Classification {
    match policy.check(exec) {
        Ok(MatchedExec::Match { exec }) if exec.might_write_files() => Classification::Match(exec),
        Ok(MatchedExec::Match { exec }) => Classification::Safe(exec),
        Ok(MatchedExec::Forbidden { reason, exec }) => Classification::Forbidden { reason, exec },
        Err(err) => Classification::Unverified(err),
    }
}

/// Checks that every file `exec` reads is inside a readable folder and every file it writes
/// inside a writeable one (all args first, then all opts), and returns the program to run: the
/// first `system_path` entry that is an executable file, else the bare program name.
///
/// Folders are compared as given, component by component (`/work2` is not inside `/work`):
/// the caller passes canonical folders; symlinks are not resolved.
pub fn check_folders(
    exec: &ValidExec,
    cwd: Option<&Path>,
    readable: &[PathBuf],
    writeable: &[PathBuf],
) -> Result<String, Error> {
    let values = exec
        .args
        .iter()
        .map(|arg| (&arg.arg_type, &arg.value))
        .chain(exec.opts.iter().map(|opt| (&opt.arg_type, &opt.value)));
    for (arg_type, value) in values {
        match arg_type {
            ArgType::ReadableFile => {
                let file = absolute_path(value, cwd)?;
                if !inside_any(&file, readable) {
                    return Err(Error::ReadablePathNotInReadableFolders {
                        file,
                        folders: readable.to_vec(),
                    });
                }
            }
            ArgType::WriteableFile => {
                let file = absolute_path(value, cwd)?;
                if !inside_any(&file, writeable) {
                    return Err(Error::WriteablePathNotInWriteableFolders {
                        file,
                        folders: writeable.to_vec(),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(exec
        .system_path
        .iter()
        .find(|candidate| is_executable_file(Path::new(candidate)))
        .cloned()
        .unwrap_or_else(|| exec.program.clone()))
}

fn inside_any(file: &Path, folders: &[PathBuf]) -> bool {
    folders.iter().any(|folder| file.starts_with(folder))
}

/// `value` as an absolute path with `.` and `..` resolved lexically (so `../secret` cannot
/// pass for a file inside the folder), relative ones against `cwd`.
fn absolute_path(value: &str, cwd: Option<&Path>) -> Result<PathBuf, Error> {
    let path = Path::new(value);
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        let Some(cwd) = cwd else {
            return Err(Error::CannotCheckRelativePath {
                file: path.to_path_buf(),
            });
        };
        cwd.join(path)
    };
    normalize(&joined).ok_or_else(|| Error::CannotCanonicalizePath {
        file: value.to_string(),
        error: format!(
            "`{}` is not absolute (the working folder must be an absolute path)",
            joined.display()
        ),
    })
}

/// Lexical normalisation of an absolute path: `..` at the root stays at the root, as in the
/// kernel's own walk. `None` for a relative path, which has no root to resolve against.
fn normalize(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut normal = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(part) => normal.push(part),
            Component::ParentDir => {
                normal.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(normal)
}

/// A regular file with any execute bit (following symlinks, as exec does).
fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_is_lexical_and_stays_below_the_root() {
        let cases = [
            ("/a/./b/../c", "/a/c"),
            ("/../../etc/passwd", "/etc/passwd"),
            ("/a/b/", "/a/b"),
            ("/", "/"),
        ];
        for (input, expected) in cases {
            assert_eq!(
                normalize(Path::new(input)),
                Some(PathBuf::from(expected)),
                "{input}"
            );
        }
        assert_eq!(normalize(Path::new("a/b")), None);
    }

    #[test]
    fn relative_values_resolve_against_cwd_or_fail() {
        assert_eq!(
            absolute_path("../x", Some(Path::new("/w/sub"))),
            Ok(PathBuf::from("/w/x"))
        );
        assert_eq!(
            absolute_path("x", None),
            Err(Error::CannotCheckRelativePath { file: "x".into() })
        );
        assert!(matches!(
            absolute_path("x", Some(Path::new("rel"))),
            Err(Error::CannotCanonicalizePath { file, .. }) if file == "x"
        ));
    }

    #[test]
    fn folders_contain_files_component_wise() {
        let folders = [PathBuf::from("/work")];
        assert!(inside_any(Path::new("/work/a"), &folders));
        assert!(inside_any(Path::new("/work"), &folders));
        assert!(!inside_any(Path::new("/work2/a"), &folders));
        assert!(!inside_any(Path::new("/"), &folders));
    }
}
