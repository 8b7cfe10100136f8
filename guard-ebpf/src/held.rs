//! Held connects and sends: a prompted TCP connect or UDP send under `NET_HOLD` is let through
//! as if the network were slow, not refused. The connect and sendmsg programs list its socket in
//! `HELD_SOCKETS` ([`hold`]); `cgroup_skb/egress` ([`held_egress`]) drops that socket's packets
//! to a destination not yet approved, so a TCP connect's SYNs are lost and retried (the program's
//! own timeouts apply: a non-blocking connect returns EINPROGRESS and its poll times out on its
//! schedule), and a UDP datagram is lost. Once the destination is approved the next SYN goes
//! out. `sockops` ([`held_sockops`]) bounds a held connect by the ask's expiry
//! (`TCP_USER_TIMEOUT`) and tells userspace when a held socket connected or closed.
//!
//! The drop asks the kernel for a "congestion" drop (return 2): TCP then retries a SYN every
//! `TCP_RESOURCE_PROBE_INTERVAL` (500 ms) without backing off, so an approval reaches the
//! program within about half a second, and UDP reports no error (as a lossy link would not).
//!
//! A connect to a stand-in address with no real address yet has nowhere to be held on the way
//! to: it goes to guard's splice listener on loopback instead (`held::SPLICED`,
//! [`to_splice_listener`]), and is held on the way there as any other: its SYNs are dropped
//! until its stand-in is approved for its scope and mapped to a real address
//! (`held::SPLICE_RELEASED`, then `SPLICE_CONNECTED`), so its program's connect timeout applies
//! and a denial fails the connect; the listener then splices it to the real address. Only scopes listed in
//! `HOLD_SCOPES` (someone answers for them) are held; elsewhere a prompt is refused.

use aya_ebpf::EbpfContext;
use aya_ebpf::helpers::generated::{
    bpf_get_socket_cookie, bpf_ktime_get_boot_ns, bpf_setsockopt, bpf_sock_ops_cb_flags_set,
};
use aya_ebpf::macros::{cgroup_skb, sock_ops};
use aya_ebpf::programs::{SkBuffContext, SockAddrContext, SockOpsContext};
use guard_common::Decision;
use guard_common::engine::destination::decide_destination;
use guard_common::maps::{HeldSocket, NetHold, TRANSPORT_TCP, TRANSPORT_UDP, counter, held};

use crate::maps::{HELD_SOCKETS, HOLD_SCOPES, NET_HOLD, count, settings};

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// `cgroup_skb/egress` answers: 1 sends the packet; 2 drops it and reports congestion.
const SEND: i32 = 1;
const DROP_AS_CONGESTED: i32 = 2;

/// `BPF_SOCK_OPS_*` (include/uapi/linux/bpf.h).
const SOCK_OPS_TCP_CONNECT_CB: u32 = 3;
const SOCK_OPS_ACTIVE_ESTABLISHED_CB: u32 = 4;
const SOCK_OPS_RTO_CB: u32 = 8;
const SOCK_OPS_STATE_CB: u32 = 10;
const SOCK_OPS_RTO_CB_FLAG: i32 = 1;
const SOCK_OPS_STATE_CB_FLAG: i32 = 1 << 2;
const SOL_TCP: i32 = 6;
const TCP_USER_TIMEOUT: i32 = 18;
/// `TCP_CLOSE` in `enum tcp_state`.
const TCP_CLOSE: u32 = 7;

/// The hold's settings, when it is on.
#[inline(always)]
pub fn config() -> Option<NetHold> {
    NET_HOLD.get(0).copied().filter(|hold| hold.enabled != 0)
}

/// Whether socket `cookie` is held at guard's splice listener.
#[inline(always)]
pub fn spliced(cookie: u64) -> bool {
    // SAFETY: a read of a hash map value the verifier bounds.
    unsafe { HELD_SOCKETS.get(&cookie) }.is_some_and(|entry| entry.state == held::SPLICED)
}

