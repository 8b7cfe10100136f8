//! Runs with an overlay (`guard run --socket S --overlay FILE -- CMD`): the run's scope holds
//! the daemon's policy tightened by FILE. Each such run gets a program set of its own (a
//! follower, see `Enforcer::follow`) holding the overlay's rules alone, stacked on its scope
//! beside the daemon's set, which still lists the scope as every run's. Both decide every exec
//! and connect of the run and the kernel refuses what either refuses, so the run's decision is
//! the stronger of the daemon's and the overlay's, exactly: an allow of the overlay cannot
//! admit what the daemon's policy prompts or refuses, its unmatched defaults included. What
//! the overlay does not set has no say (`Policy::without_say_where_unset`).
//!
//! Both sets' prompts become asks of the run's scope, and every approval is written to both
//! (an approval never overrides a `forbidden`), so an answer lets the call through only where
//! each set prompted at most.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;

use anyhow::{Context, Result};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::UnboundedSender;

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
use crate::resolve::answers::KnownAddresses;

/// Files one overlay may have: any local user may send one, and each is evaluated (within the
/// parser's bounds on steps and memory) by the daemon.
pub const MAX_OVERLAY_FILES: usize = 16;

/// Overlays in force at once: each is a program set of about 24 MiB of kernel memory, loaded
/// for any local user's run.
pub const MAX_OVERLAYS: usize = 32;

/// Events of an overlay's set, with the run scope (cgroup id) it holds.
pub type OverlayEvents = (u64, Vec<KernelEvent>);

/// The overlays in force, by the run scope each holds.
pub type Overlays = HashMap<u64, Overlay>;

/// One run's overlay: its policy and the program set that holds it.
pub struct Overlay {
    /// The files it was read from, as the client named them.
    pub files: Vec<String>,
    policy: Policy,
    in_force: InForce,
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
    pub known: &'a KnownAddresses<'a>,
    pub approvals: &'a Approvals,
    pub modes: Modes,
}

/// The overlay's policy: its files parsed in order, as one rules folder is. A file that does
/// not parse is an error naming it and its line; nothing is loaded.
pub fn parse(files: &[OverlayFile], approval: ApprovalPolicy) -> Result<Policy, String> {
    if files.is_empty() {
        return Err("an overlay needs at least one rules file".to_string());
    }
    if files.len() > MAX_OVERLAY_FILES {
        return Err(format!(
            "an overlay has at most {MAX_OVERLAY_FILES} files, and this one has {}: put its \
             rules in fewer files",
            files.len()
        ));
    }
    let mut parser = PolicyParser::new();
    for file in files {
        parser
            .parse(&file.name, &file.text)
            .map_err(|err| format!("the overlay {}: {err}", file.name))?;
    }
    Ok(approval.kernel_policy(parser.build().without_say_where_unset()))
}

impl Overlay {
    /// Loads a follower set holding `policy` (the approvals on top), attaches it to the run
    /// scope `cgroup` (id `scope`) and lists the scope in it. Its events go to `sink`.
    pub fn start(
        files: &[OverlayFile],
        policy: Policy,
        (scope, cgroup): (u64, &Path),
        env: &OverlayEnv,
        sink: UnboundedSender<OverlayEvents>,
    ) -> Result<Overlay> {
        let mut enforcer = Enforcer::load_sized(env.backend, ExecMapSizes::FOLLOWER)?;
        enforcer.follow(env.resolver_port)?;
        let events = enforcer.events()?;
        let mut in_force = InForce::start(
            enforcer,
            &policy,
            env.known,
            CompileEnv::from_process(),
            env.modes,
        )?;
        in_force.rebuild(&policy, env.known, env.approvals)?;
        let enforcer = in_force.enforcer_mut();
        enforcer.attach_cgroup(cgroup)?;
        enforcer.add_scope(scope)?;
        let forwarder = forward_events(events, scope, sink)?;
        Ok(Overlay {
            files: files.iter().map(|f| f.name.clone()).collect(),
            policy,
            in_force,
            forwarder,
        })
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn image(&self) -> &EnforcementImage {
        self.in_force.image()
    }

    /// Compiles the overlay again with what is known of the names and `approvals` on top.
    pub fn rebuild(&mut self, known: &KnownAddresses, approvals: &Approvals) -> Result<()> {
        self.in_force
            .rebuild(&self.policy, known, approvals)
            .map(drop)
    }

    /// Puts in force what is now known of `names`.
    pub fn update_names(&mut self, names: &[String], known: &KnownAddresses) -> Result<()> {
        self.in_force.update_names(names, known)
    }
}

/// The image that decided `event`: its run's overlay's, or the daemon's.
pub fn image_of<'a>(
    daemon: &'a InForce,
    overlays: &'a Overlays,
    event: &KernelEvent,
) -> &'a EnforcementImage {
    match overlays.get(&event.scope) {
        Some(overlay) if event.overlay => overlay.image(),
        _ => daemon.image(),
    }
}

/// A task that drains the set's ring buffer whenever it has events and sends them to `sink`.
fn forward_events(
    mut reader: EventReader,
    scope: u64,
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
            if !events.is_empty() && sink.send((scope, events)).is_err() {
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
        let silent = parse(
            &[file(
                "a.rules",
                "prefix_rule(pattern=[\"curl\"], decision=\"forbidden\")\n",
            )],
            ApprovalPolicy::OnRequest,
        )
        .unwrap();
        let settings = silent.enforcement();
        assert_eq!(settings.unmatched_exec, Decision::Allow);
        assert_eq!(settings.unmatched_network, Decision::Allow);
        assert_eq!(settings.anonymous_exec, Decision::Allow);
        assert_eq!(
            settings.socket_kinds,
            crate::policy::rule::SocketKinds::all()
        );
        let strict = parse(
            &[file(
                "b.rules",
                "enforcement(unmatched_network=\"forbidden\", anonymous_exec=\"forbidden\")\n",
            )],
            ApprovalPolicy::OnRequest,
        )
        .unwrap();
        let settings = strict.enforcement();
        assert_eq!(settings.unmatched_network, Decision::Forbidden);
        assert_eq!(settings.anonymous_exec, Decision::Forbidden);
        assert_eq!(settings.unmatched_exec, Decision::Allow);
    }

    #[test]
    fn an_overlay_that_does_not_parse_names_its_file_and_line() {
        let err = parse(
            &[
                file(
                    "ok.rules",
                    "prefix_rule(pattern=[\"ls\"], decision=\"allow\")\n",
                ),
                file(
                    "bad.rules",
                    "\nprefix_rule(pattern=[\"rm\"], decision=\"nope\")\n",
                ),
            ],
            ApprovalPolicy::OnRequest,
        )
        .unwrap_err();
        assert!(err.contains("bad.rules:2"), "{err}");
        assert!(parse(&[], ApprovalPolicy::OnRequest).is_err());
    }
}
