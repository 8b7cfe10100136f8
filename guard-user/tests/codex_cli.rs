//! The Codex CLI tier: guard against the real `codex` binary (`@openai/codex` from the npm
//! registry, pinned and cached; see `codex/install.rs`).
//!
//! - `guard execpolicy check ARGS` prints what `codex execpolicy check ARGS` prints, byte for
//!   byte (stdout, stderr, exit status), on 10 000+ generated commands over generated policies.
//! - Amendment lines guard appends are read by Codex with the same decisions, and the lines
//!   Codex appends (its format, in a Codex rules folder) are read by guard as they are.
//!
//! Both run with the same environment, minus `RUST_BACKTRACE` (with it set Codex adds a stack
//! backtrace to its errors; guard never does, see docs/json.md).

#[path = "codex/generate.rs"]
mod generate;
#[path = "codex/install.rs"]
mod install;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use generate::{GeneratedPolicy, Rng, quote};

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
/// The whole comparison's limit; one process's.
const TIER_TIMEOUT: Duration = Duration::from_secs(20 * 60);
const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);

/// One `execpolicy check` invocation: its arguments after `execpolicy check`.
struct Case {
    args: Vec<String>,
}

/// What one process printed and how it ended.
#[derive(PartialEq, Eq)]
struct Outcome {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code,
            String::from_utf8_lossy(&self.stdout),
            String::from_utf8_lossy(&self.stderr)
        )
    }
}

