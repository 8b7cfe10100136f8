//! `guard hook claude-code`: a Claude Code `PreToolUse` hook that decides each Bash tool call
//! with the policy, so the agent asks (or is told no) before it runs what the kernel would hold
//! or refuse under `guard run`.
//!
//! The script is split into its commands as `guard check --split-shell` does, more strictly (an
//! allow is answered from them: `policy::shell::agent_commands`), and each is evaluated as
//! `guard check` evaluates it; the strictest part decides. Exit statuses follow
//! Claude Code's hooks reference: 0 with the answer on stdout; 2 blocks the call (guard's exit for
//! a policy that does not load, so a broken policy blocks, as `guard run` refuses to start with
//! it); 1 is a non-blocking error (input guard cannot read: Claude Code goes on with its own
//! permission rules and shows the message).

use std::io::Read;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::check::{CommandResult, FallbackArg, evaluate_commands};
use crate::cli::RulesArgs;
use crate::policy::reason::decision_reason;
use crate::policy::shell::{AgentCommands, agent_commands};
use crate::policy::{
    Decision, Evaluation, Fallback, MatchOptions, Policy, RuleMatch, render_example,
};

#[path = "hook_wire.rs"]
mod wire;

use wire::{BASH_TOOL, BashToolInput, HookInput, HookOutput, PRE_TOOL_USE, PermissionDecision};

/// Claude Code's exit status for a hook error that does not block the call.
const EXIT_NON_BLOCKING: u8 = 1;

/// The most guard reads from stdin: a tool call is far smaller.
const MAX_INPUT_BYTES: u64 = 16 << 20;

