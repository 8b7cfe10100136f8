//! Reads `.rules` files: Starlark (Extended dialect, f-strings on) with the reference's three
//! builtins, `prefix_rule`, `network_rule` and `host_executable`, guard's kernel-only ones,
//! `address_rule` and `enforcement` (plus `prefix_rule(audit_only=...)`), and the seed's
//! `rule_set(deny=, ask=, allow=)`. They record rules as a
//! side effect; a reference file never calls guard's additions, so it keeps its meaning.
//! [`PolicyParser::codex`] knows the reference's builtins alone, as the reference does.
//!
//! One [`PolicyParser`] reads any number of files in order and builds one [`Policy`]; examples
//! (`match` / `not_match`) are checked when each file finishes, against that file's own rules.

use std::cell::{RefCell, RefMut};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use starlark::any::ProvidesStaticType;
use starlark::environment::{Globals, GlobalsBuilder, Module};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::syntax::{AstModule, Dialect};
use starlark::values::Value;
use starlark::values::list::{ListRef, UnpackList};
use starlark::values::none::NoneType;

use super::address::{parse_address_target, parse_port, parse_transport};
use super::chunks::statement_chunks;
use super::error::{ErrorLocation, PolicyError, Result};
use super::examples::{PendingExamples, parse_examples};
use super::host::normalize_network_host;
use super::model::Policy;
use super::paths::{executable_name, normalize_lexically};
use super::rule::{
    AddressRule, Decision, EnforcementOverrides, NetworkProtocol, NetworkRule, PatternToken,
    PrefixPattern, PrefixRule, RuleId, RuleOrigin, SocketKinds, Transport, parse_decision,
    parse_network_decision,
};
use super::rule_set::RuleSet;
use super::sandbox::{SandboxMode, SandboxSetting};

/// Parses rules files in order into one policy.
#[derive(Default)]
pub struct PolicyParser {
    builder: RefCell<PolicyBuilder>,
    /// Only the Codex CLI's builtins (`PolicyParser::codex`): guard's own are unknown names.
    codex_only: bool,
}

/// What the builtins have recorded so far.
#[derive(Debug, Default, ProvidesStaticType)]
struct PolicyBuilder {
    /// Shared, so the policy takes them without a copy.
    prefix_rules: Vec<Arc<PrefixRule>>,
    /// One copy of each file name and program the prefix rules repeat.
    shared_text: HashSet<Arc<str>>,
    network_rules: Vec<NetworkRule>,
    host_executables: HashMap<String, Arc<[PathBuf]>>,
    address_rules: Vec<AddressRule>,
    unix_rules: Vec<super::unix::UnixRule>,
    enforcement: EnforcementOverrides,
    rule_sets: Vec<RuleSet>,
    sandbox: Option<SandboxSetting>,
    pending_examples: Vec<PendingExamples>,
}

