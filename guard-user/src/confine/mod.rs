//! Write confinement for the command `guard run` starts: the policy's `write(...)` denials (the
//! built-in protected paths and every `deny` pattern of its rule sets that names concrete
//! paths) turned into a plan of concrete paths, which [`landlock`] holds in the kernel.
//!
//! Landlock only grants: a ruleset lists what is allowed, and anything it handles but does not
//! grant is refused. So a plan that denies writes below `/etc/guard` grants write rights on
//! every sibling hierarchy along the way (`/bin`, `/tmp`, ..., `/etc/passwd`, `/etc/ssl`, ...)
//! and nothing on the folders on the way (`/`, `/etc`) themselves. Two things follow:
//!
//! - an entry made later directly in a folder on the way (a new file in `/etc`, or in the
//!   current folder when `write(.git/**)` is held at `$PWD/.git`) cannot be written, removed or
//!   renamed: it was not there when the rules were made, and the folder itself grants nothing;
//! - only concrete paths can be held: an absolute glob's literal part (`/srv/data/**` is
//!   `/srv/data` and everything below), or a relative pattern at the current folder
//!   (`.git/**` is `$PWD/.git`). A glob whose literal part is not a whole path (`/srv/*.log`,
//!   `*.env`) cannot be, and a path that does not exist yet has nothing to hold; both are
//!   reported, never silently dropped. `ask` tiers cannot prompt in Landlock and are reported
//!   as not enforced.
//!
//! Only write-type rights are handled, so reads and execs are never affected. Symlinks are
//! followed: a denial is on the file or folder a path names, wherever it is reached from.

pub mod capabilities;
pub mod landlock;
pub mod namespace;
pub mod sandbox;
pub mod sockets;
pub mod syscalls;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::Policy;
use crate::policy::paths::normalize_lexically;
use crate::policy::protected::{PROTECTED_PATHS_ORIGIN, protected_paths};
use crate::policy::rule::RuleOrigin;
use crate::policy::rule_set::{RuleSetPattern, Tool};

/// One `write(...)` pattern of a `deny` or `ask` tier, as the plan needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRule {
    /// As written: `write(.git/**)`.
    pub pattern: String,
    /// The subject glob (`.git/**`); `None` for a pattern that matches every path (`write`,
    /// `*`).
    pub glob: Option<String>,
    /// Where it was written: `team.rules:3`, or `<built-in protected paths>:1`.
    pub from: String,
    /// A built-in protected path (a missing fixed folder is not worth a note).
    pub builtin: bool,
}

impl WriteRule {
    fn new(pattern: &RuleSetPattern, origin: Option<&RuleOrigin>) -> WriteRule {
        let builtin = origin.is_some_and(|o| &*o.file == PROTECTED_PATHS_ORIGIN);
        WriteRule {
            pattern: pattern.text().to_string(),
            glob: pattern.subject_glob().map(str::to_string),
            from: origin
                .map(|o| format!("{}:{}", o.file, o.line))
                .unwrap_or_else(|| "<policy>".to_string()),
            builtin,
        }
    }

    /// The rule parsed back from its pattern text (what the daemon sends over the socket).
    pub fn parse(pattern: &str, from: &str, builtin: bool) -> Option<WriteRule> {
        let parsed = RuleSetPattern::parse(pattern).ok()?;
        parsed.covers_tool(Tool::Write).then(|| WriteRule {
            pattern: pattern.to_string(),
            glob: parsed.subject_glob().map(str::to_string),
            from: from.to_string(),
            builtin,
        })
    }
}

impl fmt::Display for WriteRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.pattern, self.from)
    }
}

/// The policy's write rules: every `deny` and `ask` pattern that covers the `write` tool, the
/// protected paths first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRules {
    pub deny: Vec<WriteRule>,
    pub ask: Vec<WriteRule>,
    /// The unix sockets allow rules name, held in place ([`sockets`]): their glob is the
    /// socket's name. Absent from an older daemon's answer.
    #[serde(default)]
    pub sockets: Vec<WriteRule>,
}

