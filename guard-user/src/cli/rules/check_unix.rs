//! `guard check --unix SOCKET`: what a connect or send to a unix socket gets in a scope, and the
//! rule (the policy's or a built-in list's) that decides it.

use anstream::println;
use serde_json::{Value, json};

use crate::cli::output::{decision_style, dim, print_json};
use crate::policy::Policy;
use crate::policy::unix::{UnixVerdict, address_text, decide, parse_address};

pub fn check(policy: &Policy, socket: &str, as_json: bool) {
    let address = parse_address(socket);
    let rules = policy.unix_rules_with_builtins();
    let verdict = decide(&rules, policy.enforcement().unmatched_unix, &address);
    let shown = address_text(&address);
    if as_json {
        let mut value = json!({
            "socket": shown,
            "decision": verdict.decision().as_str(),
            "unmatched": matches!(verdict, UnixVerdict::Unmatched(_)),
            "relative": verdict == UnixVerdict::Relative,
        });
        if let UnixVerdict::Rule(rule) = &verdict {
            let mut object = json!({
                "text": crate::policy::render::unix_rule_text(rule),
                "builtin": rule.is_builtin(),
            });
            if let Some(origin) = &rule.origin {
                object["file"] = json!(&*origin.file);
                object["line"] = json!(origin.line);
            }
            value["rule"] = object;
        } else {
            value["rule"] = Value::Null;
        }
        print_json(&value);
        return;
    }
    let style = decision_style(Some(verdict.decision()));
    let dim = dim();
    println!(
        "{style}{}{style:#}  unix socket {shown}",
        verdict.decision().as_str()
    );
    match &verdict {
        UnixVerdict::Rule(rule) => {
            let origin = rule
                .origin
                .as_ref()
                .map(|o| format!(" {dim}at {o}{dim:#}"))
                .unwrap_or_default();
            println!(
                "    {style}{}{style:#} by {}{origin}",
                rule.decision.as_str(),
                crate::policy::render::unix_rule_text(rule)
            );
            if rule.is_builtin() && rule.decision != crate::policy::Decision::Allow {
                println!(
                    "To change it: add unix_rule(socket=\"{shown}\", decision=\"allow\") to a \
                     rules file; a rule that names the socket overrides the built-in list."
                );
            }
        }
        UnixVerdict::Relative => println!(
            "    a relative path: no rule can name it (it depends on the caller's folder), so \
             it is refused; connect by the absolute path"
        ),
        UnixVerdict::Unmatched(decision) => {
            println!(
                "    no rule names it; the policy's enforcement(unmatched_unix=...) decides: {}",
                decision.as_str()
            );
            if *decision != crate::policy::Decision::Allow {
                println!(
                    "To change it: add unix_rule(socket=\"{shown}\", decision=\"allow\") to a \
                     rules file."
                );
            }
        }
    }
}
