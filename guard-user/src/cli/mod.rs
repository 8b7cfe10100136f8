//! The `guard` command line: argument parsing and dispatch. Each subcommand family has its own
//! module; they share the rules-loading flags and the way errors are shown.

// The verbs, grouped by what each drives: the rules files alone, a run of one command in the
// kernel, the host service (and its clients), the Kubernetes node agent.
mod daemon;
mod logging;
mod node;
mod output;
pub mod rules;
mod run;

use daemon::{audit, console, control};
pub use rules::execpolicy;
use rules::{amend, authz, check, hook, legacy, policy, replay};
pub use run::asks::RUN_SOCKETS;
use run::doctor;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::policy::load::{LoadedPolicy, load_policy};

const ABOUT: &str = "guard: a kernel-enforced approval policy for the programs you run.

People write which programs may run and which hosts may be reached in `.rules` files (the Codex
CLI's format). guard evaluates commands against them, explains every decision, appends
approvals as amendment lines, and holds the policy in the kernel for the commands it runs
(`guard run`: BPF programs decide every exec and connect).";

const AFTER_HELP: &str = "Examples:
  guard check --rules my.rules -- git push origin main
  guard check --json --fallback heuristics --split-shell -- bash -lc 'ls && rm -rf build'
  guard execpolicy check --rules ~/.codex/rules/default.rules git push   # the Codex CLI's JSON
  sudo guard run --rules my.rules -- make deploy
  sudo guard doctor
  guard policy validate ~/.config/guard/rules
  guard hook claude-code --rules my.rules < call.json   # a Claude Code PreToolUse hook
  guard allow-prefix --rules-file ~/.config/guard/rules/default.rules -- cargo test
  guard allow-host api.github.com --protocol https --rules-file ~/.config/guard/rules/default.rules

With the daemon (`sudo systemctl start guard`, or `sudo guard daemon`):
  guard run -- make deploy                 # in a fresh scope of the daemon
  guard prompts --watch                    # answer asks with one key
  guard approve 3 --always                 # or --once, --session; guard deny 3 [--always]
  guard allow-host api.github.com --protocol https   # appended and enforced at once
  guard status; guard reload
  guard audit --follow --decision forbidden        # the audit log, live
  guard audit --since 2h --json                    # JSON lines, as logged
  guard replay --rules draft.rules /var/log/guard/audit.jsonl   # what a draft would change

Exit status: 0 when the command ran (whatever the decision), 2 on a policy or usage error;
`guard run` exits with the status of the command it ran; `guard authz check` exits 1 on deny;
`guard hook claude-code` exits 1 on input it cannot read (Claude Code goes on without it);
the daemon's clients exit 3 when the daemon refuses the request, 4 when no daemon answers.";

/// `guard --version`: the release and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("GUARD_COMMIT"),
    ")"
);

