//! `guard run` holds each protected path exactly: in the command's private mount namespace a
//! protected file is a read-only bind (writes and metadata changes fail with EROFS), the
//! folders on the way cannot be moved aside, and ordinary work beside it, in /tmp and in the
//! current folder goes on as without guard. A root command also loses the capabilities that
//! could undo this, cannot remount or unmount, and cannot write /proc/sys. On the real kernel.
//!
//! Every file the tests write is in a temporary folder of their own; the namespace, the binds
//! and the dropped capabilities are only ever the command's. Root and Landlock are needed:
//! without them a test prints `skipped: ...` (and fails under `CI=true`).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{describe, landlock_or_skip, run_guard, step};
use guard_tests::daemon::{DaemonSetup, TestDaemon, guard_bin, text};
use guard_tests::kernel::skip;

/// How long one `guard run` may take (a `cargo build` among its steps).
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

const RULES: &str = "prefix_rule(pattern = [\"git\", \"push\"], decision = \"forbidden\")\n";

fn run(command: &mut Command) -> Output {
    run_guard(command, RUN_TIMEOUT)
}

/// `guard run -v --rules RULES -- sh -c SCRIPT` in `cwd`, `$D` set to `dir`.
fn guard_run(rules: &Path, cwd: &Path, dir: &Path, script: &str) -> Output {
    run(Command::new(guard_bin())
        .args(["run", "-v", "--rules"])
        .arg(rules)
        .args(["--", "sh", "-c", script])
        .env("D", dir)
        .current_dir(cwd))
}

/// The `name=...` lines of `output`, checked against `expected`.
fn assert_steps(output: &Output, expected: &[&str]) {
    assert!(output.status.success(), "{}", describe(output));
    let lines: Vec<String> = text(&output.stdout)
        .lines()
        .filter(|l| l.contains('='))
        .map(str::to_string)
        .collect();
    assert_eq!(lines, expected, "{}", describe(output));
}

#[test]
fn work_beside_a_protected_rules_file_goes_on_and_the_file_stays_as_it_was() {
    if !landlock_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rules = d.join("x.rules");
    std::fs::write(&rules, RULES).unwrap();
    std::fs::write(d.join("beside"), "a\n").unwrap();
    let script = [
        step("touch_beside", "touch \"$D/new\""),
        step("sed_beside", "sed -i s/a/b/ \"$D/beside\""),
        step("mktemp", "t=$(mktemp) && rm \"$t\""),
        step("mktemp_dir", "t=$(mktemp -d) && rm -r \"$t\""),
        step("git_init", "git init -q \"$D/repo\""),
        step(
            "overwrite",
            "echo 'prefix_rule(pattern=[\"git\"])' > \"$D/x.rules\"",
        ),
        step("append", "echo x >> \"$D/x.rules\""),
        step("remove", "rm -f \"$D/x.rules\""),
        step(
            "replace",
            "echo x > \"$D/y\" && mv -f \"$D/y\" \"$D/x.rules\"",
        ),
        step("move_folder_aside", "mv \"$D\" \"$D.aside\""),
        step("read", "cat \"$D/x.rules\" >/dev/null"),
    ]
    .concat();
    let out = guard_run(&rules, d, d, &script);
    assert_steps(
        &out,
        &[
            "touch_beside=ok",
            "sed_beside=ok",
            "mktemp=ok",
            "mktemp_dir=ok",
            "git_init=ok",
            "overwrite=refused",
            "append=refused",
            "remove=refused",
            "replace=refused",
            "move_folder_aside=refused",
            "read=ok",
        ],
    );
    assert!(
        text(&out.stderr).contains("Read-only file system"),
        "{}",
        describe(&out)
    );
    // `-v` ends with the kernel's counters, each hook's fail-opens among them (none here).
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("guard: kernel counters:")
            && ["exec", "net", "file"]
                .iter()
                .all(|hook| stderr.contains(&format!("{hook}_failed_open=0"))),
        "{}",
        describe(&out)
    );
    assert_eq!(std::fs::read_to_string(&rules).unwrap(), RULES);
    assert!(d.join("new").exists() && d.join("repo/.git").is_dir());
    assert_eq!(std::fs::read_to_string(d.join("beside")).unwrap(), "b\n");
    assert!(!d.with_extension("aside").exists());
}

