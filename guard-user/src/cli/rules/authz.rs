//! `guard authz check | default`: decide one control-socket request the way the daemon would,
//! and print the built-in authorization policy to start a custom one from.

use std::path::PathBuf;
use std::process::ExitCode;

use anstream::{eprintln, println};
use anstyle::{AnsiColor, Style};
use clap::builder::NonEmptyStringValueParser;
use clap::{Args, Subcommand};

use crate::authz::{
    ACTIONS, Attributes, AuthzDecision, AuthzError, AuthzPolicy, ENTITIES, Request, Subject,
    builtin_json, is_known_action, is_known_entity, parse_attributes,
};
use crate::cli::output::{EXIT_POLICY_ERROR, decision_style, dim, print_json, usage_error};
use crate::policy::Decision;

/// Exit status of `guard authz check` when the request is refused.
const EXIT_DENIED: u8 = 1;

#[derive(Subcommand, Debug)]
pub enum AuthzCommand {
    /// Decide one control-socket request against an authorization policy and say which rule
    /// decided. Exit 0 allow, 1 deny, 2 bad input.
    #[command(after_help = check_help())]
    Check(CheckArgs),
    /// Print the built-in authorization policy as JSON, to start a custom one from:
    /// `guard authz default > /etc/guard/authz.json`.
    Default(DefaultArgs),
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The authorization policy, a JSON file {"rules": [RULE, ...]}. Default: the built-in one
    /// (`guard authz default` prints it).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The built-in policy's admin group, whose members may do everything.
    #[arg(long, value_name = "GROUP", conflicts_with = "policy", value_parser = NonEmptyStringValueParser::new())]
    admin_group: Option<String>,
    /// The caller: {"sub": "alice", "email": "..."?, "attrs": {"groups": ["wheel"], ...}?}.
    #[arg(long, value_name = "JSON")]
    subject: String,
    /// The action asked for (see below).
    #[arg(long, value_name = "ACTION")]
    action: String,
    /// What the action is about (see below); rules read it as `entity`.
    #[arg(long, value_name = "ENTITY")]
    entity: Option<String>,
    /// The record's attributes, {"owner": "alice", ...}; rules read them as `resource.NAME`.
    #[arg(long, value_name = "JSON")]
    resource: Option<String>,
    /// The circumstances' attributes, {"transport": "unix", ...}; rules read them as `env.NAME`.
    #[arg(long, value_name = "JSON")]
    env: Option<String>,
    /// Print {"decision": "allow"|"deny", "rule": INDEX|null, "obligations": [...]} on one line.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct DefaultArgs {
    /// The admin group, whose members may do everything (no such rule without it).
    #[arg(long, value_name = "GROUP", value_parser = NonEmptyStringValueParser::new())]
    admin_group: Option<String>,
}

pub fn run(command: AuthzCommand) -> ExitCode {
    match command {
        AuthzCommand::Check(args) => check(&args),
        AuthzCommand::Default(args) => {
            println!("{}", builtin_json(args.admin_group.as_deref()));
            ExitCode::SUCCESS
        }
    }
}

/// How the rules look and how to try one, under `guard authz check --help`.
fn check_help() -> String {
    let table = |entries: &[(&str, &str)]| {
        entries
            .iter()
            .map(|(name, about)| format!("  {name:<9}{about}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!(
        r#"A policy is {{"rules": [RULE, ...]}}. Rules are tried in order: the first whose "actions"
cover the action and whose "when" holds decides; a request no rule matches is refused.

  {{"effect": "allow" or "deny",
   "actions": ["*"] or ["status", "audit", ...],
   "when": {{"KEY": ["VALUE", ...], ...}},   every KEY must hold ANY of its values ({{}}: anyone)
   "obligations": ["TOKEN", ...]}}          handed to the caller when this rule allows

KEY is one of the subject's "attrs", or `sub`, `email`, `entity`, `resource.NAME` (--resource)
or `env.NAME` (--env). A VALUE `!V` holds when the key lacks V; `$sub` and `$email` stand for
the caller's own. Unknown fields are ignored.

Actions:
{actions}

Entities:
{entities}

Example (the built-in policy lets a user read their own audit records):
  guard authz check --subject '{{"sub": "alice", "attrs": {{"uid": ["1000"]}}}}' \
      --action audit --entity audit --resource '{{"owner": "alice"}}'

Exit status: 0 when the request is allowed, 1 when it is denied, 2 on bad input (a JSON flag
that does not parse, a policy file that cannot be read or parsed)."#,
        actions = table(ACTIONS),
        entities = table(ENTITIES),
    )
}

fn check(args: &CheckArgs) -> ExitCode {
    let subject = match Subject::from_json(&args.subject) {
        Ok(subject) => subject,
        Err(err) => return bad_flag("--subject", &err),
    };
    let resource = match attributes_flag("--resource", args.resource.as_deref()) {
        Ok(resource) => resource,
        Err(code) => return code,
    };
    let env = match attributes_flag("--env", args.env.as_deref()) {
        Ok(env) => env,
        Err(code) => return code,
    };
    let policy = match &args.policy {
        Some(path) => match AuthzPolicy::load(path) {
            Ok(policy) => policy,
            Err(err) => return policy_file_error(&err),
        },
        None => AuthzPolicy::builtin(args.admin_group.as_deref()),
    };
    warn_about_names(&policy, &args.action, args.entity.as_deref());
    let request = Request {
        subject: &subject,
        action: &args.action,
        entity: args.entity.as_deref(),
        resource: &resource,
        env: &env,
    };
    let decision = policy.evaluate(&request);
    if args.json {
        print_json(&serde_json::to_value(&decision).expect("a decision always serialises"));
    } else {
        explain(&policy, &decision);
    }
    if decision.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_DENIED)
    }
}

