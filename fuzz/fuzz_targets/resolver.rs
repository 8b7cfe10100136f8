//! A DNS packet from a scope and an upstream server's answer to it, taken through the steps of
//! guard's resolver that read and write messages (`resolve::serve`, `resolve::upstream`,
//! `resolve::cache`, `resolve::answers`, `resolve::refresher`), without I/O: each step returns a value or refuses,
//! never panics, and what guard writes back reads as a reply to the program's query.
//!
//! Input: one flags byte (bit 0: the query came over TCP; bit 1: DNSSEC OK for the cache key),
//! two bytes of query length (big-endian, cut to what is there), the query, then the answer.
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use guard::policy::PolicyParser;
use guard::resolve::answers::{AnswerBook, GRACE};
use guard::resolve::cache::AnswerCache;
use guard::resolve::names::NamePolicy;
use guard::resolve::refresh::{Family, RefreshOutcome};
use guard::resolve::refresher::{outcome_of, refresh_query};
use guard::resolve::serve::{
    NameQuery, NotForwarded, addresses, fit, forwarded_query, read_query, refusal_reply,
    reply_code, reply_for, stand_in_reply,
};
use guard::resolve::stand_ins::{StandIns, is_stand_in_ip};
use guard::resolve::upstream::answer_to;
use guard::resolve::{NameDecision, Refusal};
use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::{RData, RecordType};
use libfuzzer_sys::fuzz_target;

/// The names of a small policy with each kind of name decision: ruled, refused, held (any other
/// name, under `unmatched_network = "prompt"`).
fn names() -> &'static NamePolicy {
    static NAMES: OnceLock<NamePolicy> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut parser = PolicyParser::new();
        parser
            .parse(
                "fuzz.rules",
                r#"
network_rule(host = "example.com", protocol = "https", decision = "allow")
network_rule(host = "ads.example.org", protocol = "https", decision = "forbidden")
address_rule(addresses = ["db.internal"], decision = "allow", ports = [5432])
enforcement(unmatched_network = "prompt")
"#,
            )
            .expect("the fuzz target's policy loads");
        NamePolicy::from_policy(&parser.build())
    })
}