#[test]
fn metadata_of_a_protected_file_cannot_be_changed() {
    if !landlock_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rules = d.join("x.rules");
    std::fs::write(&rules, RULES).unwrap();
    let before = std::fs::metadata(&rules).unwrap();
    let script = [
        step("chmod", "chmod 777 \"$D/x.rules\""),
        step("chown", "chown 1234:1234 \"$D/x.rules\""),
        step(
            "setxattr",
            "python3 -c 'import os,sys; os.setxattr(sys.argv[1], \"user.x\", b\"1\")' \
             \"$D/x.rules\" 2>/dev/null",
        ),
        step("utime", "touch -d 2001-01-01 \"$D/x.rules\""),
        step("chattr", "chattr +i \"$D/x.rules\" 2>/dev/null"),
    ]
    .concat();
    let out = guard_run(&rules, d, d, &script);
    assert_steps(
        &out,
        &[
            "chmod=refused",
            "chown=refused",
            "setxattr=refused",
            "utime=refused",
            "chattr=refused",
        ],
    );
    let after = std::fs::metadata(&rules).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (after.mode(), after.uid(), after.gid(), after.mtime()),
        (before.mode(), before.uid(), before.gid(), before.mtime())
    );
    // Not made immutable: the test process can still open it for writing.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&rules)
        .unwrap();
}

#[test]
fn a_root_command_cannot_undo_the_binds_and_lacks_the_dropped_capabilities() {
    if !landlock_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rules = d.join("x.rules");
    std::fs::write(&rules, RULES).unwrap();
    let script = [
        step("umount", "umount \"$D/x.rules\" 2>/dev/null"),
        step("umount_lazy", "umount -l \"$D/x.rules\" 2>/dev/null"),
        step(
            "remount_rw",
            "mount -o remount,rw \"$D/x.rules\" 2>/dev/null",
        ),
        step("mount_over", "mount -t tmpfs none \"$D\" 2>/dev/null"),
        // Written back with the value it has: a refusal changes nothing, and so would success.
        step(
            "proc_sys",
            "cat /proc/sys/kernel/hostname > /tmp/.h.$$ && \
             cat /tmp/.h.$$ > /proc/sys/kernel/hostname 2>/dev/null; r=$?; rm -f /tmp/.h.$$; \
             [ $r = 0 ]",
        ),
        step("host_root", "ls /proc/1/root/ >/dev/null 2>&1"),
        step("write_after", "echo x >> \"$D/x.rules\" 2>/dev/null"),
        "grep -E '^Cap(Eff|Bnd|Prm):' /proc/self/status; ".to_string(),
    ]
    .concat();
    let out = guard_run(&rules, d, d, &script);
    assert_steps(
        &out,
        &[
            "umount=refused",
            "umount_lazy=refused",
            "remount_rw=refused",
            "mount_over=refused",
            "proc_sys=refused",
            "host_root=refused",
            "write_after=refused",
        ],
    );
    let dropped = guard::confine::capabilities::dropped_mask();
    let stdout = text(&out.stdout);
    for set in ["CapEff", "CapBnd", "CapPrm"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(set))
            .unwrap_or_else(|| panic!("no {set} line: {}", describe(&out)));
        let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_eq!(
            mask & dropped,
            0,
            "{set} still has dropped capabilities: {line}"
        );
        assert_ne!(mask, 0, "{set}: root keeps the capabilities not dropped");
    }
    assert_eq!(std::fs::read_to_string(&rules).unwrap(), RULES);

    // --keep-capabilities keeps them (and the binds hold still).
    let out = run(Command::new(guard_bin())
        .args(["run", "--keep-capabilities", "--rules"])
        .arg(&rules)
        .args(["--", "sh", "-c"])
        .arg("grep '^CapBnd:' /proc/self/status; echo x >> \"$D/x.rules\"")
        .env("D", d));
    let line = text(&out.stdout);
    let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_eq!(mask & dropped, dropped, "{}", describe(&out));
    assert!(!out.status.success(), "{}", describe(&out));
    assert_eq!(std::fs::read_to_string(&rules).unwrap(), RULES);
}

