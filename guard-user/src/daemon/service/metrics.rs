//! One reading for the metrics listener (`daemon::metrics`): `guard status`'s, plus what only
//! the metrics report.

use super::Daemon;
use crate::daemon::metrics::{MetricsSnapshot, resident_bytes};

impl Daemon {
    pub fn metrics(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            status: self.status(),
            tally: self.tally.clone(),
            resolver: self.name_server.as_ref().map(|server| server.stats()),
            refreshes: self
                .name_server
                .as_ref()
                .map(|_| self.core.names().refresh_counts()),
            bpf_stats_enabled: crate::kernel::loader::bpf_stats_enabled(),
            programs: self.core.enforcer().program_run_stats(),
            rss_bytes: resident_bytes(),
        }
    }
}
