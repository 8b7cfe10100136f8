//! The health contract: each layer of enforcement, whether it holds now, and if not, why.
//! `guard run --require`, the daemon's `[require] layers`, `guard status --check` and the
//! `guard_layer_up` metric all read these reports, so a tool that must not run unprotected can
//! refuse instead of running with less than it asked for.
//!
//! The kernel's own layers (exec, network, unix sockets, devices, files) are read here from the
//! links an [`Enforcer`] holds; the others (guard's resolver, the hold, the audit log, its
//! export) are reported by the front end that runs them, in the same vocabulary.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::Enforcer;
use super::loader::Backend;

/// One layer of enforcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// Exec rules: the exec hook (a tracepoint on `cgroup`, `bprm_check_security` on `lsm`).
    Exec,
    /// Connects and sends by address: the connect and sendmsg hooks, and socket creation.
    Network,
    /// Connects and sends to unix sockets (kernel 6.7+).
    Unix,
    /// Device nodes (`cgroup/dev`).
    Devices,
    /// guard's resolver in the path of the scope's DNS (names decided for every protocol).
    Dns,
    /// Holding a prompted call until it is answered.
    Hold,
    /// `read(...)` and `write(...)` rules and the protected paths.
    Files,
    /// The audit log.
    Audit,
    /// The audit log sent on (syslog).
    Export,
}

impl Layer {
    pub const ALL: [Layer; 9] = [
        Layer::Exec,
        Layer::Network,
        Layer::Unix,
        Layer::Devices,
        Layer::Dns,
        Layer::Hold,
        Layer::Files,
        Layer::Audit,
        Layer::Export,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Exec => "exec",
            Layer::Network => "network",
            Layer::Unix => "unix",
            Layer::Devices => "devices",
            Layer::Dns => "dns",
            Layer::Hold => "hold",
            Layer::Files => "files",
            Layer::Audit => "audit",
            Layer::Export => "export",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Layer {
    type Err = String;

    fn from_str(text: &str) -> Result<Layer, String> {
        Layer::ALL
            .into_iter()
            .find(|layer| layer.as_str() == text.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = Layer::ALL.iter().map(|l| l.as_str()).collect();
                format!(
                    "no layer is called `{text}`; the layers are {}",
                    names.join(", ")
                )
            })
    }
}

/// How a layer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerState {
    /// It holds.
    Up,
    /// It holds in part (the detail says what it does not hold).
    Degraded,
    /// It should hold and does not: it could not be loaded, or it went away.
    Missing,
    /// Not asked for here (the detail says by what): nothing is promised of it.
    Off,
}

impl LayerState {
    pub fn as_str(self) -> &'static str {
        match self {
            LayerState::Up => "up",
            LayerState::Degraded => "degraded",
            LayerState::Missing => "missing",
            LayerState::Off => "off",
        }
    }
}

/// One layer's report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerStatus {
    pub layer: Layer,
    pub state: LayerState,
    /// What holds it, or why it does not hold.
    pub detail: String,
}

impl LayerStatus {
    pub fn new(layer: Layer, state: LayerState, detail: impl Into<String>) -> LayerStatus {
        LayerStatus {
            layer,
            state,
            detail: detail.into(),
        }
    }

    /// Missing or degraded: what `guard status --check` fails on.
    pub fn is_failing(&self) -> bool {
        matches!(self.state, LayerState::Missing | LayerState::Degraded)
    }
}

impl fmt::Display for LayerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {}: {}",
            self.layer,
            self.state.as_str(),
            self.detail
        )
    }
}

/// The reports of `required` layers that are not up, each once, in [`Layer::ALL`]'s order: a
/// run or a daemon that requires them refuses to start with these. A required layer `layers`
/// does not report at all (a daemon older than the caller) is missing: it fails closed.
pub fn unmet(layers: &[LayerStatus], required: &[Layer]) -> Vec<LayerStatus> {
    let mut wanted = required.to_vec();
    wanted.sort();
    wanted.dedup();
    wanted
        .into_iter()
        .filter_map(|layer| match layers.iter().find(|s| s.layer == layer) {
            Some(status) if status.state == LayerState::Up => None,
            Some(status) => Some(status.clone()),
            None => Some(LayerStatus::new(
                layer,
                LayerState::Missing,
                "not reported (a guard that does not know this layer)",
            )),
        })
        .collect()
}

/// How many of a policy's file rules a backend does not hold, by what they are about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileGaps {
    pub reads: usize,
    pub writes: usize,
}

impl FileGaps {
    /// Counted from `coverage::not_enforced` (a rule about both counts as a read).
    pub fn of(gaps: &[super::coverage::NotEnforced]) -> FileGaps {
        FileGaps {
            reads: gaps.iter().filter(|gap| gap.reads).count(),
            writes: gaps.iter().filter(|gap| gap.writes && !gap.reads).count(),
        }
    }
}

/// What the front end knows of the layers the kernel does not report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontEndLayers {
    pub dns: LayerStatus,
    pub hold: LayerStatus,
    pub audit: LayerStatus,
    pub export: LayerStatus,
}

