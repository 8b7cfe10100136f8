//! The health contract on the real kernel: `guard run --require` refuses to start a command when
//! a layer it requires does not hold here (and says which and why), the daemon lists every
//! layer in `guard status`, `guard status --check` and the `guard_layer_up` metric say the same,
//! and `[require] layers` keeps a daemon from starting without one. Needs root; without it each
//! test prints `skipped: ...` (and fails when CI=true).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{assert_absent, assert_exists, describe, run_guard};
use guard::kernel::Backend;
use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run, guard_bin, text};
use guard_tests::kernel::root_or_skip;
use guard_tests::prometheus::{free_tcp_port, http_get};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// A policy with a `read(...)` rule, which only the lsm backend holds in the kernel.
const READ_RULE: &str = "rule_set(deny=[\"read(/nonexistent/guard-layers-test/**)\"])\n\
                         prefix_rule(pattern=[\"never-run-this\"], decision=\"forbidden\")\n";

/// `guard run --rules RULES EXTRA... -- touch MARKER`, its resolver's upstream named (so the
/// host's resolver configuration, which a VM may not have, does not decide the `dns` layer;
/// nothing is looked up).
fn run_touch(rules: &Path, extra: &[&str], marker: &Path) -> Output {
    let mut command = Command::new(guard_bin());
    command
        .args(["run", "--nameserver", "127.0.0.1:53", "--rules"])
        .arg(rules)
        .args(extra)
        .args(["--", "touch"])
        .arg(marker);
    run_guard(&mut command, RUN_TIMEOUT)
}