impl WriteRules {
    pub fn of_policy(policy: &Policy) -> WriteRules {
        let mut rules = WriteRules::default();
        for protected in policy.protected_paths() {
            let set = &protected.rule_set;
            rules.deny.extend(
                set.deny
                    .iter()
                    .map(|pattern| WriteRule::new(pattern, set.origin.as_ref())),
            );
        }
        for set in policy.rule_sets() {
            let writes = |patterns: &[RuleSetPattern]| -> Vec<WriteRule> {
                patterns
                    .iter()
                    .filter(|pattern| pattern.covers_tool(Tool::Write))
                    .map(|pattern| WriteRule::new(pattern, set.origin.as_ref()))
                    .collect()
            };
            rules.deny.extend(writes(&set.deny));
            rules.ask.extend(writes(&set.ask));
        }
        rules.sockets = sockets::allowed_sockets(policy);
        rules
    }

    /// The fixed protected paths alone, plus `extra` files, and the built-in allowed unix
    /// sockets: what a `guard run --socket` client holds when the daemon does not say which
    /// rules it has (an older daemon).
    pub fn fixed(extra: &[PathBuf]) -> WriteRules {
        let mut policy = Policy::default();
        policy.set_protected_paths(protected_paths(extra));
        WriteRules::of_policy(&policy)
    }
}

/// How a concrete path is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hold {
    /// No write to the path or anything below it.
    Beneath,
    /// A folder named without `/**`: its own entries cannot be made, removed or renamed; what
    /// is already inside stays writable.
    Entries,
}

/// A concrete path whose writes are refused, and the rule that asks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeniedPath {
    /// Canonical (symlinks resolved): Landlock holds inodes, not names.
    pub path: PathBuf,
    pub hold: Hold,
    pub rule: WriteRule,
}

/// A rule the plan cannot hold, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotHeld {
    pub rule: WriteRule,
    pub why: String,
}

/// A hierarchy that gets write rights: a sibling of the way to a denied path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub path: PathBuf,
    /// A folder (every write right, below it too) or anything else (the rights that apply to
    /// files: writing, truncating).
    pub folder: bool,
}

/// What the kernel is asked to hold for one command.
#[derive(Clone, Debug, Default)]
pub struct WritePlan {
    pub denied: Vec<DeniedPath>,
    /// `deny` rules that cannot be held (a glob that names no concrete path, a path that does
    /// not exist).
    pub not_held: Vec<NotHeld>,
    /// `ask` rules: Landlock cannot prompt.
    pub not_enforced: Vec<WriteRule>,
    /// Held only in part: relative patterns, which match below any folder, held at the
    /// current folder only.
    pub partly: Vec<NotHeld>,
    /// Guard's own folders that hold a missing protected path (the nearest existing folder
    /// above it, when that folder is guard's: see [`guards_own_holder`]): held read-only, so
    /// the missing path cannot be made to plant the next run's policy.
    pub missing_holders: Vec<PathBuf>,
}

impl WritePlan {
    /// The plan for `rules` with `cwd` as the command's current folder.
    pub fn new(rules: &WriteRules, cwd: &Path) -> WritePlan {
        let mut plan = WritePlan {
            not_enforced: rules.ask.clone(),
            ..WritePlan::default()
        };
        for rule in &rules.deny {
            match target(rule.glob.as_deref(), cwd) {
                Target::Unholdable(why) => plan.not_held.push(NotHeld {
                    rule: rule.clone(),
                    why,
                }),
                Target::Path {
                    path,
                    subtree,
                    relative,
                } => match path.canonicalize() {
                    Ok(canonical) => {
                        let hold = if !subtree && canonical.is_dir() {
                            Hold::Entries
                        } else {
                            Hold::Beneath
                        };
                        if relative {
                            plan.partly.push(NotHeld {
                                rule: rule.clone(),
                                why: format!(
                                    "held at {} only: the pattern matches below any folder, and \
                                     only what exists below the current folder's literal path \
                                     can be held",
                                    path.display()
                                ),
                            });
                        }
                        plan.denied.push(DeniedPath {
                            path: canonical,
                            hold,
                            rule: rule.clone(),
                        });
                    }
                    Err(err) => {
                        if rule.builtin
                            && err.kind() == std::io::ErrorKind::NotFound
                            && let Some(holder) = guards_own_holder(&path)
                            && !plan.missing_holders.contains(&holder)
                        {
                            plan.missing_holders.push(holder);
                        }
                        plan.not_held.push(NotHeld {
                        rule: rule.clone(),
                        why: if err.kind() == std::io::ErrorKind::NotFound {
                            format!(
                                "{} does not exist (Landlock holds only what exists; a file made \
                                 there later is not covered)",
                                path.display()
                            )
                        } else {
                            format!("{}: {err}", path.display())
                        },
                        })
                    }
                },
            }
        }
        for rule in &rules.sockets {
            match sockets::hold(rule) {
                Ok(held) => plan.denied.extend(held),
                Err(not_held) => plan.not_held.push(not_held),
            }
        }
        plan
    }

