//! Destination decisions: `connect` (TCP and UDP) and UDP `sendmsg` with an address, IPv4 and
//! IPv6, IPv4-mapped IPv6 looked up as IPv4. Each family has one LPM trie keyed by (transport,
//! port, address); four lookups cover exact and any transport × exact and any port, and the
//! strongest verdict wins (userspace stores every entry already combined with the entries whose
//! prefixes contain it, so the longest match carries the strongest covering verdict).

use aya_ebpf::macros::{cgroup_sock_addr, lsm};
use aya_ebpf::maps::lpm_trie::Key;
use aya_ebpf::programs::{LsmContext, SockAddrContext};
use guard_common::Decision;
use guard_common::engine::destination::{decide_destination, is_v4_mapped, lookup};
use guard_common::engine::outcome::{Counters, Outcome};
use guard_common::event::{action, flag, kind};
use guard_common::limits::NO_RULE;
use guard_common::maps::{
    DEST_HEAD_BITS, DEST_SCOPE_BITS, DestV4, DestV6, TRANSPORT_TCP, TRANSPORT_UDP, Verdict,
    counter, dest_scope, held,
};

use crate::events::{Subject, conclude, emit};
use crate::kernel::{lsm_return, offsets, read_at};
use crate::maps::{DEST_V4, DEST_V6, dns_redirect, or_failed_open, settings};
use crate::scope::current_scope;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const SOCK_STREAM: u16 = 1;
const SOCK_DGRAM: u16 = 2;
const EPERM: i32 = 1;

/// A destination as the hooks see it: address bytes (4 for IPv4), port in host order.
struct Destination {
    family: u16,
    addr: [u8; 16],
    port: u16,
    transport: u8,
}

// cgroup sock_addr programs: return 1 to let the call through, 0 to fail it with EPERM.

#[cgroup_sock_addr(connect4)]
pub fn connect4(ctx: SockAddrContext) -> i32 {
    from_sock_addr(&ctx, false, kind::CONNECT)
}

#[cgroup_sock_addr(connect6)]
pub fn connect6(ctx: SockAddrContext) -> i32 {
    from_sock_addr(&ctx, true, kind::CONNECT)
}

#[cgroup_sock_addr(sendmsg4)]
pub fn sendmsg4(ctx: SockAddrContext) -> i32 {
    from_sock_addr(&ctx, false, kind::SENDMSG)
}

#[cgroup_sock_addr(sendmsg6)]
pub fn sendmsg6(ctx: SockAddrContext) -> i32 {
    from_sock_addr(&ctx, true, kind::SENDMSG)
}

#[inline(always)]
fn from_sock_addr(ctx: &SockAddrContext, v6: bool, call: u8) -> i32 {
    let redirect = dns_redirect();
    if let Some(redirect) = redirect {
        // DNS goes to guard's resolver, which decides by name.
        if crate::dns::redirect(ctx, v6, redirect) {
            return 1;
        }
    }
    let hold = crate::held::config();
    // A stand-in with no real address yet has nowhere to go: it is held only at guard's splice
    // listener (TCP), else refused.
    let unmapped = hold.is_some() && crate::stand_in::unmapped(ctx, v6);
    let splice_port = hold.map_or(0, |h| h.splice_port);
    // SAFETY: the context pointer the kernel passed.
    let splice = unmapped && splice_port != 0 && unsafe { (*ctx.sock_addr).protocol } == 6;
    let cookie = match hold {
        Some(_) if !unmapped || splice => crate::held::socket_cookie(ctx),
        _ => 0,
    };
    let state = if splice { held::SPLICED } else { held::HELD };
    // On the lsm backend these programs are attached only to redirect and hold; the LSM hooks
    // decided (a stand-in by its own address, as here), and let the prompts to hold through.
    let lsm =
        redirect.is_some_and(|r| r.redirect_only != 0) || hold.is_some_and(|h| h.lsm_defers != 0);
    let by = match (hold, lsm) {
        (None, _) => HoldBy::Nobody,
        (Some(_), false) => HoldBy::Socket(cookie, state),
        (Some(_), true) => HoldBy::Deferred(cookie, state),
    };
    if (!lsm || hold.is_some()) && decide_sock_addr(ctx, v6, call, by) {
        return 0;
    }
    if splice && crate::held::spliced(cookie) {
        // Held on its way to guard's splice listener (its SYNs dropped until the approval),
        // which sends it on; its getpeername names the stand-in.
        crate::splice_peer::remember(ctx, v6, cookie);
        crate::held::to_splice_listener(ctx, v6, splice_port);
        return 1;
    }
    // Let through: a stand-in goes to the real address it stands for, or nowhere.
    i32::from(crate::stand_in::send_to_real(ctx, v6))
}

