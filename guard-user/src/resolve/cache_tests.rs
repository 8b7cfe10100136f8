//! How long the cache keeps an answer: positive ones for their TTL, negative ones (NXDOMAIN,
//! NODATA) for their SOA's negative TTL or, without an SOA, a short bound.

use std::str::FromStr;
use std::time::{Duration, Instant};

use hickory_resolver::proto::op::{Message, OpCode, Query, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, CNAME, SOA};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};

use super::*;

fn name(text: &str) -> Name {
    Name::from_str(text).unwrap()
}

fn question(text: &str, record_type: RecordType) -> Query {
    Query::query(name(text), record_type)
}

/// An answer to `question` with `code` and no records yet.
fn answer(question: &Query, code: ResponseCode) -> Message {
    let mut message = Message::response(1, OpCode::Query);
    message.metadata.response_code = code;
    message.add_query(question.clone());
    message
}

/// An SOA for the zone `test.`, itself kept for `ttl`, whose MINIMUM is `minimum`.
fn soa(ttl: u32, minimum: u32) -> Record {
    Record::from_rdata(
        name("test."),
        ttl,
        RData::SOA(SOA::new(
            name("ns.test."),
            name("hostmaster.test."),
            1,
            60,
            60,
            600,
            minimum,
        )),
    )
}

fn a(owner: &str, ttl: u32) -> Record {
    Record::from_rdata(name(owner), ttl, RData::A(A::new(192, 0, 2, 1)))
}

/// Whether the cache answers `question` at `after` past `t0`.
fn kept_at(cache: &AnswerCache, question: &Query, t0: Instant, after: u64) -> bool {
    cache
        .get(question, false, 9, t0 + Duration::from_secs(after))
        .is_some()
}

#[test]
fn a_positive_answer_is_kept_for_its_smallest_ttl() {
    let asked = question("api.test.", RecordType::A);
    let mut message = answer(&asked, ResponseCode::NoError);
    message.add_answer(a("api.test.", 30));
    message.add_answer(a("api.test.", 20));
    let mut cache = AnswerCache::default();
    let t0 = Instant::now();
    assert_eq!(
        cache.put(&asked, false, &message, t0),
        Some(Duration::from_secs(20))
    );
    assert!(kept_at(&cache, &asked, t0, 19));
    assert!(!kept_at(&cache, &asked, t0, 20));
    // Its TTLs go down with the time it was kept, and the repeat gets its own id.
    let hit = cache
        .get(&asked, false, 9, t0 + Duration::from_secs(5))
        .unwrap();
    assert_eq!(hit.metadata.id, 9);
    assert_eq!(hit.answers[0].ttl, 25);
}

#[test]
fn nodata_is_kept_for_the_smaller_of_its_soas_ttl_and_minimum() {
    // A name with A records asked for AAAA: NOERROR, no answer records, the zone's SOA.
    let asked = question("v4only.test.", RecordType::AAAA);
    let mut cache = AnswerCache::default();
    let t0 = Instant::now();
    for ((soa_ttl, minimum), kept) in [((300, 60), 60), ((30, 600), 30)] {
        let mut message = answer(&asked, ResponseCode::NoError);
        message.add_authority(soa(soa_ttl, minimum));
        assert!(is_negative(&asked, &message));
        assert_eq!(
            cache.put(&asked, false, &message, t0),
            Some(Duration::from_secs(kept)),
            "SOA TTL {soa_ttl}, MINIMUM {minimum}"
        );
        assert!(kept_at(&cache, &asked, t0, kept - 1));
        assert!(!kept_at(&cache, &asked, t0, kept), "expired at {kept} s");
    }
    // The SOA handed out says how long the program may keep the negative answer: what is left.
    let mut message = answer(&asked, ResponseCode::NoError);
    message.add_authority(soa(300, 60));
    cache.put(&asked, false, &message, t0);
    let hit = cache
        .get(&asked, false, 9, t0 + Duration::from_secs(10))
        .unwrap();
    assert!(hit.answers.is_empty());
    assert_eq!(hit.authorities[0].ttl, 50);
}

