//! The Codex CLI tier: guard against the real `codex` binary (`@openai/codex` from the npm
//! registry, pinned and cached; see `codex/install.rs`).
//!
//! - `guard execpolicy check ARGS` prints what `codex execpolicy check ARGS` prints, byte for
//!   byte (stdout, stderr, exit status), on 10 000+ generated commands over generated policies.
//! - Files Codex refuses get Codex's error from guard, and usage errors its text and status.
//! - (`codex_amend.rs`: the amendment lines each appends are read by the other.)
//!
//! Both run with the same environment, minus `RUST_BACKTRACE` (with it set Codex adds a stack
//! backtrace to its errors; guard never does, see docs/commands.md).

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::generate::{self, GeneratedPolicy, Rng};
use crate::install;
use crate::run::{Outcome, guard, run};

/// Commands the comparison must cover at least.
const MIN_COMMANDS: usize = 10_000;
/// Commands checked against each policy that loads (a policy that fails to load gets a few:
/// every command gets the same error).
const COMMANDS_PER_POLICY: usize = 100;
const COMMANDS_PER_BROKEN_POLICY: usize = 5;
/// Codex processes running at once: the work is mostly process start-up.
const WORKERS: usize = 4;
/// The guard binary runs every this many cases too (guard in this process runs them all).
const GUARD_BINARY_EVERY: usize = 10;
/// The whole comparison's limit.
const TIER_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// One `execpolicy check` invocation: its arguments after `execpolicy check`.
struct Case {
    args: Vec<String>,
}

/// guard's `execpolicy check ARGS` in this process: the binary's own parsing and output.
fn in_process(args: &[String]) -> Outcome {
    let output = guard::cli::execpolicy::check_in_process(args)
        .unwrap_or_else(|err| panic!("execpolicy check {args:?}: a usage error: {err}"));
    Outcome {
        code: Some(i32::from(output.code)),
        stdout: output.stdout.into_bytes(),
        stderr: output.stderr.into_bytes(),
    }
}

/// The arguments for one generated command: the policy's files as `-r`/`--rules`/`--rules=`,
/// the flags in a seeded order, and the command after an optional `--`.
fn case_args(rng: &mut Rng, policy: &GeneratedPolicy, command: Vec<String>) -> Vec<String> {
    let mut options: Vec<Vec<String>> = policy
        .files
        .iter()
        .map(|(name, _)| match rng.below(3) {
            0 => vec!["-r".to_string(), name.clone()],
            1 => vec!["--rules".to_string(), name.clone()],
            _ => vec![format!("--rules={name}")],
        })
        .collect();
    if rng.percent(50) {
        options.push(vec!["--resolve-host-executables".to_string()]);
    }
    if rng.percent(15) {
        options.push(vec!["--pretty".to_string()]);
    }
    // Files keep their order (it is the policy's); flags go anywhere among them.
    let mut args: Vec<String> = Vec::new();
    let (files, flags) = options.split_at(policy.files.len());
    let mut flags: Vec<&Vec<String>> = flags.iter().collect();
    for file in files {
        if !flags.is_empty() && rng.percent(30) {
            args.extend(flags.remove(0).iter().cloned());
        }
        args.extend(file.iter().cloned());
    }
    for flag in flags {
        args.extend(flag.iter().cloned());
    }
    if rng.percent(50) {
        args.push("--".to_string());
    }
    args.extend(command);
    args
}

/// The seeded policies (written under `dir`) and the cases over them: at least
/// [`MIN_COMMANDS`] commands.
fn generate_cases(dir: &Path) -> (Vec<Case>, usize) {
    let mut rng = Rng::new(0x6775_6172_645f_6378);
    let mut cases = Vec::new();
    let mut policies = 0;
    while cases.len() < MIN_COMMANDS {
        let policy = generate::policy(&mut rng, policies);
        policies += 1;
        for (name, contents) in &policy.files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().expect("a folder")).expect("create folder");
            std::fs::write(&path, contents).expect("write policy");
        }
        let count = if policy.broken_examples {
            COMMANDS_PER_BROKEN_POLICY
        } else {
            COMMANDS_PER_POLICY
        };
        for _ in 0..count {
            let command = generate::command(&mut rng, &policy);
            let args = case_args(&mut rng, &policy, command);
            cases.push(Case { args });
        }
    }
    (cases, policies)
}

/// Codex's and guard's outcome of one case, and the guard binary's when the case was sampled.
struct Compared {
    codex: Outcome,
    guard: Outcome,
    guard_binary: Option<Outcome>,
}

