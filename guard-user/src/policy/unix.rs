//! Unix sockets: `unix_rule(socket, decision, justification=None)`, guard's own form, and the
//! built-in lists every policy starts from.
//!
//! A socket is named as the kernel's hooks read the address a program connects or sends to:
//! a pathname (`/run/docker.sock`), or an abstract name written with a leading `@`
//! (`@/tmp/.X11-unix/X0`, as `ss` shows them). A trailing `*` makes it a prefix
//! (`/tmp/tmux-*`). The most specific match decides: a whole name before any prefix, a longer
//! prefix before a shorter one; for the same name a rule of the policy before the built-in
//! lists (so a rule lets a built-in refused socket through), and of two such rules the
//! stronger decision (allow < prompt < forbidden, as for prefix rules: an overlay cannot
//! loosen a socket the policy names). What nothing names follows the policy's
//! `enforcement(unmatched_unix=...)` default, `deny` unless the policy says otherwise (a server
//! outside the scope acts for whoever connects: a tmux started at any path runs what it is
//! sent); a relative path, which no rule can name (it depends on the caller's folder), is
//! refused.
//!
//! An allowed name reaches the socket it names only while nothing in the scope can put another
//! file in its place: `guard run` holds every whole name an allow rule or the built-in list
//! names in the command's mount namespace (`confine::sockets`), and a built-in entry whose
//! socket is not there when the policy is compiled is left out (see [`builtin_rules_present`]).

use std::fmt;

use super::rule::{Decision, RuleId, RuleOrigin};

/// The longest address the kernel takes (`sizeof(sockaddr_un.sun_path)`).
pub const MAX_ADDRESS_LEN: usize = guard_common::limits::UNIX_PATH_LEN;

/// Where the built-in entries say they come from.
pub const BUILTIN_ORIGIN: &str = "<built-in unix sockets>";

/// Servers that run commands or grant root for whoever connects: refused in every scope unless
/// a rule names them. (pattern, what it is); `{uid}` stands for each folder in `/run/user` when
/// the policy is compiled (a session that starts later is not covered).
pub const BUILTIN_REFUSED: &[(&str, &str)] = &[
    ("/tmp/tmux-*", "tmux servers run any command they are sent"),
    (
        "/run/screen/*",
        "screen sessions run any command they are sent",
    ),
    (
        "/var/run/screen/*",
        "screen sessions run any command they are sent",
    ),
    (
        "/run/docker.sock",
        "the Docker engine starts root containers",
    ),
    (
        "/var/run/docker.sock",
        "the Docker engine starts root containers",
    ),
    ("/run/docker/*", "the Docker engine starts root containers"),
    ("/run/podman/podman.sock", "podman starts containers"),
    (
        "/run/user/{uid}/systemd/private",
        "systemd --user runs units for whoever connects",
    ),
    (
        "/run/user/{uid}/bus",
        "the session's D-Bus reaches systemd --user, which runs units",
    ),
    (
        "/run/user/{uid}/podman/podman.sock",
        "podman starts containers",
    ),
    (
        "/run/user/{uid}/docker.sock",
        "a rootless Docker engine starts containers",
    ),
    ("/run/containerd/*", "containerd starts containers"),
    ("/run/crio/crio.sock", "CRI-O starts containers"),
    ("/run/buildkit/buildkitd.sock", "BuildKit runs build steps"),
    (
        "/run/systemd/private",
        "systemd runs units for whoever connects",
    ),
    (
        "/run/dbus/system_bus_socket",
        "D-Bus reaches systemd, which runs units",
    ),
    (
        "/var/run/dbus/system_bus_socket",
        "D-Bus reaches systemd, which runs units",
    ),
    ("/run/snapd.socket", "snapd installs and runs software"),
    ("/run/libvirt/*", "libvirt starts virtual machines"),
    ("/run/lxd/*", "LXD starts containers"),
    (
        "/var/snap/lxd/common/lxd/unix.socket",
        "LXD starts containers",
    ),
];

