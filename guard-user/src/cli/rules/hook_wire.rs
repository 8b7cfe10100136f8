//! The JSON a Claude Code `PreToolUse` hook reads and answers, as Claude Code's hooks reference
//! documents it (<https://code.claude.com/docs/en/hooks>, "PreToolUse input" and "PreToolUse
//! decision control"). Only the fields guard uses are named; the others are accepted and ignored,
//! so a field Claude Code adds later does not break the hook.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The event name a `PreToolUse` hook is called with and answers with.
pub const PRE_TOOL_USE: &str = "PreToolUse";

/// The tool whose calls guard decides: Claude Code's shell tool.
pub const BASH_TOOL: &str = "Bash";

/// One hook call's input on stdin: the common fields (`session_id`, `transcript_path`, `cwd`,
/// `permission_mode`, `hook_event_name`) and the event's own (`tool_name`, `tool_input`,
/// `tool_use_id`).
#[derive(Deserialize, Debug)]
pub struct HookInput {
    /// `PreToolUse` for this hook; anything else means it is wired under another event.
    pub hook_event_name: Option<String>,
    pub tool_name: String,
    /// The tool's arguments; their shape depends on the tool.
    #[serde(default)]
    pub tool_input: Value,
}

/// The Bash tool's arguments: `command` (the shell script it runs), and `description`,
/// `timeout`, `run_in_background`, which guard does not need.
#[derive(Deserialize, Debug)]
pub struct BashToolInput {
    pub command: String,
}

/// A `PreToolUse` hook's answer on stdout (exit 0).
#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct HookOutput {
    #[serde(rename = "hookSpecificOutput")]
    pub hook_specific_output: PermissionAnswer,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PermissionAnswer {
    /// Always [`PRE_TOOL_USE`].
    pub hook_event_name: &'static str,
    pub permission_decision: PermissionDecision,
    /// For `ask`, shown to the person asked; for `deny`, shown to Claude; for `allow`, to the
    /// person (not to Claude).
    pub permission_decision_reason: String,
}

/// `allow` runs the call without a permission prompt, `ask` shows the prompt, `deny` refuses
/// it and tells Claude why.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PermissionDecision {
    Allow,
    Ask,
    Deny,
}

impl HookOutput {
    pub fn new(decision: PermissionDecision, reason: String) -> Self {
        HookOutput {
            hook_specific_output: PermissionAnswer {
                hook_event_name: PRE_TOOL_USE,
                permission_decision: decision,
                permission_decision_reason: reason,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_has_the_documented_shape() {
        let answer = HookOutput::new(PermissionDecision::Deny, "no".to_string());
        assert_eq!(
            serde_json::to_value(&answer).unwrap(),
            serde_json::json!({"hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "no",
            }})
        );
    }

    #[test]
    fn unknown_input_fields_are_ignored() {
        let input: HookInput = serde_json::from_str(
            r#"{"session_id":"s","tool_name":"Bash","tool_input":{"command":"ls","timeout":5},
                "tool_use_id":"t","permission_mode":"default","hook_event_name":"PreToolUse"}"#,
        )
        .unwrap();
        let bash: BashToolInput = serde_json::from_value(input.tool_input).unwrap();
        assert_eq!(bash.command, "ls");
    }
}
