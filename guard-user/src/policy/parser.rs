//! Reads `.rules` files: Starlark (Extended dialect, f-strings on) with three builtins,
//! `prefix_rule`, `network_rule` and `host_executable`, that record rules as a side effect.
//!
//! One [`PolicyParser`] reads any number of files in order and builds one [`Policy`]; examples
//! (`match` / `not_match`) are checked when each file finishes, against that file's own rules.

use std::cell::{RefCell, RefMut};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Module};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::syntax::{AstModule, Dialect};
use starlark::values::Value;
use starlark::values::list::{ListRef, UnpackList};
use starlark::values::none::NoneType;

use super::error::{ErrorLocation, PolicyError, Result};
use super::examples::{PendingExamples, parse_examples};
use super::host::normalize_network_host;
use super::model::Policy;
use super::paths::{executable_name, normalize_lexically};
use super::rule::{
    Decision, NetworkProtocol, NetworkRule, PatternToken, PrefixPattern, PrefixRule, RuleId,
    RuleOrigin, parse_decision, parse_network_decision,
};

/// Parses rules files in order into one policy.
#[derive(Default)]
pub struct PolicyParser {
    builder: RefCell<PolicyBuilder>,
}

/// What the builtins have recorded so far.
#[derive(Debug, Default, ProvidesStaticType)]
struct PolicyBuilder {
    prefix_rules: Vec<PrefixRule>,
    network_rules: Vec<NetworkRule>,
    host_executables: HashMap<String, Arc<[PathBuf]>>,
    pending_examples: Vec<PendingExamples>,
}

impl PolicyParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses one file. `identifier` (its path) is what error locations and rule origins name.
    pub fn parse(&mut self, identifier: &str, contents: &str) -> Result<()> {
        let first_pending = self.builder.borrow().pending_examples.len();
        let mut dialect = Dialect::Extended.clone();
        dialect.enable_f_strings = true;
        let ast = AstModule::parse(identifier, contents.to_string(), &dialect)
            .map_err(PolicyError::Starlark)?;
        let globals = GlobalsBuilder::standard().with(policy_builtins).build();
        Module::with_temp_heap(|module| {
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(&self.builder);
            eval.eval_module(ast, &globals)
                .map(drop)
                .map_err(PolicyError::Starlark)
        })?;
        self.builder.borrow().check_examples_from(first_pending)
    }

    pub fn build(self) -> Policy {
        let builder = self.builder.into_inner();
        Policy::from_parts(
            builder.prefix_rules,
            builder.network_rules,
            builder.host_executables,
        )
    }
}

impl PolicyBuilder {
    /// Checks the examples of the rules defined since `first`, each against a policy of only
    /// its own expansions and the host executables known now (spec §1.5).
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

#[starlark_module]
fn policy_builtins(globals: &mut GlobalsBuilder) {
    /// `prefix_rule(pattern, decision="allow", match=[], not_match=[], justification=None)`
    fn prefix_rule<'v>(
        pattern: UnpackList<Value<'v>>,
        decision: Option<&'v str>,
        r#match: Option<UnpackList<Value<'v>>>,
        not_match: Option<UnpackList<Value<'v>>>,
        justification: Option<&'v str>,
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
        let origin = origin_of(&location);

        let (first, rest) = tokens.split_first().expect("parse_pattern refuses []");
        let rest: Arc<[PatternToken]> = rest.into();
        // One rule per first-position alternative (duplicates kept): rules are indexed by it.
        let expansions: Vec<PrefixRule> = first
            .alternatives()
            .iter()
            .map(|program| PrefixRule {
                id: RuleId(0),
                pattern: PrefixPattern {
                    first: program.as_str().into(),
                    rest: rest.clone(),
                },
                decision,
                justification: justification.clone(),
                origin: origin.clone(),
            })
            .collect();
        let mut builder = policy_builder(eval);
        if !matches.is_empty() || !not_matches.is_empty() {
            builder.pending_examples.push(PendingExamples {
                rules: expansions.clone(),
                matches,
                not_matches,
                location,
            });
        }
        builder.prefix_rules.extend(expansions);
        Ok(NoneType)
    }

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

#[cfg(test)]
#[path = "parser_tests.rs"]
mod tests;
