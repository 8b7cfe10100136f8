//! `packaging/guard.service` as systemd starts the daemon: its hardening rated offline by
//! `systemd-analyze security`, and the daemon doing its whole job confined as the unit confines
//! it ([`guard_tests::unit::UnitConfinement`]: the unit's capabilities, no_new_privs, read-only
//! folders and /proc): a forbidden exec killed, a held connect answered from another terminal,
//! its status answered. So a capability or a path the unit takes away but the daemon needs fails
//! here, not on a user's host. Needs root; without it each test prints
//! `skipped: ...` (a failure when CI=true).

use std::process::Command;

use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run, finish_held, text};
use guard_tests::kernel::{http_server, skip, touch_program};
use guard_tests::unit::{unit_capabilities, unit_path, unit_user};

/// The exposure `systemd-analyze security` may give the unit (0 safest, 10 least safe). It
/// rated the unit 9.6 before it was hardened, 3.2 hardened as root, and 2.9 as the user
/// `guard` with ambient capabilities (2026-12-05, systemd 252).
const MAX_EXPOSURE: f64 = 2.9;

#[test]
fn the_units_hardening_rates_at_most_its_recorded_exposure() {
    let Some(tool) = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|path| std::path::Path::new(path).is_file())
    else {
        skip("no systemd-analyze here (`cargo xtask setup` installs the systemd package)");
        return;
    };
    let out = Command::new(tool)
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit_path())
        .output()
        .expect("running systemd-analyze");
    let report = text(&out.stdout) + &text(&out.stderr);
    let exposure: f64 = report
        .lines()
        .find_map(|line| {
            let rest = line
                .split("Overall exposure level for guard.service:")
                .nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no overall exposure in systemd-analyze's report:\n{report}"));
    println!("systemd-analyze security: guard.service exposure {exposure}");
    assert!(
        exposure <= MAX_EXPOSURE,
        "guard.service is rated {exposure}, above {MAX_EXPOSURE}: a hardening line was lost\n{report}"
    );
}

#[test]
fn the_daemon_does_its_job_confined_as_the_unit_confines_it() {
    if !can_run() {
        return;
    }
    let kept = unit_capabilities();
    let port = http_server(1);
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: format!(
            "address_rule(addresses=[\"127.0.0.1\"], ports=[{port}], decision=\"prompt\", \
             justification=\"ask before the test server\")\n\
             prefix_rule(pattern=[\"touch\"], decision=\"forbidden\")\n"
        ),
        as_unit: true,
        ..Default::default()
    });

    // The confinement took: the daemon runs as the unit's user and holds the unit's
    // capabilities and no others.
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in /proc/PID/status:\n{status}"))
            .trim()
            .to_string()
    };
    let (uid, gid) = unit_user().expect("the unit names a User=");
    assert_eq!(
        field("Uid:"),
        format!("{uid}\t{uid}\t{uid}\t{uid}"),
        "the daemon runs as the unit's user"
    );
    assert_eq!(field("Gid:"), format!("{gid}\t{gid}\t{gid}\t{gid}"));
    let mask = |name: &str| u64::from_str_radix(&field(name), 16).unwrap();
    let expected = kept.iter().fold(0u64, |mask, c| mask | (1 << c.index()));
    assert_eq!(
        mask("CapEff:"),
        expected,
        "the daemon's effective capabilities are the unit's"
    );
    assert_eq!(
        mask("CapAmb:"),
        expected,
        "they are ambient, as a non-root user keeps them"
    );

    // And it runs in the unit's mount namespace: /usr and /sys read-only, a /proc of pids.
    let mounts = std::fs::read_to_string(format!("/proc/{}/mountinfo", daemon.pid())).unwrap();
    let options_of = |point: &str| {
        mounts
            .lines()
            .rfind(|line| line.split(' ').nth(4) == Some(point))
            .map(|line| line.to_string())
            .unwrap_or_else(|| panic!("no mount at {point} in the daemon's namespace:\n{mounts}"))
    };
    for point in ["/usr", "/sys"] {
        let line = options_of(point);
        assert!(
            line.split(' ')
                .nth(5)
                .is_some_and(|o| o.split(',').any(|o| o == "ro")),
            "{point} is read-only for the daemon: {line}"
        );
    }
    let proc = options_of("/proc");
    assert!(proc.contains("subset=pid"), "the daemon's /proc: {proc}");

    // A forbidden exec is killed before it runs.
    let made = daemon.dir.path().join("made");
    let (code, _, stderr) = daemon.run_in_scope(&touch_program(), &[made.to_str().unwrap()]);
    assert_eq!(code, 137, "touch is killed: {stderr}\n{}", daemon.log());
    assert!(!made.exists(), "the forbidden touch did not run");

    // A prompted connect is held, and goes on once `guard approve` answers it.
    let url = format!("http://127.0.0.1:{port}/");
    let mut run = daemon.held_run(&["curl", "-sS", "--max-time", "60", &url]);
    let id = daemon.pending_ask(&mut run)["id"]
        .as_u64()
        .expect("the ask's id")
        .to_string();
    let out = daemon.guard(&["approve", &id, "--once"]);
    assert!(out.status.success(), "approve: {}", text(&out.stderr));
    let (code, stdout, stderr) = finish_held(run);
    assert_eq!(
        (code, stdout.as_str()),
        (0, "held-ok"),
        "the held curl went on after the approval: {stderr}\n{}",
        daemon.log()
    );

    let out = daemon.guard(&["status"]);
    assert!(out.status.success(), "status: {}", text(&out.stderr));
}

