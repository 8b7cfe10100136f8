//! Sockets the kernel holds ([`Enforcer::hold_network`]): a prompted connect or send was let
//! through with its packets held, and waits for its ask's answer as a slow network would make
//! it wait. Each turn, [`HeldSocket::step`] reads what the kernel says of it and what its ask
//! came to: an approval is in the maps already (the kernel lets the next SYN out; the socket is
//! done once it connected), a denial or an expiry ends it, and a program that stopped waiting
//! (its socket closed while held) gave up, its ask staying open for a retry. A socket that is
//! done is forgotten by the kernel's table.

use std::time::{Duration, Instant};

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::Result;
use guard_common::maps::{HeldSocket as KernelHeldSocket, TRANSPORT_TCP, held};

use super::splice::{NotTaken, SpliceListener, splice};
use crate::asks::AskState;
use crate::kernel::Enforcer;

/// How much longer than its ask's expiry the kernel lets a held connect wait
/// ([`Enforcer::hold_network`]'s bound): guard ends the socket at the expiry, with its message
/// on the program's stderr; the kernel's bound is for when guard cannot.
pub const KERNEL_BOUND_GRACE: Duration = Duration::from_secs(5);

/// How long after its approval a connect held at guard's splice listener may take to reach it:
/// the kernel retries a held SYN every 500 ms.
const SPLICE_RELEASE_WAIT: Duration = Duration::from_secs(5);
/// How long after its approval the stand-in of such a connect may stay unmapped (its name is
/// resolved before the approval is put in force, so this covers only the maps being written).
const SPLICE_UNMAPPED_WAIT: Duration = Duration::from_secs(2);

/// How a held call ended: `details.outcome` of its `held_ended` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldOutcome {
    /// Approved: the call went on, and the kernel (which has the approval) let it through.
    Approved,
    Denied,
    Expired,
    /// The program stopped waiting (a signal interrupted the call, its own timeout, or it
    /// ended); its ask stays open, so an approval still lets its retry through.
    GivenUp,
    /// guard stopped: the call went on, and the kernel decided it (a prompt is refused).
    Released,
}

impl HeldOutcome {
    /// How a call held for an ask ends now that the ask is `answer` (`None`: gone from the
    /// book, taken as expired), for `guard run` and the daemon alike; `program_waits`: its
    /// program still waits in the call. `None`: it waits on.
    pub fn of_answer(answer: Option<&AskState>, program_waits: bool) -> Option<HeldOutcome> {
        Some(match answer {
            Some(AskState::Pending) if program_waits => return None,
            Some(AskState::Pending) => HeldOutcome::GivenUp,
            Some(AskState::Approved { .. }) => HeldOutcome::Approved,
            Some(AskState::Denied { .. }) => HeldOutcome::Denied,
            Some(AskState::Expired) | None => HeldOutcome::Expired,
        })
    }

    /// What the program of a call refused this way reads: `refusal`, and how ask `ask` ended
    /// (`None`: the call was not refused).
    pub fn refusal_line(self, refusal: &str, ask: u64) -> Option<String> {
        let how = match self {
            HeldOutcome::Denied => "was denied",
            HeldOutcome::Expired => "expired unanswered",
            _ => return None,
        };
        Some(format!("{refusal}; ask {ask} {how}"))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HeldOutcome::Approved => "approved",
            HeldOutcome::Denied => "denied",
            HeldOutcome::Expired => "expired",
            HeldOutcome::GivenUp => "given_up",
            HeldOutcome::Released => "released",
        }
    }
}

/// A socket the kernel holds, and the ask it waits for.
#[derive(Clone, Debug)]
pub struct HeldSocket {
    /// The socket's cookie (its `HELD_SOCKETS` key, the event's `ino`).
    pub cookie: u64,
    pub ask: u64,
    /// The thread that made the call (for the message on its stderr).
    pub pid: u32,
    pub tcp: bool,
    pub since: Instant,
    /// What the run or the daemon said of the refusal it would have been (the blocked
    /// request), for the program's stderr when it is ended.
    pub refusal: String,
    /// Denied or expired, and the kernel ends it at its next SYN retry (no `sock_diag` here).
    ending: Option<HeldOutcome>,
    /// When its approval was first seen (a connect held at guard's splice listener waits for
    /// its SYN to reach the listener after it).
    approved_at: Option<Instant>,
}

