//! When guard asks again for the names its scopes looked up: a name a rule speaks of, answered
//! to a scope through guard's resolver, is asked for again by guard itself (from outside every
//! scope, [`super::refresher`]) each time its answer runs out, for as long as the scope holds
//! it, and its addresses stay in force for the scope while the name still answers with them
//! (nginx, HAProxy and JVMs resolve once and keep the address; a connection pool reconnects to
//! it hours later). This is the schedule alone, without I/O or a clock of its own: every call
//! is given `now`.
//!
//! - A name is asked for again when its answer's TTL runs out, but never sooner than
//!   [`REFRESH_FLOOR`] after the last answer (a TTL of 1 is a load balancer asking resolvers to
//!   ask often; guard only needs to know whether the address a program kept is still the
//!   name's) and at least every [`REFRESH_CEILING`].
//! - One question per name and address family serves every scope that holds the name.
//! - Bounded: at most [`REFRESHES_PER_SECOND`] questions a second for the whole core, at most
//!   [`NAMES_PER_SCOPE`] names refreshed for one scope and [`MAX_REFRESHED`] in all; a name
//!   past a bound is kept as before refreshes existed (its answer's TTL plus
//!   [`super::answers::GRACE`]) and counted.
//! - An answer with addresses keeps those and drops the others of the family (the scope's own
//!   answer still holds each for its TTL plus the grace: a refresh only ever lengthens); no
//!   address (NXDOMAIN, NODATA) drops them all and ends the name's refreshes. A failure
//!   (timeout, SERVFAIL, REFUSED, no result) keeps the addresses and is retried after the
//!   lookups' backoff, until [`FAILURE_HOLD`] has passed since its last answer ran out: then
//!   its addresses go and its refreshes end. Each outcome is counted ([`RefreshCounts`]).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use hickory_resolver::proto::rr::RecordType;

/// The shortest time between two questions for a name: however short its TTL, a refreshed name
/// costs at most 2 questions a minute per family, and an address the name stopped answering
/// with stays in force at most this long after it changed, half of the 60 s an answer was kept
/// past its TTL before refreshes.
pub const REFRESH_FLOOR: Duration = Duration::from_secs(30);
/// The longest: a name whose TTL is a week is still checked hourly (as the rules' own names
/// are, [`super::lookup::MAX_REFRESH`]).
pub const REFRESH_CEILING: Duration = Duration::from_secs(3600);
/// Questions sent upstream a second, for every scope of a core together. A backlog is asked in
/// the order its names came due, and the addresses stay in force while they wait.
pub const REFRESHES_PER_SECOND: u32 = 50;
/// Names (per family) one scope keeps refreshed: what a service needs, not what a program that
/// looks up names by the thousand would make guard ask for forever.
pub const NAMES_PER_SCOPE: usize = 256;
/// Names (per family) refreshed for all scopes together: at [`REFRESH_FLOOR`] that is what
/// [`REFRESHES_PER_SECOND`] asks for in under 90 s.
pub const MAX_REFRESHED: usize = 4096;
/// How long a name whose questions fail keeps its addresses after its last answer ran out: an
/// upstream outage of minutes does not cut every kept connection, and an address is held at
/// most this long past the time its name last vouched for it.
pub const FAILURE_HOLD: Duration = Duration::from_secs(300);
/// How long a question may go without a result before it counts as failed (the upstream
/// exchange gives up after at most 6 s, [`super::upstream`]).
pub const RESULT_WAIT: Duration = Duration::from_secs(10);

/// An address family: the type of question a refresh asks, and the addresses its answer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The family a scope's question was for (`A`, `AAAA`); none for other types.
    pub fn of_query_type(query_type: &str) -> Option<Family> {
        match query_type {
            "A" => Some(Family::V4),
            "AAAA" => Some(Family::V6),
            _ => None,
        }
    }

    pub fn record_type(self) -> RecordType {
        match self {
            Family::V4 => RecordType::A,
            Family::V6 => RecordType::AAAA,
        }
    }

    /// Whether `ip` is of this family (a v4-mapped v6 address is v4, as the book keeps it).
    pub fn holds(self, ip: IpAddr) -> bool {
        crate::policy::rule::canonical_ip(ip).is_ipv4() == (self == Family::V4)
    }
}

