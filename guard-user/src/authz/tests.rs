//! The authorization engine, bullet by bullet of its specification.

use std::collections::BTreeMap;

use super::*;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn policy(json: &str) -> AuthzPolicy {
    AuthzPolicy::from_json(json).unwrap_or_else(|err| panic!("policy does not parse: {err}"))
}

/// A policy of one rule `{"effect": "allow", "actions": ["*"], "when": WHEN}`.
fn allow_when(when: &str) -> AuthzPolicy {
    policy(&format!(
        r#"{{"rules": [{{"effect": "allow", "actions": ["*"], "when": {when}}}]}}"#
    ))
}

fn attrs(pairs: &[(&str, &[&str])]) -> Attributes {
    pairs
        .iter()
        .map(|(key, values)| {
            (
                key.to_string(),
                values.iter().map(|v| v.to_string()).collect(),
            )
        })
        .collect()
}

fn subject(sub: &str, pairs: &[(&str, &[&str])]) -> Subject {
    Subject {
        sub: sub.to_string(),
        email: None,
        attrs: attrs(pairs),
    }
}

fn with_email(mut subject: Subject, email: &str) -> Subject {
    subject.email = Some(email.to_string());
    subject
}

/// Whether `policy` allows `subject` the action `status` (no entity, resource or env).
fn allows(policy: &AuthzPolicy, subject: &Subject) -> bool {
    policy.evaluate(&Request::new(subject, "status")).allowed
}

fn error_text(json: &str) -> String {
    match AuthzPolicy::from_json(json) {
        Ok(policy) => panic!("expected an error, got {policy:?}"),
        Err(err) => err.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Order, actions, no match
// ---------------------------------------------------------------------------------------------

#[test]
fn the_first_matching_rule_decides_a_deny_before_an_allow() {
    let policy = policy(
        r#"{"rules": [
            {"effect": "deny", "actions": ["approve"], "when": {"groups": ["interns"]}},
            {"effect": "allow", "actions": ["*"], "when": {"groups": ["staff"]}}
        ]}"#,
    );
    let intern = subject("ann", &[("groups", &["staff", "interns"])]);
    let decision = policy.evaluate(&Request::new(&intern, "approve"));
    assert_eq!(
        decision,
        AuthzDecision {
            allowed: false,
            rule: Some(0),
            obligations: vec![]
        }
    );
    // The deny rule does not cover `status`, so the allow rule decides that.
    let decision = policy.evaluate(&Request::new(&intern, "status"));
    assert_eq!(
        decision,
        AuthzDecision {
            allowed: true,
            rule: Some(1),
            obligations: vec![]
        }
    );
}

#[test]
fn an_allow_before_a_deny_wins_too() {
    let policy = policy(
        r#"{"rules": [
            {"effect": "allow", "actions": ["status"]},
            {"effect": "deny", "actions": ["*"]}
        ]}"#,
    );
    let anyone = subject("bob", &[]);
    assert_eq!(
        policy.evaluate(&Request::new(&anyone, "status")).rule,
        Some(0)
    );
    let decision = policy.evaluate(&Request::new(&anyone, "reload"));
    assert_eq!((decision.allowed, decision.rule), (false, Some(1)));
}

#[test]
fn no_matching_rule_refuses() {
    let policy = policy(
        r#"{"rules": [{"effect": "allow", "actions": ["status"], "when": {"groups": ["ops"]}}]}"#,
    );
    let outsider = subject("eve", &[("groups", &["dev"])]);
    assert_eq!(
        policy.evaluate(&Request::new(&outsider, "status")),
        AuthzDecision::refused()
    );
    assert_eq!(
        AuthzDecision::refused(),
        AuthzDecision {
            allowed: false,
            rule: None,
            obligations: vec![]
        }
    );
    // An empty policy refuses everything.
    assert_eq!(
        AuthzPolicy::default().evaluate(&Request::new(&outsider, "status")),
        AuthzDecision::refused()
    );
}

