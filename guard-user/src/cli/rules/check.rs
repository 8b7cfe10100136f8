//! `guard check`: evaluate one command line (or, with `--dest`, one destination) and explain
//! the decision.

use std::process::ExitCode;

use anstream::println;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use crate::cli::RulesArgs;
use crate::cli::output::{
    EXIT_POLICY_ERROR, decision_name, decision_style, dim, error, print_json, usage_error,
};
use crate::compile::{KernelExecDecision, kernel_exec_decision};
use crate::policy::heuristics::heuristics_decision;
use crate::policy::load::{EMBEDDED_DEFAULT_NAME, SYSTEM_RULES_DIR};
use crate::policy::reason::decision_reason;
use crate::policy::shell::commands_for_exec_policy;
use crate::policy::{
    Decision, Evaluation, Fallback, MatchOptions, Policy, RuleMatch, Transport, render_example,
};

#[path = "check_approval.rs"]
mod approval;
#[path = "check_dest.rs"]
mod dest;
#[path = "check_unix.rs"]
mod unix;

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    rules: RulesArgs,
    /// Let `/usr/bin/git` and `./git` reach the rules for `git` (limited by `host_executable`).
    #[arg(long)]
    resolve_host_executables: bool,
    /// The decision for a command no rule matches. `heuristics`: known-safe commands are
    /// allowed, everything else (dangerous or not) is asked. Without it, no match means `none`.
    #[arg(long, value_enum, value_name = "DECISION")]
    fallback: Option<FallbackArg>,
    /// Evaluate `bash|sh|zsh -c|-lc SCRIPT` as the commands inside SCRIPT, when it splits plainly.
    #[arg(long)]
    split_shell: bool,
    /// Print one JSON object instead of an explanation.
    #[arg(long)]
    json: bool,
    /// Also say what the kernel decides for an exec of ARGV (`kernel_decision` and `kernel_rule`
    /// in JSON): the strongest of the prefix rules matched by the executed file's name and the
    /// pattern tables (rule-set globs, legacy regexes and substrings), else the policy's
    /// unmatched_exec.
    #[arg(long, conflicts_with = "dest")]
    kernel: bool,
    /// Check a destination instead of a command: HOST_OR_IP:PORT (IPv6 as `[::1]:443`). The
    /// policy's host names (and a HOST given here) are resolved as `guard run` resolves them, so
    /// an address gets the kernel's answer: the rules of every host it was answered for.
    #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["argv", "split_shell", "fallback", "resolve_host_executables"])]
    dest: Option<String>,
    /// Check a unix socket instead of a command: its absolute path (`/run/docker.sock`) or an
    /// abstract name with a leading @ (`@/tmp/.X11-unix/X0`), as a connect or send in a scope
    /// names it. Says which `unix_rule` (or built-in list entry) decides it.
    #[arg(long, value_name = "SOCKET", conflicts_with_all = ["argv", "dest", "split_shell", "fallback", "resolve_host_executables", "kernel"])]
    unix: Option<String>,
    /// The transport of `--dest` [default: tcp].
    #[arg(long, value_enum)]
    transport: Option<TransportArg>,
    /// With --dest: resolve names with this DNS server (IP:PORT, over UDP) instead of the
    /// system's resolver configuration.
    #[arg(long, value_name = "IP:PORT", requires = "dest")]
    nameserver: Option<std::net::SocketAddr>,
    /// With --dest: resolve nothing; names match only the rules written with that very name.
    #[arg(long, requires = "dest", conflicts_with = "nameserver")]
    no_resolve: bool,
    #[command(flatten)]
    approval: approval::ApprovalArgs,
    /// The command to evaluate (after `--`). May be empty.
    #[arg(last = true, value_name = "ARGV")]
    argv: Vec<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TransportArg {
    Tcp,
    Udp,
}

impl TransportArg {
    fn transport(self) -> Transport {
        match self {
            TransportArg::Tcp => Transport::Tcp,
            TransportArg::Udp => Transport::Udp,
        }
    }
}

/// The decision for a command no rule matches, as `--fallback` names it (also `guard hook`'s).
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(super) enum FallbackArg {
    Allow,
    Prompt,
    Forbidden,
    Heuristics,
}