/// What the upstream said when guard asked for a name again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// The name's addresses of the family now, and the answer's smallest TTL.
    Addresses { addrs: Vec<IpAddr>, ttl: Duration },
    /// NXDOMAIN, or no address of the family (NODATA).
    Gone,
    /// No answer: a timeout, SERVFAIL, REFUSED (why).
    Failed(String),
}

/// What the owner of the book does with an outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Keep exactly `addrs` of the family in force for each of `scopes` (new ones first).
    Hold {
        scopes: Vec<u64>,
        addrs: Vec<IpAddr>,
    },
    /// The refresh no longer holds the family's addresses for `scopes`: each goes when its own
    /// answer's time is up.
    Release { scopes: Vec<u64> },
    /// Nothing changes (a failure within the hold, or a name no longer refreshed).
    Nothing,
}

/// Refreshes by outcome, since the core started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefreshCounts {
    /// Questions sent.
    pub asked: u64,
    /// Answered with addresses.
    pub answered: u64,
    /// Answered with none (NXDOMAIN, NODATA): the addresses went.
    pub gone: u64,
    /// Not answered (timeout, SERVFAIL, REFUSED, no result within [`RESULT_WAIT`]).
    pub failed: u64,
    /// Failing for longer than [`FAILURE_HOLD`]: the addresses went.
    pub given_up: u64,
    /// A name a scope looked up that was not refreshed: past [`NAMES_PER_SCOPE`] or
    /// [`MAX_REFRESHED`].
    pub not_refreshed: u64,
}

impl RefreshCounts {
    /// Each count with its name, as the daemon's metrics label it.
    pub fn by_outcome(&self) -> [(&'static str, u64); 6] {
        [
            ("asked", self.asked),
            ("answered", self.answered),
            ("gone", self.gone),
            ("failed", self.failed),
            ("given_up", self.given_up),
            ("not_refreshed", self.not_refreshed),
        ]
    }
}

/// A name and the family asked for.
pub type Key = (String, Family);

struct Entry {
    /// The scopes that hold the name (0: every scope, `guard run`'s).
    scopes: BTreeSet<u64>,
    /// When to ask next (or, while asked, when the question counts as failed).
    due: Instant,
    /// When the last answer ran out (its TTL, at least the floor): failures hold the
    /// addresses for [`FAILURE_HOLD`] from here.
    ran_out: Instant,
    failures: u32,
    /// A question is out.
    asked: bool,
}

#[derive(Default)]
pub struct RefreshSchedule {
    entries: HashMap<Key, Entry>,
    /// The entries by when they are due.
    by_due: BTreeSet<(Instant, Key)>,
    /// How many entries list each scope.
    per_scope: HashMap<u64, usize>,
    /// The current second's start and the questions sent in it.
    window: Option<(Instant, u32)>,
    counts: RefreshCounts,
}

/// How long an answer with `ttl` holds before its name is asked for again.
pub fn interval(ttl: Duration) -> Duration {
    ttl.clamp(REFRESH_FLOOR, REFRESH_CEILING)
}

impl RefreshSchedule {
    pub fn new() -> Self {
        Self::default()
    }

    /// `scope` was answered `name` (of `family`, with `ttl`) at `now`: from now on the name is
    /// refreshed for it. Returns whether it is (false: past a bound, counted).
    pub fn enroll(
        &mut self,
        scope: u64,
        name: &str,
        family: Family,
        ttl: Duration,
        now: Instant,
    ) -> bool {
        let key = (name.to_string(), family);
        if let Some(entry) = self.entries.get_mut(&key) {
            if entry.scopes.contains(&scope) {
                return true;
            }
            if self.per_scope.get(&scope).copied().unwrap_or(0) >= NAMES_PER_SCOPE {
                self.counts.not_refreshed += 1;
                return false;
            }
            entry.scopes.insert(scope);
            *self.per_scope.entry(scope).or_default() += 1;
            return true;
        }
        if self.entries.len() >= MAX_REFRESHED
            || self.per_scope.get(&scope).copied().unwrap_or(0) >= NAMES_PER_SCOPE
        {
            self.counts.not_refreshed += 1;
            return false;
        }
        let due = now + interval(ttl);
        self.by_due.insert((due, key.clone()));
        self.entries.insert(
            key,
            Entry {
                scopes: BTreeSet::from([scope]),
                due,
                ran_out: due,
                failures: 0,
                asked: false,
            },
        );
        *self.per_scope.entry(scope).or_default() += 1;
        true
    }

