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
    /// Patterns no table holds (too large for the kernel, or not compilable for it), in order.
    pub left_out: Vec<LeftOut>,
}

/// A pattern the kernel does not hold: its kernel rule id, its decision, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOut {
    pub rule: u32,
    pub decision: Decision,
    pub why: String,
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
        self.decide_exec(name, name, args)
    }

    /// [`PatternTables::decide`] for an exec whose `argv[0]` is `argv0`: the strongest verdict
    /// over every reading of the program token the kernel walks (the name; argv[0]'s last path
    /// component when it is another name; `NAME SUB` for either spelled `NAME-SUB`).
    pub fn decide_exec(&self, name: &str, argv0: &str, args: &[&str]) -> Option<(Decision, u32)> {
        let verdict = self.exec_verdict(name, argv0, args);
        let decision = Decision::from_code(verdict.decision)?;
        Some((decision, verdict.rule))
    }

    /// [`PatternTables::decide_exec`] as the kernel stores it: the verdict with its flags
    /// ([`KernelVerdict::NONE`] when no pattern matched).
    pub fn exec_verdict(&self, name: &str, argv0: &str, args: &[&str]) -> KernelVerdict {
        let walked = |table: Option<&DfaTable>, bytes: &[u8]| {
            table.map_or(KernelVerdict::NONE, |t| {
                dfa::walk_kernel(t, bytes).verdict(&t.header)
            })
        };
        program_readings(name, argv0)
            .iter()
            .fold(KernelVerdict::NONE, |kept, (program, split)| {
                let mut input = program.as_bytes().to_vec();
                if let Some(at) = split {
                    input[*at] = 0;
                }
                let program_alone = &program.as_bytes()[..split.unwrap_or(program.len())];
                for arg in args {
                    input.push(0);
                    input.extend_from_slice(arg.as_bytes());
                }
                kept.strongest(walked(self.program_name.as_ref(), program_alone))
                    .strongest(walked(self.argv.as_ref(), &input))
                    .strongest(walked(self.command_line.as_ref(), &input))
            })
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
        let decision = Decision::from_code(verdict.decision)?;
        Some((decision, verdict.rule))
    }
}

/// The program tokens the kernel's pattern walk reads for an exec of the file `name` with
/// `argv[0]` = `argv0`, each with the byte of it read as a separator (the `-` of `NAME-SUB`): the
/// name; argv[0]'s last path component when it is not empty and not the name; and a split of
/// each whose first `-` is neither its first nor its last byte.
fn program_readings<'a>(name: &'a str, argv0: &'a str) -> Vec<(&'a str, Option<usize>)> {
    let split = |token: &str| {
        token
            .find('-')
            .filter(|&dash| dash > 0 && dash + 1 < token.len())
    };
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    let mut readings = vec![(name, None)];
    let by_argv0 = !base.is_empty() && base != name;
    if by_argv0 {
        readings.push((base, None));
    }
    if let Some(dash) = split(name) {
        readings.push((name, Some(dash)));
    }
    if by_argv0 && let Some(dash) = split(base) {
        readings.push((base, Some(dash)));
    }
    readings
}

/// What [`compile_patterns`] made: the tables (with the patterns they leave out) and the rules
/// they name (to be appended to the image's rules at `first_rule`).
pub struct CompiledPatterns {
    pub tables: PatternTables,
    pub rules: Vec<KernelRule>,
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
    let command_line = gathered.exec_glob_patterns();
    gathered.command_line.extend(command_line);
    let mut left_out = gathered.left_out;
    let mut tables = PatternTables {
        program_name: table(InputKind::ProgramName, gathered.program_name, &mut left_out),
        argv: table(InputKind::Argv, gathered.argv, &mut left_out),
        command_line: table(InputKind::CommandLine, gathered.command_line, &mut left_out),
        read_path: table(InputKind::Path, gathered.read_path, &mut left_out),
        write_path: table(InputKind::Path, gathered.write_path, &mut left_out),
        file_rules: gathered.file_rules,
        connect_rules: gathered.connect_rules,
        left_out: Vec::new(),
    };
    // One entry per rule (a path glob may stand for several regexes), in rule order.
    left_out.sort_by_key(|l| l.rule);
    left_out.dedup_by_key(|l| l.rule);
    tables.left_out = left_out;
    CompiledPatterns {
        tables,
        rules: gathered.rules,
    }
}

/// Globs a tier's summary names before "N more".
const SUMMARY_GLOBS: usize = 10;

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
    left_out: Vec<LeftOut>,
    /// Rule-set `exec(...)` globs, grouped into the command-line table at the end.
    exec_globs: Vec<ExecGlob>,
}