impl PolicyParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser that knows only the Codex CLI's builtins, `prefix_rule` (without guard's
    /// `audit_only`), `network_rule` and `host_executable`, so a file Codex refuses is refused
    /// with Codex's error (`guard execpolicy check`).
    pub fn codex() -> Self {
        PolicyParser {
            codex_only: true,
            ..Self::default()
        }
    }

    /// Parses one file. `identifier` (its path) is what error locations and rule origins name.
    pub fn parse(&mut self, identifier: &str, contents: &str) -> Result<()> {
        self.parse_in_runs_of(identifier, contents, RUN_BYTES)
    }

    /// [`PolicyParser::parse`], reading a file of more than `run_bytes` in runs of about that
    /// size.
    fn parse_in_runs_of(
        &mut self,
        identifier: &str,
        contents: &str,
        run_bytes: usize,
    ) -> Result<()> {
        let first_pending = self.builder.borrow().pending_examples.len();
        let globals = self.globals();
        // A large file is read a run of statements at a time (its whole syntax tree would be
        // the peak of guard's memory); anything that reading cannot vouch for is read again
        // whole, from the state before the file, so both readings mean the same.
        let read_in_runs = contents.len() > run_bytes && !contents.contains("@starlark-rust") && {
            let mark = self.builder.borrow().mark();
            let read = self.eval_in_runs(identifier, contents, &globals, run_bytes);
            if !read {
                self.builder.borrow_mut().rewind(mark);
            }
            read
        };
        if !read_in_runs {
            self.eval_whole(identifier, contents, &globals)?;
        }
        self.builder.borrow().check_examples_from(first_pending)
    }

    /// The builtins a file of this parser sees: the Codex CLI's alone, or guard's too.
    fn globals(&self) -> Globals {
        let shared = GlobalsBuilder::standard().with(shared_builtins);
        if self.codex_only {
            shared.with(codex_prefix_rule).build()
        } else {
            shared.with(guard_builtins).build()
        }
    }

    fn eval_whole(&self, identifier: &str, contents: &str, globals: &Globals) -> Result<()> {
        let ast = AstModule::parse(identifier, contents.to_string(), &rules_dialect())
            .map_err(PolicyError::Starlark)?;
        Module::with_temp_heap(|module| {
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(&self.builder);
            eval.set_max_tick_count(MAX_EVALUATION_STEPS)
                .and_then(|()| eval.set_max_heap_size(MAX_EVALUATION_HEAP))
                .expect("a fresh evaluator takes non-zero limits");
            eval.eval_module(ast, globals)
                .map(drop)
                .map_err(|err| over_bound(&eval).unwrap_or(PolicyError::Starlark(err)))
        })
    }

    /// Evaluates `contents` one run of top-level statements after another, each run parsed
    /// with blank lines before it so its lines keep their numbers. Runs share a module while it
    /// holds names (a later run may read them); after a run that leaves it without any, the
    /// next run starts a fresh one and what the earlier runs allocated is freed. False when a
    /// run fails, or when a top-level name shadows a builtin (a run before the binding would
    /// have read the builtin, where the whole file reads the module's variable).
    fn eval_in_runs(
        &self,
        identifier: &str,
        contents: &str,
        globals: &Globals,
        run_bytes: usize,
    ) -> bool {
        let dialect = rules_dialect();
        let builtins: HashSet<&str> = globals.names().map(|name| name.as_str()).collect();
        let mut runs = statement_chunks(contents, run_bytes).into_iter();
        loop {
            let read = Module::with_temp_heap(|module| {
                for run in runs.by_ref() {
                    let mut text = "\n".repeat(run.lines_before);
                    text.push_str(run.text);
                    let Ok(ast) = AstModule::parse(identifier, text, &dialect) else {
                        return ModuleEnd::Read(false);
                    };
                    let mut eval = Evaluator::new(&module);
                    eval.extra = Some(&self.builder);
                    // The same bounds, per run (a failed run is read again whole, bounded).
                    eval.set_max_tick_count(MAX_EVALUATION_STEPS)
                        .and_then(|()| eval.set_max_heap_size(MAX_EVALUATION_HEAP))
                        .expect("a fresh evaluator takes non-zero limits");
                    if eval.eval_module(ast, globals).is_err() {
                        return ModuleEnd::Read(false);
                    }
                    if module.names_and_visibilities().next().is_none() {
                        return ModuleEnd::Empty;
                    }
                }
                ModuleEnd::Read(
                    !module
                        .names_and_visibilities()
                        .any(|(name, _)| builtins.contains(name.as_str())),
                )
            });
            if let ModuleEnd::Read(read) = read {
                return read;
            }
        }
    }

    pub fn build(self) -> Policy {
        let builder = self.builder.into_inner();
        let mut policy = Policy::from_parts(
            builder.prefix_rules,
            builder.network_rules,
            builder.host_executables,
        );
        for rule in builder.address_rules {
            policy.add_address_rule(rule);
        }
        for rule in builder.unix_rules {
            policy.add_unix_rule(rule);
        }
        policy.set_enforcement(builder.enforcement);
        for rule_set in builder.rule_sets {
            policy.add_rule_set(rule_set);
        }
        if let Some(sandbox) = builder.sandbox {
            policy.set_sandbox(sandbox);
        }
        policy
    }
}

/// Files above this many bytes are read in runs of about this size ([`statement_chunks`]).
const RUN_BYTES: usize = 128 * 1024;

