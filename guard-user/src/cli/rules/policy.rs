//! `guard policy validate | show | evaluate | classify`.

use std::path::PathBuf;
use std::process::ExitCode;

use anstream::println;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::cli::RulesArgs;
use crate::cli::output::{decision_style, dim, print_json};
use crate::compile::{CompileEnv, NoResolver, compile};
use crate::kernel::Backend;
use crate::kernel::coverage::{NotEnforced, not_enforced};
use crate::policy::heuristics::{is_dangerous_command, is_known_safe_command};
use crate::policy::load::{LoadedPolicy, RulesSource};
use crate::policy::rule_set::{RuleSet, RuleSetPattern};
use crate::policy::{AddressRule, LegacyPolicy, PatternToken, Policy, PrefixRule};

#[path = "policy_evaluate.rs"]
mod evaluate;

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Parse rules files (and check their examples) without using them. Exit 0 with one summary
    /// line, or exit 2 with `PATH:LINE: MESSAGE` first on stderr.
    Validate(ValidateArgs),
    /// Print the loaded policy: prefix rules, network rules and domains, host executables,
    /// address rules, rule sets, the protected paths and the enforcement settings.
    Show(ShowArgs),
    /// What the rule sets (and the built-in protected paths) decide for one tool call: each set
    /// by first match deny → ask → allow, the strongest of them wins; `none` if no pattern
    /// matches.
    Evaluate(evaluate::EvaluateArgs),
    /// Say whether a command is known-safe (read-only) or dangerous, as the heuristics judge it.
    Classify(ClassifyArgs),
}

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Overlay rules to validate on top.
    #[arg(long = "overlay", value_name = "PATH")]
    overlays: Vec<PathBuf>,
    /// Rules files or folders, read in order as one policy.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Accept paths that hold no `*.rules` or `*.policy` file (an empty policy).
    #[arg(long)]
    allow_empty_policy: bool,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    #[command(flatten)]
    rules: RulesArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct ClassifyArgs {
    /// Print `{"known_safe": bool, "dangerous": bool}`.
    #[arg(long)]
    json: bool,
    /// The command to classify (after `--`).
    #[arg(last = true, value_name = "ARGV")]
    argv: Vec<String>,
}

pub fn run(command: PolicyCommand) -> ExitCode {
    match command {
        PolicyCommand::Validate(args) => validate(args),
        PolicyCommand::Show(args) => show(&args),
        PolicyCommand::Evaluate(args) => evaluate::run(&args),
        PolicyCommand::Classify(args) => classify(&args),
    }
}