    /// The plan for `policy` (its protected paths and rule sets) with `cwd` as the command's
    /// current folder.
    pub fn for_policy(policy: &Policy, cwd: &Path) -> WritePlan {
        WritePlan::new(&WriteRules::of_policy(policy), cwd)
    }

    /// Whether there is nothing to deny (no ruleset is needed).
    pub fn is_empty(&self) -> bool {
        self.denied.is_empty()
    }

    /// `deny` rules written in the policy that are not (fully) held, and `ask` rules: what a
    /// person should hear about. Missing fixed folders are not among them.
    pub fn unheld_written_rules(&self) -> usize {
        self.not_held.iter().filter(|n| !n.rule.builtin).count()
            + self.partly.len()
            + self.not_enforced.len()
    }

    /// The paths denied below (after dropping those inside another), sorted.
    fn beneath(&self) -> BTreeSet<PathBuf> {
        let all: BTreeSet<&Path> = self
            .denied
            .iter()
            .filter(|d| d.hold == Hold::Beneath)
            .map(|d| d.path.as_path())
            .collect();
        all.iter()
            .filter(|path| !path.ancestors().skip(1).any(|a| all.contains(a)))
            .map(|path| path.to_path_buf())
            .collect()
    }

    /// The folders on the way to a denied path (and the folders held as [`Hold::Entries`]):
    /// they get no write right of their own, so their entries cannot be made, removed or
    /// renamed. Sorted, `/` first.
    pub fn ways(&self) -> BTreeSet<PathBuf> {
        let beneath = self.beneath();
        let inside_beneath = |path: &Path| path.ancestors().any(|a| beneath.contains(a));
        let mut ways = BTreeSet::new();
        let entries = self
            .denied
            .iter()
            .filter(|d| d.hold == Hold::Entries && !inside_beneath(&d.path))
            .map(|d| d.path.clone());
        for path in entries {
            ways.insert(path);
        }
        for path in beneath.iter().chain(ways.clone().iter()) {
            for ancestor in path.ancestors().skip(1) {
                ways.insert(ancestor.to_path_buf());
            }
        }
        ways
    }

    /// Whether the plan denies every write (`/` itself is denied below).
    pub fn denies_everything(&self) -> bool {
        self.beneath().contains(Path::new("/"))
    }

    /// Every hierarchy that gets write rights: at each folder on the way, each entry that is
    /// neither on the way nor denied. Symlinks are skipped (a write through one is decided at
    /// the file it reaches). A folder on the way that cannot be listed grants nothing below it
    /// (its entries' writes are refused); the error says which.
    pub fn grants(&self) -> (Vec<Grant>, Vec<String>) {
        let beneath = self.beneath();
        let ways = self.ways();
        let mut grants = Vec::new();
        let mut errors = Vec::new();
        if self.denies_everything() {
            return (grants, errors);
        }
        for way in &ways {
            let entries = match std::fs::read_dir(way) {
                Ok(entries) => entries,
                Err(err) => {
                    errors.push(format!("listing {}: {err}", way.display()));
                    continue;
                }
            };
            let mut found: Vec<Grant> = Vec::new();
            for entry in entries.flatten() {
                let path = entry.path();
                if ways.contains(&path) || beneath.contains(&path) {
                    continue;
                }
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_symlink() {
                    continue;
                }
                found.push(Grant {
                    path,
                    folder: kind.is_dir(),
                });
            }
            found.sort();
            grants.extend(found);
        }
        (grants, errors)
    }
}

/// How the command's writes are held, made in the parent before the fork.
#[derive(Debug)]
pub enum Holding {
    /// A private mount namespace with read-only binds (see [`namespace`]).
    Mounts(namespace::MountPlan),
    /// No mount namespace could be made (not root): the Landlock plan alone, which refuses
    /// new entries in every folder on the way to a denied path.
    LandlockOnly,
}

