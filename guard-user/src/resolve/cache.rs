//! Answers kept for their TTL, so a repeated query is answered without asking upstream. Only
//! NOERROR and NXDOMAIN answers are kept (a failure is asked again); a hit is the kept message
//! with the query's id and every TTL lowered by the time it was kept.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hickory_resolver::proto::op::{Message, Query, ResponseCode};

/// The most answers kept; a full cache drops what is past its time, then everything (a simple
/// bound that keeps the cost of a miss flat).
const MAX_ENTRIES: usize = 10_000;

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

    /// Keeps `answer` for `ttl`.
    pub fn put(&mut self, query: &Query, dnssec_ok: bool, answer: &Message, ttl: Duration) {
        let code = answer.metadata.response_code;
        if ttl.is_zero()
            || answer.metadata.truncation
            || !(code == ResponseCode::NoError || code == ResponseCode::NXDomain)
        {
            return;
        }
        let now = Instant::now();
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.retain(|_, e| e.until > now);
            if self.entries.len() >= MAX_ENTRIES {
                self.entries.clear();
            }
        }
        self.entries.insert(
            key(query, dnssec_ok),
            Entry {
                message: answer.clone(),
                stored: now,
                until: now + ttl,
            },
        );
    }
}