/// Where held connects to stand-in addresses wait ([`super::splice`]).
pub type Splices<'a> = Option<&'a mut SpliceListener>;

impl HeldSocket {
    pub fn new(cookie: u64, ask: u64, pid: u32, transport: u8, refusal: String) -> HeldSocket {
        HeldSocket {
            cookie,
            ask,
            pid,
            tcp: transport == TRANSPORT_TCP,
            since: Instant::now(),
            refusal,
            ending: None,
            approved_at: None,
        }
    }

    /// How long it has waited.
    pub fn waited(&self) -> Duration {
        self.since.elapsed()
    }

    /// One turn: `Some(outcome)` once the socket is done (its kernel entry is forgotten).
    /// `answer` is its ask's state (`None`: the ask is gone, taken as expired).
    pub fn step(
        &mut self,
        enforcer: &mut Enforcer,
        answer: Option<&AskState>,
        splices: Splices<'_>,
    ) -> Result<Option<HeldOutcome>> {
        let entry = enforcer.held_socket(self.cookie)?;
        // An approved connect held at guard's splice listener is spliced; denied, expired or
        // given up it ends as any other (its connect fails).
        if let Some(entry) = entry.filter(|e| held::is_spliced(e.state))
            && self.ending.is_none()
            && matches!(answer, Some(AskState::Approved { .. }))
        {
            return self.step_spliced(enforcer, &entry, splices);
        }
        let state = entry.map(|entry| entry.state);
        let closed = matches!(state, None | Some(held::CLOSED));
        let outcome = if let Some(ending) = self.ending {
            closed.then_some(ending)
        } else {
            match HeldOutcome::of_answer(answer, !closed) {
                None => None,
                Some(HeldOutcome::Approved) => {
                    // A TCP socket is done once it connected (or closed); a UDP socket's next
                    // datagrams are let through by the approval itself.
                    (!self.tcp || closed || state == Some(held::CONNECTED))
                        .then_some(HeldOutcome::Approved)
                }
                Some(HeldOutcome::GivenUp) => Some(HeldOutcome::GivenUp),
                Some(outcome) => {
                    if !self.tcp || closed || enforcer.end_held_socket(self.cookie)? {
                        Some(outcome)
                    } else {
                        self.ending = Some(outcome);
                        None
                    }
                }
            }
        };
        if outcome.is_some() {
            enforcer.forget_held_socket(self.cookie)?;
        }
        Ok(outcome)
    }

    /// [`HeldSocket::step`] of an approved connect held on its way to guard's splice listener:
    /// the kernel lets its next SYN out once its stand-in is mapped to a real address
    /// (`SPLICE_RELEASED`), it connects to the listener (`SPLICE_CONNECTED`), and its
    /// connection there is spliced to that address. One that is not released, or does not
    /// come, in time is ended (fails closed: nowhere to send it).
    fn step_spliced(
        &mut self,
        enforcer: &mut Enforcer,
        entry: &KernelHeldSocket,
        splices: Splices<'_>,
    ) -> Result<Option<HeldOutcome>> {
        let waited = self.approved_at.get_or_insert_with(Instant::now).elapsed();
        let stand_in = Ipv4Addr::new(entry.addr[0], entry.addr[1], entry.addr[2], entry.addr[3]);
        let real = enforcer.stand_in_target(stand_in)?;
        let ended = |why: &str| {
            tracing::warn!(
                "a held connect to {stand_in}:{} was approved but {why}: ended",
                entry.port
            );
        };
        match entry.state {
            held::SPLICED => {
                // Its name resolved before the approval was put in force, so a stand-in still
                // not mapped after a moment never will be; a mapped one goes out at its next
                // SYN retry.
                let wait = if real.is_some() {
                    SPLICE_RELEASE_WAIT
                } else {
                    SPLICE_UNMAPPED_WAIT
                };
                if waited < wait {
                    return Ok(None);
                }
                ended(if real.is_some() {
                    "its SYN did not go out"
                } else {
                    "its name did not resolve"
                });
                return self.end_approved(enforcer, true);
            }
            // Its SYN is out: it connects in a moment (or its program closes it, and the next
            // turn sees it closed).
            held::SPLICE_RELEASED if waited < SPLICE_RELEASE_WAIT => return Ok(None),
            held::SPLICE_RELEASED => {
                ended("it did not connect to guard's splice listener");
                return self.end_approved(enforcer, false);
            }
            _ => {}
        }
        // Connected: its connection comes from its own address, with its cookie.
        let from = held_local_address(entry);
        let cookie = self.cookie;
        let is_released = |c: u64| {
            enforcer
                .held_socket(c)
                .ok()
                .flatten()
                .is_some_and(|held_socket| held::splice_released(held_socket.state))
        };
        let taken = match splices {
            Some(splices) => splices.take(from, cookie, is_released),
            None => Err(NotTaken::NotTheHeldSocket),
        };
        match (taken, real) {
            (Ok(client), Some(real)) => {
                if let Err(err) = splice(client, SocketAddr::from((real, entry.port))) {
                    tracing::warn!("splicing a held connect to {stand_in}: {err}");
                }
                enforcer.forget_held_socket(self.cookie)?;
                Ok(Some(HeldOutcome::Approved))
            }
            (Err(NotTaken::NotHere), _) if waited < SPLICE_RELEASE_WAIT => Ok(None),
            (taken, _) => {
                ended(match taken {
                    Ok(_) => "its stand-in is no longer mapped",
                    Err(NotTaken::NotHere) => {
                        "its connection did not reach guard's splice listener"
                    }
                    Err(NotTaken::NotTheHeldSocket) => "guard's splice listener cannot take it",
                });
                self.end_approved(enforcer, false)
            }
        }
    }

