//! Why the legacy engine could not vouch for an exec: the error names of docs/policy-language.md §8, with their
//! fields. `guard legacy check --json` prints them as `{"type": NAME, ...fields}`, so the names
//! and fields are an interface: tools match on them.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use super::matchers::ArgMatcher;
use super::program::PositionalArg;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type")]
pub enum Error {
    NoSpecForProgram {
        program: String,
    },
    OptionMissingValue {
        program: String,
        option: String,
    },
    OptionFollowedByOptionInsteadOfValue {
        program: String,
        option: String,
        value: String,
    },
    UnknownOption {
        program: String,
        option: String,
    },
    UnexpectedArguments {
        program: String,
        args: Vec<PositionalArg>,
    },
    DoubleDashNotSupportedYet {
        program: String,
    },
    MultipleVarargPatterns {
        program: String,
        first: ArgMatcher,
        second: ArgMatcher,
    },
    RangeStartExceedsEnd {
        start: usize,
        end: usize,
    },
    RangeEndOutOfBounds {
        end: usize,
        len: usize,
    },
    PrefixOverlapsSuffix {},
    NotEnoughArgs {
        program: String,
        args: Vec<PositionalArg>,
        arg_patterns: Vec<ArgMatcher>,
    },
    VarargMatcherDidNotMatchAnything {
        program: String,
        matcher: ArgMatcher,
    },
    EmptyFileName {},
    LiteralValueDidNotMatch {
        expected: String,
        actual: String,
    },
    InvalidPositiveInteger {
        value: String,
    },
    MissingRequiredOptions {
        program: String,
        options: Vec<String>,
    },
    SedCommandNotProvablySafe {
        command: String,
    },
    ReadablePathNotInReadableFolders {
        file: PathBuf,
        folders: Vec<PathBuf>,
    },
    WriteablePathNotInWriteableFolders {
        file: PathBuf,
        folders: Vec<PathBuf>,
    },
    CannotCheckRelativePath {
        file: PathBuf,
    },
    CannotCanonicalizePath {
        file: String,
        error: String,
    },
}

impl Error {
    /// The variant's name, as `"type"` in JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Error::NoSpecForProgram { .. } => "NoSpecForProgram",
            Error::OptionMissingValue { .. } => "OptionMissingValue",
            Error::OptionFollowedByOptionInsteadOfValue { .. } => {
                "OptionFollowedByOptionInsteadOfValue"
            }
            Error::UnknownOption { .. } => "UnknownOption",
            Error::UnexpectedArguments { .. } => "UnexpectedArguments",
            Error::DoubleDashNotSupportedYet { .. } => "DoubleDashNotSupportedYet",
            Error::MultipleVarargPatterns { .. } => "MultipleVarargPatterns",
            Error::RangeStartExceedsEnd { .. } => "RangeStartExceedsEnd",
            Error::RangeEndOutOfBounds { .. } => "RangeEndOutOfBounds",
            Error::PrefixOverlapsSuffix {} => "PrefixOverlapsSuffix",
            Error::NotEnoughArgs { .. } => "NotEnoughArgs",
            Error::VarargMatcherDidNotMatchAnything { .. } => "VarargMatcherDidNotMatchAnything",
            Error::EmptyFileName {} => "EmptyFileName",
            Error::LiteralValueDidNotMatch { .. } => "LiteralValueDidNotMatch",
            Error::InvalidPositiveInteger { .. } => "InvalidPositiveInteger",
            Error::MissingRequiredOptions { .. } => "MissingRequiredOptions",
            Error::SedCommandNotProvablySafe { .. } => "SedCommandNotProvablySafe",
            Error::ReadablePathNotInReadableFolders { .. } => "ReadablePathNotInReadableFolders",
            Error::WriteablePathNotInWriteableFolders { .. } => {
                "WriteablePathNotInWriteableFolders"
            }
            Error::CannotCheckRelativePath { .. } => "CannotCheckRelativePath",
            Error::CannotCanonicalizePath { .. } => "CannotCanonicalizePath",
        }
    }
}

