//! DNS to guard's resolver: every TCP and UDP connect or send of a process in scope to port 53,
//! whatever the address (a public resolver, the system's, a local stub such as 127.0.0.53), is
//! sent to the resolver guard runs (`DNS_REDIRECT`), which decides by name and puts the
//! addresses it answers into the maps before the program sees them. Its replies are made to
//! seem to come from the address the program asked (`recvmsg4|6`), because resolvers (glibc,
//! hickory) drop a reply from any other source.

use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use aya_ebpf::helpers::generated::bpf_get_socket_cookie;
use aya_ebpf::macros::cgroup_sock_addr;
use aya_ebpf::programs::SockAddrContext;
use guard_common::maps::{
    DNS_PORT, DnsOriginal, DnsRedirect, TRANSPORT_TCP, TRANSPORT_UDP, counter,
};

use crate::maps::{DNS_ORIGINALS, count, dns_redirect};
use crate::scope::{current_in_scope, current_scope};

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
/// 127.0.0.1 as the kernel stores it (network order in a native-endian word).
const LOOPBACK_V4: u32 = u32::from_ne_bytes([127, 0, 0, 1]);

/// Whether a TCP or UDP call to `port` (host order) from the current process goes to guard's
/// resolver instead: then the hooks that decide destinations let it through (the resolver
/// decides by name). Not configured or not in scope: no (fails open to the ordinary decision,
/// which is closed for a destination the policy does not allow).
#[inline(always)]
pub fn will_redirect(port: u16, transport: u8) -> bool {
    is_dns(port, transport) && dns_redirect().is_some() && current_in_scope()
}

/// TCP or UDP to port 53 (host order).
#[inline(always)]
fn is_dns(port: u16, transport: u8) -> bool {
    port == DNS_PORT && (transport == TRANSPORT_TCP || transport == TRANSPORT_UDP)
}

/// A cgroup connect or sendmsg call to port 53, rewritten to the resolver `redirect` names;
/// `true` when it was (the call then goes through). The original destination is kept by
/// socket cookie, for the replies; a full LRU map drops the oldest socket's entry (its replies
/// then keep the resolver's address, and a strict client ignores them: it retries, nothing
/// leaks).
#[inline(always)]
pub fn redirect(ctx: &SockAddrContext, v6: bool, redirect: DnsRedirect) -> bool {
    // SAFETY: the context pointer the kernel passed.
    let sa = unsafe { &mut *ctx.sock_addr };
    // Not DNS: decided as any other call.
    if !is_dns(u16::from_be(sa.user_port as u16), sa.protocol as u8) {
        return false;
    }
    let scope = current_scope();
    // Not in scope: decided as any other call (fails open: not guard's process).
    if scope == 0 {
        return false;
    }
    if redirect.follower != 0 {
        // An overlay's set: the daemon's, whose program runs after this one, sends it to
        // guard's resolver (fails open to that set, which decides it by name).
        return true;
    }
    let mut original = DnsOriginal {
        addr: [0; 16],
        port: sa.user_port as u16,
        family: if v6 { AF_INET6 } else { AF_INET },
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        scope,
    };
    if v6 {
        let mut i = 0;
        while i < 4 {
            original.addr[i * 4..i * 4 + 4].copy_from_slice(&sa.user_ip6[i].to_ne_bytes());
            i += 1;
        }
    } else {
        original.addr[..4].copy_from_slice(&sa.user_ip4.to_ne_bytes());
    }
    // SAFETY: sock_addr programs may ask for their socket's cookie.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    // A failed insert only costs the reply's source address (see above): the query still goes
    // to the resolver, never to where it was sent.
    let _ = DNS_ORIGINALS.insert(&cookie, &original, 0);
    let resolver_port = u32::from(redirect.port.to_be());
    if v6 {
        let [w0, w1, w2, w3] = resolver_v6(&sa.user_ip6);
        sa.user_ip6[0] = w0;
        sa.user_ip6[1] = w1;
        sa.user_ip6[2] = w2;
        sa.user_ip6[3] = w3;
    } else {
        sa.user_ip4 = LOOPBACK_V4;
    }
    sa.user_port = resolver_port;
    count(counter::DNS_REDIRECTED);
    true
}

/// Where an IPv6 socket's query goes: `::ffff:127.0.0.1` when it asked an IPv4-mapped address
/// (an IPv6 socket in dual-stack use cannot reach `::1` then), else `::1`.
#[inline(always)]
fn resolver_v6(asked: &[u32; 4]) -> [u32; 4] {
    let mapped_prefix = u32::from_ne_bytes([0, 0, 0xff, 0xff]);
    if asked[0] == 0 && asked[1] == 0 && asked[2] == mapped_prefix {
        [0, 0, mapped_prefix, LOOPBACK_V4]
    } else {
        [0, 0, 0, u32::from_ne_bytes([0, 0, 0, 1])]
    }
}

#[cgroup_sock_addr(recvmsg4)]
pub fn recvmsg4(ctx: SockAddrContext) -> i32 {
    restore_source(&ctx, false);
    // recvmsg programs cannot refuse: the kernel requires 1.
    1
}

#[cgroup_sock_addr(recvmsg6)]
pub fn recvmsg6(ctx: SockAddrContext) -> i32 {
    restore_source(&ctx, true);
    1
}

/// A datagram from the resolver to a socket whose query was redirected: its source becomes the
/// address the query was sent to. Any other datagram is left as it is.
#[inline(always)]
fn restore_source(ctx: &SockAddrContext, v6: bool) {
    let Some(redirect) = dns_redirect() else {
        return;
    };
    // SAFETY: the context pointer the kernel passed.
    let sa = unsafe { &mut *ctx.sock_addr };
    if sa.user_port != u32::from(redirect.port.to_be()) {
        return;
    }
    let from_resolver = if v6 {
        let ip6 = [
            sa.user_ip6[0],
            sa.user_ip6[1],
            sa.user_ip6[2],
            sa.user_ip6[3],
        ];
        ip6 == resolver_v6(&ip6)
    } else {
        sa.user_ip4 == LOOPBACK_V4
    };
    if !from_resolver {
        return;
    }
    // SAFETY: sock_addr programs may ask for their socket's cookie.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) };
    // SAFETY: a plain-data value read once.
    let Some(original) = (unsafe { DNS_ORIGINALS.get(&cookie) }).copied() else {
        return;
    };
    let word = |i: usize| {
        u32::from_ne_bytes([
            original.addr[i * 4],
            original.addr[i * 4 + 1],
            original.addr[i * 4 + 2],
            original.addr[i * 4 + 3],
        ])
    };
    match (v6, original.family) {
        (false, AF_INET) => sa.user_ip4 = word(0),
        (true, AF_INET6) => {
            sa.user_ip6[0] = word(0);
            sa.user_ip6[1] = word(1);
            sa.user_ip6[2] = word(2);
            sa.user_ip6[3] = word(3);
        }
        // A family the socket does not have: left alone.
        _ => return,
    }
    sa.user_port = u32::from(original.port);
}