/// `reply` reads as a response to `query` with `code`, carrying its question.
fn assert_reply_to(query: &Message, reply: &[u8], code: ResponseCode) -> Message {
    let reply = Message::from_vec(reply).expect("guard's reply reads back");
    assert_eq!(reply.metadata.message_type, MessageType::Response);
    assert_eq!(reply.metadata.id, query.metadata.id);
    assert_eq!(reply.metadata.response_code, code);
    assert_eq!(reply.queries, query.queries);
    reply
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (tcp, dnssec_ok) = (flags & 1 != 0, flags & 2 != 0);
    let (length, rest) = match rest {
        [high, low, rest @ ..] => (usize::from(u16::from_be_bytes([*high, *low])), rest),
        _ => return,
    };
    let (query_bytes, answer_bytes) = rest.split_at(length.min(rest.len()));

    let NameQuery {
        query,
        question,
        name,
    } = match read_query(query_bytes) {
        Ok(read) => read,
        Err(NotForwarded::Rejected(rejected)) => {
            // FORMERR or NOTIMP, to a packet whose header reads as a query's.
            let id = u16::from_be_bytes([query_bytes[0], query_bytes[1]]);
            if let Some(reply) = rejected.reply {
                let reply = Message::from_vec(&reply).expect("guard's reply reads back");
                assert_eq!(reply.metadata.id, id);
                assert_eq!(reply.metadata.message_type, MessageType::Response);
            }
            return;
        }
        Err(NotForwarded::Ignored) => return,
    };
    assert!(!name.ends_with('.'), "{name:?}");
    assert_eq!(name, name.to_ascii_lowercase());
    // What guard accepts to forward is one question and nothing else of the program's.
    assert_eq!(query.queries.len(), 1);
    assert!(query.answers.is_empty() && query.authorities.is_empty());
    assert!(query.additionals.is_empty() && query.signature.is_none());

    let decision = names().decide(&name);
    for (refusal, code) in [
        (Refusal::Refused, ResponseCode::Refused),
        (Refusal::Nxdomain, ResponseCode::NXDomain),
    ] {
        if let Some(reply) = refusal_reply(&query, refusal) {
            assert_reply_to(&query, &reply, code);
        }
    }
    if let Some(reply) = reply_code(&query, ResponseCode::ServFail) {
        assert_reply_to(&query, &reply, ResponseCode::ServFail);
    }
    if decision == NameDecision::Held {
        let stand_in = StandIns::default().address_for(&name);
        assert!(is_stand_in_ip(stand_in.into()));
        if let Some(reply) = stand_in_reply(&query, Some(stand_in)) {
            let reply = assert_reply_to(&query, &reply, ResponseCode::NoError);
            let expected = usize::from(question.query_type() == RecordType::A);
            assert_eq!(reply.answers.len(), expected);
            if let Some(record) = reply.answers.first() {
                assert_eq!(record.data, RData::A(stand_in.into()));
            }
        }
    }

    // What guard sends upstream: its own query, built from the one question.
    let id = query.metadata.id;
    let forward = forwarded_query(&query, &question, id);
    let sent_upstream = forward.to_vec().expect("guard's query writes");
    let forward = Message::from_vec(&sent_upstream).expect("guard's query reads back");
    assert_eq!(forward.queries.len(), 1);
    let asked = forward.queries[0].name().to_ascii();
    assert_eq!(asked, asked.to_ascii_lowercase());
    assert!(
        forward
            .edns
            .as_ref()
            .is_some_and(|e| e.options().as_ref().is_empty())
    );

    // The upstream server's answer (taken when it answers guard's query; the fuzzer's answers
    // carry the id guard chose and its question, as a server's would).
    let Ok(answer) = answer_to(answer_bytes, &forward) else {
        return;
    };
    let (addrs, ttl) = addresses(&answer);
    let reply = reply_for(&query, &answer);
    assert_eq!(reply.metadata.id, id);
    assert_eq!(
        reply.queries[0].name().to_ascii(),
        question.name().to_ascii(),
        "the program's question as it wrote it"
    );
    assert_eq!(reply.edns.is_some(), query.edns.is_some());
    if let Ok(bytes) = reply.to_vec() {
        let sent = fit(&query, &reply, bytes.clone(), tcp);
        if sent != bytes {
            // Cut to fit the program's UDP buffer: a truncated answer, so it asks again over TCP.
            let cut = Message::from_vec(&sent).expect("a truncated answer reads back");
            assert!(cut.metadata.truncation);
            assert_eq!(cut.metadata.id, id);
        }
    }

    // Kept for a repeated query, and handed back with the repeat's id.
    let mut cache = AnswerCache::default();
    cache.put(&question, dnssec_ok, &answer, Instant::now());
    if let Some(kept) = cache.get(&question, dnssec_ok, id ^ 0x5a5a, Instant::now()) {
        assert_eq!(kept.metadata.id, id ^ 0x5a5a);
        assert_eq!(kept.answers.len(), answer.answers.len());
        let _ = kept.to_vec();
    }

    // The answer book attributes each address to the name, in the scope it was answered to
    // and no other, until its time is up.
    let mut book = AnswerBook::new();
    let now = Instant::now();
    book.record_in(7, &name, &addrs, ttl, now);
    for ip in &addrs {
        assert!(book.names_for(*ip, 7).contains(&name), "{ip} for {name:?}");
        assert!(book.names_for(*ip, 8).is_empty(), "{ip} in another scope");
    }

    // The same answer to guard's refresh of the name: only the family asked for is held, and
    // once no refresh holds them every address goes at its own time.
    book.mark_refreshed(7, &name, &addrs);
    for family in [Family::V4, Family::V6] {
        let refresh = refresh_query(&name, family, id);
        assert!(refresh.is_none_or(|q| q.to_vec().is_ok()));
        if let RefreshOutcome::Addresses { addrs: held, .. } = outcome_of(&answer, family) {
            assert!(held.iter().all(|ip| family.holds(*ip)), "{held:?}");
            assert_eq!(book.hold(7, &name, family, &held, now), Some(false));
        }
        book.release(7, &name, family);
    }
    book.prune(now + ttl + GRACE + Duration::from_secs(1));
    assert_eq!(book.address_count(), 0);
});
