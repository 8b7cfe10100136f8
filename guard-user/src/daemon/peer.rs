//! Who is on the other end of the control socket: the kernel's credentials for the peer
//! (SO_PEERCRED), turned into the authorization subject.

use std::collections::BTreeMap;
use std::ffi::CString;

use nix::unistd::{Gid, Group, Uid, User, getgrouplist};

use super::config::Config;
use super::scopes::Membership;
use crate::authz::Subject;
use crate::authz::{IN_GUARD_SCOPE_ATTRIBUTE, SCOPE_ATTRIBUTE};

/// The peer's credentials as the kernel gave them when it connected.
#[derive(Clone, Debug)]
pub struct PeerCredentials {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<u32>,
    /// The peer process itself (its pidfd): which scope it runs in is asked of it, never of a
    /// pid that may name another process by then. `None`: the kernel gave none (counts as
    /// an unreadable scope, which fails closed).
    pub process: Option<std::sync::Arc<crate::kernel::peer::PeerProcess>>,
}

impl PeerCredentials {
    /// The daemon's own process as a caller: root, for a front end inside it (`guard node`)
    /// that sends its requests through [`super::control_port::ControlPort`].
    pub fn this_process() -> PeerCredentials {
        PeerCredentials {
            uid: 0,
            gid: 0,
            pid: Some(std::process::id()),
            process: None,
        }
    }

    /// Whether this is [`PeerCredentials::this_process`]: a socket's peer is never the daemon
    /// itself (its pid is the connecting process's, from the kernel).
    pub fn is_this_process(&self) -> bool {
        self.process.is_none() && self.pid == Some(std::process::id())
    }
}

/// The real user id of process `pid` now (`None`: it is gone or unreadable). The peer's pid is
/// the kernel's from when it connected, and a pid can be taken by another process since: a
/// request that acts on the pid checks it is still the peer user's.
pub fn uid_of_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|real| real.parse().ok())
}

/// A user's name, or its number when the user database has none.
pub fn user_name(uid: u32) -> String {
    match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

fn group_name(gid: u32) -> String {
    match Group::from_gid(Gid::from_raw(gid)) {
        Ok(Some(group)) => group.name,
        _ => gid.to_string(),
    }
}

/// The subject the authorization policy sees: `sub` = the user name; `attrs` = `uid`, `gid`,
/// `groups` (the names of the primary group and every supplementary group the user database
/// lists), `scope` (the kind of guard scope the peer runs in, `membership`) and
/// `in_guard_scope` (`true` or `false`), plus what `[users.<name>]` in the config adds. The
/// config cannot replace those: they come from the kernel and the user database.
pub fn subject(peer: &PeerCredentials, config: &Config, membership: Membership) -> Subject {
    let sub = user_name(peer.uid);
    let mut groups = vec![group_name(peer.gid)];
    if let Ok(Some(user)) = User::from_uid(Uid::from_raw(peer.uid))
        && let Ok(name) = CString::new(user.name.clone())
        && let Ok(list) = getgrouplist(&name, Gid::from_raw(peer.gid))
    {
        for gid in list {
            let name = group_name(gid.as_raw());
            if !groups.contains(&name) {
                groups.push(name);
            }
        }
    }
    let mut attrs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let extra = config.users.get(&sub);
    if let Some(extra) = extra {
        attrs.extend(extra.attrs.clone());
    }
    attrs.insert("uid".to_string(), vec![peer.uid.to_string()]);
    attrs.insert("gid".to_string(), vec![peer.gid.to_string()]);
    attrs.insert("groups".to_string(), groups);
    attrs.insert(
        SCOPE_ATTRIBUTE.to_string(),
        vec![membership.as_str().to_string()],
    );
    attrs.insert(
        IN_GUARD_SCOPE_ATTRIBUTE.to_string(),
        vec![membership.is_confined().to_string()],
    );
    Subject {
        sub,
        email: extra.and_then(|e| e.email.clone()),
        attrs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_named_and_its_group_listed() {
        let subject = subject(
            &PeerCredentials {
                uid: 0,
                gid: 0,
                pid: None,
                process: None,
            },
            &Config::default(),
            Membership::None,
        );
        assert_eq!(subject.sub, "root");
        assert_eq!(subject.attrs["in_guard_scope"], vec!["false"]);
        assert_eq!(subject.attrs["uid"], vec!["0"]);
        assert!(subject.attrs["groups"].contains(&"root".to_string()));
    }

    #[test]
    fn an_unknown_uid_is_its_number_and_config_cannot_spoof_the_uid_or_the_scope() {
        let mut config = Config::default();
        config.users.insert(
            "64123".to_string(),
            super::super::config::UserConfig {
                email: Some("x@example.com".into()),
                attrs: BTreeMap::from([
                    ("uid".to_string(), vec!["0".to_string()]),
                    ("in_guard_scope".to_string(), vec!["false".to_string()]),
                    ("team".to_string(), vec!["infra".to_string()]),
                ]),
            },
        );
        let subject = subject(
            &PeerCredentials {
                uid: 64123,
                gid: 64123,
                pid: None,
                process: None,
            },
            &config,
            Membership::Run,
        );
        assert_eq!(subject.sub, "64123");
        assert_eq!(subject.attrs["uid"], vec!["64123"]);
        assert_eq!(subject.attrs["scope"], vec!["run"]);
        assert_eq!(subject.attrs["in_guard_scope"], vec!["true"]);
        assert_eq!(subject.attrs["team"], vec!["infra"]);
        assert_eq!(subject.email.as_deref(), Some("x@example.com"));
    }

    #[test]
    fn a_pid_is_read_back_as_its_real_user() {
        let me = nix::unistd::getuid().as_raw();
        assert_eq!(uid_of_pid(std::process::id()), Some(me));
        assert_eq!(uid_of_pid(u32::MAX), None, "no such process");
    }
}
