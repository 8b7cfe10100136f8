//! The daemon's scopes: the host, configured cgroups, and one fresh cgroup per `guard run`.
//!
//! Run scopes live under one parent cgroup (`<cgroup2>/guard-daemon/`) that is itself in scope,
//! so a new run scope is enforced from the moment it exists. They outlive the daemon: a
//! restarted daemon adopts the ones it finds and ends each when its last process is gone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::run_stream::RunStream;
use super::wire::responses::ScopeKind;
use anyhow::{Context, Result};

use crate::kernel::scope::{cgroup_id, cgroup2_root};

/// The kind of guard scope a process runs in (the `scope` attribute of a control-socket
/// subject).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Membership {
    /// A `guard run` of this daemon.
    Run,
    /// A cgroup from the config.
    Cgroup,
    /// A stand-alone `guard run` (not this daemon's).
    Standalone,
    /// Only the host-wide scope: every process is in it, the admin's shell too.
    Host,
    /// No guard scope.
    None,
    /// The process's cgroup could not be read.
    Unknown,
}

impl Membership {
    pub fn as_str(self) -> &'static str {
        match self {
            Membership::Run => "run",
            Membership::Cgroup => "cgroup",
            Membership::Standalone => "standalone",
            Membership::Host => "host",
            Membership::None => "none",
            Membership::Unknown => "unknown",
        }
    }

    /// Whether a process there is one guard confines to a scope of its own (the
    /// `in_guard_scope` attribute): a run, a configured cgroup, or a cgroup that cannot be
    /// read (fails closed). The host-wide scope alone does not count: it holds every process,
    /// the admin answering asks among them.
    pub fn is_confined(self) -> bool {
        !matches!(self, Membership::Host | Membership::None)
    }
}

pub struct Scope {
    pub kind: ScopeKind,
    pub path: PathBuf,
    pub id: u64,
    /// Where a run's blocked-request messages go while its client is connected.
    pub listener: Option<RunStream>,
    /// A run's sandbox mode with its client's roots, and where the mode was set: the writes
    /// it refuses are reported.
    pub sandbox: Option<(crate::confine::sandbox::SandboxPlan, String)>,
    /// A run's hold of its command's prompted calls (from its client's `hold`).
    pub hold: Option<crate::hold::Hold>,
    /// Its held calls waiting for their asks' answers.
    pub waiting: Vec<super::service::WaitingCall>,
}

impl Scope {
    pub fn is_run(&self) -> bool {
        matches!(self.kind, ScopeKind::Run { .. })
    }
}

/// The daemon's scopes, by cgroup id.
pub struct Scopes {
    pub by_id: BTreeMap<u64, Scope>,
    runs_parent: PathBuf,
    next_run: u64,
    run_prefix: String,
    /// The cgroups below the configured ones, by id (see [`Scopes::label_of`]), and when the
    /// map was last made.
    below: (BTreeMap<u64, &'static str>, Option<std::time::Instant>),
}

/// The most cgroups below the configured scopes that [`Scopes::label_of`] looks through.
const BELOW_LIMIT: usize = 4096;
/// How often at most the folders below the configured scopes are looked through again.
const BELOW_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

impl Scopes {
    /// `parent_name`: the run scopes' parent under the cgroup2 root (created if missing).
    pub fn new(parent_name: &str) -> Result<Self> {
        let runs_parent = cgroup2_root()?.join(parent_name);
        std::fs::create_dir_all(&runs_parent)
            .with_context(|| format!("creating cgroup {}", runs_parent.display()))?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        Ok(Scopes {
            by_id: BTreeMap::new(),
            runs_parent,
            next_run: 1,
            run_prefix: format!("run-{started}-{}", std::process::id()),
            below: (BTreeMap::new(), None),
        })
    }

    /// Which kind of guard scope the peer process runs in, by its cgroup: the deepest of the
    /// daemon's scopes at or above it, or a stand-alone `guard run`'s. A peer whose cgroup
    /// cannot be read (it is gone, not ours to see, or the kernel named no peer process) is
    /// [`Membership::Unknown`], which counts as confined.
    pub fn membership(&self, peer: Option<&crate::kernel::peer::PeerProcess>) -> Membership {
        match peer.map(crate::kernel::peer::PeerProcess::cgroup) {
            Some(Ok(cgroup)) => self.membership_of(&cgroup),
            _ => Membership::Unknown,
        }
    }

    /// Whether the daemon's cgroup hooks hold `cgroup`: one of the cgroups it attached them to
    /// (the host's root, a configured cgroup, a pattern's folder, the runs' parent) is at or
    /// above it.
    pub fn hooks_hold(&self, cgroup: &Path) -> bool {
        self.by_id.values().any(|scope| {
            !matches!(scope.kind, ScopeKind::Run { .. }) && cgroup.starts_with(&scope.path)
        })
    }

