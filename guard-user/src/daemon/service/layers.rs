//! How each layer of enforcement stands in the daemon ([`crate::kernel::layers`]): what
//! `guard status` lists, `--check` and the `guard_layer_up` metric read, and `[require] layers`
//! holds the start to.

use anyhow::{Result, bail};
use serde_json::json;

use super::Daemon;
use crate::audit::record::RecordType;
use crate::kernel::layers::{
    FileGaps, FrontEndLayers, Layer, LayerState, LayerStatus, all_layers, unmet,
};
use crate::policy::approval::ApprovalPolicy;

impl Daemon {
    pub fn layers(&self) -> Vec<LayerStatus> {
        let file_gaps = FileGaps::of(&self.not_enforced());
        let kernel = self.core.enforcer().kernel_layers(
            file_gaps,
            Some(
                "each `guard run` under the daemon holds the write denials that name existing \
                 paths with read-only binds and Landlock",
            ),
        );
        all_layers(
            kernel,
            FrontEndLayers {
                dns: self.dns_layer(),
                hold: self.hold_layer(),
                audit: self.audit.layer(),
                export: self.audit.export_layer(),
            },
        )
    }

    /// Refuses the start when a layer `[require] layers` names does not hold, naming each.
    pub(super) fn check_required_layers(&self) -> Result<()> {
        let layers = self.layers();
        let unmet = unmet(&layers, &self.config.require.layers);
        if unmet.is_empty() {
            return Ok(());
        }
        let said: Vec<String> = unmet.iter().map(ToString::to_string).collect();
        bail!(
            "[require] layers names layers that do not hold: {}; fix that, or take them out of \
             [require] layers{}",
            said.join("; "),
            self.config
                .file
                .as_ref()
                .map(|f| format!(" in {}", f.display()))
                .unwrap_or_default()
        )
    }

    /// Records each layer whose state changed since the last look (the first look, at the
    /// start, only remembers): a `layer` audit record, sent on with the others, and a line in
    /// the daemon's log. Called on the loop's tick, after detached links were put back.
    pub(super) fn record_layer_changes(&mut self) {
        let now = self.layers();
        let first = self.layer_states.is_empty();
        for status in &now {
            let was = self
                .layer_states
                .iter()
                .find(|(layer, _)| *layer == status.layer)
                .map(|(_, state)| *state);
            if first || was == Some(status.state) {
                continue;
            }
            self.record_layer(status.layer, status.state, was, &status.detail);
        }
        self.layer_states = now.iter().map(|s| (s.layer, s.state)).collect();
    }

    /// Starts guard's resolver again, on the port the kernel's redirect sends the scopes'
    /// queries to, when it stopped (a task that ended); recorded both ways as `layer` records.
    /// Until it answers again the scopes' queries fail (nothing listens on the port): closed.
    pub(super) async fn revive_resolver(&mut self) {
        if let Some(server) = self.name_server.as_mut()
            && let Some(why) = server.stopped()
        {
            let port = server.port();
            // Dropped: its other tasks end and its sockets close, so the port is free.
            self.name_server = None;
            let detail = format!("guard's resolver on port {port} stopped: {why}");
            self.record_layer(
                Layer::Dns,
                LayerState::Missing,
                Some(LayerState::Up),
                &detail,
            );
            self.resolver_down = Some((port, detail));
        }
        let (Some((port, _)), Some((config, sink))) = (&self.resolver_down, &self.resolver_start)
        else {
            return;
        };
        let port = *port;
        match crate::resolve::Resolver::start_on(
            config.clone(),
            self.names.clone(),
            sink.clone(),
            port,
        )
        .await
        {
            Ok(server) => {
                self.core.names_mut().refresh_through(server.refresher());
                self.name_server = Some(server);
                self.resolver_down = None;
                let detail = format!("guard's resolver started again on port {port}");
                self.record_layer(
                    Layer::Dns,
                    LayerState::Up,
                    Some(LayerState::Missing),
                    &detail,
                );
            }
            Err(err) => {
                tracing::warn!("starting guard's resolver again on port {port}: {err:#}");
            }
        }
    }

    /// One `layer` record and log line, and the state remembered so the next look does not
    /// say it again.
    fn record_layer(
        &mut self,
        layer: Layer,
        state: LayerState,
        was: Option<LayerState>,
        detail: &str,
    ) {
        let line = format!(
            "layer {}: {} (was {}): {detail}",
            layer.as_str(),
            state.as_str(),
            was.map_or("unreported", LayerState::as_str)
        );
        if state == LayerState::Up {
            tracing::info!("{line}");
        } else {
            tracing::warn!("{line}");
        }
        self.audit.record(
            RecordType::Layer,
            "root",
            json!({ "layer": layer, "state": state, "was": was, "detail": detail }),
        );
        if let Some(known) = self.layer_states.iter_mut().find(|(l, _)| *l == layer) {
            known.1 = state;
        }
    }

    fn dns_layer(&self) -> LayerStatus {
        if let Some((_, why)) = &self.resolver_down {
            return LayerStatus::new(
                Layer::Dns,
                LayerState::Missing,
                format!("{why}; starting it again (the scopes' queries fail meanwhile)"),
            );
        }
        match &self.name_server {
            Some(server) => LayerStatus::new(
                Layer::Dns,
                LayerState::Up,
                format!(
                    "guard's resolver on port {}, the scopes' DNS redirected to it",
                    server.port()
                ),
            ),
            None if !self.config.resolver.enabled => LayerStatus::new(
                Layer::Dns,
                LayerState::Off,
                "[resolver] enabled = false: the scopes' DNS goes where it is sent, decided by \
                 address",
            ),
            None => LayerStatus::new(
                Layer::Dns,
                LayerState::Missing,
                "guard's resolver is not in the path of the scopes' DNS (no upstream name server \
                 could be chosen; the daemon's log says why): names are decided by address",
            ),
        }
    }

    fn hold_layer(&self) -> LayerStatus {
        if self.config.asks.approval() == ApprovalPolicy::Never {
            LayerStatus::new(
                Layer::Hold,
                LayerState::Off,
                "[asks] approval = \"never\": a prompt is refused at once, with no ask",
            )
        } else if self.core.enforcer().holds_network() {
            LayerStatus::new(
                Layer::Hold,
                LayerState::Up,
                "a prompted connect waits in the kernel for its answer; a `guard run` under the \
                 daemon holds its prompted execs",
            )
        } else {
            LayerStatus::new(
                Layer::Hold,
                LayerState::Missing,
                "prompted connects are not held: they are refused at once",
            )
        }
    }
}
