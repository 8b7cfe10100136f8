//! One `define_program` spec and how it reads one exec's arguments (docs/policy-language.md §8.2): options left
//! to right, then the positional arguments against the patterns, then the required opts.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use super::args::resolve_positional_args;
use super::error::Error;
use super::matchers::{ArgMatcher, ArgType};

/// One exec to check: the program as written in argv[0] and the arguments after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecCall {
    pub program: String,
    pub args: Vec<String>,
}

impl ExecCall {
    /// `argv[0]` and the rest; `None` for an empty argv.
    pub fn from_argv(argv: &[String]) -> Option<Self> {
        let (program, args) = argv.split_first()?;
        Some(ExecCall {
            program: program.clone(),
            args: args.to_vec(),
        })
    }
}

/// A declared option: `flag(name)` takes no value, `opt(name, type)` takes the next token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opt {
    pub name: String,
    pub kind: OptKind,
    pub required: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptKind {
    Flag,
    Value(ArgType),
}

/// A token that is not an option, with its index among the arguments (argv[1] is 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PositionalArg {
    pub index: usize,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MatchedArg {
    pub index: usize,
    #[serde(rename = "type")]
    pub arg_type: ArgType,
    pub value: String,
}

impl MatchedArg {
    /// A positional argument matched by a pattern of `arg_type`, once its value passes.
    pub fn new(index: usize, arg_type: ArgType, value: &str) -> Result<Self, Error> {
        arg_type.validate(value)?;
        Ok(MatchedArg {
            index,
            arg_type,
            value: value.to_string(),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MatchedFlag {
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MatchedOpt {
    pub name: String,
    pub value: String,
    #[serde(rename = "type")]
    pub arg_type: ArgType,
}

/// An exec the policy understood: every token accounted for and typed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ValidExec {
    pub program: String,
    pub flags: Vec<MatchedFlag>,
    pub opts: Vec<MatchedOpt>,
    pub args: Vec<MatchedArg>,
    pub system_path: Vec<String>,
}

impl ValidExec {
    /// Whether any value may write a file or is unverified: such an exec is `match`, not `safe`.
    pub fn might_write_files(&self) -> bool {
        self.args.iter().any(|arg| arg.arg_type.might_write_files())
            || self.opts.iter().any(|opt| opt.arg_type.might_write_files())
    }
}

/// What the policy made of an exec it could read: a match, or a refusal. A refusal by a spec's
/// `forbidden=` carries the exec it matched; one by a forbidden substring or program regex
/// (checked before any spec) has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchedExec {
    Match {
        exec: ValidExec,
    },
    Forbidden {
        reason: String,
        exec: Option<ValidExec>,
    },
}

/// What `define_program(...)` declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramSpec {
    pub program: String,
    pub system_path: Vec<String>,
    /// Accepted and kept, but not implemented (§8.1): `-al` is not `-a -l`.
    pub option_bundling: bool,
    /// Accepted and kept, but not implemented (§8.1): `--max-count=1` is not split.
    pub combined_format: bool,
    pub options: HashMap<String, Opt>,
    pub arg_patterns: Vec<ArgMatcher>,
    pub forbidden: Option<String>,
    /// Argument lists (without the program) that should match; checked only on request.
    pub should_match: Vec<Vec<String>>,
    pub should_not_match: Vec<Vec<String>>,
}

impl ProgramSpec {
    fn required_options(&self) -> BTreeSet<&str> {
        self.options
            .values()
            .filter(|opt| opt.required)
            .map(|opt| opt.name.as_str())
            .collect()
    }

    /// Reads `exec`'s arguments with this spec.
    pub fn check(&self, exec: &ExecCall) -> Result<MatchedExec, Error> {
        let program = &self.program;
        let mut flags = Vec::new();
        let mut opts: Vec<MatchedOpt> = Vec::new();
        let mut positional = Vec::new();
        let mut pending: Option<(&Opt, &ArgType)> = None;
        for (index, token) in exec.args.iter().enumerate() {
            if let Some((opt, arg_type)) = pending.take() {
                if token.starts_with('-') {
                    return Err(Error::OptionFollowedByOptionInsteadOfValue {
                        program: program.clone(),
                        option: opt.name.clone(),
                        value: token.clone(),
                    });
                }
                arg_type.validate(token)?;
                opts.push(MatchedOpt {
                    name: opt.name.clone(),
                    value: token.clone(),
                    arg_type: arg_type.clone(),
                });
            } else if token == "--" {
                return Err(Error::DoubleDashNotSupportedYet {
                    program: program.clone(),
                });
            } else if token.starts_with('-') {
                let Some(opt) = self.options.get(token) else {
                    return Err(Error::UnknownOption {
                        program: program.clone(),
                        option: token.clone(),
                    });
                };
                match &opt.kind {
                    OptKind::Flag => flags.push(MatchedFlag {
                        name: opt.name.clone(),
                    }),
                    OptKind::Value(arg_type) => pending = Some((opt, arg_type)),
                }
            } else {
                positional.push(PositionalArg {
                    index,
                    value: token.clone(),
                });
            }
        }
        if let Some((opt, _)) = pending {
            return Err(Error::OptionMissingValue {
                program: program.clone(),
                option: opt.name.clone(),
            });
        }
        let args = resolve_positional_args(program, positional, &self.arg_patterns)?;
        let given: BTreeSet<&str> = opts.iter().map(|opt| opt.name.as_str()).collect();
        let missing: Vec<String> = self
            .required_options()
            .difference(&given)
            .map(|name| name.to_string())
            .collect();
        if !missing.is_empty() {
            return Err(Error::MissingRequiredOptions {
                program: program.clone(),
                options: missing,
            });
        }
        let exec = ValidExec {
            program: program.clone(),
            flags,
            opts,
            args,
            system_path: self.system_path.clone(),
        };
        Ok(match &self.forbidden {
            Some(reason) => MatchedExec::Forbidden {
                reason: reason.clone(),
                exec: Some(exec),
            },
            None => MatchedExec::Match { exec },
        })
    }

    fn example(&self, args: &[String]) -> ExecCall {
        ExecCall {
            program: self.program.clone(),
            args: args.to_vec(),
        }
    }

    /// The `should_match` examples this spec refuses, with why.
    pub fn failing_should_match(&self) -> Vec<(Vec<String>, Error)> {
        self.should_match
            .iter()
            .filter_map(|args| {
                self.check(&self.example(args))
                    .err()
                    .map(|e| (args.clone(), e))
            })
            .collect()
    }

    /// The `should_not_match` examples this spec accepts.
    pub fn passing_should_not_match(&self) -> Vec<Vec<String>> {
        self.should_not_match
            .iter()
            .filter(|args| self.check(&self.example(args)).is_ok())
            .cloned()
            .collect()
    }
}
