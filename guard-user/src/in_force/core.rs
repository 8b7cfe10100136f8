//! One enforcement core, written once for `guard run` (one core for its one scope) and the
//! daemon (one core for its scopes, the program sets of its overlays and patterns stacked on
//! it): the policy in force, the approvals on top of it, and what is known of the names, with
//! every way they change. Approvals and the resolver's answers are kept by the scope they
//! belong to, so one core serves many scopes without one's answers holding in another.
//!
//! A change goes into the core's own set first; if that fails nothing changes. The stacked
//! sets follow: one that fails keeps its previous image, which the core's set still holds no
//! looser than before (an approval it lacks is asked again).

use std::net::IpAddr;
use std::time::Instant;

use anyhow::Result;

use super::{InForce, Modes, names_guard_resolves};
use crate::asks::{Approval, Approvals};
use crate::compile::image::EnforcementImage;
use crate::compile::{CompileEnv, NameChanges};
use crate::kernel::loader::Enforcer;
use crate::kernel::maps::SyncStats;
use crate::policy::Policy;
use crate::resolve::known::KnownNames;
use crate::resolve::{Answered, ResolverEvent, ResolverNote};

pub struct Core {
    names: KnownNames,
    approvals: Approvals,
    in_force: InForce,
}

/// The program sets stacked on a core, each with the scope it was made for (for its errors).
pub trait Stacked<'a>: IntoIterator<Item = (u64, &'a mut InForce)> {}
impl<'a, T: IntoIterator<Item = (u64, &'a mut InForce)>> Stacked<'a> for T {}

/// No stacked sets: a core alone (`guard run`).
pub fn unstacked<'a>() -> std::iter::Empty<(u64, &'a mut InForce)> {
    std::iter::empty()
}

impl Core {
    /// Puts `policy` in force in `enforcer`'s maps, with what is known of its names.
    pub fn start(
        enforcer: Enforcer,
        policy: Policy,
        names: KnownNames,
        env: CompileEnv,
        modes: Modes,
    ) -> Result<Core> {
        let approvals = Approvals::default();
        let in_force = InForce::start(enforcer, policy, (&names, &approvals), env, modes)?;
        Ok(Core {
            names,
            approvals,
            in_force,
        })
    }

    pub fn policy(&self) -> &Policy {
        self.in_force.policy()
    }

    pub fn image(&self) -> &EnforcementImage {
        self.in_force.image()
    }

    pub fn enforcer(&self) -> &Enforcer {
        self.in_force.enforcer()
    }

    pub fn enforcer_mut(&mut self) -> &mut Enforcer {
        self.in_force.enforcer_mut()
    }

    /// The approvals held in the kernel on top of the policy.
    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    pub fn names(&self) -> &KnownNames {
        &self.names
    }

    /// What is known of the names, to resolve more into (then [`Core::names_changed`]).
    pub fn names_mut(&mut self) -> &mut KnownNames {
        &mut self.names
    }

    /// The names guard's resolver answered `ip` for in `scope`.
    pub fn names_for(&self, ip: IpAddr, scope: u64) -> Vec<String> {
        self.names.names_for(ip, scope)
    }

    /// The names guard must resolve itself to enforce `policy` with the approvals held.
    pub fn names_to_resolve(&self, policy: &Policy) -> Vec<String> {
        names_guard_resolves(
            policy,
            &self.approvals,
            self.names.answers(),
            self.names.on_demand(),
        )
    }

    /// Those of `names` guard has not resolved yet (e.g. [`Core::names_to_resolve`], or the
    /// stand-ins an approval approves: only once approved may those leave the host).
    pub fn unresolved(&self, names: impl IntoIterator<Item = String>) -> Vec<String> {
        names
            .into_iter()
            .filter(|name| self.names.resolved().expires(name).is_none())
            .collect()
    }

    /// The image of the policy with `approvals` on top, not yet in force.
    pub fn compile_with(&self, approvals: &Approvals) -> Result<EnforcementImage> {
        self.in_force.compile(&self.names, approvals)
    }

