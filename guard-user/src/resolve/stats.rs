//! What guard's resolver has answered, for the daemon's metrics: queries by how each was
//! answered, and how long each took from its arrival to its reply. Plain atomics, added to by
//! the serving tasks and read at a scrape; nothing here knows the exposition format.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How one query was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A name the policy forbids (or none names): REFUSED or NXDOMAIN, never sent on.
    Refused,
    /// A name only a host pattern lets out, past one of the policy's caps on such names
    /// (labels, length, lookups a second): refused, never sent on.
    Capped,
    /// A name held on the host: its stand-in address (or no records).
    StandIn,
    /// From the cache of earlier answers.
    Cached,
    /// Sent to the upstream server and answered.
    Forwarded,
    /// The upstream server did not answer, or the answer's addresses were not put in force in
    /// time: SERVFAIL.
    Failed,
    /// Not a query guard forwards: FORMERR (not parsed, not one question, records besides one
    /// OPT, bytes after the message), NOTIMP (another opcode), or nothing (not a query).
    Malformed,
    /// A UDP query dropped because too many were being answered at once (the program retries).
    Dropped,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Refused,
        Outcome::Capped,
        Outcome::StandIn,
        Outcome::Cached,
        Outcome::Forwarded,
        Outcome::Failed,
        Outcome::Malformed,
        Outcome::Dropped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Refused => "refused",
            Outcome::Capped => "capped",
            Outcome::StandIn => "stand_in",
            Outcome::Cached => "cached",
            Outcome::Forwarded => "forwarded",
            Outcome::Failed => "failed",
            Outcome::Malformed => "malformed",
            Outcome::Dropped => "dropped",
        }
    }
}

/// The latency histogram's upper bounds, in seconds: from a cached answer (tens of
/// microseconds) to a forwarded one that waited for a slow upstream.
pub const LATENCY_BOUNDS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

#[derive(Debug, Default)]
pub struct ResolverStats {
    outcomes: [AtomicU64; Outcome::ALL.len()],
    /// Per bound of [`LATENCY_BOUNDS`], then one past the last (not cumulative).
    latency: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    latency_ns: AtomicU64,
}

/// A reading of [`ResolverStats`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResolverSnapshot {
    /// Queries by outcome, every outcome listed.
    pub queries: Vec<(Outcome, u64)>,
    /// `(upper bound in seconds, queries in that bucket alone)`, the last bound `+Inf`.
    pub latency_buckets: Vec<(f64, u64)>,
    pub latency_sum_secs: f64,
    /// Queries timed (every one answered or refused; dropped and malformed ones are not).
    pub latency_count: u64,
}

impl ResolverStats {
    pub fn count(&self, outcome: Outcome) {
        let slot = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.outcomes[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// One query answered after `took`.
    pub fn answered(&self, outcome: Outcome, took: Duration) {
        self.count(outcome);
        let secs = took.as_secs_f64();
        let bucket = LATENCY_BOUNDS
            .iter()
            .position(|bound| secs <= *bound)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.latency_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ResolverSnapshot {
        let latency_buckets: Vec<(f64, u64)> = LATENCY_BOUNDS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.latency.iter().map(|n| n.load(Ordering::Relaxed)))
            .collect();
        ResolverSnapshot {
            queries: Outcome::ALL
                .iter()
                .zip(&self.outcomes)
                .map(|(o, n)| (*o, n.load(Ordering::Relaxed)))
                .collect(),
            latency_count: latency_buckets.iter().map(|(_, n)| n).sum(),
            latency_buckets,
            latency_sum_secs: self.latency_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_query_lands_in_one_bucket_and_its_outcome() {
        let stats = ResolverStats::default();
        stats.answered(Outcome::Cached, Duration::from_micros(40));
        stats.answered(Outcome::Forwarded, Duration::from_millis(30));
        stats.answered(Outcome::Refused, Duration::from_secs(3));
        stats.count(Outcome::Dropped);
        let s = stats.snapshot();
        let count = |o| s.queries.iter().find(|(q, _)| *q == o).unwrap().1;
        assert_eq!((count(Outcome::Cached), count(Outcome::Dropped)), (1, 1));
        assert_eq!(s.latency_count, 3);
        assert_eq!(s.latency_buckets[0], (0.0001, 1));
        assert_eq!(
            s.latency_buckets[8],
            (0.05, 1),
            "30 ms is in the 50 ms bucket"
        );
        assert_eq!(s.latency_buckets.last(), Some(&(f64::INFINITY, 1)));
        assert!(
            (s.latency_sum_secs - 3.03004).abs() < 1e-9,
            "{}",
            s.latency_sum_secs
        );
    }
}
