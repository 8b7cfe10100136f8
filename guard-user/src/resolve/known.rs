//! What guard knows of the rules' host names, for one enforcement core: what it resolved
//! itself (a rule's name, without its resolver in the path; an approved stand-in's name) and
//! what its resolver answered each scope. Compiling a policy reads it as [`KnownAddresses`].

use std::net::IpAddr;
use std::path::Path;
use std::time::Instant;

use super::Answered;
use super::answers::{AnswerBook, KnownAddresses};
use super::hosts_file;
use super::lookup::DnsCache;

pub struct KnownNames {
    resolved: DnsCache,
    answers: AnswerBook,
    /// guard's resolver is in the path of the scopes' DNS: a rule's name is put in force when
    /// a scope asks for it, not looked up beforehand.
    on_demand: bool,
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
        }
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
    /// it is attributed to no scope and fails closed), and drops what is past its time.
    /// Returns the names whose addresses changed.
    pub fn record_answers(
        &mut self,
        answers: &[(Option<u64>, &Answered)],
        now: Instant,
    ) -> Vec<String> {
        let book = &mut self.answers;
        let mut changed: Vec<String> = answers
            .iter()
            .filter(|(scope, answer)| {
                scope.is_some_and(|scope| {
                    book.record_in(scope, &answer.name, &answer.addrs, answer.ttl, now)
                })
            })
            .map(|(_, answer)| answer.name.clone())
            .collect();
        if book.next_expiry().is_some_and(|due| due <= now) {
            changed.extend(book.prune(now));
        }
        changed.extend(book.take_evicted());
        changed.sort();
        changed.dedup();
        changed
    }
}
