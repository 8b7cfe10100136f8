//! `guard execpolicy check`: the Codex CLI's `codex execpolicy check`, argument for argument and
//! byte for byte (its JSON, its errors, its exit codes), so scripts written for one run the
//! other. guard's own `guard check --json` is a different, richer contract (docs/json.md).
//!
//! Like Codex, every `--rules` PATH is one file read and parsed in the order given (no folders,
//! no overlays, no fallback), in Codex's language alone (guard's additions are unknown names
//! there), and only prefix rules answer.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::Serialize;

use crate::policy::{Decision, MatchOptions, Policy, PolicyParser, RuleMatch};

/// The Codex CLI's execpolicy tooling, with its arguments and output.
#[derive(Subcommand, Debug)]
pub enum ExecPolicyCommand {
    /// Check execpolicy files against a command: `codex execpolicy check`'s arguments, JSON,
    /// errors and exit codes (0; 1 when a rules file cannot be read or parsed; 2 on usage).
    Check(ExecPolicyCheckArgs),
}

const CHECK_AFTER_HELP: &str = "Prints what `codex execpolicy check` prints, byte for byte:
  {\"matchedRules\":[{\"prefixRuleMatch\":{\"matchedPrefix\":[\"git\",\"push\"],\"decision\":\"prompt\",\"justification\":\"...\"}}],\"decision\":\"prompt\"}
`decision` is absent when no rule matches. A rules file that cannot be read or parsed prints
`Error: failed to read policy at PATH` (or `failed to parse policy at PATH`) and its cause on
stderr and exits 1. For guard's own explanation and JSON (rule files and lines, folders,
overlays, fallbacks, the kernel's answer), use `guard check [--json]`.

Examples:
  guard execpolicy check --rules ~/.codex/rules/default.rules git push origin main
  guard execpolicy check -r team.rules -r mine.rules --pretty -- rm -rf build
  guard execpolicy check -r team.rules --resolve-host-executables /usr/bin/git push";

#[derive(Args, Debug)]
#[command(after_help = CHECK_AFTER_HELP)]
pub struct ExecPolicyCheckArgs {
    /// Paths to execpolicy rule files to evaluate (repeatable)
    #[arg(short = 'r', long = "rules", value_name = "PATH", required = true)]
    rules: Vec<PathBuf>,
    /// Pretty-print the JSON output
    #[arg(long)]
    pretty: bool,
    /// Resolve absolute program paths against basename rules, gated by any `host_executable()`
    /// definitions in the loaded policy files
    #[arg(long)]
    resolve_host_executables: bool,
    /// Accepted as Codex accepts it (a `~/.codex/config.toml` override); it changes nothing here.
    #[arg(short = 'c', long = "config", value_name = "key=value")]
    config: Vec<String>,
    /// Accepted for Codex's command lines (a Codex feature flag); any name, and it changes
    /// nothing here (Codex refuses a name that is not one of its flags).
    #[arg(long = "enable", value_name = "FEATURE")]
    enable: Vec<String>,
    /// Accepted for Codex's command lines (a Codex feature flag); any name, and it changes
    /// nothing here (Codex refuses a name that is not one of its flags).
    #[arg(long = "disable", value_name = "FEATURE")]
    disable: Vec<String>,
    /// Command tokens to check against the policy
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<String>,
}

pub fn run(command: ExecPolicyCommand) -> ExitCode {
    match command {
        ExecPolicyCommand::Check(args) => {
            let output = check(&args);
            print!("{}", output.stdout);
            anstream::eprint!("{}", output.stderr);
            ExitCode::from(output.code)
        }
    }
}

/// What one `execpolicy check` prints and its exit status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckOutput {
    pub code: u8,
    pub stdout: String,
    pub stderr: String,
}

/// `execpolicy check ARGS` without a process: the same argument parsing and output as the
/// binary (the Codex CLI tier runs thousands of cases through it, and the binary on a sample).
/// Usage errors come back as clap's error, whose text names this program differently.
pub fn check_in_process<S: AsRef<str>>(args: &[S]) -> Result<CheckOutput, clap::Error> {
    #[derive(clap::Parser)]
    #[command(name = "guard execpolicy check")]
    struct Standalone {
        #[command(flatten)]
        args: ExecPolicyCheckArgs,
    }
    let argv = std::iter::once("guard execpolicy check").chain(args.iter().map(AsRef::as_ref));
    let parsed = <Standalone as clap::Parser>::try_parse_from(argv)?;
    Ok(check(&parsed.args))
}