#[derive(Parser, Debug)]
#[command(name = "guard", version = VERSION, about = ABOUT, after_help = AFTER_HELP)]
struct Cli {
    /// More detail: `guard run`'s notes and counters, and guard's log at debug (-vv: the
    /// libraries' too). `GUARD_LOG` (an env-filter such as `guard=debug`) overrides the log's.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Less: only errors in guard's log (-qq: none).
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    quiet: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Evaluate a command against the policy and explain the decision.
    Check(check::CheckArgs),
    /// The Codex CLI's `execpolicy check`: its arguments, JSON, errors and exit codes.
    #[command(subcommand)]
    Execpolicy(execpolicy::ExecPolicyCommand),
    /// Agent hooks: decide an agent's proposed commands with the policy before they run.
    #[command(subcommand)]
    Hook(hook::HookCommand),
    /// Validate, show and classify policies.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Decide control-socket requests against an authorization policy; print the built-in one.
    #[command(subcommand)]
    Authz(authz::AuthzCommand),
    /// Append an "always allow" prefix rule to a rules file, or through the daemon.
    AllowPrefix(amend::AllowPrefixArgs),
    /// Append `network_rule(host=HOST, decision="allow")` to a rules file, or through the daemon.
    AllowHost(amend::HostArgs),
    /// Append `network_rule(host=HOST, decision="prompt")` to a rules file, or through the daemon.
    AskHost(amend::HostArgs),
    /// Append `network_rule(host=HOST, decision="deny")` to a rules file, or through the daemon.
    DenyHost(amend::HostArgs),
    /// Run a command under the policy, enforced by the kernel, in a fresh scope (root).
    Run(run::RunArgs),
    /// Say which enforcement backend this kernel allows, and why the other is refused.
    Doctor(doctor::DoctorArgs),
    /// The host service: enforce the policy on its scopes, answer on the control socket (root).
    Daemon(daemon::DaemonArgs),
    /// The Kubernetes node agent: GuardPolicies held on this node's pods (root; a DaemonSet).
    Node(node::NodeArgs),
    /// List the daemon's pending asks, or answer them as they arrive (--watch).
    Prompts(control::PromptsArgs),
    /// Approve an ask: once, for the session, or always (an amendment line).
    Approve(control::ApproveArgs),
    /// Deny an ask; --always also appends a deny rule.
    Deny(control::DenyArgs),
    /// Sign in to the daemon's approval page in a browser (a one-time link for you).
    Console(console::ConsoleArgs),
    /// Make the daemon re-read its policy (a policy that fails to load keeps the old one).
    Reload(control::ReloadArgs),
    /// The daemon's backend, scopes, rules, addresses, asks, counters and uptime.
    Status(control::StatusArgs),
    /// The audit records you may read: filtered, followed live, as text or JSON lines.
    Audit(audit::AuditArgs),
    /// What a draft policy would change for the execs and connections an audit log recorded.
    Replay(replay::ReplayArgs),
    /// Break glass: detach the programs a stopped daemon left pinned.
    Release(daemon::ReleaseArgs),
    /// The legacy engine: classify an exec with a define_program policy (docs/policy-language.md §8).
    #[command(subcommand)]
    Legacy(legacy::LegacyCommand),
    /// Print a shell completion script: `guard completions bash > /etc/bash_completion.d/guard`.
    Completions(CompletionsArgs),
    /// Print the man page of guard or of one subcommand (roff): `guard man run | man -l -`.
    Man(ManArgs),
    /// The daemon's child that evaluates a run's overlay within bounds (not for people).
    #[command(name = "__eval-overlay", hide = true)]
    EvalOverlay,
}

#[derive(Args, Debug)]
struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
struct ManArgs {
    /// A subcommand (`run`, `policy`, ...); none: guard's own page.
    subcommand: Option<String>,
}

/// Where the policy comes from; shared by every subcommand that reads one.
#[derive(Args, Debug, Clone, Default)]
pub struct RulesArgs {
    /// A rules file, or a folder whose `*.rules` files are read in path order (symlinks are
    /// skipped). Repeat to read several, in the order given, as one policy. Default:
    /// /etc/guard/rules, else the embedded default policy.
    #[arg(long = "rules", value_name = "PATH")]
    pub rules: Vec<PathBuf>,
    /// Rules parsed on their own and merged on top (managed rules a user cannot weaken). With
    /// `guard run --socket S`, they tighten the daemon's policy for that run alone: both are
    /// held in the kernel and the stronger decision wins, so they can forbid or prompt more,
    /// never allow more.
    #[arg(long = "overlay", value_name = "PATH")]
    pub overlays: Vec<PathBuf>,
    /// Accept --rules paths that hold no `*.rules` or `*.policy` file: an empty policy, which
    /// decides nothing (every command and connection goes by the unmatched defaults).
    #[arg(long)]
    pub allow_empty_policy: bool,
}

