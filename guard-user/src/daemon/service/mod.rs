//! The daemon's state and everything that changes it. One task owns it (see `server.rs`): the
//! policy, the compiled image, the kernel programs and maps, the scopes, asks and approvals.
//! Requests, kernel events and timers reach it one at a time, so no change can interleave with
//! another, and every change to the maps goes through [`Daemon::rebuild`], whose map sync
//! writes new entries before it removes stale ones.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::audit::{AuditTrail, HistoryRead};
use super::config::Config;
use super::peer::{PeerCredentials, subject, user_name};
use super::run_stream::repeat_key;
use super::scopes::{Membership, Scopes, configured_cgroup, own_cgroup};
use super::wire::protocol::{ErrorCode, OverlayFile, Request, ResponseLine, stream_line};
use super::wire::responses::ScopeKind;
use crate::asks::AskBook;
use crate::asks::blocked_request;
use crate::asks::event::Asking;
use crate::audit::filter::AuditFilter;
use crate::audit::{AuditRecord, RecordType};
use crate::authz::{Attributes, AuthzPolicy, REFUSED_IN_SCOPE, Request as AuthzRequest, Subject};
use crate::compile::image::EnforcementImage;
use crate::compile::{CompileEnv, host_names};
use crate::confine::sandbox::SandboxPlan;
use crate::daemon::wire::responses::to_json;
use crate::daemon::wire::responses::{
    Blocked, ReloadResponse, ResolverStatus, RunEvent, RunResponse, WatchEvent,
};
use crate::in_force::{Core, InForce, Modes};
use crate::kernel::events::{EventReader, KernelEvent};
use crate::kernel::scope::{cgroup_id, cgroup2_root};
use crate::kernel::{Backend, Enforcer, pins};
use crate::policy::approval::ApprovalPolicy;
use crate::policy::load::{LoadedPolicy, RulesSource, load_policy_protecting};
use crate::resolve::known::KnownNames;
use crate::resolve::lookup::{DnsCache, DnsConfig, DnsResolver};
use crate::resolve::{NamePolicy, Resolver, ResolverConfig, ResolverEvent, ResolverNote};

mod answers;
mod console;
mod events;
mod held;
mod layers;
mod metrics;
mod names;
mod overlays;
mod patterns;
mod pods;
mod reload;
mod requests;
mod runs;
mod start;
mod status;
mod tick;

pub use held::WaitingCall;
pub use overlays::OverlayEvents;
pub use overlays::parse as parse_overlay;
pub use requests::Handled;
pub use runs::PendingRun;
pub use start::CONTROL_SOCKET_ORIGIN;

// The parts, one job each, read this module's imports and each other's shared helpers through
// `use super::*`.
use requests::{answer, may_answer, peer_process};
use start::{load, load_authz, log_unheld_allowances};

pub struct Daemon {
    pub config: Config,
    /// The console's links and sessions (`[console] listen`), shared with its page's server.
    pub console_logins: Option<Arc<crate::daemon::console::Logins>>,
    authz: Arc<AuthzPolicy>,
    authz_source: String,
    /// The files the policy was loaded from, and the overlay files.
    sources: Vec<RulesSource>,
    overlay_sources: Vec<RulesSource>,
    /// Where guard resolves names itself.
    resolver: DnsResolver,
    /// What guard's resolver decides by name.
    names: Arc<RwLock<NamePolicy>>,
    name_server: Option<Resolver>,
    /// How `name_server` was started, to start it again on its port if it stops.
    resolver_start: Option<(ResolverConfig, crate::resolve::EventSink)>,
    /// Why guard's resolver is not answering, and the port it is started again on each tick.
    resolver_down: Option<(u16, String)>,
    /// Taken by the server loop, which hands each event to [`Daemon::on_resolver_events`].
    pub resolver_events: Option<UnboundedReceiver<ResolverEvent>>,
    /// The policy in force, its approvals (keyed by scope) and what is known of its names
    /// (answers keyed by scope); the overlays' sets are stacked on it.
    core: Core,
    pub events: EventReader,
    scopes: Scopes,
    asks: AskBook,
    watchers: Vec<Watcher>,
    audit: AuditTrail,
    /// What the metrics count that only the daemon can label.
    tally: crate::daemon::metrics::tally::Tally,
    started: Instant,
    generation: PathBuf,
    /// Why the last reload failed, until one succeeds.
    last_reload_error: Option<String>,
    /// The last pinned link found detached and attached again, as a sentence.
    last_link_repair: Option<String>,
    /// Each layer's state at the last look ([`Daemon::record_layer_changes`]), and when.
    layer_states: Vec<(
        crate::kernel::layers::Layer,
        crate::kernel::layers::LayerState,
    )>,
    layers_looked_at: Instant,
    /// Notes worth saying once at start (e.g. an audit log that cannot be opened).
    pub notes: Vec<String>,
    /// Each run hold says here which scope has a newly held call.
    held_wake: UnboundedSender<u64>,
    /// Taken by the server loop, which hands each to [`Daemon::on_held`].
    pub held_calls: Option<UnboundedReceiver<u64>>,
    /// Connects and sends the kernel holds, waiting for their asks (`held.rs`).
    held_sockets: Vec<held::WaitingSocket>,
    /// Where held connects to stand-in addresses wait.
    splices: Option<crate::hold::splice::SpliceListener>,
    /// The runs' overlays (`guard run --overlay`), by run scope, and the patterns' rules, by
    /// their folder's cgroup id.
    overlays: overlays::Overlays,
    /// `[[scope.patterns]]`: their folders and the cgroups seen there.
    patterns: Vec<patterns::PatternScope>,
    /// `guard node`: the node's pods and what holds each.
    pods: Option<pods::PodScopes>,
    /// Where the overlays' sets send their events.
    overlay_sink: UnboundedSender<OverlayEvents>,
    /// Taken by the server loop, which hands each batch to [`Daemon::on_overlay_events`].
    pub overlay_events: Option<UnboundedReceiver<OverlayEvents>>,
    /// `guard node`: a folder appeared below the pods' parent; taken by the server loop, which
    /// calls [`Daemon::watch_pods`] at once.
    pub pod_cgroups: Option<UnboundedReceiver<()>>,
    /// `guard node`: spare sets loaded off the loop, and where they are sent.
    spare_sink: UnboundedSender<Result<overlays::Overlay>>,
    pub spare_sets: Option<UnboundedReceiver<Result<overlays::Overlay>>>,
}

/// A `guard watch` stream, and whose asks it is shown (`None`: every ask).
struct Watcher {
    subject: Option<Subject>,
    stream: UnboundedSender<String>,
}

impl Daemon {
    /// The program sets stacked on the daemon's core: the overlays' and patterns'.
    fn stacked(overlays: &mut overlays::Overlays) -> impl Iterator<Item = (u64, &mut InForce)> {
        overlays
            .iter_mut()
            .map(|(scope, overlay)| (*scope, overlay.in_force_mut()))
    }

    /// After each turn of the loop: the turn's audit records go to the writer as one batch.
    pub fn end_turn(&mut self) {
        self.settle_held();
        self.audit.send_pending();
    }

    /// The last words before a clean stop: the programs stay pinned (enforcement goes on until
    /// the next daemon takes over, or `guard release`).
    pub fn stop(&mut self) {
        self.release_held();
        let events = self.events.drain();
        self.on_events(events);
        self.audit.record(
            RecordType::DaemonStop,
            "root",
            json!({"pinned": self.generation.display().to_string()}),
        );
        self.audit.close();
    }
}

/// How long the daemon waits between housekeeping rounds.
pub const TICK: Duration = Duration::from_millis(250);
