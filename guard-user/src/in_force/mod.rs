//! What the kernel enforces and the one way it changes, for `guard run` and the daemon alike:
//! the policy compiled with what is known of its names, the run's modes and the approvals on
//! top, checked (a denial the kernel cannot hold refuses the whole image), then written to the
//! maps and kept as the image in force. A change that fails leaves the maps and the image as
//! they were. The enforcement core `guard run` and the daemon both hold, with the approvals and
//! what is known of the names, is [`Core`].

use anyhow::{Result, anyhow};

use crate::asks::Approvals;
use crate::compile::image::EnforcementImage;
use crate::compile::{CompileEnv, NameChanges, compile, update_destinations_by};
use crate::kernel::loader::Enforcer;
use crate::kernel::maps::SyncStats;
use crate::policy::Policy;
use crate::resolve::answers::{AnswerBook, KnownAddresses};
use crate::resolve::known::KnownNames;

mod core;

pub use self::core::{Core, unstacked};

/// How the images of a run or a daemon are made, beyond the policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modes {
    /// Record every decision, enforce none.
    pub audit_only: bool,
    /// Record allowed decisions too (`[audit] record_allowed`).
    pub record_allowed: bool,
}

/// A policy, the programs holding it, and the image their maps hold: the daemon's, a run's, an
/// overlay's.
pub struct InForce {
    enforcer: Enforcer,
    policy: Policy,
    image: EnforcementImage,
    env: CompileEnv,
    modes: Modes,
}

impl InForce {
    /// Puts the first image of `policy`, with `approvals` on top, in force in `enforcer`'s maps.
    pub fn start(
        mut enforcer: Enforcer,
        policy: Policy,
        (names, approvals): (&KnownNames, &Approvals),
        env: CompileEnv,
        modes: Modes,
    ) -> Result<InForce> {
        let image = image_of(&policy, &names.addresses(), &env, modes, approvals)?;
        enforcer.apply(&image)?;
        Ok(InForce {
            enforcer,
            policy,
            image,
            env,
            modes,
        })
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn image(&self) -> &EnforcementImage {
        &self.image
    }

    pub fn enforcer(&self) -> &Enforcer {
        &self.enforcer
    }

    pub fn enforcer_mut(&mut self) -> &mut Enforcer {
        &mut self.enforcer
    }

    /// The image of the policy with `approvals` on top, not yet in force.
    pub fn compile(&self, names: &KnownNames, approvals: &Approvals) -> Result<EnforcementImage> {
        image_of(
            &self.policy,
            &names.addresses(),
            &self.env,
            self.modes,
            approvals,
        )
    }

    /// Puts `image` in force.
    pub fn apply(&mut self, image: EnforcementImage) -> Result<SyncStats> {
        let stats = self.enforcer.apply(&image)?;
        self.image = image;
        Ok(stats)
    }

    /// Compiles the policy with `approvals` on top and puts it in force.
    pub fn rebuild(&mut self, names: &KnownNames, approvals: &Approvals) -> Result<SyncStats> {
        let image = self.compile(names, approvals)?;
        self.apply(image)
    }

    /// Holds `policy` from now on; on an error the old one stays in force.
    pub fn replace_policy(
        &mut self,
        policy: Policy,
        names: &KnownNames,
        approvals: &Approvals,
    ) -> Result<()> {
        let old = std::mem::replace(&mut self.policy, policy);
        if let Err(err) = self.rebuild(names, approvals) {
            self.policy = old;
            return Err(err);
        }
        Ok(())
    }

    /// Compiles again the destination entries of the sources `changed` covers (what is known of
    /// those names changed) and writes only the map entries that change, new before old; the
    /// rest of the image, approvals included, is kept. On an error the image is ahead of the
    /// maps, and the next change writes every destination entry that differs.
    pub fn update_names(&mut self, changed: &NameChanges, names: &KnownNames) -> Result<()> {
        if changed.is_empty() {
            return Ok(());
        }
        let touched = update_destinations_by(&mut self.image, changed, &names.addresses());
        self.enforcer.update_destinations(&self.image, &touched)?;
        Ok(())
    }
}

/// The names guard resolves itself for `policy`: every name the rules name when its resolver is
/// not in the path (`on_demand` false). With it in the path the scopes' lookups put the rules'
/// names in force, and guard resolves only the names whose stand-ins a program holds and that
/// may now leave the host: approved ones, and those a rule now names (an `--always` answer).
pub fn names_guard_resolves(
    policy: &Policy,
    approvals: &Approvals,
    book: &AnswerBook,
    on_demand: bool,
) -> Vec<String> {
    let mut names = if on_demand {
        let held = book.stand_ins();
        // Usually none: the policy's rules are read only for a scope holding stand-ins.
        let rules = (!held.is_empty()).then(|| crate::resolve::NamePolicy::from_policy(policy));
        held.into_iter()
            .map(|(_, name)| name)
            .filter(|name| {
                rules
                    .as_ref()
                    .is_some_and(|r| r.decide(name) == crate::resolve::NameDecision::Ruled)
            })
            .collect()
    } else {
        crate::compile::host_names(policy)
    };
    names.extend(approvals.stand_in_names());
    names.sort();
    names.dedup();
    names
}

fn image_of(
    policy: &Policy,
    known: &KnownAddresses,
    env: &CompileEnv,
    modes: Modes,
    approvals: &Approvals,
) -> Result<EnforcementImage> {
    let mut image = compile(policy, known, env);
    image.settings.audit_only |= modes.audit_only;
    image.record_allowed = modes.record_allowed;
    if let Some(error) = approvals.add_to_image(&mut image).into_iter().next() {
        return Err(anyhow!(error));
    }
    crate::kernel::coverage::refuse_unheld_denials(&image)?;
    Ok(image)
}
