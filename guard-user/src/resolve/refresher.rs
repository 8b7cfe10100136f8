//! guard asking for a scope's names again ([`super::refresh`] says which and when), on the
//! resolver's runtime and from its own sockets, outside every scope: a question guard builds
//! from the name alone, to the resolver's upstream server, and what the answer says of the
//! name's addresses, sent to the owner of the maps as a [`ResolverEvent::Refreshed`].

use std::sync::Arc;

use hickory_resolver::proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_resolver::proto::rr::Name;
use tokio::sync::{Semaphore, mpsc};

use super::ResolverEvent;
use super::refresh::{Family, RefreshOutcome};
use super::serve::{Shared, addresses, new_id};

/// Questions out at once; the schedule sends at most
/// [`super::refresh::REFRESHES_PER_SECOND`] a second, so this is only reached when the
/// upstream is slow.
const IN_FLIGHT: usize = 64;

/// One name to ask for again.
#[derive(Clone, Debug)]
pub struct RefreshQuery {
    pub name: String,
    pub family: Family,
}

/// What the upstream said of a name guard asked for again.
#[derive(Clone, Debug)]
pub struct Refreshed {
    pub name: String,
    pub family: Family,
    pub outcome: RefreshOutcome,
}

/// Where the owner of the maps sends the names to ask for again (a running resolver's,
/// [`super::Resolver::refresher`]).
#[derive(Clone, Debug)]
pub struct Refresher(mpsc::UnboundedSender<RefreshQuery>);

impl Refresher {
    /// A refresher and the end its questions arrive at ([`serve`] reads it).
    pub fn channel() -> (Refresher, mpsc::UnboundedReceiver<RefreshQuery>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Refresher(tx), rx)
    }

    /// Asks for `name` again; `false`: the resolver is gone.
    pub fn ask(&self, name: &str, family: Family) -> bool {
        let query = RefreshQuery {
            name: name.to_string(),
            family,
        };
        self.0.send(query).is_ok()
    }
}

/// Asks the upstream for each name that arrives, and tells the owner what it said.
pub async fn serve(mut queries: mpsc::UnboundedReceiver<RefreshQuery>, shared: Arc<Shared>) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(query) = queries.recv().await {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let outcome = ask(&shared, &query).await;
            let _ = shared.events().send(ResolverEvent::Refreshed(Refreshed {
                name: query.name,
                family: query.family,
                outcome,
            }));
            drop(permit);
        });
    }
}

async fn ask(shared: &Shared, query: &RefreshQuery) -> RefreshOutcome {
    let Some(question) = refresh_query(&query.name, query.family, new_id()) else {
        return RefreshOutcome::Failed(format!("`{}` is not a DNS name", query.name));
    };
    match shared.upstream().exchange(&question, false, || ()).await.0 {
        Ok(answer) => outcome_of(&answer, query.family),
        Err(err) => RefreshOutcome::Failed(format!("{err:#}")),
    }
}

/// guard's question for `name`'s addresses of `family`: id `id`, recursion desired, guard's own
/// EDNS (the DNSSEC OK bit off); nothing of a program's.
pub fn refresh_query(name: &str, family: Family, id: u16) -> Option<Message> {
    let name = Name::from_ascii(format!("{}.", name.trim_end_matches('.'))).ok()?;
    let mut question = Message::new(id, MessageType::Query, OpCode::Query);
    question.metadata.recursion_desired = true;
    question.add_query(Query::query(name, family.record_type()));
    question.set_edns(super::serve::guard_edns(false));
    Some(question)
}

/// What an upstream answer says of a name's addresses of `family`: some (with the answer's
/// smallest TTL), none (NXDOMAIN, or NODATA: the name has none of the family), or no answer
/// (SERVFAIL, REFUSED, any other code).
pub fn outcome_of(answer: &Message, family: Family) -> RefreshOutcome {
    match answer.metadata.response_code {
        ResponseCode::NoError => {
            let (addrs, ttl) = addresses(answer);
            let addrs: Vec<_> = addrs.into_iter().filter(|ip| family.holds(*ip)).collect();
            if addrs.is_empty() {
                RefreshOutcome::Gone
            } else {
                RefreshOutcome::Addresses { addrs, ttl }
            }
        }
        ResponseCode::NXDomain => RefreshOutcome::Gone,
        code => RefreshOutcome::Failed(format!("the name server answered {code}")),
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::Duration;

    use hickory_resolver::proto::rr::rdata::{A, AAAA};
    use hickory_resolver::proto::rr::{RData, Record};

    use super::*;

    fn answer(code: ResponseCode, records: Vec<RData>) -> Message {
        let mut message = Message::response(7, OpCode::Query);
        message.metadata.response_code = code;
        let name = Name::from_ascii("api.test.").unwrap();
        for data in records {
            message.add_answer(Record::from_rdata(name.clone(), 20, data));
        }
        message
    }

    #[test]
    fn an_answer_is_the_names_addresses_of_the_family_asked_none_or_no_answer() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let both = answer(
            ResponseCode::NoError,
            vec![
                RData::A(A("192.0.2.1".parse().unwrap())),
                RData::AAAA(AAAA("2001:db8::1".parse().unwrap())),
            ],
        );
        assert_eq!(
            outcome_of(&both, Family::V4),
            RefreshOutcome::Addresses {
                addrs: vec![v4],
                ttl: Duration::from_secs(20)
            }
        );
        let only_v4 = answer(
            ResponseCode::NoError,
            vec![RData::A(A("192.0.2.1".parse().unwrap()))],
        );
        assert_eq!(outcome_of(&only_v4, Family::V6), RefreshOutcome::Gone);
        let nodata = answer(ResponseCode::NoError, vec![]);
        assert_eq!(outcome_of(&nodata, Family::V4), RefreshOutcome::Gone);
        let nx = answer(ResponseCode::NXDomain, vec![]);
        assert_eq!(outcome_of(&nx, Family::V4), RefreshOutcome::Gone);
        for code in [ResponseCode::ServFail, ResponseCode::Refused] {
            let failed = outcome_of(&answer(code, vec![]), Family::V4);
            assert!(matches!(failed, RefreshOutcome::Failed(_)), "{code}");
        }
    }

    #[test]
    fn guards_question_is_the_name_and_family_alone() {
        let question = refresh_query("API.test.", Family::V6, 9).unwrap();
        assert_eq!(question.metadata.id, 9);
        assert!(question.metadata.recursion_desired);
        assert_eq!(question.queries.len(), 1);
        assert_eq!(question.queries[0].name().to_ascii(), "API.test.");
        assert_eq!(
            question.queries[0].query_type(),
            hickory_resolver::proto::rr::RecordType::AAAA
        );
        assert!(!crate::resolve::serve::dnssec_ok(&question));
        assert!(refresh_query("not a name..", Family::V4, 1).is_none());
    }
}
