//! `guard run --sandbox MODE`, the Codex CLI's filesystem sandbox modes held by Landlock and
//! read-only binds: under `workspace-write` the command writes below the workspace and /tmp and
//! nowhere else (EACCES), the workspace's `.git` stays read-only, and `cargo build` in a project
//! works; under `read-only` nothing but /dev/null is written. The workspace is below cargo's
//! target folder, not /tmp (which is a writable root). Needs root; without it each test prints
//! `skipped: ...` (and fails when CI=true).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run, guard_bin, text};
use guard_tests::kernel::{piped_output, root_or_skip, shell_program, starting, wait_output};

const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// A fresh workspace folder outside /tmp.
fn workspace(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sandbox-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    dir
}

/// `command` (a `guard run`) in `dir`, its output piped, waited for with a bound.
fn output_in(dir: &Path, command: &mut Command) -> Output {
    piped_output(command.current_dir(dir), RUN_TIMEOUT)
}

/// `guard run --sandbox MODE -- sh -c SCRIPT` in `dir` (the default policy).
fn run(dir: &Path, mode: &str, script: &str) -> Output {
    let _starting = starting();
    let mut command = Command::new(guard_bin());
    command
        .args(["run", "--sandbox", mode, "--"])
        .arg(shell_program())
        .args(["-c", script]);
    output_in(dir, &mut command)
}

#[test]
fn workspace_write_writes_below_the_workspace_and_tmp_and_refuses_the_rest() {
    if !root_or_skip() {
        return;
    }
    let dir = workspace("ww");
    let in_tmp = PathBuf::from(format!("/tmp/guard-sandbox-{}", std::process::id()));
    let outside = PathBuf::from(format!("/etc/guard-sandbox-{}", std::process::id()));
    let script = format!(
        "touch ./a {tmp}; echo rc1=$?; touch {out}; echo rc2=$?; touch .git/hook; echo rc3=$?",
        tmp = in_tmp.display(),
        out = outside.display()
    );
    let out = run(&dir, "workspace-write", &script);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(dir.join("a").exists(), "{stdout} / {stderr}");
    assert!(in_tmp.exists(), "/tmp is a writable root: {stderr}");
    let _ = std::fs::remove_file(&in_tmp);
    assert!(!outside.exists(), "/etc is not writable: {stderr}");
    let _ = std::fs::remove_file(&outside);
    assert!(
        stdout.contains("rc1=0") && stdout.contains("rc2=1"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "cannot touch '{}': Permission denied",
            outside.display()
        )),
        "EACCES: {stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "guard: sandbox workspace-write refused a write of {} (openat by `touch`",
            outside.display()
        )) && stderr.contains("to allow it, add --writable /etc, or choose --sandbox"),
        "the refused write is a line of the run, with its fix: {stderr}"
    );
    assert!(
        !stderr.contains(&format!("refused a write of {}/a", dir.display())),
        "a write the sandbox allowed is not reported: {stderr}"
    );
    assert!(stdout.contains("rc3=1"), ".git stays read-only: {stdout}");
    assert!(!dir.join(".git/hook").exists());
    assert!(
        stderr.contains(&format!(
            "guard: sandbox workspace-write: writes only below {}, /tmp",
            dir.display()
        )) && stderr.contains(&format!("{}/.git", dir.display())),
        "the run names the mode and its roots: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn read_only_refuses_every_write_but_dev_null() {
    if !root_or_skip() {
        return;
    }
    let dir = workspace("ro");
    let in_tmp = format!("/tmp/guard-sandbox-ro-{}", std::process::id());
    let script = format!(
        "touch ./a; echo rc1=$?; touch {in_tmp}; echo rc2=$?; echo x > /dev/null; echo rc3=$?"
    );
    let out = run(&dir, "read-only", &script);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains("rc1=1") && stdout.contains("rc2=1") && stdout.contains("rc3=0"),
        "{stdout} / {stderr}"
    );
    assert!(!dir.join("a").exists() && !Path::new(&in_tmp).exists());
    assert!(stderr.contains("Permission denied"), "{stderr}");
    assert!(
        stderr.contains("guard: sandbox read-only: no writes but to /dev/null and the terminal"),
        "{stderr}"
    );
    for refused in [format!("{}/a", dir.display()), in_tmp.clone()] {
        assert!(
            stderr.contains(&format!(
                "guard: sandbox read-only refused a write of {refused} (openat by `touch`"
            )),
            "each refused write is a line: {stderr}"
        );
    }
    assert!(
        stderr.contains(&format!(
            "run with --sandbox workspace-write --writable {}",
            dir.display()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("/dev/null ("),
        "/dev/null is written: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cargo_build_in_a_project_works_under_workspace_write() {
    if !root_or_skip() {
        return;
    }
    let dir = workspace("cargo");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"sandboxed\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = run(&dir, "workspace-write", &format!("{cargo} build --offline"));
    assert!(
        out.status.success(),
        "{} / {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(dir.join("target/debug/sandboxed").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rules_files_sandbox_is_held_with_its_writable_roots_and_the_flag_wins() {
    if !root_or_skip() {
        return;
    }
    let dir = workspace("rules");
    let extra = workspace("rules-extra");
    let rules = dir.join("sandbox.rules");
    std::fs::write(
        &rules,
        format!(
            "sandbox(mode=\"workspace-write\", writable=[\"{}\"])\n",
            extra.display()
        ),
    )
    .unwrap();
    // New names each run: touching a file that exists changes only its times, which Landlock
    // does not decide.
    let run_with = |flags: &[&str], name: &str| {
        let _starting = starting();
        let script = format!(
            "touch {}/{name}; echo rc1=$?; touch ./{name}; echo rc2=$?",
            extra.display()
        );
        let mut command = Command::new(guard_bin());
        command
            .arg("run")
            .arg("--rules")
            .arg(&rules)
            .args(flags)
            .arg("--")
            .arg(shell_program())
            .args(["-c", &script]);
        output_in(&dir, &mut command)
    };
    let out = run_with(&[], "made");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains("rc1=0") && stdout.contains("rc2=0"),
        "{stdout} / {stderr}"
    );
    assert!(
        stderr.contains("guard: sandbox workspace-write (sandbox(...) at ")
            && stderr.contains(&extra.display().to_string()),
        "{stderr}"
    );
    // --sandbox read-only replaces the rules' mode.
    let out = run_with(&["--sandbox", "read-only"], "refused");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("rc1=1") && stdout.contains("rc2=1"),
        "{stdout} / {}",
        text(&out.stderr)
    );
    assert!(!dir.join("refused").exists() && !extra.join("refused").exists());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&extra);
}

