//! What a query from a scope becomes: what guard forwards of it, what it refuses, and the reply.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_resolver::proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_resolver::proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_resolver::proto::rr::rdata::{A, NULL};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};

use super::*;
use crate::policy::PolicyParser;
use crate::resolve::{EventSink, NamePolicy, Refusal, Resolver, ResolverConfig, ResolverEvent};

/// A query for `name` (in the letter case written: `Name::from_str` would lower it).
fn query(name: &str) -> Message {
    let mut message = Message::query();
    message.metadata.id = 0x1234;
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    message
}

fn with_cookie(mut message: Message) -> Message {
    let mut edns = Edns::new();
    edns.set_max_payload(4000);
    edns.options_mut().insert(EdnsOption::Unknown(
        u16::from(EdnsCode::Cookie),
        b"secret-data!".to_vec(),
    ));
    message.set_edns(edns);
    message
}

fn a_record(name: &str) -> Record {
    Record::from_rdata(
        Name::from_str(name).unwrap(),
        60,
        RData::A(A::new(127, 0, 1, 9)),
    )
}

/// `read_query`'s FORMERR, with why.
fn formerr(bytes: &[u8]) -> Rejected {
    match read_query(bytes) {
        Err(NotForwarded::Rejected(rejected)) => {
            let reply = Message::from_vec(rejected.reply.as_ref().unwrap()).unwrap();
            assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
            assert_eq!(reply.metadata.id, 0x1234);
            assert_eq!(rejected.answer, "FORMERR");
            rejected
        }
        Err(NotForwarded::Ignored) => panic!("ignored, not FORMERR"),
        Ok(read) => panic!("read as a query for {}", read.name),
    }
}

#[test]
fn a_query_with_anything_besides_one_question_and_its_edns_gets_formerr() {
    let mut two = query("a.wild.test.");
    two.add_query(Query::query(
        Name::from_str("data.attacker.test.").unwrap(),
        RecordType::A,
    ));
    let rejected = formerr(&two.to_vec().unwrap());
    assert!(rejected.why.ends_with("2 questions"), "{}", rejected.why);
    assert_eq!(rejected.name, "a.wild.test");

    for section in ["answer", "authority", "additional"] {
        let mut extra = query("a.wild.test.");
        let record = Record::from_rdata(
            Name::from_str("x.test.").unwrap(),
            0,
            RData::NULL(NULL::with(b"payload".to_vec())),
        );
        match section {
            "answer" => extra.add_answer(record),
            "authority" => extra.add_authority(record),
            _ => extra.add_additional(record),
        };
        let rejected = formerr(&extra.to_vec().unwrap());
        assert!(
            rejected
                .why
                .ends_with(&format!("1 records in its {section} section")),
            "{}",
            rejected.why
        );
    }

    let mut trailing = query("a.wild.test.").to_vec().unwrap();
    trailing.extend_from_slice(b"smuggled");
    let rejected = formerr(&trailing);
    assert!(
        rejected.why.ends_with("8 bytes after the message"),
        "{}",
        rejected.why
    );

    // A header and half a question: FORMERR, not silence (the program learns at once).
    let cut = query("a.wild.test.").to_vec().unwrap();
    let rejected = formerr(&cut[..16]);
    assert!(rejected.why.contains("does not parse"), "{}", rejected.why);

    // Not even a header, or a response: nothing goes back.
    assert!(matches!(read_query(&cut[..5]), Err(NotForwarded::Ignored)));
    let mut response = query("a.wild.test.");
    response.metadata.message_type = MessageType::Response;
    assert!(matches!(
        read_query(&response.to_vec().unwrap()),
        Err(NotForwarded::Ignored)
    ));

    // One question with EDNS (options and all) is a query to decide; the options stay here.
    let read = read_query(&with_cookie(query("MiXeD.Wild.Test.")).to_vec().unwrap()).unwrap();
    assert_eq!(read.name, "mixed.wild.test");
}

