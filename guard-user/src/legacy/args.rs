//! Positional arguments against a spec's patterns (docs/policy-language.md §8.2): the fixed-count patterns before
//! the one variadic pattern take the first arguments, those after it the last ones, and the
//! variadic pattern what is left between.

use super::error::Error;
use super::matchers::{ArgMatcher, Cardinality};
use super::program::{MatchedArg, PositionalArg};

/// The patterns split around the variadic one.
struct Partition<'a> {
    head: Vec<&'a ArgMatcher>,
    vararg: Option<&'a ArgMatcher>,
    tail: Vec<&'a ArgMatcher>,
}

fn partition<'a>(program: &str, patterns: &'a [ArgMatcher]) -> Result<Partition<'a>, Error> {
    let mut parts = Partition {
        head: Vec::new(),
        vararg: None,
        tail: Vec::new(),
    };
    for pattern in patterns {
        match (pattern.cardinality(), parts.vararg) {
            (Cardinality::One, None) => parts.head.push(pattern),
            (Cardinality::One, Some(_)) => parts.tail.push(pattern),
            (_, None) => parts.vararg = Some(pattern),
            (_, Some(first)) => {
                return Err(Error::MultipleVarargPatterns {
                    program: program.to_string(),
                    first: first.clone(),
                    second: pattern.clone(),
                });
            }
        }
    }
    Ok(parts)
}

/// `items[range]`, or the error that says which bound was wrong.
fn slice<T>(items: &[T], start: usize, end: usize) -> Result<&[T], Error> {
    if start > end {
        return Err(Error::RangeStartExceedsEnd { start, end });
    }
    if end > items.len() {
        return Err(Error::RangeEndOutOfBounds {
            end,
            len: items.len(),
        });
    }
    Ok(&items[start..end])
}

fn match_all(
    matched: &mut Vec<MatchedArg>,
    patterns: &[&ArgMatcher],
    args: &[PositionalArg],
) -> Result<(), Error> {
    for (pattern, arg) in patterns.iter().zip(args) {
        matched.push(MatchedArg::new(arg.index, pattern.arg_type(), &arg.value)?);
    }
    Ok(())
}

