//! `cgroup/sock_create`: IP sockets the connect and sendmsg hooks never see (raw, ping,
//! UDP-Lite, SCTP, any protocol but TCP/MPTCP/UDP) are refused at creation in scope unless the
//! policy allows their kind (`enforcement(socket_kinds=[...])`). The kernel runs this program
//! only for AF_INET/AF_INET6 sockets a process creates (never kernel sockets), on both backends:
//! a cgroup program is the one hook that sees the socket before any packet can leave it.

use aya_ebpf::macros::cgroup_sock;
use aya_ebpf::programs::SockContext;
use guard_common::Decision;
use guard_common::event::{action, flag, kind};
use guard_common::limits::NO_RULE;
use guard_common::maps::{Verdict, counter};
use guard_common::sockets::classify;

use crate::events::{Subject, emit};
use crate::maps::{count, settings};
use crate::scope::current_in_scope;

// cgroup sock programs: return 1 to let the socket be made, 0 to fail socket() with EPERM.
#[cgroup_sock(sock_create)]
pub fn sock_create(ctx: SockContext) -> i32 {
    // SAFETY: the context pointer the kernel passed.
    let sk = unsafe { &*ctx.sock };
    let (family, ty, protocol) = (sk.family, sk.type_, sk.protocol);
    // TCP, MPTCP, UDP and non-IP families: decided elsewhere or not guard's (by design).
    let Some(socket_kind) = classify(family, ty, protocol) else {
        return 1;
    };
    // Not configured or not in scope: let through (fails open, as every hook: nothing is
    // enforced before the maps are filled, and processes outside the scope are not guard's).
    let Some(settings) = settings() else {
        return 1;
    };
    if !current_in_scope() {
        return 1;
    }
    if settings.socket_kinds & socket_kind != 0 {
        return 1;
    }
    count(counter::SOCKET_REFUSED);
    let audit_only = settings.audit_only != 0;
    let mut flags = flag::UNMATCHED;
    if audit_only {
        flags |= flag::AUDIT_ONLY;
        count(counter::AUDIT_ONLY);
    }
    emit(&Subject {
        kind: kind::SOCKET,
        verdict: Verdict {
            decision: Decision::Forbidden as u8,
            flags: 0,
            _pad: 0,
            rule: NO_RULE,
        },
        action: if audit_only {
            action::NONE
        } else {
            action::EPERM
        },
        flags,
        task: None,
        path: None,
        dev: 0,
        ino: socket_kind as u64,
        family: family as u16,
        port: protocol as u16,
        transport: ty as u8,
        addr: [0; 16],
    });
    if audit_only { 1 } else { 0 }
}
