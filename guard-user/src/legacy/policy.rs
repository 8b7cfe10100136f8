//! A legacy policy: the program specs by name, the forbidden program regexes and the forbidden
//! substrings, and the order they are consulted in (docs/policy-language.md §8.2).

use std::collections::HashMap;

use regex::Regex;

use super::error::Error;
use super::program::{ExecCall, MatchedExec, ProgramSpec};

/// `forbid_program_regex(regex, reason)`.
#[derive(Clone, Debug)]
pub struct ForbiddenProgramRegex {
    pub regex: Regex,
    pub reason: String,
    /// The line of the call (1-based; 0 when unknown), so a kernel refusal names it.
    pub line: usize,
}

/// One string of a `forbid_substrings(strings)` call, and the call's line (1-based; 0 when
/// unknown).
#[derive(Clone, Debug)]
pub struct ForbiddenSubstring {
    pub text: String,
    pub line: usize,
}

#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Every spec for a program, in the order the policy defined them.
    programs: HashMap<String, Vec<ProgramSpec>>,
    forbidden_program_regexes: Vec<ForbiddenProgramRegex>,
    forbidden_substrings: Vec<ForbiddenSubstring>,
}

impl Policy {
    pub fn add_program_spec(&mut self, spec: ProgramSpec) {
        self.programs
            .entry(spec.program.clone())
            .or_default()
            .push(spec);
    }

    pub fn add_forbidden_substrings(&mut self, substrings: &[String], line: usize) {
        self.forbidden_substrings
            .extend(substrings.iter().map(|text| ForbiddenSubstring {
                text: text.clone(),
                line,
            }));
    }

    pub fn add_forbidden_program_regex(&mut self, regex: Regex, reason: String, line: usize) {
        self.forbidden_program_regexes.push(ForbiddenProgramRegex {
            regex,
            reason,
            line,
        });
    }

    /// `forbid_program_regex` calls, in order (the kernel's program-name table holds them).
    pub fn forbidden_program_regexes(&self) -> &[ForbiddenProgramRegex] {
        &self.forbidden_program_regexes
    }

    /// `forbid_substrings` strings, in order (the kernel's argv table holds them).
    pub fn forbidden_substrings(&self) -> &[ForbiddenSubstring] {
        &self.forbidden_substrings
    }

    /// The specs for `program`, in definition order.
    pub fn specs(&self, program: &str) -> &[ProgramSpec] {
        self.programs.get(program).map_or(&[], Vec::as_slice)
    }

    /// Forbidden program regexes first, then forbidden substrings over the arguments, then the
    /// program's specs: the first that accepts the exec decides, else the last one's error.
    pub fn check(&self, exec: &ExecCall) -> Result<MatchedExec, Error> {
        // An unanchored search: a policy anchors its regex itself when it means the whole name.
        if let Some(found) = self
            .forbidden_program_regexes
            .iter()
            .find(|forbidden| forbidden.regex.is_match(&exec.program))
        {
            return Ok(MatchedExec::Forbidden {
                reason: found.reason.clone(),
                exec: None,
            });
        }
        if let Some(arg) = exec.args.iter().find(|arg| {
            self.forbidden_substrings
                .iter()
                .any(|substring| arg.contains(substring.text.as_str()))
        }) {
            return Ok(MatchedExec::Forbidden {
                reason: format!("arg `{arg}` contains forbidden substring"),
                exec: None,
            });
        }
        let mut last_error = Error::NoSpecForProgram {
            program: exec.program.clone(),
        };
        for spec in self.specs(&exec.program) {
            match spec.check(exec) {
                Ok(matched) => return Ok(matched),
                Err(err) => last_error = err,
            }
        }
        Err(last_error)
    }

    /// Every spec's `should_match` example it refuses: (program, args, why).
    pub fn check_each_good_list_individually(&self) -> Vec<(String, Vec<String>, Error)> {
        self.all_specs()
            .flat_map(|spec| {
                spec.failing_should_match()
                    .into_iter()
                    .map(|(args, err)| (spec.program.clone(), args, err))
            })
            .collect()
    }

    /// Every spec's `should_not_match` example it accepts: (program, args).
    pub fn check_each_bad_list_individually(&self) -> Vec<(String, Vec<String>)> {
        self.all_specs()
            .flat_map(|spec| {
                spec.passing_should_not_match()
                    .into_iter()
                    .map(|args| (spec.program.clone(), args))
            })
            .collect()
    }

    fn all_specs(&self) -> impl Iterator<Item = &ProgramSpec> {
        let mut names: Vec<&String> = self.programs.keys().collect();
        names.sort();
        names
            .into_iter()
            .flat_map(|name| self.programs[name].iter())
    }
}