/// Sends the connect to guard's splice listener on loopback (127.0.0.1, or `::ffff:127.0.0.1`
/// from an IPv6 socket) at `port`.
#[inline(always)]
pub fn to_splice_listener(ctx: &SockAddrContext, v6: bool, port: u16) {
    const LOOPBACK: u32 = u32::from_ne_bytes([127, 0, 0, 1]);
    const V4_MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);
    // SAFETY: the context pointer the kernel passed; connect programs may write these fields.
    let sa = unsafe { &mut *ctx.sock_addr };
    // One 4-byte store per field (volatile, so LLVM cannot merge them): the verifier allows no
    // wider store to the context.
    if v6 {
        let ip6 = (&raw mut sa.user_ip6).cast::<u32>();
        for (i, word) in [0, 0, V4_MAPPED_WORD, LOOPBACK].into_iter().enumerate() {
            // SAFETY: word `i` of the address in the context.
            unsafe { core::ptr::write_volatile(ip6.add(i), word) };
        }
    } else {
        // SAFETY: a field of the context.
        unsafe { core::ptr::write_volatile(&raw mut sa.user_ip4, LOOPBACK) };
    }
    // SAFETY: a field of the context.
    unsafe { core::ptr::write_volatile(&raw mut sa.user_port, u32::from(port.to_be())) };
}

/// Whether the current process's scope has its prompts held (someone answers for it): only
/// looked up for a prompt, so the calls that are not prompted never pay for it.
#[inline(always)]
pub fn scope_holds(scope: u64) -> bool {
    // SAFETY: lookup of a plain u64 key.
    scope != 0 && unsafe { HOLD_SCOPES.get(&scope) }.is_some()
}

/// The cookie of the socket a sock_addr, skb or sock_ops program sees (0: none).
#[inline(always)]
pub fn socket_cookie<C: EbpfContext>(ctx: &C) -> u64 {
    // SAFETY: each of these program types may call the helper with its own context.
    unsafe { bpf_get_socket_cookie(ctx.as_ptr()) }
}

/// Lists the socket `cookie` as held on its way to the destination; `false` when it cannot be
/// (no cookie, the table is full): the caller refuses the call instead (fails closed, as
/// without a hold).
#[inline(always)]
pub fn hold(
    cookie: u64,
    state: u8,
    family: u16,
    addr: &[u8; 16],
    port: u16,
    transport: u8,
    scope: u64,
) -> bool {
    if cookie == 0 {
        return false;
    }
    // SAFETY: a read of a hash map value the verifier bounds.
    if let Some(entry) = unsafe { HELD_SOCKETS.get(&cookie) }
        && entry.state == held::HELD
    {
        // A UDP socket already held: its datagrams are decided one by one on the way out.
        return true;
    }
    // SAFETY: helper call without arguments.
    let now = unsafe { bpf_ktime_get_boot_ns() };
    let entry = HeldSocket {
        addr: *addr,
        family,
        port,
        transport,
        state,
        held_ns: now,
        changed_ns: now,
        scope,
        ..HeldSocket::default()
    };
    if HELD_SOCKETS.insert(&cookie, &entry, 0).is_err() {
        count(counter::NET_HOLD_FULL);
        return false;
    }
    count(counter::NET_HELD);
    true
}

