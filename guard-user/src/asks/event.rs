//! What one kernel event becomes in its scope, for `guard run` and the daemon alike: the line
//! for the person running the command, the message of its ask and of its record, and its ask,
//! or why a prompt was refused at once instead. The run prints the line on its terminal; the
//! daemon sends it on the run's stream and records the event in its audit log: two sinks of one
//! taking.

use std::time::Instant;

use super::messages::{Described, blocked_request, describe, describe_event};
use super::{AskBook, Recorded};
use crate::compile::image::EnforcementImage;
use crate::kernel::events::{EventKind, KernelEvent};
use crate::policy::approval::{ApprovalPolicy, prompt_rejection};

/// Where an event's ask goes.
pub struct Asking<'a> {
    /// `None`: nothing can answer an ask here (a run with no ask socket).
    pub book: Option<&'a mut AskBook>,
    pub approval: ApprovalPolicy,
    /// The scope the event came from, and whether a `guard run` made it.
    pub scope: (u64, bool),
}

/// One event, taken.
#[derive(Debug)]
pub struct Taken {
    /// The one-line refusal for the person running the command.
    pub line: String,
    /// The message of its ask and of its record.
    pub message: String,
    /// The ask it made or repeated.
    pub ask: Option<u64>,
    /// The ask is new (a repeat is only counted in the pending one).
    pub new_ask: bool,
    /// The approvals that can answer its ask (`[--once|--session|--always]`).
    pub answers: Option<&'static str>,
    /// Why a prompt was refused at once instead of asked (`never`, a granular category off).
    pub rejected: Option<&'static str>,
}