impl RulesArgs {
    /// Loads the policy, or prints the error (`PATH:LINE: MESSAGE` first) and gives exit 2.
    /// Files in the rules folders that look like rules but are skipped get a warning; explicit
    /// --rules that hold no file at all are refused unless --allow-empty-policy.
    pub fn load(&self) -> Result<LoadedPolicy, ExitCode> {
        let loaded =
            load_policy(&self.rules, &self.overlays).map_err(|err| output::policy_error(&err))?;
        for skipped in &loaded.skipped {
            anstream::eprintln!("guard: warning: {skipped}");
        }
        if !self.rules.is_empty() && loaded.sources.is_empty() && !self.allow_empty_policy {
            let paths: Vec<String> = self.rules.iter().map(|p| p.display().to_string()).collect();
            return Err(output::usage_error(&format!(
                "--rules {} holds no `*.rules` or `*.policy` file, so the policy would be empty \
                 and decide nothing{}; add a rules file there, or pass --allow-empty-policy if \
                 an empty policy is what you mean",
                paths.join(", "),
                if loaded.skipped.is_empty() {
                    ""
                } else {
                    " (see the skipped files above)"
                }
            )));
        }
        Ok(loaded)
    }
}

pub fn main() -> ExitCode {
    main_bounded(|_| {})
}

/// [`main`], with `limit` to set the allocation budget of the binary's allocator (the daemon's
/// overlay child, `daemon::overlay_eval`).
pub fn main_bounded(limit: impl FnOnce(i64)) -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.verbose, cli.quiet);
    output::choose_error_format(&std::env::args().collect::<Vec<_>>());
    match cli.command {
        Command::Check(args) => check::run(&args),
        Command::Execpolicy(command) => execpolicy::run(command),
        Command::Hook(command) => hook::run(command),
        Command::Policy(command) => policy::run(command),
        Command::Authz(command) => authz::run(command),
        Command::AllowPrefix(args) => amend::allow_prefix(&args),
        Command::AllowHost(args) => amend::host(&args, crate::policy::Decision::Allow),
        Command::AskHost(args) => amend::host(&args, crate::policy::Decision::Prompt),
        Command::DenyHost(args) => amend::host(&args, crate::policy::Decision::Forbidden),
        Command::Run(mut args) => {
            args.verbose = cli.verbose > 0;
            run::run(&args)
        }
        Command::Doctor(args) => doctor::run(&args),
        Command::Daemon(args) => daemon::daemon(&args),
        Command::Node(args) => node::node(&args),
        Command::Prompts(args) => control::prompts(&args),
        Command::Approve(args) => control::approve(&args),
        Command::Deny(args) => control::deny(&args),
        Command::Console(args) => console::console(&args),
        Command::Reload(args) => control::reload(&args),
        Command::Status(args) => control::status(&args),
        Command::Audit(args) => audit::audit(&args),
        Command::Replay(args) => replay::run(&args),
        Command::Release(args) => daemon::release(&args),
        Command::Legacy(command) => legacy::run(command),
        Command::Completions(args) => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(args.shell, &mut command, "guard", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man(args) => man(args.subcommand.as_deref()),
        Command::EvalOverlay => crate::daemon::overlay_eval::child_main(limit),
    }
}

/// `guard man [SUBCOMMAND]`: the page clap_mangen makes of the help texts.
fn man(subcommand: Option<&str>) -> ExitCode {
    let guard = <Cli as clap::CommandFactory>::command();
    let page = match subcommand {
        None => guard,
        Some(name) => match guard.find_subcommand(name) {
            // The page is titled `guard-NAME`; clap takes only static names without its
            // `string` feature, and this process prints one page and ends.
            Some(found) => found
                .clone()
                .name(&*Box::leak(format!("guard-{name}").into_boxed_str())),
            None => {
                return output::usage_error(&format!(
                    "no subcommand `{name}`; `guard --help` lists them"
                ));
            }
        },
    };
    let mut roff = Vec::new();
    if let Err(err) = clap_mangen::Man::new(page).render(&mut roff) {
        anstream::eprintln!("guard: cannot render the man page: {err}");
        return ExitCode::from(1);
    }
    use std::io::Write;
    let _ = std::io::stdout().write_all(&roff);
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
