//! How a connect or send is decided from the destination tables: each table key starts with a
//! (transport, port) class, so a destination is looked up in four classes (exact and any, for
//! each), the strongest longest match wins, nothing matched takes the unmatched default, and an
//! approval of exactly this destination turns a `prompt` (never a `forbidden`) into an allow.

use crate::decision::Decision;
use crate::event::flag;
use crate::maps::{Settings, TRANSPORT_ANY, Verdict};

use super::default_verdict;

/// The (transport, port) classes a destination belongs to, most exact first.
#[inline(always)]
pub const fn classes(transport: u8, port: u16) -> [(u8, u16); 4] {
    [
        (transport, port),
        (transport, 0),
        (TRANSPORT_ANY, port),
        (TRANSPORT_ANY, 0),
    ]
}

/// The strongest verdict of the classes' longest matches (`longest_match(transport, port)`
/// looks one class up), and whether a match carried an approval of exactly this destination
/// (only exact-class, full-length entries carry one).
#[inline(always)]
pub fn lookup(
    transport: u8,
    port: u16,
    mut longest_match: impl FnMut(u8, u16) -> Option<Verdict>,
) -> (Verdict, bool) {
    let mut verdict = Verdict::NONE;
    let mut approved = false;
    for (transport, port) in classes(transport, port) {
        if let Some(found) = longest_match(transport, port) {
            approved |= found.approved();
            verdict = verdict.strongest(found);
        }
    }
    (verdict, approved)
}

/// The decision for a destination whose tables gave `verdict` (with any floor the caller
/// applied): nothing matched takes the unmatched default (adding [`flag::UNMATCHED`] to
/// `flags`), and an approval of exactly this destination (`marked`: the tables carry one)
/// lets a `prompt` through when `held_here` says the caller's scope was given it. That is asked
/// last, only for a marked prompt: the calls nobody approved never pay for it, and the kernel's
/// verifier sees one more branch inside the approval's, not a split of everything after it.
/// In place: the kernel's programs keep both in registers (a returned struct made the verifier
/// walk 6 % more of `connect4`).
#[inline(always)]
pub fn decide_destination(
    settings: &Settings,
    verdict: &mut Verdict,
    flags: &mut u8,
    marked: bool,
    held_here: impl FnOnce() -> bool,
) {
    if verdict.is_none() {
        *verdict = default_verdict(settings.unmatched_network);
        *flags |= flag::UNMATCHED;
    }
    if marked && verdict.decision == Decision::Prompt as u8 && held_here() {
        verdict.decision = Decision::Allow as u8;
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`): decided as the IPv4 address it stands for,
/// by the IPv4 table (its last 4 bytes).
#[inline(always)]
pub fn is_v4_mapped(addr: &[u8; 16]) -> bool {
    let mut i = 0;
    while i < 10 {
        if addr[i] != 0 {
            return false;
        }
        i += 1;
    }
    addr[10] == 0xff && addr[11] == 0xff
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::{TRANSPORT_TCP, VERDICT_APPROVAL};

    fn settings() -> Settings {
        Settings {
            unmatched_exec: 0,
            unmatched_network: Decision::Forbidden as u8,
            audit_only: 0,
            ready: 1,
            exec_approvals: 0,
            record_allowed: 0,
            anonymous_exec: 0,
            socket_kinds: 0,
        }
    }

    #[test]
    fn every_class_is_asked_and_the_strongest_wins() {
        let mut asked = [(0u8, 0u16); 4];
        let mut n = 0;
        let (verdict, approved) = lookup(TRANSPORT_TCP, 443, |transport, port| {
            asked[n] = (transport, port);
            n += 1;
            match (transport, port) {
                (TRANSPORT_TCP, 443) => Some(Verdict::new(Decision::Allow, 1, false)),
                (TRANSPORT_ANY, 0) => Some(Verdict::new(Decision::Prompt, 2, false)),
                _ => None,
            }
        });
        assert_eq!(asked, classes(TRANSPORT_TCP, 443));
        assert_eq!(verdict, Verdict::new(Decision::Prompt, 2, false));
        assert!(!approved);
    }

    #[test]
    fn an_approval_passes_a_prompt_and_nothing_takes_the_default() {
        let prompt = Verdict::new(Decision::Prompt, 3, false);
        let marked = Verdict {
            flags: VERDICT_APPROVAL,
            ..prompt
        };
        let (found, approved) = lookup(TRANSPORT_TCP, 9, |_, port| (port == 9).then_some(marked));
        assert!(approved);
        let decide = |found: Verdict, approved: bool| {
            let (mut verdict, mut flags) = (found, 0);
            decide_destination(&settings(), &mut verdict, &mut flags, approved, || true);
            (verdict, flags)
        };
        assert_eq!(decide(found, approved).0.decision, Decision::Allow as u8);
        let (unmatched, flags) = decide(Verdict::NONE, false);
        assert_eq!(unmatched.decision, Decision::Forbidden as u8);
        assert_eq!(flags, flag::UNMATCHED);
        let floor = Verdict::new(Decision::Forbidden, 4, false);
        assert_eq!(
            decide(found.strongest(floor), approved).0,
            floor,
            "an approval never lifts the floor"
        );
    }

    #[test]
    fn only_the_mapped_prefix_is_read_as_ipv4() {
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[127, 0, 0, 1]);
        assert!(is_v4_mapped(&mapped));
        mapped[0] = 0x20;
        assert!(!is_v4_mapped(&mapped));
    }
}
