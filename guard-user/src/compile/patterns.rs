//! The rules that are patterns, gathered into the kernel's pattern tables ([`super::dfa`]):
//! the legacy policies' `forbid_program_regex` (program name) and `forbid_substrings` (argv),
//! the rule sets' `exec(...)` patterns (command line), and their `read(...)` and `write(...)`
//! patterns with the built-in protected paths (file paths, held by the `lsm` backend's file
//! hooks). Each pattern becomes a [`KernelRule`] so a refusal names its file and line.
//!
//! A rule set decides by first match deny → ask → allow; the tables keep every pattern with its
//! tier's decision and the kernel takes the strongest match, which is the same decision (the
//! tiers are in order of strength) and, on a tie, the earlier pattern. A bare tool pattern
//! (`"exec"`, `"bash*"`, `"*"`) matches every exec: it is the empty regex over the program
//! name, so bytes a command line could not judge do not make it fail.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use guard_common::maps::Verdict as KernelVerdict;

use super::dfa::{self, DfaError, DfaPattern, DfaTable, InputKind};
use super::image::{KernelRule, KernelRuleKind};
use crate::policy::rule_set::{RuleSetPattern, Tool};
use crate::policy::{Decision, Policy, RuleOrigin};

/// The compiled tables; `None` where the policy has no pattern of that kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatternTables {
    pub program_name: Option<DfaTable>,
    pub argv: Option<DfaTable>,
    pub command_line: Option<DfaTable>,
    /// `read(...)` patterns (enforced on the `lsm` backend only).
    pub read_path: Option<DfaTable>,
    /// `write(...)` patterns and the protected paths (enforced on the `lsm` backend only).
    pub write_path: Option<DfaTable>,
    /// The `read(...)` and `write(...)` patterns (and the protected paths), in order: what a
    /// backend without file hooks does not hold.
    pub file_rules: Vec<FileRule>,
    /// The kernel rule ids of `connect(...)` patterns: no backend holds them (the kernel sees
    /// addresses, the patterns name `host:port`), only `guard check` and `guard policy
    /// evaluate` decide them.
    pub connect_rules: Vec<u32>,
}

/// A rule-set pattern about files: its kernel rule id and which accesses it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileRule {
    pub rule: u32,
    pub reads: bool,
    pub writes: bool,
}

impl PatternTables {
    /// What the kernel's pattern walk decides for an exec of the file `name` with `args`
    /// (argv after argv[0]), through the userspace twin of its walker: the strongest verdict of
    /// the tables as (decision, kernel rule id), `None` when no pattern matched. The program-
    /// name table reads the name; the others read the name, then NUL and each argument.
    pub fn decide(&self, name: &str, args: &[&str]) -> Option<(Decision, u32)> {
        let mut input = name.as_bytes().to_vec();
        for arg in args {
            input.push(0);
            input.extend_from_slice(arg.as_bytes());
        }
        let walked = |table: Option<&DfaTable>, bytes: &[u8]| {
            table.map_or(KernelVerdict::NONE, |t| {
                dfa::walk_kernel(t, bytes).verdict(&t.header)
            })
        };
        let verdict = walked(self.program_name.as_ref(), name.as_bytes())
            .strongest(walked(self.argv.as_ref(), &input))
            .strongest(walked(self.command_line.as_ref(), &input));
        let decision = crate::kernel::maps::decision_from_code(verdict.decision)?;
        Some((decision, verdict.rule))
    }

    /// The tables by `guard_common::dfa::table` index.
    pub fn by_index(&self) -> [Option<&DfaTable>; 5] {
        [
            self.program_name.as_ref(),
            self.argv.as_ref(),
            self.command_line.as_ref(),
            self.read_path.as_ref(),
            self.write_path.as_ref(),
        ]
    }

    /// What the kernel's file hooks decide for `path` (absolute, as the kernel names it) and
    /// `tool` (`read` or `write`), through the userspace twin of the walker.
    pub fn decide_path(&self, tool: Tool, path: &str) -> Option<(Decision, u32)> {
        let table = match tool {
            Tool::Read => self.read_path.as_ref(),
            Tool::Write => self.write_path.as_ref(),
            _ => None,
        }?;
        let verdict = dfa::walk_kernel(table, path.as_bytes()).verdict(&table.header);
        let decision = crate::kernel::maps::decision_from_code(verdict.decision)?;
        Some((decision, verdict.rule))
    }
}

/// What [`compile_patterns`] made: the tables, the rules they name (to be appended to the
/// image's rules at `first_rule`), and sentences about patterns the kernel does not hold.
pub struct CompiledPatterns {
    pub tables: PatternTables,
    pub rules: Vec<KernelRule>,
    pub warnings: Vec<String>,
}