impl Enforcer {
    /// The kernel's layers as this Enforcer holds them now: a program without a live link
    /// (never attached, or detached and not put back) leaves its layer missing. `file_gaps`:
    /// the policy's file rules this backend does not hold (`coverage::not_enforced`);
    /// `files_held`: what holds them instead (a run's read-only binds and Landlock), if
    /// anything does.
    pub fn kernel_layers(&self, file_gaps: FileGaps, files_held: Option<&str>) -> Vec<LayerStatus> {
        let attached = self.attached_programs();
        // Held: attached somewhere, and no link of it detached.
        let has = |name: &str| {
            attached.iter().any(|(n, _)| *n == name)
                && attached.iter().all(|(n, live)| *n != name || *live)
        };
        let missing_of = |names: &[&str]| -> Vec<String> {
            names
                .iter()
                .filter(|name| !has(name))
                .map(|name| name.to_string())
                .collect()
        };
        let from = |layer: Layer, names: &[&str], up: &str| {
            let missing = missing_of(names);
            if missing.is_empty() {
                LayerStatus::new(layer, LayerState::Up, up)
            } else {
                LayerStatus::new(
                    layer,
                    LayerState::Missing,
                    format!(
                        "{} not attached (never loaded, or detached and not put back)",
                        missing.join(", ")
                    ),
                )
            }
        };
        let lsm = self.backend() == Backend::Lsm;
        let mut layers = Vec::new();
        layers.push(if lsm {
            from(
                Layer::Exec,
                &["bprm_check_security", "sched_process_exec"],
                "bprm_check_security and the exec tracepoint",
            )
        } else {
            from(
                Layer::Exec,
                &["sched_process_exec"],
                "the exec tracepoint (SIGKILL before the new image runs)",
            )
        });
        layers.push(if lsm {
            from(
                Layer::Network,
                &["socket_connect", "socket_sendmsg", "sock_create"],
                "socket_connect, socket_sendmsg and cgroup/sock_create",
            )
        } else {
            from(
                Layer::Network,
                &[
                    "connect4",
                    "connect6",
                    "sendmsg4",
                    "sendmsg6",
                    "sock_create",
                ],
                "cgroup connect4/6, sendmsg4/6 and sock_create",
            )
        });
        layers.push(if self.decides_unix_sockets() {
            from(
                Layer::Unix,
                &["connect_unix", "sendmsg_unix"],
                "cgroup/connect_unix and cgroup/sendmsg_unix",
            )
        } else {
            LayerStatus::new(
                Layer::Unix,
                LayerState::Missing,
                "this kernel has no unix socket hooks (6.7+): connects and sends to unix sockets \
                 are not decided",
            )
        });
        layers.push(from(
            Layer::Devices,
            &["device_access"],
            "cgroup/dev: no device node made, no block device written",
        ));
        layers.push(if lsm {
            from(
                Layer::Files,
                &["file_open", "path_mkdir", "path_unlink", "path_rename"],
                "the LSM file hooks",
            )
        } else {
            let held = files_held.map(|how| format!("; {how}")).unwrap_or_default();
            if file_gaps.reads + file_gaps.writes == 0 {
                LayerStatus::new(
                    Layer::Files,
                    LayerState::Off,
                    format!(
                        "the policy has no file rule the cgroup backend would need to hold (it \
                         has no file hooks){held}"
                    ),
                )
            } else {
                LayerStatus::new(
                    Layer::Files,
                    LayerState::Degraded,
                    format!(
                        "the cgroup backend has no file hooks: {} read(...) and {} write(...) \
                         rules are not enforced by the kernel{held} (the lsm backend holds them)",
                        file_gaps.reads, file_gaps.writes
                    ),
                )
            }
        });
        layers
    }
}

/// Every layer, the kernel's and the front end's, in [`Layer::ALL`]'s order.
pub fn all_layers(kernel: Vec<LayerStatus>, front: FrontEndLayers) -> Vec<LayerStatus> {
    let mut layers = kernel;
    layers.extend([front.dns, front.hold, front.audit, front.export]);
    layers.sort_by_key(|status| status.layer);
    layers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_parses_by_its_name_and_a_wrong_name_says_which_exist() {
        assert_eq!(" dns".parse::<Layer>(), Ok(Layer::Dns));
        for layer in Layer::ALL {
            assert_eq!(layer.as_str().parse::<Layer>(), Ok(layer));
        }
        let err = "netwrok".parse::<Layer>().unwrap_err();
        assert!(
            err.contains("`netwrok`") && err.contains("network"),
            "{err}"
        );
    }

    #[test]
    fn only_required_layers_that_are_not_up_are_unmet() {
        let layers = [
            LayerStatus::new(Layer::Exec, LayerState::Up, "x"),
            LayerStatus::new(Layer::Files, LayerState::Degraded, "no hooks"),
            LayerStatus::new(Layer::Export, LayerState::Off, "not configured"),
            LayerStatus::new(Layer::Unix, LayerState::Missing, "old kernel"),
        ];
        let unmet_layers: Vec<(Layer, LayerState)> = unmet(
            &layers,
            &[Layer::Export, Layer::Exec, Layer::Exec, Layer::Dns],
        )
        .iter()
        .map(|s| (s.layer, s.state))
        .collect();
        assert_eq!(
            unmet_layers,
            [
                (Layer::Dns, LayerState::Missing),
                (Layer::Export, LayerState::Off)
            ],
            "an unreported layer fails closed"
        );
        let failing: Vec<Layer> = layers
            .iter()
            .filter(|s| s.is_failing())
            .map(|s| s.layer)
            .collect();
        assert_eq!(failing, [Layer::Files, Layer::Unix], "off is not a failure");
    }
}
