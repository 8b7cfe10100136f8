//! Lexical path handling for host executables: what `argv[0]` resolves to, and which absolute
//! paths a `host_executable` entry lists. Nothing here touches the file system: the reference
//! compares paths lexically, and so must we for the same decisions.

use std::path::{Path, PathBuf};

/// `.` and `..` removed without following links (`/usr/bin/../bin/git` → `/usr/bin/git`).
pub fn normalize_lexically(path: &Path) -> PathBuf {
    path_clean::clean(path)
}

/// Turns `argv[0]` into an absolute, normalised path: `~` expands to `$HOME`, and a relative
/// path (`./git`, `bin/git`, even bare `git`) is taken against the current directory.
pub fn resolve_program_path(program: &str) -> Option<PathBuf> {
    let expanded = expand_home(program)?;
    let absolute = if expanded.is_absolute() {
        expanded
    } else {
        std::env::current_dir().ok()?.join(expanded)
    };
    Some(normalize_lexically(&absolute))
}

fn expand_home(program: &str) -> Option<PathBuf> {
    let rest = match program.strip_prefix('~') {
        None => return Some(PathBuf::from(program)),
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.trim_start_matches('/'),
        // `~user/…` is not ours to expand; take it as a relative name like the shell would not.
        Some(_) => return Some(PathBuf::from(program)),
    };
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    Some(if rest.is_empty() {
        home
    } else {
        home.join(rest)
    })
}

/// The key rules are looked up under for a path: its file name, compared exactly on Unix.
pub fn executable_name(path: &Path) -> Option<&str> {
    path.file_name().and_then(|name| name.to_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalisation() {
        assert_eq!(
            normalize_lexically(Path::new("/usr/bin/../bin/./git")),
            PathBuf::from("/usr/bin/git")
        );
        assert_eq!(
            normalize_lexically(Path::new("/../git")),
            PathBuf::from("/git")
        );
    }

    #[test]
    fn relative_and_home_programs_become_absolute() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(resolve_program_path("./git").unwrap(), cwd.join("git"));
        assert_eq!(resolve_program_path("git").unwrap(), cwd.join("git"));
        assert_eq!(resolve_program_path("bin/../git").unwrap(), cwd.join("git"));
        assert_eq!(
            resolve_program_path("/usr/bin/git").unwrap(),
            PathBuf::from("/usr/bin/git")
        );
        if let Some(home) = std::env::var_os("HOME") {
            assert_eq!(
                resolve_program_path("~/bin/git").unwrap(),
                PathBuf::from(home).join("bin/git")
            );
        }
    }
}