/// Takes `event`, decided by `image`: `answered` names its destination's address (the names
/// guard's resolver answered it for), `sandbox_line` is the sandbox's refusal when the event is
/// a write the sandbox refused.
pub fn take(
    image: &EnforcementImage,
    event: &KernelEvent,
    answered: &[String],
    sandbox_line: Option<String>,
    asking: Asking,
    now: Instant,
) -> Taken {
    let (
        Described {
            mut message,
            target,
        },
        mut line,
    ) = match sandbox_line {
        Some(line) => (
            Described {
                message: line.clone(),
                target: None,
            },
            line,
        ),
        None => (
            describe(image, event, answered),
            describe_event(image, event, answered),
        ),
    };
    // Under `never` (or a granular category that is off) a prompt is refused, not asked.
    let rejected = target
        .as_ref()
        .and_then(|t| prompt_rejection(asking.approval, t.by_rule()));
    if let Some(reason) = rejected {
        message.push_str(&format!(" ({reason})"));
        line.push_str(&format!("; {reason}"));
    } else if asking.approval == ApprovalPolicy::Untrusted
        && event.kind == EventKind::Exec
        && event.unmatched
        && target.is_some()
    {
        line.push_str(" (--approval untrusted asks about every command that is not known-safe)");
    }
    let mut taken = Taken {
        line,
        message,
        ask: None,
        new_ask: false,
        answers: None,
        rejected,
    };
    let target = target.filter(|_| rejected.is_none() && !event.audit_only);
    let (Some(target), Some(book)) = (target, asking.book) else {
        return taken;
    };
    let answers = target.answers(event.overlay);
    let recorded = book.record(
        target,
        blocked_request(image, event, answered),
        taken.message.clone(),
        asking.scope,
        now,
    );
    match recorded {
        Recorded::New(id) | Recorded::Repeat(id) => {
            taken.ask = Some(id);
            taken.new_ask = matches!(recorded, Recorded::New(_));
            if taken.new_ask && event.overlay {
                book.set_by_overlay(id);
            }
            taken.answers = Some(answers);
        }
        Recorded::Full { pending } => {
            let why =
                format!(" (not asked: this scope has {pending} asks pending; answer those first)");
            taken.message.push_str(&why);
            taken.line.push_str(&why);
        }
    }
    taken
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::kernel::events::Action;
    use crate::policy::Decision;

    /// `git push`, prompted because no rule matches it.
    fn prompted_push() -> KernelEvent {
        let mut event =
            crate::asks::messages::tests::event(EventKind::Exec, Decision::Prompt, Action::Eperm);
        event.unmatched = true;
        (event.pid, event.tgid, event.ppid) = (7, 7, 1);
        (event.uid, event.gid) = (1000, 1000);
        (event.cgroup_id, event.scope) = (42, 42);
        event.comm = "git".into();
        event.exe = "/usr/bin/git".into();
        event.argv = vec!["git".into(), "push".into()];
        event
    }

    fn image() -> EnforcementImage {
        crate::compile::compile(
            &crate::policy::Policy::default(),
            &crate::compile::NoResolver,
            &crate::compile::CompileEnv::default(),
        )
    }

    fn take_with(book: &mut AskBook, approval: ApprovalPolicy, event: &KernelEvent) -> Taken {
        let asking = Asking {
            book: Some(book),
            approval,
            scope: (event.scope, true),
        };
        take(&image(), event, &[], None, asking, Instant::now())
    }

    #[test]
    fn a_prompt_becomes_one_ask_of_its_scope_and_a_repeat_is_counted_there() {
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(60));
        let event = prompted_push();
        let first = take_with(&mut book, ApprovalPolicy::OnRequest, &event);
        let id = first.ask.expect("asked");
        assert!(first.new_ask);
        assert_eq!(first.rejected, None);
        assert!(first.line.contains("git push"), "{}", first.line);
        assert!(first.answers.is_some_and(|a| a.contains("--once")));
        assert_eq!(book.get(id, Instant::now()).unwrap().scope, 42);
        let again = take_with(&mut book, ApprovalPolicy::OnRequest, &event);
        assert_eq!((again.ask, again.new_ask), (Some(id), false));
    }

    #[test]
    fn an_overlays_ask_is_answered_once_or_for_the_session_never_always() {
        use crate::asks::ApprovalMode;
        use crate::asks::answer::{ApprovalPlan, plan_approval};
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(60));
        let mut event = prompted_push();
        let daemons = take_with(&mut book, ApprovalPolicy::OnRequest, &event);
        event.scope = 43;
        event.overlay = true;
        let overlays = take_with(&mut book, ApprovalPolicy::OnRequest, &event);
        assert_eq!(daemons.answers, Some("[--once|--session|--always]"));
        assert_eq!(overlays.answers, Some("[--once|--session]"));
        let now = Instant::now();
        let daemons = book.get(daemons.ask.unwrap(), now).unwrap();
        let overlays = book.get(overlays.ask.unwrap(), now).unwrap();
        assert!(!daemons.by_overlay && overlays.by_overlay);
        assert_eq!(overlays.answers(), "[--once|--session]");
        let plan = |ask, mode, prefix: Option<&[String]>| {
            let policy = crate::policy::Policy::default();
            plan_approval(ask, mode, &image(), prefix.map(|p| (&policy, p)))
        };
        assert!(matches!(
            plan(&daemons, ApprovalMode::Always, None),
            Ok(ApprovalPlan::Append(_))
        ));
        let refused = plan(&overlays, ApprovalMode::Always, None).unwrap_err();
        assert!(
            refused.contains("overlay") && refused.contains("--once"),
            "{refused}"
        );
        let git = ["git".to_string()];
        assert!(plan(&overlays, ApprovalMode::Always, Some(&git)).is_err());
        assert!(matches!(
            plan(&overlays, ApprovalMode::Session, None),
            Ok(ApprovalPlan::Hold(_))
        ));
    }

    #[test]
    fn a_prompted_unix_connect_is_asked_and_held_once_or_written_always() {
        use crate::asks::ApprovalMode;
        use crate::asks::answer::{ApprovalPlan, plan_approval};
        use crate::asks::approvals::ApprovalTarget;
        let mut parser = crate::policy::PolicyParser::new();
        parser
            .parse(
                "t.rules",
                "enforcement(unmatched_unix=\"prompt\")\n\
                 unix_rule(socket=\"/run/named.sock\", decision=\"prompt\")\n",
            )
            .unwrap();
        let image = crate::compile::compile(
            &parser.build(),
            &crate::compile::NoResolver,
            &crate::compile::CompileEnv::default(),
        );
        let unix_event = |address: &[u8], rule: Option<u32>| {
            let mut event = crate::asks::messages::tests::event(
                EventKind::Unix,
                Decision::Prompt,
                Action::Eperm,
            );
            (event.cgroup_id, event.scope, event.rule) = (42, 42, rule);
            event.unmatched = rule.is_none();
            event.unix = Some(crate::kernel::events::EventUnix {
                address: crate::policy::unix::address_text(address),
                call: "connect",
                bytes: address.to_vec(),
            });
            event
        };
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(60));
        let take_unix = |book: &mut AskBook, event: &KernelEvent| {
            let asking = Asking {
                book: Some(book),
                approval: ApprovalPolicy::OnRequest,
                scope: (42, true),
            };
            take(&image, event, &[], None, asking, Instant::now())
        };
        // Nothing names it: asked, --once holds that socket, --always writes its unix_rule.
        let taken = take_unix(&mut book, &unix_event(b"/tmp/t/srv.sock", None));
        assert!(taken.new_ask, "{}", taken.line);
        assert!(
            taken.message.contains("/tmp/t/srv.sock"),
            "{}",
            taken.message
        );
        assert_eq!(taken.answers, Some("[--once|--session|--always]"));
        let ask = book.get(taken.ask.unwrap(), Instant::now()).unwrap();
        assert_eq!(ask.record.host, "/tmp/t/srv.sock");
        assert_eq!(
            plan_approval(&ask, ApprovalMode::Once, &image, None),
            Ok(ApprovalPlan::Hold(ApprovalTarget::Unix {
                socket: "/tmp/t/srv.sock".into()
            }))
        );
        assert_eq!(
            plan_approval(&ask, ApprovalMode::Always, &image, None),
            Ok(ApprovalPlan::Append(
                "unix_rule(socket=\"/tmp/t/srv.sock\", decision=\"allow\")".into()
            ))
        );
        // A prompt rule naming the socket whole: an allow line would lose to it, so no --always.
        let named = image
            .unix
            .iter()
            .find(|e| e.socket.bytes == b"/run/named.sock")
            .unwrap()
            .verdict
            .rule;
        let taken = take_unix(&mut book, &unix_event(b"/run/named.sock", Some(named)));
        assert_eq!(taken.answers, Some("[--once|--session]"));
        let ask = book.get(taken.ask.unwrap(), Instant::now()).unwrap();
        let refused = plan_approval(&ask, ApprovalMode::Always, &image, None).unwrap_err();
        assert!(refused.contains("--once or --session"), "{refused}");
        // An abstract name with a NUL inside reads back as another name: not asked.
        let taken = take_unix(&mut book, &unix_event(b"\0a\0b", None));
        assert_eq!(taken.ask, None, "{}", taken.line);
        assert!(taken.message.contains("rejected"), "{}", taken.message);
    }

    #[test]
    fn under_never_a_prompt_is_refused_at_once_and_the_line_and_message_say_why() {
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(60));
        let taken = take_with(&mut book, ApprovalPolicy::Never, &prompted_push());
        assert_eq!(taken.ask, None);
        let reason = taken.rejected.expect("refused at once");
        assert!(
            taken.line.ends_with(&format!("; {reason}")),
            "{}",
            taken.line
        );
        assert!(taken.message.ends_with(&format!(" ({reason})")));
        assert!(book.pending(Instant::now()).is_empty());
    }

    #[test]
    fn a_full_book_says_why_nothing_was_asked_and_audit_only_asks_nothing() {
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(60))
            .with_pending_per_scope(1);
        let mut event = prompted_push();
        assert!(take_with(&mut book, ApprovalPolicy::OnRequest, &event).new_ask);
        event.argv[1] = "fetch".into();
        let full = take_with(&mut book, ApprovalPolicy::OnRequest, &event);
        assert_eq!(full.ask, None);
        assert!(
            full.line
                .contains("not asked: this scope has 1 asks pending")
        );
        assert!(full.message.contains("not asked"));
        event.argv[1] = "pull".into();
        event.audit_only = true;
        event.scope = 43;
        let audited = take_with(&mut book, ApprovalPolicy::OnRequest, &event);
        assert_eq!((audited.ask, audited.rejected), (None, None));
    }

    #[test]
    fn under_untrusted_the_line_says_why_an_unmatched_command_is_asked_about() {
        let mut book = AskBook::new(Duration::from_secs(60), Duration::from_secs(60));
        let taken = take_with(&mut book, ApprovalPolicy::Untrusted, &prompted_push());
        assert!(taken.ask.is_some());
        assert!(
            taken.line.contains("--approval untrusted"),
            "{}",
            taken.line
        );
        assert!(!taken.message.contains("untrusted"));
    }
}