    /// The names to ask for now, earliest due first, within [`REFRESHES_PER_SECOND`]; each is
    /// marked asked until its result comes or [`RESULT_WAIT`] passes. A question that got no
    /// result by then counts as failed, and may end the name's refreshes: those come back as
    /// verdicts.
    pub fn due(&mut self, now: Instant) -> (Vec<Key>, Vec<(Key, Verdict)>) {
        let mut ask = Vec::new();
        let mut verdicts = Vec::new();
        while let Some((due, key)) = self.by_due.first().cloned() {
            if due > now {
                break;
            }
            let lost = self.entries.get(&key).is_some_and(|entry| entry.asked);
            if lost {
                let verdict = self.failed(&key, now);
                if verdict != Verdict::Nothing {
                    verdicts.push((key, verdict));
                }
                continue;
            }
            if !self.take_budget(now) {
                break;
            }
            self.counts.asked += 1;
            self.reschedule(&key, now + RESULT_WAIT, |entry| entry.asked = true);
            ask.push(key);
        }
        (ask, verdicts)
    }

    /// What the upstream said of `name` at `now`, and what the book does with it.
    pub fn answered(
        &mut self,
        name: &str,
        family: Family,
        outcome: &RefreshOutcome,
        now: Instant,
    ) -> Verdict {
        let key = (name.to_string(), family);
        if !self.entries.get(&key).is_some_and(|entry| entry.asked) {
            // Ended meanwhile (its scopes, a new policy), or a late result of a question
            // already counted as lost.
            return Verdict::Nothing;
        }
        match outcome {
            RefreshOutcome::Addresses { addrs, ttl } => {
                self.counts.answered += 1;
                let next = now + interval(*ttl);
                let scopes = self.reschedule(&key, next, |entry| {
                    entry.asked = false;
                    entry.failures = 0;
                    entry.ran_out = next;
                });
                Verdict::Hold {
                    scopes,
                    addrs: addrs.clone(),
                }
            }
            RefreshOutcome::Gone => {
                self.counts.gone += 1;
                Verdict::Release {
                    scopes: self.remove(&key),
                }
            }
            RefreshOutcome::Failed(_) => self.failed(&key, now),
        }
    }

    /// A question for `key` failed at `now`: asked again after the backoff, or given up.
    fn failed(&mut self, key: &Key, now: Instant) -> Verdict {
        self.counts.failed += 1;
        let Some(entry) = self.entries.get(key) else {
            return Verdict::Nothing;
        };
        let failures = entry.failures.saturating_add(1);
        let retry = now + super::lookup::backoff(failures);
        if retry.saturating_duration_since(entry.ran_out) > FAILURE_HOLD {
            self.counts.given_up += 1;
            return Verdict::Release {
                scopes: self.remove(key),
            };
        }
        self.reschedule(key, retry, |entry| {
            entry.asked = false;
            entry.failures = failures;
        });
        Verdict::Nothing
    }

    /// `scope` no longer holds `name` (the book let it go: its bound): not refreshed for it.
    pub fn forget_scope_of(&mut self, name: &str, family: Family, scope: u64) {
        let key = (name.to_string(), family);
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        if entry.scopes.remove(&scope) {
            uncount(&mut self.per_scope, scope);
        }
        if entry.scopes.is_empty() {
            self.remove(&key);
        }
    }

    /// `scope` ended: nothing is refreshed for it any more.
    pub fn end_scope(&mut self, scope: u64) {
        let keys: Vec<Key> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.scopes.contains(&scope))
            .map(|(key, _)| key.clone())
            .collect();
        for (name, family) in keys {
            self.forget_scope_of(&name, family, scope);
        }
    }