#[test]
fn a_run_that_requires_a_layer_that_does_not_hold_here_is_refused_before_its_command_starts() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("layers.rules");
    std::fs::write(&rules, READ_RULE).unwrap();

    // The kernel's layers and guard's resolver hold on every backend these tests run on.
    let marker = dir.path().join("ran-with-kernel-layers");
    let out = run_touch(
        &rules,
        &["--require", "exec,network", "--require=devices,dns"],
        &marker,
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_exists(&marker, "the command ran: every layer it required holds");

    // File rules: the lsm backend's file hooks hold them; the cgroup backend has none.
    let marker = dir.path().join("ran-with-files");
    let out = run_touch(&rules, &["--require", "files"], &marker);
    let stderr = text(&out.stderr);
    match guard_tests::kernel::backend() {
        Backend::Lsm => {
            assert!(out.status.success(), "{}", describe(&out));
            assert_exists(&marker, "the lsm backend holds read rules");
        }
        Backend::Cgroup => {
            assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
            assert!(
                stderr.contains("refusing to run: the required layer files is degraded")
                    && stderr.contains("no file hooks")
                    && stderr.contains("Drop files from --require"),
                "the refusal names the layer, why, and the way out: {stderr}"
            );
            assert_absent(&marker, "the command never started");
        }
    }

    // A layer the run itself turned off is not there either.
    let marker = dir.path().join("ran-without-resolver");
    let out = run_touch(&rules, &["--no-resolver", "--require", "dns"], &marker);
    assert_eq!(out.status.code(), Some(125), "{}", describe(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("the required layer dns is off") && stderr.contains("--no-resolver"),
        "{stderr}"
    );
    assert_absent(&marker, "the command never started");

    // `guard doctor` lists what a scope here gets, found by loading and attaching.
    let doctor = Command::new(guard_bin())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let listed: Vec<(String, String)> = report["layers"]
        .as_array()
        .expect("doctor lists layers")
        .iter()
        .map(|l| {
            (
                l["layer"].as_str().unwrap().into(),
                l["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    let state_of = |name: &str| {
        listed
            .iter()
            .find(|(l, _)| l == name)
            .map(|(_, s)| s.as_str())
    };
    for kernel in ["exec", "network", "devices"] {
        assert_eq!(state_of(kernel), Some("up"), "{kernel}: {listed:?}");
    }
    let files_state = match guard_tests::kernel::backend() {
        Backend::Lsm => "up",
        Backend::Cgroup => "degraded",
    };
    assert_eq!(state_of("files"), Some(files_state), "{listed:?}");

    // A name that is no layer is a usage error that lists the layers.
    let out = run_touch(&rules, &["--require", "netwrok"], &dir.path().join("x"));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("`netwrok`") && stderr.contains("exec, network, unix"),
        "{stderr}"
    );
}

#[test]
fn the_daemon_reports_its_layers_and_will_not_start_without_a_required_one() {
    if !can_run() {
        return;
    }
    let port = free_tcp_port().expect("a free port for the metrics");
    let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // Its resolver's upstream named: a VM has no /etc/resolv.conf (nothing is looked up).
    let mut daemon = TestDaemon::start(&DaemonSetup {
        rules: READ_RULE.to_string(),
        extra_config: format!("[metrics]\nlisten = \"{metrics}\"\n"),
        nameserver: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, 53))),
        ..Default::default()
    });

    // Every layer is listed, each once, with a state and a reason.
    let status = daemon.json(&["status", "--json"]);
    let layers = status["layers"].as_array().expect("status has layers");
    let names: Vec<&str> = layers.iter().filter_map(|l| l["layer"].as_str()).collect();
    assert_eq!(
        names,
        [
            "exec", "network", "unix", "devices", "dns", "hold", "files", "audit", "export"
        ],
        "{status}"
    );
    let state = |name: &str| {
        layers
            .iter()
            .find(|l| l["layer"] == name)
            .and_then(|l| l["state"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    // guard's resolver is up or, where no upstream can be chosen, missing: not asserted.
    for up in ["exec", "network", "devices", "hold", "audit"] {
        assert_eq!(state(up), "up", "{up}: {status}");
    }
    assert_eq!(state("export"), "off", "no syslog target: {status}");
    let files = state("files");

    // `--check` fails exactly when a layer is missing or degraded, naming it.
    let check = daemon.guard(&["status", "--check"]);
    let failing: Vec<&str> = layers
        .iter()
        .filter(|l| matches!(l["state"].as_str(), Some("missing" | "degraded")))
        .filter_map(|l| l["layer"].as_str())
        .collect();
    assert_eq!(
        check.status.success(),
        failing.is_empty(),
        "{}",
        describe(&check)
    );
    for layer in &failing {
        assert!(
            text(&check.stderr).contains(&format!("layer {layer} is")),
            "{}",
            describe(&check)
        );
    }
    if guard_tests::kernel::backend() == Backend::Cgroup {
        assert_eq!(files, "degraded", "the cgroup backend holds no read rule");
        assert!(!check.status.success(), "{}", describe(&check));
    }

    // The metric says the same.
    let (code, body) = http_get(port, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    for (layer, want) in [
        ("exec", 1),
        ("export", 0),
        ("files", i32::from(files == "up")),
    ] {
        let line = format!("guard_layer_up{{layer=\"{layer}\"}} {want}");
        assert!(body.lines().any(|l| l == line), "{line} in:\n{body}");
    }

    // A daemon that requires what this host does not give refuses to start, and says why.
    daemon.stop_with(libc::SIGTERM);
    let config = std::fs::read_to_string(&daemon.config).unwrap();
    std::fs::write(
        &daemon.config,
        format!("{config}[require]\nlayers = [\"exec\", \"export\"]\n"),
    )
    .unwrap();
    let started = Instant::now();
    let mut command = Command::new(guard_bin());
    command
        .arg("daemon")
        .arg("--config")
        .arg(&daemon.config)
        .arg("--audit-log")
        .arg(&daemon.audit_log);
    let out = run_guard(&mut command, Duration::from_secs(60));
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("[require] layers")
            && stderr.contains("export is off")
            && !stderr.contains("exec is"),
        "only the unmet layer is named: {stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(
        std::os::unix::net::UnixStream::connect(&daemon.socket).is_err(),
        "nothing answers on its socket"
    );
}