/// Everything put on the command between fork and exec, in this order: the mount namespace,
/// the Landlock domain (which then refuses mount and umount), the seccomp filter of the calls
/// that leave the scope ([`syscalls`]), the dropped capabilities.
#[derive(Debug)]
pub struct CommandConfinement {
    pub holding: Holding,
    pub landlock: landlock::Confinement,
    /// Whether [`capabilities::DROPPED`] are dropped (root only; `--keep-capabilities` keeps
    /// them).
    pub drop_capabilities: bool,
    /// Whether [`syscalls::program`] is put on the command (always, but for a plain spawn).
    pub refuse_escapes: bool,
}

impl CommandConfinement {
    /// The confinement for `plan`: binds in a mount namespace when this process can make one,
    /// else the Landlock plan. `keep_capabilities` keeps the root hardening off.
    pub fn prepare(plan: &WritePlan, keep_capabilities: bool) -> anyhow::Result<Self> {
        Self::prepare_sandboxed(plan, None, keep_capabilities)
    }

    /// [`CommandConfinement::prepare`], under a sandbox mode when `sandbox` is a restricted
    /// one: its ruleset instead of the mount lock, and its read-only folders as binds. A
    /// restricted mode needs a mount namespace (root).
    pub fn prepare_sandboxed(
        plan: &WritePlan,
        sandbox: Option<&sandbox::SandboxPlan>,
        keep_capabilities: bool,
    ) -> anyhow::Result<Self> {
        let root = capabilities::can_make_mount_namespace();
        if let Some(sandbox) = sandbox.filter(|s| s.is_restricted()) {
            if !root {
                anyhow::bail!(
                    "--sandbox {} needs root (a mount namespace keeps the workspace's .git \
                     read-only)",
                    sandbox.mode.as_str()
                );
            }
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            let plan = sandbox.with_read_only(plan);
            return Ok(CommandConfinement {
                holding: Holding::Mounts(namespace::MountPlan::new(&plan, &mountinfo)),
                landlock: landlock::sandbox(&sandbox.existing_roots())?,
                drop_capabilities: !keep_capabilities,
                refuse_escapes: true,
            });
        }
        let (holding, landlock) = if root {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            (
                Holding::Mounts(namespace::MountPlan::new(plan, &mountinfo)),
                landlock::mount_lock()?,
            )
        } else {
            (Holding::LandlockOnly, landlock::confinement(plan)?)
        };
        Ok(CommandConfinement {
            holding,
            landlock,
            drop_capabilities: root && !keep_capabilities,
            refuse_escapes: true,
        })
    }

    /// Nothing held, nothing dropped (a plain spawn).
    pub fn none() -> Self {
        CommandConfinement {
            holding: Holding::LandlockOnly,
            landlock: landlock::Confinement::Nothing,
            drop_capabilities: false,
            refuse_escapes: false,
        }
    }

    /// What the child does between fork and exec (owned, for `pre_exec`); keep `self` alive
    /// until the command has started (the ruleset's file descriptor is used there).
    pub fn steps(&self) -> PreExecSteps {
        PreExecSteps {
            mounts: match &self.holding {
                Holding::Mounts(mounts) => Some(mounts.clone()),
                Holding::LandlockOnly => None,
            },
            ruleset: self.landlock.ruleset_fd(),
            hold: None,
            escapes: self.refuse_escapes.then(syscalls::program),
            drop_capabilities: self.drop_capabilities,
        }
    }
}

/// [`CommandConfinement`]'s steps, made before the fork.
#[derive(Clone, Debug)]
pub struct PreExecSteps {
    mounts: Option<namespace::MountPlan>,
    ruleset: Option<std::os::fd::RawFd>,
    /// The seccomp filter that holds prompted execs (installed while guard's root still has
    /// CAP_SYS_ADMIN, so the command needs no no-new-privileges).
    pub hold: Option<crate::hold::ChildEnd>,
    /// [`syscalls::program`], when the command gets it.
    escapes: Option<Vec<libc::sock_filter>>,
    drop_capabilities: bool,
}

