//! The signals that would end `guard run` (Ctrl-C, a closed terminal, `kill`, `timeout`) no
//! longer do: guard stays until the command is gone, so nothing of the scope runs on without the
//! run that answers its asks.
//!
//! - A signal the terminal sent (`si_code` `SI_KERNEL`: Ctrl-C, Ctrl-\, a hang-up) went to the
//!   whole foreground process group, the command included: the command decides what it means
//!   (a REPL goes on after Ctrl-C), and guard goes on with it.
//! - A signal a process sent to guard (`kill`, `timeout`, a service manager) is passed on to the
//!   command. A command that does not end within [`GRACE`] of it (it ignores it), or a second
//!   such signal, ends the scope: every process in it is killed (`cgroup.kill`).
//!
//! The handler only notes the signal in an atomic; the run's loop, which polls anyway, acts.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// How long a command has to end after a signal was passed on.
pub const GRACE: Duration = Duration::from_secs(5);

/// The signals passed on.
pub const PASSED_ON: [libc::c_int; 4] = [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGQUIT];

/// The last signal a process sent (0: none since the last look); the terminal's are not kept.
static ARRIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let code = unsafe { (*info).si_code };
    if code != libc::SI_KERNEL {
        ARRIVED.store(signal, Ordering::SeqCst);
    }
}

/// Catches [`PASSED_ON`] from now on (the command gets the default handling back at its exec).
pub fn catch() -> std::io::Result<()> {
    for signal in PASSED_ON {
        // SAFETY: a zeroed sigaction with a handler that only stores to atomics.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// What the run does about the signals so far.
#[derive(Debug, Default)]
pub struct PassOn {
    /// When the first signal was passed on, and which.
    first: Option<(Instant, libc::c_int)>,
}

/// What the loop should do now.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    Wait,
    /// End the scope now: the command outlived its grace after this signal.
    Outlived(libc::c_int),
    /// End the scope now: a second signal came.
    Again(libc::c_int),
}

impl PassOn {
    /// Passes a signal a process sent on to `child` and says whether it is time to end the
    /// scope.
    pub fn step(&mut self, child: u32) -> Next {
        let signal = ARRIVED.swap(0, Ordering::SeqCst);
        if signal != 0 {
            if self.first.is_some() {
                return Next::Again(signal);
            }
            // SAFETY: sending a signal to the command guard started (not yet reaped).
            unsafe { libc::kill(child as libc::pid_t, signal) };
            self.first = Some((Instant::now(), signal));
        }
        match self.first {
            Some((at, signal)) if at.elapsed() >= GRACE => Next::Outlived(signal),
            _ => Next::Wait,
        }
    }
}

impl Next {
    /// Why the scope ends, for the line that says so; `None` for [`Next::Wait`].
    pub fn ending(&self) -> Option<String> {
        let name = |signal: libc::c_int| {
            nix::sys::signal::Signal::try_from(signal)
                .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string())
        };
        match self {
            Next::Wait => None,
            Next::Outlived(signal) => Some(format!(
                "it did not end within {}s of {}",
                GRACE.as_secs(),
                name(*signal)
            )),
            Next::Again(signal) => Some(format!("a second signal ({}) arrived", name(*signal))),
        }
    }
}
