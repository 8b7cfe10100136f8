//! `guard check --approval MODE`: what the Codex CLI's approval policy makes of a command (run,
//! ask, refuse), with the reference's reason and the amendment it would offer, and whether a
//! prefix proposed with `--prefix-rule` would be accepted.

use anstream::println;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use super::super::output::{decision_style, dim};
use crate::policy::approval::{
    ApprovalPolicy, ApprovalRequest, ApprovalRequirement, SandboxProfile, approval_requirement,
    proposed_prefix_refusal,
};
use crate::policy::{Decision, Policy, render_example};

#[derive(Args, Debug)]
pub struct ApprovalArgs {
    /// Also decide ARGV as the Codex CLI does under this approval policy: `untrusted`,
    /// `on-request`, `on-failure`, `never`, or `granular[:sandbox_approval=BOOL,rules=BOOL]`
    /// (a `false` category is refused instead of asked).
    #[arg(long, value_name = "MODE", value_parser = parse_policy, conflicts_with = "dest")]
    pub approval: Option<ApprovalPolicy>,
    /// With --approval: the sandbox the command would run in.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = SandboxArg::WorkspaceWrite, requires = "approval")]
    pub sandbox: SandboxArg,
    /// With --approval: the command asks to run outside the sandbox.
    #[arg(long, requires = "approval")]
    pub escalated: bool,
    /// With --approval: a prefix proposed with the command, as the "always" answer (shell
    /// words, e.g. "cargo test"). Kept only when it is not a banned prefix, no rule matches
    /// already, and allowing it would allow the command.
    #[arg(long, value_name = "TOKENS", requires = "approval")]
    pub prefix_rule: Option<String>,
}

fn parse_policy(text: &str) -> Result<ApprovalPolicy, String> {
    text.parse()
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SandboxArg {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
    External,
}

impl SandboxArg {
    fn profile(self) -> SandboxProfile {
        match self {
            SandboxArg::ReadOnly | SandboxArg::WorkspaceWrite => SandboxProfile::Restricted,
            SandboxArg::DangerFullAccess => SandboxProfile::Unrestricted,
            SandboxArg::External => SandboxProfile::External,
        }
    }
}

/// The requirement, and what became of the proposed prefix (its tokens and why it is refused).
pub struct Answer {
    policy: ApprovalPolicy,
    requirement: ApprovalRequirement,
    proposed: Option<(Vec<String>, Option<String>)>,
}

/// The answer under `--approval`, if given; `Err` for a `--prefix-rule` that is not shell words.
pub fn decide(
    policy: &Policy,
    argv: &[String],
    args: &ApprovalArgs,
) -> Option<Result<Answer, String>> {
    let mode = args.approval?;
    let proposed = match args.prefix_rule.as_deref().map(shlex::split) {
        Some(None) => {
            return Some(Err(
                "--prefix-rule is not shell words (an unclosed quote?)".to_string()
            ));
        }
        Some(Some(tokens)) => Some(tokens),
        None => None,
    };
    let request = ApprovalRequest {
        argv,
        policy: mode,
        sandbox: args.sandbox.profile(),
        sandbox_override: args.escalated,
        proposed_prefix: proposed.as_deref(),
    };
    let requirement = approval_requirement(policy, &request);
    let proposed = proposed.as_ref().map(|tokens| {
        let refusal = proposed_prefix_refusal(policy, &request, tokens);
        (tokens.clone(), refusal)
    });
    Some(Ok(Answer {
        policy: mode,
        requirement,
        proposed,
    }))
}

impl Answer {
    /// `"approval": {"policy": ..., "requirement": "needs_approval", "reason": ..., ...}`, in
    /// the snake case of the reference's check output around it.
    pub fn json(&self) -> Value {
        let mut value = serde_json::to_value(&self.requirement).unwrap_or_default();
        value["policy"] = json!(self.policy.to_string());
        if let Some((tokens, refusal)) = &self.proposed {
            value["proposed_prefix"] = json!({
                "tokens": tokens,
                "accepted": refusal.is_none(),
                "why": refusal,
            });
        }
        value
    }

    pub fn explain(&self) {
        let dim = dim();
        let (decision, word, reason, amendment) = match &self.requirement {
            ApprovalRequirement::Skip {
                bypass_sandbox,
                amendment,
            } => (
                Decision::Allow,
                if *bypass_sandbox {
                    "runs outside the sandbox (every command has an explicit allow)"
                } else {
                    "runs in the sandbox without asking"
                },
                None,
                amendment,
            ),
            ApprovalRequirement::NeedsApproval { reason, amendment } => {
                (Decision::Prompt, "asks", reason.as_deref(), amendment)
            }
            ApprovalRequirement::Forbidden { reason } => {
                (Decision::Forbidden, "refused", Some(reason.as_str()), &None)
            }
        };
        let style = decision_style(Some(decision));
        println!(
            "  {dim}approval ({}):{dim:#} {style}{word}{style:#}{}",
            self.policy,
            reason.map(|r| format!(": {r}")).unwrap_or_default()
        );
        if let Some(amendment) = amendment {
            println!(
                "    {dim}amendment offered:{dim:#} prefix_rule({:?}, \"allow\")",
                amendment
            );
        }
        if let Some((tokens, refusal)) = &self.proposed {
            match refusal {
                None => println!(
                    "    {dim}proposed prefix:{dim:#} `{}` would be accepted",
                    render_example(tokens)
                ),
                Some(why) => println!("    {dim}proposed prefix:{dim:#} refused: {why}"),
            }
        }
    }
}
