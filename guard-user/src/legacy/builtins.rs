//! The Starlark side of the legacy engine (docs/policy-language.md §8.1): a policy file is a Starlark module
//! (Extended dialect, the `typing` extension, f-strings on) calling `define_program`,
//! `forbid_substrings` and `forbid_program_regex`, with `flag`, `opt` and the `ARG_*` matchers
//! to describe a program's options and arguments. The calls fill one [`Policy`].

// define_program's parameters are the policy language's (§8.1): one Rust argument each, in
// the code `starlark_module` generates, where an attribute on the function does not reach.
#![allow(clippy::too_many_arguments)]

use std::cell::{RefCell, RefMut};
use std::collections::HashMap;
use std::fmt;

use allocative::Allocative;
use anyhow::{anyhow, bail};
use regex::Regex;
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, LibraryExtension, Module};
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};
use starlark::values::list::UnpackList;
use starlark::values::none::NoneType;
use starlark::values::{NoSerialize, StarlarkValue, Value, starlark_value};
use starlark::{starlark_module, starlark_simple_value};

use super::matchers::ArgMatcher;
use super::policy::Policy;
use super::program::{Opt, OptKind, ProgramSpec};

/// An `ARG_*` global: a matcher as a Starlark value.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
struct MatcherValue(#[allocative(skip)] ArgMatcher);
starlark_simple_value!(MatcherValue);

#[starlark_value(type = "ArgMatcher")]
impl<'v> StarlarkValue<'v> for MatcherValue {}

impl fmt::Display for MatcherValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What `flag(...)` and `opt(...)` return, for `define_program(options=[...])`.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
struct OptValue(#[allocative(skip)] Opt);
starlark_simple_value!(OptValue);

#[starlark_value(type = "Opt")]
impl<'v> StarlarkValue<'v> for OptValue {}

impl fmt::Display for OptValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.kind {
            OptKind::Flag => write!(f, "flag({:?})", self.0.name),
            OptKind::Value(arg_type) => write!(
                f,
                "opt({:?}, {}, required={})",
                self.0.name,
                arg_type.name(),
                if self.0.required { "True" } else { "False" }
            ),
        }
    }
}

/// What the builtins have recorded so far.
#[derive(Default, ProvidesStaticType)]
struct Collected {
    policy: Policy,
}

fn collected<'a>(eval: &Evaluator<'_, 'a, '_>) -> RefMut<'a, Collected> {
    eval.extra
        .and_then(|extra| extra.downcast_ref::<RefCell<Collected>>())
        .expect("the legacy builtins run only inside parse_policy")
        .borrow_mut()
}

/// The 1-based line of the builtin call being evaluated (0 when starlark cannot say).
fn call_line(eval: &Evaluator<'_, '_, '_>) -> usize {
    eval.call_stack_top_location()
        .map_or(0, |span| span.resolve_span().begin.line + 1)
}

/// Reads one legacy policy. `name` is what error locations say (its path).
pub fn parse_policy(name: &str, source: &str) -> starlark::Result<Policy> {
    let mut dialect = Dialect::Extended.clone();
    dialect.enable_f_strings = true;
    let ast = AstModule::parse(name, source.to_string(), &dialect)?;
    let globals = GlobalsBuilder::extended_by(&[LibraryExtension::Typing])
        .with(legacy_builtins)
        .with(arg_matchers)
        .build();
    let collected = RefCell::new(Collected::default());
    Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        eval.extra = Some(&collected);
        eval.eval_module(ast, &globals).map(drop)
    })?;
    Ok(collected.into_inner().policy)
}

fn arg_matchers(globals: &mut GlobalsBuilder) {
    for (name, matcher) in ArgMatcher::PREDEFINED {
        globals.set(name, MatcherValue(matcher));
    }
}

/// A pattern of `args=[...]` or the type of `opt`: an `ARG_*` matcher, or a string literal.
fn matcher_of(what: &str, value: Value<'_>) -> anyhow::Result<ArgMatcher> {
    if let Some(literal) = value.unpack_str() {
        return Ok(ArgMatcher::Literal(literal.to_string()));
    }
    MatcherValue::from_value(value)
        .map(|matcher| matcher.0.clone())
        .ok_or_else(|| {
            anyhow!(
                "{what} must be an ARG_* matcher or a string literal (got {} {})",
                value.get_type(),
                value.to_repr()
            )
        })
}