#[cgroup_skb(egress)]
pub fn held_egress(ctx: SkBuffContext) -> i32 {
    let cookie = socket_cookie(&ctx);
    // A pointer to the map value, which is updated in place.
    let Some(entry) = HELD_SOCKETS.get_ptr_mut(&cookie) else {
        // Not a held socket: the connect and sendmsg programs decided it.
        return SEND;
    };
    // SAFETY: the map value, valid for this program run.
    let entry = unsafe { &mut *entry };
    if entry.state == held::DENIED {
        return dropped();
    }
    // HELD and SPLICED are decided below; the other states were.
    let spliced = entry.state == held::SPLICED;
    if entry.state != held::HELD && !spliced {
        return SEND;
    }
    let Some(settings) = settings() else {
        // Not configured: nothing is enforced yet (fails open, as every program). A spliced
        // connect stays dropped (fails closed): the listener takes only a released one, so
        // letting it out would only fail it later.
        return if spliced { dropped() } else { SEND };
    };
    let (family, addr, port, transport) = if entry.transport == TRANSPORT_TCP {
        (entry.family, entry.addr, entry.port, TRANSPORT_TCP)
    } else {
        // A UDP socket's datagrams may go anywhere: each is decided by its own destination.
        match udp_destination(&ctx) {
            Some((family, addr, port)) => (family, addr, port, TRANSPORT_UDP),
            // Unreadable: dropped (fails closed; the socket was held for a prompt).
            None => return dropped(),
        }
    };
    let scope = entry.scope;
    let (mut verdict, marked) = crate::net::look_up(family, &addr, port, transport, scope);
    let mut flags = 0;
    decide_destination(&settings, &mut verdict, &mut flags, marked, || {
        crate::net::approved_for(scope, family, &addr, port, transport)
    });
    if verdict.decision != Decision::Allow as u8 {
        return dropped();
    }
    if spliced {
        // The same decision as the program's retry to the stand-in gets (the destination held
        // is the stand-in it connected to, in the scope it connected from), and somewhere to
        // send it: a stand-in not mapped to a real address yet stays dropped (fails closed),
        // its next SYN is decided again.
        if !crate::stand_in::is_mapped(&addr) {
            return dropped();
        }
        entry.state = held::SPLICE_RELEASED;
        // SAFETY: helper call without arguments.
        entry.changed_ns = unsafe { bpf_ktime_get_boot_ns() };
        return SEND;
    }
    if transport == TRANSPORT_TCP {
        // Approved: this SYN and what follows go out.
        entry.state = held::RELEASED;
        // SAFETY: helper call without arguments.
        entry.changed_ns = unsafe { bpf_ktime_get_boot_ns() };
    }
    SEND
}

#[inline(always)]
fn dropped() -> i32 {
    count(counter::NET_HELD_DROPPED);
    DROP_AS_CONGESTED
}

/// A UDP datagram's destination from its IP header (the data of a `cgroup_skb` program starts
/// there). `None`: not a UDP datagram whose header could be read.
#[inline(always)]
fn udp_destination(ctx: &SkBuffContext) -> Option<(u16, [u8; 16], u16)> {
    let first: u8 = ctx.load(0).ok()?;
    let mut addr = [0u8; 16];
    match first >> 4 {
        4 => {
            let protocol: u8 = ctx.load(9).ok()?;
            if protocol != TRANSPORT_UDP {
                return None;
            }
            let v4: [u8; 4] = ctx.load(16).ok()?;
            addr[..4].copy_from_slice(&v4);
            let header = usize::from(first & 0x0f) * 4;
            let port: u16 = ctx.load(header + 2).ok()?;
            Some((AF_INET, addr, u16::from_be(port)))
        }
        6 => {
            // A datagram with extension headers is not read (dropped: fails closed).
            let next: u8 = ctx.load(6).ok()?;
            if next != TRANSPORT_UDP {
                return None;
            }
            addr = ctx.load(24).ok()?;
            let port: u16 = ctx.load(40 + 2).ok()?;
            Some((AF_INET6, addr, u16::from_be(port)))
        }
        _ => None,
    }
}

