//! The one-sentence reason a refused or asked command is given (docs/policy-language.md §5.2), e.g.
//! `` `git push origin main` requires approval: changes a remote ``.

use super::evaluate::Evaluation;
use super::examples::render_example;
use super::rule::{Decision, RuleMatch};

/// The reason for a `forbidden` or `prompt` evaluation of `argv`; `None` for other decisions and
/// for a prompt that only the fallback gave.
///
/// The deciding rule is the matched rule of that decision with the longest prefix; on ties the
/// last one, as the reference's "maximum by key" picks. When only a rule set decided, its
/// pattern is named.
pub fn decision_reason(argv: &[String], evaluation: &Evaluation) -> Option<String> {
    let decision = evaluation.decision?;
    let command = render_example(argv);
    let deciding = evaluation
        .matched_rules
        .iter()
        .filter_map(|found| match found {
            RuleMatch::PrefixRuleMatch {
                matched_prefix,
                decision: rule_decision,
                justification,
                ..
            } if *rule_decision == decision => Some((matched_prefix, justification)),
            _ => None,
        })
        .fold(
            None,
            |best: Option<(&Vec<String>, &Option<String>)>, candidate| match best {
                Some(best) if best.0.len() > candidate.0.len() => Some(best),
                _ => Some(candidate),
            },
        );
    match (decision, deciding) {
        (Decision::Forbidden, Some((_, Some(justification)))) => {
            Some(format!("`{command}` rejected: {justification}"))
        }
        (Decision::Forbidden, Some((prefix, None))) => Some(format!(
            "`{command}` rejected: policy forbids commands starting with `{}`",
            render_example(prefix)
        )),
        (Decision::Forbidden, None) => Some(
            match (
                rule_set_pattern(evaluation, decision),
                legacy_reason(evaluation),
            ) {
                (Some(pattern), _) => format!("`{command}` rejected: rule_set denies `{pattern}`"),
                (None, Some(reason)) => format!("`{command}` rejected: {reason}"),
                (None, None) => format!("`{command}` rejected: blocked by policy"),
            },
        ),
        (Decision::Prompt, Some((_, Some(justification)))) => {
            Some(format!("`{command}` requires approval: {justification}"))
        }
        (Decision::Prompt, Some((_, None))) => {
            Some(format!("`{command}` requires approval by policy"))
        }
        (Decision::Prompt, None) => rule_set_pattern(evaluation, decision)
            .map(|pattern| format!("`{command}` requires approval: rule_set asks for `{pattern}`")),
        (Decision::Allow, _) => None,
    }
}

/// The reason of the first legacy policy match.
fn legacy_reason(evaluation: &Evaluation) -> Option<&str> {
    evaluation
        .matched_rules
        .iter()
        .find_map(|found| match found {
            RuleMatch::LegacyMatch { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
}

/// The pattern of the first rule-set match of `decision`, when no prefix rule of it decided.
fn rule_set_pattern(evaluation: &Evaluation, decision: Decision) -> Option<&str> {
    evaluation
        .matched_rules
        .iter()
        .find_map(|found| match found {
            RuleMatch::RuleSetMatch {
                pattern,
                decision: rule_decision,
                ..
            } if *rule_decision == decision => Some(pattern.as_str()),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyParser;

    fn argv(text: &str) -> Vec<String> {
        shlex::split(text).unwrap()
    }

    fn reason(rules: &str, cmd: &str) -> Option<String> {
        let mut parser = PolicyParser::new();
        parser.parse("r.rules", rules).unwrap();
        let policy = parser.build();
        let forbid: &dyn Fn(&[String]) -> Decision = &|_| Decision::Forbidden;
        decision_reason(&argv(cmd), &policy.check(&argv(cmd), Some(forbid)))
    }

    #[test]
    fn reasons_name_the_longest_matching_rule_and_the_last_on_ties() {
        let rules = r#"
prefix_rule(pattern=["git"], decision="forbidden", justification="short")
prefix_rule(pattern=["git", "push"], decision="forbidden")
prefix_rule(pattern=["git", "push"], decision="forbidden", justification="last of two")
prefix_rule(pattern=["npm"], decision="prompt", justification="installs code")
prefix_rule(pattern=["pip"], decision="prompt")
prefix_rule(pattern=["rm"], decision="forbidden")
"#;
        assert_eq!(
            reason(rules, "git push origin main").unwrap(),
            "`git push origin main` rejected: last of two"
        );
        assert_eq!(
            reason(rules, "rm -rf 'a b'").unwrap(),
            "`rm -rf 'a b'` rejected: policy forbids commands starting with `rm`"
        );
        assert_eq!(
            reason(rules, "npm i").unwrap(),
            "`npm i` requires approval: installs code"
        );
        assert_eq!(
            reason(rules, "pip install x").unwrap(),
            "`pip install x` requires approval by policy"
        );
        assert_eq!(
            reason(rules, "ls").unwrap(),
            "`ls` rejected: blocked by policy"
        );
    }
}
