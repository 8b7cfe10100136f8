//! Which files make a policy, and reading them: rules paths (files or folders of `*.rules`
//! and legacy `*.policy` files), overlays merged on top, and the defaults when no path is given.

use std::path::{Path, PathBuf};

use super::error::LoadError;
use super::error::PolicyError;
use super::model::{LegacyPolicy, Policy};
use super::parser::PolicyParser;
use super::protected::protected_paths_with;

/// The system rules folder read when no rules path is given.
pub const SYSTEM_RULES_DIR: &str = "/etc/guard/rules";
/// Overrides [`SYSTEM_RULES_DIR`] (for tests and unusual installs).
pub const SYSTEM_RULES_ENV: &str = "GUARD_SYSTEM_RULES";
/// The identifier error messages and rule origins use for the embedded default policy.
pub const EMBEDDED_DEFAULT_NAME: &str = "<embedded>/default.rules";
/// The policy used when neither a rules path nor the system rules folder exists.
pub const EMBEDDED_DEFAULT_RULES: &str = include_str!("default.rules");

/// Where a loaded policy came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RulesSource {
    File(PathBuf),
    EmbeddedDefault,
}

impl RulesSource {
    pub fn display_name(&self) -> String {
        match self {
            RulesSource::File(path) => path.display().to_string(),
            RulesSource::EmbeddedDefault => EMBEDDED_DEFAULT_NAME.to_string(),
        }
    }
}

/// A policy and the files it was read from, in order.
#[derive(Clone, Debug)]
pub struct LoadedPolicy {
    pub policy: Policy,
    pub sources: Vec<RulesSource>,
    pub overlay_sources: Vec<RulesSource>,
    /// Entries of the rules folders that look like rules but were not read (see
    /// [`skipped_rule_like`]): each is worth a warning, since what it says is not enforced.
    pub skipped: Vec<SkippedFile>,
}

/// A folder entry that looks like a rules file but is not read, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedFile {
    pub path: PathBuf,
    pub why: &'static str,
}

impl std::fmt::Display for SkippedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "skipped {}: {}", self.path.display(), self.why)
    }
}

/// The entries of folder `dir` that [`rules_files`] does not read but that look like rules: a
/// symlink to a `*.rules` or `*.policy` name (links are not followed), or a regular file whose
/// name is close to one (`agent.rule`, `team.RULES`, `x.rules.bak`, `x.star`). Nothing for a
/// folder that cannot be read (the load reports that).
pub fn skipped_rule_like(dir: &Path) -> Vec<SkippedFile> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut skipped: Vec<SkippedFile> = entries
        .filter_map(|e| e.ok())
        .filter_map(|entry| {
            let file_type = entry.file_type().ok()?;
            let path = entry.path();
            let read = path
                .extension()
                .is_some_and(|ext| ext == "rules" || ext == LEGACY_POLICY_EXTENSION);
            if file_type.is_file() && read {
                return None;
            }
            let name = entry.file_name().to_string_lossy().to_lowercase();
            let read_but_for_case = name.ends_with(".rules") || name.ends_with(".policy");
            let why = if file_type.is_symlink() && read_but_for_case {
                "a symlink (rules folders read regular files only, as the reference does); \
                 copy the file in, or name it with --rules"
            } else if !file_type.is_file() {
                return None;
            } else if read_but_for_case {
                "only names ending in exactly `.rules` or `.policy` (lower case) are read; \
                 rename it"
            } else if [".rule", ".star", ".bzl"]
                .iter()
                .any(|ext| name.ends_with(ext))
                || name.contains(".rules.")
                || name.contains(".policy.")
            {
                "only `*.rules` and `*.policy` files are read; rename it if it holds rules"
            } else {
                return None;
            };
            Some(SkippedFile { path, why })
        })
        .collect();
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    skipped
}

/// The file name extension of a legacy policy (docs/policy-language.md §8), loaded beside the `.rules` files.
pub const LEGACY_POLICY_EXTENSION: &str = "policy";

