//! The kernel event a held call would have made, had it not been held: its ask, its message
//! and its audit record are made from it as from any other refusal.

use std::time::SystemTime;

use super::{HeldCall, HeldRequest};
use crate::compile::EnforcementImage;
use crate::kernel::events::{Action, EventDestination, EventKind, KernelEvent};
use crate::policy::{Decision, Transport};

/// The event of `held`, a call from the scope with cgroup id `scope`.
pub fn held_event(image: &EnforcementImage, scope: u64, held: &HeldCall) -> KernelEvent {
    let proc = format!("/proc/{}", held.pid);
    let comm = std::fs::read_to_string(format!("{proc}/comm")).unwrap_or_default();
    let ppid = std::fs::read_to_string(format!("{proc}/stat"))
        .ok()
        .and_then(|stat| {
            // After the `(comm)` field, which may hold spaces: state, then ppid.
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0);
    let (uid, gid) = std::fs::metadata(&proc)
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.uid(), m.gid())
        })
        .unwrap_or((0, 0));
    let exe = std::fs::read_link(format!("{proc}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut event = KernelEvent {
        time: SystemTime::now(),
        kind: EventKind::Exec,
        decision: Decision::Prompt,
        action: Action::Eacces,
        audit_only: false,
        unmatched: !held.by_rule(),
        rule: None,
        pid: held.pid,
        tgid: held.pid,
        ppid,
        uid,
        gid,
        cgroup_id: scope,
        comm: comm.trim_end().to_string(),
        exe,
        argv: Vec::new(),
        argv_truncated: false,
        anonymous: false,
        dev: 0,
        ino: 0,
        destination: None,
        path: None,
        socket: None,
        unix: None,
        sandbox: None,
    };
    match &held.request {
        HeldRequest::Exec { call, decision } => {
            event.rule = decision.rule.as_ref().and_then(|text| {
                let rules = &image.rules;
                rules.iter().position(|r| &r.text == text).map(|i| i as u32)
            });
            event.exe = call.file.to_string_lossy().into_owned();
            event.argv = call.argv.clone();
        }
        HeldRequest::Connect { call, decision } => {
            event.kind = if call.syscall == "connect" {
                EventKind::Connect
            } else {
                EventKind::Sendmsg
            };
            event.action = Action::Eperm;
            event.rule = decision.rule;
            event.destination = Some(EventDestination {
                address: crate::policy::rule::canonical_ip(call.address),
                port: call.port,
                transport: match call.transport {
                    Transport::Udp => "udp",
                    _ => "tcp",
                },
            });
        }
    }
    event
}
