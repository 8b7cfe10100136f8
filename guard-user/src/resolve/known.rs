//! What guard knows of the rules' host names, for one enforcement core: what it resolved
//! itself (a rule's name, without its resolver in the path; an approved stand-in's name), what
//! its resolver answered each scope, and which of those names it asks for again while the
//! scope holds them ([`super::refresh`]). Compiling a policy reads it as [`KnownAddresses`].

use std::net::IpAddr;
use std::path::Path;
use std::time::Instant;

use super::answers::{AnswerBook, KnownAddresses};
use super::hosts_file;
use super::lookup::DnsCache;
use super::refresh::{Family, RefreshCounts, RefreshSchedule, Verdict};
use super::refresher::{Refreshed, Refresher};
use super::{AnswerSource, Answered, NameDecision};
use crate::compile::NameChanges;

pub struct KnownNames {
    resolved: DnsCache,
    answers: AnswerBook,
    /// guard's resolver is in the path of the scopes' DNS: a rule's name is put in force when
    /// a scope asks for it, not looked up beforehand.
    on_demand: bool,
    /// The names asked for again, and where to send the questions (none until a resolver is
    /// there to ask: then nothing is refreshed).
    refreshes: RefreshSchedule,
    refresher: Option<Refresher>,
}

impl KnownNames {
    /// What is known at start: `resolved`, and with guard's resolver in the path (`on_demand`)
    /// the names the system resolver answers without DNS (`/etc/hosts`), which it never sees.
    pub fn new(resolved: DnsCache, on_demand: bool) -> KnownNames {
        let mut answers = AnswerBook::new();
        if on_demand {
            hosts_file::seed(&mut answers, Path::new(hosts_file::HOSTS_FILE));
        }
        KnownNames {
            resolved,
            answers,
            on_demand,
            refreshes: RefreshSchedule::new(),
            refresher: None,
        }
    }

    /// From now on the names the scopes look up are asked for again through `refresher`
    /// (guard's resolver's, [`super::Resolver::refresher`]).
    pub fn refresh_through(&mut self, refresher: Refresher) {
        self.refresher = Some(refresher);
    }

    /// The refreshes by outcome so far.
    pub fn refresh_counts(&self) -> RefreshCounts {
        self.refreshes.counts()
    }

    /// How many names (per address family) are refreshed now.
    pub fn refreshed_names(&self) -> usize {
        self.refreshes.len()
    }