fn check(args: &ExecPolicyCheckArgs) -> CheckOutput {
    let policy = match load(&args.rules) {
        Ok(policy) => policy,
        // What a Rust `main` returning this error prints (without the backtrace Codex adds when
        // RUST_BACKTRACE is set), and its exit status.
        Err(report) => {
            return CheckOutput {
                code: 1,
                stdout: String::new(),
                stderr: format!("Error: {report}\n"),
            };
        }
    };
    let options = MatchOptions {
        resolve_host_executables: args.resolve_host_executables,
    };
    let matches = policy.matches_for_command(&args.command, None, options);
    CheckOutput {
        code: 0,
        stdout: format!("{}\n", codex_json(&matches, args.pretty)),
        stderr: String::new(),
    }
}

/// Reads and parses the files in order with one parser that knows Codex's builtins only, as
/// Codex does: a file using guard's additions fails as it fails in Codex, and each file is
/// named in errors as given.
fn load(paths: &[PathBuf]) -> Result<Policy, String> {
    let mut parser = PolicyParser::codex();
    for path in paths {
        let shown = path.display();
        let contents = std::fs::read_to_string(path)
            .map_err(|err| caused_by(&format!("failed to read policy at {shown}"), &err))?;
        parser
            .parse(&path.to_string_lossy(), &contents)
            .map_err(|err| caused_by(&format!("failed to parse policy at {shown}"), &err))?;
    }
    Ok(parser.build())
}

/// `CONTEXT`, a blank line, `Caused by:` and the cause with every line indented by four
/// spaces: the report shape of the error library Codex uses, for one cause.
fn caused_by(context: &str, cause: &dyn std::fmt::Display) -> String {
    let mut report = format!("{context}\n\nCaused by:\n");
    for (i, line) in cause.to_string().split('\n').enumerate() {
        if i > 0 {
            report.push('\n');
        }
        let _ = write!(report, "    {line}");
    }
    report
}

/// Codex's output object: `matchedRules`, then `decision` when something matched.
#[derive(Serialize)]
struct CodexOutput {
    #[serde(rename = "matchedRules")]
    matched_rules: Vec<CodexMatch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<Decision>,
}

#[derive(Serialize)]
struct CodexMatch {
    #[serde(rename = "prefixRuleMatch")]
    prefix_rule_match: PrefixRuleMatchJson,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PrefixRuleMatchJson {
    matched_prefix: Vec<String>,
    decision: Decision,
    #[serde(skip_serializing_if = "Option::is_none")]
    resolved_program: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    justification: Option<String>,
}

/// The matches in Codex's JSON. Only prefix rules exist in Codex's policy (the parser refuses
/// guard's rule sets, and legacy policies are not read), so nothing else is shown.
pub fn codex_json(matches: &[RuleMatch], pretty: bool) -> String {
    let matched_rules: Vec<CodexMatch> = matches
        .iter()
        .filter_map(|found| match found {
            RuleMatch::PrefixRuleMatch {
                matched_prefix,
                decision,
                resolved_program,
                justification,
                ..
            } => Some(CodexMatch {
                prefix_rule_match: PrefixRuleMatchJson {
                    matched_prefix: matched_prefix.clone(),
                    decision: *decision,
                    resolved_program: resolved_program
                        .as_ref()
                        .map(|path| path.display().to_string()),
                    justification: justification.clone(),
                },
            }),
            _ => None,
        })
        .collect();
    let output = CodexOutput {
        decision: matched_rules
            .iter()
            .map(|found| found.prefix_rule_match.decision)
            .max(),
        matched_rules,
    };
    let rendered = if pretty {
        serde_json::to_string_pretty(&output)
    } else {
        serde_json::to_string(&output)
    };
    rendered.expect("strings and decisions always serialise")
}