    /// Ends an approved socket that has nowhere to go: its connect fails at once with
    /// `sock_diag`; without it one still connecting (`connecting`) fails at its next SYN retry
    /// (the next turns wait for that), and one past that is let go of.
    fn end_approved(
        &mut self,
        enforcer: &mut Enforcer,
        connecting: bool,
    ) -> Result<Option<HeldOutcome>> {
        if enforcer.end_held_socket(self.cookie)? || !connecting {
            enforcer.forget_held_socket(self.cookie)?;
            return Ok(Some(HeldOutcome::Approved));
        }
        self.ending = Some(HeldOutcome::Approved);
        Ok(None)
    }
}

/// The held socket's own address and port, as the kernel wrote them at its connect: where its
/// connection to the splice listener comes from.
fn held_local_address(entry: &KernelHeldSocket) -> SocketAddr {
    let ip: std::net::IpAddr = if entry.family == libc::AF_INET as u16 {
        let a = entry.local_addr;
        Ipv4Addr::new(a[0], a[1], a[2], a[3]).into()
    } else {
        std::net::Ipv6Addr::from(entry.local_addr).into()
    };
    SocketAddr::new(ip, entry.local_port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asks::ApprovalMode;

    #[test]
    fn a_held_call_ends_as_its_ask_was_answered_and_waits_while_it_is_pending() {
        let approved = AskState::Approved {
            mode: ApprovalMode::Once,
            by: "ann".into(),
        };
        let denied = AskState::Denied {
            always: false,
            by: "ann".into(),
        };
        let of = HeldOutcome::of_answer;
        assert_eq!(of(Some(&AskState::Pending), true), None);
        assert_eq!(
            of(Some(&AskState::Pending), false),
            Some(HeldOutcome::GivenUp)
        );
        assert_eq!(of(Some(&approved), true), Some(HeldOutcome::Approved));
        assert_eq!(of(Some(&denied), true), Some(HeldOutcome::Denied));
        assert_eq!(
            of(Some(&AskState::Expired), true),
            Some(HeldOutcome::Expired)
        );
        // An ask gone from the book is no approval.
        assert_eq!(of(None, true), Some(HeldOutcome::Expired));
    }

    #[test]
    fn only_a_refused_call_gets_a_refusal_line_and_it_says_how_its_ask_ended() {
        let refusal = "guard: refused exec of `git push`";
        assert_eq!(
            HeldOutcome::Denied.refusal_line(refusal, 4).as_deref(),
            Some("guard: refused exec of `git push`; ask 4 was denied")
        );
        assert_eq!(
            HeldOutcome::Expired.refusal_line(refusal, 4).as_deref(),
            Some("guard: refused exec of `git push`; ask 4 expired unanswered")
        );
        for outcome in [
            HeldOutcome::Approved,
            HeldOutcome::GivenUp,
            HeldOutcome::Released,
        ] {
            assert_eq!(outcome.refusal_line(refusal, 4), None);
        }
    }
}
