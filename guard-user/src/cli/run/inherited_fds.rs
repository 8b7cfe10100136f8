//! What `guard run` passes on to the command: stdin, stdout and stderr, plus `--preserve-fds N`
//! more (3..3+N, as systemd-run and podman name it). Every other descriptor inherited from
//! `guard run`'s caller is marked close-on-exec in the child before the command's exec: a socket
//! made outside the scope was never decided by any hook, so it must not reach the command.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Marks every descriptor from `3 + preserve` up close-on-exec in the child, between fork and
/// exec. Close-on-exec rather than closed, so descriptors the other pre-exec steps still use
/// (the Landlock ruleset) work until the exec.
pub fn pass_only_std_fds(command: &mut Command, preserve: u32) {
    let first = 3u32.saturating_add(preserve);
    // SAFETY: the closure makes one raw syscall and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::close_range(first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}
