//! Helpers several modules of this binary share that only a test target can have: the paths of
//! `guard-tests`' helper bins (`env!("CARGO_BIN_EXE_...")` exists for tests, not for the
//! library), and checks written against them. The rest are in the `guard_tests` library.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use guard_tests::daemon::{TestDaemon, can_run, text};
use guard_tests::kernel::{helper, piped_output, skip, starting};

/// `net-probe`: connects, sends and makes sockets as told, and says what the kernel answered.
pub fn net_probe() -> PathBuf {
    helper("net-probe", env!("CARGO_BIN_EXE_net-probe"))
}

/// `dns-probe`: asks a name server and connects to the answer.
pub fn dns_probe() -> PathBuf {
    helper("dns-probe", env!("CARGO_BIN_EXE_dns-probe"))
}

/// `exec-anon`: execs a memfd or a deleted file.
pub fn exec_anon() -> PathBuf {
    helper("exec-anon", env!("CARGO_BIN_EXE_exec-anon"))
}

/// `scope-escape`: tries the ways out of a scope no exec or connect hook sees.
pub fn scope_escape() -> PathBuf {
    helper("scope-escape", env!("CARGO_BIN_EXE_scope-escape"))
}

/// guard's programs on the `lsm` backend's hooks, in the order the Enforcer attaches them: what
/// the tests expect loaded and pinned (written here, not read from the loader they check).
pub const LSM_HOOKS: &[&str] = &[
    "bprm_check_security",
    "socket_connect",
    "socket_sendmsg",
    "file_open",
    "path_mkdir",
    "path_unlink",
    "path_rmdir",
    "path_rename",
    "path_truncate",
];

/// `guard run -- net-probe ARGS...` under the daemon: (exit code, stdout, stderr).
pub fn run_probe(daemon: &TestDaemon, args: &[&str]) -> (i32, String, String) {
    daemon.run_in_scope(&net_probe(), args)
}

pub fn stderr(output: &Output) -> String {
    text(&output.stderr)
}

/// The command ran and succeeded.
pub fn assert_ran(what: &str, result: io::Result<Output>) {
    match result {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "{what}: expected it to run, got {} (stderr: {})",
            output.status,
            stderr(&output)
        ),
        Err(err) => panic!("{what}: expected it to run, the exec failed: {err}"),
    }
}

pub fn assert_exists(path: &Path, why: &str) {
    assert!(path.exists(), "{} does not exist: {why}", path.display());
}

pub fn assert_absent(path: &Path, why: &str) {
    assert!(!path.exists(), "{} exists: {why}", path.display());
}

/// `parent/name`, made.
pub fn fresh_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    dir
}

/// Whether the `guard run` write-confinement tests (`landlock`, `writes`) can run: root, the
/// guard binary, and a kernel with Landlock.
pub fn landlock_or_skip() -> bool {
    if !can_run() {
        return false;
    }
    match guard::confine::landlock::abi() {
        Ok(abi) if abi >= 1 => true,
        Ok(abi) => {
            skip(&format!("this kernel answers Landlock ABI {abi}"));
            false
        }
        Err(err) => {
            skip(&format!(
                "no Landlock here: {}",
                guard::confine::landlock::absent_because(&err)
            ));
            false
        }
    }
}

/// Runs a `guard run` command (stdin closed, output collected), at most `timeout`, as a start
/// ([`starting`]: it removes abandoned scopes).
pub fn run_guard(command: &mut Command, timeout: Duration) -> Output {
    let _starting = starting();
    piped_output(command, timeout)
}

pub fn describe(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    )
}

/// A `sh -c` line that reports whether `command` succeeded (`NAME=ok` or `NAME=refused`), so one
/// run checks several writes.
pub fn step(name: &str, command: &str) -> String {
    format!("if {command}; then echo {name}=ok; else echo {name}=refused; fi; ")
}