#[test]
fn the_daemons_sandbox_holds_for_every_guard_run_under_it() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        extra_config: "[sandbox]\nmode = \"read-only\"\n".to_string(),
        ..Default::default()
    });
    let dir = workspace("daemon");
    let child = daemon
        .guard_command(&["run", "--"])
        .arg(shell_program())
        .args([
            "-c",
            "touch ./made; echo rc1=$?; echo x > /dev/null; echo rc2=$?",
        ])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting guard run");
    let out = wait_output(child, RUN_TIMEOUT);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains("rc1=1") && stdout.contains("rc2=0"),
        "{stdout} / {stderr}"
    );
    assert!(!dir.join("made").exists());
    assert!(
        stderr.contains("guard: sandbox read-only (the daemon's, guard.toml [sandbox])"),
        "{stderr}"
    );
    let made = format!("{}/made", dir.display());
    assert!(
        stderr.contains(&format!(
            "guard: sandbox read-only refused a write of {made} (openat by `touch`"
        )) && stderr.contains("to `writable` in the daemon's guard.toml [sandbox]"),
        "the run's line, from the daemon: {stderr}"
    );
    // The daemon's audit log has the refusal, with the mode and the call.
    let log = std::fs::read_to_string(&daemon.audit_log).unwrap_or_default();
    let record = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|r| r["file"] == made.as_str())
        .unwrap_or_else(|| panic!("no audit record for {made}: {log}"));
    assert_eq!(record["event"], "write", "{record}");
    assert_eq!(record["action"], "eacces", "{record}");
    assert_eq!(record["decision"], "forbidden", "{record}");
    assert_eq!(record["sandbox_mode"], "read-only", "{record}");
    assert_eq!(record["syscall"], "openat", "{record}");
    assert!(
        record["message"]
            .as_str()
            .is_some_and(|m| m.contains("sandbox read-only refused a write of")),
        "{record}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