fn rules_dialect() -> Dialect {
    let mut dialect = Dialect::Extended.clone();
    dialect.enable_f_strings = true;
    dialect
}

/// Why [`PolicyParser::eval_in_runs`] let a module go.
enum ModuleEnd {
    /// A run left it without names: the next run may take a fresh one.
    Empty,
    /// The file is read (true) or the runs cannot vouch for it (false).
    Read(bool),
}

/// How much a [`PolicyBuilder`] held at one point, to go back to it.
struct BuilderMark {
    prefix_rules: usize,
    network_rules: usize,
    host_executables: HashMap<String, Arc<[PathBuf]>>,
    address_rules: usize,
    unix_rules: usize,
    enforcement: EnforcementOverrides,
    rule_sets: usize,
    sandbox: Option<SandboxSetting>,
    pending_examples: usize,
}

/// Calls and loop steps one file's evaluation may take. A rules file declares rules: the
/// embedded default takes a few hundred, and a file with thousands of rules a few thousand; a
/// loop that never ends (`for` over a huge `range`, deep recursion) stops here instead.
pub const MAX_EVALUATION_STEPS: u64 = 1_000_000;
/// Bytes one file's Starlark heap may reach (checked every thousand steps, so a loop that grows a
/// value stops here instead of taking the machine's memory).
pub const MAX_EVALUATION_HEAP: usize = 128 << 20;

/// The error for an evaluation stopped by [`MAX_EVALUATION_STEPS`] or [`MAX_EVALUATION_HEAP`],
/// saying what to change; `None` when neither bound was passed.
fn over_bound(eval: &Evaluator<'_, '_, '_>) -> Option<PolicyError> {
    // starlark checks both every thousand steps; these are its own measures.
    let steps = eval.get_total_tick_count();
    if steps > MAX_EVALUATION_STEPS {
        return Some(PolicyError::OverBound(format!(
            "the file ran more than {MAX_EVALUATION_STEPS} calls and loop steps ({steps}) \
             without finishing; a rules file declares rules: shorten the loop or recursion"
        )));
    }
    let heap = eval.heap().peak_allocated_bytes() + eval.frozen_heap().allocated_bytes();
    (heap > MAX_EVALUATION_HEAP).then(|| {
        PolicyError::OverBound(format!(
            "the file's values grew past {} MiB; a rules file declares rules: build smaller \
             lists and strings",
            MAX_EVALUATION_HEAP >> 20
        ))
    })
}

impl PolicyBuilder {
    /// `text` as the one copy every rule that repeats it holds.
    fn share(&mut self, text: &str) -> Arc<str> {
        if let Some(shared) = self.shared_text.get(text) {
            return shared.clone();
        }
        let shared: Arc<str> = text.into();
        self.shared_text.insert(shared.clone());
        shared
    }

    fn mark(&self) -> BuilderMark {
        BuilderMark {
            prefix_rules: self.prefix_rules.len(),
            network_rules: self.network_rules.len(),
            host_executables: self.host_executables.clone(),
            address_rules: self.address_rules.len(),
            unix_rules: self.unix_rules.len(),
            enforcement: self.enforcement,
            rule_sets: self.rule_sets.len(),
            sandbox: self.sandbox.clone(),
            pending_examples: self.pending_examples.len(),
        }
    }

    /// Forgets everything recorded since `mark` was taken.
    fn rewind(&mut self, mark: BuilderMark) {
        self.prefix_rules.truncate(mark.prefix_rules);
        self.network_rules.truncate(mark.network_rules);
        self.host_executables = mark.host_executables;
        self.address_rules.truncate(mark.address_rules);
        self.unix_rules.truncate(mark.unix_rules);
        self.enforcement = mark.enforcement;
        self.rule_sets.truncate(mark.rule_sets);
        self.sandbox = mark.sandbox;
        self.pending_examples.truncate(mark.pending_examples);
    }

    /// Checks the examples of the rules defined since `first`, each against a policy of only
    /// its own expansions and the host executables known now (docs/policy-language.md §1.5).
    fn check_examples_from(&self, first: usize) -> Result<()> {
        self.pending_examples[first..]
            .iter()
            .try_for_each(|pending| pending.check(&self.host_executables))
    }
}

