//! Prefix rules → exec tables: one-token rules become program identities (device + inode of
//! every file the name stands for) and a name entry; longer rules become argv rules.
//!
//! Why both identity and name: the kernel never trusts `argv[0]`. The identity catches the file
//! however it is reached (a symlink, `./git`, a copy of the path); the name entry catches a file
//! of that name that was not on PATH when the policy was compiled.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::CompileEnv;
use super::image::{ArgvRoot, ArgvRule, IdentityEntry, NameEntry, Verdict};
use crate::policy::rule::MULTI_CALL_PROGRAMS;
use crate::policy::{Decision, Policy, PrefixRule};

/// What the exec side of the image holds.
#[derive(Default)]
pub(super) struct ExecTables {
    pub identities: Vec<IdentityEntry>,
    pub names: Vec<NameEntry>,
    pub argv_rules: Vec<ArgvRule>,
    pub argv_roots: Vec<ArgvRoot>,
    pub warnings: Vec<String>,
}

/// A file found for a program: its kernel identity and canonical path.
#[derive(Clone)]
struct FoundFile {
    dev: u64,
    ino: u64,
    path: PathBuf,
}

/// The kernel's `dev_t` encoding (`MKDEV`: major << 20 | minor), which is what
/// `inode->i_sb->s_dev` holds; userspace `st_dev` uses another layout.
pub fn kernel_dev(st_dev: u64) -> u64 {
    let major = u64::from(libc::major(st_dev as libc::dev_t));
    let minor = u64::from(libc::minor(st_dev as libc::dev_t));
    (major << 20) | minor
}

/// The regular file at `path` (symlinks followed), if there is one.
fn regular_file(path: &Path) -> Option<FoundFile> {
    let metadata = std::fs::metadata(path).ok()?;
    if !metadata.is_file() {
        return None;
    }
    Some(FoundFile {
        dev: kernel_dev(metadata.dev()),
        ino: metadata.ino(),
        path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
    })
}

fn where_written(rule: &PrefixRule) -> String {
    match &rule.origin {
        Some(origin) => format!(" at {origin}"),
        None => String::new(),
    }
}

impl ExecTables {
    fn add_identity(
        &mut self,
        index: &mut HashMap<(u64, u64), usize>,
        file: FoundFile,
        verdict: Verdict,
    ) {
        match index.get(&(file.dev, file.ino)) {
            Some(&slot) => {
                let kept = &mut self.identities[slot];
                if verdict.beats(&kept.verdict) {
                    kept.verdict = verdict;
                }
            }
            None => {
                index.insert((file.dev, file.ino), self.identities.len());
                self.identities.push(IdentityEntry {
                    dev: file.dev,
                    ino: file.ino,
                    path: file.path,
                    verdict,
                });
            }
        }
    }

    /// The files `program` stands for start its argv walk, whatever name they are run by. A
    /// file two programs' rules stand for (hard links with rules of their own) keeps the first.
    fn add_roots(&mut self, program: &str, files: &[FoundFile]) {
        for file in files {
            if !self
                .argv_roots
                .iter()
                .any(|root| (root.dev, root.ino) == (file.dev, file.ino))
            {
                self.argv_roots.push(ArgvRoot {
                    dev: file.dev,
                    ino: file.ino,
                    path: file.path.clone(),
                    program: program.to_string(),
                });
            }
        }
    }

    /// The argv rules that hold a refusing or asking `rule` under `argv[0]` and as a
    /// multi-call program's applet (see [`compile_exec`]).
    fn add_other_names(
        &mut self,
        policy: &Policy,
        env: &CompileEnv,
        found_for_name: &mut HashMap<String, Vec<FoundFile>>,
        rule: &PrefixRule,
        verdict: Verdict,
    ) {
        let program = rule.program();
        let rest: Vec<Vec<String>> = rule
            .pattern
            .rest
            .iter()
            .map(|token| token.alternatives().to_vec())
            .collect();
        if rest.is_empty() {
            self.argv_rules.push(ArgvRule {
                program: program.to_string(),
                rest: Vec::new(),
                verdict,
            });
        }
        if MULTI_CALL_PROGRAMS.contains(&program) {
            return;
        }
        for multi_call in MULTI_CALL_PROGRAMS {
            let found = found_for_name
                .entry(multi_call.to_string())
                .or_insert_with(|| files_for_name(policy, env, multi_call));
            self.add_roots(multi_call, found);
            let mut applet = vec![vec![program.to_string()]];
            applet.extend(rest.iter().cloned());
            self.argv_rules.push(ArgvRule {
                program: multi_call.to_string(),
                rest: applet,
                verdict,
            });
        }
    }