/// Sockets a scope keeps under the refusing unix default: servers that only take logs or only
/// answer local lookups, with nothing to run and nothing outside the host to reach. Whole names
/// only: an allowed prefix would also allow `PREFIX/../any/socket` (the hook reads the name
/// before the kernel resolves it). Deliberately left out (their clients fall back when the
/// connect fails): nscd (`/run/nscd/socket`) and systemd-resolved's
/// `/run/systemd/resolve/io.systemd.Resolve` answer host names past guard's resolver (a name
/// it refuses, or data carried out in query names); glibc then looks names up itself, through
/// guard's resolver.
pub const BUILTIN_ALLOWED: &[(&str, &str)] = &[
    ("/dev/log", "syslog: takes log lines"),
    (
        "/run/systemd/journal/socket",
        "the journal: takes log lines",
    ),
    (
        "/run/systemd/journal/stdout",
        "the journal: takes a service's output",
    ),
    (
        "/run/systemd/journal/dev-log",
        "the journal's syslog socket: takes log lines",
    ),
    (
        "/run/systemd/userdb/io.systemd.Multiplexer",
        "systemd-userdbd: answers user and group lookups (getpwnam through nss-systemd)",
    ),
    (
        "/run/systemd/userdb/io.systemd.NameServiceSwitch",
        "systemd-userdbd: answers user and group lookups from NSS",
    ),
    (
        "/run/systemd/userdb/io.systemd.DynamicUser",
        "systemd: answers lookups of services' dynamic users",
    ),
    (
        "/run/systemd/userdb/io.systemd.Home",
        "systemd-homed: answers user lookups (managing homes is on D-Bus, refused)",
    ),
    (
        "/run/systemd/userdb/io.systemd.Machine",
        "systemd-machined: answers user lookups for containers' users",
    ),
];

/// A unix socket address a rule names, as the kernel reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnixSocket {
    /// The address's bytes: a pathname without its NUL, an abstract name with its leading NUL.
    pub bytes: Vec<u8>,
    /// A prefix (written with a trailing `*`): every address that starts with `bytes`.
    pub prefix: bool,
}

impl UnixSocket {
    /// `/path`, `/path*`, `@name`, `@name*`. An error says what is wrong and how to write it.
    pub fn parse(raw: &str) -> Result<UnixSocket, String> {
        let (body, prefix) = match raw.strip_suffix('*') {
            Some(body) => (body, true),
            None => (raw, false),
        };
        if body.contains('*') {
            return Err(format!(
                "{raw:?}: `*` may only end a socket name (a prefix, like \"/tmp/tmux-*\")"
            ));
        }
        let bytes = if let Some(name) = body.strip_prefix('@') {
            if name.is_empty() && !prefix {
                return Err(format!(
                    "{raw:?}: an abstract name needs a name after `@` (or `@*` for every one)"
                ));
            }
            let mut bytes = vec![0];
            bytes.extend_from_slice(name.as_bytes());
            bytes
        } else if body.starts_with('/') {
            if body.contains('\0') {
                return Err(format!("{raw:?}: a path cannot hold a NUL byte"));
            }
            body.as_bytes().to_vec()
        } else {
            return Err(format!(
                "{raw:?}: name a socket by its absolute path (\"/run/docker.sock\") or an \
                 abstract name with a leading @ (\"@/tmp/.X11-unix/X0\")"
            ));
        };
        if bytes.len() > MAX_ADDRESS_LEN {
            return Err(format!(
                "{raw:?}: {} bytes, more than the {MAX_ADDRESS_LEN} a unix socket address holds",
                bytes.len()
            ));
        }
        Ok(UnixSocket { bytes, prefix })
    }

    /// Whether it names `address` (bytes as the kernel reads them).
    pub fn matches(&self, address: &[u8]) -> bool {
        if self.prefix {
            address.starts_with(&self.bytes)
        } else {
            address == self.bytes.as_slice()
        }
    }

    /// How specific a match is: a whole name beats every prefix, a longer prefix a shorter one.
    fn specificity(&self) -> usize {
        if self.prefix {
            self.bytes.len()
        } else {
            usize::MAX
        }
    }
}

impl fmt::Display for UnixSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&address_text(&self.bytes))?;
        if self.prefix {
            f.write_str("*")?;
        }
        Ok(())
    }
}

