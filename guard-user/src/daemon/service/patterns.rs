//! Scopes by cgroup pattern (`[[scope.patterns]]`, such as `machine.slice/libpod-*.scope`): the
//! cgroups a pattern matches hold the daemon's policy and the pattern's rules, the rules in an
//! overlay (`overlays.rs`) of their own, so the stronger decision of the two wins.
//!
//! A container started later is held from its first moment. The folder above the cgroups a
//! pattern can match is in scope in the pattern's set (and in the daemon's, unless the host is),
//! so a cgroup made there is enforced on before the daemon has seen it. Every tick the daemon
//! looks through the folder and lists what it finds: a cgroup the pattern matches in scope (its
//! events and asks are its own), any other as exempt. Until then such another cgroup held the
//! pattern's rules too: it fails closed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::Daemon;
use crate::daemon::config::PatternConfig;
use crate::daemon::scopes::CgroupPattern;
use crate::daemon::wire::protocol::OverlayFile;
use crate::daemon::wire::responses::ScopeKind;
use crate::kernel::scope::cgroup_id;
use crate::policy::Policy;
use crate::policy::approval::ApprovalPolicy;

/// The most cgroups one pattern's folder is looked through for (a folder past it is listed
/// only up to it; the rest keep the folder's listing, which holds the pattern's rules).
const FOLDER_LIMIT: usize = 4096;

/// One pattern, its folder, and the cgroups seen in the folder.
pub struct PatternScope {
    pub pattern: CgroupPattern,
    /// Its rules files, read again at each reload.
    pub rules: Vec<PathBuf>,
    /// The folder above the cgroups it matches (under the cgroup2 mount), and its cgroup id:
    /// the key of its overlay in `Daemon::overlays`.
    pub folder: PathBuf,
    pub folder_id: u64,
    /// The cgroups seen in the folder: name → (cgroup id, whether the pattern matches it).
    seen: BTreeMap<String, (u64, bool)>,
}

/// What changed in a pattern's folder since it was last looked through.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    /// A cgroup appeared (`matched`: the pattern matches its name).
    Found {
        id: u64,
        path: PathBuf,
        matched: bool,
    },
    /// A cgroup seen before is gone.
    Gone { id: u64, matched: bool },
}

impl PatternScope {
    /// The pattern of `config`, with its folder under `root` (the cgroup2 mount) made when it
    /// does not exist yet (podman and systemd make theirs when the first container starts;
    /// the daemon must hold it before that).
    pub fn new(config: &PatternConfig, root: &Path) -> Result<PatternScope> {
        let pattern = CgroupPattern::parse(&config.cgroup)?;
        let folder = root.join(&pattern.parent);
        if !folder.exists() {
            std::fs::create_dir_all(&folder).with_context(|| {
                format!(
                    "scope.patterns: making {} (the folder of {:?})",
                    folder.display(),
                    config.cgroup
                )
            })?;
            tracing::info!(
                "made {} to hold {:?} from the first cgroup made there",
                folder.display(),
                config.cgroup
            );
        }
        let folder_id = cgroup_id(&folder)?;
        Ok(PatternScope {
            pattern,
            rules: config.rules.clone(),
            folder,
            folder_id,
            seen: BTreeMap::new(),
        })
    }

    /// Looks through the folder: the cgroups that appeared and those gone since the last look.
    pub fn scan(&mut self) -> Vec<Change> {
        let mut now: BTreeMap<String, PathBuf> = BTreeMap::new();
        if let Ok(entries) = std::fs::read_dir(&self.folder) {
            for entry in entries.flatten().take(FOLDER_LIMIT) {
                if entry.file_type().is_ok_and(|t| t.is_dir())
                    && let Some(name) = entry.file_name().to_str()
                {
                    now.insert(name.to_string(), entry.path());
                }
            }
        }
        let mut changes = Vec::new();
        self.seen.retain(|name, (id, matched)| {
            let stays = now.contains_key(name);
            if !stays {
                changes.push(Change::Gone {
                    id: *id,
                    matched: *matched,
                });
            }
            stays
        });
        for (name, path) in now {
            if self.seen.contains_key(&name) {
                continue;
            }
            // Gone again before its id was read: nothing to list.
            let Ok(id) = cgroup_id(&path) else { continue };
            let matched = self.pattern.matches(&name);
            self.seen.insert(name, (id, matched));
            changes.push(Change::Found { id, path, matched });
        }
        changes
    }
}

/// A pattern's rules: its files read and parsed in order, as an overlay's (what they do not
/// set has no say). The error names the file and line.
pub fn load_rules(
    rules: &[PathBuf],
    approval: ApprovalPolicy,
) -> Result<(Vec<String>, Policy), String> {
    let files: Vec<OverlayFile> = crate::policy::load::read_rules_texts(rules)?
        .into_iter()
        .map(|(name, text)| OverlayFile { name, text })
        .collect();
    let policy = super::overlays::parse_files(&files, approval)?;
    Ok((files.into_iter().map(|f| f.name).collect(), policy))
}