/// Runs every case under Codex (a process each, [`WORKERS`] at a time) and guard (in this
/// process, and the binary for every [`GUARD_BINARY_EVERY`]th case).
fn compare(codex: &Path, dir: &Path, cases: &[Case]) -> Vec<Compared> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Compared>>> =
        Mutex::new((0..cases.len()).map(|_| None).collect());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for worker in 0..WORKERS {
            let (next, results) = (&next, &results);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= cases.len() {
                        break;
                    }
                    assert!(
                        started.elapsed() < TIER_TIMEOUT,
                        "the comparison ran over {TIER_TIMEOUT:?} at case {i} of {}",
                        cases.len()
                    );
                    let args = &cases[i].args;
                    let compared = Compared {
                        codex: run(codex, dir, worker, args),
                        guard: in_process(args),
                        guard_binary: (i % GUARD_BINARY_EVERY == 0)
                            .then(|| run(guard(), dir, worker, args)),
                    };
                    results.lock().expect("results")[i] = Some(compared);
                }
            });
        }
    });
    results
        .into_inner()
        .expect("results")
        .into_iter()
        .map(|compared| compared.expect("every case ran"))
        .collect()
}

#[test]
fn execpolicy_check_prints_what_the_codex_cli_prints() {
    let Some(codex) = install::codex() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary folder");
    // guard in this process reads the policies and resolves `./git` from here, as both tools'
    // processes do from their working folder (the other tests use absolute paths only).
    std::env::set_current_dir(dir.path()).expect("enter the temporary folder");
    let (cases, policies) = generate_cases(dir.path());
    let started = Instant::now();
    let results = compare(&codex, dir.path(), &cases);
    let elapsed = started.elapsed();

    let mut differences = Vec::new();
    let mut seen = Seen::default();
    let mut binary_runs = 0;
    for (case, compared) in cases.iter().zip(&results) {
        seen.count(&compared.codex);
        let theirs = &compared.codex;
        for (who, ours) in [
            ("guard", Some(&compared.guard)),
            ("the guard binary", compared.guard_binary.as_ref()),
        ] {
            let Some(ours) = ours else { continue };
            binary_runs += usize::from(who == "the guard binary");
            if theirs != ours {
                differences.push(format!(
                    "execpolicy check {:?}\n=== codex: {theirs:?}=== {who}: {ours:?}",
                    case.args
                ));
            }
        }
    }
    println!(
        "compared {} commands over {policies} policies with codex {} (the guard binary on \
         {binary_runs}): {} differences, {elapsed:?} ({seen:?})",
        cases.len(),
        install::CODEX_VERSION,
        differences.len()
    );
    if !differences.is_empty() {
        panic!(
            "{} of {} commands differ (the policies are kept under {:?}); the first:\n{}",
            differences.len(),
            cases.len(),
            dir.keep(),
            differences[..differences.len().min(5)].join("\n\n")
        );
    }
    seen.assert_covers_the_contract();
}

/// What the generated cases made Codex print, so a generator that stopped reaching a part of
/// the contract fails the tier instead of passing it vacuously.
#[derive(Debug, Default)]
struct Seen {
    allow: usize,
    prompt: usize,
    forbidden: usize,
    no_match: usize,
    several_matches: usize,
    resolved_program: usize,
    justification: usize,
    pretty: usize,
    example_errors: usize,
}