/// Who holds a prompted call instead of refusing it (`held`).
#[derive(Clone, Copy)]
enum HoldBy {
    /// Nobody: a prompt is refused.
    Nobody,
    /// This cgroup program: the socket with this cookie is held (0: it cannot be), in this
    /// `held` state.
    Socket(u64, u8),
    /// This cgroup program, after an LSM hook decided everything but the prompts it let
    /// through: those are held, the rest pass unrecorded (the hook recorded them).
    Deferred(u64, u8),
    /// The cgroup program that runs after this LSM hook: a prompt goes through unrecorded.
    CgroupProgram,
}

/// Decides a cgroup connect or sendmsg by its destination; `true` when it must fail.
#[inline(always)]
fn decide_sock_addr(ctx: &SockAddrContext, v6: bool, call: u8, hold: HoldBy) -> bool {
    // SAFETY: the context pointer the kernel passed.
    let sa = unsafe { &*ctx.sock_addr };
    let port = u16::from_be(sa.user_port as u16);
    let transport = sa.protocol as u8;
    let destination = if v6 {
        Destination {
            family: AF_INET6,
            addr: words_to_bytes(sa.user_ip6),
            port,
            transport,
        }
    } else {
        let mut addr = [0u8; 16];
        addr[..4].copy_from_slice(&sa.user_ip4.to_ne_bytes());
        Destination {
            family: AF_INET,
            addr,
            port,
            transport,
        }
    };
    let destination = if is_unspecified(&destination) {
        // SAFETY: the kernel gives sock_addr programs their socket (never NULL). Its fields are
        // read one 4-byte word at a time (volatile, so LLVM cannot merge them): the verifier
        // allows no wider load.
        let sk = unsafe { sa.__bindgen_anon_1.sk };
        let word = |field: *const u32| unsafe { core::ptr::read_volatile(field) };
        // sendmsg: the source the kernel will route from (the socket's, or one a control
        // message set), which only the sendmsg programs may read; connect: the bound address.
        let source_v4 = if call == kind::SENDMSG && !v6 {
            sa.msg_src_ip4
        } else {
            word(unsafe { &raw const (*sk).src_ip4 })
        };
        let bound_v6 = if call == kind::CONNECT && v6 {
            let ip6 = unsafe { &raw const (*sk).src_ip6 }.cast::<u32>();
            words_to_bytes([0, 1, 2, 3].map(|i| word(unsafe { ip6.add(i) })))
        } else {
            [0; 16]
        };
        reached_by_unspecified(destination, source_v4.to_ne_bytes(), &bound_v6)
    } else {
        destination
    };
    refuse(destination, call, action::EPERM, 0, Verdict::NONE, hold)
}

/// An address the kernel keeps as four native words, as bytes.
#[inline(always)]
pub fn words_to_bytes(words: [u32; 4]) -> [u8; 16] {
    let mut addr = [0u8; 16];
    let mut i = 0;
    while i < 4 {
        addr[i * 4..i * 4 + 4].copy_from_slice(&words[i].to_ne_bytes());
        i += 1;
    }
    addr
}

/// 0.0.0.0, `::` or `::ffff:0.0.0.0`.
#[inline(always)]
fn is_unspecified(d: &Destination) -> bool {
    let mapped = d.family == AF_INET6 && is_v4_mapped(&d.addr);
    let (from, to) = match (d.family, mapped) {
        (AF_INET, _) => (0, 4),
        (_, true) => (12, 16),
        _ => (0, 16),
    };
    let mut i = from;
    while i < to {
        if d.addr[i] != 0 {
            return false;
        }
        i += 1;
    }
    true
}

