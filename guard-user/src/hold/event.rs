//! The kernel event a held call would have made, had it not been held: its ask, its message
//! and its audit record are made from it as from any other refusal.

use std::time::SystemTime;

use super::{HeldCall, HeldRequest};
use crate::compile::EnforcementImage;
use crate::kernel::events::{Action, EventDestination, EventKind, KernelEvent};
use crate::policy::{Decision, Transport};

/// The event of `held`, a call from the scope with cgroup id `scope`.
pub fn held_event(image: &EnforcementImage, scope: u64, held: &HeldCall) -> KernelEvent {
    // `held.pid` is the calling thread's id: /proc has it, hidden, as it has every thread.
    let proc = format!("/proc/{}", held.pid);
    let comm = std::fs::read_to_string(format!("{proc}/comm")).unwrap_or_default();
    let status = Status::of(held.pid).unwrap_or_default();
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
        tgid: status.tgid.unwrap_or(held.pid),
        ppid: status.ppid,
        uid: status.uid,
        gid: status.gid,
        cgroup_id: scope,
        scope,
        comm: comm.trim_end().to_string(),
        exe,
        // The process's argv (a held exec's is the one it asks to run, set below).
        argv: command_line(held.pid),
        argv_truncated: false,
        anonymous: false,
        dev: 0,
        ino: 0,
        destination: None,
        path: None,
        socket: None,
        unix: None,
        sandbox: None,
        overlay: false,
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

/// What `/proc/TID/status` says of a task's process.
#[derive(Debug, Default, PartialEq, Eq)]
struct Status {
    tgid: Option<u32>,
    ppid: u32,
    uid: u32,
    gid: u32,
}

impl Status {
    fn of(tid: u32) -> Option<Status> {
        Some(Status::parse(
            &std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?,
        ))
    }

    fn parse(text: &str) -> Status {
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        };
        Status {
            tgid: field("Tgid"),
            ppid: field("PPid").unwrap_or(0),
            // The real ids (the first of real, effective, saved, filesystem).
            uid: field("Uid").unwrap_or(0),
            gid: field("Gid").unwrap_or(0),
        }
    }
}

/// The process (thread group) task `tid` belongs to.
pub fn thread_group(tid: u32) -> Option<u32> {
    Status::of(tid)?.tgid
}

/// The argv of task `tid`'s process, as it is now (empty for a process that is gone).
fn command_line(tid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{tid}/cmdline"))
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|part| !part.is_empty())
                .map(|part| String::from_utf8_lossy(part).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_status_names_its_process_and_the_command_line_is_its_argv() {
        let text = "Name:\tworker\nTgid:\t4100\nPid:\t4123\nPPid:\t17\n\
                    Uid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\n";
        assert_eq!(
            Status::parse(text),
            Status {
                tgid: Some(4100),
                ppid: 17,
                uid: 1000,
                gid: 100
            }
        );
        let here = std::process::id();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no arguments and cannot fail.
            tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = done_rx.recv_timeout(std::time::Duration::from_secs(10));
        });
        let tid = tid_rx.recv().unwrap();
        assert_ne!(tid, here);
        assert_eq!(thread_group(tid), Some(here), "a thread names its process");
        assert_eq!(command_line(tid), command_line(here), "and has its argv");
        done_tx.send(()).unwrap();
        worker.join().unwrap();
        assert_eq!(
            command_line(here).first().map(String::as_str),
            std::env::args().next().as_deref()
        );
    }
}
