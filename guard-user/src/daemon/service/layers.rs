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
            let line = format!(
                "layer {} (was {})",
                status,
                was.map_or("unreported", LayerState::as_str)
            );
            if status.state == LayerState::Up {
                tracing::info!("{line}");
            } else {
                tracing::warn!("{line}");
            }
            self.audit.record(
                RecordType::Layer,
                "root",
                json!({
                    "layer": status.layer,
                    "state": status.state,
                    "was": was,
                    "detail": status.detail,
                }),
            );
        }
        self.layer_states = now.iter().map(|s| (s.layer, s.state)).collect();
    }

    fn dns_layer(&self) -> LayerStatus {
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