/// Where Linux sends a connect or send to the unspecified address, so it is decided as the
/// local address it reaches: IPv4 (also IPv4-mapped) goes to the source address (`source_v4`:
/// the bound address, or for a send the source the kernel routes from) or, without one, to
/// 127.0.0.1; IPv6 `::` goes to ::1, or to 127.0.0.1 from a socket bound to an IPv4-mapped
/// address (`bound_v6`).
#[inline(always)]
fn reached_by_unspecified(d: Destination, source_v4: [u8; 4], bound_v6: &[u8; 16]) -> Destination {
    const LOOPBACK_V4: [u8; 4] = [127, 0, 0, 1];
    let as_v4 = |addr4: [u8; 4]| {
        let mut addr = [0u8; 16];
        addr[..4].copy_from_slice(&addr4);
        Destination {
            family: AF_INET,
            addr,
            port: d.port,
            transport: d.transport,
        }
    };
    if d.family == AF_INET || is_v4_mapped(&d.addr) {
        return as_v4(if source_v4 == [0; 4] {
            LOOPBACK_V4
        } else {
            source_v4
        });
    }
    if is_v4_mapped(bound_v6) {
        return as_v4(LOOPBACK_V4);
    }
    let mut loopback_v6 = [0u8; 16];
    loopback_v6[15] = 1;
    Destination {
        family: AF_INET6,
        addr: loopback_v6,
        port: d.port,
        transport: d.transport,
    }
}

/// The destination tables' verdict for a destination (IPv4 in the first 4 bytes of `addr`) in
/// `scope` (its own answers' entries, and every scope's), and whether it carried an approval of
/// exactly this destination (some scope's: ask [`approved_for`] whose).
#[inline(always)]
pub fn look_up(
    family: u16,
    addr: &[u8; 16],
    port: u16,
    transport: u8,
    scope: u64,
) -> (Verdict, bool) {
    // The address and scope are written once; each class changes only the head.
    if family == AF_INET6 {
        let mut key: Key<DestV6> = Key::new(
            DEST_HEAD_BITS + 128 + DEST_SCOPE_BITS,
            dest_scope::<27>(0, 0, addr, scope),
        );
        lookup(transport, port, |transport, port| {
            set_head(&mut key.data, transport, port);
            DEST_V6.get(&key).copied()
        })
    } else {
        let mut key: Key<DestV4> = Key::new(
            DEST_HEAD_BITS + 32 + DEST_SCOPE_BITS,
            dest_scope::<15>(0, 0, &addr[..4], scope),
        );
        lookup(transport, port, |transport, port| {
            set_head(&mut key.data, transport, port);
            DEST_V4.get(&key).copied()
        })
    }
}

/// A destination key's transport and port (`dest_key`'s layout).
#[inline(always)]
fn set_head(data: &mut [u8], transport: u8, port: u16) {
    let [high, low] = port.to_be_bytes();
    data[0] = transport;
    data[1] = high;
    data[2] = low;
}

/// Whether `scope` was given the approval the tables marked for this destination: another
/// scope's approval of the same destination is no approval here (fails closed).
#[inline(always)]
pub fn approved_for(scope: u64, family: u16, addr: &[u8; 16], port: u16, transport: u8) -> bool {
    crate::approvals::destination_approved(scope, family != AF_INET6, addr, port, transport)
}

