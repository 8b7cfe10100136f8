//! Rules held beside the daemon's policy on some of its scopes: a run's overlay (`guard run
//! --socket S --overlay FILE -- CMD`), or a `[[scope.patterns]]` pattern's rules (`patterns.rs`).
//! Each gets a program set of its own (a follower, see `Enforcer::follow`) holding those rules
//! alone, stacked on its scopes beside the daemon's set, which holds the scopes too. Both sets
//! decide every exec and connect there and the kernel refuses what either refuses, so a scope's
//! decision is the stronger of the daemon's and the overlay's, exactly: an allow of the overlay
//! cannot admit what the daemon's policy prompts or refuses, its unmatched defaults included.
//! What the overlay does not set has no say (`Policy::without_say_where_unset`).
//!
//! Both sets' prompts become asks of the scope, and every approval is written to both (an
//! approval never overrides a `forbidden`), so an answer lets a call through only where each set
//! prompted at most.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;

use anyhow::{Context, Result};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::UnboundedSender;

use super::Daemon;
use crate::asks::Approvals;
use crate::compile::CompileEnv;
use crate::compile::encode::ExecMapSizes;
use crate::compile::image::EnforcementImage;
use crate::daemon::wire::protocol::OverlayFile;
use crate::in_force::{InForce, Modes};
use crate::kernel::events::{EventReader, KernelEvent};
use crate::kernel::{Backend, Enforcer};
use crate::policy::Policy;
use crate::policy::approval::ApprovalPolicy;
use crate::policy::parser::PolicyParser;
use crate::resolve::known::KnownNames;

/// Files one overlay may have: any local user may send one, and each is evaluated (within the
/// parser's bounds on steps and memory) by the daemon.
pub const MAX_OVERLAY_FILES: usize = 16;

/// Overlays in force at once: each is a program set of about 20 MiB of kernel memory, loaded
/// for any local user's run.
pub const MAX_OVERLAYS: usize = 32;

/// Events of an overlay's set.
pub type OverlayEvents = Vec<KernelEvent>;

/// The overlays in force, by the scope each was made for: a run's, or a pattern's folder.
pub type Overlays = HashMap<u64, Overlay>;

/// One overlay: its policy and the program set that holds it, stacked on the daemon's core.
pub struct Overlay {
    /// The files it was read from (as a run's client named them).
    pub files: Vec<String>,
    in_force: InForce,
    /// The scopes (cgroup ids) its set lists in scope.
    scopes: BTreeSet<u64>,
    /// Passes the set's events to the daemon's loop; stopped when the overlay goes.
    forwarder: tokio::task::JoinHandle<()>,
}

impl Drop for Overlay {
    fn drop(&mut self) {
        // The set's links go with its `Ebpf` (none is pinned): the run is then held by the
        // daemon's set alone, as every run.
        self.forwarder.abort();
    }
}

/// How an overlay's set is made beside the daemon's.
pub struct OverlayEnv<'a> {
    pub backend: Backend,
    /// guard's resolver, where the daemon's set sends the scopes' DNS.
    pub resolver_port: Option<u16>,
    pub names: &'a KnownNames,
    pub approvals: &'a Approvals,
    pub modes: Modes,
}

/// A run's overlay's policy as its files say (at most [`MAX_OVERLAY_FILES`]), before the
/// approval policy: what a bounded child evaluates first (`daemon::overlay_eval`), then the
/// daemon off its loop.
pub fn parse(files: &[OverlayFile]) -> Result<Policy, String> {
    if files.len() > MAX_OVERLAY_FILES {
        return Err(format!(
            "an overlay has at most {MAX_OVERLAY_FILES} files, and this one has {}: put its \
             rules in fewer files",
            files.len()
        ));
    }
    read_files(files)
}

/// An overlay's policy: its files parsed in order, as one rules folder is, with the approval
/// policy's kernel view. A file that does not parse is an error naming it and its line.
pub fn parse_files(files: &[OverlayFile], approval: ApprovalPolicy) -> Result<Policy, String> {
    read_files(files).map(|policy| approval.kernel_policy(policy))
}