fn validate(args: ValidateArgs) -> ExitCode {
    let rules = RulesArgs {
        rules: args.paths,
        overlays: args.overlays,
        allow_empty_policy: args.allow_empty_policy,
    };
    let loaded = match rules.load() {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let policy = &loaded.policy;
    println!(
        "ok: {} file(s){}: {} prefix rule(s), {} network rule(s), {} host executable(s){}{}{}",
        loaded.sources.len(),
        match loaded.overlay_sources.len() {
            0 => String::new(),
            n => format!(" + {n} overlay file(s)"),
        },
        policy.prefix_rules().len(),
        policy.network_rules().len(),
        policy.host_executables().len(),
        match policy.address_rules().len() {
            0 => String::new(),
            n => format!(", {n} address rule(s)"),
        },
        match policy.unix_rules().len() {
            0 => String::new(),
            n => format!(", {n} unix rule(s)"),
        },
        match policy.rule_sets().len() {
            0 => String::new(),
            n => format!(", {n} rule set(s)"),
        }
    );
    ExitCode::SUCCESS
}

fn show(args: &ShowArgs) -> ExitCode {
    let loaded = match args.rules.load() {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    if args.json {
        print_json(&show_json(&loaded));
    } else {
        show_text(&loaded);
    }
    ExitCode::SUCCESS
}

fn pattern_json(rule: &PrefixRule) -> Vec<Value> {
    std::iter::once(json!(&*rule.pattern.first))
        .chain(rule.pattern.rest.iter().map(|token| match token {
            PatternToken::Single(token) => json!(token),
            PatternToken::Alts(alts) => json!(alts),
        }))
        .collect()
}

fn with_origin(mut object: Value, origin: Option<&crate::policy::RuleOrigin>) -> Value {
    if let Some(origin) = origin {
        object["file"] = json!(&*origin.file);
        object["line"] = json!(origin.line);
    }
    object
}

fn sorted_host_executables(policy: &Policy) -> Vec<(&String, Vec<String>)> {
    let mut entries: Vec<_> = policy
        .host_executables()
        .iter()
        .map(|(name, paths)| {
            (
                name,
                paths.iter().map(|p| p.display().to_string()).collect(),
            )
        })
        .collect();
    entries.sort();
    entries
}

fn address_rule_json(rule: &AddressRule) -> Value {
    let addresses: Vec<String> = rule.addresses.iter().map(ToString::to_string).collect();
    let mut object = json!({
        "id": rule.id,
        "addresses": addresses,
        "ports": rule.ports,
        "transport": rule.transport.as_str(),
        "decision": rule.decision.as_str(),
        "audit_only": rule.audit_only,
    });
    if let Some(justification) = &rule.justification {
        object["justification"] = json!(justification);
    }
    with_origin(object, rule.origin.as_ref())
}

fn patterns_json(patterns: &[RuleSetPattern]) -> Vec<&str> {
    patterns.iter().map(RuleSetPattern::text).collect()
}

fn rule_set_json(set: &RuleSet) -> Value {
    let object = json!({
        "deny": patterns_json(&set.deny),
        "ask": patterns_json(&set.ask),
        "allow": patterns_json(&set.allow),
    });
    with_origin(object, set.origin.as_ref())
}

fn show_json(loaded: &LoadedPolicy) -> Value {
    let policy = &loaded.policy;
    let network_rules: Vec<Value> = policy
        .network_rules()
        .iter()
        .map(|rule| {
            let mut object = json!({
                "host": rule.host,
                "protocol": rule.protocol.as_str(),
                "decision": rule.decision.as_str(),
            });
            if let Some(justification) = &rule.justification {
                object["justification"] = json!(justification);
            }
            with_origin(object, rule.origin.as_ref())
        })
        .collect();
    let prefix_rules: Vec<Value> = policy
        .prefix_rules()
        .iter()
        .map(|rule| {
            let mut object = json!({
                "id": rule.id,
                "pattern": pattern_json(rule),
                "decision": rule.decision.as_str(),
            });
            if let Some(justification) = &rule.justification {
                object["justification"] = json!(justification);
            }
            if rule.audit_only {
                object["audit_only"] = json!(true);
            }
            with_origin(object, rule.origin.as_ref())
        })
        .collect();
    let address_rules: Vec<Value> = policy
        .address_rules()
        .iter()
        .map(address_rule_json)
        .collect();
    let unix_rules: Vec<Value> = policy
        .unix_rules()
        .iter()
        .map(|rule| {
            let mut object = json!({
                "id": rule.id,
                "socket": rule.socket.to_string(),
                "decision": rule.decision.as_str(),
            });
            if let Some(justification) = &rule.justification {
                object["justification"] = json!(justification);
            }
            with_origin(object, rule.origin.as_ref())
        })
        .collect();
    let builtin_unix: Vec<Value> =
        crate::policy::unix::builtin_rules(&crate::policy::unix::session_user_ids())
            .iter()
            .map(|rule| {
                json!({
                    "socket": rule.socket.to_string(),
                    "decision": rule.decision.as_str(),
                    "why": rule.justification,
                })
            })
            .collect();
    let enforcement = policy.enforcement();
    let host_executables: serde_json::Map<String, Value> = sorted_host_executables(policy)
        .into_iter()
        .map(|(name, paths)| (name.clone(), json!(paths)))
        .collect();
    let names = |sources: &[RulesSource]| -> Vec<String> {
        sources.iter().map(RulesSource::display_name).collect()
    };
    json!({
        "network_rules": network_rules,
        "network_domains": policy.network_domains(),
        "allowed_prefixes": policy.allowed_prefixes(),
        "host_executables": host_executables,
        "prefix_rules": prefix_rules,
        "address_rules": address_rules,
        "unix_rules": unix_rules,
        "builtin_unix_sockets": builtin_unix,
        "rule_sets": policy.rule_sets().iter().map(rule_set_json).collect::<Vec<_>>(),
        "protected_paths": policy
            .protected_paths()
            .iter()
            .map(|p| json!({"pattern": p.pattern(), "why": p.why}))
            .collect::<Vec<_>>(),
        "legacy_policies": policy.legacy_policies().iter().map(legacy_json).collect::<Vec<_>>(),
        "not_enforced": {
            "lsm": not_enforced_on(policy, Backend::Lsm),
            "cgroup": not_enforced_on(policy, Backend::Cgroup),
        },
        "enforcement": {
            "unmatched_exec": enforcement.unmatched_exec.as_str(),
            "unmatched_network": enforcement.unmatched_network.as_str(),
            "unmatched_unix": enforcement.unmatched_unix.as_str(),
            "anonymous_exec": enforcement.anonymous_exec.as_str(),
            "audit_only": enforcement.audit_only,
            "socket_kinds": enforcement.socket_kinds,
            "dns_max_labels": enforcement.dns.max_labels,
            "dns_max_name_length": enforcement.dns.max_name_length,
            "dns_wildcard_lookups_per_second": enforcement.dns.wildcard_lookups_per_second,
        },
        "sandbox": policy.sandbox(),
        "sandbox_modes_held": crate::confine::sandbox::support(),
        "sources": names(&loaded.sources),
        "overlay_sources": names(&loaded.overlay_sources),
    })
}

/// The rules `backend` would not enforce (compiled without resolving names or reading PATH:
/// which rules are file rules does not depend on either).
fn not_enforced_on(policy: &Policy, backend: Backend) -> Vec<NotEnforced> {
    let image = compile(policy, &NoResolver, &CompileEnv::default());
    not_enforced(&image, backend)
}

fn legacy_json(legacy: &LegacyPolicy) -> Value {
    json!({
        "file": &*legacy.file,
        "forbidden_program_regexes": legacy
            .policy
            .forbidden_program_regexes()
            .iter()
            .map(|f| json!({"regex": f.regex.as_str(), "reason": f.reason, "line": f.line}))
            .collect::<Vec<_>>(),
        "forbidden_substrings": legacy
            .policy
            .forbidden_substrings()
            .iter()
            .map(|f| json!({"substring": f.text, "line": f.line}))
            .collect::<Vec<_>>(),
    })
}

fn show_text(loaded: &LoadedPolicy) {
    let policy = &loaded.policy;
    let dim = dim();
    let heading = anstyle::Style::new().bold().underline();
    println!("{heading}Sources{heading:#}");
    for source in &loaded.sources {
        println!("  {}", source.display_name());
    }
    for source in &loaded.overlay_sources {
        println!("  {} {dim}(overlay){dim:#}", source.display_name());
    }
    println!(
        "{heading}Prefix rules{heading:#} ({})",
        policy.prefix_rules().len()
    );
    for rule in policy.prefix_rules() {
        let style = decision_style(Some(rule.decision));
        let pattern: Vec<String> = std::iter::once(rule.pattern.first.to_string())
            .chain(rule.pattern.rest.iter().map(PatternToken::render))
            .collect();
        let origin = origin_text(rule.origin.as_ref());
        let audit = if rule.audit_only {
            format!(" {dim}(audit only){dim:#}")
        } else {
            String::new()
        };
        println!(
            "  {style}{:<9}{style:#} {}{audit}  {dim}{origin}{dim:#}",
            rule.decision.as_str(),
            pattern.join(" ")
        );
    }
    println!(
        "{heading}Network rules{heading:#} ({})",
        policy.network_rules().len()
    );
    for rule in policy.network_rules() {
        let style = decision_style(Some(rule.decision));
        let origin = origin_text(rule.origin.as_ref());
        println!(
            "  {style}{:<9}{style:#} {} {dim}({}){dim:#}  {dim}{origin}{dim:#}",
            rule.decision.as_str(),
            rule.host,
            rule.protocol
        );
    }
    let domains = policy.network_domains();
    println!("{heading}Network domains{heading:#}");
    let list = |hosts: &[String]| {
        if hosts.is_empty() {
            format!("{dim}(none){dim:#}")
        } else {
            hosts.join(", ")
        }
    };
    println!("  allowed: {}", list(&domains.allowed));
    println!("  denied:  {}", list(&domains.denied));
    println!(
        "{heading}Address rules{heading:#} ({})",
        policy.address_rules().len()
    );
    for rule in policy.address_rules() {
        let style = decision_style(Some(rule.decision));
        let origin = origin_text(rule.origin.as_ref());
        let addresses: Vec<String> = rule.addresses.iter().map(ToString::to_string).collect();
        let ports = match &rule.ports {
            Some(ports) => ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(","),
            None => "any port".to_string(),
        };
        let audit = if rule.audit_only { ", audit only" } else { "" };
        println!(
            "  {style}{:<9}{style:#} {} {dim}({ports}, {}{audit}){dim:#}  {dim}{origin}{dim:#}",
            rule.decision.as_str(),
            addresses.join(", "),
            rule.transport
        );
    }
    println!(
        "{heading}Unix socket rules{heading:#} ({}, after the built-in list: `guard policy show --json` has it)",
        policy.unix_rules().len()
    );
    for rule in policy.unix_rules() {
        let style = decision_style(Some(rule.decision));
        let origin = origin_text(rule.origin.as_ref());
        println!(
            "  {style}{:<9}{style:#} {}  {dim}{origin}{dim:#}",
            rule.decision.as_str(),
            rule.socket
        );
    }
    println!(
        "{heading}Rule sets{heading:#} ({})",
        policy.rule_sets().len()
    );
    for set in policy.rule_sets() {
        println!(
            "  {dim}rule_set at{dim:#} {}",
            origin_text(set.origin.as_ref())
        );
        for (decision, patterns) in set.tiers() {
            if patterns.is_empty() {
                continue;
            }
            let style = decision_style(Some(decision));
            let texts: Vec<&str> = patterns.iter().map(RuleSetPattern::text).collect();
            println!(
                "    {style}{:<9}{style:#} {}",
                decision.as_str(),
                texts.join("  ")
            );
        }
    }
    println!(
        "{heading}Protected paths{heading:#} ({}; forbidden whatever the rules say)",
        policy.protected_paths().len()
    );
    for protected in policy.protected_paths() {
        println!("  {}  {dim}{}{dim:#}", protected.pattern(), protected.why);
    }
    if !policy.legacy_policies().is_empty() {
        println!(
            "{heading}Legacy policies{heading:#} ({}; their forbidden regexes and substrings are \
             enforced by the kernel)",
            policy.legacy_policies().len()
        );
        for legacy in policy.legacy_policies() {
            let regexes = legacy.policy.forbidden_program_regexes().len();
            let substrings = legacy.policy.forbidden_substrings().len();
            println!(
                "  {}  {dim}{regexes} forbidden program regexes, {substrings} forbidden substrings{dim:#}",
                legacy.file
            );
        }
    }
    // The cgroup backend's gaps include the lsm backend's: grouped by why.
    let gaps = not_enforced_on(policy, Backend::Cgroup);
    if !gaps.is_empty() {
        println!(
            "{heading}Not enforced by the kernel{heading:#} ({} on the cgroup backend, {} on lsm)",
            gaps.len(),
            not_enforced_on(policy, Backend::Lsm).len()
        );
        let mut reasons: Vec<&str> = gaps.iter().map(|g| g.reason.as_str()).collect();
        reasons.dedup();
        for reason in reasons {
            for gap in gaps.iter().filter(|g| g.reason == reason) {
                println!("  {}", gap.rule);
            }
            println!("  {dim}{reason}{dim:#}");
        }
    }
    let enforcement = policy.enforcement();
    let overrides = policy.enforcement_overrides();
    let default_mark = |set: bool| {
        if set {
            String::new()
        } else {
            format!(" {dim}(default){dim:#}")
        }
    };
    println!("{heading}Enforcement{heading:#}");
    println!(
        "  unmatched exec:    {}{}",
        enforcement.unmatched_exec.as_str(),
        default_mark(overrides.unmatched_exec.is_some())
    );
    println!(
        "  unmatched network: {}{}",
        enforcement.unmatched_network.as_str(),
        default_mark(overrides.unmatched_network.is_some())
    );
    println!(
        "  unmatched unix:    {}{}",
        enforcement.unmatched_unix.as_str(),
        default_mark(overrides.unmatched_unix.is_some())
    );
    println!(
        "  anonymous exec:    {}{}",
        enforcement.anonymous_exec.as_str(),
        default_mark(overrides.anonymous_exec.is_some())
    );
    println!(
        "  audit only:        {}{}",
        if enforcement.audit_only { "yes" } else { "no" },
        default_mark(overrides.audit_only.is_some())
    );
    let kinds = enforcement.socket_kinds.names();
    println!(
        "  socket kinds:      {}{}",
        if kinds.is_empty() {
            "none (raw, ping, udplite, sctp refused)".to_string()
        } else {
            kinds.join(", ")
        },
        default_mark(overrides.socket_kinds.is_some())
    );
    println!(
        "  wildcard names:    at most {} labels{}, {} characters{}, {} lookups a second{}",
        enforcement.dns.max_labels,
        default_mark(overrides.dns_max_labels.is_some()),
        enforcement.dns.max_name_length,
        default_mark(overrides.dns_max_name_length.is_some()),
        enforcement.dns.wildcard_lookups_per_second,
        default_mark(overrides.dns_wildcard_lookups_per_second.is_some()),
    );
    let support = crate::confine::sandbox::support();
    match policy.sandbox() {
        Some(sandbox) => {
            let writable: Vec<String> = sandbox
                .writable
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            let held = if support.modes.contains(&sandbox.mode.as_str()) {
                String::new()
            } else {
                format!(" {dim}(not held here: {}){dim:#}", support.detail)
            };
            println!(
                "  sandbox:           {}{} ({}){held}",
                sandbox.mode.as_str(),
                if writable.is_empty() {
                    String::new()
                } else {
                    format!(", writable {}", writable.join(", "))
                },
                sandbox.from
            );
        }
        None => println!(
            "  sandbox:           none {dim}(guard run --sandbox chooses; this machine holds {}){dim:#}",
            support.modes.join(", ")
        ),
    }
    println!("{heading}Host executables{heading:#}");
    let host_executables = sorted_host_executables(policy);
    if host_executables.is_empty() {
        println!(
            "  {dim}(none: with --resolve-host-executables any path reaches a name's rules){dim:#}"
        );
    }
    for (name, paths) in host_executables {
        println!("  {name}: {}", paths.join(", "));
    }
}

fn classify(args: &ClassifyArgs) -> ExitCode {
    let known_safe = is_known_safe_command(&args.argv);
    let dangerous = is_dangerous_command(&args.argv);
    if args.json {
        print_json(&json!({"known_safe": known_safe, "dangerous": dangerous}));
    } else {
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        println!(
            "known-safe: {}  dangerous: {}",
            yes_no(known_safe),
            yes_no(dangerous)
        );
    }
    ExitCode::SUCCESS
}

/// `file:line` of a rule, or nothing for a rule added in code.
fn origin_text(origin: Option<&crate::policy::RuleOrigin>) -> String {
    origin.map(ToString::to_string).unwrap_or_default()
}
