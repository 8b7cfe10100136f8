//! What happens to a decided call: the tail the exec, network and file hooks share.

use crate::decision::Decision;
use crate::maps::{Settings, Verdict, counter};

/// What the kernel does with a call once its verdict is known: three flags, worked out without
/// branches, which the programs test in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// An event is made: every refusal, and an allow when the settings ask for allowed
    /// decisions (`[audit] record_allowed`).
    pub recorded: bool,
    /// A refusal only recorded (an audit-only rule, or the audit-only mode): it goes through.
    pub audit_only: bool,
    /// A refusal enforced: the hook refuses the call.
    pub refused: bool,
}

impl Outcome {
    /// The outcome of a call decided `verdict` (a decision, never [`Verdict::NONE`]: the
    /// callers apply their default first).
    #[inline(always)]
    pub fn of(settings: &Settings, verdict: Verdict) -> Outcome {
        // `&` and `|`, not `&&` and `||`: no branch, so the verifier walks one path here.
        let allow = verdict.decision == Decision::Allow as u8;
        let audit_only = !allow & ((settings.audit_only != 0) | verdict.audit_only());
        Outcome {
            recorded: !allow | (settings.record_allowed != 0),
            audit_only,
            refused: !allow & !audit_only,
        }
    }
}

/// The counter slots one kind of call counts its decisions in.
#[derive(Clone, Copy, Debug)]
pub struct Counters {
    pub allow: u32,
    pub prompt: u32,
    pub forbidden: u32,
}

impl Counters {
    pub const EXEC: Counters = Counters {
        allow: counter::EXEC_ALLOW,
        prompt: counter::EXEC_PROMPT,
        forbidden: counter::EXEC_FORBIDDEN,
    };
    pub const NET: Counters = Counters {
        allow: counter::NET_ALLOW,
        prompt: counter::NET_PROMPT,
        forbidden: counter::NET_FORBIDDEN,
    };
    /// A unix socket call cannot wait for an answer: a prompt is refused as forbidden is.
    pub const UNIX: Counters = Counters {
        allow: counter::UNIX_ALLOW,
        prompt: counter::UNIX_REFUSED,
        forbidden: counter::UNIX_REFUSED,
    };
    /// A file operation cannot wait for an answer: a prompt is refused as forbidden is.
    pub const FILE: Counters = Counters {
        allow: counter::FILE_ALLOW,
        prompt: counter::FILE_REFUSED,
        forbidden: counter::FILE_REFUSED,
    };

    /// The slot `verdict`'s decision is counted in.
    #[inline(always)]
    pub const fn slot(&self, verdict: Verdict) -> u32 {
        match verdict.decision {
            0 => self.allow,
            1 => self.prompt,
            _ => self.forbidden,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(audit_only: u8, record_allowed: u8) -> Settings {
        Settings {
            unmatched_exec: 0,
            unmatched_network: 0,
            audit_only,
            ready: 1,
            exec_approvals: 0,
            record_allowed,
            anonymous_exec: 0,
            socket_kinds: 0,
        }
    }

    #[test]
    fn an_allow_is_recorded_only_when_asked_and_never_refused() {
        let allow = Verdict::new(Decision::Allow, 1, false);
        let passed = Outcome {
            recorded: false,
            audit_only: false,
            refused: false,
        };
        assert_eq!(Outcome::of(&settings(0, 0), allow), passed);
        assert_eq!(
            Outcome::of(&settings(0, 1), allow),
            Outcome {
                recorded: true,
                ..passed
            }
        );
        assert_eq!(Outcome::of(&settings(1, 0), allow), passed);
    }

    #[test]
    fn a_refusal_is_enforced_unless_the_rule_or_the_mode_is_audit_only() {
        for decision in [Decision::Prompt, Decision::Forbidden] {
            let enforced = Verdict::new(decision, 1, false);
            let audited = Verdict::new(decision, 1, true);
            let refused = Outcome {
                recorded: true,
                audit_only: false,
                refused: true,
            };
            let recorded_only = Outcome {
                recorded: true,
                audit_only: true,
                refused: false,
            };
            assert_eq!(Outcome::of(&settings(0, 0), enforced), refused);
            assert_eq!(Outcome::of(&settings(0, 0), audited), recorded_only);
            assert_eq!(Outcome::of(&settings(1, 1), enforced), recorded_only);
        }
    }

    #[test]
    fn files_count_a_prompt_as_a_refusal() {
        let prompt = Verdict::new(Decision::Prompt, 1, false);
        assert_eq!(Counters::FILE.slot(prompt), counter::FILE_REFUSED);
        assert_eq!(Counters::EXEC.slot(prompt), counter::EXEC_PROMPT);
        let forbidden = Verdict::new(Decision::Forbidden, 1, false);
        assert_eq!(Counters::NET.slot(forbidden), counter::NET_FORBIDDEN);
    }
}