/// The files parsed in order; nothing is loaded.
fn read_files(files: &[OverlayFile]) -> Result<Policy, String> {
    if files.is_empty() {
        return Err("an overlay needs at least one rules file".to_string());
    }
    let mut parser = PolicyParser::new();
    for file in files {
        parser
            .parse(&file.name, &file.text)
            .map_err(|err| format!("the overlay {}: {err}", file.name))?;
    }
    Ok(parser.build().without_say_where_unset())
}

impl Overlay {
    /// Loads a follower set holding `policy` (the approvals on top), named by `files`; nothing
    /// is attached or in scope yet ([`Overlay::attach`], [`Overlay::list`]). Its events go to
    /// `sink`.
    pub fn load(
        files: Vec<String>,
        policy: Policy,
        env: &OverlayEnv,
        sink: UnboundedSender<OverlayEvents>,
    ) -> Result<Overlay> {
        let mut enforcer = Enforcer::load_sized(env.backend, ExecMapSizes::FOLLOWER)?;
        enforcer.follow(env.resolver_port)?;
        let events = enforcer.events()?;
        let in_force = InForce::start(
            enforcer,
            policy,
            (env.names, env.approvals),
            CompileEnv::from_process(),
            env.modes,
        )?;
        let forwarder = forward_events(events, sink)?;
        Ok(Overlay {
            files,
            in_force,
            scopes: BTreeSet::new(),
            forwarder,
        })
    }

    /// Attaches the set's cgroup programs to `cgroup` (before the daemon's set is attached
    /// there, if it is: a cgroup's programs run in the order they were attached).
    pub fn attach(&mut self, cgroup: &Path) -> Result<()> {
        self.in_force.enforcer_mut().attach_cgroup(cgroup)
    }

    /// Pins the set's links in `dir` (a folder on a bpffs), so it holds its cgroups after the
    /// daemon is gone, until [`crate::kernel::pins::release`] removes them.
    pub fn pin(&mut self, dir: &Path) -> Result<()> {
        self.in_force.enforcer_mut().pin_links(dir)
    }

    /// Lists cgroup `id` in scope in the set.
    pub fn list(&mut self, id: u64) -> Result<()> {
        self.in_force.enforcer_mut().add_scope(id)?;
        self.scopes.insert(id);
        Ok(())
    }

    /// Lists cgroup `id` as exempt in the set (a cgroup a pattern's folder holds that the
    /// pattern does not match).
    pub fn exempt(&mut self, id: u64) -> Result<()> {
        self.in_force.enforcer_mut().exempt_scope(id)
    }

    /// Removes cgroup `id`'s listing (it is gone).
    pub fn unlist(&mut self, id: u64) -> Result<()> {
        self.scopes.remove(&id);
        self.in_force.enforcer_mut().remove_scope(id)
    }

    /// Whether its set decides for scope `id`.
    pub fn holds(&self, id: u64) -> bool {
        self.scopes.contains(&id)
    }

    pub fn policy(&self) -> &Policy {
        self.in_force.policy()
    }

    pub fn image(&self) -> &EnforcementImage {
        self.in_force.image()
    }

    /// Its program set, as the daemon's core changes it (see [`crate::in_force::Core`]).
    pub fn in_force_mut(&mut self) -> &mut InForce {
        &mut self.in_force
    }
}

impl Daemon {
    /// Loads a follower set holding `policy`, named by `files`, with what is known of the
    /// names and the approvals on top; nothing attached or listed yet.
    pub(super) fn load_overlay(&self, files: Vec<String>, policy: Policy) -> Result<Overlay> {
        let env = OverlayEnv {
            backend: self.core.enforcer().backend(),
            resolver_port: self
                .name_server
                .as_ref()
                .map(crate::resolve::Resolver::port),
            names: self.core.names(),
            approvals: self.core.approvals(),
            modes: Modes {
                audit_only: self.config.audit_only,
                record_allowed: self.config.audit.record_allowed,
            },
        };
        Overlay::load(files, policy, &env, self.overlay_sink.clone())
    }

    /// Puts `policy`, the overlay read from `files`, in force on run scope `id`.
    pub(super) fn start_overlay(
        &mut self,
        files: &[OverlayFile],
        policy: Policy,
        id: u64,
    ) -> Result<()> {
        let path = self
            .scopes
            .by_id
            .get(&id)
            .map(|s| s.path.clone())
            .ok_or_else(|| anyhow::anyhow!("run scope {id} is gone"))?;
        let names = files.iter().map(|f| f.name.clone()).collect();
        let mut overlay = self.load_overlay(names, policy)?;
        overlay.attach(&path)?;
        overlay.list(id)?;
        self.overlays.insert(id, overlay);
        Ok(())
    }