    /// A `#!` script named by its absolute path `path`: the kernel sees its interpreter run
    /// (the script's identity is gone by then on the `cgroup` backend), with argv `[interpreter
    /// as the script names it, its argument if any, the path the script was run by, ...]`. So the
    /// rule also becomes argv rules over that argv: `[sh, path]`, and for `#!/usr/bin/env X`
    /// both `[env, X, path]` and `[X, path]` (env's own exec). They hold when the script is run
    /// by this absolute path.
    fn add_script_by_path(
        &mut self,
        policy: &Policy,
        env: &CompileEnv,
        found_for_name: &mut HashMap<String, Vec<FoundFile>>,
        path: &str,
        verdict: Verdict,
    ) {
        let Some((interpreter, argument)) = script_interpreter(Path::new(path)) else {
            return;
        };
        let name_of = |program: &str| {
            Path::new(program)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let interpreter_name = name_of(&interpreter);
        let mut runs: Vec<(String, Vec<Vec<String>>)> = Vec::new();
        match &argument {
            Some(argument) => {
                runs.push((
                    interpreter_name.clone(),
                    vec![vec![argument.clone()], vec![path.to_string()]],
                ));
                if interpreter_name == "env" {
                    runs.push((name_of(argument), vec![vec![path.to_string()]]));
                }
            }
            None => runs.push((interpreter_name, vec![vec![path.to_string()]])),
        }
        for (program, rest) in runs {
            if program.is_empty() {
                continue;
            }
            let found = found_for_name
                .entry(program.clone())
                .or_insert_with(|| files_for_name(policy, env, &program));
            self.add_roots(&program, found);
            self.argv_rules.push(ArgvRule {
                program,
                rest,
                verdict,
            });
        }
    }

    fn add_name(&mut self, index: &mut HashMap<String, usize>, name: &str, verdict: Verdict) {
        match index.get(name) {
            Some(&slot) => {
                let kept = &mut self.names[slot];
                if verdict.beats(&kept.verdict) {
                    kept.verdict = verdict;
                }
            }
            None => {
                index.insert(name.to_string(), self.names.len());
                self.names.push(NameEntry {
                    name: name.to_string(),
                    verdict,
                });
            }
        }
    }
}

/// The interpreter a `#!` script names and its one argument (the rest of the line, as the
/// kernel passes it), or `None` for a file that is not a script (or cannot be read).
fn script_interpreter(path: &Path) -> Option<(String, Option<String>)> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|b| *b == b'\n')?];
    let line = String::from_utf8_lossy(line);
    let line = line.trim_matches(|c| c == ' ' || c == '\t');
    let (interpreter, argument) = match line.split_once([' ', '\t']) {
        Some((interpreter, argument)) => (interpreter, Some(argument.trim().to_string())),
        None => (line, None),
    };
    (!interpreter.is_empty()).then(|| (interpreter.to_string(), argument.filter(|a| !a.is_empty())))
}