#[test]
fn a_relative_write_denial_leaves_the_current_folder_writable() {
    if !landlock_or_skip() {
        return;
    }
    let rules_dir = tempfile::tempdir().unwrap();
    let rules = rules_dir.path().join("test.rules");
    std::fs::write(
        &rules,
        "rule_set(deny = [\"write(.git/config)\", \"write(.git/hooks/**)\"])\n",
    )
    .unwrap();
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    git(&["init", "-q"]);
    git(&["config", "user.email", "t@example.invalid"]);
    git(&["config", "user.name", "t"]);
    let config = std::fs::read(cwd.join(".git/config")).unwrap();
    let script = [
        step("mkdir_src", "mkdir src && echo y > src/main.rs"),
        step("new_in_cwd", "echo y > brand-new"),
        step("commit", "git add -A && git commit -q -m first"),
        step("config", "git config core.hooksPath /tmp 2>/dev/null"),
        step("hook", "echo x > .git/hooks/pre-commit 2>/dev/null"),
    ]
    .concat();
    let out = guard_run(&rules, cwd, cwd, &script);
    assert_steps(
        &out,
        &[
            "mkdir_src=ok",
            "new_in_cwd=ok",
            "commit=ok",
            "config=refused",
            "hook=refused",
        ],
    );
    assert_eq!(std::fs::read(cwd.join(".git/config")).unwrap(), config);
    assert!(!cwd.join(".git/hooks/pre-commit").exists());
    git(&["rev-parse", "HEAD"]);
}