/// One rule-set `exec(...)` glob on its way to the command-line table.
struct ExecGlob {
    /// Globs of one tier of one `rule_set(...)` call share a table pattern.
    tier: (Decision, Option<RuleOrigin>),
    /// As written (`exec(*secret*)`).
    text: String,
    glob: String,
    pattern: DfaPattern,
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
                (Tool::Exec, Some(glob)) => match DfaPattern::command_glob(glob, verdict) {
                    // Held back: joined with its tier's other globs at the end
                    // (`exec_glob_patterns`), not put in the table one by one.
                    Ok(compiled) => {
                        self.exec_globs.push(ExecGlob {
                            tier: (decision, origin.cloned()),
                            text: pattern.text().to_string(),
                            glob: glob.to_string(),
                            pattern: compiled,
                        });
                        continue;
                    }
                    Err(err) => Err(err),
                },
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
                Err(err) => self.left_out.push(LeftOut {
                    rule,
                    decision,
                    why: not_held(&err),
                }),
            }
        }
    }

    /// The command-line table's patterns: each tier of each rule set as one pattern (see
    /// [`DfaPattern::any_of`]), in the order the tiers first appear, named by a rule of its
    /// own that lists its globs when it has several. A table holds one match set per tier,
    /// so tens of `*…*` deny globs fit where each on its own set would need 2^n states; an
    /// exec the tier stops names the tier's `rule_set(...)` line and its globs.
    fn exec_glob_patterns(&mut self) -> Vec<DfaPattern> {
        let mut tiers: Vec<Vec<ExecGlob>> = Vec::new();
        for glob in std::mem::take(&mut self.exec_globs) {
            match tiers.iter_mut().find(|t| t[0].tier == glob.tier) {
                Some(tier) => tier.push(glob),
                None => tiers.push(vec![glob]),
            }
        }
        let mut patterns = Vec::new();
        for mut tier in tiers {
            if tier.len() == 1 {
                patterns.push(tier.remove(0).pattern);
                continue;
            }
            // A tier too large as one pattern is held glob by glob, so that the globs that fit
            // are held and the one that does not is named alone.
            let joined: Vec<DfaPattern> = tier.iter().map(|g| g.pattern.clone()).collect();
            let probe = DfaPattern::any_of(&joined, KernelVerdict::NONE);
            if dfa::compile_set(InputKind::CommandLine, std::slice::from_ref(&probe)).is_err() {
                patterns.extend(tier.into_iter().map(|g| g.pattern));
                continue;
            }
            let (decision, origin) = tier[0].tier.clone();
            let texts: Vec<String> = tier.iter().map(|g| format!("{:?}", g.text)).collect();
            // The summary a blocked-request message quotes stays short; the text lists all.
            let mut globs: Vec<String> = tier.iter().map(|g| format!("`{}`", g.glob)).collect();
            if globs.len() > SUMMARY_GLOBS {
                let more = globs.len() - SUMMARY_GLOBS;
                globs.truncate(SUMMARY_GLOBS);
                globs.push(format!("{more} more"));
            }
            let rule = self.rule(KernelRule {
                kind: KernelRuleKind::RuleSet,
                text: format!("rule_set({}=[{}])", tier_name(decision), texts.join(", ")),
                summary: format!("commands matching any of {}", globs.join(", ")),
                decision,
                justification: None,
                origin,
            });
            let members: Vec<DfaPattern> = tier.into_iter().map(|g| g.pattern).collect();
            patterns.push(DfaPattern::any_of(
                &members,
                KernelVerdict::new(decision, rule, false),
            ));
        }
        patterns
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
    left_out: Vec<LeftOut>,
}

/// [`build_table`], remembered.
fn table(
    kind: InputKind,
    patterns: Vec<DfaPattern>,
    left_out: &mut Vec<LeftOut>,
) -> Option<DfaTable> {
    if patterns.is_empty() {
        return None;
    }
    let key = (kind, patterns);
    let cached = BUILT.lock().ok().and_then(|built| built.get(&key).cloned());
    let built = cached.unwrap_or_else(|| {
        let fresh = build_table(key.0, &key.1);
        if let Ok(mut cache) = BUILT.lock() {
            if cache.len() >= BUILT_MAX {
                cache.clear();
            }
            cache.insert(key, fresh.clone());
        }
        fresh
    });
    left_out.extend(built.left_out);
    built.table
}

/// One table for `patterns`. A set the kernel cannot hold keeps, in order, the patterns that
/// fit: one too large alone (or not compilable) is skipped, and once the table is full every
/// later pattern is left out. Failed builds are the slow ones (they run to the build limit), so
/// the table stops at the first that overflows it instead of trying each later pattern. Each
/// pattern left out is named: the caller refuses a left-out denial and warns about the others.
fn build_table(kind: InputKind, patterns: &[DfaPattern]) -> Built {
    let mut built = Built {
        table: None,
        left_out: Vec::new(),
    };
    if let Ok(table) = dfa::compile_set(kind, patterns) {
        built.table = Some(table);
        return built;
    }
    let mut kept: Vec<DfaPattern> = Vec::new();
    for (at, pattern) in patterns.iter().enumerate() {
        kept.push(pattern.clone());
        let err = match dfa::compile_set(kind, &kept) {
            Ok(fits) => {
                built.table = Some(fits);
                continue;
            }
            Err(err) => err,
        };
        kept.pop();
        let DfaError::TooLarge { needs, .. } = err else {
            built.left_out.push(left_out(pattern, &err));
            continue;
        };
        let full = !kept.is_empty();
        let rest = if full {
            &patterns[at..]
        } else {
            &patterns[at..=at]
        };
        for skipped in rest {
            let why = DfaError::TooLarge {
                patterns: vec![skipped.written.clone()],
                needs: if full {
                    format!("{needs} with the patterns before it")
                } else {
                    needs.clone()
                },
            };
            built.left_out.push(left_out(skipped, &why));
        }
        if full {
            break;
        }
    }
    built
}

fn left_out(pattern: &DfaPattern, why: &DfaError) -> LeftOut {
    LeftOut {
        rule: pattern.verdict.rule,
        decision: Decision::from_code(pattern.verdict.decision).unwrap_or(Decision::Forbidden),
        why: not_held(why),
    }
}

fn not_held(err: &DfaError) -> String {
    err.to_string()
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