fn policy_builder<'a>(eval: &Evaluator<'_, 'a, '_>) -> RefMut<'a, PolicyBuilder> {
    eval.extra
        .and_then(|extra| extra.downcast_ref::<RefCell<PolicyBuilder>>())
        .expect("the rules builtins run only inside PolicyParser::parse")
        .borrow_mut()
}

fn location_of_call(eval: &Evaluator<'_, '_, '_>) -> Option<ErrorLocation> {
    eval.call_stack_top_location()
        .map(|span| ErrorLocation::from_span(&span))
}

fn origin_of(location: &Option<ErrorLocation>) -> Option<RuleOrigin> {
    location.as_ref().map(|loc| RuleOrigin {
        file: loc.path.as_str().into(),
        line: loc.start.line,
    })
}

fn parse_justification(raw: Option<&str>) -> Result<Option<String>> {
    match raw {
        Some(text) if text.trim().is_empty() => Err(PolicyError::InvalidRule(
            "justification cannot be empty".to_string(),
        )),
        other => Ok(other.map(str::to_string)),
    }
}

/// A value given for one of guard's own optional parameters, where an explicit `None` means
/// "not given" (unlike the reference's builtins, whose optional strings refuse `None`).
fn given(value: Option<Value<'_>>) -> Option<Value<'_>> {
    value.filter(|value| !value.is_none())
}

/// `justification=` of guard's own builtins: `None` or a string that is not blank.
fn parse_optional_justification(builtin: &str, value: Option<Value<'_>>) -> Result<Option<String>> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    let text = value.unpack_str().ok_or_else(|| {
        PolicyError::InvalidRule(format!(
            "{builtin} justification must be a string (got {})",
            value.get_type()
        ))
    })?;
    parse_justification(Some(text))
}

/// `addresses=[...]` of `address_rule`: a non-empty list of strings.
fn parse_addresses(addresses: UnpackList<Value<'_>>) -> Result<Vec<super::rule::AddressTarget>> {
    if addresses.items.is_empty() {
        return Err(PolicyError::InvalidRule(
            "address_rule addresses cannot be empty".to_string(),
        ));
    }
    let mut targets = Vec::new();
    for value in addresses.items {
        let raw = value.unpack_str().ok_or_else(|| {
            PolicyError::InvalidRule(format!(
                "address_rule addresses must be strings (got {})",
                value.get_type()
            ))
        })?;
        let target = parse_address_target(raw)?;
        if !targets.contains(&target) {
            targets.push(target);
        }
    }
    Ok(targets)
}

/// `ports=` of `address_rule`: `None` (any port) or a non-empty list of ints 1..=65535.
fn parse_ports(value: Option<Value<'_>>) -> Result<Option<Vec<u16>>> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    let Some(list) = ListRef::from_value(value) else {
        return Err(PolicyError::InvalidRule(format!(
            "address_rule ports must be a list of port numbers or None (got {})",
            value.get_type()
        )));
    };
    if list.is_empty() {
        return Err(PolicyError::InvalidRule(
            "address_rule ports cannot be empty (leave ports out to mean any port)".to_string(),
        ));
    }
    let mut ports = Vec::new();
    for item in list.content() {
        let port = match (item.get_type(), item.unpack_i32()) {
            ("int", Some(port)) => parse_port(i64::from(port))?,
            ("int", None) => {
                return Err(PolicyError::InvalidRule(format!(
                    "invalid port {} in address_rule: ports are 1 to 65535",
                    item.to_repr()
                )));
            }
            (other, _) => {
                return Err(PolicyError::InvalidRule(format!(
                    "address_rule ports must be integers (got {other})"
                )));
            }
        };
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    Ok(Some(ports))
}

/// `unmatched_exec=` / `unmatched_network=` / `unmatched_unix=` of `enforcement`: `None` or allow/prompt/deny.
fn parse_enforcement_decision(key: &str, value: Option<Value<'_>>) -> Result<Option<Decision>> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    value
        .unpack_str()
        .and_then(|raw| parse_network_decision(raw).ok())
        .map(Some)
        .ok_or_else(|| {
            PolicyError::InvalidRule(format!(
                "enforcement {key} must be \"allow\", \"prompt\" or \"deny\" (got {})",
                value.to_repr()
            ))
        })
}