/// An absent flag is no attributes; a bad one is exit 2 naming the flag.
fn attributes_flag(flag: &str, json: Option<&str>) -> Result<Attributes, ExitCode> {
    json.map_or_else(
        || Ok(Attributes::new()),
        |json| parse_attributes(json).map_err(|err| bad_flag(flag, &err)),
    )
}

fn bad_flag(flag: &str, err: &AuthzError) -> ExitCode {
    usage_error(&format!("{flag}: {err}"))
}

/// `FILE:LINE:COLUMN: error: MESSAGE` first, as `guard check` shows a bad rules file, then what
/// to do. Exit 2.
fn policy_file_error(err: &AuthzError) -> ExitCode {
    match err {
        AuthzError::File {
            path,
            line,
            column,
            message,
        } => {
            eprintln!("{}:{line}:{column}: error: {message}", path.display());
            eprintln!(
                "The authorization policy was not loaded: fix it at that line and run the command \
                 again."
            );
            eprintln!("`guard authz default` prints the built-in policy to start from.");
        }
        other => eprintln!("error: {other}"),
    }
    ExitCode::from(EXIT_POLICY_ERROR)
}

/// Names the daemon does not know match only `"*"` rules: most likely typos, so say so (the
/// decision stands; a newer daemon may know them).
fn warn_about_names(policy: &AuthzPolicy, action: &str, entity: Option<&str>) {
    let names = |entries: &[(&str, &str)]| {
        entries
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !is_known_action(action) {
        warn(&format!(
            "--action {action:?} is not one of the daemon's actions ({})",
            names(ACTIONS)
        ));
    }
    if let Some(entity) = entity.filter(|entity| !is_known_entity(entity)) {
        warn(&format!(
            "--entity {entity:?} is not one of the daemon's entities ({})",
            names(ENTITIES)
        ));
    }
    for (index, unknown) in policy.unknown_actions() {
        warn(&format!(
            "rule {index} names {unknown:?}, which is not one of the daemon's actions ({})",
            names(ACTIONS)
        ));
    }
}

fn warn(message: &str) {
    let style = Style::new().fg_color(Some(AnsiColor::Yellow.into())).bold();
    eprintln!("{style}warning:{style:#} {message}");
}

/// `allow: rule 2 (allow [audit] when ...) obligations: mask`, or `deny: no rule matches (...)`.
fn explain(policy: &AuthzPolicy, decision: &AuthzDecision) {
    let (word, style) = if decision.allowed {
        ("allow", decision_style(Some(Decision::Allow)))
    } else {
        ("deny", decision_style(Some(Decision::Forbidden)))
    };
    let dim = dim();
    let Some(index) = decision.rule else {
        println!(
            "{style}{word}{style:#}: no rule matches {dim}(requests no rule allows are refused){dim:#}"
        );
        return;
    };
    let mut line = format!(
        "{style}{word}{style:#}: rule {index} {dim}({}){dim:#}",
        policy.rules[index]
    );
    if !decision.obligations.is_empty() {
        line.push_str(&format!(
            " obligations: {}",
            decision.obligations.join(", ")
        ));
    }
    println!("{line}");
}
