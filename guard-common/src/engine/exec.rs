//! How an exec's verdicts combine: strongest wins among the identity and name rules, the argv
//! walk and the pattern tables; a file no path names adds the policy's default for such files;
//! nothing matched takes the unmatched default; and an approval of exactly this argv turns a
//! `prompt` (never a `forbidden`) into an allow.

use crate::decision::Decision;
use crate::event::flag;
use crate::maps::{Settings, Verdict};

use super::argv::ArgvOutcome;
use super::{Decided, default_verdict};

/// What the exec hooks found, each part already looked up.
#[derive(Clone, Copy, Debug)]
pub struct ExecFindings {
    /// The strongest of the executed file's identity and name entries.
    pub by_file: Verdict,
    /// The argv trie walk.
    pub by_argv: ArgvOutcome,
    /// The pattern tables.
    pub by_pattern: Verdict,
    /// The file has no path (a memfd, a deleted or `O_TMPFILE` file).
    pub anonymous: bool,
}

/// The decision for an exec (`sched_process_exec`'s, which sees everything), with
/// [`flag::ANONYMOUS`] and [`flag::UNMATCHED`] as they apply.
#[inline(always)]
pub fn decide_exec(settings: &Settings, found: &ExecFindings) -> Decided {
    let mut verdict = found
        .by_file
        .strongest(found.by_argv.verdict)
        .strongest(found.by_pattern);
    let mut flags = 0;
    if found.anonymous {
        // No rule can name such a file: the policy's default for it decides with the rules
        // that matched.
        verdict = verdict.strongest(default_verdict(settings.anonymous_exec));
        flags |= flag::ANONYMOUS;
    }
    if verdict.is_none() {
        verdict = default_verdict(settings.unmatched_exec);
        flags |= flag::UNMATCHED;
    }
    // `approved` is false for anything the walk could not compare to its end (fails closed).
    if verdict.decision == Decision::Prompt as u8 && found.by_argv.approved != 0 {
        verdict.decision = Decision::Allow as u8;
    }
    Decided { verdict, flags }
}

/// What the early exec hook (`lsm/bprm_check_security`, before argv exists) refuses: the file's
/// identity and name rules and the default for a file no path names. `None`: nothing to refuse
/// here, and `sched_process_exec` decides everything again after the image is installed.
#[inline(always)]
pub fn refuse_before_argv(
    settings: &Settings,
    by_file: Verdict,
    anonymous: bool,
) -> Option<Decided> {
    let mut verdict = by_file;
    let mut flags = 0;
    if anonymous {
        verdict = verdict.strongest(default_verdict(settings.anonymous_exec));
        flags |= flag::ANONYMOUS;
    }
    // The unmatched default needs argv, which only the later hook has.
    if verdict.is_none() || verdict.decision == Decision::Allow as u8 {
        return None;
    }
    // With approvals in the maps a `prompt` may be an approved retry, which only argv can tell.
    if verdict.decision == Decision::Prompt as u8 && settings.exec_approvals != 0 {
        return None;
    }
    // Audit-only: nothing to refuse; the later hook records it once, with argv.
    if settings.audit_only != 0 || verdict.audit_only() {
        return None;
    }
    Some(Decided { verdict, flags })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            unmatched_exec: Decision::Prompt as u8,
            unmatched_network: 0,
            audit_only: 0,
            ready: 1,
            exec_approvals: 1,
            record_allowed: 0,
            anonymous_exec: Decision::Forbidden as u8,
            socket_kinds: 0,
        }
    }

    fn found(by_file: Verdict, argv: Verdict, approved: bool) -> ExecFindings {
        ExecFindings {
            by_file,
            by_argv: ArgvOutcome {
                verdict: argv,
                approved: u32::from(approved),
            },
            by_pattern: Verdict::NONE,
            anonymous: false,
        }
    }

    #[test]
    fn the_strongest_part_decides_and_nothing_takes_the_default() {
        let allow = Verdict::new(Decision::Allow, 1, false);
        let forbidden = Verdict::new(Decision::Forbidden, 2, false);
        let decided = decide_exec(&settings(), &found(allow, forbidden, false));
        assert_eq!(decided.verdict, forbidden);
        assert_eq!(decided.flags, 0);
        let unmatched = decide_exec(&settings(), &found(Verdict::NONE, Verdict::NONE, false));
        assert_eq!(unmatched.verdict, default_verdict(Decision::Prompt as u8));
        assert_eq!(unmatched.flags, flag::UNMATCHED);
    }

    #[test]
    fn an_approval_lets_a_prompt_through_but_never_a_forbidden() {
        let prompt = Verdict::new(Decision::Prompt, 1, false);
        let approved = decide_exec(&settings(), &found(Verdict::NONE, prompt, true));
        assert_eq!(approved.verdict.decision, Decision::Allow as u8);
        assert_eq!(
            approved.verdict.rule, 1,
            "the rule that asked is still named"
        );
        let unmatched = decide_exec(&settings(), &found(Verdict::NONE, Verdict::NONE, true));
        assert_eq!(unmatched.verdict.decision, Decision::Allow as u8);
        let forbidden = Verdict::new(Decision::Forbidden, 2, false);
        let kept = decide_exec(&settings(), &found(forbidden, prompt, true));
        assert_eq!(kept.verdict, forbidden);
    }

    #[test]
    fn a_file_no_path_names_adds_its_default() {
        let mut anonymous = found(
            Verdict::new(Decision::Allow, 1, false),
            Verdict::NONE,
            false,
        );
        anonymous.anonymous = true;
        let decided = decide_exec(&settings(), &anonymous);
        assert_eq!(decided.verdict.decision, Decision::Forbidden as u8);
        assert_eq!(decided.flags, flag::ANONYMOUS);
    }

    #[test]
    fn before_argv_only_enforced_refusals_argv_cannot_change_are_refused() {
        let forbidden = Verdict::new(Decision::Forbidden, 2, false);
        let prompt = Verdict::new(Decision::Prompt, 1, false);
        let mut plain = settings();
        assert_eq!(
            refuse_before_argv(&plain, forbidden, false).map(|v| v.verdict),
            Some(forbidden)
        );
        assert_eq!(
            refuse_before_argv(&plain, prompt, false),
            None,
            "approvals exist: argv decides"
        );
        plain.exec_approvals = 0;
        assert!(refuse_before_argv(&plain, prompt, false).is_some());
        assert_eq!(refuse_before_argv(&plain, Verdict::NONE, false), None);
        let anonymous = refuse_before_argv(&plain, Verdict::NONE, true).unwrap();
        assert_eq!(anonymous.flags, flag::ANONYMOUS);
        plain.audit_only = 1;
        assert_eq!(refuse_before_argv(&plain, forbidden, false), None);
    }
}
