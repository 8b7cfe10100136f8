//! guard's privileged integration tests, one binary for the tier (as aya and ripgrep do): they
//! load guard's programs into the real kernel, start daemons and `guard run`s, and need root
//! (without it each test prints `skipped: ...`, and fails when CI=true). Each module is one area;
//! `cargo test -p guard-tests --test kernel kernel_net::` runs one, and `cargo xtask vm-test
//! --test kernel_net` runs it in the VM (xtask/src/vm.rs). The helpers the modules share are in
//! the `guard_tests` library (`tests/src/`).
//!
//! The modules' tests run in parallel with each other. What a test touches beyond its own temp
//! folder, cgroup and ports is shared: a test that leaves a `guard run`'s scope abandoned and
//! checks who removes it holds [`guard_tests::kernel::no_other_starts`] (every session, daemon
//! and `guard run` start removes abandoned scopes), and a test that sets an environment
//! variable runs alone in a child process ([`guard_tests::alone_in_a_child`]).

mod common;

mod audit;
mod audit_otlp;
mod audit_syslog;
mod console;
mod daemon;
mod daemon_hold;
mod daemon_metrics;
mod daemon_overlay;
mod daemon_patterns;
mod daemon_unit;
mod dns;
mod guard_itself;
mod kept_programs;
mod kernel_approvals;
mod kernel_escapes;
mod kernel_exec;
mod kernel_files;
mod kernel_net;
mod kernel_patterns;
mod kernel_pins;
mod kernel_unix;
mod kubernetes;
mod landlock;
mod layers;
mod loading;
mod parity;
mod resolver;
mod resolver_refresh;
mod run_approval;
mod run_fds;
mod run_hold;
mod run_sandbox;
mod writes;
