//! What `getpeername` names for a socket guard sent to its splice listener: the stand-in address
//! and port its program connected to, not guard's listener on loopback (as a socket load
//! balancer names the service, not the backend it picked). The connect programs note the
//! stand-in by socket cookie as they send the connect to the listener ([`remember`]);
//! `cgroup/getpeername4|6` put it in the answer, only while the socket's peer is that listener;
//! the sock_ops program forgets it when the socket closes ([`forget`]). These programs change
//! what a call reports, never what it reaches: nothing here decides.

use aya_ebpf::macros::cgroup_sock_addr;
use aya_ebpf::programs::SockAddrContext;
use guard_common::maps::SplicedPeer;

use crate::maps::SPLICED_PEERS;

const LOOPBACK: u32 = u32::from_ne_bytes([127, 0, 0, 1]);
/// `::ffff:0:0/96` in the third word of an IPv6 address, as the kernel stores it.
const V4_MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

/// Notes the stand-in a connect names (an IPv4 address, or IPv4-mapped from an IPv6 socket)
/// before it is sent to the splice listener. An insert that fails (the LRU map evicts the oldest
/// entry first, so hardly ever) leaves `getpeername` naming the listener: it reports, it decides
/// nothing.
#[inline(always)]
pub fn remember(ctx: &SockAddrContext, v6: bool, cookie: u64) {
    // SAFETY: the context pointer the kernel passed.
    let sa = unsafe { &*ctx.sock_addr };
    let stand_in = if v6 { sa.user_ip6[3] } else { sa.user_ip4 };
    let peer = SplicedPeer {
        stand_in,
        port: sa.user_port,
    };
    let _ = SPLICED_PEERS.insert(&cookie, &peer, 0);
}

/// The socket closed: what its `getpeername` named goes with it.
#[inline(always)]
pub fn forget(cookie: u64) {
    let _ = SPLICED_PEERS.remove(&cookie);
}

// getpeername programs must return 1 (the kernel allows nothing else): every early return
// leaves the real peer in the answer (the call only reports; nothing is let through).

#[cgroup_sock_addr(getpeername4)]
pub fn getpeername4(ctx: SockAddrContext) -> i32 {
    name_stand_in(&ctx, false);
    1
}

#[cgroup_sock_addr(getpeername6)]
pub fn getpeername6(ctx: SockAddrContext) -> i32 {
    name_stand_in(&ctx, true);
    1
}

/// Puts the stand-in in the answer of a socket whose peer is guard's splice listener and which
/// guard sent there (a socket that connected to the listener itself is named as it is).
#[inline(always)]
fn name_stand_in(ctx: &SockAddrContext, v6: bool) {
    let Some(hold) = crate::held::config() else {
        // No hold, so no splice listener.
        return;
    };
    // SAFETY: the context pointer the kernel passed; getpeername programs may read and write
    // the address of their own family and the port.
    let sa = unsafe { &mut *ctx.sock_addr };
    let at_listener = if v6 {
        sa.user_ip6[0] == 0
            && sa.user_ip6[1] == 0
            && sa.user_ip6[2] == V4_MAPPED_WORD
            && sa.user_ip6[3] == LOOPBACK
    } else {
        sa.user_ip4 == LOOPBACK
    };
    if hold.splice_port == 0 || !at_listener || sa.user_port != u32::from(hold.splice_port.to_be())
    {
        return;
    }
    let cookie = crate::held::socket_cookie(ctx);
    // SAFETY: a read of a hash map value the verifier bounds.
    let Some(peer) = (unsafe { SPLICED_PEERS.get(&cookie) }).copied() else {
        return;
    };
    // One 4-byte store per field (volatile, so LLVM cannot merge them): the verifier allows no
    // wider store to the context.
    if v6 {
        // SAFETY: word 3 of the address in the context.
        unsafe {
            core::ptr::write_volatile((&raw mut sa.user_ip6).cast::<u32>().add(3), peer.stand_in)
        };
    } else {
        // SAFETY: a field of the context.
        unsafe { core::ptr::write_volatile(&raw mut sa.user_ip4, peer.stand_in) };
    }
    // SAFETY: a field of the context.
    unsafe { core::ptr::write_volatile(&raw mut sa.user_port, peer.port) };
}