/// Decides and records; `true` when the call must fail. `floor` is the weakest verdict it may
/// get (`Verdict::NONE`: the maps alone decide). Not configured or not in scope lets the call
/// through (fails open: nothing is enforced before the maps are filled, and processes outside
/// the scope are not guard's).
#[inline(always)]
fn refuse(
    mut destination: Destination,
    call: u8,
    act: u8,
    extra_flags: u8,
    floor: Verdict,
    hold: HoldBy,
) -> bool {
    let Some(settings) = settings() else {
        return false;
    };
    let scope = current_scope();
    if scope == 0 {
        return false;
    }
    // An IPv4-mapped IPv6 address is decided as the IPv4 address it stands for.
    if destination.family == AF_INET6 && is_v4_mapped(&destination.addr) {
        let mut v4 = [0u8; 16];
        v4[..4].copy_from_slice(&destination.addr[12..16]);
        destination.addr = v4;
        destination.family = AF_INET;
    }
    let (found, marked) = look_up(
        destination.family,
        &destination.addr,
        destination.port,
        destination.transport,
        scope,
    );
    let mut verdict = found.strongest(floor);
    let mut flags = extra_flags;
    decide_destination(&settings, &mut verdict, &mut flags, marked, || {
        approved_for(
            scope,
            destination.family,
            &destination.addr,
            destination.port,
            destination.transport,
        )
    });
    // Only a prompt is held, and only in a scope someone answers for (looked up last: the
    // calls that are not prompted never pay for it).
    let holdable = !matches!(hold, HoldBy::Nobody)
        && (destination.transport == TRANSPORT_TCP || destination.transport == TRANSPORT_UDP)
        && verdict.decision == Decision::Prompt as u8
        && Outcome::of(&settings, verdict).refused
        && crate::held::scope_holds(scope);
    match hold {
        // The cgroup program that runs next holds it, and records it.
        HoldBy::CgroupProgram if holdable => return false,
        // The LSM hook decided and recorded everything else.
        HoldBy::Deferred(..) if !holdable => return false,
        _ => {}
    }
    // An allow nobody records: counted, no event (a decision, not a failure).
    let Some((mut action, flags)) = conclude(&settings, verdict, Counters::NET, flags, act) else {
        return false;
    };
    let mut cookie = 0;
    if let HoldBy::Socket(socket, state) | HoldBy::Deferred(socket, state) = hold
        && holdable
        && crate::held::hold(
            socket,
            state,
            destination.family,
            &destination.addr,
            destination.port,
            destination.transport,
            scope,
        )
    {
        action = action::HELD;
        cookie = socket;
    }
    emit(&Subject {
        kind: call,
        verdict,
        action,
        flags,
        task: None,
        path: None,
        dev: 0,
        ino: cookie,
        family: destination.family,
        port: destination.port,
        transport: destination.transport,
        addr: destination.addr,
    });
    action != action::NONE && action != action::HELD
}

// lsm backend: socket_connect(sock, address, addrlen) and socket_sendmsg(sock, msg, size); the
// last context slot is the previous LSM program's return value, which stands if non-zero.

#[lsm(hook = "socket_connect")]
pub fn socket_connect(ctx: LsmContext) -> i32 {
    let previous: i32 = ctx.arg(3);
    if previous != 0 {
        return lsm_return(previous);
    }
    // An unreadable socket or address fails open: the cgroup hooks are not attached on this
    // backend, so this is a real gap; it needs a kernel bug to happen, and is counted.
    lsm_return(or_failed_open(
        unsafe { try_socket_connect(&ctx) },
        counter::NET_FAILED_OPEN,
    ))
}

unsafe fn try_socket_connect(ctx: &LsmContext) -> Result<i32, i32> {
    let sock: *const u8 = ctx.arg(0);
    let address: *const u8 = ctx.arg(1);
    // Not TCP or UDP, or not an IPv4/IPv6 address: not ruled on (by design: guard rules only
    // on these; the `?` reads fail open, see socket_connect).
    let Some(transport) = (unsafe { socket_transport(sock)? }) else {
        return Ok(0);
    };
    let Some(mut destination) = (unsafe { read_sockaddr(address, transport)? }) else {
        return Ok(0);
    };
    // DNS: the cgroup connect program, which runs after this hook, sends it to guard's resolver.
    if crate::dns::will_redirect(destination.port, transport) {
        return Ok(0);
    }
    if is_unspecified(&destination) {
        let (source_v4, bound_v6) = unsafe { bound_addresses(sock)? };
        destination = reached_by_unspecified(destination, source_v4, &bound_v6);
    }
    Ok(
        if refuse(
            destination,
            kind::CONNECT,
            action::EPERM,
            flag::LSM,
            Verdict::NONE,
            lsm_hold(),
        ) {
            -EPERM
        } else {
            0
        },
    )
}

#[lsm(hook = "socket_sendmsg")]
pub fn socket_sendmsg(ctx: LsmContext) -> i32 {
    let previous: i32 = ctx.arg(3);
    if previous != 0 {
        return lsm_return(previous);
    }
    // Fails open on unreadable memory, counted, as socket_connect.
    lsm_return(or_failed_open(
        unsafe { try_socket_sendmsg(&ctx) },
        counter::NET_FAILED_OPEN,
    ))
}

