//! `guard legacy check`: classify one exec with a legacy (`define_program`) policy, and check
//! the files it reads and writes against allowed folders.

use std::path::PathBuf;
use std::process::ExitCode;

use anstream::{eprintln, println};
use anstyle::{AnsiColor, Style};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::cli::output::{EXIT_POLICY_ERROR, dim, print_json, usage_error};
use crate::legacy::{
    Classification, DEFAULT_POLICY_NAME, Error, ExecCall, LoadError, ValidExec, check_folders,
    classify, load_policy,
};
use crate::policy::render_example;

#[derive(Subcommand, Debug)]
pub enum LegacyCommand {
    /// Classify one exec as safe, match, forbidden or unverified, and optionally check that
    /// the files it reads and writes are inside the given folders.
    #[command(after_help = CHECK_HELP)]
    Check(CheckArgs),
}

const CHECK_HELP: &str = "Results:
  safe        every argument is understood and the exec only reads
  match       every argument is understood, but it writes a file (ARG_WFILE) or takes
              unverified arguments (ARG_UNVERIFIED_VARARGS)
  forbidden   a forbidden program regex or substring, or a spec's forbidden=, refuses it
  unverified  no define_program spec reads it; `error` says why (the last spec's error)

Options are matched exactly as declared: `ls -al` is unverified (UnknownOption `-al`) because
option bundling is not implemented; write `ls -a -l`.

The folder check runs when --readable or --writeable is given and the exec matched: every
ARG_RFILE(S) value must be inside a --readable folder and every ARG_WFILE value inside a
--writeable one, compared component by component after resolving `.` and `..` (symlinks are
not resolved: give canonical folders). Relative values need --cwd.

Examples:
  guard legacy check -- ls -a -l src
  guard legacy check --json -- cp notes.txt /tmp/out.txt
  guard legacy check --cwd \"$PWD\" --readable \"$PWD\" --writeable /tmp -- cp a.txt /tmp/a.txt
  guard legacy check --policy my.policy --json -- sed -n 1,20p README.md

Exit status: 0 when the check ran, whatever the result; 2 on a usage error or a policy that
does not load (`PATH:LINE: message` first).";

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// A legacy policy file (Starlark calling define_program, forbid_substrings,
    /// forbid_program_regex). Default: the built-in policy.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The working folder relative file arguments are resolved against (folder check only).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// A folder the exec may read files in (absolute). Repeat for several.
    #[arg(long = "readable", value_name = "DIR")]
    readable: Vec<PathBuf>,
    /// A folder the exec may write files in (absolute). Repeat for several.
    #[arg(long = "writeable", value_name = "DIR")]
    writeable: Vec<PathBuf>,
    /// Print one JSON object instead of an explanation.
    #[arg(long)]
    json: bool,
    /// The exec to classify (after `--`): the program as written, then its arguments.
    #[arg(last = true, required = true, value_name = "ARGV")]
    argv: Vec<String>,
}

pub fn run(command: LegacyCommand) -> ExitCode {
    match command {
        LegacyCommand::Check(args) => check(&args),
    }
}

fn check(args: &CheckArgs) -> ExitCode {
    if let Some(folder) = args
        .readable
        .iter()
        .chain(&args.writeable)
        .find(|folder| !folder.is_absolute())
    {
        return usage_error(&format!(
            "--readable and --writeable take absolute folders (got `{}`)",
            folder.display()
        ));
    }
    let Some(exec) = ExecCall::from_argv(&args.argv) else {
        return usage_error("give the exec to check after `--`");
    };
    let policy = match load_policy(args.policy.as_deref()) {
        Ok(policy) => policy,
        Err(err) => return policy_error(&err),
    };
    let classification = classify(&policy, &exec);
    let folders_given = !args.readable.is_empty() || !args.writeable.is_empty();
    // Only an exec the policy read has typed files to check.
    let folder_check =
        match (&classification, folders_given) {
            (Classification::Safe(valid) | Classification::Match(valid), true) => Some(
                check_folders(valid, args.cwd.as_deref(), &args.readable, &args.writeable),
            ),
            _ => None,
        };
    if args.json {
        print_json(&check_json(&classification, folder_check.as_ref()));
    } else {
        let policy_name = args
            .policy
            .as_ref()
            .map_or(DEFAULT_POLICY_NAME.to_string(), |p| p.display().to_string());
        explain(
            &args.argv,
            &policy_name,
            &classification,
            folder_check.as_ref(),
        );
    }
    ExitCode::SUCCESS
}