    /// Ends the refreshes of the names `keep` says no: returns each with the scopes that held
    /// it, whose addresses go when their own answers' time is up.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) -> Vec<(Key, Vec<u64>)> {
        let dropped: Vec<Key> = self
            .entries
            .keys()
            .filter(|(name, _)| !keep(name))
            .cloned()
            .collect();
        dropped
            .into_iter()
            .map(|key| {
                let scopes = self.remove(&key);
                (key, scopes)
            })
            .collect()
    }

    /// Whether `scope` has `name`'s family refreshed.
    pub fn refreshes(&self, scope: u64, name: &str, family: Family) -> bool {
        self.entries
            .get(&(name.to_string(), family))
            .is_some_and(|entry| entry.scopes.contains(&scope))
    }

    /// When the next question is due (or a question out counts as lost).
    pub fn next_due(&self) -> Option<Instant> {
        self.by_due.first().map(|(due, _)| *due)
    }

    /// How many names (per family) are refreshed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn counts(&self) -> RefreshCounts {
        self.counts
    }

    /// One question more in the current second, if the bound allows it.
    fn take_budget(&mut self, now: Instant) -> bool {
        let (start, sent) = match self.window {
            Some((start, sent))
                if now.saturating_duration_since(start) < Duration::from_secs(1) =>
            {
                (start, sent)
            }
            _ => (now, 0),
        };
        if sent >= REFRESHES_PER_SECOND {
            self.window = Some((start, sent));
            return false;
        }
        self.window = Some((start, sent + 1));
        true
    }

    /// Moves `key` to `due` after `change`; returns its scopes.
    fn reschedule(&mut self, key: &Key, due: Instant, change: impl FnOnce(&mut Entry)) -> Vec<u64> {
        let Some(entry) = self.entries.get_mut(key) else {
            return Vec::new();
        };
        self.by_due.remove(&(entry.due, key.clone()));
        change(entry);
        entry.due = due;
        self.by_due.insert((due, key.clone()));
        entry.scopes.iter().copied().collect()
    }

    /// Drops `key`; returns the scopes that held it.
    fn remove(&mut self, key: &Key) -> Vec<u64> {
        let Some(entry) = self.entries.remove(key) else {
            return Vec::new();
        };
        self.by_due.remove(&(entry.due, key.clone()));
        for scope in &entry.scopes {
            uncount(&mut self.per_scope, *scope);
        }
        entry.scopes.into_iter().collect()
    }
}

