//! The approval requirement under each approval policy: the reference's decisions, reasons and
//! amendments for rules, heuristics, dangerous commands and proposed prefixes.

use super::*;
use crate::policy::PolicyParser;

fn parse(src: &str) -> Policy {
    let mut parser = PolicyParser::new();
    parser.parse("test.rules", src).expect("test policy parses");
    parser.build()
}

fn argv(text: &str) -> Vec<String> {
    shlex::split(text).unwrap()
}

const RULES: &str = r#"
prefix_rule(pattern=["git", "push"], decision="prompt", justification="pushes go through CI")
prefix_rule(pattern=["rm", "-rf", "/"], decision="forbidden")
prefix_rule(pattern=["cargo", "build"], decision="allow")
"#;

fn requirement(policy: ApprovalPolicy, command: &str) -> ApprovalRequirement {
    requirement_with(policy, SandboxProfile::Restricted, false, command, None)
}

fn requirement_with(
    policy: ApprovalPolicy,
    sandbox: SandboxProfile,
    sandbox_override: bool,
    command: &str,
    proposed: Option<&str>,
) -> ApprovalRequirement {
    let argv = argv(command);
    let proposed = proposed.map(argv_of);
    approval_requirement(
        &parse(RULES),
        &ApprovalRequest {
            argv: &argv,
            policy,
            sandbox,
            sandbox_override,
            proposed_prefix: proposed.as_deref(),
        },
    )
}

fn argv_of(text: &str) -> Vec<String> {
    argv(text)
}

fn forbidden(reason: &str) -> ApprovalRequirement {
    ApprovalRequirement::Forbidden {
        reason: reason.to_string(),
    }
}

#[test]
fn a_prompt_rule_asks_with_its_justification_and_never_refuses_it_with_the_references_reason() {
    assert_eq!(
        requirement(ApprovalPolicy::OnRequest, "git push origin main"),
        ApprovalRequirement::NeedsApproval {
            reason: Some("`git push origin main` requires approval: pushes go through CI".into()),
            amendment: None,
        }
    );
    assert_eq!(
        requirement(ApprovalPolicy::Never, "git push origin main"),
        forbidden("approval required by policy, but AskForApproval is set to Never")
    );
}

#[test]
fn granular_refuses_the_category_that_is_false_and_the_rule_category_comes_first() {
    let granular = |sandbox_approval, rules| ApprovalPolicy::Granular {
        sandbox_approval,
        rules,
    };
    assert_eq!(
        requirement(granular(false, false), "git push"),
        forbidden("approval required by policy rule, but AskForApproval::Granular.rules is false")
    );
    assert_eq!(
        requirement(granular(false, true), "git push"),
        forbidden(
            "approval required by policy, but AskForApproval::Granular.sandbox_approval is false"
        )
    );
    assert!(matches!(
        requirement(granular(true, true), "git push"),
        ApprovalRequirement::NeedsApproval { .. }
    ));
    // A heuristic prompt (dangerous) is not a rule's: rules=false does not refuse it.
    assert!(matches!(
        requirement(granular(true, false), "rm -f x"),
        ApprovalRequirement::NeedsApproval { .. }
    ));
}

#[test]
fn a_forbidden_rule_wins_in_every_mode() {
    for policy in [
        ApprovalPolicy::Untrusted,
        ApprovalPolicy::OnRequest,
        ApprovalPolicy::OnFailure,
        ApprovalPolicy::Never,
    ] {
        assert_eq!(
            requirement(policy, "rm -rf /"),
            forbidden("`rm -rf /` rejected: policy forbids commands starting with `rm -rf /`"),
            "{policy}"
        );
    }
}

#[test]
fn untrusted_runs_only_known_safe_commands_without_asking() {
    assert_eq!(
        requirement(ApprovalPolicy::Untrusted, "ls -la"),
        ApprovalRequirement::Skip {
            bypass_sandbox: false,
            amendment: Some(argv("ls -la")),
        }
    );
    assert_eq!(
        requirement(ApprovalPolicy::Untrusted, "make test"),
        ApprovalRequirement::NeedsApproval {
            reason: None,
            amendment: Some(argv("make test")),
        }
    );
    // On request, an unmatched command runs in the sandbox.
    assert_eq!(
        requirement(ApprovalPolicy::OnRequest, "make test"),
        ApprovalRequirement::Skip {
            bypass_sandbox: false,
            amendment: Some(argv("make test")),
        }
    );
}