impl Daemon {
    /// Puts a `[[scope.patterns]]` pattern in force: its rules in a set of their own on its
    /// folder, the daemon's set there too (unless the host is in scope), the cgroups there now
    /// sorted before the folder is listed.
    pub(super) fn start_pattern(&mut self, config: &PatternConfig) -> Result<()> {
        let mut scope = PatternScope::new(config, &crate::kernel::scope::cgroup2_root()?)?;
        let (files, policy) = load_rules(&config.rules, self.config.asks.approval())
            .map_err(|err| anyhow::anyhow!("scope.patterns {:?}: {err}", config.cgroup))?;
        let overlay = self.load_overlay(files, policy)?;
        self.overlays.insert(scope.folder_id, overlay);
        let found = scope.scan();
        self.pattern_changes(&scope, found);
        let host = self.config.scope.host;
        if let Some(overlay) = self.overlays.get_mut(&scope.folder_id) {
            overlay.attach(&scope.folder)?;
            overlay.list(scope.folder_id)?;
        }
        if !host {
            self.core.enforcer_mut().attach_cgroup(&scope.folder)?;
            self.core.enforcer_mut().add_scope(scope.folder_id)?;
        }
        let kind = ScopeKind::Pattern {
            pattern: config.cgroup.clone(),
            matched: false,
        };
        self.scopes.insert(kind, scope.folder.clone())?;
        self.patterns.push(scope);
        Ok(())
    }

    /// Lists what appeared in a pattern's folder and drops what is gone, in the pattern's set
    /// and the daemon's: a cgroup the pattern matches in scope, another exempt (in the daemon's
    /// set only when the folder is its scope, not the host's).
    fn pattern_changes(&mut self, scope: &PatternScope, changes: Vec<Change>) {
        let host = self.config.scope.host;
        for change in changes {
            let Some(overlay) = self.overlays.get_mut(&scope.folder_id) else {
                return;
            };
            let main = self.core.enforcer_mut();
            let gone = match &change {
                Change::Gone { id, .. } => Some(*id),
                Change::Found { .. } => None,
            };
            let done = match change {
                Change::Found {
                    id,
                    path,
                    matched: true,
                } => overlay
                    .list(id)
                    .and_then(|()| main.add_scope(id))
                    .and_then(|()| {
                        let kind = ScopeKind::Pattern {
                            pattern: scope.pattern.text.clone(),
                            matched: true,
                        };
                        self.scopes.insert(kind, path).map(drop)
                    }),
                Change::Found { id, .. } => overlay
                    .exempt(id)
                    .and_then(|()| if host { Ok(()) } else { main.exempt_scope(id) }),
                Change::Gone { id, matched } => {
                    self.scopes.by_id.remove(&id);
                    overlay.unlist(id).and_then(|()| {
                        if matched || !host {
                            main.remove_scope(id)
                        } else {
                            Ok(())
                        }
                    })
                }
            };
            if let Err(err) = done {
                tracing::warn!("{:?}: {err:#}", scope.pattern.text);
            }
            if let Some(id) = gone {
                self.end_scope_names(id);
            }
        }
    }

    /// Looks through the patterns' folders (every tick).
    pub(super) fn watch_patterns(&mut self) {
        let mut patterns = std::mem::take(&mut self.patterns);
        for scope in &mut patterns {
            let changes = scope.scan();
            if !changes.is_empty() {
                self.pattern_changes(scope, changes);
            }
        }
        self.patterns = patterns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_through_the_folder_finds_new_cgroups_once_and_says_which_are_gone() {
        // A cgroup id is the folder's inode number: a plain folder stands in for cgroupfs.
        let root = tempfile::tempdir().unwrap();
        let config = PatternConfig {
            cgroup: "machine.slice/libpod-*.scope".into(),
            rules: vec![PathBuf::from("c.rules")],
        };
        let mut scope = PatternScope::new(&config, root.path()).unwrap();
        assert!(scope.folder.is_dir(), "the folder is made");
        assert!(scope.scan().is_empty());
        let folder = scope.folder.clone();
        std::fs::create_dir(folder.join("libpod-1.scope")).unwrap();
        std::fs::create_dir(folder.join("systemd-machined.service")).unwrap();
        let found = scope.scan();
        let matched: Vec<bool> = found
            .iter()
            .map(|c| match c {
                Change::Found { matched, .. } => *matched,
                Change::Gone { .. } => panic!("nothing is gone: {found:?}"),
            })
            .collect();
        assert_eq!(matched, vec![true, false], "{found:?}");
        assert!(scope.scan().is_empty(), "each is found once");
        std::fs::remove_dir(folder.join("libpod-1.scope")).unwrap();
        assert!(matches!(
            scope.scan().as_slice(),
            [Change::Gone { matched: true, .. }]
        ));
    }
}