fn uncount(per_scope: &mut HashMap<u64, usize>, scope: u64) {
    if let Some(held) = per_scope.get_mut(&scope) {
        *held -= 1;
        if *held == 0 {
            per_scope.remove(&scope);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn names(keys: &[Key]) -> Vec<&str> {
        keys.iter().map(|(name, _)| name.as_str()).collect()
    }

    fn addresses(list: &[&str], ttl: u64) -> RefreshOutcome {
        RefreshOutcome::Addresses {
            addrs: list.iter().map(|a| ip(a)).collect(),
            ttl: secs(ttl),
        }
    }

    #[test]
    fn a_name_is_asked_for_again_when_its_ttl_runs_out_but_never_sooner_than_the_floor() {
        let t0 = Instant::now();
        let mut schedule = RefreshSchedule::new();
        assert!(schedule.enroll(7, "short.test", Family::V4, secs(1), t0));
        assert!(schedule.enroll(7, "long.test", Family::V4, secs(7 * 86_400), t0));
        assert!(schedule.enroll(7, "mid.test", Family::V6, secs(90), t0));
        // TTL 1 is asked for at the floor, not every second.
        assert_eq!(schedule.next_due(), Some(t0 + REFRESH_FLOOR));
        assert!(schedule.due(t0 + REFRESH_FLOOR - secs(1)).0.is_empty());
        let (asked, _) = schedule.due(t0 + REFRESH_FLOOR);
        assert_eq!(names(&asked), ["short.test"]);
        // Asked once: not again while its question is out.
        assert!(schedule.due(t0 + REFRESH_FLOOR + secs(1)).0.is_empty());
        // It still answers with TTL 1: the next question is a floor after the answer.
        let t1 = t0 + REFRESH_FLOOR + secs(2);
        let held = schedule.answered("short.test", Family::V4, &addresses(&["192.0.2.1"], 1), t1);
        assert_eq!(
            held,
            Verdict::Hold {
                scopes: vec![7],
                addrs: vec![ip("192.0.2.1")]
            }
        );
        assert_eq!(schedule.next_due(), Some(t1 + REFRESH_FLOOR));
        // A TTL between the bounds is the TTL; a week is an hour.
        let (asked, _) = schedule.due(t0 + secs(90));
        assert_eq!(
            names(&asked),
            ["short.test", "mid.test"],
            "earliest due first"
        );
        assert!(schedule.due(t0 + REFRESH_CEILING - secs(1)).0.len() < 3);
        let long = ("long.test".to_string(), Family::V4);
        assert!(schedule.due(t0 + REFRESH_CEILING).0.contains(&long));
        let counts = schedule.counts();
        assert_eq!(counts.answered, 1);
        assert!(counts.asked >= 4, "{counts:?}");
    }

    #[test]
    fn one_question_serves_every_scope_that_holds_the_name_and_an_ended_scope_stops_its_own() {
        let t0 = Instant::now();
        let mut schedule = RefreshSchedule::new();
        assert!(schedule.enroll(7, "api.test", Family::V4, secs(60), t0));
        assert!(schedule.enroll(8, "api.test", Family::V4, secs(60), t0 + secs(5)));
        assert!(schedule.enroll(8, "only8.test", Family::V4, secs(60), t0));
        assert!(schedule.refreshes(7, "api.test", Family::V4));
        assert!(!schedule.refreshes(7, "api.test", Family::V6));
        let (asked, _) = schedule.due(t0 + secs(60));
        assert_eq!(names(&asked), ["api.test", "only8.test"]);
        let verdict = schedule.answered(
            "api.test",
            Family::V4,
            &addresses(&["192.0.2.1"], 60),
            t0 + secs(61),
        );
        assert!(matches!(verdict, Verdict::Hold { scopes, .. } if scopes == [7, 8]));
        schedule.end_scope(8);
        // Its result after the scope ended changes nothing.
        let late = schedule.answered(
            "only8.test",
            Family::V4,
            &addresses(&["192.0.2.2"], 60),
            t0 + secs(62),
        );
        assert_eq!(late, Verdict::Nothing);
        assert_eq!(schedule.len(), 1);
        assert!(!schedule.refreshes(8, "api.test", Family::V4));
        let (asked, _) = schedule.due(t0 + secs(200));
        assert_eq!(names(&asked), ["api.test"]);
        schedule.end_scope(7);
        assert!(schedule.is_empty());
        assert_eq!(schedule.next_due(), None);
    }

    #[test]
    fn no_address_ends_the_refreshes_and_lets_the_addresses_go() {
        let t0 = Instant::now();
        let mut schedule = RefreshSchedule::new();
        schedule.enroll(0, "gone.test", Family::V4, secs(1), t0);
        schedule.due(t0 + REFRESH_FLOOR);
        let verdict = schedule.answered(
            "gone.test",
            Family::V4,
            &RefreshOutcome::Gone,
            t0 + REFRESH_FLOOR,
        );
        assert_eq!(verdict, Verdict::Release { scopes: vec![0] });
        assert!(schedule.is_empty());
        assert_eq!(schedule.counts().gone, 1);
    }

    #[test]
    fn failures_keep_the_addresses_for_the_hold_with_backoff_then_let_them_go() {
        let t0 = Instant::now();
        let mut schedule = RefreshSchedule::new();
        schedule.enroll(0, "flaky.test", Family::V4, secs(1), t0);
        let ran_out = t0 + REFRESH_FLOOR;
        let failed = RefreshOutcome::Failed("SERVFAIL".into());
        let mut now = ran_out;
        let mut retries = Vec::new();
        let verdict = loop {
            let (asked, _) = schedule.due(now);
            assert_eq!(names(&asked), ["flaky.test"], "at {:?}", now - t0);
            let verdict = schedule.answered("flaky.test", Family::V4, &failed, now);
            if verdict != Verdict::Nothing {
                break verdict;
            }
            let next = schedule.next_due().unwrap();
            retries.push((next - now).as_secs());
            now = next;
            assert!(now - ran_out <= FAILURE_HOLD, "held past the bound");
        };
        // The lookups' backoff: 5 s doubling to a minute.
        assert_eq!(retries[..5], [5, 10, 20, 40, 60]);
        assert_eq!(verdict, Verdict::Release { scopes: vec![0] });
        assert!(
            now - ran_out > FAILURE_HOLD - secs(60),
            "let go early: {:?}",
            now - ran_out
        );
        let counts = schedule.counts();
        assert_eq!(counts.given_up, 1);
        assert_eq!(counts.failed, retries.len() as u64 + 1);
        assert!(schedule.is_empty());
    }

    #[test]
    fn a_failure_after_an_answer_holds_from_when_that_answer_ran_out() {
        let t0 = Instant::now();
        let mut schedule = RefreshSchedule::new();
        schedule.enroll(0, "hourly.test", Family::V4, secs(3600), t0);
        let due = t0 + secs(3600);
        schedule.due(due);
        let failed = RefreshOutcome::Failed("timeout".into());
        // An hour after the answer, one failure is a retry, not the end.
        assert_eq!(
            schedule.answered("hourly.test", Family::V4, &failed, due),
            Verdict::Nothing
        );
        assert_eq!(schedule.next_due(), Some(due + secs(5)));
        schedule.due(due + secs(5));
        let answer = addresses(&["192.0.2.9"], 3600);
        assert!(matches!(
            schedule.answered("hourly.test", Family::V4, &answer, due + secs(6)),
            Verdict::Hold { .. }
        ));
        assert_eq!(schedule.next_due(), Some(due + secs(6) + secs(3600)));
    }

    #[test]
    fn a_question_without_a_result_counts_as_failed_and_is_asked_again() {
        let t0 = Instant::now();
        let mut schedule = RefreshSchedule::new();
        schedule.enroll(0, "lost.test", Family::V4, secs(1), t0);
        let asked_at = t0 + REFRESH_FLOOR;
        assert_eq!(schedule.due(asked_at).0.len(), 1);
        assert!(schedule.due(asked_at + RESULT_WAIT - secs(1)).0.is_empty());
        let (asked, verdicts) = schedule.due(asked_at + RESULT_WAIT);
        assert!(asked.is_empty() && verdicts.is_empty());
        assert_eq!(schedule.counts().failed, 1);
        let retry = asked_at + RESULT_WAIT + secs(5);
        assert_eq!(schedule.next_due(), Some(retry));
        assert_eq!(names(&schedule.due(retry).0), ["lost.test"]);
        // The lost question's late result is taken as the answer it is.
        let answer = addresses(&["192.0.2.1"], 1);
        assert!(matches!(
            schedule.answered("lost.test", Family::V4, &answer, retry),
            Verdict::Hold { .. }
        ));
    }

    #[test]
    fn questions_are_bounded_per_second_and_names_per_scope() {
        let t0 = Instant::now();
        let mut schedule = RefreshSchedule::new();
        for i in 0..NAMES_PER_SCOPE {
            assert!(schedule.enroll(7, &format!("n{i}.test"), Family::V4, secs(1), t0));
        }
        assert!(!schedule.enroll(7, "one-more.test", Family::V4, secs(1), t0));
        // The other family is a question of its own, and counts on its own.
        assert!(!schedule.enroll(7, "n0.test", Family::V6, secs(1), t0));
        assert_eq!(schedule.counts().not_refreshed, 2);
        // Another scope is not held back by this one's bound.
        assert!(schedule.enroll(8, "n0.test", Family::V4, secs(1), t0));
        assert!(schedule.enroll(8, "other.test", Family::V4, secs(1), t0));
        let due = t0 + REFRESH_FLOOR;
        let mut per_second = Vec::new();
        let mut asked_in_all = 0;
        for second in 0..10 {
            let now = due + secs(second);
            let mut this_second = 0;
            for step in 0..4 {
                let (asked, _) = schedule.due(now + Duration::from_millis(step * 250));
                this_second += asked.len();
            }
            per_second.push(this_second);
            asked_in_all += this_second;
        }
        assert!(
            per_second
                .iter()
                .all(|n| *n <= REFRESHES_PER_SECOND as usize),
            "{per_second:?}"
        );
        assert_eq!(per_second[0], REFRESHES_PER_SECOND as usize);
        assert_eq!(
            asked_in_all,
            NAMES_PER_SCOPE + 1,
            "every name asked once, in order"
        );
    }

    #[test]
    fn a_name_no_rule_speaks_of_any_more_is_not_asked_for() {
        let t0 = Instant::now();
        let mut schedule = RefreshSchedule::new();
        schedule.enroll(7, "kept.test", Family::V4, secs(1), t0);
        schedule.enroll(7, "dropped.test", Family::V4, secs(1), t0);
        schedule.enroll(8, "dropped.test", Family::V6, secs(1), t0);
        let mut dropped = schedule.retain(|name| name == "kept.test");
        dropped.sort();
        assert_eq!(
            dropped,
            [
                (("dropped.test".to_string(), Family::V4), vec![7]),
                (("dropped.test".to_string(), Family::V6), vec![8])
            ]
        );
        assert_eq!(names(&schedule.due(t0 + REFRESH_FLOOR).0), ["kept.test"]);
    }
}