fn policy_error(err: &LoadError) -> ExitCode {
    eprintln!("{err}");
    if let LoadError::Parse { diagnostic, .. } = err {
        if diagnostic.lines().count() > 1 {
            eprintln!();
            for line in diagnostic.lines() {
                eprintln!("  {line}");
            }
        }
        eprintln!("The legacy policy was not loaded: fix the call at that line and run again.");
    }
    ExitCode::from(EXIT_POLICY_ERROR)
}

fn check_json(classification: &Classification, folders: Option<&Result<String, Error>>) -> Value {
    let mut value = json!({"result": classification.name()});
    if let Classification::Forbidden { reason, .. } = classification {
        value["reason"] = json!(reason);
    }
    if let Some(exec) = classification.exec() {
        value["exec"] = json!(exec);
    }
    if let Classification::Unverified(err) = classification {
        value["error"] = json!(err);
    }
    match folders {
        Some(Ok(program)) => value["folder_check"] = json!({"ok": program}),
        Some(Err(err)) => value["folder_check"] = json!(err),
        None => {}
    }
    value
}

fn result_style(classification: &Classification) -> Style {
    let color = match classification {
        Classification::Safe(_) => AnsiColor::Green,
        Classification::Match(_) => AnsiColor::Yellow,
        Classification::Forbidden { .. } => AnsiColor::Red,
        Classification::Unverified(_) => AnsiColor::Magenta,
    };
    Style::new().fg_color(Some(color.into())).bold()
}

fn explain(
    argv: &[String],
    policy_name: &str,
    classification: &Classification,
    folders: Option<&Result<String, Error>>,
) {
    let style = result_style(classification);
    let dim = dim();
    println!(
        "{style}{}{style:#}  {}",
        classification.name(),
        render_example(argv)
    );
    match classification {
        Classification::Forbidden { reason, .. } => println!("  {dim}reason:{dim:#} {reason}"),
        Classification::Unverified(err) => println!("  {dim}error:{dim:#} {}: {err}", err.name()),
        _ => {}
    }
    if let Some(exec) = classification.exec() {
        describe_exec(exec);
    }
    if let Classification::Match(exec) = classification {
        println!("  {dim}not safe:{dim:#} {}", why_not_safe(exec).join("; "));
    }
    match folders {
        Some(Ok(program)) => println!("  {dim}folders:{dim:#} ok, runs {program}"),
        Some(Err(err)) => {
            let red = Style::new().fg_color(Some(AnsiColor::Red.into())).bold();
            println!("  {dim}folders:{dim:#} {red}{}{red:#}: {err}", err.name());
        }
        None => {}
    }
    println!("  {dim}policy:{dim:#} {policy_name}");
}

fn describe_exec(exec: &ValidExec) {
    let dim = dim();
    if exec.system_path.is_empty() {
        println!("  {dim}program:{dim:#} {} (no system_path)", exec.program);
    } else {
        println!(
            "  {dim}program:{dim:#} {} (system_path: {})",
            exec.program,
            exec.system_path.join(", ")
        );
    }
    for flag in &exec.flags {
        println!("  {dim}flag:{dim:#} {}", flag.name);
    }
    for opt in &exec.opts {
        println!(
            "  {dim}opt:{dim:#} {} {} {dim}({}){dim:#}",
            opt.name,
            opt.value,
            opt.arg_type.name()
        );
    }
    for arg in &exec.args {
        println!(
            "  {dim}arg {}:{dim:#} {} {dim}({}){dim:#}",
            arg.index,
            arg.value,
            arg.arg_type.name()
        );
    }
}

/// The values that make a match need approval: files it writes, arguments nobody checked.
fn why_not_safe(exec: &ValidExec) -> Vec<String> {
    let args = exec
        .args
        .iter()
        .filter(|arg| arg.arg_type.might_write_files())
        .map(|arg| {
            format!(
                "arg {} `{}` is {}",
                arg.index,
                arg.value,
                arg.arg_type.name()
            )
        });
    let opts = exec
        .opts
        .iter()
        .filter(|opt| opt.arg_type.might_write_files())
        .map(|opt| format!("{} `{}` is {}", opt.name, opt.value, opt.arg_type.name()));
    args.chain(opts).collect()
}