#[test]
fn nxdomain_is_kept_by_its_soa_too_and_never_past_the_bound() {
    let asked = question("gone.test.", RecordType::A);
    let mut message = answer(&asked, ResponseCode::NXDomain);
    message.add_authority(soa(900, 120));
    let mut cache = AnswerCache::default();
    let t0 = Instant::now();
    assert_eq!(
        cache.put(&asked, false, &message, t0),
        Some(Duration::from_secs(120))
    );
    let hit = cache.get(&asked, false, 9, t0).unwrap();
    assert_eq!(hit.metadata.response_code, ResponseCode::NXDomain);
    // A zone that asks for a day gets NEGATIVE_MAX.
    let mut long = answer(&asked, ResponseCode::NXDomain);
    long.add_authority(soa(86_400, 86_400));
    assert_eq!(cache.put(&asked, false, &long, t0), Some(NEGATIVE_MAX));
    // A zone whose SOA says 0: not kept at all.
    let mut zero = answer(
        &question("zero.test.", RecordType::A),
        ResponseCode::NXDomain,
    );
    zero.add_authority(soa(0, 300));
    assert_eq!(
        cache.put(&question("zero.test.", RecordType::A), false, &zero, t0),
        None
    );
}

#[test]
fn a_negative_answer_without_an_soa_is_kept_for_the_short_bound_then_asked_again() {
    let mut cache = AnswerCache::default();
    let t0 = Instant::now();
    let bound = NEGATIVE_WITHOUT_SOA.as_secs();
    for (asked, code) in [
        (
            question("v4only.test.", RecordType::AAAA),
            ResponseCode::NoError,
        ),
        (
            question("gone.test.", RecordType::A),
            ResponseCode::NXDomain,
        ),
    ] {
        let message = answer(&asked, code);
        assert_eq!(
            cache.put(&asked, false, &message, t0),
            Some(NEGATIVE_WITHOUT_SOA)
        );
        assert!(kept_at(&cache, &asked, t0, bound - 1), "{code:?}");
        assert!(!kept_at(&cache, &asked, t0, bound), "{code:?} expired");
    }
}

#[test]
fn a_cname_chain_that_ends_without_the_asked_type_is_nodata_kept_no_longer_than_the_chain() {
    let asked = question("www.test.", RecordType::AAAA);
    let mut message = answer(&asked, ResponseCode::NoError);
    message.add_answer(Record::from_rdata(
        name("www.test."),
        3,
        RData::CNAME(CNAME(name("cdn.test."))),
    ));
    message.add_authority(soa(300, 60));
    assert!(is_negative(&asked, &message));
    assert_eq!(lifetime(&asked, &message), Some(Duration::from_secs(3)));
    // The same chain ending in the asked type is a positive answer.
    let asked_a = question("www.test.", RecordType::A);
    let mut positive = answer(&asked_a, ResponseCode::NoError);
    positive.add_answer(message.answers[0].clone());
    positive.add_answer(a("cdn.test.", 40));
    assert!(!is_negative(&asked_a, &positive));
    assert_eq!(lifetime(&asked_a, &positive), Some(Duration::from_secs(3)));
}

#[test]
fn failures_truncated_answers_and_a_ttl_of_zero_are_not_kept() {
    let asked = question("api.test.", RecordType::A);
    let mut cache = AnswerCache::default();
    let t0 = Instant::now();
    for code in [ResponseCode::ServFail, ResponseCode::Refused] {
        let message = answer(&asked, code);
        assert_eq!(cache.put(&asked, false, &message, t0), None, "{code:?}");
    }
    let mut truncated = answer(&asked, ResponseCode::NoError);
    truncated.metadata.truncation = true;
    assert_eq!(cache.put(&asked, false, &truncated, t0), None);
    let mut zero = answer(&asked, ResponseCode::NoError);
    zero.add_answer(a("api.test.", 0));
    assert_eq!(cache.put(&asked, false, &zero, t0), None);
    assert!(!kept_at(&cache, &asked, t0, 0));
}
