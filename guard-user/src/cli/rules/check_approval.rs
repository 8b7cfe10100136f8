//! `guard check --approval MODE`: what the Codex CLI's approval policy makes of a command (run,
//! ask, refuse), with the reference's reason and the amendment it would offer, and whether a
//! prefix proposed with `--prefix-rule` would be accepted; and `guard check --patch FILE`: what
//! it makes of a patch, by the paths it writes and the sandbox mode's writable roots.

use std::path::PathBuf;
use std::process::ExitCode;

use anstream::println;
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use crate::cli::output::{decision_style, dim, usage_error};
use crate::policy::approval::{
    ApprovalPolicy, ApprovalRequest, ApprovalRequirement, SandboxProfile, approval_requirement,
    proposed_prefix_refusal,
};
use crate::policy::patch::{PatchContext, PatchSafety, assess_patch, parse_patch};
use crate::policy::sandbox::{SandboxMode, writable_roots};
use crate::policy::{Decision, Policy, render_example};

#[derive(Args, Debug)]
pub struct ApprovalArgs {
    /// Also decide ARGV as the Codex CLI does under this approval policy: `untrusted`,
    /// `on-request`, `on-failure`, `never`, or `granular[:sandbox_approval=BOOL,rules=BOOL]`
    /// (a `false` category is refused instead of asked).
    #[arg(long, value_name = "MODE", value_parser = parse_policy, conflicts_with = "dest")]
    pub approval: Option<ApprovalPolicy>,
    /// With --approval or --patch: the sandbox the command or patch would run in.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = SandboxArg::WorkspaceWrite)]
    pub sandbox: SandboxArg,
    /// Judge a patch in the `apply_patch` format (`*** Begin Patch` ... `*** End Patch`; `-`
    /// for stdin) instead of a command: auto-approve, ask or reject, by whether every path it
    /// adds, deletes, updates or moves to is writable under --sandbox, and the approval policy
    /// (--approval, default on-request).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["dest", "argv", "prefix_rule", "escalated"])]
    pub patch: Option<PathBuf>,
    /// With --patch: the workspace, a writable root under workspace-write [default: the
    /// current folder].
    #[arg(long, value_name = "DIR", requires = "patch")]
    pub workspace: Option<PathBuf>,
    /// With --patch: another writable root under workspace-write (repeatable).
    #[arg(long, value_name = "DIR", requires = "patch")]
    pub writable: Vec<PathBuf>,
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

    fn mode(self) -> SandboxMode {
        match self {
            SandboxArg::ReadOnly => SandboxMode::ReadOnly,
            SandboxArg::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            SandboxArg::DangerFullAccess => SandboxMode::DangerFullAccess,
            SandboxArg::External => SandboxMode::External,
        }
    }
}

/// `guard check --patch FILE`: prints the decision (and each written path) and exits 0, or a
/// usage error for a patch that cannot be read or parsed (nothing is judged then).
pub fn check_patch(args: &ApprovalArgs, file: &std::path::Path, json: bool) -> ExitCode {
    let text = if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map(|_| text)
    } else {
        std::fs::read_to_string(file)
    };
    let text = match text {
        Ok(text) => text,
        Err(err) => {
            return usage_error(&format!("cannot read the patch {}: {err}", file.display()));
        }
    };
    let changes = match parse_patch(&text) {
        Ok(changes) => changes,
        Err(err) => {
            let name = if file.as_os_str() == "-" {
                "<stdin>".to_string()
            } else {
                file.display().to_string()
            };
            return usage_error(&format!("{name}:{}: {}", err.line, err.message));
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let workspace = args.workspace.clone().unwrap_or_else(|| cwd.clone());
    let mode = args.sandbox.mode();
    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    let roots = writable_roots(mode, &workspace, tmpdir.as_deref(), &args.writable);
    let approval = args.approval.unwrap_or_default();
    let (safety, paths) = assess_patch(
        &changes,
        &PatchContext {
            approval,
            sandbox: mode,
            roots: &roots,
            cwd: &cwd,
            sandbox_available: crate::confine::landlock::abi().is_ok(),
        },
    );
    if json {
        let mut value = serde_json::to_value(&safety).unwrap_or_default();
        value["approval"] = json!(approval.to_string());
        value["sandbox"] = json!(mode.as_str());
        value["writable_roots"] = json!(roots);
        value["paths"] = paths
            .iter()
            .map(|(path, writable)| json!({"path": path, "writable": writable}))
            .collect();
        crate::cli::output::print_json(&json!({ "patch": value }));
        return ExitCode::SUCCESS;
    }
    let dim = dim();
    let (decision, said) = match &safety {
        PatchSafety::AutoApprove { sandboxed: true } => (
            Decision::Allow,
            format!(
                "auto-approve: every path is writable under {}; applied in the sandbox",
                mode.as_str()
            ),
        ),
        PatchSafety::AutoApprove { sandboxed: false } => (
            Decision::Allow,
            format!("auto-approve: {} confines nothing", mode.as_str()),
        ),
        PatchSafety::AskUser => {
            let outside = paths.iter().filter(|(_, writable)| !writable).count();
            let why = if approval == ApprovalPolicy::Untrusted {
                "--approval untrusted asks about every patch".to_string()
            } else if outside > 0 {
                format!("{outside} path(s) not writable under {}", mode.as_str())
            } else {
                "no sandbox can hold it here (no Landlock)".to_string()
            };
            (Decision::Prompt, format!("ask: {why}"))
        }
        PatchSafety::Reject { reason } => (Decision::Forbidden, format!("reject: {reason}")),
    };
    let style = decision_style(Some(decision));
    println!(
        "{style}{said}{style:#}  {dim}(approval {approval}, sandbox {}){dim:#}",
        mode.as_str()
    );
    for (path, writable) in &paths {
        println!(
            "  {} {}",
            if *writable {
                "writable    "
            } else {
                "not writable"
            },
            path.display()
        );
    }
    if mode == SandboxMode::WorkspaceWrite {
        let shown: Vec<String> = roots.iter().map(|r| r.root.display().to_string()).collect();
        println!(
            "  {dim}writable roots: {} (their .git and .codex stay read-only; --writable DIR adds one){dim:#}",
            shown.join(", ")
        );
    }
    ExitCode::SUCCESS
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