#[test]
fn guard_forwards_its_own_query_and_gives_the_program_its_own_question_back() {
    let program = with_cookie(query("MiXeD.Wild.Test."));
    let read = read_query(&program.to_vec().unwrap()).unwrap();
    let forward = forwarded_query(&read.query, &read.question, 0xbeef);
    let sent = Message::from_vec(&forward.to_vec().unwrap()).unwrap();
    assert_eq!(sent.metadata.id, 0xbeef);
    assert_eq!(sent.queries.len(), 1);
    assert_eq!(sent.queries[0].name().to_ascii(), "mixed.wild.test.");
    assert!(sent.additionals.is_empty());
    let edns = sent.edns.as_ref().unwrap();
    assert!(
        edns.options().as_ref().is_empty(),
        "the program's cookie left"
    );
    assert_eq!(edns.max_payload(), EDNS_PAYLOAD);

    let mut answer = Message::response(0xbeef, OpCode::Query);
    answer.add_query(sent.queries[0].clone());
    answer.add_answer(a_record("mixed.wild.test."));
    let mut server_edns = Edns::new();
    server_edns
        .options_mut()
        .insert(EdnsOption::Unknown(10, b"server".to_vec()));
    answer.set_edns(server_edns);

    let reply = Message::from_vec(&reply_for(&read.query, &answer).to_vec().unwrap()).unwrap();
    assert_eq!(reply.metadata.id, 0x1234);
    assert_eq!(reply.queries[0].name().to_ascii(), "MiXeD.Wild.Test.");
    assert_eq!(reply.answers[0].name.to_ascii(), "MiXeD.Wild.Test.");
    assert!(reply.edns.unwrap().options().as_ref().is_empty());
    // A program that sent no EDNS gets none back.
    let plain = query("a.wild.test.");
    assert!(reply_for(&plain, &answer).edns.is_none());
}

/// A name server on loopback that keeps every datagram it gets and answers each A question
/// with 127.0.1.9.
async fn recording_upstream() -> (SocketAddr, Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let received = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = received.clone();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        while let Ok((n, from)) = socket.recv_from(&mut buffer).await {
            kept.lock().unwrap().push(buffer[..n].to_vec());
            let Ok(query) = Message::from_vec(&buffer[..n]) else {
                continue;
            };
            let mut answer = Message::response(query.metadata.id, OpCode::Query);
            answer.add_queries(query.queries.iter().cloned());
            if let Some(question) = query.queries.first() {
                answer.add_answer(a_record(&question.name().to_ascii()));
            }
            let _ = socket.send_to(&answer.to_vec().unwrap(), from).await;
        }
    });
    (addr, received)
}

/// Sends `bytes` to the resolver and returns its reply.
async fn ask(port: u16, bytes: &[u8]) -> Message {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(bytes, ("127.0.0.1", port)).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buffer))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    Message::from_vec(&buffer[..n]).unwrap()
}

