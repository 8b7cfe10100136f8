//! Kubernetes label selectors, with the API's own meaning: every `matchLabels` entry and every
//! `matchExpressions` requirement must hold; an empty selector selects everything. A selector
//! that cannot be understood (an unknown operator, `In` without values) is an error, so the
//! policy carrying it is not accepted rather than selecting too little or too much.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A selector checked once, ready to match label sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Selector {
    /// The selector `selector` says, or why it says nothing a pod could be matched by.
    pub fn parse(selector: &LabelSelector) -> Result<Selector, String> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::In(key.clone(), vec![value.clone()]));
        }
        for expression in selector.match_expressions.iter().flatten() {
            let key = expression.key.clone();
            let values = expression.values.clone().unwrap_or_default();
            let requirement = match expression.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(format!(
                        "podSelector: the {} requirement on {key:?} has no values: list at least one",
                        expression.operator
                    ));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(format!(
                        "podSelector: the {} requirement on {key:?} takes no values: remove them",
                        expression.operator
                    ));
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => {
                    return Err(format!(
                        "podSelector: unknown operator {other:?} on {key:?}: use In, NotIn, \
                         Exists or DoesNotExist"
                    ));
                }
            };
            requirements.push(requirement);
        }
        Ok(Selector { requirements })
    }

    /// Whether a pod with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .iter()
            .all(|requirement| match requirement {
                Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
                Requirement::NotIn(key, values) => {
                    labels.get(key).is_none_or(|v| !values.contains(v))
                }
                Requirement::Exists(key) => labels.contains_key(key),
                Requirement::DoesNotExist(key) => !labels.contains_key(key),
            })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn an_empty_selector_selects_every_pod() {
        let selector = Selector::parse(&LabelSelector::default()).unwrap();
        assert!(selector.matches(&labels(&[])));
        assert!(selector.matches(&labels(&[("app", "x")])));
    }

    #[test]
    fn every_match_label_must_hold_and_a_missing_label_does_not_match() {
        let selector = Selector::parse(&LabelSelector {
            match_labels: Some(labels(&[("app", "agent"), ("tier", "ci")])),
            ..Default::default()
        })
        .unwrap();
        assert!(selector.matches(&labels(&[("app", "agent"), ("tier", "ci"), ("x", "y")])));
        assert!(!selector.matches(&labels(&[("app", "agent")])));
        assert!(!selector.matches(&labels(&[("app", "other"), ("tier", "ci")])));
        assert!(!selector.matches(&labels(&[])));
    }

    #[test]
    fn expressions_have_the_apis_meaning() {
        let selector = Selector::parse(&LabelSelector {
            match_expressions: Some(vec![
                expression("app", "In", &["agent", "ci"]),
                expression("env", "NotIn", &["prod"]),
                expression("team", "Exists", &[]),
                expression("legacy", "DoesNotExist", &[]),
            ]),
            ..Default::default()
        })
        .unwrap();
        assert!(selector.matches(&labels(&[("app", "ci"), ("team", "a")])));
        assert!(selector.matches(&labels(&[("app", "ci"), ("team", "a"), ("env", "dev")])));
        assert!(!selector.matches(&labels(&[("app", "ci"), ("team", "a"), ("env", "prod")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("team", "a")])));
        assert!(!selector.matches(&labels(&[("app", "ci")])));
        assert!(!selector.matches(&labels(&[("app", "ci"), ("team", "a"), ("legacy", "")])));
    }

    #[test]
    fn a_selector_that_cannot_be_understood_is_an_error_that_says_the_fix() {
        for (bad, says) in [
            (expression("app", "Equals", &["x"]), "unknown operator"),
            (expression("app", "In", &[]), "has no values"),
            (expression("app", "Exists", &["x"]), "takes no values"),
        ] {
            let err = Selector::parse(&LabelSelector {
                match_expressions: Some(vec![bad]),
                ..Default::default()
            })
            .unwrap_err();
            assert!(err.contains(says), "{err}");
        }
    }
}
