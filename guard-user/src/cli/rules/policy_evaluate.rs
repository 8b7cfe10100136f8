//! `guard policy evaluate --tool T [--subject S]`: what the rule sets alone (the written ones and
//! the built-in protected paths) decide for one tool call.

use std::process::ExitCode;

use anstream::println;
use clap::Args;
use serde_json::json;

use crate::cli::RulesArgs;
use crate::cli::output::{decision_name, decision_style, dim, print_json, usage_error};
use crate::policy::rule_set::{TOOL_NAMES, Tool, canonical_subject};

#[derive(Args, Debug)]
pub struct EvaluateArgs {
    #[command(flatten)]
    rules: RulesArgs,
    /// The tool called: exec (also bash), connect, read or write.
    #[arg(long, value_name = "TOOL")]
    tool: String,
    /// What it is called on: a command line (exec), HOST:PORT (connect) or a path (read, write;
    /// a relative path is taken against the current folder). Without it, only bare tool-name
    /// patterns can match.
    #[arg(long, value_name = "SUBJECT")]
    subject: Option<String>,
    /// Print `{"decision", "rule"?: {"file", "line", "pattern"}}`.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &EvaluateArgs) -> ExitCode {
    let Some(tool) = Tool::parse(&args.tool) else {
        return usage_error(&format!(
            "unknown tool `{}`: the tools are {TOOL_NAMES}",
            args.tool
        ));
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let subject = match args
        .subject
        .as_deref()
        .map(|raw| canonical_subject(tool, raw, &cwd))
        .transpose()
    {
        Ok(subject) => subject,
        Err(problem) => return usage_error(&format!("--subject for {tool}: {problem}")),
    };
    let loaded = match args.rules.load() {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let found = loaded.policy.rule_set_decision(tool, subject.as_deref());
    let decision = found.map(|found| found.decision);
    if args.json {
        let mut value = json!({"decision": decision_name(decision)});
        if let Some(found) = found {
            // In the order the contract lists them: file, line, pattern.
            let mut rule = serde_json::Map::new();
            if let Some(origin) = found.origin {
                rule.insert("file".into(), json!(&*origin.file));
                rule.insert("line".into(), json!(origin.line));
            }
            rule.insert("pattern".into(), json!(found.pattern.text()));
            value["rule"] = rule.into();
        }
        print_json(&value);
        return ExitCode::SUCCESS;
    }
    let style = decision_style(decision);
    let dim = dim();
    let call = match &subject {
        Some(subject) => format!("{tool} {subject}"),
        None => format!("{tool} {dim}(no subject){dim:#}"),
    };
    let because = match found {
        Some(found) => {
            let origin = found.origin.map(ToString::to_string).unwrap_or_default();
            format!("by {:?} {dim}at {origin}{dim:#}", found.pattern.text())
        }
        None => format!("{dim}no rule_set pattern matches{dim:#}"),
    };
    println!(
        "{style}{}{style:#}  {call}  {because}",
        decision_name(decision)
    );
    ExitCode::SUCCESS
}