#[tokio::test]
async fn names_under_a_pattern_past_a_cap_are_refused_recorded_and_counted() {
    let (upstream, received) = recording_upstream().await;
    let mut parser = PolicyParser::new();
    parser
        .parse(
            "caps.rules",
            "enforcement(unmatched_network=\"deny\", dns_max_labels=4, dns_max_name_length=24, \
             dns_wildcard_lookups_per_second=2)\n\
             address_rule(addresses=[\"*.wild.test\"], decision=\"allow\")\n",
        )
        .unwrap();
    let names = Arc::new(RwLock::new(NamePolicy::from_policy(&parser.build())));
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let config = ResolverConfig {
        upstream,
        refusal: Refusal::Refused,
        per_scope: false,
        origins: None,
    };
    let resolver = Resolver::start(config, names, EventSink::Tokio(events_tx))
        .await
        .unwrap();
    // Answers are confirmed at once, as an owner of the maps would.
    let refused = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = refused.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                ResolverEvent::Answered(_, done) => {
                    let _ = done.send(());
                }
                ResolverEvent::Refused(name) => seen.lock().unwrap().push(name),
                ResolverEvent::UpstreamFailed { .. } | ResolverEvent::Refreshed(_) => {}
            }
        }
    });
    let port = resolver.port();
    let code = |m: &Message| m.metadata.response_code;

    assert_eq!(
        code(&ask(port, &query("a.b.c.wild.test.").to_vec().unwrap()).await),
        ResponseCode::Refused
    );
    let long = "abcdefghijklmnopq.wild.test.";
    assert_eq!(
        code(&ask(port, &query(long).to_vec().unwrap()).await),
        ResponseCode::Refused
    );
    assert_eq!(
        code(&ask(port, &query("x1.wild.test.").to_vec().unwrap()).await),
        ResponseCode::NoError
    );
    assert_eq!(
        code(&ask(port, &query("x2.wild.test.").to_vec().unwrap()).await),
        ResponseCode::NoError
    );
    // Asked again: from the cache, which does not count against the rate.
    assert_eq!(
        code(&ask(port, &query("X1.wild.test.").to_vec().unwrap()).await),
        ResponseCode::NoError
    );
    assert_eq!(
        code(&ask(port, &query("x3.wild.test.").to_vec().unwrap()).await),
        ResponseCode::Refused
    );

    let sent: Vec<String> = received
        .lock()
        .unwrap()
        .iter()
        .map(|bytes| {
            Message::from_vec(bytes).unwrap().queries[0]
                .name()
                .to_ascii()
        })
        .collect();
    assert_eq!(sent, ["x1.wild.test.", "x2.wild.test."]);
    let snapshot = resolver.stats();
    let count = |o| snapshot.queries.iter().find(|(q, _)| *q == o).unwrap().1;
    assert_eq!(count(Outcome::Capped), 3);
    assert_eq!((count(Outcome::Forwarded), count(Outcome::Cached)), (2, 1));
    let refused = refused.lock().unwrap();
    let rules: Vec<&str> = refused.iter().map(|r| r.rule.as_str()).collect();
    assert!(
        rules[0].starts_with("enforcement(dns_max_labels=4): 5 labels under address_rule"),
        "{rules:?}"
    );
    assert!(
        rules[1].starts_with("enforcement(dns_max_name_length=24): 27 characters"),
        "{rules:?}"
    );
    assert!(
        rules[2].starts_with("enforcement(dns_wildcard_lookups_per_second=2)"),
        "{rules:?}"
    );
    assert_eq!(refused[2].name, "x3.wild.test");
    assert_eq!(
        refused[0].line,
        Some(2),
        "the pattern's rule is where to look"
    );
}

#[tokio::test]
async fn a_resolver_whose_task_ended_says_so_and_starts_again_on_its_port() {
    let (upstream, _) = recording_upstream().await;
    let mut parser = PolicyParser::new();
    parser
        .parse(
            "names.rules",
            "address_rule(addresses=[\"*.wild.test\"], decision=\"forbidden\")\n",
        )
        .unwrap();
    let names = Arc::new(RwLock::new(NamePolicy::from_policy(&parser.build())));
    let (events_tx, _events) = tokio::sync::mpsc::unbounded_channel();
    let config = ResolverConfig {
        upstream,
        refusal: Refusal::Refused,
        per_scope: false,
        origins: None,
    };
    let sink = EventSink::Tokio(events_tx);
    let mut resolver = Resolver::start(config.clone(), names.clone(), sink.clone())
        .await
        .unwrap();
    assert_eq!(resolver.stopped(), None, "it runs");
    let port = resolver.port();
    resolver.tasks.abort_all();
    let mut why = None;
    for _ in 0..100 {
        why = resolver.stopped();
        if why.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(why.is_some(), "a task that ended is noticed");
    drop(resolver);
    let again = Resolver::start_on(config, names, sink, port).await.unwrap();
    assert_eq!(
        again.port(),
        port,
        "where the kernel's redirect still sends queries"
    );
    let answer = ask(port, &query("x.wild.test.").to_vec().unwrap()).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::Refused);
}