impl FallbackArg {
    pub(super) fn decide(self, cmd: &[String]) -> Decision {
        match self {
            FallbackArg::Allow => Decision::Allow,
            FallbackArg::Prompt => Decision::Prompt,
            FallbackArg::Forbidden => Decision::Forbidden,
            FallbackArg::Heuristics => heuristics_decision(cmd),
        }
    }
}

/// One evaluated command and the matches it got.
pub(super) struct CommandResult {
    pub(super) command: Vec<String>,
    pub(super) matches: Vec<RuleMatch>,
}

pub fn run(args: &CheckArgs) -> ExitCode {
    // Checked here, not with clap's `requires`: clap waives a requirement when an argument that
    // conflicts with it (ARGV) is present.
    if args.transport.is_some() && args.dest.is_none() {
        return usage_error("--transport applies to --dest HOST:PORT only");
    }
    let dest = match args.dest.as_deref().map(dest::parse_dest).transpose() {
        Ok(dest) => dest,
        Err(message) => return usage_error(&message),
    };
    if let Some(patch) = &args.approval.patch {
        return approval::check_patch(&args.approval, patch, args.json);
    }
    let loaded = match args.rules.load() {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    if let Some(socket) = &args.unix {
        unix::check(&loaded.policy, socket, args.json);
        return ExitCode::SUCCESS;
    }
    if let Some(dest) = dest {
        let transport = args
            .transport
            .map_or(Transport::Tcp, TransportArg::transport);
        let resolution = if args.no_resolve {
            dest::Resolution::Off
        } else {
            dest::Resolution::Resolve(args.nameserver)
        };
        dest::check(&loaded.policy, &dest, transport, resolution, args.json);
        return ExitCode::SUCCESS;
    }
    let (commands, used_complex_parsing) = if args.split_shell {
        let split = commands_for_exec_policy(&args.argv);
        (split.commands, split.used_complex_parsing)
    } else {
        (vec![args.argv.clone()], false)
    };
    let results = evaluate(&loaded.policy, args, commands);
    let evaluation = Evaluation::from_matches(
        results
            .iter()
            .flat_map(|result| result.matches.iter().cloned())
            .collect(),
    );
    let kernel = match args
        .kernel
        .then(|| kernel_exec_decision(&loaded.policy, &args.argv))
        .transpose()
    {
        Ok(kernel) => kernel,
        // The kernel would refuse this policy's tables too (`guard run` says so at start).
        Err(err) => return error("policy", &format!("{err:#}"), EXIT_POLICY_ERROR),
    };
    let approval = match approval::decide(&loaded.policy, &args.argv, &args.approval).transpose() {
        Ok(approval) => approval,
        Err(message) => return usage_error(&message),
    };
    if args.json {
        let mut value = check_json(&results, &evaluation, used_complex_parsing);
        if let Some(kernel) = &kernel {
            value["kernel_decision"] = json!(kernel.decision.as_str());
            value["kernel_rule"] = json!(kernel.rule);
            if !kernel.admits.is_empty() {
                value["kernel_admits"] = json!(kernel.admits);
            }
        }
        if let Some(approval) = &approval {
            value["approval"] = approval.json();
        }
        print_json(&value);
    } else {
        explain(&args.argv, &results, &evaluation, kernel, approval.as_ref());
    }
    ExitCode::SUCCESS
}

fn evaluate(policy: &Policy, args: &CheckArgs, commands: Vec<Vec<String>>) -> Vec<CommandResult> {
    let decide = args
        .fallback
        .map(|fallback| move |cmd: &[String]| fallback.decide(cmd));
    let fallback: Option<Fallback<'_>> = decide.as_ref().map(|f| f as Fallback<'_>);
    let options = MatchOptions {
        resolve_host_executables: args.resolve_host_executables,
    };
    evaluate_commands(policy, fallback, options, commands)
}

