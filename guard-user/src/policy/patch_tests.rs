//! Patch safety: the `apply_patch` format's paths, judged against the sandbox modes with the
//! reference's answers and reasons.

use super::*;
use crate::policy::sandbox::writable_roots;

const INSIDE: &str = "*** Begin Patch
*** Add File: notes/new.txt
+hello
*** Update File: src/lib.rs
@@ fn main
-old
+new
*** End Patch
";

const OUTSIDE: &str = "*** Begin Patch
*** Update File: /etc/hosts
+127.0.0.1 evil
*** End Patch
";

const ESCAPING: &str = "*** Begin Patch
*** Update File: src/lib.rs
*** Move to: ../../elsewhere/lib.rs
+x
*** End Patch
";

fn assess(patch: &str, approval: ApprovalPolicy, sandbox: SandboxMode) -> PatchSafety {
    let cwd = Path::new("/work/project");
    let roots = writable_roots(sandbox, cwd, None, &[]);
    let changes = parse_patch(patch).expect("the test patch parses");
    assess_patch(
        &changes,
        &PatchContext {
            approval,
            sandbox,
            roots: &roots,
            cwd,
            sandbox_available: true,
        },
    )
    .0
}

fn reject(reason: &str) -> PatchSafety {
    PatchSafety::Reject {
        reason: reason.to_string(),
    }
}

#[test]
fn a_patch_inside_the_workspace_is_auto_approved_in_the_sandbox() {
    assert_eq!(
        assess(
            INSIDE,
            ApprovalPolicy::OnRequest,
            SandboxMode::WorkspaceWrite
        ),
        PatchSafety::AutoApprove { sandboxed: true }
    );
    assert_eq!(
        assess(
            INSIDE,
            ApprovalPolicy::OnRequest,
            SandboxMode::DangerFullAccess
        ),
        PatchSafety::AutoApprove { sandboxed: false }
    );
    assert_eq!(
        assess(
            INSIDE,
            ApprovalPolicy::Untrusted,
            SandboxMode::WorkspaceWrite
        ),
        PatchSafety::AskUser
    );
}

#[test]
fn outside_or_escaping_paths_ask_or_are_rejected_with_the_references_reason() {
    for patch in [OUTSIDE, ESCAPING] {
        assert_eq!(
            assess(
                patch,
                ApprovalPolicy::OnRequest,
                SandboxMode::WorkspaceWrite
            ),
            PatchSafety::AskUser
        );
        assert_eq!(
            assess(patch, ApprovalPolicy::Never, SandboxMode::WorkspaceWrite),
            reject("writing outside of the project; rejected by user approval settings")
        );
    }
    assert_eq!(
        assess(
            INSIDE,
            ApprovalPolicy::Granular {
                sandbox_approval: false,
                rules: true
            },
            SandboxMode::ReadOnly
        ),
        reject("writing is blocked by read-only sandbox; rejected by user approval settings")
    );
    // on-failure approves whatever the paths, in the sandbox.
    assert_eq!(
        assess(
            OUTSIDE,
            ApprovalPolicy::OnFailure,
            SandboxMode::WorkspaceWrite
        ),
        PatchSafety::AutoApprove { sandboxed: true }
    );
}

#[test]
fn an_empty_patch_is_rejected_and_a_broken_one_names_its_line() {
    assert_eq!(
        assess(
            "*** Begin Patch\n*** End Patch\n",
            ApprovalPolicy::OnRequest,
            SandboxMode::WorkspaceWrite
        ),
        reject("empty patch")
    );
    let err = parse_patch("*** Begin Patch\n*** Frobnicate: x\n*** End Patch\n").unwrap_err();
    assert_eq!(err.line, 2, "{err}");
    let err = parse_patch("*** Begin Patch\n*** Add File: a\n+x\n").unwrap_err();
    assert!(err.message.contains("End Patch"), "{err}");
    let err = parse_patch("diff --git a/x b/x\n").unwrap_err();
    assert_eq!(err.line, 1);
}

#[test]
fn a_move_writes_its_destination_too() {
    let changes = parse_patch(ESCAPING).unwrap();
    assert_eq!(
        changes,
        vec![PatchChange::Update {
            path: "src/lib.rs".into(),
            move_to: Some("../../elsewhere/lib.rs".into()),
        }]
    );
    assert_eq!(changes[0].written().len(), 2);
}
