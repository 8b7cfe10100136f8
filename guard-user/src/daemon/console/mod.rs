//! `guard console`: the approval console, a local web page the daemon serves (`[console]
//! listen`). Who uses it is decided as on the control socket: `guard console`, run by a person,
//! asks the daemon over the socket (peer credentials) for a one-time login link bound to that
//! person ([`Logins::mint`]); the link, opened once within [`LINK_TTL`], becomes a session
//! cookie; every request of the page then goes through the daemon's loop as that person, with
//! the membership of the process that actually holds the browser's connection
//! (`http.rs`), so the page may do what that person may do from outside a guard scope and
//! nothing else.

pub mod http;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a login link may wait to be opened.
pub const LINK_TTL: Duration = Duration::from_secs(120);
/// How long a session lasts without being used.
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// Sessions and links held at once at most (the oldest go first).
const MAX_HELD: usize = 256;

/// The person a link or session is for: their user and group ids, as the kernel named them
/// on the control socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsoleUser {
    pub uid: u32,
    pub gid: u32,
}

/// The links not yet opened and the sessions they became.
#[derive(Default)]
pub struct Logins {
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    links: HashMap<String, (ConsoleUser, Instant)>,
    sessions: HashMap<String, (ConsoleUser, Instant)>,
}

impl Logins {
    /// A new one-time link token for `user`.
    pub fn mint(&self, user: ConsoleUser) -> std::io::Result<String> {
        let token = random_token()?;
        let mut held = self.lock();
        let now = Instant::now();
        held.links
            .retain(|_, (_, made)| now.duration_since(*made) < LINK_TTL);
        bound(&mut held.links);
        held.links.insert(token.clone(), (user, now));
        Ok(token)
    }

    /// Opens a link: its token is spent, and a new session id comes back (`None`: no such
    /// link, already opened, or too old).
    pub fn open(&self, token: &str) -> Option<(String, ConsoleUser)> {
        let mut held = self.lock();
        let (user, made) = held.links.remove(token)?;
        if made.elapsed() >= LINK_TTL {
            return None;
        }
        let session = random_token().ok()?;
        let now = Instant::now();
        held.sessions
            .retain(|_, (_, used)| now.duration_since(*used) < SESSION_IDLE);
        bound(&mut held.sessions);
        held.sessions.insert(session.clone(), (user, now));
        Some((session, user))
    }

    /// The person a session is for (and it counts as used now).
    pub fn session(&self, id: &str) -> Option<ConsoleUser> {
        let mut held = self.lock();
        let (user, used) = held.sessions.get_mut(id)?;
        if used.elapsed() >= SESSION_IDLE {
            held.sessions.remove(id);
            return None;
        }
        *used = Instant::now();
        Some(*user)
    }

    /// Ends a session (the page's "sign out").
    pub fn end(&self, id: &str) {
        self.lock().sessions.remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // A panic while holding it leaves plain maps behind: still usable.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Drops the oldest entries past [`MAX_HELD`].
fn bound(map: &mut HashMap<String, (ConsoleUser, Instant)>) {
    while map.len() >= MAX_HELD {
        let Some(oldest) = map
            .iter()
            .min_by_key(|(_, (_, at))| *at)
            .map(|(key, _)| key.clone())
        else {
            return;
        };
        map.remove(&oldest);
    }
}

/// 32 random bytes from the kernel, as hex.
fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: the pointer and length name the unfilled rest of `bytes`.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        filled += n as usize;
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_opens_once_into_a_session_for_its_person() {
        let logins = Logins::default();
        let alice = ConsoleUser {
            uid: 1000,
            gid: 1000,
        };
        let token = logins.mint(alice).unwrap();
        assert_eq!(token.len(), 64);
        let (session, user) = logins.open(&token).unwrap();
        assert_eq!(user, alice);
        assert!(logins.open(&token).is_none(), "a link opens once");
        assert_eq!(logins.session(&session), Some(alice));
        assert!(logins.session(&token).is_none(), "a token is no session");
        logins.end(&session);
        assert!(logins.session(&session).is_none());
        assert!(logins.open("00").is_none());
    }
}