/// The files a rules path stands for: the file itself, or a folder's regular `*.rules` and
/// `*.policy` files sorted by path. Symlinked entries are skipped, as the reference does (its directory walk
/// does not follow links).
pub fn rules_files(path: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let metadata = std::fs::metadata(path).map_err(|source| LoadError::ReadFile {
        path: path.display().to_string(),
        source,
    })?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let read_dir_error = |source| LoadError::ReadDir {
        dir: path.display().to_string(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(read_dir_error)? {
        let entry = entry.map_err(read_dir_error)?;
        let file_type = entry.file_type().map_err(read_dir_error)?;
        let entry_path = entry.path();
        if file_type.is_file()
            && entry_path
                .extension()
                .is_some_and(|ext| ext == "rules" || ext == LEGACY_POLICY_EXTENSION)
        {
            files.push(entry_path);
        }
    }
    files.sort();
    Ok(files)
}

/// The text of each `.rules` file `paths` stand for (a file, or a folder's `*.rules` files), as
/// `(name, text)` in order, for a policy that is parsed elsewhere (a run's overlay, which the
/// daemon parses). A legacy `.policy` file is an error: it is read only with its own parser.
pub fn read_rules_texts(paths: &[PathBuf]) -> Result<Vec<(String, String)>, String> {
    let mut files = Vec::new();
    for path in paths {
        for file in rules_files(path).map_err(|err| err.to_string())? {
            if file
                .extension()
                .is_some_and(|ext| ext == LEGACY_POLICY_EXTENSION)
            {
                return Err(format!(
                    "{}: a legacy policy cannot be an overlay; write its rules as \
                     prefix_rule/network_rule lines in a `.rules` file",
                    file.display()
                ));
            }
            let text = std::fs::read_to_string(&file)
                .map_err(|err| format!("reading {}: {err}", file.display()))?;
            files.push((file.display().to_string(), text));
        }
    }
    Ok(files)
}

/// The system rules folder (or its override), when it exists.
pub fn system_rules_dir() -> Option<PathBuf> {
    let dir = system_rules_location();
    dir.exists().then_some(dir)
}

/// Where the system rules folder is (or its override), made or not.
pub fn system_rules_location() -> PathBuf {
    std::env::var_os(SYSTEM_RULES_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(SYSTEM_RULES_DIR))
}

/// Loads `rules` (or the defaults when empty) with one parser, then `overlays` with another,
/// merged on top. Any error refuses the whole policy: nothing is half-applied.
pub fn load_policy(rules: &[PathBuf], overlays: &[PathBuf]) -> Result<LoadedPolicy, LoadError> {
    load_policy_with(rules, &[], overlays)
}

/// [`load_policy`] with `extra` files read after the rules (or the defaults), by the same parser
/// and before the overlays: the daemon's amendments file. Extra files that do not exist are
/// skipped (no amendment was written yet).
///
/// The policy gets the built-in protected paths, with every rules path, extra file (written yet
/// or not) and overlay path it was loaded from among them.
pub fn load_policy_with(
    rules: &[PathBuf],
    extra: &[PathBuf],
    overlays: &[PathBuf],
) -> Result<LoadedPolicy, LoadError> {
    load_policy_protecting(rules, extra, overlays, &[])
}

/// [`load_policy_with`], with `also` (a path and why) among the protected paths too: the
/// daemon's state folder, socket, audit log and configuration (see
/// [`super::protected::protected_paths_with`]).
pub fn load_policy_protecting(
    rules: &[PathBuf],
    extra: &[PathBuf],
    overlays: &[PathBuf],
    also: &[(PathBuf, &str)],
) -> Result<LoadedPolicy, LoadError> {
    let mut loaded_from: Vec<PathBuf> = Vec::new();
    let mut sources = if rules.is_empty() {
        match system_rules_dir() {
            Some(dir) => {
                let sources = expand(std::slice::from_ref(&dir))?;
                loaded_from.push(dir);
                sources
            }
            None => {
                // Protected although missing: a rules folder made there would be the next
                // run's policy (see `confine`, which holds its place when it can).
                loaded_from.push(system_rules_location());
                vec![RulesSource::EmbeddedDefault]
            }
        }
    } else {
        loaded_from.extend_from_slice(rules);
        expand(rules)?
    };
    loaded_from.extend_from_slice(extra);
    loaded_from.extend_from_slice(overlays);
    sources.extend(
        extra
            .iter()
            .filter(|path| path.exists())
            .map(|path| RulesSource::File(path.clone())),
    );
    let overlay_sources = expand(overlays)?;
    let skipped = loaded_from
        .iter()
        .filter(|path| path.is_dir())
        .flat_map(|dir| skipped_rule_like(dir))
        .collect();
    let base = parse_sources(&sources)?;
    let mut policy = if overlay_sources.is_empty() {
        base
    } else {
        base.merge_overlay(&parse_sources(&overlay_sources)?)
    };
    policy.set_protected_paths(protected_paths_with(&loaded_from, also));
    Ok(LoadedPolicy {
        policy,
        sources,
        overlay_sources,
        skipped,
    })
}

fn expand(paths: &[PathBuf]) -> Result<Vec<RulesSource>, LoadError> {
    let mut sources = Vec::new();
    for path in paths {
        sources.extend(rules_files(path)?.into_iter().map(RulesSource::File));
    }
    Ok(sources)
}

fn is_legacy_policy(source: &RulesSource) -> bool {
    matches!(source, RulesSource::File(path)
        if path.extension().is_some_and(|ext| ext == LEGACY_POLICY_EXTENSION))
}

/// Parses sources in order: `.rules` files with one parser, legacy `.policy` files each on
/// its own (docs/policy-language.md §8), added to the policy after the rules.
pub fn parse_sources(sources: &[RulesSource]) -> Result<Policy, LoadError> {
    let mut parser = PolicyParser::new();
    let mut legacy = Vec::new();
    for source in sources {
        if is_legacy_policy(source) {
            legacy.push(parse_legacy(source)?);
            continue;
        }
        let name = source.display_name();
        let contents = match source {
            RulesSource::File(path) => {
                std::fs::read_to_string(path).map_err(|source| LoadError::ReadFile {
                    path: name.clone(),
                    source,
                })?
            }
            RulesSource::EmbeddedDefault => EMBEDDED_DEFAULT_RULES.to_string(),
        };
        parser
            .parse(&name, &contents)
            .map_err(|source| LoadError::Parse { path: name, source })?;
    }
    let mut policy = parser.build();
    for one in legacy {
        policy.add_legacy_policy(one);
    }
    Ok(policy)
}

fn parse_legacy(source: &RulesSource) -> Result<LegacyPolicy, LoadError> {
    let name = source.display_name();
    let RulesSource::File(path) = source else {
        unreachable!("only files are legacy policies");
    };
    let contents = std::fs::read_to_string(path).map_err(|source| LoadError::ReadFile {
        path: name.clone(),
        source,
    })?;
    let policy = crate::legacy::parse_policy(&name, &contents).map_err(|err| LoadError::Parse {
        path: name.clone(),
        source: PolicyError::Starlark(err),
    })?;
    Ok(LegacyPolicy {
        file: name.into(),
        policy: std::sync::Arc::new(policy),
    })
}