    /// Puts `image` (made by [`Core::compile_with`] with the approvals held) in force, then
    /// compiles the stacked sets again.
    pub fn apply<'a>(
        &mut self,
        image: EnforcementImage,
        stacked: impl Stacked<'a>,
    ) -> Result<SyncStats> {
        let stats = self.in_force.apply(image)?;
        self.rebuild_stacked(stacked);
        Ok(stats)
    }

    /// Holds `approval` from now on, with the earlier ones; on an error nothing changes.
    pub fn add_approval<'a>(
        &mut self,
        approval: Approval,
        stacked: impl Stacked<'a>,
    ) -> Result<()> {
        let mut approvals = self.approvals.clone();
        approvals.add(approval);
        self.set_approvals(approvals, stacked)
    }

    /// Changes the approvals with `change` (which says whether it changed them), and puts the
    /// change in force; on an error nothing changes. Returns whether anything changed.
    pub fn change_approvals<'a>(
        &mut self,
        change: impl FnOnce(&mut Approvals) -> bool,
        stacked: impl Stacked<'a>,
    ) -> Result<bool> {
        let mut approvals = self.approvals.clone();
        if !change(&mut approvals) {
            return Ok(false);
        }
        self.set_approvals(approvals, stacked)?;
        Ok(true)
    }

    fn set_approvals<'a>(&mut self, approvals: Approvals, stacked: impl Stacked<'a>) -> Result<()> {
        let image = self.compile_with(&approvals)?;
        self.in_force.apply(image)?;
        self.approvals = approvals;
        self.rebuild_stacked(stacked);
        Ok(())
    }

    /// Enforces `policy` instead, with the approvals kept, and keeps only the names it needs
    /// guard to resolve (resolve the new ones first: [`Core::unresolved`]); on an error the old
    /// policy stays in force, its names too.
    pub fn replace_policy<'a>(&mut self, policy: Policy, stacked: impl Stacked<'a>) -> Result<()> {
        let needed = self.names_to_resolve(&policy);
        let resolved = self.names.resolved().clone();
        self.names.resolved_mut().retain_hosts(&needed);
        if let Err(err) = self
            .in_force
            .replace_policy(policy, &self.names, &self.approvals)
        {
            *self.names.resolved_mut() = resolved;
            return Err(err);
        }
        // A name no rule speaks of any more is not asked for again: its addresses go when
        // their own answers' time is up.
        if self.names.refreshed_names() > 0 {
            let rules = crate::resolve::NamePolicy::from_policy(self.in_force.policy());
            self.names
                .keep_refreshing(|name| rules.decide(name) == crate::resolve::NameDecision::Ruled);
        }
        self.rebuild_stacked(stacked);
        Ok(())
    }

    /// Compiles `stacked` again with the approvals on top.
    pub fn rebuild_stacked<'a>(&self, stacked: impl Stacked<'a>) {
        for (scope, set) in stacked {
            if let Err(err) = set.rebuild(&self.names, &self.approvals) {
                tracing::error!(
                    "the rules stacked on scope {scope} keep their previous image: {err:#}"
                );
            }
        }
    }

    /// What guard's resolver said since the last call: its answers are taken in, each for the
    /// scope `scope_of` says asked (given the core's programs, which recorded the scope of each
    /// redirected query), and their queries are let go once in force; on an error they are not,
    /// so they time out into SERVFAIL, never an address that might not be allowed. Returns
    /// what the resolver said, for the front end to report, and whether it went in force.
    pub fn take_resolver_events<'a>(
        &mut self,
        events: Vec<ResolverEvent>,
        scope_of: impl Fn(&Enforcer, &Answered) -> Option<u64>,
        now: Instant,
        stacked: impl Stacked<'a>,
    ) -> (Vec<ResolverNote>, Result<()>) {
        let mut notes = Vec::new();
        let mut answers = Vec::new();
        let mut refreshed = Vec::new();
        let mut confirmations = Vec::new();
        for event in events {
            match event {
                ResolverEvent::Answered(answer, done) => {
                    notes.push(ResolverNote::Answered(answer.clone()));
                    answers.push(answer);
                    confirmations.push(done);
                }
                ResolverEvent::Refused(refused) => notes.push(ResolverNote::Refused(refused)),
                ResolverEvent::UpstreamFailed { name, error } => {
                    notes.push(ResolverNote::UpstreamFailed { name, error })
                }
                // Counted by the schedule, not reported: no program waits for it.
                ResolverEvent::Refreshed(answer) => refreshed.push(answer),
            }
        }
        let changed = self.names.take_refreshed(refreshed, now);
        let enforcer = self.in_force.enforcer();
        let scoped: Vec<(Option<u64>, &Answered)> = answers
            .iter()
            .map(|answer| (scope_of(enforcer, answer), answer))
            .collect();
        let mut changed_names = self.names.record_answers(&scoped, now);
        changed_names.add_changed(changed);
        let applied = self.settle_names(changed_names, now, stacked);
        if applied.is_ok() {
            for done in confirmations {
                let _ = done.send(());
            }
        }
        (notes, applied)
    }

    /// What guard's resolver answered: each answer is recorded for the scope that asked (see
    /// [`KnownNames::record_answers`]), what is past its time goes, and the entries of the
    /// names whose addresses changed are put in force. `Ok`: the answers' queries may be
    /// confirmed.
    pub fn take_answers<'a>(
        &mut self,
        answers: &[(Option<u64>, &Answered)],
        now: Instant,
        stacked: impl Stacked<'a>,
    ) -> Result<()> {
        let changed = self.names.record_answers(answers, now);
        self.settle_names(changed, now, stacked)
    }

    /// Asks for the scopes' names whose answers ran out ([`crate::resolve::refresh`]), and
    /// puts in force what is now known of `changed` and of what that changed.
    fn settle_names<'a>(
        &mut self,
        mut changes: NameChanges,
        now: Instant,
        stacked: impl Stacked<'a>,
    ) -> Result<()> {
        changes.add_changed(self.names.ask_due(now));
        self.names_changed_by(&changes, stacked)
    }

    /// `scope` ended: what guard's resolver answered it goes from the maps, and its names are
    /// asked for no more.
    pub fn end_scope<'a>(&mut self, scope: u64, stacked: impl Stacked<'a>) -> Result<()> {
        let changed = self.names.end_scope(scope);
        self.names_changed(&changed, stacked)
    }

    /// Puts in force what is now known of `changed` (guard resolved them again, or its
    /// resolver answered them): only their destination entries are written.
    pub fn names_changed<'a>(
        &mut self,
        changed: &[String],
        stacked: impl Stacked<'a>,
    ) -> Result<()> {
        self.names_changed_by(&NameChanges::any(changed), stacked)
    }

    /// [`Core::names_changed`] for `changes`, which say which names only gained addresses.
    pub fn names_changed_by<'a>(
        &mut self,
        changes: &NameChanges,
        stacked: impl Stacked<'a>,
    ) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        self.in_force.update_names(changes, &self.names)?;
        for (_, set) in stacked {
            set.update_names(changes, &self.names)?;
        }
        Ok(())
    }
}