/// Runs `program execpolicy check ARGS` in `dir` with the tier's environment; `worker` picks
/// the Codex home.
fn run(program: &Path, dir: &Path, worker: usize, args: &[String]) -> Outcome {
    let mut child = Command::new(program)
        .arg("execpolicy")
        .arg("check")
        .args(args)
        .current_dir(dir)
        .env("CODEX_HOME", install::codex_home(worker))
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {program:?}: {err}"));
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if started.elapsed() > PROCESS_TIMEOUT {
            let _ = child.kill();
            panic!("{program:?} execpolicy check {args:?} ran over {PROCESS_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("collect output");
    Outcome {
        code: status.code(),
        stdout,
        stderr,
    }
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

fn guard() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_guard"))
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

/// A Codex rules folder as Codex leaves it: `rules/default.rules` holding the lines its
/// "always allow" approvals append (the line format of Codex's `execpolicy` amend code:
/// `prefix_rule(pattern=[JSON strings joined by ", "], decision="allow")` and
/// `network_rule(host=JSON, protocol="https", decision="deny", justification=JSON)`, each on
/// its own line, a newline added first when the file does not end with one), beside a
/// hand-written file.
fn codex_rules_folder(home: &Path) -> PathBuf {
    let rules = home.join(".codex/rules");
    std::fs::create_dir_all(&rules).expect("create rules folder");
    std::fs::write(
        rules.join("team.rules"),
        "prefix_rule(pattern = [\"git\", \"push\"], decision = \"prompt\", justification = \"review first\")\n\
         prefix_rule(pattern = [[\"rm\", \"shred\"], \"-rf\"], decision = \"forbidden\")\n\
         host_executable(name = \"git\", paths = [\"/usr/bin/git\"])\n",
    )
    .expect("write team.rules");
    // The first line without its newline: Codex's appender adds one before its line.
    let mut default = String::from("prefix_rule(pattern=[\"ls\"], decision=\"allow\")");
    for prefix in [
        vec!["cargo", "test"],
        vec!["echo", "Hello, world!"],
        vec!["npm", "run", "say \"hi\" é"],
        vec!["git", "status"],
    ] {
        let tokens: Vec<String> = prefix.iter().map(|t| quote(t)).collect();
        default.push_str(&format!(
            "\nprefix_rule(pattern=[{}], decision=\"allow\")",
            tokens.join(", ")
        ));
    }
    default.push_str(&format!(
        "\nnetwork_rule(host={}, protocol=\"https\", decision=\"deny\", justification={})\n",
        quote("tracker.example.com"),
        quote("no \"tracking\"")
    ));
    std::fs::write(rules.join("default.rules"), default).expect("write default.rules");
    rules
}

/// Commands over the amendment tests' policies.
const AMENDED_COMMANDS: &[&[&str]] = &[
    &["cargo", "test", "--all"],
    &["cargo", "build"],
    &["echo", "Hello, world!"],
    &["echo", "Hello,", "world!"],
    &["npm", "run", "say \"hi\" é", "x"],
    &["git", "status", "-s"],
    &["git", "push", "origin"],
    &["/usr/bin/git", "push"],
    &["rm", "-rf", "/"],
    &["ls", "-la"],
    &["make", "deploy"],
];

/// guard's `check --json` decision for `command` over `rules` (a folder or a file).
fn guard_decision(dir: &Path, rules: &Path, command: &[String], resolve: bool) -> String {
    let mut check = Command::new(guard());
    check
        .args(["check", "--json", "--rules"])
        .arg(rules)
        .current_dir(dir)
        .env("GUARD_SYSTEM_RULES", dir.join("no-system-rules"));
    if resolve {
        check.arg("--resolve-host-executables");
    }
    let out = check
        .arg("--")
        .args(command)
        .output()
        .expect("run guard check");
    assert!(out.status.success(), "guard check failed: {out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("guard's JSON");
    json["decision"].as_str().expect("a decision").to_string()
}

/// Codex's decision, from its JSON (`none` when nothing matched, as guard says it).
fn codex_decision(outcome: &Outcome) -> String {
    assert_eq!(outcome.code, Some(0), "codex failed: {outcome:?}");
    let json: serde_json::Value = serde_json::from_slice(&outcome.stdout).expect("codex's JSON");
    json["decision"].as_str().unwrap_or("none").to_string()
}

#[test]
fn a_codex_rules_folder_is_guards_rules_as_it_is() {
    let Some(codex) = install::codex() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary folder");
    let home = dir.path().join("home");
    let folder = codex_rules_folder(&home);
    // Codex reads its folder's `*.rules` files in name order; `codex execpolicy check` is given
    // them in that order, guard the folder itself.
    let files = ["default.rules", "team.rules"].map(|name| folder.join(name));
    let mut decided = 0;
    for command in AMENDED_COMMANDS {
        let command: Vec<String> = command.iter().map(|t| t.to_string()).collect();
        for resolve in [false, true] {
            let mut args: Vec<String> = Vec::new();
            for file in &files {
                args.extend(["-r".to_string(), file.display().to_string()]);
            }
            if resolve {
                args.push("--resolve-host-executables".to_string());
            }
            args.extend(command.iter().cloned());
            let theirs = run(&codex, dir.path(), WORKERS, &args);
            let ours = run(guard(), dir.path(), WORKERS, &args);
            assert_eq!(theirs, ours, "execpolicy check {args:?}");
            let expected = codex_decision(&theirs);
            decided += usize::from(expected != "none");
            assert_eq!(
                guard_decision(dir.path(), &folder, &command, resolve),
                expected,
                "guard check --rules {folder:?} -- {command:?} (resolve: {resolve})"
            );
        }
    }
    assert!(decided >= 12, "the folder decided only {decided} commands");
    let validate = Command::new(guard())
        .args(["policy", "validate"])
        .arg(&folder)
        .output()
        .expect("run guard policy validate");
    assert!(validate.status.success(), "{validate:?}");
}

#[test]
fn codex_reads_the_lines_guard_appends() {
    let Some(codex) = install::codex() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary folder");
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".codex")).expect("create home");
    let file = dir.path().join("amended.rules");
    std::fs::write(
        &file,
        "prefix_rule(pattern = [\"git\", \"push\"], decision = \"prompt\")\n\
         prefix_rule(pattern = [\"rm\", \"-rf\"], decision = \"forbidden\")",
    )
    .expect("write rules");
    let prefixes: &[&[&str]] = &[
        &["cargo", "test"],
        &["echo", "Hello, world!"],
        &["npm", "run", "say \"hi\" é"],
        &["git", "status"],
        &["ls"],
    ];
    let mut expected_tail = String::new();
    for prefix in prefixes {
        let out = Command::new(guard())
            .args(["allow-prefix", "--rules-file"])
            .arg(&file)
            .arg("--")
            .args(*prefix)
            .output()
            .expect("run guard allow-prefix");
        assert!(out.status.success(), "allow-prefix {prefix:?}: {out:?}");
        let tokens: Vec<String> = prefix.iter().map(|t| quote(t)).collect();
        expected_tail.push_str(&format!(
            "prefix_rule(pattern=[{}], decision=\"allow\")\n",
            tokens.join(", ")
        ));
    }
    for (verb, host, decision) in [
        ("allow-host", "api.github.com", "allow"),
        ("deny-host", "tracker.example.com", "deny"),
    ] {
        let out = Command::new(guard())
            .args([verb, host, "--protocol", "https", "--rules-file"])
            .arg(&file)
            .output()
            .expect("run guard allow-host");
        assert!(out.status.success(), "{verb} {host}: {out:?}");
        assert!(
            std::fs::read_to_string(&file)
                .expect("read rules")
                .contains(&format!(
                    "network_rule(host={}, protocol=\"https\", decision=\"{decision}\"",
                    quote(host)
                )),
            "{verb} wrote Codex's network_rule line"
        );
    }
    let written = std::fs::read_to_string(&file).expect("read rules");
    assert!(
        written.contains(&format!("decision = \"forbidden\")\n{expected_tail}")),
        "guard's prefix lines are Codex's, after the newline Codex would add:\n{written}"
    );
    let mut decided = 0;
    for command in AMENDED_COMMANDS {
        let command: Vec<String> = command.iter().map(|t| t.to_string()).collect();
        let args: Vec<String> = ["-r".to_string(), file.display().to_string()]
            .into_iter()
            .chain(command.iter().cloned())
            .collect();
        let theirs = run(&codex, dir.path(), WORKERS + 1, &args);
        let ours = run(guard(), dir.path(), WORKERS + 1, &args);
        assert_eq!(theirs, ours, "execpolicy check {args:?}");
        let expected = codex_decision(&theirs);
        decided += usize::from(expected == "allow");
        assert_eq!(guard_decision(dir.path(), &file, &command, false), expected);
    }
    assert!(
        decided >= 5,
        "Codex allowed only {decided} amended commands"
    );
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