fn options_by_name(options: Vec<Value<'_>>) -> anyhow::Result<HashMap<String, Opt>> {
    let mut by_name = HashMap::new();
    for value in options {
        let Some(opt) = OptValue::from_value(value) else {
            bail!(
                "define_program options must be flag(NAME) or opt(NAME, TYPE) (got {} {})",
                value.get_type(),
                value.to_repr()
            );
        };
        let opt = opt.0.clone();
        if by_name.contains_key(&opt.name) {
            bail!("duplicate flag: {}", opt.name);
        }
        by_name.insert(opt.name.clone(), opt);
    }
    Ok(by_name)
}

fn examples(lists: Option<UnpackList<UnpackList<String>>>) -> Vec<Vec<String>> {
    lists.map_or_else(Vec::new, |lists| {
        lists.items.into_iter().map(|list| list.items).collect()
    })
}

#[starlark_module]
fn legacy_builtins(globals: &mut GlobalsBuilder) {
    /// `define_program(program, system_path=[], option_bundling=False, combined_format=False,
    /// options=[], args=[], forbidden=None, should_match=[], should_not_match=[])`. Several
    /// calls may name one program: their specs are tried in order.
    fn define_program<'v>(
        program: &'v str,
        system_path: Option<UnpackList<String>>,
        option_bundling: Option<bool>,
        combined_format: Option<bool>,
        options: Option<UnpackList<Value<'v>>>,
        args: Option<UnpackList<Value<'v>>>,
        forbidden: Option<Value<'v>>,
        should_match: Option<UnpackList<UnpackList<String>>>,
        should_not_match: Option<UnpackList<UnpackList<String>>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let options = options_by_name(options.map_or_else(Vec::new, |list| list.items))?;
        let arg_patterns = args
            .map_or_else(Vec::new, |list| list.items)
            .into_iter()
            .map(|value| matcher_of("define_program args", value))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let forbidden = match forbidden {
            None => None,
            Some(value) if value.is_none() => None,
            Some(value) => Some(
                value
                    .unpack_str()
                    .ok_or_else(|| {
                        anyhow!(
                            "define_program forbidden must be a reason (a string) or None (got {})",
                            value.get_type()
                        )
                    })?
                    .to_string(),
            ),
        };
        let spec = ProgramSpec {
            program: program.to_string(),
            system_path: system_path.map_or_else(Vec::new, |list| list.items),
            option_bundling: option_bundling.unwrap_or(false),
            combined_format: combined_format.unwrap_or(false),
            options,
            arg_patterns,
            forbidden,
            should_match: examples(should_match),
            should_not_match: examples(should_not_match),
        };
        collected(eval).policy.add_program_spec(spec);
        Ok(NoneType)
    }

    /// `forbid_substrings(strings)`: an argument containing any of them is forbidden.
    fn forbid_substrings<'v>(
        strings: UnpackList<String>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let line = call_line(eval);
        collected(eval)
            .policy
            .add_forbidden_substrings(&strings.items, line);
        Ok(NoneType)
    }

    /// `forbid_program_regex(regex, reason)`: a program whose name the regex finds (anywhere:
    /// anchor it with `^...$` for the whole name) is forbidden with `reason`.
    fn forbid_program_regex<'v>(
        regex: &'v str,
        reason: &'v str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let compiled = Regex::new(regex)
            .map_err(|err| anyhow!("forbid_program_regex: invalid regex {regex:?}: {err}"))?;
        let line = call_line(eval);
        collected(eval)
            .policy
            .add_forbidden_program_regex(compiled, reason.to_string(), line);
        Ok(NoneType)
    }

    /// `flag(name)`: an option without a value.
    fn flag<'v>(name: &'v str) -> anyhow::Result<OptValue> {
        Ok(OptValue(Opt {
            name: name.to_string(),
            kind: OptKind::Flag,
            required: false,
        }))
    }

    /// `opt(name, type, required=False)`: an option whose value is the next token, checked as
    /// `type` (an `ARG_*` matcher or a literal).
    fn opt<'v>(
        name: &'v str,
        r#type: Value<'v>,
        required: Option<bool>,
    ) -> anyhow::Result<OptValue> {
        let matcher = matcher_of("opt type", r#type)?;
        Ok(OptValue(Opt {
            name: name.to_string(),
            kind: OptKind::Value(matcher.arg_type()),
            required: required.unwrap_or(false),
        }))
    }
}