    /// [`Scopes::membership`] of a process in `cgroup`.
    pub fn membership_of(&self, cgroup: &Path) -> Membership {
        let standalone = cgroup2_root()
            .ok()
            .map(|root| root.join(crate::kernel::scope::STANDALONE_PARENT));
        for folder in cgroup.ancestors() {
            if let Some(scope) = self.by_id.values().find(|s| s.path == folder) {
                return match scope.kind {
                    ScopeKind::Host => Membership::Host,
                    ScopeKind::Cgroup
                    | ScopeKind::Pattern { .. }
                    | ScopeKind::Pods
                    | ScopeKind::Pod { .. } => Membership::Cgroup,
                    ScopeKind::Runs | ScopeKind::Run { .. } => Membership::Run,
                };
            }
            if standalone.as_deref() == Some(folder) {
                return Membership::Standalone;
            }
        }
        Membership::None
    }

    /// The deepest of the daemon's scopes at or above process `pid`'s cgroup (`None`: in none
    /// of them, or its cgroup cannot be read).
    pub fn scope_of_pid(&self, pid: u32) -> Option<u64> {
        let cgroup = crate::kernel::scope::cgroup_of_pid(pid).ok()?;
        cgroup.ancestors().find_map(|folder| {
            self.by_id
                .iter()
                .find(|(_, scope)| scope.path == folder)
                .map(|(id, _)| *id)
        })
    }

    /// The kind of scope a kernel event from cgroup `id` came from, for the metrics' `scope`
    /// label: `host`, `cgroup`, `run`, or `unknown` (a bounded set). A scope's own cgroup is
    /// known by its id; one below a configured cgroup (or the runs' parent) is found by looking
    /// through their folders, at most once a second and [`BELOW_LIMIT`] folders deep; any other
    /// cgroup is only in the host-wide scope.
    pub fn label_of(&mut self, id: u64) -> &'static str {
        if let Some(scope) = self.by_id.get(&id) {
            return scope_label(&scope.kind);
        }
        if let Some(label) = self.below.0.get(&id) {
            return label;
        }
        let stale = self.below.1.is_none_or(|at| at.elapsed() >= BELOW_REFRESH);
        let nested = self
            .by_id
            .values()
            .any(|s| matches!(s.kind, ScopeKind::Cgroup | ScopeKind::Runs));
        if stale && nested {
            self.below = (self.folders_below(), Some(std::time::Instant::now()));
            if let Some(label) = self.below.0.get(&id) {
                return label;
            }
        }
        if self
            .by_id
            .values()
            .any(|s| matches!(s.kind, ScopeKind::Host))
        {
            "host"
        } else {
            "unknown"
        }
    }

    /// Every cgroup below a configured cgroup or the runs' parent, by id, with its label.
    fn folders_below(&self) -> BTreeMap<u64, &'static str> {
        use std::os::unix::fs::MetadataExt;
        let mut found = BTreeMap::new();
        let mut todo: Vec<(PathBuf, &'static str)> = self
            .by_id
            .values()
            .filter(|s| matches!(s.kind, ScopeKind::Cgroup | ScopeKind::Runs))
            .map(|s| (s.path.clone(), scope_label(&s.kind)))
            .collect();
        while let Some((folder, label)) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&folder) else {
                continue;
            };
            for entry in entries.flatten() {
                if found.len() >= BELOW_LIMIT {
                    return found;
                }
                if let Ok(meta) = entry.metadata()
                    && meta.is_dir()
                {
                    found.insert(meta.ino(), label);
                    todo.push((entry.path(), label));
                }
            }
        }
        found
    }

    pub fn runs_parent(&self) -> &Path {
        &self.runs_parent
    }

    pub fn insert(&mut self, kind: ScopeKind, path: PathBuf) -> Result<u64> {
        let id = cgroup_id(&path)?;
        self.by_id.insert(
            id,
            Scope {
                kind,
                path,
                id,
                listener: None,
                sandbox: None,
                hold: None,
                waiting: Vec::new(),
            },
        );
        Ok(id)
    }

    /// Run scopes left by an earlier daemon (folders under the parent), to adopt.
    pub fn leftover_runs(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.runs_parent) else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        out.sort();
        out
    }

    /// Makes a fresh run scope and moves `pid` (the requesting client) into it.
    pub fn create_run(
        &mut self,
        uid: u32,
        argv: Vec<String>,
        pid: u32,
        within: Option<&Path>,
    ) -> Result<u64> {
        let path = within
            .unwrap_or(&self.runs_parent)
            .join(format!("{}-{}", self.run_prefix, self.next_run));
        self.next_run += 1;
        std::fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        if let Err(err) = std::fs::write(path.join("cgroup.procs"), pid.to_string()) {
            let _ = std::fs::remove_dir(&path);
            return Err(err).with_context(|| format!("moving pid {pid} into {}", path.display()));
        }
        self.insert(
            ScopeKind::Run {
                uid,
                argv,
                adopted: false,
            },
            path,
        )
    }

    /// Run scopes whose processes are all gone: removed from the map and their cgroups
    /// deleted, a nested run's before the run it is nested in (a cgroup with children cannot
    /// be removed). Returns their ids.
    pub fn end_finished_runs(&mut self) -> Vec<u64> {
        let mut finished: Vec<(usize, u64)> = self
            .by_id
            .values()
            .filter(|s| s.is_run() && !populated(&s.path))
            .map(|s| (s.path.components().count(), s.id))
            .collect();
        finished.sort_by(|a, b| b.cmp(a));
        let finished: Vec<u64> = finished.into_iter().map(|(_, id)| id).collect();
        for id in &finished {
            if let Some(scope) = self.by_id.remove(id) {
                let _ = std::fs::remove_dir(&scope.path);
            }
        }
        finished
    }
}

