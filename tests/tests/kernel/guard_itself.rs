//! Nothing inside a scope reaches guard itself: a root command of a `guard run` cannot name
//! guard's pinned links (every bpf file system is hidden in its mount namespace), cannot make a
//! `bpf` call at all, cannot make a user namespace to mount around the binds, and keeps none of
//! the capabilities that move a decided call (`CAP_NET_ADMIN`'s marks, NAT and routes;
//! `chroot`). Each way is tried as the attacker would, as root and as another user, and the
//! run's refusal still holds after it; ordinary work beside it still works. Needs root; without
//! it each test prints `skipped: ...` (and fails when CI=true).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{net_probe, scope_escape};
use guard_tests::daemon::{guard_bin, text};
use guard_tests::kernel::{root_or_skip, starting, wait_output};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Every try, one line each: `NAME=RESULT` with what `scope-escape` (or the shell) said.
fn attempts(helper: &Path, probe: &Path, refused_port: u16, allowed_port: u16) -> String {
    let helper = helper.display();
    let probe = probe.display();
    [
        "echo bpffs_entries=$(ls -A /sys/fs/bpf | wc -l)".to_string(),
        format!("{helper} bpf-obj-get /"),
        format!("{helper} bpf-detach-pins /sys/fs/bpf"),
        format!("{helper} unshare-user"),
        format!("{helper} so-mark"),
        format!("{helper} chroot /"),
        // Another user in the same scope: the same filter, no capabilities at all.
        format!("setpriv --reuid=65534 --regid=65534 --clear-groups {helper} bpf-obj-get /"),
        format!("setpriv --reuid=65534 --regid=65534 --clear-groups {helper} unshare-user"),
        format!("echo refused_connect=$({probe} tcp 127.0.0.1 {refused_port})"),
        format!("echo allowed_connect=$({probe} tcp 127.0.0.1 {allowed_port})"),
    ]
    .join("; ")
}

#[test]
fn a_root_command_cannot_reach_guards_links_make_bpf_calls_or_rewrite_its_traffic() {
    if !root_or_skip() {
        return;
    }
    let _starting = starting();
    let dir = tempfile::tempdir().unwrap();
    let refused = TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
    let (refused_port, allowed_port) = (
        refused.local_addr().unwrap().port(),
        allowed.local_addr().unwrap().port(),
    );
    let rules = dir.path().join("test.rules");
    std::fs::write(
        &rules,
        format!(
            "address_rule(addresses=[\"127.0.0.1\"], ports=[{refused_port}], decision=\"deny\")\n"
        ),
    )
    .unwrap();
    let script = attempts(&scope_escape(), &net_probe(), refused_port, allowed_port);
    let output = wait_output(
        Command::new(guard_bin())
            .args(["run", "--rules"])
            .arg(&rules)
            .args(["--", "sh", "-c", &script])
            .env_remove("GUARD_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting guard run"),
        RUN_TIMEOUT,
    );
    let said = text(&output.stdout);
    let context = format!("{said}\n--- stderr:\n{}", text(&output.stderr));
    // Outside the run, the host's bpffs holds pins (this run's among them); inside, nothing.
    assert!(
        std::fs::read_dir(guard::kernel::pins::RUNS_ROOT).is_ok_and(|mut d| d.next().is_some()),
        "the runs' pins are on the host's bpffs"
    );
    for expected in [
        "bpffs_entries=0",
        "bpf-obj-get: EPERM",
        "bpf-detach-pins: ENOENT",
        "unshare-user: EPERM",
        "so-mark: EPERM",
        "chroot: EPERM",
    ] {
        assert!(said.contains(expected), "{expected}: {context}");
    }
    assert_eq!(
        said.matches("bpf-obj-get: EPERM").count(),
        2,
        "the other user is refused the call too: {context}"
    );
    assert_eq!(said.matches("unshare-user: EPERM").count(), 2, "{context}");
    assert!(
        said.contains("refused_connect=errno 1"),
        "the run's refusal still holds after every try: {context}"
    );
    assert!(
        said.contains("allowed_connect=ok"),
        "and what it allows still connects: {context}"
    );
    assert!(output.status.success(), "{context}");
}

#[test]
fn outside_any_scope_the_same_calls_reach_the_kernel() {
    // What the run's filter and mounts take away is there without them: the test above is
    // not passing because the calls fail everywhere.
    if !root_or_skip() {
        return;
    }
    let said = |args: &[&str]| {
        let output = Command::new(scope_escape()).args(args).output().unwrap();
        text(&output.stdout)
    };
    // The kernel looks at the path and refuses it as no BPF object (EACCES or EINVAL by
    // version), where the run's filter refuses the call itself (EPERM).
    let obj_get = said(&["bpf-obj-get", "/"]);
    assert!(
        obj_get.contains("bpf-obj-get: EACCES") || obj_get.contains("bpf-obj-get: EINVAL"),
        "the kernel looked at the path: {obj_get}"
    );
    assert!(said(&["so-mark"]).contains("so-mark: ok"));
    assert!(
        std::fs::read_dir(guard::kernel::pins::DEFAULT_ROOT).is_ok(),
        "the host's bpffs is there to read"
    );
}

#[test]
fn a_detached_link_of_a_run_is_noticed_and_attached_again() {
    if !root_or_skip() {
        return;
    }
    let _starting = starting();
    let dir = tempfile::tempdir().unwrap();
    let refused = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = refused.local_addr().unwrap().port();
    let rules = dir.path().join("test.rules");
    std::fs::write(
        &rules,
        format!("address_rule(addresses=[\"127.0.0.1\"], ports=[{port}], decision=\"deny\")\n"),
    )
    .unwrap();
    let (ready, go) = (dir.path().join("ready"), dir.path().join("go"));
    let script = format!(
        "touch {ready}; i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); \
         done; echo after=$({probe} tcp 127.0.0.1 {port})",
        ready = ready.display(),
        go = go.display(),
        probe = net_probe().display()
    );
    let child = Command::new(guard_bin())
        .args(["run", "--rules"])
        .arg(&rules)
        .args(["--", "sh", "-c", &script])
        .env_remove("GUARD_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting guard run");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ready.exists(), "the command started");
    // The run's pins, as root outside the scope sees them: `run-PID-N`.
    let prefix = format!("run-{}-", child.id());
    let pins = std::fs::read_dir(guard::kernel::pins::RUNS_ROOT)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .expect("the run's pin folder");
    // What a root process that can name the pins does (the command cannot: see above).
    let detach = Command::new(scope_escape())
        .arg("bpf-detach-pins")
        .arg(&pins)
        .output()
        .unwrap();
    let said = text(&detach.stdout);
    assert!(
        said.contains("bpf-detach-pins: ok") && said.contains("detached "),
        "the links can be detached by whoever names them: {said}"
    );
    // guard looks every 250 ms; give it a few looks, then let the command connect.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&go, "").unwrap();
    let output = wait_output(child, RUN_TIMEOUT);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        stderr.contains("was detached") && stderr.contains("attached and pinned again"),
        "the run says what it found and did: {stderr}"
    );
    assert!(
        stdout.contains("after=errno 1"),
        "the refusal holds again after the detach: {stdout} / {stderr}"
    );
}