impl Seen {
    fn count(&mut self, outcome: &Outcome) {
        let stdout = String::from_utf8_lossy(&outcome.stdout);
        let stderr = String::from_utf8_lossy(&outcome.stderr);
        let compact: String = stdout.split_whitespace().collect();
        self.allow += usize::from(compact.ends_with(r#""decision":"allow"}"#));
        self.prompt += usize::from(compact.ends_with(r#""decision":"prompt"}"#));
        self.forbidden += usize::from(compact.ends_with(r#""decision":"forbidden"}"#));
        self.no_match += usize::from(compact == r#"{"matchedRules":[]}"#);
        self.several_matches += usize::from(compact.matches("prefixRuleMatch").count() > 1);
        self.resolved_program += usize::from(compact.contains("resolvedProgram"));
        self.justification += usize::from(compact.contains("justification"));
        self.pretty += usize::from(stdout.starts_with("{\n"));
        self.example_errors += usize::from(
            outcome.code == Some(1)
                && (stderr.contains("expected every example to match")
                    || stderr.contains("expected example to not match")),
        );
    }

    fn assert_covers_the_contract(&self) {
        let counts = [
            ("allow", self.allow),
            ("prompt", self.prompt),
            ("forbidden", self.forbidden),
            ("no match", self.no_match),
            ("several matches", self.several_matches),
            ("resolvedProgram", self.resolved_program),
            ("justification", self.justification),
            ("--pretty", self.pretty),
            ("match/not_match errors", self.example_errors),
        ];
        for (what, count) in counts {
            assert!(count >= 10, "only {count} outputs showed {what}: {self:?}");
        }
    }
}

/// Files Codex refuses, each with its own error: both tools must print the same error.
const REFUSED_FILES: &[(&str, &str)] = &[
    ("syntax.rules", "prefix_rule(pattern = [\"git\", \"push\"\n"),
    ("expression.rules", "x = 1 +\n"),
    (
        "decision.rules",
        "prefix_rule(pattern = [\"git\"], decision = \"deny\")\n",
    ),
    ("empty_pattern.rules", "prefix_rule(pattern = [])\n"),
    (
        "empty_alternatives.rules",
        "prefix_rule(pattern = [\"git\", []])\n",
    ),
    (
        "pattern_type.rules",
        "prefix_rule(pattern = [\"git\", 3])\n",
    ),
    (
        "justification.rules",
        "prefix_rule(pattern = [\"git\"], justification = \"\")\n",
    ),
    (
        "example_type.rules",
        "prefix_rule(pattern = [\"git\"], match = [3])\n",
    ),
    (
        "example_shell.rules",
        "prefix_rule(pattern = [\"git\"], match = [\"git 'x\"])\n",
    ),
    (
        "unknown_builtin.rules",
        "prefix_rule(pattern = [\"git\"])\nprefix_rul(pattern = [\"x\"])\n",
    ),
    (
        "guard_enforcement.rules",
        "enforcement(unmatched_network = \"prompt\")\n",
    ),
    ("guard_rule_set.rules", "rule_set(deny = [\"bash(rm*)\"])\n"),
    (
        "guard_audit_only.rules",
        "prefix_rule(pattern = [\"git\"], audit_only = True)\n",
    ),
    (
        "host_relative.rules",
        "host_executable(name = \"git\", paths = [\"bin/git\"])\n",
    ),
    (
        "host_name.rules",
        "host_executable(name = \"/usr/bin/git\", paths = [\"/usr/bin/git\"])\n",
    ),
    (
        "network_protocol.rules",
        "network_rule(host = \"a.example\", protocol = \"ftp\", decision = \"allow\")\n",
    ),
    (
        "network_host.rules",
        "network_rule(host = \"*.example.com\", protocol = \"https\", decision = \"allow\")\n",
    ),
    (
        "match.rules",
        "prefix_rule(pattern = [\"git\", [\"push\", \"pull\"]], decision = \"prompt\", match = [\"git fetch\", [\"git\", \"log\"]])\n",
    ),
    (
        "not_match.rules",
        "prefix_rule(pattern = [[\"rm\", \"shred\"], \"-rf\"], not_match = [\"shred -rf /\"])\n",
    ),
    (
        "not_match_host.rules",
        "host_executable(name = \"git\", paths = [\"/usr/bin/git\"])\nprefix_rule(pattern = [\"git\"], not_match = [[\"/usr/bin/git\", \"x\"]])\n",
    ),
];

#[test]
fn errors_are_the_codex_clis_errors() {
    let Some(codex) = install::codex() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary folder");
    let worker = WORKERS + 2;
    std::fs::write(
        dir.path().join("good.rules"),
        "prefix_rule(pattern = [\"git\"])\n",
    )
    .expect("write good.rules");
    std::fs::create_dir(dir.path().join("folder.rules")).expect("create a folder");
    std::fs::write(dir.path().join("latin1.rules"), b"# caf\xe9\n").expect("write latin1");
    let mut refused = vec!["missing.rules", "folder.rules", "latin1.rules"];
    for (name, contents) in REFUSED_FILES {
        std::fs::write(dir.path().join(name), contents).expect("write rules");
        refused.push(name);
    }
    for name in refused {
        // Alone, and after a file that loads (the error names the file that failed).
        for args in [
            vec!["-r", name, "git", "push"],
            vec!["-r", "good.rules", "--rules", name, "--pretty", "git"],
        ] {
            let args: Vec<String> = args.into_iter().map(String::from).collect();
            let theirs = run(&codex, dir.path(), worker, &args);
            assert_eq!(theirs.code, Some(1), "codex accepted {name}: {theirs:?}");
            assert_eq!(theirs, run(guard(), dir.path(), worker, &args), "{args:?}");
        }
    }
    // Codex's configuration overrides are accepted and change nothing.
    for args in [
        vec!["-c", "model=\"o3\"", "-r", "good.rules", "git"],
        vec!["-r", "good.rules", "--config", "=", "git", "-c", "x"],
    ] {
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        let theirs = run(&codex, dir.path(), worker, &args);
        assert_eq!(theirs.code, Some(0), "{args:?}: {theirs:?}");
        assert_eq!(theirs, run(guard(), dir.path(), worker, &args), "{args:?}");
    }
    // Usage errors: the same text and status, but for the program's name in `Usage:`.
    for args in [
        vec!["git", "push"],
        vec!["-r", "good.rules"],
        vec!["-r"],
        vec!["--pretty=yes", "-r", "good.rules", "git"],
        vec!["--no-such-flag", "-r", "good.rules", "git"],
    ] {
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        let theirs = run(&codex, dir.path(), worker, &args);
        let ours = run(guard(), dir.path(), worker, &args);
        assert_eq!(theirs.code, Some(2), "{args:?}: {theirs:?}");
        assert_eq!(ours.code, theirs.code, "{args:?}");
        assert_eq!(ours.stdout, theirs.stdout, "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&ours.stderr),
            String::from_utf8_lossy(&theirs.stderr).replace("codex execpolicy", "guard execpolicy"),
            "{args:?}"
        );
    }
}