#[test]
fn actions_are_star_or_exact_names() {
    let policy = policy(r#"{"rules": [{"effect": "allow", "actions": ["prompts", "approve"]}]}"#);
    let anyone = subject("bob", &[]);
    for (action, allowed) in [
        ("prompts", true),
        ("approve", true),
        ("approv", false),
        ("approve ", false),
        ("APPROVE", false),
        ("status", false),
        ("*", false),
    ] {
        assert_eq!(
            policy.evaluate(&Request::new(&anyone, action)).allowed,
            allowed,
            "action {action:?}"
        );
    }
    let star = policy_with_actions(r#"["*"]"#);
    for action in ["status", "run", "anything-new"] {
        assert!(
            star.evaluate(&Request::new(&anyone, action)).allowed,
            "{action}"
        );
    }
    // No actions: the rule covers nothing.
    let none = policy_with_actions("[]");
    assert!(!none.evaluate(&Request::new(&anyone, "status")).allowed);
}

fn policy_with_actions(actions: &str) -> AuthzPolicy {
    policy(&format!(
        r#"{{"rules": [{{"effect": "allow", "actions": {actions}}}]}}"#
    ))
}

// ---------------------------------------------------------------------------------------------
// Conditions
// ---------------------------------------------------------------------------------------------

#[test]
fn a_value_list_matches_any_of_its_values() {
    let policy = allow_when(r#"{"role": ["write", "admin"]}"#);
    assert!(allows(&policy, &subject("a", &[("role", &["write"])])));
    assert!(allows(
        &policy,
        &subject("a", &[("role", &["read", "admin"])])
    ));
    assert!(!allows(&policy, &subject("a", &[("role", &["read"])])));
    assert!(!allows(&policy, &subject("a", &[])));
}

#[test]
fn when_is_a_conjunction_of_its_keys() {
    let policy = allow_when(r#"{"role": ["admin"], "team": ["infra"]}"#);
    assert!(allows(
        &policy,
        &subject("a", &[("role", &["admin"]), ("team", &["infra"])])
    ));
    assert!(!allows(&policy, &subject("a", &[("role", &["admin"])])));
    assert!(!allows(&policy, &subject("a", &[("team", &["infra"])])));
}

#[test]
fn an_empty_value_list_never_matches() {
    let policy = allow_when(r#"{"role": []}"#);
    assert!(!allows(&policy, &subject("a", &[("role", &["admin"])])));
    assert!(!allows(&policy, &subject("a", &[("role", &[])])));
    assert!(!allows(&policy, &subject("a", &[])));
}

#[test]
fn an_empty_when_matches_every_subject() {
    let written = allow_when("{}");
    let left_out = policy(r#"{"rules": [{"effect": "allow", "actions": ["*"]}]}"#);
    for policy in [written, left_out] {
        assert!(allows(&policy, &subject("a", &[])));
        assert!(allows(&policy, &subject("b", &[("groups", &["x"])])));
    }
}

#[test]
fn negation_matches_when_the_subject_lacks_the_value() {
    let policy = allow_when(r#"{"groups": ["!banned"]}"#);
    assert!(allows(&policy, &subject("a", &[("groups", &["staff"])])));
    assert!(!allows(
        &policy,
        &subject("a", &[("groups", &["staff", "banned"])])
    ));
    // Lacking the attribute entirely, or having it with no values, is lacking the value.
    assert!(allows(&policy, &subject("a", &[])));
    assert!(allows(&policy, &subject("a", &[("groups", &[])])));
}

#[test]
fn negated_and_plain_values_in_one_list_are_ored() {
    let policy = allow_when(r#"{"groups": ["!a", "b"]}"#);
    assert!(allows(&policy, &subject("s", &[])), "lacks a");
    assert!(
        allows(&policy, &subject("s", &[("groups", &["a", "b"])])),
        "has b"
    );
    assert!(
        !allows(&policy, &subject("s", &[("groups", &["a"])])),
        "has a, lacks b"
    );
}

#[test]
fn only_one_leading_bang_negates() {
    // `!!a` is "lacks the value `!a`".
    let policy = allow_when(r#"{"tag": ["!!a"]}"#);
    assert!(allows(&policy, &subject("s", &[("tag", &["a"])])));
    assert!(!allows(&policy, &subject("s", &[("tag", &["!a"])])));
}

#[test]
fn conditions_compare_exactly() {
    let policy = allow_when(r#"{"uid": ["0"]}"#);
    for uid in ["00", " 0", "0 ", ""] {
        assert!(
            !allows(&policy, &subject("s", &[("uid", &[uid])])),
            "{uid:?}"
        );
    }
    assert!(allows(&policy, &subject("s", &[("uid", &["0"])])));
}

// ---------------------------------------------------------------------------------------------
// Reserved keys
// ---------------------------------------------------------------------------------------------

#[test]
fn sub_and_email_resolve_from_the_subject_fields() {
    let by_sub = allow_when(r#"{"sub": ["alice"]}"#);
    assert!(allows(&by_sub, &subject("alice", &[])));
    assert!(!allows(&by_sub, &subject("bob", &[])));
    let by_email = allow_when(r#"{"email": ["a@example.org"]}"#);
    assert!(allows(
        &by_email,
        &with_email(subject("alice", &[]), "a@example.org")
    ));
    assert!(!allows(
        &by_email,
        &with_email(subject("alice", &[]), "b@example.org")
    ));
    // A missing email resolves empty: a positive value fails, a negated one holds.
    assert!(!allows(&by_email, &subject("alice", &[])));
    let not_email = allow_when(r#"{"email": ["!a@example.org"]}"#);
    assert!(allows(&not_email, &subject("alice", &[])));
}

#[test]
fn reserved_keys_cannot_be_shadowed_by_attrs() {
    let impostor = Subject {
        sub: "mallory".to_string(),
        email: None,
        attrs: attrs(&[
            ("sub", &["root"]),
            ("email", &["root@example.org"]),
            ("entity", &["policy"]),
        ]),
    };
    assert!(!allows(&allow_when(r#"{"sub": ["root"]}"#), &impostor));
    assert!(!allows(
        &allow_when(r#"{"email": ["root@example.org"]}"#),
        &impostor
    ));
    assert!(!allows(&allow_when(r#"{"entity": ["policy"]}"#), &impostor));
    // ... and negations see the real fields, not the attrs.
    assert!(allows(&allow_when(r#"{"sub": ["!root"]}"#), &impostor));
    assert!(allows(&allow_when(r#"{"entity": ["!policy"]}"#), &impostor));
}

#[test]
fn entity_resolves_from_the_request() {
    let policy = allow_when(r#"{"entity": ["prompt"]}"#);
    let anyone = subject("a", &[]);
    assert!(
        policy
            .evaluate(&Request::new(&anyone, "approve").with_entity("prompt"))
            .allowed
    );
    assert!(
        !policy
            .evaluate(&Request::new(&anyone, "approve").with_entity("policy"))
            .allowed
    );
    // No entity resolves empty.
    assert!(!policy.evaluate(&Request::new(&anyone, "approve")).allowed);
    let not_policy = allow_when(r#"{"entity": ["!policy"]}"#);
    assert!(
        not_policy
            .evaluate(&Request::new(&anyone, "approve"))
            .allowed
    );
}

// ---------------------------------------------------------------------------------------------
// resource. and env.
// ---------------------------------------------------------------------------------------------

#[test]
fn resource_and_env_keys_resolve_against_the_request() {
    let policy = allow_when(r#"{"resource.kind": ["log"], "env.transport": ["unix"]}"#);
    let anyone = subject("a", &[]);
    let resource = attrs(&[("kind", &["log", "trace"])]);
    let env = attrs(&[("transport", &["unix"])]);
    let request = Request::new(&anyone, "audit")
        .with_resource(&resource)
        .with_env(&env);
    assert!(policy.evaluate(&request).allowed);
    let tcp = attrs(&[("transport", &["tcp"])]);
    assert!(!policy.evaluate(&request.with_env(&tcp)).allowed);
}

#[test]
fn resource_and_env_are_disjoint_from_subject_attrs() {
    let policy = allow_when(r#"{"resource.owner": ["alice"]}"#);
    let sneaky = subject(
        "alice",
        &[("resource.owner", &["alice"]), ("owner", &["alice"])],
    );
    assert!(!allows(&policy, &sneaky));
    let env_policy = allow_when(r#"{"env.transport": ["unix"]}"#);
    let sneaky = subject(
        "alice",
        &[("env.transport", &["unix"]), ("transport", &["unix"])],
    );
    assert!(!allows(&env_policy, &sneaky));
    // And the other way: a resource attribute does not satisfy a subject condition.
    let subject_policy = allow_when(r#"{"owner": ["alice"]}"#);
    let resource = attrs(&[("owner", &["alice"])]);
    let plain = subject("alice", &[]);
    assert!(
        !subject_policy
            .evaluate(&Request::new(&plain, "audit").with_resource(&resource))
            .allowed
    );
    // resource and env do not stand in for one another.
    let env = attrs(&[("owner", &["alice"])]);
    assert!(
        !policy
            .evaluate(&Request::new(&plain, "audit").with_env(&env))
            .allowed
    );
}

#[test]
fn absent_resource_and_env_resolve_empty() {
    let anyone = subject("a", &[]);
    for key in ["resource.owner", "env.transport"] {
        let positive = allow_when(&format!(r#"{{"{key}": ["x"]}}"#));
        assert!(!allows(&positive, &anyone), "{key} positive");
        let negated = allow_when(&format!(r#"{{"{key}": ["!x"]}}"#));
        assert!(allows(&negated, &anyone), "{key} negated");
        let template = allow_when(&format!(r#"{{"{key}": ["$sub"]}}"#));
        assert!(!allows(&template, &anyone), "{key} $sub");
    }
}

// ---------------------------------------------------------------------------------------------
// Templates
// ---------------------------------------------------------------------------------------------

fn owned_by(owner: &str) -> Attributes {
    attrs(&[("owner", &[owner])])
}

fn allows_on(policy: &AuthzPolicy, subject: &Subject, resource: &Attributes) -> bool {
    policy
        .evaluate(&Request::new(subject, "audit").with_resource(resource))
        .allowed
}

#[test]
fn sub_template_matches_the_callers_own_record() {
    let policy = allow_when(r#"{"resource.owner": ["$sub"]}"#);
    let alice = subject("alice", &[]);
    assert!(allows_on(&policy, &alice, &owned_by("alice")));
    assert!(!allows_on(&policy, &alice, &owned_by("bob")));
    assert!(!allows_on(&policy, &alice, &owned_by("$sub")));
}

#[test]
fn email_template_matches_the_callers_email_and_nothing_without_one() {
    let policy = allow_when(r#"{"resource.owner": ["$email"]}"#);
    let alice = with_email(subject("alice", &[]), "alice@example.org");
    assert!(allows_on(&policy, &alice, &owned_by("alice@example.org")));
    assert!(!allows_on(&policy, &alice, &owned_by("alice")));
    let no_email = subject("alice", &[]);
    assert!(!allows_on(&policy, &no_email, &owned_by("")));
    assert!(!allows_on(&policy, &no_email, &owned_by("$email")));
    let negated = allow_when(r#"{"resource.owner": ["!$email"]}"#);
    assert!(allows_on(&negated, &no_email, &owned_by("alice")));
    assert!(allows_on(&negated, &no_email, &Attributes::new()));
    assert!(!allows_on(&negated, &alice, &owned_by("alice@example.org")));
    assert!(allows_on(&negated, &alice, &owned_by("bob@example.org")));
}

#[test]
fn negated_sub_template() {
    let policy = allow_when(r#"{"resource.owner": ["!$sub"]}"#);
    let alice = subject("alice", &[]);
    assert!(!allows_on(&policy, &alice, &owned_by("alice")));
    assert!(allows_on(&policy, &alice, &owned_by("bob")));
    assert!(allows_on(&policy, &alice, &Attributes::new()));
}

#[test]
fn values_merely_containing_a_dollar_are_literals() {
    let alice = subject("alice", &[]);
    for literal in ["$subx", "a$sub", "$SUB", " $sub", "$emailx", "$"] {
        let policy = allow_when(&format!(r#"{{"resource.owner": ["{literal}"]}}"#));
        assert!(
            !allows_on(&policy, &alice, &owned_by("alice")),
            "{literal} is not $sub"
        );
        assert!(
            allows_on(&policy, &alice, &owned_by(literal)),
            "{literal} is itself"
        );
    }
}

#[test]
fn templates_work_against_subject_attributes_too() {
    let policy = allow_when(r#"{"delegates": ["$sub"]}"#);
    assert!(allows(
        &policy,
        &subject("alice", &[("delegates", &["bob", "alice"])])
    ));
    assert!(!allows(
        &policy,
        &subject("alice", &[("delegates", &["bob"])])
    ));
}

// ---------------------------------------------------------------------------------------------
// Obligations
// ---------------------------------------------------------------------------------------------

#[test]
fn obligations_are_surfaced_only_when_the_deciding_rule_allows() {
    let policy = policy(
        r#"{"rules": [
            {"effect": "deny", "actions": ["run"], "obligations": ["log"]},
            {"effect": "allow", "actions": ["audit"], "obligations": ["mask", "log"]}
        ]}"#,
    );
    let anyone = subject("a", &[]);
    assert_eq!(
        policy.evaluate(&Request::new(&anyone, "run")),
        AuthzDecision {
            allowed: false,
            rule: Some(0),
            obligations: vec![]
        }
    );
    assert_eq!(
        policy.evaluate(&Request::new(&anyone, "audit")),
        AuthzDecision {
            allowed: true,
            rule: Some(1),
            obligations: vec!["mask".to_string(), "log".to_string()]
        }
    );
}

// ---------------------------------------------------------------------------------------------
// JSON: decisions, subjects, attributes
// ---------------------------------------------------------------------------------------------

#[test]
fn decision_json_shape() {
    let allowed = AuthzDecision {
        allowed: true,
        rule: Some(2),
        obligations: vec!["mask".into()],
    };
    assert_eq!(
        serde_json::to_value(&allowed).unwrap(),
        serde_json::json!({"decision": "allow", "rule": 2, "obligations": ["mask"]})
    );
    assert_eq!(
        serde_json::to_string(&AuthzDecision::refused()).unwrap(),
        r#"{"decision":"deny","rule":null,"obligations":[]}"#
    );
    let back: AuthzDecision =
        serde_json::from_str(&serde_json::to_string(&allowed).unwrap()).unwrap();
    assert_eq!(back, allowed);
}

#[test]
fn subject_json() {
    let subject = Subject::from_json(
        r#"{"sub": "alice", "email": "a@example.org", "attrs": {"groups": ["a", "b"], "uid": "1000"}, "future": 1}"#,
    )
    .unwrap();
    assert_eq!(subject.sub, "alice");
    assert_eq!(subject.email.as_deref(), Some("a@example.org"));
    assert_eq!(
        subject.attrs,
        attrs(&[("groups", &["a", "b"]), ("uid", &["1000"])])
    );
    let minimal = Subject::from_json(r#"{"sub": "bob"}"#).unwrap();
    assert_eq!(
        minimal,
        super::Subject {
            sub: "bob".into(),
            email: None,
            attrs: Attributes::new()
        }
    );
    assert_eq!(
        serde_json::to_value(&subject).unwrap(),
        serde_json::json!({"sub": "alice", "email": "a@example.org", "attrs": {"groups": ["a", "b"], "uid": ["1000"]}})
    );
}

#[test]
fn subject_json_errors() {
    let missing = Subject::from_json(r#"{"email": "a@b"}"#)
        .unwrap_err()
        .to_string();
    assert!(missing.contains("missing field `sub`"), "{missing}");
    assert!(missing.starts_with("line 1, column "), "{missing}");
    assert_eq!(
        Subject::from_json(r#"{"sub": ""}"#)
            .unwrap_err()
            .to_string(),
        AuthzError::EmptySub.to_string()
    );
    let bad_attr = Subject::from_json(r#"{"sub": "a", "attrs": {"uid": 0}}"#)
        .unwrap_err()
        .to_string();
    assert!(
        bad_attr
            .contains(r#"attribute "uid": expected a string or a list of strings, not a number"#),
        "{bad_attr}"
    );
}

#[test]
fn parse_attributes_accepts_strings_and_lists_of_strings() {
    let parsed =
        parse_attributes(r#"{"owner": "alice", "labels": ["a", "b"], "none": []}"#).unwrap();
    assert_eq!(
        parsed,
        attrs(&[
            ("owner", &["alice"]),
            ("labels", &["a", "b"]),
            ("none", &[])
        ])
    );
    assert_eq!(parse_attributes("{}").unwrap(), Attributes::new());
}

#[test]
fn parse_attributes_errors_name_the_key() {
    for (json, expected) in [
        (
            r#"{"owner": 7}"#,
            r#"attribute "owner": expected a string or a list of strings, not a number"#,
        ),
        (
            r#"{"owner": null}"#,
            r#"attribute "owner": expected a string or a list of strings, not null"#,
        ),
        (
            r#"{"owner": {"a": "b"}}"#,
            r#"attribute "owner": expected a string or a list of strings, not an object"#,
        ),
        (
            r#"{"owner": true}"#,
            r#"attribute "owner": expected a string or a list of strings, not a boolean"#,
        ),
        (
            r#"{"tags": ["a", 1]}"#,
            r#"attribute "tags": expected a string or a list of strings, not a list containing a number"#,
        ),
        (
            r#"{"tags": [["a"]]}"#,
            r#"attribute "tags": expected a string or a list of strings, not a list containing a list"#,
        ),
    ] {
        assert_eq!(
            parse_attributes(json).unwrap_err().to_string(),
            expected,
            "{json}"
        );
    }
    let list = parse_attributes(r#"["owner"]"#).unwrap_err().to_string();
    assert!(
        list.starts_with("expected a JSON object of attributes"),
        "{list}"
    );
    assert!(list.ends_with("not a list"), "{list}");
    let syntax = parse_attributes(r#"{"owner": "alice""#).unwrap_err();
    assert!(
        matches!(syntax, AuthzError::Json { line: 1, .. }),
        "{syntax:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Policy JSON: forward compatibility and errors
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_fields_are_ignored_everywhere() {
    let parsed = policy(
        r#"{"version": 2, "comment": "x", "rules": [
            {"effect": "allow", "actions": ["status"], "when": {}, "description": "y", "priority": 3}
        ]}"#,
    );
    assert_eq!(
        parsed,
        AuthzPolicy {
            rules: vec![Rule {
                effect: Effect::Allow,
                actions: vec!["status".into()],
                when: BTreeMap::new(),
                obligations: vec![],
            }]
        }
    );
}

#[test]
fn when_and_obligations_default_empty() {
    let parsed = policy(r#"{"rules": [{"effect": "deny", "actions": ["*"]}]}"#);
    assert!(parsed.rules[0].when.is_empty());
    assert!(parsed.rules[0].obligations.is_empty());
}

#[test]
fn a_bad_effect_is_an_error_naming_the_position_and_the_choices() {
    let text = error_text(r#"{"rules": [{"effect": "permit", "actions": ["*"]}]}"#);
    assert!(text.starts_with("line 1, column "), "{text}");
    assert!(
        text.contains(r#"invalid effect "permit": expected "allow" or "deny""#),
        "{text}"
    );
    let text = error_text(r#"{"rules": [{"effect": "Allow", "actions": ["*"]}]}"#);
    assert!(text.contains(r#"invalid effect "Allow""#), "{text}");
    let text = error_text(r#"{"rules": [{"effect": 1, "actions": ["*"]}]}"#);
    assert!(
        text.ends_with(r#"invalid type: integer `1`, expected "allow" or "deny""#),
        "{text}"
    );
}

#[test]
fn a_missing_effect_or_actions_is_an_error_saying_what_to_write() {
    let text = error_text("{\"rules\": [\n  {\"actions\": [\"*\"]}\n]}");
    assert!(text.starts_with("line 2, column "), "{text}");
    assert!(
        text.contains(r#"a rule needs "effect": "allow" or "deny""#),
        "{text}"
    );
    let text = error_text(r#"{"rules": [{"effect": "allow"}]}"#);
    assert!(text.contains(r#"a rule needs "actions""#), "{text}");
    let text = error_text("{}");
    assert!(text.contains("missing field `rules`"), "{text}");
}

#[test]
fn malformed_policies_name_line_and_column() {
    let err = AuthzPolicy::from_json(
        "{\"rules\": [\n  {\"effect\": \"allow\", \"actions\": [\"*\"],}\n]}",
    )
    .unwrap_err();
    let AuthzError::Json {
        line,
        column,
        message,
    } = &err
    else {
        panic!("expected a JSON error, got {err:?}");
    };
    assert_eq!((*line, *column), (2, 40), "{message}");
    assert!(
        !message.contains(" at line "),
        "the position is not repeated: {message}"
    );
    for (json, expected) in [
        (r#"{"rules": {}}"#, "expected a sequence"),
        (r#"{"rules": ["allow"]}"#, "expected a rule, {\"effect\""),
        (
            r#"{"rules": [["allow", ["*"]]]}"#,
            "expected a rule, {\"effect\"",
        ),
        (
            r#"{"rules": [{"effect": "allow", "effect": "deny", "actions": []}]}"#,
            r#"a rule gives "effect" twice"#,
        ),
        (
            r#"{"rules": [{"effect": "allow", "actions": "*"}]}"#,
            "expected a sequence",
        ),
        (
            r#"{"rules": [{"effect": "allow", "actions": ["*"], "when": {"groups": "admin"}}]}"#,
            r#"invalid type: string "admin", expected a list of values for condition "groups", e.g. ["admin"]"#,
        ),
        (
            r#"{"rules": [{"effect": "allow", "actions": ["*"], "when": {"uid": [0]}}]}"#,
            r#"invalid type: integer `0`, expected a string value for condition "uid""#,
        ),
        (
            r#"{"rules": [{"effect": "allow", "actions": ["*"], "when": ["uid"]}]}"#,
            "expected an object of conditions",
        ),
        (
            r#"{"rules": [{"effect": "allow", "actions": ["*"], "when": {"g": ["a"], "g": ["b"]}}]}"#,
            r#"condition "g" is given twice in "when""#,
        ),
        (
            "\n  [{\"effect\": \"allow\", \"actions\": [\"*\"]}]",
            "not a list: put the rules in \"rules\"",
        ),
        ("", "EOF while parsing"),
    ] {
        let text = error_text(json);
        assert!(text.starts_with("line "), "{json}: {text}");
        assert!(text.contains(expected), "{json}: {text}");
    }
    assert_eq!(
        error_text("\n  [{}]"),
        "line 2, column 3: expected an authorization policy, {\"rules\": [RULE, ...]}, not a list: \
         put the rules in \"rules\""
    );
}

#[test]
fn load_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("authz.json");
    std::fs::write(
        &path,
        "{\"rules\": [\n  {\"effect\": \"maybe\", \"actions\": []}\n]}",
    )
    .unwrap();
    let text = AuthzPolicy::load(&path).unwrap_err().to_string();
    assert!(
        text.starts_with(&format!("{}:2:", path.display())),
        "{text}"
    );
    assert!(text.contains(r#"invalid effect "maybe""#), "{text}");
    let missing = dir.path().join("absent.json");
    let text = AuthzPolicy::load(&missing).unwrap_err().to_string();
    assert!(
        text.starts_with(&format!(
            "{}: cannot read the authorization policy: ",
            missing.display()
        )),
        "{text}"
    );
    std::fs::write(
        &path,
        r#"{"rules": [{"effect": "allow", "actions": ["status"]}]}"#,
    )
    .unwrap();
    assert_eq!(AuthzPolicy::load(&path).unwrap().rules.len(), 1);
}

#[test]
fn rules_serialise_in_the_shape_they_are_read() {
    let original = policy(
        r#"{"rules": [
            {"effect": "deny", "actions": ["run"], "when": {"groups": ["!ops"], "env.transport": ["tcp"]}},
            {"effect": "allow", "actions": ["audit"], "when": {}, "obligations": ["mask"]}
        ]}"#,
    );
    assert_eq!(policy(&original.to_json_pretty()), original);
}

#[test]
fn unknown_actions_are_reported_with_their_rule() {
    let parsed = policy(
        r#"{"rules": [
            {"effect": "allow", "actions": ["*", "status"]},
            {"effect": "allow", "actions": ["aprove", "audit", "stauts"]}
        ]}"#,
    );
    assert_eq!(parsed.unknown_actions(), vec![(1, "aprove"), (1, "stauts")]);
}

#[test]
fn rules_display_in_one_line() {
    let parsed = policy(
        r#"{"rules": [
            {"effect": "allow", "actions": ["audit"], "when": {"entity": ["audit"], "resource.owner": ["$sub"]}},
            {"effect": "deny", "actions": ["*"]},
            {"effect": "deny", "actions": ["run", "amend"], "when": {"groups": ["write", "!admin"], "x": [], "odd key": ["a, b"]}}
        ]}"#,
    );
    let lines: Vec<String> = parsed.rules.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "allow [audit] when entity=audit, resource.owner=$sub",
            "deny [*] for every subject",
            r#"deny [run, amend] when groups=write|!admin, "odd key"="a, b", x=[]"#,
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// The built-in default
// ---------------------------------------------------------------------------------------------

fn local_user(name: &str, uid: &str, groups: &[&str]) -> Subject {
    subject(name, &[("uid", &[uid]), ("groups", groups)])
}

#[test]
fn builtin_has_the_documented_rules() {
    let expected = r#"{"rules": [
        {"effect": "deny", "actions": ["approve", "amend", "reload"], "when": {"in_guard_scope": ["true"]}},
        {"effect": "allow", "actions": ["*"], "when": {"uid": ["0"]}},
        {"effect": "allow", "actions": ["*"], "when": {"groups": ["wheel"]}},
        {"effect": "allow", "actions": ["run"], "when": {"scope": ["none", "host", "run"]}},
        {"effect": "allow", "actions": ["prompts", "approve", "deny"], "when": {"entity": ["prompt"], "resource.owner": ["$sub"], "resource.amends": ["false"]}},
        {"effect": "allow", "actions": ["audit"], "when": {"entity": ["audit"], "resource.owner": ["$sub"]}}
    ]}"#;
    assert_eq!(AuthzPolicy::builtin(Some("wheel")), policy(expected));
    let without_group = AuthzPolicy::builtin(None);
    assert_eq!(without_group.rules.len(), 5);
    assert_eq!(without_group.rules[..2], policy(expected).rules[..2]);
    assert_eq!(without_group.rules[2..], policy(expected).rules[3..]);
    assert!(without_group.unknown_actions().is_empty());
}

#[test]
fn builtin_json_parses_back_as_the_builtin() {
    for group in [None, Some("guard-admins")] {
        let json = builtin_json(group);
        assert!(json.contains('\n'), "pretty: {json}");
        assert_eq!(policy(&json), AuthzPolicy::builtin(group));
    }
}

#[test]
fn builtin_allows_root_everything() {
    let root = local_user("root", "0", &["root"]);
    for policy in [
        AuthzPolicy::builtin(None),
        AuthzPolicy::builtin(Some("wheel")),
    ] {
        for (action, _) in ACTIONS {
            let decision = policy.evaluate(&Request::new(&root, action).with_entity("policy"));
            assert_eq!(
                (decision.allowed, decision.rule),
                (true, Some(1)),
                "{action}"
            );
        }
    }
}

#[test]
fn builtin_allows_the_admin_group_everything_only_when_configured() {
    let admin = local_user("ada", "1001", &["users", "wheel"]);
    let configured = AuthzPolicy::builtin(Some("wheel"));
    for (action, _) in ACTIONS {
        let decision = configured.evaluate(&Request::new(&admin, action));
        assert_eq!(
            (decision.allowed, decision.rule),
            (true, Some(2)),
            "{action}"
        );
    }
    assert!(
        !AuthzPolicy::builtin(None)
            .evaluate(&Request::new(&admin, "approve"))
            .allowed
    );
    assert!(
        !AuthzPolicy::builtin(Some("admins"))
            .evaluate(&Request::new(&admin, "approve"))
            .allowed
    );
}

#[test]
fn builtin_refuses_answers_and_policy_changes_from_inside_a_guard_scope_even_to_root() {
    let scoped_root = subject(
        "root",
        &[
            ("uid", &["0"]),
            ("groups", &["root", "wheel"]),
            ("in_guard_scope", &["true"]),
        ],
    );
    let outside_root = subject("root", &[("uid", &["0"]), ("in_guard_scope", &["false"])]);
    for policy in [
        AuthzPolicy::builtin(None),
        AuthzPolicy::builtin(Some("wheel")),
    ] {
        for (action, _) in ACTIONS {
            let inside = policy.evaluate(&Request::new(&scoped_root, action));
            let refused = REFUSED_IN_SCOPE.contains(action);
            assert_eq!(
                (inside.allowed, inside.rule),
                (!refused, Some(if refused { 0 } else { 1 })),
                "{action} from inside a scope"
            );
            assert!(
                policy
                    .evaluate(&Request::new(&outside_root, action))
                    .allowed,
                "{action} from outside"
            );
        }
    }
}

#[test]
fn builtin_lets_a_plain_user_read_only_their_own_audit_records() {
    let alice = local_user("alice", "1000", &["users"]);
    for policy in [
        AuthzPolicy::builtin(None),
        AuthzPolicy::builtin(Some("wheel")),
    ] {
        let audit_rule = policy.rules.len() - 1;
        let own = owned_by("alice");
        let request = Request::new(&alice, "audit")
            .with_entity("audit")
            .with_resource(&own);
        assert_eq!(
            policy.evaluate(&request),
            AuthzDecision {
                allowed: true,
                rule: Some(audit_rule),
                obligations: vec![]
            }
        );
        let theirs = owned_by("bob");
        assert_eq!(
            policy.evaluate(&request.with_resource(&theirs)),
            AuthzDecision::refused()
        );
        // A record without an owner, or one asked for without naming the entity, is refused.
        assert!(
            !policy
                .evaluate(&request.with_resource(&Attributes::new()))
                .allowed
        );
        assert!(
            !policy
                .evaluate(&Request::new(&alice, "audit").with_resource(&own))
                .allowed
        );
        for action in [
            "status", "approve", "prompts", "deny", "amend", "reload", "run",
        ] {
            let decision = policy.evaluate(
                &Request::new(&alice, action)
                    .with_entity("audit")
                    .with_resource(&own),
            );
            assert_eq!(decision, AuthzDecision::refused(), "{action}");
        }
    }
}

#[test]
fn the_vocabulary_is_the_daemons() {
    let actions: Vec<&str> = ACTIONS.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        actions,
        [
            "status", "prompts", "approve", "deny", "amend", "reload", "run", "audit"
        ]
    );
    let entities: Vec<&str> = ENTITIES.iter().map(|(name, _)| *name).collect();
    assert_eq!(entities, ["policy", "prompt", "audit", "status"]);
    assert!(
        ACTIONS
            .iter()
            .chain(ENTITIES)
            .all(|(_, about)| !about.is_empty())
    );
    assert!(is_known_action("audit") && !is_known_action("*"));
    assert!(is_known_entity("prompt") && !is_known_entity("prompts"));
}

#[test]
fn a_policy_is_shared_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<AuthzPolicy>();
    shareable::<Subject>();
    let policy = std::sync::Arc::new(AuthzPolicy::builtin(Some("wheel")));
    let handles: Vec<_> = (0..4)
        .map(|n| {
            let policy = std::sync::Arc::clone(&policy);
            std::thread::spawn(move || {
                let user = local_user(&format!("u{n}"), &format!("{}", 1000 + n), &[]);
                let own = owned_by(&user.sub);
                policy
                    .evaluate(
                        &Request::new(&user, "audit")
                            .with_entity("audit")
                            .with_resource(&own),
                    )
                    .allowed
            })
        })
        .collect();
    assert!(handles.into_iter().all(|handle| handle.join().unwrap()));
}

#[test]
fn builtin_lets_a_plain_user_run_outside_a_scope_and_answer_only_their_own_runs_asks() {
    let outside = subject(
        "alice",
        &[
            ("uid", &["1000"]),
            ("scope", &["none"]),
            ("in_guard_scope", &["false"]),
        ],
    );
    let in_her_run = subject(
        "alice",
        &[
            ("uid", &["1000"]),
            ("scope", &["run"]),
            ("in_guard_scope", &["true"]),
        ],
    );
    let inside = subject(
        "alice",
        &[
            ("uid", &["1000"]),
            ("scope", &["cgroup"]),
            ("in_guard_scope", &["true"]),
        ],
    );
    let ask = |owner: &str, amends: bool| {
        Attributes::from([
            ("owner".to_string(), vec![owner.to_string()]),
            ("amends".to_string(), vec![amends.to_string()]),
        ])
    };
    for policy in [
        AuthzPolicy::builtin(None),
        AuthzPolicy::builtin(Some("wheel")),
    ] {
        let run = |who: &Subject| {
            policy
                .evaluate(&Request::new(who, "run").with_entity("policy"))
                .allowed
        };
        assert!(run(&outside), "a fresh scope only takes rights away");
        assert!(
            run(&in_her_run),
            "from a run: its client hands its hold over from there"
        );
        assert!(
            !run(&inside),
            "not from another scope, which may hold a stricter policy"
        );
        let answers = |who: &Subject, action: &str, resource: &Attributes| {
            policy
                .evaluate(
                    &Request::new(who, action)
                        .with_entity("prompt")
                        .with_resource(resource),
                )
                .allowed
        };
        for action in ["prompts", "approve", "deny"] {
            assert!(answers(&outside, action, &ask("alice", false)), "{action}");
            assert!(
                !answers(&outside, action, &ask("alice", true)),
                "{action}: an amendment is everyone's policy"
            );
            assert!(!answers(&outside, action, &ask("bob", false)), "{action}");
            assert!(
                !answers(&outside, action, &Attributes::new()),
                "{action}: an ask no run owns is the admins'"
            );
        }
        assert!(
            !answers(&in_her_run, "approve", &ask("alice", false)),
            "a guarded process never answers its own asks"
        );
    }
}