unsafe fn try_socket_sendmsg(ctx: &LsmContext) -> Result<i32, i32> {
    let sock: *const u8 = ctx.arg(0);
    let msg: *const u8 = ctx.arg(1);
    // Only UDP sends carry a destination of their own; TCP was decided at connect (by design,
    // not failures; the `?` reads fail open, as in socket_connect).
    let Some(transport) = (unsafe { socket_transport(sock)? }) else {
        return Ok(0);
    };
    if transport != TRANSPORT_UDP {
        return Ok(0);
    }
    let name: *const u8 = unsafe { read_at(msg, offsets().msghdr_msg_name)? };
    if name.is_null() {
        // A connected socket: its destination was decided at connect.
        return Ok(0);
    }
    // Not an IPv4/IPv6 address: not ruled on.
    let Some(mut destination) = (unsafe { read_sockaddr(name, transport)? }) else {
        return Ok(0);
    };
    // DNS: the cgroup sendmsg program, which runs after this hook, sends it to guard's resolver.
    if crate::dns::will_redirect(destination.port, transport) {
        return Ok(0);
    }
    let mut floor = Verdict::NONE;
    if is_unspecified(&destination) {
        // A control message (IP_PKTINFO) may set the source, and so where the datagram goes;
        // the kernel reads it after this hook. Decided as the socket's own source, unless
        // there is one: then refused as forbidden, the strongest answer any local address
        // could get (fails closed; the cgroup backend sees the source the kernel routes from).
        let controllen: usize = unsafe { read_at(msg, offsets().msghdr_msg_controllen)? };
        if controllen != 0 && (destination.family == AF_INET || is_v4_mapped(&destination.addr)) {
            floor = Verdict::new(Decision::Forbidden, NO_RULE, false);
        }
        let (source_v4, _) = unsafe { bound_addresses(sock)? };
        destination = reached_by_unspecified(destination, source_v4, &[0; 16]);
    }
    Ok(
        if refuse(
            destination,
            kind::SENDMSG,
            action::EPERM,
            flag::LSM,
            floor,
            lsm_hold(),
        ) {
            -EPERM
        } else {
            0
        },
    )
}

/// Who holds a prompt an LSM hook sees: the cgroup program after it, when the hold is on.
#[inline(always)]
fn lsm_hold() -> HoldBy {
    match crate::held::config() {
        Some(hold) if hold.lsm_defers != 0 => HoldBy::CgroupProgram,
        _ => HoldBy::Nobody,
    }
}

/// The addresses a `struct socket` is bound to: IPv4 and IPv6 (zero when unbound).
#[inline(always)]
unsafe fn bound_addresses(sock: *const u8) -> Result<([u8; 4], [u8; 16]), i32> {
    let off = offsets();
    unsafe {
        let sk: *const u8 = read_at(sock, off.socket_sk)?;
        Ok((
            read_at(sk, off.sock_rcv_saddr)?,
            read_at(sk, off.sock_v6_rcv_saddr)?,
        ))
    }
}

/// TCP for stream sockets, UDP for datagram sockets, `None` (not ruled on) for the rest.
#[inline(always)]
unsafe fn socket_transport(sock: *const u8) -> Result<Option<u8>, i32> {
    let ty: u16 = unsafe { read_at(sock, offsets().socket_type)? };
    Ok(match ty {
        SOCK_STREAM => Some(TRANSPORT_TCP),
        SOCK_DGRAM => Some(TRANSPORT_UDP),
        _ => None,
    })
}

/// Reads a kernel copy of a `sockaddr_in`/`sockaddr_in6`; other families are not ruled on.
#[inline(always)]
unsafe fn read_sockaddr(address: *const u8, transport: u8) -> Result<Option<Destination>, i32> {
    let family: u16 = unsafe { read_at(address, 0)? };
    let port_be: u16 = unsafe { read_at(address, 2)? };
    let mut addr = [0u8; 16];
    match family {
        AF_INET => {
            let v4: [u8; 4] = unsafe { read_at(address, 4)? };
            addr[..4].copy_from_slice(&v4);
        }
        AF_INET6 => {
            addr = unsafe { read_at(address, 8)? };
        }
        _ => return Ok(None),
    }
    Ok(Some(Destination {
        family,
        addr,
        port: u16::from_be(port_be),
        transport,
    }))
}