impl PreExecSteps {
    /// Between fork and exec, in the child: only raw syscalls. Fails closed (the command does
    /// not start).
    pub fn apply(&self) -> std::io::Result<()> {
        if let Some(mounts) = &self.mounts {
            mounts.apply_from_pre_exec()?;
        }
        if let Some(fd) = self.ruleset {
            landlock::restrict_from_pre_exec(fd)?;
        }
        if let Some(program) = &self.escapes {
            syscalls::install_from_pre_exec(program)?;
        }
        if let Some(hold) = &self.hold {
            hold.install_from_pre_exec()?;
        }
        if self.drop_capabilities {
            capabilities::drop_from_pre_exec()?;
        }
        Ok(())
    }
}

/// The folder that holds the missing `path`'s place: its nearest existing ancestor, when that
/// folder is guard's own (its name starts with `guard`, as `/etc/guard` and `/var/lib/guard`
/// do). Any other folder (`/etc` when `/etc/guard` is missing) is not held: a read-only `/etc`
/// would stop ordinary work, so the missing path stays open there (see docs/limits.md).
pub fn guards_own_holder(path: &Path) -> Option<PathBuf> {
    let existing = path.ancestors().skip(1).find(|a| a.exists())?;
    let holder = existing.canonicalize().ok()?;
    let name = holder.file_name()?.to_string_lossy();
    name.starts_with("guard").then_some(holder)
}

/// What one rule's glob names.
enum Target {
    Path {
        /// Absolute, lexically normalised.
        path: PathBuf,
        /// `PATH/**`: the path and everything below it.
        subtree: bool,
        /// Written relative: it matches below any folder, held at the current one.
        relative: bool,
    },
    Unholdable(String),
}

fn target(glob: Option<&str>, cwd: &Path) -> Target {
    let Some(glob) = glob else {
        return Target::Path {
            path: PathBuf::from("/"),
            subtree: true,
            relative: false,
        };
    };
    let (anchored, relative) = if glob.starts_with('/') {
        (glob.to_string(), false)
    } else {
        // Relative patterns match below any folder (`**/` in front, see `rule_set`); a leading
        // `./` or `**/` says no more than that.
        let mut rest = glob;
        loop {
            if let Some(r) = rest.strip_prefix("./") {
                rest = r;
            } else if let Some(r) = rest.strip_prefix("**/") {
                rest = r;
            } else {
                break;
            }
        }
        if rest.is_empty() || rest == "**" {
            // Everything, anywhere.
            return Target::Path {
                path: PathBuf::from("/"),
                subtree: true,
                relative: false,
            };
        }
        let base = cwd.to_string_lossy();
        let base = globset::escape(base.trim_end_matches('/'));
        (format!("{base}/{rest}"), true)
    };
    let (literal, rest) = literal_prefix(&anchored);
    let (path, subtree) = if rest.is_empty() {
        (literal, false)
    } else if rest == "**" && literal.ends_with('/') {
        (literal, true)
    } else {
        return Target::Unholdable(format!(
            "Landlock holds concrete paths, and the glob names no single one (its literal part \
             is {literal:?}); only a literal path or a literal folder followed by `/**` can be \
             held"
        ));
    };
    let path = normalize_lexically(Path::new(&path));
    if path.components().any(|c| c == Component::ParentDir) {
        return Target::Unholdable("the path climbs above `/`".to_string());
    }
    Target::Path {
        path,
        subtree,
        relative,
    }
}

/// The literal text of `glob` up to its first glob metacharacter (`*`, `?`, `[`, `{`), with
/// escapes read (`\*`, and `[*]` as `globset::escape` writes it), and the rest from there.
fn literal_prefix(glob: &str) -> (String, &str) {
    let mut literal = String::new();
    let mut rest = glob;
    loop {
        let mut chars = rest.chars();
        let Some(c) = chars.next() else {
            return (literal, rest);
        };
        match c {
            '\\' => match chars.next() {
                Some(escaped) => {
                    literal.push(escaped);
                    rest = chars.as_str();
                }
                None => return (literal, rest),
            },
            '[' => {
                // `[c]` with one character other than `!` or `^` is that character.
                let mut peek = chars.clone();
                match (peek.next(), peek.next()) {
                    (Some(one), Some(']')) if one != '!' && one != '^' => {
                        literal.push(one);
                        rest = peek.as_str();
                    }
                    _ => return (literal, rest),
                }
            }
            '*' | '?' | '{' => return (literal, rest),
            other => {
                literal.push(other);
                rest = chars.as_str();
            }
        }
    }
}

#[cfg(test)]
mod tests;