const CLAUDE_CODE_AFTER_HELP: &str = "In .claude/settings.json (or ~/.claude/settings.json):
  {\"hooks\": {\"PreToolUse\": [{\"matcher\": \"Bash\",
     \"hooks\": [{\"type\": \"command\", \"command\": \"guard hook claude-code\"}]}]}}

It reads the hook's JSON on stdin and, for a Bash call, prints
  {\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"deny\",
   \"permissionDecisionReason\":\"guard: `rm -rf build` rejected: ...\"}}
deny if any command of the script is forbidden, ask if any is prompted, allow when every
command is allowed by a rule; nothing (Claude Code's own permissions decide) for other tools
and for scripts with a command no rule decides.

Exit status: 0 with the answer; 2 when the policy does not load (Claude Code blocks the call
and shows the error); 1 when the input is not a PreToolUse call (Claude Code goes on).";

#[derive(Subcommand, Debug)]
pub enum HookCommand {
    /// A Claude Code PreToolUse hook: decide a Bash tool call's command with the policy.
    #[command(after_help = CLAUDE_CODE_AFTER_HELP)]
    ClaudeCode(ClaudeCodeArgs),
}

#[derive(Args, Debug)]
pub struct ClaudeCodeArgs {
    #[command(flatten)]
    rules: RulesArgs,
    /// The decision for a command no rule matches (as `guard check --fallback`). Default: the
    /// policy's `enforcement(unmatched_exec=...)` when it is prompt or deny (what the kernel
    /// does with it); else no decision, and Claude Code's own permissions decide.
    #[arg(long, value_enum, value_name = "DECISION")]
    fallback: Option<FallbackArg>,
    /// Let `/usr/bin/git` and `./git` reach the rules for `git` (limited by `host_executable`).
    #[arg(long)]
    resolve_host_executables: bool,
}

pub fn run(command: HookCommand) -> ExitCode {
    match command {
        HookCommand::ClaudeCode(args) => claude_code(&args),
    }
}

fn claude_code(args: &ClaudeCodeArgs) -> ExitCode {
    let script = match read_bash_command() {
        Ok(Some(script)) => script,
        // Not a Bash call: no answer, Claude Code decides.
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            anstream::eprintln!("guard hook claude-code: {message}");
            return ExitCode::from(EXIT_NON_BLOCKING);
        }
    };
    let loaded = match args.rules.load() {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    if let Some(answer) = decide(&loaded.policy, args, &script) {
        crate::cli::output::print_json(&serde_json::to_value(&answer).expect("serializable"));
    }
    ExitCode::SUCCESS
}

/// The Bash command of a PreToolUse call on stdin; `None` for another tool.
fn read_bash_command() -> Result<Option<String>, String> {
    let mut raw = String::new();
    std::io::stdin()
        .take(MAX_INPUT_BYTES)
        .read_to_string(&mut raw)
        .map_err(|err| format!("cannot read the hook's input on stdin: {err}"))?;
    let input: HookInput = serde_json::from_str(&raw).map_err(|err| {
        format!(
            "stdin is not a Claude Code hook call ({err}); expected one JSON object such as \
             {{\"hook_event_name\":\"PreToolUse\",\"tool_name\":\"Bash\",\"tool_input\":\
             {{\"command\":\"ls\"}}}}"
        )
    })?;
    if let Some(event) = input.hook_event_name.as_deref()
        && event != PRE_TOOL_USE
    {
        return Err(format!(
            "this is a `{event}` event; guard answers `{PRE_TOOL_USE}` only: put the hook under \
             \"hooks\" → \"{PRE_TOOL_USE}\" with \"matcher\": \"{BASH_TOOL}\" in the settings"
        ));
    }
    if input.tool_name != BASH_TOOL {
        return Ok(None);
    }
    let bash: BashToolInput = serde_json::from_value(input.tool_input)
        .map_err(|err| format!("the Bash call's tool_input has no command string ({err})"))?;
    Ok(Some(bash.command))
}

/// Where a decision for a command no rule matches comes from.
#[derive(Clone, Copy)]
enum Unmatched {
    Flag(FallbackArg),
    /// The policy's `enforcement(unmatched_exec=...)`, when it is stricter than allow.
    Policy(Decision),
}

impl Unmatched {
    fn of(policy: &Policy, flag: Option<FallbackArg>) -> Option<Self> {
        match flag {
            Some(flag) => Some(Unmatched::Flag(flag)),
            None => Some(policy.enforcement().unmatched_exec)
                .filter(|decision| *decision != Decision::Allow)
                .map(Unmatched::Policy),
        }
    }

    fn decide(self, cmd: &[String]) -> Decision {
        match self {
            Unmatched::Flag(flag) => flag.decide(cmd),
            Unmatched::Policy(decision) => decision,
        }
    }

    fn describe(self) -> String {
        match self {
            Unmatched::Flag(flag) => format!(
                "--fallback {}",
                clap::ValueEnum::to_possible_value(&flag)
                    .expect("no skipped values")
                    .get_name()
            ),
            Unmatched::Policy(decision) => format!(
                "the policy's enforcement(unmatched_exec=\"{}\")",
                decision.as_str()
            ),
        }
    }
}

/// The answer for one Bash script: the strictest of its commands' decisions; `None` when a
/// command has no decision, or a shell nested too deep was left unopened, and none is stricter
/// than allow (an allow must hold for every part).
fn decide(policy: &Policy, args: &ClaudeCodeArgs, script: &str) -> Option<HookOutput> {
    let AgentCommands { commands, too_deep } = agent_commands(script);
    let unmatched = Unmatched::of(policy, args.fallback);
    let decide_unmatched = unmatched.map(|u| move |cmd: &[String]| u.decide(cmd));
    let fallback: Option<Fallback<'_>> = decide_unmatched.as_ref().map(|f| f as Fallback<'_>);
    let options = MatchOptions {
        resolve_host_executables: args.resolve_host_executables,
    };
    let parts: Vec<(CommandResult, Evaluation)> =
        evaluate_commands(policy, fallback, options, commands)
            .into_iter()
            .map(|part| {
                let evaluation = Evaluation::from_matches(part.matches.clone());
                (part, evaluation)
            })
            .collect();
    let strictest = parts.iter().map(|(_, e)| e.decision).max().flatten()?;
    if strictest == Decision::Allow {
        if too_deep || parts.iter().any(|(_, e)| e.decision.is_none()) {
            return None;
        }
        let commands: Vec<String> = parts
            .iter()
            .map(|(part, _)| format!("`{}`", render_example(&part.command)))
            .collect();
        return Some(HookOutput::new(
            PermissionDecision::Allow,
            format!("guard: the policy allows {}", commands.join(", ")),
        ));
    }
    let (part, evaluation) = parts
        .iter()
        .find(|(_, e)| e.decision == Some(strictest))
        .expect("the strictest decision is one part's");
    let by_fallback = part
        .matches
        .iter()
        .all(|found| matches!(found, RuleMatch::HeuristicsRuleMatch { .. }));
    let reason = match decision_reason(&part.command, evaluation) {
        Some(reason) if !by_fallback => reason,
        _ => format!(
            "`{}` matches no rule, and {} {} it",
            render_example(&part.command),
            unmatched.map_or_else(|| "the fallback".to_string(), Unmatched::describe),
            if strictest == Decision::Forbidden {
                "refuses"
            } else {
                "asks for"
            }
        ),
    };
    let decision = if strictest == Decision::Forbidden {
        PermissionDecision::Deny
    } else {
        PermissionDecision::Ask
    };
    Some(HookOutput::new(decision, format!("guard: {reason}")))
}