/// The pattern rules of `policy`, numbered from `first_rule`.
pub fn compile_patterns(policy: &Policy, first_rule: u32) -> CompiledPatterns {
    let mut gathered = Gathered {
        first_rule,
        ..Gathered::default()
    };
    for legacy in policy.legacy_policies() {
        for forbidden in legacy.policy.forbidden_program_regexes() {
            let rule = gathered.rule(KernelRule {
                kind: KernelRuleKind::Legacy,
                text: format!(
                    "forbid_program_regex({:?}, {:?})",
                    forbidden.regex.as_str(),
                    forbidden.reason
                ),
                summary: format!(
                    "programs whose name matches `{}`: {}",
                    forbidden.regex.as_str(),
                    forbidden.reason
                ),
                decision: Decision::Forbidden,
                justification: Some(forbidden.reason.clone()),
                origin: legacy_origin(&legacy.file, forbidden.line),
            });
            gathered.program_name.push(DfaPattern::program_regex(
                forbidden.regex.as_str(),
                forbidden_verdict(rule),
            ));
        }
        for forbidden in legacy.policy.forbidden_substrings() {
            let rule = gathered.rule(KernelRule {
                kind: KernelRuleKind::Legacy,
                text: format!("forbid_substrings([{:?}])", forbidden.text),
                summary: format!("arguments containing `{}`", forbidden.text),
                decision: Decision::Forbidden,
                justification: None,
                origin: legacy_origin(&legacy.file, forbidden.line),
            });
            if let Some(pattern) =
                DfaPattern::argv_substring(&forbidden.text, forbidden_verdict(rule))
            {
                gathered.argv.push(pattern);
            }
        }
    }
    let protected = policy.protected_paths().iter().map(|p| &p.rule_set);
    for set in protected.chain(policy.rule_sets()) {
        for (decision, patterns) in set.tiers() {
            for pattern in patterns {
                gathered.rule_set_pattern(set.origin.as_ref(), decision, pattern);
            }
        }
    }
    let mut warnings = gathered.warnings;
    let tables = PatternTables {
        program_name: table(InputKind::ProgramName, gathered.program_name, &mut warnings),
        argv: table(InputKind::Argv, gathered.argv, &mut warnings),
        command_line: table(InputKind::CommandLine, gathered.command_line, &mut warnings),
        read_path: table(InputKind::Path, gathered.read_path, &mut warnings),
        write_path: table(InputKind::Path, gathered.write_path, &mut warnings),
        file_rules: gathered.file_rules,
        connect_rules: gathered.connect_rules,
    };
    CompiledPatterns {
        tables,
        rules: gathered.rules,
        warnings,
    }
}

#[derive(Default)]
struct Gathered {
    first_rule: u32,
    rules: Vec<KernelRule>,
    program_name: Vec<DfaPattern>,
    argv: Vec<DfaPattern>,
    command_line: Vec<DfaPattern>,
    read_path: Vec<DfaPattern>,
    write_path: Vec<DfaPattern>,
    file_rules: Vec<FileRule>,
    connect_rules: Vec<u32>,
    warnings: Vec<String>,
}

impl Gathered {
    /// One rule-set pattern into every table of the tools it covers: `exec` (command line, or
    /// every command for a bare pattern), `read` and `write` (paths).
    fn rule_set_pattern(
        &mut self,
        origin: Option<&RuleOrigin>,
        decision: Decision,
        pattern: &RuleSetPattern,
    ) {
        let tools: Vec<Tool> = [Tool::Exec, Tool::Read, Tool::Write]
            .into_iter()
            .filter(|&tool| pattern.covers_tool(tool))
            .collect();
        let connects = pattern.covers_tool(Tool::Connect);
        if tools.is_empty() && !connects {
            return;
        }
        let glob = pattern.subject_glob();
        let rule = self.rule(KernelRule {
            kind: KernelRuleKind::RuleSet,
            text: format!("rule_set({}=[{:?}])", tier_name(decision), pattern.text()),
            summary: match (glob, tools.as_slice()) {
                (Some(glob), [Tool::Exec]) => format!("commands matching `{glob}`"),
                (Some(glob), [Tool::Read]) => format!("reading files matching `{glob}`"),
                (Some(glob), [Tool::Write]) => format!("writing files matching `{glob}`"),
                (Some(glob), []) => format!("destinations matching `{glob}`"),
                (Some(glob), _) => format!("calls matching `{glob}`"),
                (None, _) => format!("every call of `{}`", pattern.text()),
            },
            decision,
            justification: None,
            origin: origin.cloned(),
        });
        let verdict = KernelVerdict::new(decision, rule, false);
        if connects {
            self.connect_rules.push(rule);
        }
        let (reads, writes) = (tools.contains(&Tool::Read), tools.contains(&Tool::Write));
        if reads || writes {
            self.file_rules.push(FileRule {
                rule,
                reads,
                writes,
            });
        }
        for tool in tools {
            let compiled = match (tool, glob) {
                // A bare pattern matches every call: the empty regex, over the shortest input.
                (_, None) => Ok(vec![DfaPattern::program_regex("", verdict)]),
                (Tool::Exec, Some(glob)) => {
                    DfaPattern::command_glob(glob, verdict).map(|p| vec![p])
                }
                (_, Some(glob)) => DfaPattern::path_glob(glob, verdict),
            };
            let table = match tool {
                Tool::Exec if glob.is_none() => &mut self.program_name,
                Tool::Exec => &mut self.command_line,
                Tool::Read => &mut self.read_path,
                _ => &mut self.write_path,
            };
            match compiled {
                Ok(patterns) => table.extend(patterns),
                Err(err) => self.warnings.push(not_held(&err)),
            }
        }
    }