/// An address as a person reads it: a pathname as is, an abstract name with `@` for its NUL
/// (and `\0` for any other NUL in it).
pub fn address_text(bytes: &[u8]) -> String {
    match bytes.split_first() {
        Some((0, name)) => format!("@{}", String::from_utf8_lossy(name).replace('\0', "\\0")),
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// `unix_rule(socket, decision, justification=None)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnixRule {
    /// Position among the policy's unix rules, in load order.
    pub id: RuleId,
    pub socket: UnixSocket,
    pub decision: Decision,
    pub justification: Option<String>,
    pub origin: Option<RuleOrigin>,
}

impl UnixRule {
    /// How [`decide`] orders the rules that match one address (the greatest decides): the more
    /// specific name, then a policy's rule over a built-in entry, then the stronger decision.
    pub fn rank(&self) -> (usize, bool, Decision) {
        (self.socket.specificity(), !self.is_builtin(), self.decision)
    }

    /// Whether it is an entry of the built-in lists.
    pub fn is_builtin(&self) -> bool {
        self.origin
            .as_ref()
            .is_some_and(|origin| &*origin.file == BUILTIN_ORIGIN)
    }
}

/// The built-in entries as rules: refused servers first, then logging sockets; `{uid}` in a
/// pattern once for each of `user_ids` (see [`session_user_ids`]). Each keeps the line of its
/// entry in the list.
pub fn builtin_rules(user_ids: &[String]) -> Vec<UnixRule> {
    let refused = BUILTIN_REFUSED
        .iter()
        .map(|entry| (entry, Decision::Forbidden));
    let allowed = BUILTIN_ALLOWED.iter().map(|entry| (entry, Decision::Allow));
    let mut rules = Vec::new();
    for (line, ((pattern, why), decision)) in refused.chain(allowed).enumerate() {
        let patterns: Vec<String> = if pattern.contains("{uid}") {
            user_ids
                .iter()
                .map(|uid| pattern.replace("{uid}", uid))
                .collect()
        } else {
            vec![(*pattern).to_string()]
        };
        for pattern in patterns {
            let Ok(socket) = UnixSocket::parse(&pattern) else {
                continue;
            };
            rules.push(UnixRule {
                id: RuleId(rules.len() as u32),
                socket,
                decision,
                justification: Some((*why).to_string()),
                origin: Some(RuleOrigin {
                    file: BUILTIN_ORIGIN.into(),
                    line: line + 1,
                }),
            });
        }
    }
    rules
}

/// [`builtin_rules`] with only the allowed entries whose socket is there now (`present`, given
/// the path: [`is_socket`] on the host): an allowed name with nothing behind it could be made
/// by a process in the scope, as a symlink to a refused server, before its own server starts.
pub fn builtin_rules_present(user_ids: &[String], present: impl Fn(&str) -> bool) -> Vec<UnixRule> {
    builtin_rules(user_ids)
        .into_iter()
        .filter(|rule| {
            rule.decision != Decision::Allow || present(&address_text(&rule.socket.bytes))
        })
        .collect()
}

/// Whether `path` reaches a unix socket (symlinks followed, as a connect follows them).
pub fn is_socket(path: &str) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// The users with a session folder in `/run/user` now (their uids, as the folders are named).
pub fn session_user_ids() -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir("/run/user")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// What decides a connect or send to `address`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnixVerdict<'a> {
    /// The most specific rule that names it (built-in or the policy's).
    Rule(&'a UnixRule),
    /// A relative path: refused, since no rule can name it.
    Relative,
    /// Nothing names it: the policy's `unmatched_unix` default.
    Unmatched(Decision),
}

impl UnixVerdict<'_> {
    pub fn decision(&self) -> Decision {
        match self {
            UnixVerdict::Rule(rule) => rule.decision,
            UnixVerdict::Relative => Decision::Forbidden,
            UnixVerdict::Unmatched(decision) => *decision,
        }
    }
}

/// The verdict for `address` under `rules` (built-ins first, then the policy's, in load order)
/// and the unmatched default.
pub fn decide<'a>(rules: &'a [UnixRule], unmatched: Decision, address: &[u8]) -> UnixVerdict<'a> {
    let best = rules
        .iter()
        .filter(|rule| rule.socket.matches(address))
        .max_by_key(|rule| rule.rank());
    match best {
        Some(rule) => UnixVerdict::Rule(rule),
        None if matches!(address.first(), Some(b'/') | Some(0)) => {
            UnixVerdict::Unmatched(unmatched)
        }
        None => UnixVerdict::Relative,
    }
}

