//! The caps on names a host pattern forwards (`enforcement(dns_max_labels=...,
//! dns_max_name_length=..., dns_wildcard_lookups_per_second=...)`): under `*.example.com` the
//! labels are the asker's to choose, so each lookup can carry data to whoever answers for
//! `example.com`. A name past a cap is refused before it leaves the host, with a record that
//! says which cap; the caps bound how much one pattern carries, they do not close the channel.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::policy::DnsCaps;

use super::names::NameRule;

/// A cap a lookup went past.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exceeded {
    Labels { limit: u8, found: usize },
    NameLength { limit: u16, found: usize },
    LookupsPerSecond { limit: u32 },
}

impl Exceeded {
    /// The cap as a policy sets it.
    pub fn key(self) -> &'static str {
        match self {
            Exceeded::Labels { .. } => "dns_max_labels",
            Exceeded::NameLength { .. } => "dns_max_name_length",
            Exceeded::LookupsPerSecond { .. } => "dns_wildcard_lookups_per_second",
        }
    }

    /// What the record says: the cap, what went past it, and the pattern's rule.
    pub fn text(self, pattern: &NameRule) -> String {
        let (limit, past) = match self {
            Exceeded::Labels { limit, found } => (u64::from(limit), format!("{found} labels")),
            Exceeded::NameLength { limit, found } => {
                (u64::from(limit), format!("{found} characters"))
            }
            Exceeded::LookupsPerSecond { limit } => (
                u64::from(limit),
                format!("more than {limit} lookups in a second"),
            ),
        };
        format!(
            "enforcement({}={limit}): {past} under {}",
            self.key(),
            pattern.text
        )
    }
}

/// The caps a name's shape can go past: its labels and its length (`labels` as DNS counts
/// them, `length` without the trailing dot).
pub fn shape(caps: DnsCaps, labels: usize, length: usize) -> Option<Exceeded> {
    if labels > usize::from(caps.max_labels) {
        return Some(Exceeded::Labels {
            limit: caps.max_labels,
            found: labels,
        });
    }
    if length > usize::from(caps.max_name_length) {
        return Some(Exceeded::NameLength {
            limit: caps.max_name_length,
            found: length,
        });
    }
    None
}

/// The most patterns whose rate is kept; past it, windows that are over are dropped (a policy
/// has far fewer patterns than this).
const MAX_PATTERNS: usize = 4096;
const WINDOW: Duration = Duration::from_secs(1);

/// Lookups sent upstream under each pattern in the current second.
#[derive(Default)]
pub struct PatternRates {
    windows: HashMap<Arc<str>, (Instant, u32)>,
}

impl PatternRates {
    /// Whether one more lookup under `pattern` is within `limit` a second (and counts it).
    pub fn admit(&mut self, pattern: &Arc<str>, limit: u32, now: Instant) -> bool {
        if self.windows.len() >= MAX_PATTERNS && !self.windows.contains_key(pattern) {
            self.windows
                .retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
        }
        let window = self.windows.entry(pattern.clone()).or_insert((now, 0));
        if now.duration_since(window.0) >= WINDOW {
            *window = (now, 0);
        }
        if window.1 >= limit {
            return false;
        }
        window.1 += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_past_a_shape_cap_says_which() {
        let caps = DnsCaps {
            max_labels: 4,
            max_name_length: 20,
            wildcard_lookups_per_second: 2,
        };
        assert_eq!(shape(caps, 4, 20), None);
        assert_eq!(
            shape(caps, 5, 10),
            Some(Exceeded::Labels { limit: 4, found: 5 })
        );
        let long = shape(caps, 3, 21).unwrap();
        assert_eq!(long.key(), "dns_max_name_length");
        let rule = NameRule {
            host: Arc::from("*.wild.test"),
            decision: crate::policy::Decision::Allow,
            text: "address_rule(addresses=[\"*.wild.test\"], decision=\"allow\")".into(),
            origin: None,
            whole: true,
        };
        assert_eq!(
            long.text(&rule),
            "enforcement(dns_max_name_length=20): 21 characters under \
             address_rule(addresses=[\"*.wild.test\"], decision=\"allow\")"
        );
    }

    #[test]
    fn each_pattern_gets_its_own_lookups_per_second() {
        let mut rates = PatternRates::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("*.a.test"), Arc::from("*.b.test"));
        let now = Instant::now();
        assert!(rates.admit(&a, 2, now));
        assert!(rates.admit(&a, 2, now));
        assert!(!rates.admit(&a, 2, now), "the third in the same second");
        assert!(
            rates.admit(&b, 2, now),
            "another pattern's count is its own"
        );
        assert!(rates.admit(&a, 2, now + WINDOW), "a new second");
    }
}