/// Each command's matches (a shell script's parts are evaluated one by one), with `fallback`
/// deciding a command no rule matches.
pub(super) fn evaluate_commands(
    policy: &Policy,
    fallback: Option<Fallback<'_>>,
    options: MatchOptions,
    commands: Vec<Vec<String>>,
) -> Vec<CommandResult> {
    commands
        .into_iter()
        .map(|command| CommandResult {
            matches: policy.matches_for_command(&command, fallback, options),
            command,
        })
        .collect()
}

/// A match in the CLI's JSON contract, plus where the rule was written.
pub fn match_json(found: &RuleMatch) -> Value {
    match found {
        RuleMatch::PrefixRuleMatch {
            matched_prefix,
            decision,
            resolved_program,
            justification,
            rule_id,
            origin,
        } => {
            let mut object = json!({
                "matched_prefix": matched_prefix,
                "decision": decision.as_str(),
                "rule_id": rule_id,
            });
            if let Some(justification) = justification {
                object["justification"] = json!(justification);
            }
            if let Some(program) = resolved_program {
                object["resolved_program"] = json!(program.display().to_string());
            }
            if let Some(origin) = origin {
                object["file"] = json!(&*origin.file);
                object["line"] = json!(origin.line);
            }
            object
        }
        RuleMatch::HeuristicsRuleMatch { command, decision } => {
            json!({"heuristics": command, "decision": decision.as_str()})
        }
        RuleMatch::RuleSetMatch {
            pattern,
            decision,
            origin,
        } => {
            let mut rule = json!({"pattern": pattern});
            if let Some(origin) = origin {
                rule["file"] = json!(&*origin.file);
                rule["line"] = json!(origin.line);
            }
            json!({"rule_set": rule, "decision": decision.as_str()})
        }
        RuleMatch::LegacyMatch {
            rule,
            reason,
            origin,
        } => {
            let mut legacy = json!({"rule": rule, "reason": reason});
            if let Some(origin) = origin {
                legacy["file"] = json!(&*origin.file);
                legacy["line"] = json!(origin.line);
            }
            json!({"legacy": legacy, "decision": "forbidden"})
        }
    }
}

fn check_json(results: &[CommandResult], evaluation: &Evaluation, complex: bool) -> Value {
    let commands: Vec<&Vec<String>> = results.iter().map(|r| &r.command).collect();
    let matched: Vec<Value> = evaluation.matched_rules.iter().map(match_json).collect();
    json!({
        "decision": decision_name(evaluation.decision),
        "commands": commands,
        "used_complex_parsing": complex,
        "matched_rules": matched,
    })
}

fn explain(
    argv: &[String],
    results: &[CommandResult],
    evaluation: &Evaluation,
    kernel: Option<KernelExecDecision>,
    approval: Option<&approval::Answer>,
) {
    let style = decision_style(evaluation.decision);
    let dim = dim();
    println!(
        "{style}{}{style:#}  {}",
        decision_name(evaluation.decision),
        render_example(argv)
    );
    for result in results {
        if results.len() > 1 || result.command != argv {
            println!("  {dim}command:{dim:#} {}", render_example(&result.command));
        }
        if result.matches.is_empty() {
            println!("    no rule matches");
        }
        for found in &result.matches {
            println!("    {}", describe_match(found));
        }
    }
    if let Some(reason) = decision_reason(argv, evaluation) {
        println!("  {dim}reason:{dim:#} {reason}");
    }
    if let Some(kernel) = kernel {
        let style = decision_style(Some(kernel.decision));
        println!(
            "  {dim}kernel:{dim:#} {style}{}{style:#} {}{dim}(for an exec of this argv under \
             `guard run`: the kernel matches the executed file's name, and its pattern tables \
             the name and arguments){dim:#}",
            kernel.decision.as_str(),
            match &kernel.rule {
                Some(rule) => format!("by {rule} "),
                None => "by the unmatched default ".to_string(),
            }
        );
        if !kernel.admits.is_empty() {
            let files: Vec<String> = kernel
                .admits
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            println!(
                "  {dim}kernel admits by this name:{dim:#} {} {dim}(under this exec allowlist an \
                 allow by name holds for these files alone, by identity: a copy under the name \
                 does not run){dim:#}",
                files.join(", ")
            );
        }
    }
    if let Some(approval) = approval {
        approval.explain();
    }
    println!("{}", how_to_change(argv, evaluation));
}

