//! guard's own JSON is schema v2 (docs/json.md): every key snake_case, every time RFC 3339.
//! This runs each command that prints JSON without a daemon and checks every key it printed.

use crate::common::Sandbox;
use serde_json::Value;

const RULES: &str = r#"
prefix_rule(pattern=["git", "push"], decision="prompt", justification="publishes code")
prefix_rule(pattern=["git"], decision="allow")
network_rule(host="api.example.com", protocol="https", decision="allow")
address_rule(addresses=["10.0.0.0/8"], decision="deny", justification="internal")
rule_set(deny=["exec(rm -rf *)"], ask=["write(/etc/*)"])
"#;

/// Every key of `value`, with the path to it.
fn keys(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                out.push((at.to_string(), key.clone()));
                keys(inner, &format!("{at}.{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                keys(inner, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn snake_case(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[test]
fn every_key_guard_prints_is_snake_case() {
    let sandbox = Sandbox::new();
    let rules = sandbox.write("r.rules", RULES);
    let rules = rules.to_str().unwrap();
    let patch = sandbox.write(
        "p.patch",
        "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n",
    );
    let commands: Vec<Vec<&str>> = vec![
        vec![
            "check", "--json", "--rules", rules, "--kernel", "--", "git", "push",
        ],
        vec![
            "check",
            "--json",
            "--rules",
            rules,
            "--fallback",
            "heuristics",
            "--",
            "ls",
        ],
        vec!["check", "--json", "--rules", rules, "--", "rm", "-rf", "x"],
        vec![
            "check",
            "--json",
            "--rules",
            rules,
            "--approval",
            "never",
            "--",
            "git",
            "push",
        ],
        vec![
            "check",
            "--json",
            "--rules",
            rules,
            "--no-resolve",
            "--dest",
            "10.1.2.3:22",
        ],
        vec!["check", "--json", "--patch", patch.to_str().unwrap()],
        vec!["policy", "show", "--json", "--rules", rules],
        vec![
            "policy",
            "evaluate",
            "--json",
            "--rules",
            rules,
            "--tool",
            "write",
            "--subject",
            "/etc/x",
        ],
        vec!["policy", "classify", "--json", "--", "ls"],
        vec!["check", "--json", "--rules", "no-such.rules", "--", "ls"],
        vec!["doctor", "--json"],
    ];
    let mut seen = 0;
    for args in &commands {
        let run = sandbox.run(args);
        for line in run.stdout.lines() {
            let value: Value = serde_json::from_str(line).unwrap_or_else(|err| {
                panic!("guard {args:?} printed a line that is not JSON ({err}): {line}")
            });
            let mut found = Vec::new();
            keys(&value, "", &mut found);
            for (at, key) in &found {
                assert!(
                    snake_case(key),
                    "guard {args:?}: key {key:?} at {at:?} is not snake_case (schema v2): {line}"
                );
            }
            seen += found.len();
        }
    }
    assert!(
        seen > 100,
        "only {seen} keys were checked: the commands printed too little"
    );
}