fn values(args: &[PositionalArg]) -> String {
    let quoted: Vec<String> = args.iter().map(|arg| format!("`{}`", arg.value)).collect();
    quoted.join(" ")
}

fn paths(folders: &[PathBuf]) -> String {
    if folders.is_empty() {
        return "none given".to_string();
    }
    let shown: Vec<String> = folders.iter().map(|f| f.display().to_string()).collect();
    shown.join(", ")
}

/// One sentence for people: what is wrong, with the words of the command line.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSpecForProgram { program } => {
                write!(
                    f,
                    "no define_program for `{program}` (program names are matched exactly, as written in argv[0])"
                )
            }
            Error::OptionMissingValue { program, option } => {
                write!(
                    f,
                    "`{program}` option `{option}` needs a value and none follows"
                )
            }
            Error::OptionFollowedByOptionInsteadOfValue {
                program,
                option,
                value,
            } => write!(
                f,
                "`{program}` option `{option}` needs a value, but `{value}` looks like an option"
            ),
            Error::UnknownOption { program, option } => write!(
                f,
                "`{program}` has no option `{option}` in the policy (options are matched exactly \
                 as declared: `-al` is not read as `-a -l`, nor `--opt=value` as `--opt value`)"
            ),
            Error::UnexpectedArguments { program, args } => {
                write!(
                    f,
                    "`{program}` takes no more arguments, got {}",
                    values(args)
                )
            }
            Error::DoubleDashNotSupportedYet { program } => {
                write!(f, "`{program}`: `--` in the arguments is not supported")
            }
            Error::MultipleVarargPatterns {
                program,
                first,
                second,
            } => write!(
                f,
                "the policy for `{program}` has two variadic patterns, {first} and {second}; a spec may have one"
            ),
            Error::RangeStartExceedsEnd { start, end } => {
                write!(f, "argument range {start}..{end} starts after it ends")
            }
            Error::RangeEndOutOfBounds { end, len } => {
                write!(f, "too few arguments: the patterns need {end}, got {len}")
            }
            Error::PrefixOverlapsSuffix {} => write!(
                f,
                "too few arguments for the patterns before and after the variadic one"
            ),
            Error::NotEnoughArgs {
                program,
                args,
                arg_patterns,
            } => {
                let patterns: Vec<String> = arg_patterns.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "too few arguments for `{program}`: got {} for [{}]",
                    args.len(),
                    patterns.join(", ")
                )
            }
            Error::VarargMatcherDidNotMatchAnything { program, matcher } => {
                write!(f, "`{program}` needs at least one argument for {matcher}")
            }
            Error::EmptyFileName {} => write!(f, "a file name is empty"),
            Error::LiteralValueDidNotMatch { expected, actual } => {
                write!(f, "expected `{expected}`, got `{actual}`")
            }
            Error::InvalidPositiveInteger { value } => {
                write!(f, "`{value}` is not a positive integer")
            }
            Error::MissingRequiredOptions { program, options } => write!(
                f,
                "`{program}` requires the option(s) {}",
                options.join(", ")
            ),
            Error::SedCommandNotProvablySafe { command } => write!(
                f,
                "sed command `{command}` is not provably safe (only `START,ENDp` is)"
            ),
            Error::ReadablePathNotInReadableFolders { file, folders } => write!(
                f,
                "`{}` is read, and is not inside a readable folder ({}); add --readable FOLDER",
                file.display(),
                paths(folders)
            ),
            Error::WriteablePathNotInWriteableFolders { file, folders } => write!(
                f,
                "`{}` is written, and is not inside a writeable folder ({}); add --writeable FOLDER",
                file.display(),
                paths(folders)
            ),
            Error::CannotCheckRelativePath { file } => write!(
                f,
                "`{}` is relative and no working folder was given (--cwd)",
                file.display()
            ),
            Error::CannotCanonicalizePath { file, error } => {
                write!(f, "cannot make `{file}` absolute: {error}")
            }
        }
    }
}
