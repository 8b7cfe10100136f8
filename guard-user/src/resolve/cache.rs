//! Answers kept for their time, so a repeated query is answered without asking upstream. Only
//! NOERROR and NXDOMAIN answers are kept (a failure is asked again); a hit is the kept message
//! with the query's id and every TTL lowered by the time it was kept.
//!
//! How long ([`lifetime`]): an answer with records of the asked type, its smallest TTL (a CNAME
//! on the way counts). A negative answer (NXDOMAIN, or NODATA: NOERROR without a record of the
//! asked type, as a name without AAAA answers an AAAA query) is kept as RFC 2308 says: the
//! smaller of its SOA's TTL and the SOA's MINIMUM field, at most [`NEGATIVE_MAX`]; without an
//! SOA, which says nothing of how long the answer holds, [`NEGATIVE_WITHOUT_SOA`]. The policy
//! still decides every query before the cache is looked at (`serve.rs`), so a kept answer never
//! answers a name the policy refuses or holds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hickory_resolver::proto::op::{Message, Query, ResponseCode};
use hickory_resolver::proto::rr::{RData, RecordType};

/// The most answers kept; a full cache drops what is past its time, then everything (a simple
/// bound that keeps the cost of a miss flat).
const MAX_ENTRIES: usize = 10_000;

/// How long a negative answer without an SOA is kept: unbound's `NORR_TTL`. Long enough that a
/// program's burst of lookups (glibc asks A and AAAA for every connect by name) asks upstream
/// once, short enough that a name given records upstream is seen within seconds.
pub const NEGATIVE_WITHOUT_SOA: Duration = Duration::from_secs(5);

/// The longest a negative answer is kept, whatever its SOA says (unbound's
/// `cache-max-negative-ttl`; BIND's `max-ncache-ttl` is 3 h).
pub const NEGATIVE_MAX: Duration = Duration::from_secs(3600);

/// (name in lower case, type, class, DNSSEC OK bit).
type Key = (String, u16, u16, bool);

#[derive(Default)]
pub struct AnswerCache {
    entries: HashMap<Key, Entry>,
}

struct Entry {
    message: Message,
    stored: Instant,
    until: Instant,
}

fn key(query: &Query, dnssec_ok: bool) -> Key {
    (
        query.name().to_lowercase().to_ascii(),
        u16::from(query.query_type()),
        u16::from(query.query_class()),
        dnssec_ok,
    )
}

/// Whether `answer` says `question`'s name has no records of its type: NXDOMAIN, or NOERROR
/// with none of that type in its answer section (NODATA; a CNAME chain that ends without one
/// is NODATA too).
pub fn is_negative(question: &Query, answer: &Message) -> bool {
    let asked = question.query_type();
    let answered = if asked == RecordType::ANY {
        !answer.answers.is_empty()
    } else {
        answer.answers.iter().any(|r| r.record_type() == asked)
    };
    answer.metadata.response_code == ResponseCode::NXDomain || !answered
}

/// The negative TTL of a negative `answer` (RFC 2308 §5): min(SOA TTL, SOA MINIMUM) of the SOA
/// in its authority section, at most [`NEGATIVE_MAX`]; [`NEGATIVE_WITHOUT_SOA`] without one.
pub fn negative_ttl(answer: &Message) -> Duration {
    let soa = answer
        .authorities
        .iter()
        .find_map(|record| match &record.data {
            RData::SOA(soa) => Some(record.ttl.min(soa.minimum)),
            _ => None,
        });
    match soa {
        Some(seconds) => Duration::from_secs(u64::from(seconds)).min(NEGATIVE_MAX),
        None => NEGATIVE_WITHOUT_SOA,
    }
}

/// How long `answer` to `question` may be kept ([`AnswerCache`]'s module says how); `None`: not
/// kept (a failure, a truncated answer, a TTL of 0).
pub fn lifetime(question: &Query, answer: &Message) -> Option<Duration> {
    let code = answer.metadata.response_code;
    if answer.metadata.truncation
        || !(code == ResponseCode::NoError || code == ResponseCode::NXDomain)
    {
        return None;
    }
    // The chain on the way (CNAMEs) is only as fresh as its shortest link.
    let chain = answer
        .answers
        .iter()
        .map(|r| Duration::from_secs(u64::from(r.ttl)))
        .min();
    let ttl = if is_negative(question, answer) {
        let negative = negative_ttl(answer);
        chain.map_or(negative, |chain| chain.min(negative))
    } else {
        chain?
    };
    (!ttl.is_zero()).then_some(ttl)
}

impl AnswerCache {
    /// The kept answer to `query`, as the answer to message `id`.
    pub fn get(&self, query: &Query, dnssec_ok: bool, id: u16, now: Instant) -> Option<Message> {
        let entry = self.entries.get(&key(query, dnssec_ok))?;
        if entry.until <= now {
            return None;
        }
        let spent = u32::try_from(now.duration_since(entry.stored).as_secs()).unwrap_or(u32::MAX);
        let mut message = entry.message.clone();
        message.metadata.id = id;
        for record in message
            .answers
            .iter_mut()
            .chain(message.authorities.iter_mut())
            .chain(message.additionals.iter_mut())
        {
            record.ttl = record.ttl.saturating_sub(spent);
        }
        Some(message)
    }

    /// Keeps `answer` to `query` for its [`lifetime`] from `now`; returns it (`None`: not kept).
    pub fn put(
        &mut self,
        query: &Query,
        dnssec_ok: bool,
        answer: &Message,
        now: Instant,
    ) -> Option<Duration> {
        let ttl = lifetime(query, answer)?;
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.retain(|_, e| e.until > now);
            if self.entries.len() >= MAX_ENTRIES {
                self.entries.clear();
            }
        }
        let mut message = answer.clone();
        if is_negative(query, answer) {
            // The SOA a program caches the negative answer by says how long it was kept here
            // (RFC 2308 §5: its TTL is the negative TTL).
            let seconds = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX);
            for record in &mut message.authorities {
                if record.record_type() == RecordType::SOA {
                    record.ttl = record.ttl.min(seconds);
                }
            }
        }
        self.entries.insert(
            key(query, dnssec_ok),
            Entry {
                message,
                stored: now,
                until: now + ttl,
            },
        );
        Some(ttl)
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