#[test]
fn a_tiny_cargo_build_in_a_temp_folder_works() {
    if !landlock_or_skip() {
        return;
    }
    let Ok(cargo) = which_cargo() else {
        skip("no cargo on PATH");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rules = d.join("x.rules");
    std::fs::write(&rules, RULES).unwrap();
    let project = d.join("tiny");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(
        project.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        project.join("src/main.rs"),
        "fn main() { println!(\"hi\"); }\n",
    )
    .unwrap();
    let out = run(Command::new(guard_bin())
        .args(["run", "--rules"])
        .arg(&rules)
        .arg("--")
        .arg(cargo)
        .args(["build", "--offline", "-q"])
        .env("CARGO_TARGET_DIR", project.join("target"))
        .current_dir(&project));
    assert!(out.status.success(), "{}", describe(&out));
    assert!(project.join("target/debug/tiny").exists());
}

fn which_cargo() -> Result<std::path::PathBuf, ()> {
    let path = std::env::var_os("CARGO").map(std::path::PathBuf::from);
    path.filter(|p| p.exists()).ok_or(())
}

#[test]
fn a_rules_path_through_a_symlink_and_dotdot_protects_the_file_that_was_loaded() {
    if !landlock_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // d/dir/link -> d/real/sub; d/dir/link/../x.rules is d/real/x.rules to the kernel.
    std::fs::create_dir_all(d.join("dir")).unwrap();
    std::fs::create_dir_all(d.join("real/sub")).unwrap();
    std::os::unix::fs::symlink(d.join("real/sub"), d.join("dir/link")).unwrap();
    let loaded = d.join("real/x.rules");
    std::fs::write(&loaded, RULES).unwrap();
    let decoy = d.join("dir/x.rules");
    std::fs::write(&decoy, "# not loaded\n").unwrap();
    let out = guard_run(
        &d.join("dir/link/../x.rules"),
        d,
        d,
        &[
            step("loaded", "echo x >> \"$D/real/x.rules\" 2>/dev/null"),
            step("decoy", "echo x >> \"$D/dir/x.rules\""),
        ]
        .concat(),
    );
    assert_steps(&out, &["loaded=refused", "decoy=ok"]);
    assert_eq!(std::fs::read_to_string(&loaded).unwrap(), RULES);
}

#[test]
fn under_the_daemon_work_beside_protected_paths_goes_on() {
    if !landlock_or_skip() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: format!("{RULES}rule_set(deny = [\"write(.git/**)\"])\n"),
        ..Default::default()
    });
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path();
    std::fs::create_dir(cwd.join(".git")).unwrap();
    std::fs::write(cwd.join(".git/config"), "[core]\n").unwrap();
    let rules_before = std::fs::read(&daemon.rules_file).unwrap();
    let script = [
        step("mkdir_src", "mkdir src"),
        step("new_in_cwd", "echo y > brand-new"),
        step("mktemp", "t=$(mktemp) && rm \"$t\""),
        step("git_dir", "echo x > .git/config 2>/dev/null"),
        step("rules", "echo x >> \"$RULES\" 2>/dev/null"),
    ]
    .concat();
    let out = run(daemon
        .guard_command(&["run", "-v", "--", "sh", "-c", &script])
        .env("RULES", &daemon.rules_file)
        .current_dir(cwd));
    assert_steps(
        &out,
        &[
            "mkdir_src=ok",
            "new_in_cwd=ok",
            "mktemp=ok",
            "git_dir=refused",
            "rules=refused",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(std::fs::read(&daemon.rules_file).unwrap(), rules_before);
}

#[test]
fn a_missing_system_rules_folder_cannot_be_made_from_inside() {
    if !landlock_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Guard's own folder exists, its rules folder does not (as /etc/guard without rules/).
    std::fs::create_dir(d.join("guard")).unwrap();
    let system_rules = d.join("guard/rules");
    let script = [
        step("make_rules", "mkdir \"$D/guard/rules\" 2>/dev/null"),
        step("plant_file", "echo x > \"$D/guard/rules\" 2>/dev/null"),
        step("beside", "touch \"$D/new\""),
    ]
    .concat();
    let out = run(Command::new(guard_bin())
        .args(["run", "-v", "--", "sh", "-c", &script])
        .env("GUARD_SYSTEM_RULES", &system_rules)
        .env_remove("GUARD_SOCKET")
        .env("D", d)
        .current_dir(d));
    assert_steps(
        &out,
        &["make_rules=refused", "plant_file=refused", "beside=ok"],
    );
    assert!(!system_rules.exists());
    assert!(d.join("new").exists());
}

#[test]
fn a_non_root_daemon_client_keeps_the_landlock_plan_and_says_so() {
    if !landlock_or_skip() {
        return;
    }
    const UID: u32 = 64_331;
    let authz = tempfile::tempdir().unwrap();
    let policy = authz.path().join("authz.json");
    std::fs::write(
        &policy,
        format!(
            r#"{{"rules": [
                {{"effect": "allow", "actions": ["*"], "when": {{"uid": ["0"]}}}},
                {{"effect": "allow", "actions": ["run"], "when": {{"uid": ["{UID}"]}}}}
            ]}}"#
        ),
    )
    .unwrap();
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: format!("{RULES}rule_set(deny = [\"write(.git/**)\"])\n"),
        extra_config: format!("socket_group = \"{UID}\"\nauthz_policy = {policy:?}\n"),
        ..Default::default()
    });
    // A project the user owns (so a refusal is guard's, not the file mode's).
    let project = tempfile::tempdir().unwrap();
    let cwd = project.path();
    std::fs::create_dir_all(cwd.join(".git")).unwrap();
    std::fs::write(cwd.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir(cwd.join("src")).unwrap();
    for path in [
        cwd.to_path_buf(),
        cwd.join(".git"),
        cwd.join(".git/config"),
        cwd.join("src"),
    ] {
        std::os::unix::fs::chown(&path, Some(UID), Some(UID)).unwrap();
    }
    let script = [
        step("git_dir", "echo x > .git/config 2>/dev/null"),
        step("in_src", "mkdir src/a && echo y > src/a/new"),
        // The Landlock plan's limit: the current folder is on the way to `.git`.
        step("new_in_cwd", "echo y > new 2>/dev/null"),
    ]
    .concat();
    let out = run(daemon
        .guard_command_as(UID, &["run", "-v", "--", "sh", "-c", &script])
        .current_dir(cwd));
    assert_steps(
        &out,
        &["git_dir=refused", "in_src=ok", "new_in_cwd=refused"],
    );
    assert!(
        text(&out.stderr).contains("no mount namespace (not root)"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join(".git/config")).unwrap(),
        "[core]\n"
    );
}