/// An upgrade from a guard whose daemon ran as root to one whose unit names `User=guard`: the
/// new daemon, as that user, finds root's pins, state and audit log, takes over without a gap
/// and goes on writing to all of them (the unit's CAP_DAC_OVERRIDE; systemd also chowns the
/// StateDirectory, which this test does not, so it checks the harder case).
#[test]
fn a_daemon_as_the_units_user_takes_over_what_a_root_daemon_left() {
    if !can_run() {
        return;
    }
    let mut daemon = TestDaemon::start(&DaemonSetup {
        rules: "prefix_rule(pattern=[\"touch\"], decision=\"forbidden\")\n".to_string(),
        as_root: true,
        ..Default::default()
    });
    let uid_of = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())
            .and_then(|uid| uid.parse::<u32>().ok())
            .expect("Uid: in /proc/PID/status")
    };
    assert_eq!(uid_of(daemon.pid()), 0, "the old daemon runs as root");
    let amend = |daemon: &TestDaemon, program: &str| {
        let out = daemon.guard(&["allow-prefix", "--", program]);
        assert!(
            out.status.success(),
            "allow-prefix {program}: {}\n{}",
            text(&out.stderr),
            daemon.log()
        );
    };
    amend(&daemon, "printf");
    let made = daemon.dir.path().join("made");
    let assert_touch_killed = |daemon: &TestDaemon, when: &str| {
        let (code, _, stderr) = daemon.run_in_scope(&touch_program(), &[made.to_str().unwrap()]);
        assert_eq!(
            code,
            137,
            "{when}: touch is killed: {stderr}\n{}",
            daemon.log()
        );
        assert!(!made.exists(), "{when}: the forbidden touch did not run");
    };
    assert_touch_killed(&daemon, "under the root daemon");
    daemon.stop_with(libc::SIGKILL);

    daemon.set_as_unit(true);
    daemon.spawn();
    let (unit_uid, _) = unit_user().expect("the unit names a User=");
    assert_eq!(
        uid_of(daemon.pid()),
        unit_uid,
        "the new daemon runs as the unit's user"
    );
    let generations = std::fs::read_dir(&daemon.pin_dir)
        .unwrap()
        .filter_map(Result::ok)
        .count();
    assert_eq!(
        generations,
        1,
        "the new daemon released root's pins after taking over:\n{}",
        daemon.log()
    );
    assert_touch_killed(&daemon, "under the unit's daemon");
    amend(&daemon, "echo");
    let amendments = std::fs::read_to_string(daemon.amendments()).unwrap();
    assert_eq!(
        amendments.lines().collect::<Vec<_>>(),
        [
            "prefix_rule(pattern=[\"printf\"], decision=\"allow\")",
            "prefix_rule(pattern=[\"echo\"], decision=\"allow\")",
        ],
        "root's amendments file, appended to by the new daemon"
    );
    // One audit trail across the move: the new daemon continues root's sequence.
    let out = daemon.guard(&["audit", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let records: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "no gap and no restart in the sequence: {seqs:?}"
    );
    let starts = records
        .iter()
        .filter(|r| r["type"] == "daemon_start")
        .count();
    assert_eq!(starts, 2, "both daemons wrote to the one log: {records:?}");
}