    fn rule(&mut self, rule: KernelRule) -> u32 {
        self.rules.push(rule);
        self.first_rule + self.rules.len() as u32 - 1
    }
}

/// Tables built before, by input kind and patterns: a policy is compiled again at every reload
/// and DNS refresh, and a table of tens of patterns takes a large part of a second to build.
/// Bounded: cleared when full.
static BUILT: LazyLock<Mutex<HashMap<TableKey, Built>>> = LazyLock::new(Mutex::default);
type TableKey = (InputKind, Vec<DfaPattern>);
const BUILT_MAX: usize = 32;

#[derive(Clone)]
struct Built {
    table: Option<DfaTable>,
    warnings: Vec<String>,
}

/// [`build_table`], remembered.
fn table(
    kind: InputKind,
    patterns: Vec<DfaPattern>,
    warnings: &mut Vec<String>,
) -> Option<DfaTable> {
    if patterns.is_empty() {
        return None;
    }
    let key = (kind, patterns);
    let cached = BUILT.lock().ok().and_then(|built| built.get(&key).cloned());
    let built = cached.unwrap_or_else(|| {
        let mut fresh = Built {
            table: None,
            warnings: Vec::new(),
        };
        fresh.table = build_table(key.0, key.1.clone(), &mut fresh.warnings);
        if let Ok(mut cache) = BUILT.lock() {
            if cache.len() >= BUILT_MAX {
                cache.clear();
            }
            cache.insert(key, fresh.clone());
        }
        fresh
    });
    warnings.extend(built.warnings);
    built.table
}

/// One table for `patterns`; a set the kernel cannot hold keeps the patterns it can (each left
/// out is named in a warning), so one oversized pattern does not drop the rest.
fn build_table(
    kind: InputKind,
    patterns: Vec<DfaPattern>,
    warnings: &mut Vec<String>,
) -> Option<DfaTable> {
    let err = match dfa::compile(kind, &patterns) {
        Ok(table) => return Some(table),
        Err(err) => err,
    };
    warnings.push(not_held(&err));
    // The error names the culprits: too large alone, or the one that does not compile.
    let culprits: Vec<String> = match &err {
        DfaError::TooLarge { patterns, .. } => patterns.clone(),
        DfaError::Invalid { pattern, .. } => vec![pattern.clone()],
    };
    let kept: Vec<DfaPattern> = patterns
        .into_iter()
        .filter(|p| !culprits.contains(&p.written))
        .collect();
    // Only the set was too large (every pattern was named): nothing is kept.
    if kept.is_empty() {
        return None;
    }
    match dfa::compile(kind, &kept) {
        Ok(table) => Some(table),
        Err(err) => {
            warnings.push(not_held(&err));
            None
        }
    }
}

fn not_held(err: &DfaError) -> String {
    format!("{err}; the kernel does not enforce it (`guard check` still does)")
}

fn legacy_origin(file: &Arc<str>, line: usize) -> Option<RuleOrigin> {
    Some(RuleOrigin {
        file: file.clone(),
        line,
    })
}

fn forbidden_verdict(rule: u32) -> KernelVerdict {
    KernelVerdict::new(Decision::Forbidden, rule, false)
}

fn tier_name(decision: Decision) -> &'static str {
    match decision {
        Decision::Forbidden => "deny",
        Decision::Prompt => "ask",
        Decision::Allow => "allow",
    }
}

#[cfg(test)]
mod tests;