    /// As compiling a policy reads it.
    pub fn addresses(&self) -> KnownAddresses<'_> {
        KnownAddresses {
            resolved: Some(&self.resolved),
            answered: &self.answers,
            on_demand: self.on_demand,
        }
    }

    pub fn on_demand(&self) -> bool {
        self.on_demand
    }

    /// What guard resolved itself.
    pub fn resolved(&self) -> &DnsCache {
        &self.resolved
    }

    /// What guard resolved itself, to refresh or add to (then say which names changed with
    /// [`crate::in_force::Core::names_changed`]).
    pub fn resolved_mut(&mut self) -> &mut DnsCache {
        &mut self.resolved
    }

    /// What guard's resolver answered.
    pub fn answers(&self) -> &AnswerBook {
        &self.answers
    }

    /// The names guard's resolver answered `ip` for in `scope`.
    pub fn names_for(&self, ip: IpAddr, scope: u64) -> Vec<String> {
        self.answers.names_for(ip, scope)
    }

    /// Records `answers`, each for the scope that asked (0: every scope; `None`: unknown, so
    /// it is attributed to no scope and fails closed), enrolls the names a rule speaks of in
    /// the refreshes, and drops what is past its time. Returns the names whose addresses
    /// changed: grown (an answer adds addresses, it never removes one), or changed otherwise
    /// (they lost some to their time or the bound).
    pub fn record_answers(
        &mut self,
        answers: &[(Option<u64>, &Answered)],
        now: Instant,
    ) -> NameChanges {
        let mut grown = Vec::new();
        for (scope, answer) in answers {
            let Some(scope) = *scope else { continue };
            if self
                .answers
                .record_in(scope, &answer.name, &answer.addrs, answer.ttl, now)
            {
                grown.push(answer.name.clone());
            }
            self.enroll(scope, answer, now);
        }
        let mut changed = self.settle(now);
        changed.sort();
        changed.dedup();
        grown.sort();
        grown.dedup();
        grown.retain(|name| changed.binary_search(name).is_err());
        NameChanges { changed, grown }
    }

    /// Refreshes `answer`'s name for `scope` when its addresses are in the maps for a rule
    /// (a name no rule speaks of is only attributed by them; a stand-in is guard's own).
    fn enroll(&mut self, scope: u64, answer: &Answered, now: Instant) {
        let Some(family) = Family::of_query_type(&answer.query_type) else {
            return;
        };
        let refreshable = self.refresher.is_some()
            && answer.decision == NameDecision::Ruled
            && answer.source != AnswerSource::StandIn
            && !answer.addrs.is_empty();
        if refreshable
            && self
                .refreshes
                .enroll(scope, &answer.name, family, answer.ttl, now)
        {
            self.answers
                .mark_refreshed(scope, &answer.name, &answer.addrs);
        }
    }

    /// Takes what the upstream said of the names guard asked for again: the addresses a name
    /// still answers with are kept for its scopes (new ones added), the others go when their
    /// own answer's time is up. Returns the names whose addresses changed.
    pub fn take_refreshed(&mut self, refreshed: Vec<Refreshed>, now: Instant) -> Vec<String> {
        let mut changed = Vec::new();
        for Refreshed {
            name,
            family,
            outcome,
        } in refreshed
        {
            let verdict = self.refreshes.answered(&name, family, &outcome, now);
            if self.follow(&name, family, verdict, now) {
                changed.push(name);
            }
        }
        changed.extend(self.settle(now));
        changed.sort();
        changed.dedup();
        changed
    }

    /// Asks for the names whose answers ran out (within the schedule's bounds); a question
    /// that got no result in time counts as failed. Returns the names whose addresses changed
    /// (a name that failed for too long).
    pub fn ask_due(&mut self, now: Instant) -> Vec<String> {
        if self.refreshes.next_due().is_none_or(|due| due > now) {
            return Vec::new();
        }
        let (ask, verdicts) = self.refreshes.due(now);
        for (name, family) in ask {
            let sent = self
                .refresher
                .as_ref()
                .is_some_and(|refresher| refresher.ask(&name, family));
            if !sent {
                // The resolver is gone: a failure like any other, held for a bounded time.
                let failed =
                    super::refresh::RefreshOutcome::Failed("guard's resolver ended".into());
                let verdict = self.refreshes.answered(&name, family, &failed, now);
                self.follow(&name, family, verdict, now);
            }
        }
        for ((name, family), verdict) in verdicts {
            self.follow(&name, family, verdict, now);
        }
        self.settle(now)
    }

    /// `scope` ended: its answers go, and so do its refreshes. Returns the names whose
    /// addresses changed.
    pub fn end_scope(&mut self, scope: u64) -> Vec<String> {
        self.refreshes.end_scope(scope);
        self.answers.drop_scope(scope)
    }

    /// Refreshes only the names `keep` says yes to (a new policy's rules); the others' addresses
    /// go when their own answers' time is up.
    pub fn keep_refreshing(&mut self, keep: impl Fn(&str) -> bool) {
        for ((name, family), scopes) in self.refreshes.retain(keep) {
            for scope in scopes {
                self.answers.release(scope, &name, family);
            }
        }
    }

    /// Does what `verdict` says to `name`'s addresses of `family`; whether one was added.
    fn follow(&mut self, name: &str, family: Family, verdict: Verdict, now: Instant) -> bool {
        let mut added = false;
        match verdict {
            Verdict::Hold { scopes, addrs } => {
                for scope in scopes {
                    match self.answers.hold(scope, name, family, &addrs, now) {
                        Some(new) => added |= new,
                        None => self.refreshes.forget_scope_of(name, family, scope),
                    }
                }
            }
            Verdict::Release { scopes } => {
                for scope in scopes {
                    self.answers.release(scope, name, family);
                }
            }
            Verdict::Nothing => {}
        }
        added
    }

    /// Drops what is past its time and what the bound pushed out: the names that lost
    /// addresses.
    fn settle(&mut self, now: Instant) -> Vec<String> {
        let book = &mut self.answers;
        let mut changed = Vec::new();
        if book.next_expiry().is_some_and(|due| due <= now) {
            changed.extend(book.prune(now));
        }
        changed.extend(book.take_evicted());
        changed
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::Duration;

    use super::*;
    use crate::resolve::answers::GRACE;
    use crate::resolve::refresh::{REFRESH_FLOOR, RefreshOutcome};
    use crate::resolve::refresher::RefreshQuery;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn answer(name: &str, addrs: &[&str], ttl: u64, decision: NameDecision) -> Answered {
        Answered {
            name: name.to_string(),
            query_type: "A".to_string(),
            addrs: addrs.iter().map(|a| ip(a)).collect(),
            ttl: Duration::from_secs(ttl),
            decision,
            source: AnswerSource::Forwarded,
            process: None,
        }
    }

    fn refreshed(name: &str, outcome: RefreshOutcome) -> Vec<Refreshed> {
        vec![Refreshed {
            name: name.to_string(),
            family: Family::V4,
            outcome,
        }]
    }

    fn addresses(list: &[&str]) -> RefreshOutcome {
        RefreshOutcome::Addresses {
            addrs: list.iter().map(|a| ip(a)).collect(),
            ttl: Duration::from_secs(1),
        }
    }

    fn asked(questions: &mut tokio::sync::mpsc::UnboundedReceiver<RefreshQuery>) -> Vec<String> {
        std::iter::from_fn(|| questions.try_recv().ok())
            .map(|q| q.name)
            .collect()
    }

    /// Known names that refresh through a channel the test reads, with no hosts file.
    fn known() -> (
        KnownNames,
        tokio::sync::mpsc::UnboundedReceiver<RefreshQuery>,
    ) {
        let mut known = KnownNames::new(DnsCache::new(), false);
        let (refresher, questions) = Refresher::channel();
        known.refresh_through(refresher);
        (known, questions)
    }

    #[test]
    fn an_address_stays_while_the_name_answers_with_it_and_goes_when_it_stops() {
        let (mut known, mut questions) = known();
        let t0 = Instant::now();
        let kept = answer("api.test", &["192.0.2.1"], 1, NameDecision::Ruled);
        let only_attributed = answer("other.test", &["192.0.2.9"], 1, NameDecision::Unknown);
        known.record_answers(&[(Some(7), &kept), (Some(7), &only_attributed)], t0);
        assert_eq!(known.refreshed_names(), 1, "only a ruled name is refreshed");

        // Five minutes of TTL 1: a question each floor interval, the address kept throughout.
        let mut now = t0;
        for _ in 0..10 {
            now += REFRESH_FLOOR;
            // Only the name no rule speaks of goes (at its TTL plus the grace).
            let changed = known.ask_due(now);
            assert!(!changed.contains(&"api.test".to_string()), "{changed:?}");
            assert_eq!(asked(&mut questions), ["api.test"]);
            let changed =
                known.take_refreshed(refreshed("api.test", addresses(&["192.0.2.1"])), now);
            assert!(changed.is_empty(), "{changed:?}");
            assert_eq!(known.names_for(ip("192.0.2.1"), 7), ["api.test"]);
        }
        assert!(
            known.names_for(ip("192.0.2.9"), 7).is_empty(),
            "went at TTL + grace"
        );
        assert!(now - t0 >= Duration::from_secs(300));

        // It moves: the new address is in before the old one goes, both in one change.
        now += REFRESH_FLOOR;
        known.ask_due(now);
        assert_eq!(asked(&mut questions), ["api.test"]);
        let changed = known.take_refreshed(refreshed("api.test", addresses(&["192.0.2.2"])), now);
        assert_eq!(changed, ["api.test"]);
        assert!(known.names_for(ip("192.0.2.1"), 7).is_empty());
        assert_eq!(known.names_for(ip("192.0.2.2"), 7), ["api.test"]);

        // NXDOMAIN: the refresh's own address goes at once, and nothing is asked again.
        now += REFRESH_FLOOR;
        known.ask_due(now);
        assert_eq!(asked(&mut questions), ["api.test"]);
        let changed = known.take_refreshed(refreshed("api.test", RefreshOutcome::Gone), now);
        assert_eq!(changed, ["api.test"]);
        assert!(known.answers().addresses("api.test").is_empty());
        assert_eq!(known.refreshed_names(), 0);
        known.ask_due(now + Duration::from_secs(3600));
        assert!(asked(&mut questions).is_empty());
    }

    #[test]
    fn a_refresh_only_lengthens_what_the_scopes_own_answer_holds() {
        let (mut known, mut questions) = known();
        let t0 = Instant::now();
        let kept = answer("api.test", &["192.0.2.1"], 60, NameDecision::Ruled);
        known.record_answers(&[(Some(7), &kept)], t0);
        let t1 = t0 + Duration::from_secs(60);
        known.ask_due(t1);
        assert_eq!(asked(&mut questions), ["api.test"]);
        // Moved already: the scope's own answer still holds its address until TTL + grace.
        known.take_refreshed(refreshed("api.test", addresses(&["192.0.2.2"])), t1);
        assert_eq!(known.answers().addresses("api.test").len(), 2);
        let own_time = t0 + Duration::from_secs(60) + GRACE;
        assert_eq!(known.record_answers(&[], own_time).changed, ["api.test"]);
        assert_eq!(known.answers().addresses("api.test"), [ip("192.0.2.2")]);
    }

    #[test]
    fn an_ended_scope_loses_its_answers_and_its_refreshes_and_another_keeps_its_own() {
        let (mut known, mut questions) = known();
        let t0 = Instant::now();
        let kept = answer("api.test", &["192.0.2.1"], 1, NameDecision::Ruled);
        known.record_answers(&[(Some(7), &kept), (Some(8), &kept)], t0);
        assert_eq!(known.end_scope(8), ["api.test"]);
        assert!(known.names_for(ip("192.0.2.1"), 8).is_empty());
        known.ask_due(t0 + REFRESH_FLOOR);
        assert_eq!(asked(&mut questions), ["api.test"], "still scope 7's");
        assert_eq!(known.end_scope(7), ["api.test"]);
        assert_eq!(known.refreshed_names(), 0);
        assert_eq!(known.answers().address_count(), 0);
    }

    #[test]
    fn without_a_resolver_to_ask_nothing_is_held_past_its_time() {
        let mut known = KnownNames::new(DnsCache::new(), false);
        let t0 = Instant::now();
        let kept = answer("api.test", &["192.0.2.1"], 1, NameDecision::Ruled);
        known.record_answers(&[(Some(0), &kept)], t0);
        assert_eq!(known.refreshed_names(), 0);
        let gone = t0 + Duration::from_secs(1) + GRACE;
        assert_eq!(known.record_answers(&[], gone).changed, ["api.test"]);
    }

    #[test]
    fn a_name_no_rule_speaks_of_after_a_reload_goes_at_its_own_time() {
        let (mut known, _questions) = known();
        let t0 = Instant::now();
        let kept = answer("api.test", &["192.0.2.1"], 1, NameDecision::Ruled);
        known.record_answers(&[(Some(0), &kept)], t0);
        let later = t0 + Duration::from_secs(600);
        assert!(
            known.record_answers(&[], later).is_empty(),
            "held by its refresh"
        );
        known.keep_refreshing(|_| false);
        assert_eq!(known.record_answers(&[], later).changed, ["api.test"]);
    }
}