/// Types every positional argument, in order, or says why the patterns do not fit them.
pub fn resolve_positional_args(
    program: &str,
    args: Vec<PositionalArg>,
    patterns: &[ArgMatcher],
) -> Result<Vec<MatchedArg>, Error> {
    let parts = partition(program, patterns)?;
    let mut matched = Vec::with_capacity(args.len());

    let head_len = parts.head.len();
    match_all(&mut matched, &parts.head, slice(&args, 0, head_len)?)?;

    let tail_start = if parts.tail.is_empty() {
        args.len()
    } else {
        let Some(start) = args.len().checked_sub(parts.tail.len()) else {
            return Err(Error::NotEnoughArgs {
                program: program.to_string(),
                args,
                arg_patterns: patterns.to_vec(),
            });
        };
        start
    };

    match parts.vararg {
        Some(vararg) => {
            if head_len > tail_start {
                return Err(Error::PrefixOverlapsSuffix {});
            }
            let middle = slice(&args, head_len, tail_start)?;
            if middle.is_empty() && vararg.cardinality() == Cardinality::AtLeastOne {
                return Err(Error::VarargMatcherDidNotMatchAnything {
                    program: program.to_string(),
                    matcher: vararg.clone(),
                });
            }
            let arg_type = vararg.arg_type();
            for arg in middle {
                matched.push(MatchedArg::new(arg.index, arg_type.clone(), &arg.value)?);
            }
        }
        None if head_len < tail_start => {
            return Err(Error::UnexpectedArguments {
                program: program.to_string(),
                args: slice(&args, head_len, tail_start)?.to_vec(),
            });
        }
        None => {}
    }

    let tail = slice(&args, tail_start, args.len())?;
    match_all(&mut matched, &parts.tail, tail)?;
    Ok(matched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::legacy::matchers::ArgType;

    fn positional(values: &[&str]) -> Vec<PositionalArg> {
        values
            .iter()
            .enumerate()
            .map(|(index, value)| PositionalArg {
                index,
                value: value.to_string(),
            })
            .collect()
    }

    fn resolve(patterns: &[ArgMatcher], values: &[&str]) -> Result<Vec<MatchedArg>, Error> {
        resolve_positional_args("p", positional(values), patterns)
    }

    fn types(matched: &[MatchedArg]) -> Vec<&'static str> {
        matched.iter().map(|arg| arg.arg_type.name()).collect()
    }

    #[test]
    fn head_vararg_and_tail_split_the_arguments() {
        use ArgMatcher as M;
        let patterns = [M::OpaqueNonFile, M::ReadableFiles, M::WriteableFile];
        let matched = resolve(&patterns, &["x", "a", "b", "dst"]).unwrap();
        assert_eq!(
            types(&matched),
            [
                "OpaqueNonFile",
                "ReadableFile",
                "ReadableFile",
                "WriteableFile"
            ]
        );
        let indexes: Vec<usize> = matched.iter().map(|arg| arg.index).collect();
        assert_eq!(indexes, [0, 1, 2, 3]);
    }

    #[test]
    fn too_few_for_the_head_is_range_end_out_of_bounds() {
        let patterns = [ArgMatcher::OpaqueNonFile, ArgMatcher::OpaqueNonFile];
        assert_eq!(
            resolve(&patterns, &["x"]),
            Err(Error::RangeEndOutOfBounds { end: 2, len: 1 })
        );
    }

    #[test]
    fn too_few_for_the_tail_is_not_enough_args() {
        let patterns = [ArgMatcher::ReadableFiles, ArgMatcher::WriteableFile];
        assert_eq!(
            resolve(&patterns, &[]),
            Err(Error::NotEnoughArgs {
                program: "p".into(),
                args: vec![],
                arg_patterns: patterns.to_vec(),
            })
        );
    }

    #[test]
    fn head_and_tail_sharing_an_argument_overlap() {
        use ArgMatcher as M;
        let patterns = [M::OpaqueNonFile, M::UnverifiedVarargs, M::WriteableFile];
        assert_eq!(
            resolve(&patterns, &["only"]),
            Err(Error::PrefixOverlapsSuffix {})
        );
    }

    #[test]
    fn an_empty_one_or_more_vararg_is_refused_and_zero_or_more_is_not() {
        assert_eq!(
            resolve(&[ArgMatcher::ReadableFiles], &[]),
            Err(Error::VarargMatcherDidNotMatchAnything {
                program: "p".into(),
                matcher: ArgMatcher::ReadableFiles,
            })
        );
        assert_eq!(resolve(&[ArgMatcher::ReadableFilesOrCwd], &[]), Ok(vec![]));
        assert_eq!(resolve(&[ArgMatcher::UnverifiedVarargs], &[]), Ok(vec![]));
    }

    #[test]
    fn a_second_vararg_is_refused() {
        let patterns = [ArgMatcher::ReadableFiles, ArgMatcher::UnverifiedVarargs];
        assert_eq!(
            resolve(&patterns, &["a"]),
            Err(Error::MultipleVarargPatterns {
                program: "p".into(),
                first: ArgMatcher::ReadableFiles,
                second: ArgMatcher::UnverifiedVarargs,
            })
        );
    }

    #[test]
    fn leftovers_without_a_vararg_are_unexpected() {
        assert_eq!(
            resolve(&[ArgMatcher::OpaqueNonFile], &["a", "b", "c"]),
            Err(Error::UnexpectedArguments {
                program: "p".into(),
                args: positional(&["a", "b", "c"])[1..].to_vec(),
            })
        );
    }

    #[test]
    fn each_value_is_validated_by_its_pattern() {
        let literal = ArgMatcher::Literal("status".into());
        assert_eq!(
            resolve(std::slice::from_ref(&literal), &["status"]).unwrap()[0].arg_type,
            ArgType::Literal("status".into())
        );
        assert_eq!(
            resolve(&[literal], &["push"]),
            Err(Error::LiteralValueDidNotMatch {
                expected: "status".into(),
                actual: "push".into()
            })
        );
        assert_eq!(
            resolve(&[ArgMatcher::ReadableFiles], &["a", ""]),
            Err(Error::EmptyFileName {})
        );
    }
}