/// The address a person wrote (`/run/x.sock`, `@name`), as the kernel reads it.
pub fn parse_address(raw: &str) -> Vec<u8> {
    match raw.strip_prefix('@') {
        Some(name) => {
            let mut bytes = vec![0];
            bytes.extend_from_slice(name.as_bytes());
            bytes
        }
        None => raw.as_bytes().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(socket: &str, decision: Decision) -> UnixRule {
        UnixRule {
            id: RuleId(0),
            socket: UnixSocket::parse(socket).unwrap(),
            decision,
            justification: None,
            origin: None,
        }
    }

    #[test]
    fn names_parse_as_the_kernel_reads_them() {
        let path = UnixSocket::parse("/run/docker.sock").unwrap();
        assert_eq!(path.bytes, b"/run/docker.sock");
        assert!(!path.prefix);
        let abstract_prefix = UnixSocket::parse("@/tmp/.X11-unix/*").unwrap();
        assert_eq!(abstract_prefix.bytes, b"\0/tmp/.X11-unix/");
        assert!(abstract_prefix.prefix);
        assert_eq!(abstract_prefix.to_string(), "@/tmp/.X11-unix/*");
        for bad in [
            "docker.sock",
            "./x",
            "/a*b",
            "@",
            "",
            &format!("/{}", "x".repeat(108)),
        ] {
            assert!(UnixSocket::parse(bad).is_err(), "{bad:?}");
        }
        assert!(UnixSocket::parse(&format!("/{}", "x".repeat(107))).is_ok());
    }

    #[test]
    fn the_most_specific_match_decides_and_the_stronger_rule_wins_a_tie() {
        let mut rules = builtin_rules(&["1000".to_string()]);
        rules.push(rule("/tmp/*", Decision::Allow));
        rules.push(rule("/tmp/tmux-0/work", Decision::Allow));
        rules.push(rule("/srv/a.sock", Decision::Allow));
        rules.push(rule("/srv/a.sock", Decision::Prompt));
        let decide = |address: &str| decide(&rules, Decision::Allow, &parse_address(address));
        // The built-in prefix is longer than the policy's /tmp/*.
        assert_eq!(
            decide("/tmp/tmux-0/default").decision(),
            Decision::Forbidden
        );
        assert_eq!(decide("/tmp/tmux-0/work").decision(), Decision::Allow);
        assert_eq!(decide("/tmp/other.sock").decision(), Decision::Allow);
        assert_eq!(decide("/srv/a.sock").decision(), Decision::Prompt);
        assert_eq!(decide("/run/docker.sock").decision(), Decision::Forbidden);
        assert_eq!(decide("/run/user/1000/bus").decision(), Decision::Forbidden);
        assert_eq!(
            decide("/run/user/1000/gnupg/S.gpg-agent"),
            UnixVerdict::Unmatched(Decision::Allow)
        );
        assert_eq!(
            decide("/run/docker.sock2"),
            UnixVerdict::Unmatched(Decision::Allow)
        );
        assert_eq!(decide("@anything"), UnixVerdict::Unmatched(Decision::Allow));
        assert_eq!(decide("docker.sock"), UnixVerdict::Relative);
    }

    #[test]
    fn an_allowed_builtin_socket_that_is_not_there_is_left_out() {
        let present = |path: &str| path == "/dev/log";
        let rules = builtin_rules_present(&[], present);
        assert_eq!(
            decide(&rules, Decision::Forbidden, b"/dev/log").decision(),
            Decision::Allow
        );
        assert_eq!(
            decide(&rules, Decision::Forbidden, b"/run/systemd/journal/socket"),
            UnixVerdict::Unmatched(Decision::Forbidden)
        );
        // The refused entries stay whatever is there.
        assert_eq!(
            decide(&rules, Decision::Allow, b"/run/docker.sock").decision(),
            Decision::Forbidden
        );
    }

    #[test]
    fn allowed_builtins_are_whole_names() {
        // A prefix allow would also allow `PREFIX/../any/socket`.
        for rule in builtin_rules(&[]) {
            if rule.decision == Decision::Allow {
                assert!(!rule.socket.prefix, "{}", rule.socket);
            }
        }
    }

    #[test]
    fn logging_sockets_stay_open_under_a_refusing_default() {
        let rules = builtin_rules(&[]);
        let verdict = decide(&rules, Decision::Forbidden, b"/dev/log");
        assert_eq!(verdict.decision(), Decision::Allow);
        let verdict = decide(&rules, Decision::Forbidden, b"/run/other.sock");
        assert_eq!(verdict, UnixVerdict::Unmatched(Decision::Forbidden));
    }
}
