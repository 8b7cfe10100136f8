//! Stand-in addresses: under `unmatched_network="prompt"` guard's resolver answers a name no
//! rule names with an address of `guard_common::maps::STAND_IN_NET` instead of asking upstream,
//! so the name does not leave the host before a person approved it. A connect or send to a stand-in is decided
//! like any other (its ask names the name), and one that is let through goes to the real address
//! the name resolved to once approved (`STAND_INS`, written by userspace): the call's address is
//! rewritten here, in the cgroup connect and sendmsg programs, after the decision.

use aya_ebpf::programs::SockAddrContext;
use guard_common::maps::{counter, is_stand_in};

use crate::maps::{STAND_INS, count, dns_redirect};
use crate::scope::current_in_scope;

/// `::ffff:0:0/96` in the third word of an IPv6 address, as the kernel stores it.
const V4_MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

/// Sends a call that was let through to the real address of the stand-in it names; `false` when
/// it names a stand-in with no real address yet (the call is refused: fails closed, there is
/// nowhere it may go). Any other address, a process out of scope, or no resolver of guard's
/// (so no stand-ins were handed out): left as it is.
#[inline(always)]
pub fn send_to_real(ctx: &SockAddrContext, v6: bool) -> bool {
    // SAFETY: the context pointer the kernel passed.
    let sa = unsafe { &mut *ctx.sock_addr };
    let Some(word) = named_stand_in(sa, v6) else {
        return true;
    };
    // No resolver of guard's, or an overlay's set (the daemon's, after it, sends the stand-in
    // on): left as it is.
    if dns_redirect().is_none_or(|r| r.follower != 0) || !current_in_scope() {
        return true;
    }
    // SAFETY: a read of a hash map value the verifier bounds.
    match unsafe { STAND_INS.get(&word) } {
        Some(real) => {
            if v6 {
                sa.user_ip6[3] = *real;
            } else {
                sa.user_ip4 = *real;
            }
            true
        }
        None => {
            count(counter::STAND_IN_UNMAPPED);
            false
        }
    }
}

/// Whether the call names a stand-in with no real address yet (it can only be refused, never
/// held: there is nowhere to send it once approved).
#[inline(always)]
pub fn unmapped(ctx: &SockAddrContext, v6: bool) -> bool {
    // SAFETY: the context pointer the kernel passed.
    let sa = unsafe { &*ctx.sock_addr };
    // SAFETY: a read of a hash map value the verifier bounds.
    named_stand_in(sa, v6).is_some_and(|word| unsafe { STAND_INS.get(&word) }.is_none())
}

/// Whether the stand-in `addr` (IPv4, its first 4 bytes) is mapped to a real address: where a
/// connect held at guard's splice listener can be sent once approved.
#[inline(always)]
pub fn is_mapped(addr: &[u8; 16]) -> bool {
    let word = u32::from_ne_bytes([addr[0], addr[1], addr[2], addr[3]]);
    // SAFETY: a read of a hash map value the verifier bounds.
    unsafe { STAND_INS.get(&word) }.is_some()
}

/// The stand-in address (as the kernel stores it) the call names, if it names one.
#[inline(always)]
fn named_stand_in(sa: &aya_ebpf::bindings::bpf_sock_addr, v6: bool) -> Option<u32> {
    let word = if v6 {
        // Only an IPv4-mapped IPv6 address can name a stand-in (the resolver answers no AAAA).
        if sa.user_ip6[0] != 0 || sa.user_ip6[1] != 0 || sa.user_ip6[2] != V4_MAPPED_WORD {
            return None;
        }
        sa.user_ip6[3]
    } else {
        sa.user_ip4
    };
    is_stand_in(word.to_ne_bytes()).then_some(word)
}