#[test]
fn an_explicit_allow_bypasses_the_sandbox_and_offers_no_amendment() {
    assert_eq!(
        requirement(ApprovalPolicy::OnRequest, "cargo build --release"),
        ApprovalRequirement::Skip {
            bypass_sandbox: true,
            amendment: None,
        }
    );
}

#[test]
fn a_dangerous_command_asks_and_under_never_is_refused_unless_unconfined() {
    assert!(matches!(
        requirement(ApprovalPolicy::OnRequest, "rm -f notes.txt"),
        ApprovalRequirement::NeedsApproval { reason: None, .. }
    ));
    assert_eq!(
        requirement(ApprovalPolicy::Never, "rm -f notes.txt"),
        forbidden("`rm -f notes.txt` rejected: blocked by policy")
    );
    assert!(matches!(
        requirement_with(
            ApprovalPolicy::Never,
            SandboxProfile::Unrestricted,
            false,
            "rm -f notes.txt",
            None
        ),
        ApprovalRequirement::Skip { .. }
    ));
}

#[test]
fn an_escalation_in_a_restricted_sandbox_asks_on_request() {
    assert!(matches!(
        requirement_with(
            ApprovalPolicy::OnRequest,
            SandboxProfile::Restricted,
            true,
            "make install",
            None
        ),
        ApprovalRequirement::NeedsApproval { .. }
    ));
    assert!(matches!(
        requirement_with(
            ApprovalPolicy::OnRequest,
            SandboxProfile::Unrestricted,
            true,
            "make install",
            None
        ),
        ApprovalRequirement::Skip { .. }
    ));
}

#[test]
fn a_proposed_prefix_is_kept_only_when_not_banned_and_it_would_allow_the_command() {
    let asked = |proposed| {
        requirement_with(
            ApprovalPolicy::Untrusted,
            SandboxProfile::Restricted,
            false,
            "python3 -c 'print(1)'",
            Some(proposed),
        )
    };
    // Banned exactly: the heuristics' own argv is offered instead.
    assert_eq!(
        asked("python3 -c"),
        ApprovalRequirement::NeedsApproval {
            reason: None,
            amendment: Some(argv("python3 -c 'print(1)'")),
        }
    );
    // Longer than a banned prefix, and it covers the command: kept.
    assert_eq!(
        asked("python3 -c 'print(1)'"),
        ApprovalRequirement::NeedsApproval {
            reason: None,
            amendment: Some(argv("python3 -c 'print(1)'")),
        }
    );
    // A prefix that does not cover the command is dropped.
    let dropped = requirement_with(
        ApprovalPolicy::Untrusted,
        SandboxProfile::Restricted,
        false,
        "make test",
        Some("make install"),
    );
    assert_eq!(
        dropped,
        ApprovalRequirement::NeedsApproval {
            reason: None,
            amendment: Some(argv("make test")),
        }
    );
    // A rule matched already: no requested amendment.
    assert_eq!(
        requirement_with(
            ApprovalPolicy::OnRequest,
            SandboxProfile::Restricted,
            false,
            "git push origin",
            Some("git push origin"),
        ),
        ApprovalRequirement::NeedsApproval {
            reason: Some("`git push origin` requires approval: pushes go through CI".into()),
            amendment: None,
        }
    );
}

#[test]
fn a_proposed_prefix_refusal_says_why() {
    let policy = parse(RULES);
    let command = argv("git push origin main");
    let request = ApprovalRequest {
        argv: &command,
        ..Default::default()
    };
    let banned = proposed_prefix_refusal(&policy, &request, &argv("git")).unwrap();
    assert!(banned.contains("banned prefix"), "{banned}");
    let outvoted = proposed_prefix_refusal(&policy, &request, &argv("git push")).unwrap();
    assert!(outvoted.contains("would not allow"), "{outvoted}");
    let make = argv("make test");
    let request = ApprovalRequest {
        argv: &make,
        ..Default::default()
    };
    assert_eq!(
        proposed_prefix_refusal(&policy, &request, &argv("make")),
        None
    );
}

#[test]
fn approval_policies_parse_as_the_reference_names_them() {
    assert_eq!("never".parse(), Ok(ApprovalPolicy::Never));
    assert_eq!("on-request".parse(), Ok(ApprovalPolicy::OnRequest));
    assert_eq!(
        "granular:rules=false".parse(),
        Ok(ApprovalPolicy::Granular {
            sandbox_approval: true,
            rules: false
        })
    );
    assert!("granular:bogus=1".parse::<ApprovalPolicy>().is_err());
    assert!("never:rules=false".parse::<ApprovalPolicy>().is_err());
    assert!("sometimes".parse::<ApprovalPolicy>().is_err());
}