#[sock_ops]
pub fn held_sockops(ctx: SockOpsContext) -> u32 {
    let op = ctx.op();
    if op != SOCK_OPS_TCP_CONNECT_CB
        && op != SOCK_OPS_ACTIVE_ESTABLISHED_CB
        && op != SOCK_OPS_STATE_CB
        && op != SOCK_OPS_RTO_CB
    {
        return 1;
    }
    let cookie = socket_cookie(&ctx);
    if op == SOCK_OPS_STATE_CB && ctx.arg(1) == TCP_CLOSE {
        // Only sockets that were held get state callbacks: one sent to the splice listener
        // may outlive its held entry, and what its getpeername named goes as it closes.
        crate::splice_peer::forget(cookie);
    }
    // A pointer to the map value, which is updated in place.
    let Some(entry) = HELD_SOCKETS.get_ptr_mut(&cookie) else {
        // Not held: none of guard's business.
        return 1;
    };
    // SAFETY: the map value, valid for this program run.
    let entry = unsafe { &mut *entry };
    if op == SOCK_OPS_TCP_CONNECT_CB {
        // The local address is chosen by now: userspace needs it to end the socket on a denial.
        entry.local_port = ctx.local_port() as u16;
        if entry.family == AF_INET6 {
            entry.local_addr = crate::net::words_to_bytes(local_ip6(&ctx));
        } else if ctx.family() == u32::from(AF_INET6) {
            // An IPv6 socket connecting to an IPv4-mapped address (held as IPv4): its local
            // address is IPv4-mapped too.
            entry.local_addr[..4].copy_from_slice(&local_ip6(&ctx)[3].to_ne_bytes());
        } else {
            entry.local_addr[..4].copy_from_slice(&ctx.local_ip4().to_ne_bytes());
        }
        // A blocking connect waits up to the ask's expiry, however many SYNs that takes.
        let timeout = config().map_or(0, |hold| hold.user_timeout_ms as i32);
        if timeout > 0 {
            set_user_timeout(&ctx, timeout);
        }
        // SAFETY: the sock_ops context.
        unsafe {
            bpf_sock_ops_cb_flags_set(ctx.ops, SOCK_OPS_STATE_CB_FLAG | SOCK_OPS_RTO_CB_FLAG)
        };
        return 1;
    }
    if op == SOCK_OPS_RTO_CB {
        if entry.state == held::DENIED {
            // Denied where userspace could not end the socket itself (no sock_diag): the
            // connect times out at the next retry.
            set_user_timeout(&ctx, 1);
        }
        return 1;
    }
    // SAFETY: helper call without arguments.
    let now = unsafe { bpf_ktime_get_boot_ns() };
    if op == SOCK_OPS_ACTIVE_ESTABLISHED_CB {
        if held::is_spliced(entry.state) {
            // Connected to guard's splice listener (only a released SYN gets there), which
            // takes it by this state and splices it; the program's own timeouts from here on.
            if entry.state == held::SPLICE_RELEASED {
                entry.state = held::SPLICE_CONNECTED;
                entry.changed_ns = now;
            }
            set_user_timeout(&ctx, 0);
            return 1;
        }
        entry.state = held::CONNECTED;
        entry.changed_ns = now;
        // The program's own timeouts again from here on.
        set_user_timeout(&ctx, 0);
        return 1;
    }
    // A state change: the new state is the second argument.
    // A socket connected to the splice listener stays to be spliced: what it sent waits there.
    if ctx.arg(1) == TCP_CLOSE
        && entry.state != held::CONNECTED
        && entry.state != held::SPLICE_CONNECTED
    {
        entry.state = held::CLOSED;
        entry.changed_ns = now;
    }
    1
}

/// Sets the socket's `TCP_USER_TIMEOUT` (ms; 0: the kernel's own). A failure leaves it as it
/// was: the kernel's own SYN retries then bound the connect (a shorter wait; nothing let through).
#[inline(always)]
fn set_user_timeout(ctx: &SockOpsContext, ms: i32) {
    let mut value = ms;
    // SAFETY: the sock_ops context, an int option and its size.
    unsafe {
        bpf_setsockopt(
            ctx.as_ptr(),
            SOL_TCP,
            TCP_USER_TIMEOUT,
            (&raw mut value).cast(),
            4,
        )
    };
}

/// The socket's IPv6 address, read one 4-byte word at a time (volatile, so LLVM cannot merge
/// them): the verifier allows no wider load of the context.
#[inline(always)]
fn local_ip6(ctx: &SockOpsContext) -> [u32; 4] {
    // SAFETY: the context pointer the kernel passed; each word is a field of it.
    let ip6 = unsafe { &raw const (*ctx.ops).local_ip6 }.cast::<u32>();
    [0, 1, 2, 3].map(|i| unsafe { core::ptr::read_volatile(ip6.add(i)) })
}
