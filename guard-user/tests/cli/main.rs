//! guard's host CLI tests, one binary for the tier (as aya and ripgrep do): the `guard` binary
//! run as a real process in a temporary folder, no kernel and no root needed. Each module is one
//! area (`cargo test -p guard-user --test cli legacy_cli::` runs one); `common` is what they
//! share, and each module adds the helpers of its own subcommands to `common::Sandbox` in `impl`
//! blocks. `module_graph` checks the library's layering.
//!
//! The tests run in parallel across modules: none changes the process environment or working
//! folder (each run of the binary gets its own folder and environment through `common`).

mod common;

mod authz_cli;
mod cli;
mod execpolicy_cli;
mod hook_cli;
mod json_schema;
mod legacy_cli;
mod module_graph;
mod replay_cli;
mod rule_set_cli;