/// `socket_kinds=` of `enforcement`: `None` or a list of kind names (`"ping"`, `"raw"`,
/// `"udplite"`, `"sctp"`, `"other"`).
fn parse_socket_kinds(value: Option<Value<'_>>) -> Result<Option<SocketKinds>> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    let names: Vec<&str> = guard_common::sockets::kind::NAMES
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let expected = || {
        format!(
            "enforcement socket_kinds must be a list of {} (got {})",
            names
                .iter()
                .map(|n| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", "),
            value.to_repr()
        )
    };
    let list = ListRef::from_value(value).ok_or_else(|| PolicyError::InvalidRule(expected()))?;
    let mut kinds = SocketKinds::NONE;
    for item in list.iter() {
        let kind = item
            .unpack_str()
            .and_then(SocketKinds::named)
            .ok_or_else(|| PolicyError::InvalidRule(expected()))?;
        kinds = kinds.with(kind);
    }
    Ok(Some(kinds))
}

/// `audit_only=` of `enforcement`: `None`, `True` or `False`.
/// A cap of `enforcement` (`dns_max_labels=` ...): `None` or a whole number from 1 to `most`.
fn parse_cap<T: TryFrom<i32> + Into<u64> + Copy>(
    key: &str,
    value: Option<Value<'_>>,
    most: T,
) -> Result<Option<T>> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    value
        .unpack_i32()
        .filter(|n| *n >= 1)
        .and_then(|n| T::try_from(n).ok())
        .filter(|n| (*n).into() <= most.into())
        .map(Some)
        .ok_or_else(|| {
            PolicyError::InvalidRule(format!(
                "enforcement {key} must be a whole number from 1 to {} (got {})",
                most.into(),
                value.to_repr()
            ))
        })
}

fn parse_enforcement_audit_only(value: Option<Value<'_>>) -> Result<Option<bool>> {
    let Some(value) = given(value) else {
        return Ok(None);
    };
    value.unpack_bool().map(Some).ok_or_else(|| {
        PolicyError::InvalidRule(format!(
            "enforcement audit_only must be True or False (got {})",
            value.to_repr()
        ))
    })
}

fn parse_pattern(pattern: UnpackList<Value<'_>>) -> Result<Vec<PatternToken>> {
    let tokens = pattern
        .items
        .into_iter()
        .map(parse_pattern_token)
        .collect::<Result<Vec<_>>>()?;
    if tokens.is_empty() {
        return Err(PolicyError::InvalidPattern(
            "pattern cannot be empty".to_string(),
        ));
    }
    Ok(tokens)
}