/// Compiles every prefix rule; rule `i` of [`Policy::prefix_rules`] is kernel rule `i`.
///
/// A rule that asks or forbids also holds wherever a program is named another way than by the
/// executed file's name, as argv rules of the trie, whose walk reads token 0 under every name
/// (`argv[0]` included): a one-token rule becomes an argv rule of that one token too (a link
/// named `touch` to busybox runs as `touch`), and every such rule `[X, ...]` is also
/// `[busybox, X, ...]` and `[toybox, X, ...]` (the applet a multi-call program takes from its
/// first argument). Only asks and refusals: `argv[0]` is the caller's to choose, so it may add
/// a refusal, never an allow.
pub(super) fn compile_exec(policy: &Policy, env: &CompileEnv) -> ExecTables {
    let mut tables = ExecTables::default();
    let mut identity_index = HashMap::new();
    let mut name_index = HashMap::new();
    // The files a bare name stands for, looked up once per name.
    let mut found_for_name: HashMap<String, Vec<FoundFile>> = HashMap::new();

    for (position, rule) in policy.prefix_rules().iter().enumerate() {
        let verdict = Verdict {
            decision: rule.decision,
            rule: position as u32,
            audit_only: rule.audit_only,
        };
        let program = rule.program();
        if rule.decision != Decision::Allow && !program.contains('/') {
            tables.add_other_names(policy, env, &mut found_for_name, rule, verdict);
        }
        if !rule.pattern.rest.is_empty() {
            if program.contains('/') {
                tables.warnings.push(format!(
                    "prefix_rule{}: the kernel compares token 0 with the executed file's name, so \
                     a program written as a path (`{program}`) never matches there; write the bare \
                     name instead",
                    where_written(rule)
                ));
            }
            if !program.contains('/') {
                let found = found_for_name
                    .entry(program.to_string())
                    .or_insert_with(|| files_for_name(policy, env, program));
                tables.add_roots(program, found);
            }
            tables.argv_rules.push(ArgvRule {
                program: program.to_string(),
                rest: rule
                    .pattern
                    .rest
                    .iter()
                    .map(|token| token.alternatives().to_vec())
                    .collect(),
                verdict,
            });
            continue;
        }
        if program.starts_with('/') {
            if rule.decision != Decision::Allow {
                tables.add_script_by_path(policy, env, &mut found_for_name, program, verdict);
            }
            match regular_file(Path::new(program)) {
                Some(file) => tables.add_identity(&mut identity_index, file, verdict),
                None => tables.warnings.push(format!(
                    "prefix_rule{}: `{program}` is not an existing regular file, so the kernel \
                     holds nothing for it until the policy is compiled again",
                    where_written(rule)
                )),
            }
            continue;
        }
        if program.contains('/') {
            tables.warnings.push(format!(
                "prefix_rule{}: `{program}` is a relative path, which names no one file; the \
                 kernel holds nothing for it (write the bare name or an absolute path)",
                where_written(rule)
            ));
            continue;
        }
        let found = found_for_name
            .entry(program.to_string())
            .or_insert_with(|| files_for_name(policy, env, program));
        // Under an exec allowlist a name that resolves to files allows nothing by itself: only
        // those files (their identities, below) are allowed, never a copy that takes the name.
        // A name that resolves to none is matched by name (the warning below says so).
        if rule.decision != Decision::Allow
            || policy.enforcement().unmatched_exec == Decision::Allow
            || env.names_are_their_files
            || found.is_empty()
        {
            tables.add_name(&mut name_index, program, verdict);
        }
        if found.is_empty() {
            tables.warnings.push(format!(
                "prefix_rule{}: no executable `{program}` in the PATH folders or its \
                 host_executable paths; the kernel matches it by file name only (any file of that \
                 name)",
                where_written(rule)
            ));
        }
        for file in found.clone() {
            tables.add_identity(&mut identity_index, file, verdict);
        }
    }
    tables
}

/// Every regular file at `DIR/name` for the PATH folders, then at `name`'s `host_executable`
/// paths; one per identity, first found first.
/// The files a bare name stands for in the kernel: the regular files of that name in `env`'s
/// `PATH` folders and at its `host_executable` paths (by identity: a link and its target once).
/// Under an exec allowlist these, and no other file, are what an allow by that name admits.
pub fn files_a_name_admits(policy: &Policy, env: &CompileEnv, name: &str) -> Vec<PathBuf> {
    files_for_name(policy, env, name)
        .into_iter()
        .map(|file| file.path)
        .collect()
}

fn files_for_name(policy: &Policy, env: &CompileEnv, name: &str) -> Vec<FoundFile> {
    let host_paths = policy
        .host_executables()
        .get(name)
        .map(|paths| paths.to_vec())
        .unwrap_or_default();
    let mut found: Vec<FoundFile> = Vec::new();
    for path in env
        .path_dirs
        .iter()
        .map(|dir| dir.join(name))
        .chain(host_paths)
    {
        if let Some(file) = regular_file(&path)
            && !found.iter().any(|f| (f.dev, f.ino) == (file.dev, file.ino))
        {
            found.push(file);
        }
    }
    found
}
