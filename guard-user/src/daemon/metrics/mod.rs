//! `guard daemon`'s Prometheus metrics (`[metrics] listen`): one reading of the daemon
//! ([`MetricsSnapshot`], taken by the daemon's task, see `service/metrics.rs`), written out as
//! text ([`exposition`]) by the HTTP listener ([`http`]), which never touches the daemon's state
//! itself.
//!
//! The reading reuses `guard status`'s ([`StatusResponse`]: the kernel's counters, failed-open
//! decisions, pending asks, the audit trail), so the two cannot disagree, and adds what only the
//! metrics need: the daemon's own labelled counts ([`tally::Tally`]), the resolver's queries and
//! latency, the programs' run time, and the daemon's resident memory.

pub mod exposition;
pub mod http;
pub mod tally;

use crate::daemon::wire::responses::StatusResponse;
use crate::kernel::loader::ProgramRunStats;
use crate::resolve::refresh::RefreshCounts;
use crate::resolve::stats::ResolverSnapshot;

/// Everything one scrape reports.
#[derive(Clone, Debug)]
pub struct MetricsSnapshot {
    pub status: StatusResponse,
    pub tally: tally::Tally,
    /// guard's resolver; `None` when the scopes' DNS is not redirected.
    pub resolver: Option<ResolverSnapshot>,
    /// What guard asked again of the names the scopes looked up (with `resolver`).
    pub refreshes: Option<RefreshCounts>,
    /// `kernel.bpf_stats_enabled`; `None` when it cannot be read.
    pub bpf_stats_enabled: Option<bool>,
    /// Each loaded program's run time and count (exported only while the kernel keeps them).
    pub programs: Vec<ProgramRunStats>,
    /// The daemon's resident memory (`/proc/self/statm`).
    pub rss_bytes: Option<u64>,
}

/// This process's resident set size: `/proc/self/statm`'s second field, in pages.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no memory arguments.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}