/// A scope kind as the metrics' `scope` label: a run and the runs' parent are both `run`.
fn scope_label(kind: &ScopeKind) -> &'static str {
    match kind {
        ScopeKind::Host => "host",
        ScopeKind::Cgroup | ScopeKind::Pattern { .. } => "cgroup",
        ScopeKind::Pods | ScopeKind::Pod { .. } => "pod",
        ScopeKind::Runs | ScopeKind::Run { .. } => "run",
    }
}

/// Whether a cgroup still has processes (in it or below it). An unreadable `cgroup.events`
/// (the folder is gone) counts as empty.
pub fn populated(path: &Path) -> bool {
    std::fs::read_to_string(path.join("cgroup.events"))
        .map(|events| events.lines().any(|l| l.trim() == "populated 1"))
        .unwrap_or(false)
}

/// The calling process's own cgroup v2 folder (`0::/path` in /proc/self/cgroup).
pub fn own_cgroup() -> Result<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    let relative = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .context("this process has no cgroup v2 membership")?;
    Ok(cgroup2_root()?.join(relative.trim_start_matches('/')))
}

/// A `[[scope.patterns]]` cgroup pattern: a folder below the cgroup2 mount, and a glob for the
/// names of the cgroups in it (`machine.slice/libpod-*.scope`).
#[derive(Clone, Debug)]
pub struct CgroupPattern {
    /// As configured.
    pub text: String,
    /// The folder whose cgroups it matches, relative to the cgroup2 mount.
    pub parent: PathBuf,
    name: globset::GlobMatcher,
}

impl CgroupPattern {
    /// The pattern `text`; an error says what to write instead.
    pub fn parse(text: &str) -> Result<CgroupPattern> {
        let wild = |part: &str| part.contains(['*', '?', '[']);
        let trimmed = text.trim_matches('/');
        let Some((parent, last)) = trimmed.rsplit_once('/') else {
            anyhow::bail!(
                "scope.patterns: {text:?} names no folder: a pattern matches the cgroups in one \
                 folder below the cgroup2 mount, as `machine.slice/libpod-*.scope` does"
            );
        };
        if parent
            .split('/')
            .any(|part| wild(part) || part == ".." || part == ".")
        {
            anyhow::bail!(
                "scope.patterns: {text:?}: only its last part may have wildcards, and no part \
                 may be `.` or `..` (`system.slice/docker-*.scope`)"
            );
        }
        if !wild(last) {
            anyhow::bail!(
                "scope.patterns: {text:?} has no wildcard: list one cgroup under scope.cgroups"
            );
        }
        let name = globset::GlobBuilder::new(last)
            .literal_separator(true)
            .build()
            .with_context(|| format!("scope.patterns: {text:?}"))?
            .compile_matcher();
        Ok(CgroupPattern {
            text: text.to_string(),
            parent: PathBuf::from(parent),
            name,
        })
    }

    /// Whether a cgroup named `name` in the pattern's folder is one it matches.
    pub fn matches(&self, name: &str) -> bool {
        self.name.is_match(name)
    }
}

/// A configured cgroup: absolute, or relative to the cgroup2 mount.
pub fn configured_cgroup(path: &Path) -> Result<PathBuf> {
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cgroup2_root()?.join(path)
    };
    if !full.join("cgroup.procs").exists() {
        anyhow::bail!(
            "scope.cgroups: {} is not a cgroup v2 folder (no cgroup.procs)",
            full.display()
        );
    }
    Ok(full)
}

#[cfg(test)]
mod pattern_tests {
    use super::CgroupPattern;

    #[test]
    fn a_pattern_matches_the_cgroups_of_one_folder_by_their_names() {
        let pattern = CgroupPattern::parse("machine.slice/libpod-*.scope").unwrap();
        assert_eq!(pattern.parent, std::path::Path::new("machine.slice"));
        assert!(pattern.matches("libpod-0123abcd.scope"));
        assert!(!pattern.matches("libpod-conmon-0123abcd.scope/x"));
        assert!(!pattern.matches("systemd-machined.service"));
        let podman = CgroupPattern::parse("/libpod_parent/libpod-*").unwrap();
        assert_eq!(podman.parent, std::path::Path::new("libpod_parent"));
        assert!(podman.matches("libpod-4f0e"));
        assert!(!podman.matches("conmon"));
    }

    #[test]
    fn a_pattern_refuses_wildcards_above_its_last_part_and_says_what_to_write() {
        for (text, says) in [
            ("*.slice/docker-*.scope", "only its last part"),
            ("system.slice/../x-*", "only its last part"),
            ("docker-*.scope", "names no folder"),
            ("system.slice/docker.scope", "no wildcard"),
        ] {
            let err = CgroupPattern::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