    /// How many runs hold an overlay (the patterns' and pods' sets are not counted).
    pub(super) fn run_overlays(&self) -> usize {
        let pods = self
            .pods
            .as_ref()
            .map_or(0, |p| p.overlays() + usize::from(p.unready_loaded()));
        self.overlays
            .len()
            .saturating_sub(self.patterns.len())
            .saturating_sub(pods)
    }

    /// Events of an overlay's set, taken as the daemon's own.
    pub fn on_overlay_events(&mut self, events: OverlayEvents) {
        let now = std::time::Instant::now();
        for event in events {
            self.take_event(event, now, false);
        }
    }
}

/// The overlay whose set decides for scope `id`, if one does.
pub fn holding(overlays: &Overlays, id: u64) -> Option<&Overlay> {
    overlays
        .get(&id)
        .filter(|o| o.holds(id))
        .or_else(|| overlays.values().find(|o| o.holds(id)))
}

/// The image that decided `event`: its scope's overlay's, or the daemon's.
pub fn image_of<'a>(
    daemon: &'a EnforcementImage,
    overlays: &'a Overlays,
    event: &KernelEvent,
) -> &'a EnforcementImage {
    match holding(overlays, event.scope) {
        Some(overlay) if event.overlay => overlay.image(),
        _ => daemon,
    }
}

/// A task that drains the set's ring buffer whenever it has events and sends them to `sink`.
fn forward_events(
    mut reader: EventReader,
    sink: UnboundedSender<OverlayEvents>,
) -> Result<tokio::task::JoinHandle<()>> {
    // SAFETY: the reader's ring buffer fd, open while the reader lives (the task owns both).
    let fd = unsafe { BorrowedFd::borrow_raw(reader.as_raw_fd()) }
        .try_clone_to_owned()
        .context("duplicating an overlay's ring buffer fd")?;
    // SAFETY: `fd` is owned here and closed only when `ring` drops it.
    let ring = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .context("polling an overlay's ring buffer")?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok(mut ready) = ring.readable().await else {
                break;
            };
            // Cleared before the drain: an event that arrives during it wakes this again.
            ready.clear_ready();
            let mut events = reader.drain();
            for event in &mut events {
                event.overlay = true;
            }
            if !events.is_empty() && sink.send(events).is_err() {
                break;
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Decision;

    fn file(name: &str, text: &str) -> OverlayFile {
        OverlayFile {
            name: name.into(),
            text: text.into(),
        }
    }

    #[test]
    fn what_an_overlay_does_not_set_has_no_say_and_what_it_sets_holds() {
        let silent = parse(&[file(
            "a.rules",
            "prefix_rule(pattern=[\"curl\"], decision=\"forbidden\")\n",
        )])
        .unwrap();
        let settings = silent.enforcement();
        assert_eq!(settings.unmatched_exec, Decision::Allow);
        assert_eq!(settings.unmatched_network, Decision::Allow);
        assert_eq!(settings.anonymous_exec, Decision::Allow);
        assert_eq!(
            settings.socket_kinds,
            crate::policy::rule::SocketKinds::all()
        );
        let strict = parse(&[file(
            "b.rules",
            "enforcement(unmatched_network=\"forbidden\", anonymous_exec=\"forbidden\")\n",
        )])
        .unwrap();
        let settings = strict.enforcement();
        assert_eq!(settings.unmatched_network, Decision::Forbidden);
        assert_eq!(settings.anonymous_exec, Decision::Forbidden);
        assert_eq!(settings.unmatched_exec, Decision::Allow);
    }

    #[test]
    fn an_overlay_that_does_not_parse_names_its_file_and_line() {
        let err = parse(&[
            file(
                "ok.rules",
                "prefix_rule(pattern=[\"ls\"], decision=\"allow\")\n",
            ),
            file(
                "bad.rules",
                "\nprefix_rule(pattern=[\"rm\"], decision=\"nope\")\n",
            ),
        ])
        .unwrap_err();
        assert!(err.contains("bad.rules:2"), "{err}");
        assert!(parse(&[]).is_err());
    }
}