fn describe_match(found: &RuleMatch) -> String {
    let dim = dim();
    match found {
        RuleMatch::PrefixRuleMatch {
            matched_prefix,
            decision,
            resolved_program,
            justification,
            origin,
            ..
        } => {
            let style = decision_style(Some(*decision));
            let mut line = format!(
                "{style}{}{style:#} by prefix_rule {:?}",
                decision.as_str(),
                matched_prefix
            );
            if let Some(origin) = origin {
                line.push_str(&format!(" {dim}at {origin}{dim:#}"));
            }
            if let Some(program) = resolved_program {
                line.push_str(&format!(" (argv[0] resolved to {})", program.display()));
            }
            if let Some(justification) = justification {
                line.push_str(&format!(
                    "\n      {dim}justification:{dim:#} {justification}"
                ));
            }
            line
        }
        RuleMatch::HeuristicsRuleMatch { decision, .. } => {
            let style = decision_style(Some(*decision));
            format!(
                "{style}{}{style:#} by the fallback (no rule matches this command)",
                decision.as_str()
            )
        }
        RuleMatch::RuleSetMatch {
            pattern,
            decision,
            origin,
        } => {
            let style = decision_style(Some(*decision));
            let mut line = format!(
                "{style}{}{style:#} by rule_set {pattern:?}",
                decision.as_str()
            );
            if let Some(origin) = origin {
                line.push_str(&format!(" {dim}at {origin}{dim:#}"));
            }
            line
        }
        RuleMatch::LegacyMatch {
            rule,
            reason,
            origin,
        } => {
            let style = decision_style(Some(Decision::Forbidden));
            let mut line = format!("{style}forbidden{style:#} by legacy {rule}: {reason}");
            if let Some(origin) = origin {
                line.push_str(&format!(" {dim}at {origin}{dim:#}"));
            }
            line
        }
    }
}

/// What to change to get another decision: decisions combine by maximum, so an allow rule can
/// only help where nothing stronger matched.
fn how_to_change(argv: &[String], evaluation: &Evaluation) -> String {
    let tokens = render_example(argv);
    let strongest_rule = evaluation
        .matched_rules
        .iter()
        .find_map(|found| match found {
            RuleMatch::PrefixRuleMatch {
                decision, origin, ..
            }
            | RuleMatch::RuleSetMatch {
                decision, origin, ..
            } if Some(*decision) == evaluation.decision => Some(
                origin
                    .as_ref()
                    .map_or_else(|| "an amendment".to_string(), ToString::to_string),
            ),
            RuleMatch::LegacyMatch { origin, .. }
                if evaluation.decision == Some(Decision::Forbidden) =>
            {
                Some(
                    origin
                        .as_ref()
                        .map_or_else(|| "a legacy policy".to_string(), ToString::to_string),
                )
            }
            _ => None,
        });
    match (evaluation.decision, strongest_rule) {
        (None, _) => format!(
            "To decide it: allow it with `guard allow-prefix --rules-file FILE -- {tokens}`, or add \
             prefix_rule(pattern=[...], decision=\"prompt\"|\"forbidden\") for a prefix of it. \
             `--fallback` sets the decision for commands no rule matches."
        ),
        (Some(Decision::Allow), _) => "To ask or refuse instead: add a prefix_rule with \
             decision=\"prompt\" or \"forbidden\" for a prefix of it (the strongest decision wins)."
            .to_string(),
        (Some(decision), Some(place)) if place.starts_with(EMBEDDED_DEFAULT_NAME) => format!(
            "To change it: the {} rule at {place} is part of the embedded default policy; give \
             --rules PATH (or create {SYSTEM_RULES_DIR}) to use your own policy instead.",
            decision.as_str()
        ),
        (Some(decision), Some(place)) => format!(
            "To change it: edit or remove the {} rule at {place}. An allow rule cannot override \
             it: the strongest decision wins.",
            decision.as_str()
        ),
        (Some(_), None) => format!(
            "No rule matches; the fallback decided. To allow it: `guard allow-prefix --rules-file \
             FILE -- {tokens}`."
        ),
    }
}
