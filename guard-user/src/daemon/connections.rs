//! How many control-socket connections one user may hold open at once. Any local user may
//! connect (the socket is 0666 without `socket_group`), so one user's many connections must not
//! take the daemon's tasks and memory from everyone else. root's are not counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Connections one user other than root may hold open at once: each `guard run` holds one for
/// its whole life (its stream; its hold's is closed once handed over), each `guard watch` one.
pub const PER_USER: usize = 64;

/// How long a new connection may take to send its first request before it is closed. Long:
/// a `guard run` opens its hold's connection before its `run` request, whose answer waits for
/// an overlay's programs to load (seconds; more under emulation).
pub const FIRST_REQUEST: Duration = Duration::from_secs(120);

/// The connections open, by user.
#[derive(Clone, Default)]
pub struct Connections {
    open: Arc<Mutex<HashMap<u32, usize>>>,
}

/// One admitted connection: its user's count goes down when it is dropped.
pub struct Admitted {
    connections: Connections,
    uid: u32,
}

impl Connections {
    /// A connection of `uid`, unless that user holds [`PER_USER`] already.
    pub fn admit(&self, uid: u32) -> Option<Admitted> {
        if uid != 0 {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let count = open.entry(uid).or_default();
            if *count >= PER_USER {
                return None;
            }
            *count += 1;
        }
        Some(Admitted {
            connections: self.clone(),
            uid,
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if self.uid == 0 {
            return;
        }
        let mut open = self
            .connections
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.uid) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.uid);
            }
        }
    }
}

/// The refusal a connection past [`PER_USER`] gets before it is closed.
pub fn refusal(uid: u32) -> String {
    format!(
        "uid {uid} holds {PER_USER} connections to the daemon already, its most: end some of its \
         runs or watches first"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_past_the_limit_is_refused_until_one_of_theirs_closes_and_root_is_not_counted() {
        let connections = Connections::default();
        let held: Vec<Admitted> = (0..PER_USER)
            .map(|_| connections.admit(1000).expect("within the limit"))
            .collect();
        assert!(connections.admit(1000).is_none(), "past the limit");
        assert!(
            connections.admit(1001).is_some(),
            "another user is not held up"
        );
        let roots: Vec<Admitted> = (0..PER_USER + 1)
            .map(|_| connections.admit(0).expect("root is not counted"))
            .collect();
        drop(roots);
        let mut held = held;
        held.pop();
        assert!(
            connections.admit(1000).is_some(),
            "one closed: one more fits"
        );
    }
}
