//! The Codex CLI tier, one binary: guard against the real `codex` binary (`@openai/codex` from
//! the npm registry, pinned and cached; see `install`). `codex_cli` compares `execpolicy check`
//! on thousands of generated commands, `codex_amend` the amendment lines each tool appends;
//! `generate`, `install` and `run` are what they share.
//!
//! A binary of its own, apart from the host CLI tier (`tests/cli/`): `codex_cli` moves this
//! process into its working folder (guard's in-process check resolves `./git` and the policies'
//! relative names from there, as both tools' processes do), which no other test may share.

mod generate;
mod install;
mod run;

mod codex_amend;
mod codex_cli;