fn parse_pattern_token(value: Value<'_>) -> Result<PatternToken> {
    if let Some(token) = value.unpack_str() {
        return Ok(PatternToken::Single(token.to_string()));
    }
    let Some(list) = ListRef::from_value(value) else {
        return Err(PolicyError::InvalidPattern(format!(
            "pattern element must be a string or list of strings (got {})",
            value.get_type()
        )));
    };
    let mut alternatives = list
        .content()
        .iter()
        .map(|alt| {
            alt.unpack_str().map(str::to_string).ok_or_else(|| {
                PolicyError::InvalidPattern(format!(
                    "pattern alternative must be a string (got {})",
                    alt.get_type()
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    match alternatives.len() {
        0 => Err(PolicyError::InvalidPattern(
            "pattern alternatives cannot be empty".to_string(),
        )),
        1 => Ok(PatternToken::Single(alternatives.remove(0))),
        _ => Ok(PatternToken::Alts(alternatives)),
    }
}

fn validate_host_executable_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(PolicyError::InvalidRule(
            "host_executable name cannot be empty".to_string(),
        ));
    }
    let path = Path::new(name);
    if path.components().count() != 1 || executable_name(path) != Some(name) {
        return Err(PolicyError::InvalidRule(format!(
            "host_executable name must be a bare executable name (got {name})"
        )));
    }
    Ok(())
}

fn parse_host_executable_path(name: &str, value: Value<'_>) -> Result<PathBuf> {
    let raw = value.unpack_str().ok_or_else(|| {
        PolicyError::InvalidRule(format!(
            "host_executable paths must be strings (got {})",
            value.get_type()
        ))
    })?;
    // Absolute before any `~` expansion: `~/bin/git` is refused, as in the reference.
    if !Path::new(raw).is_absolute() {
        return Err(PolicyError::InvalidRule(format!(
            "host_executable paths must be absolute (got {raw})"
        )));
    }
    let path = normalize_lexically(Path::new(raw));
    if executable_name(&path) != Some(name) {
        return Err(PolicyError::InvalidRule(format!(
            "host_executable path `{raw}` must have basename `{name}`"
        )));
    }
    Ok(path)
}

/// What `prefix_rule(...)` records: its pattern expanded by first token, and its examples to
/// check when the file ends.
#[allow(clippy::too_many_arguments)]
fn record_prefix_rule<'v>(
    pattern: UnpackList<Value<'v>>,
    decision: Option<&'v str>,
    r#match: Option<UnpackList<Value<'v>>>,
    not_match: Option<UnpackList<Value<'v>>>,
    justification: Option<&'v str>,
    audit_only: bool,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<NoneType> {
    let decision = decision.map_or(Ok(Decision::Allow), parse_decision)?;
    let justification = parse_justification(justification)?;
    let tokens = parse_pattern(pattern)?;
    let matches = r#match.map(parse_examples).transpose()?.unwrap_or_default();
    let not_matches = not_match
        .map(parse_examples)
        .transpose()?
        .unwrap_or_default();
    let location = location_of_call(eval);
    let mut builder = policy_builder(eval);
    // One copy of the file's name and of each program name, shared by the rules.
    let origin = location.as_ref().map(|loc| RuleOrigin {
        file: builder.share(loc.path.as_str()),
        line: loc.start.line,
    });

    let (first, rest) = tokens.split_first().expect("parse_pattern refuses []");
    let rest: Arc<[PatternToken]> = rest.into();
    // One rule per first-position alternative (duplicates kept): rules are indexed by it.
    let expansions: Vec<PrefixRule> = first
        .alternatives()
        .iter()
        .map(|program| PrefixRule {
            id: RuleId(0),
            pattern: PrefixPattern {
                first: builder.share(program),
                rest: rest.clone(),
            },
            decision,
            justification: justification.clone(),
            origin: origin.clone(),
            audit_only,
        })
        .collect();
    if !matches.is_empty() || !not_matches.is_empty() {
        builder.pending_examples.push(PendingExamples {
            rules: expansions.clone(),
            matches,
            not_matches,
            location,
        });
    }
    builder
        .prefix_rules
        .extend(expansions.into_iter().map(Arc::new));
    Ok(NoneType)
}

/// The Codex CLI's `prefix_rule(pattern, decision="allow", match=[], not_match=[],
/// justification=None)`.
#[starlark_module]
fn codex_prefix_rule(globals: &mut GlobalsBuilder) {
    fn prefix_rule<'v>(
        pattern: UnpackList<Value<'v>>,
        decision: Option<&'v str>,
        r#match: Option<UnpackList<Value<'v>>>,
        not_match: Option<UnpackList<Value<'v>>>,
        justification: Option<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        record_prefix_rule(
            pattern,
            decision,
            r#match,
            not_match,
            justification,
            false,
            eval,
        )
    }
}

/// The builtins the Codex CLI and guard share: `network_rule` and `host_executable`.
#[starlark_module]
fn shared_builtins(globals: &mut GlobalsBuilder) {
    /// `network_rule(host, protocol, decision, justification=None)`
    fn network_rule<'v>(
        host: &'v str,
        protocol: &'v str,
        decision: &'v str,
        justification: Option<&'v str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let protocol = NetworkProtocol::parse(protocol)?;
        let decision = parse_network_decision(decision)?;
        let justification = parse_justification(justification)?;
        let host = normalize_network_host(host)?;
        let origin = origin_of(&location_of_call(eval));
        policy_builder(eval).network_rules.push(NetworkRule {
            host,
            protocol,
            decision,
            justification,
            origin,
        });
        Ok(NoneType)
    }

    /// `host_executable(name, paths)`: the absolute paths through which `name`'s rules apply.
    fn host_executable<'v>(
        name: &'v str,
        paths: UnpackList<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        validate_host_executable_name(name)?;
        let mut parsed: Vec<PathBuf> = Vec::new();
        for value in paths.items {
            let path = parse_host_executable_path(name, value)?;
            if !parsed.contains(&path) {
                parsed.push(path);
            }
        }
        policy_builder(eval)
            .host_executables
            .insert(name.to_string(), parsed.into());
        Ok(NoneType)
    }
}

/// guard's builtins: `prefix_rule` with `audit_only`, and its kernel-only additions.
#[starlark_module]
fn guard_builtins(globals: &mut GlobalsBuilder) {
    /// `prefix_rule(pattern, decision="allow", match=[], not_match=[], justification=None,
    /// audit_only=False)`. `audit_only` is guard's: the kernel records the decision and lets
    /// the exec through.
    fn prefix_rule<'v>(
        pattern: UnpackList<Value<'v>>,
        decision: Option<&'v str>,
        r#match: Option<UnpackList<Value<'v>>>,
        not_match: Option<UnpackList<Value<'v>>>,
        justification: Option<&'v str>,
        audit_only: Option<bool>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        record_prefix_rule(
            pattern,
            decision,
            r#match,
            not_match,
            justification,
            audit_only.unwrap_or(false),
            eval,
        )
    }

    /// `address_rule(addresses, decision, ports=None, transport="any", justification=None,
    /// audit_only=False)`: destinations by IP address, CIDR or host name (guard's own builtin).
    fn address_rule<'v>(
        addresses: UnpackList<Value<'v>>,
        decision: &'v str,
        ports: Option<Value<'v>>,
        transport: Option<&'v str>,
        justification: Option<Value<'v>>,
        audit_only: Option<bool>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let addresses = parse_addresses(addresses)?;
        let decision = parse_network_decision(decision)?;
        let ports = parse_ports(ports)?;
        let transport = transport.map_or(Ok(Transport::Any), parse_transport)?;
        let justification = parse_optional_justification("address_rule", justification)?;
        let origin = origin_of(&location_of_call(eval));
        policy_builder(eval).address_rules.push(AddressRule {
            id: RuleId(0),
            addresses,
            ports,
            transport,
            decision,
            justification,
            audit_only: audit_only.unwrap_or(false),
            origin,
        });
        Ok(NoneType)
    }

    /// `unix_rule(socket, decision, justification=None)`: a unix socket by path or abstract
    /// name (`@name`), whole or as a prefix (a trailing `*`) (guard's own builtin).
    fn unix_rule<'v>(
        socket: &'v str,
        decision: &'v str,
        justification: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let socket = super::unix::UnixSocket::parse(socket)
            .map_err(|why| PolicyError::InvalidRule(format!("unix_rule socket {why}")))?;
        let decision = parse_network_decision(decision)?;
        let justification = parse_optional_justification("unix_rule", justification)?;
        let origin = origin_of(&location_of_call(eval));
        policy_builder(eval).unix_rules.push(super::unix::UnixRule {
            id: RuleId(0),
            socket,
            decision,
            justification,
            origin,
        });
        Ok(NoneType)
    }

    /// `enforcement(unmatched_exec=None, unmatched_network=None, audit_only=None,
    /// anonymous_exec=None, socket_kinds=None, unmatched_unix=None, dns_max_labels=None,
    /// dns_max_name_length=None, dns_wildcard_lookups_per_second=None)`: what the kernel does
    /// where no rule speaks, global audit-only mode, and what guard's resolver forwards under a
    /// host pattern. Each call sets only the keys it gives (`None` is "not given"); a later call
    /// overrides earlier keys. A builtin takes its keyword arguments as parameters, one per key.
    #[allow(clippy::too_many_arguments)]
    fn enforcement<'v>(
        unmatched_exec: Option<Value<'v>>,
        unmatched_network: Option<Value<'v>>,
        audit_only: Option<Value<'v>>,
        #[starlark(require = named)] anonymous_exec: Option<Value<'v>>,
        #[starlark(require = named)] socket_kinds: Option<Value<'v>>,
        #[starlark(require = named)] unmatched_unix: Option<Value<'v>>,
        #[starlark(require = named)] dns_max_labels: Option<Value<'v>>,
        #[starlark(require = named)] dns_max_name_length: Option<Value<'v>>,
        #[starlark(require = named)] dns_wildcard_lookups_per_second: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let none = crate::policy::rule::DnsCaps::NONE;
        let later = EnforcementOverrides {
            unmatched_exec: parse_enforcement_decision("unmatched_exec", unmatched_exec)?,
            unmatched_network: parse_enforcement_decision("unmatched_network", unmatched_network)?,
            unmatched_unix: parse_enforcement_decision("unmatched_unix", unmatched_unix)?,
            audit_only: parse_enforcement_audit_only(audit_only)?,
            anonymous_exec: parse_enforcement_decision("anonymous_exec", anonymous_exec)?,
            socket_kinds: parse_socket_kinds(socket_kinds)?,
            dns_max_labels: parse_cap("dns_max_labels", dns_max_labels, none.max_labels)?,
            dns_max_name_length: parse_cap(
                "dns_max_name_length",
                dns_max_name_length,
                none.max_name_length,
            )?,
            dns_wildcard_lookups_per_second: parse_cap(
                "dns_wildcard_lookups_per_second",
                dns_wildcard_lookups_per_second,
                none.wildcard_lookups_per_second,
            )?,
        };
        let mut builder = policy_builder(eval);
        builder.enforcement = builder.enforcement.then(later);
        Ok(NoneType)
    }

    /// `rule_set(deny=[], ask=[], allow=[])`: glob patterns over a tool and its subject, first
    /// match deny → ask → allow within the set (see `policy::rule_set`). Keywords only, so
    /// which list a pattern is in is always written out.
    fn rule_set<'v>(
        #[starlark(require = named)] deny: Option<UnpackList<&'v str>>,
        #[starlark(require = named)] ask: Option<UnpackList<&'v str>>,
        #[starlark(require = named)] allow: Option<UnpackList<&'v str>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let items = |list: Option<UnpackList<&'v str>>| list.map(|l| l.items).unwrap_or_default();
        let origin = origin_of(&location_of_call(eval));
        let rule_set = RuleSet::parse(&items(deny), &items(ask), &items(allow), origin)?;
        policy_builder(eval).rule_sets.push(rule_set);
        Ok(NoneType)
    }

    /// `sandbox(mode, writable=[])` (guard-only): the write confinement of `guard run`'s
    /// command when `--sandbox` does not choose: `read-only`, `workspace-write` (with
    /// `writable` as extra roots) or `danger-full-access`. A later call replaces an earlier one.
    fn sandbox<'v>(
        mode: &'v str,
        #[starlark(require = named)] writable: Option<UnpackList<&'v str>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let Some(parsed) = SandboxMode::runnable(mode) else {
            return Err(PolicyError::InvalidRule(format!(
                "sandbox(mode={mode:?}): not a mode; use one of \"read-only\", \
                 \"workspace-write\", \"danger-full-access\""
            ))
            .into());
        };
        let writable: Vec<PathBuf> = writable
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .map(PathBuf::from)
            .collect();
        if parsed != SandboxMode::WorkspaceWrite && !writable.is_empty() {
            return Err(PolicyError::InvalidRule(format!(
                "sandbox(mode={mode:?}, writable=...): only workspace-write has writable roots; \
                 drop writable or use mode=\"workspace-write\""
            ))
            .into());
        }
        let from = origin_of(&location_of_call(eval))
            .map(|o| o.to_string())
            .unwrap_or_default();
        policy_builder(eval).sandbox = Some(SandboxSetting {
            mode: parsed,
            writable,
            from,
        });
        Ok(NoneType)
    }
}

#[cfg(test)]
#[path = "parser_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "kernel_builtins_tests.rs"]
mod kernel_builtins_tests;
