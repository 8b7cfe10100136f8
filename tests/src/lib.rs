//! Shared helpers for guard's integration tests (the tests themselves live in `tests/`).
pub mod browser;
pub mod daemon;
pub mod dns;
pub mod k8s;
pub mod kernel;
pub mod kubelet;
pub mod npm;
pub mod otlp;
pub mod prometheus;
pub mod rsyslog;
pub mod sockets;
pub mod unit;

/// For a test that must change what every thread of the test binary shares (an environment
/// variable, which each process another test spawns meanwhile inherits): runs the test `name`
/// (as `module_path!()` and the function name give it) again in a child process of this
/// binary, alone, and panics unless it passed there. Returns `true` in that child, where the
/// test then does its work; `false` in the parent, which has nothing more to do.
pub fn alone_in_a_child(name: &str) -> bool {
    const CHILD_ENV: &str = "GUARD_TESTS_ALONE";
    // The harness names tests without the binary's crate: `loading::x`, not `kernel::loading::x`.
    let name = name.split_once("::").map_or(name, |(_, rest)| rest);
    if std::env::var_os(CHILD_ENV).is_some_and(|running| running == name) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = std::process::Command::new(&exe)
        .args([name, "--exact", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("running {} {name}: {err}", exe.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Indented: the child's `test result:` line is not one of this run's (xtask adds them up).
    let told = |text: &str| {
        text.lines()
            .map(|line| format!("  | {line}\n"))
            .collect::<String>()
    };
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{name} alone in a child process: {}\n{}{}",
        output.status,
        told(&stdout),
        told(&String::from_utf8_lossy(&output.stderr))
    );
    false
}
