//! `guard run --socket S --overlay FILE`: each run's scope holds the daemon's policy tightened
//! by its own overlay, in a program set of its own beside the daemon's. Two runs with different
//! overlays at once each hold exactly their own policy; an overlay's allows admit nothing the
//! daemon forbids or prompts; an overlay that does not parse starts nothing. Traffic goes to
//! loopback addresses only, and UDP connects send nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::net_probe;
use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run, text};
use guard_tests::kernel::shell_program;

/// The daemon's setup over `rules`. Its name server is named (a loopback address no test
/// asks): the VM has no /etc/resolv.conf to take one from.
fn setup(rules: &str) -> DaemonSetup {
    DaemonSetup {
        rules: rules.to_string(),
        nameserver: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 53))),
        ..Default::default()
    }
}

/// A copy of `/bin/true` named `name` in `dir`.
fn program(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::copy("/bin/true", &path).expect("copying /bin/true");
    path
}

/// Writes an overlay file named `name` into the daemon's folder.
fn overlay(daemon: &TestDaemon, name: &str, rules: &str) -> PathBuf {
    let path = daemon.dir.path().join(name);
    std::fs::write(&path, rules).expect("writing the overlay");
    path
}

/// A shell script that tries each of `tools` and each UDP destination in `addresses` and prints
/// one `what=exit-code` line per try (the probe prints `ok` or `errno N` itself).
fn tries(tools: &[&Path], addresses: &[&str]) -> String {
    let probe = net_probe();
    let mut script = String::new();
    for tool in tools {
        let name = tool.file_name().unwrap().to_str().unwrap();
        script.push_str(&format!("{} ; echo {name}=$?\n", tool.display()));
    }
    for address in addresses {
        script.push_str(&format!(
            "echo {address}=$({} udp-connect {address} 9)\n",
            probe.display()
        ));
    }
    script
}

/// Each `what=...` line of a run's output.
fn outcomes(stdout: &str) -> std::collections::BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(what, how)| (what.to_string(), how.trim().to_string()))
        .collect()
}

/// `guard run --overlay OVERLAY -- sh -c SCRIPT`, started and left running.
fn start_run(daemon: &TestDaemon, overlay: &Path, script: &str) -> Child {
    daemon
        .guard_command(&[
            "run",
            "--overlay",
            overlay.to_str().unwrap(),
            "--",
            shell_program().to_str().unwrap(),
            "-c",
            script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting guard run")
}

/// The run scopes `guard status --json` lists, with their overlays.
fn run_overlays(daemon: &TestDaemon) -> Vec<Vec<String>> {
    let status = daemon.json(&["status", "--json"]);
    status["scopes"]
        .as_array()
        .expect("scopes")
        .iter()
        .filter(|s| s["kind"]["kind"] == "run")
        .map(|s| {
            s["overlay"]
                .as_array()
                .map(|files| {
                    files
                        .iter()
                        .map(|f| f.as_str().unwrap().to_string())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// `guard run [--overlay OVERLAY] -- dns-probe`: looks `name` up (asked of an address on port
/// 53, which the daemon's set sends to guard's resolver) and connects to its answer on 443;
/// the probe's JSON line.
fn looks_up(daemon: &TestDaemon, overlay: Option<&Path>, name: &str) -> serde_json::Value {
    let mut args = vec!["run"];
    if let Some(overlay) = overlay {
        args.extend(["--overlay", overlay.to_str().unwrap()]);
    }
    let dns_probe = crate::common::dns_probe();
    args.extend([
        "--",
        dns_probe.to_str().unwrap(),
        "127.0.0.153:53",
        name,
        "udp",
        "1",
        "443",
    ]);
    let out = daemon.guard(&args);
    let stdout = text(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default().to_string();
    serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("{e}: {line:?}; guard said: {}", text(&out.stderr)))
}

#[test]
fn two_runs_with_different_overlays_at_once_each_hold_exactly_their_own_policy() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&setup(
        "address_rule(addresses=[\"127.77.40.9\"], decision=\"forbidden\")\n\
         prefix_rule(pattern=[\"tool-d\"], decision=\"forbidden\")\n",
    ));
    let dir = daemon.dir.path();
    let tools = [
        program(dir, "tool-a"),
        program(dir, "tool-b"),
        program(dir, "tool-d"),
    ];
    let tools: Vec<&Path> = tools.iter().map(PathBuf::as_path).collect();
    let addresses = ["127.77.40.1", "127.77.40.2", "127.77.40.9"];
    let overlay_a = overlay(
        &daemon,
        "a.rules",
        "prefix_rule(pattern=[\"tool-a\"], decision=\"forbidden\")\n\
         address_rule(addresses=[\"127.77.40.1\"], decision=\"forbidden\")\n",
    );
    let overlay_b = overlay(
        &daemon,
        "b.rules",
        "prefix_rule(pattern=[\"tool-b\"], decision=\"forbidden\")\n\
         address_rule(addresses=[\"127.77.40.2\"], decision=\"forbidden\")\n",
    );
    // Run A waits (bounded: 20 s) until run B is done, so both overlays are in force at once.
    let go = dir.join("go");
    let wait = format!(
        "i=0; while [ ! -e {} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done\n",
        go.display()
    );
    let ready = dir.join("a-ready");
    let run_a = start_run(
        &daemon,
        &overlay_a,
        &format!(
            "touch {}\n{wait}{}",
            ready.display(),
            tries(&tools, &addresses)
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "run A did not start within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out_b = daemon.guard(&[
        "run",
        "--overlay",
        overlay_b.to_str().unwrap(),
        "--",
        shell_program().to_str().unwrap(),
        "-c",
        &tries(&tools, &addresses),
    ]);
    let listed = run_overlays(&daemon);
    assert!(
        listed.contains(&vec![overlay_a.display().to_string()]),
        "while A waits, status lists its run with its overlay: {listed:?}"
    );
    std::fs::write(&go, "").unwrap();
    let out_a = run_a.wait_with_output().expect("run A");

    let a = outcomes(&text(&out_a.stdout));
    let b = outcomes(&text(&out_b.stdout));
    let refused_exec = |code: &str| code != "0";
    // A: its own overlay and the daemon's rules.
    assert!(
        refused_exec(&a["tool-a"]),
        "A's overlay forbids tool-a: {a:?}"
    );
    assert_eq!(a["tool-b"], "0", "B's overlay is not A's: {a:?}");
    assert!(
        refused_exec(&a["tool-d"]),
        "the daemon forbids tool-d: {a:?}"
    );
    assert_eq!(a["127.77.40.1"], "errno 1", "A's overlay: {a:?}");
    assert_eq!(a["127.77.40.2"], "ok", "not A's: {a:?}");
    assert_eq!(a["127.77.40.9"], "errno 1", "the daemon's: {a:?}");
    // B: the same the other way round.
    assert_eq!(b["tool-a"], "0", "A's overlay is not B's: {b:?}");
    assert!(
        refused_exec(&b["tool-b"]),
        "B's overlay forbids tool-b: {b:?}"
    );
    assert!(
        refused_exec(&b["tool-d"]),
        "the daemon forbids tool-d: {b:?}"
    );
    assert_eq!(b["127.77.40.1"], "ok", "not B's: {b:?}");
    assert_eq!(b["127.77.40.2"], "errno 1", "B's overlay: {b:?}");
    assert_eq!(b["127.77.40.9"], "errno 1", "the daemon's: {b:?}");
    let stderr_b = text(&out_b.stderr);
    assert!(
        stderr_b.contains("127.77.40.2") && stderr_b.contains("b.rules"),
        "the refusal names the overlay's rule and file: {stderr_b}"
    );

    // A run with no overlay holds the daemon's policy alone.
    let out = daemon.guard(&[
        "run",
        "--",
        shell_program().to_str().unwrap(),
        "-c",
        &tries(&tools, &addresses),
    ]);
    let plain = outcomes(&text(&out.stdout));
    assert_eq!(
        (
            plain["tool-a"].as_str(),
            plain["tool-b"].as_str(),
            plain["127.77.40.1"].as_str(),
            plain["127.77.40.2"].as_str(),
            plain["127.77.40.9"].as_str()
        ),
        ("0", "0", "ok", "ok", "errno 1"),
        "{plain:?}"
    );
    assert!(refused_exec(&plain["tool-d"]), "{plain:?}");
}

#[test]
fn an_overlay_that_allows_what_the_daemon_forbids_or_prompts_changes_nothing() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&setup(
        "address_rule(addresses=[\"127.77.41.1\"], decision=\"forbidden\")\n\
         address_rule(addresses=[\"127.77.41.3\"], decision=\"allow\")\n\
         prefix_rule(pattern=[\"tool-x\"], decision=\"forbidden\")\n\
         enforcement(unmatched_network=\"prompt\")\n",
    ));
    let dir = daemon.dir.path();
    let tool = program(dir, "tool-x");
    let loosening = overlay(
        &daemon,
        "loose.rules",
        "address_rule(addresses=[\"127.77.41.1\", \"127.77.41.2\"], decision=\"allow\")\n\
         prefix_rule(pattern=[\"tool-x\"], decision=\"allow\")\n\
         enforcement(unmatched_network=\"allow\", unmatched_exec=\"allow\")\n",
    );
    let script = tries(&[&tool], &["127.77.41.1", "127.77.41.2", "127.77.41.3"]);
    let out = daemon.guard(&[
        "run",
        "--overlay",
        loosening.to_str().unwrap(),
        "--",
        shell_program().to_str().unwrap(),
        "-c",
        &script,
    ]);
    let got = outcomes(&text(&out.stdout));
    assert_ne!(got["tool-x"], "0", "the daemon forbids tool-x: {got:?}");
    assert_eq!(got["127.77.41.1"], "errno 1", "forbidden stays: {got:?}");
    assert_eq!(
        got["127.77.41.2"], "errno 1",
        "the daemon's unmatched prompt stays (refused at once: no hold): {got:?}"
    );
    assert_eq!(got["127.77.41.3"], "ok", "what both allow: {got:?}");
    let asks = daemon.prompts();
    assert!(
        asks.iter().any(|a| a["record"]["host"] == "127.77.41.2"),
        "the prompt is asked as in any run: {asks:?}"
    );
}

#[test]
fn an_overlay_that_does_not_parse_starts_nothing_and_names_its_file_and_line() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&setup(""));
    let broken = overlay(
        &daemon,
        "broken.rules",
        "prefix_rule(pattern=[\"ls\"], decision=\"allow\")\n\
         prefix_rule(pattern=[\"rm\"], decision=\"nope\")\n",
    );
    let marker = daemon.dir.path().join("ran");
    let out = daemon.guard(&[
        "run",
        "--overlay",
        broken.to_str().unwrap(),
        "--",
        "/usr/bin/touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("broken.rules:2"),
        "names the file and line: {stderr}"
    );
    assert!(!marker.exists(), "the command did not run");
    assert!(run_overlays(&daemon).is_empty(), "no overlay is in force");
}

#[test]
fn a_users_run_waits_for_her_answer_to_what_only_her_overlay_prompts() {
    if !can_run() {
        return;
    }
    const ALICE: u32 = 64_344;
    // The daemon's policy allows all of it; her overlay asks about `tool-p` and 127.77.43.1.
    let daemon = TestDaemon::start(&setup(""));
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tool = program(work.path(), "tool-p");
    let overlay = work.path().join("ask.rules");
    std::fs::write(
        &overlay,
        "prefix_rule(pattern=[\"tool-p\"], decision=\"prompt\", justification=\"my overlay asks\")\n\
         address_rule(addresses=[\"127.77.43.1\"], decision=\"prompt\")\n",
    )
    .unwrap();
    std::os::unix::fs::chown(work.path(), Some(ALICE), Some(ALICE)).unwrap();
    let script = format!(
        "{} udp-connect 127.77.43.1 9; {} ; echo rc=$?",
        net_probe().display(),
        tool.display()
    );
    let run = daemon
        .guard_command_as(
            ALICE,
            &[
                "run",
                "--overlay",
                overlay.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                &script,
            ],
        )
        .env_remove("GUARD_NO_HOLD")
        .current_dir(work.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The connect only the overlay prompts is refused at once (its set holds nothing) and
    // asked; the exec waits in its syscall for her answer.
    let deadline = Instant::now() + Duration::from_secs(30);
    let exec_ask = loop {
        let asks = daemon.prompts();
        if let Some(ask) = asks.iter().find(|a| a["target"]["tokens"][0] == "tool-p") {
            assert!(
                asks.iter().any(|a| a["record"]["host"] == "127.77.43.1"),
                "the overlay's prompted connect was asked first: {asks:?}"
            );
            break ask.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no ask for tool-p within 30 s: {asks:?}\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(exec_ask["owner"], ALICE.to_string(), "{exec_ask}");
    assert_eq!(exec_ask["by_overlay"], true, "{exec_ask}");
    // An admin's --always would amend the daemon's policy, which does not ask about it.
    let out = daemon.guard(&["approve", &exec_ask["id"].to_string(), "--always"]);
    assert!(
        !out.status.success() && text(&out.stderr).contains("asked by its run's overlay"),
        "{}",
        text(&out.stderr)
    );
    assert!(!daemon.amendments().exists(), "nothing was appended");
    let out = daemon.guard_as(ALICE, &["approve", &exec_ask["id"].to_string(), "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, stdout, stderr) = guard_tests::daemon::finish_held(run);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("errno 1") && stdout.contains("rc=0"),
        "the connect was refused, the held exec went on and ran: {stdout}{stderr}"
    );
    assert!(
        stderr.contains("holding exec of `") && stderr.contains("my overlay asks"),
        "the held exec is named with the overlay's rule: {stderr}"
    );
}

#[test]
fn dns_passes_an_overlays_set_to_guards_resolver_and_the_overlay_decides_the_names_connects() {
    if !can_run() {
        return;
    }
    let dns = guard_tests::dns::TestDns::start();
    let address = std::net::Ipv4Addr::new(127, 77, 44, 1);
    dns.set_a("api.overlay.test", &[address], 60);
    let _https = std::net::TcpListener::bind((address, 443)).expect("listening on 127.77.44.1:443");
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "network_rule(host=\"api.overlay.test\", protocol=\"https\", decision=\"allow\")\n"
            .to_string(),
        nameserver: Some(dns.addr()),
        ..Default::default()
    });
    let forbids = overlay(
        &daemon,
        "no-api.rules",
        "network_rule(host=\"api.overlay.test\", protocol=\"https\", decision=\"forbidden\")\n",
    );
    let probe = |overlay: Option<&Path>| looks_up(&daemon, overlay, "api.overlay.test");
    let plain = probe(None);
    assert_eq!(
        (plain["answers"].as_u64(), plain["connected"].as_u64()),
        (Some(1), Some(1)),
        "without the overlay the name is answered and reached: {plain}"
    );
    // An overlay that refuses every destination but the name: its set lets DNS pass (a
    // decision of its own would refuse 127.0.0.153:53), and allows the name's addresses as
    // guard's resolver answers them, after the overlay was put in force.
    let strict = overlay(
        &daemon,
        "only-api.rules",
        "enforcement(unmatched_network=\"forbidden\")\n\
         network_rule(host=\"api.overlay.test\", protocol=\"https\", decision=\"allow\")\n",
    );
    let allowed = probe(Some(&strict));
    assert_eq!(
        (allowed["answers"].as_u64(), allowed["connected"].as_u64()),
        (Some(1), Some(1)),
        "DNS passed the strict overlay's set, and the name it allows was reached: {allowed}"
    );
    let tightened = probe(Some(&forbids));
    assert_eq!(
        tightened["addresses"],
        serde_json::json!(["127.77.44.1"]),
        "the lookup passed the overlay's set to guard's resolver: {tightened}"
    );
    assert_eq!(
        (
            tightened["connected"].as_u64(),
            tightened["refused"].as_u64()
        ),
        (Some(0), Some(1)),
        "the overlay refuses the name's connect by the answer it got: {tightened}"
    );
}

/// Each scope its own book of answers: a name's addresses as guard's resolver answered one
/// run are that run's. Another run that connects to the same address without asking for the
/// name is decided as if nobody had (here refused by the unmatched default), while the answer
/// is still in force for the first; once it asks, the name's rule lets it through.
#[test]
fn a_names_answer_holds_only_in_the_scope_that_asked_for_it() {
    if !can_run() {
        return;
    }
    let dns = guard_tests::dns::TestDns::start();
    let address = std::net::Ipv4Addr::new(127, 77, 45, 1);
    dns.set_a("api.scoped.test", &[address], 300);
    let _https = std::net::TcpListener::bind((address, 443)).expect("listening on 127.77.45.1:443");
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "enforcement(unmatched_network=\"forbidden\")\n\
                network_rule(host=\"api.scoped.test\", protocol=\"https\", decision=\"allow\")\n"
            .to_string(),
        nameserver: Some(dns.addr()),
        ..Default::default()
    });
    let asks = || looks_up(&daemon, None, "api.scoped.test");
    let connects_only = || {
        let probe = net_probe();
        let out = daemon.guard(&[
            "run",
            "--",
            probe.to_str().unwrap(),
            "tcp",
            "127.77.45.1",
            "443",
        ]);
        text(&out.stdout).trim().to_string()
    };
    let asked = asks();
    assert_eq!(
        (asked["answers"].as_u64(), asked["connected"].as_u64()),
        (Some(1), Some(1)),
        "the run that asked reaches the name: {asked}"
    );
    let status = daemon.json(&["status", "--json"]);
    assert!(
        status["resolver"]["addresses"].as_u64() >= Some(1),
        "the answer is in force (for its TTL): {status}"
    );
    // The run that asked may still be listed until the daemon's next tick: it alone was
    // answered the name.
    for scope in status["scopes"].as_array().expect("scopes") {
        let expected = u64::from(scope["kind"]["kind"] == "run");
        assert_eq!(
            scope["names_answered"].as_u64(),
            Some(expected),
            "names answered per scope: {status}"
        );
    }
    assert_eq!(
        connects_only(),
        "errno 1",
        "a run that did not ask for the name is refused its address"
    );
    let asked_again = asks();
    assert_eq!(
        (
            asked_again["answers"].as_u64(),
            asked_again["connected"].as_u64()
        ),
        (Some(1), Some(1)),
        "a run that asks reaches it: {asked_again}"
    );
}

/// The daemon's peak resident memory (`VmHWM`), in KiB.
fn peak_memory_kib(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the daemon's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// `guard run --overlay OVERLAY -- /usr/bin/touch MARKER` as user `uid`, started.
fn start_run_as(daemon: &TestDaemon, uid: u32, overlay: &Path, marker: &Path) -> Child {
    daemon
        .guard_command_as(
            uid,
            &[
                "run",
                "--overlay",
                overlay.to_str().unwrap(),
                "--",
                "/usr/bin/touch",
                marker.to_str().unwrap(),
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting guard run as another user")
}

/// While `run` goes on (at most `limit`), `guard status` round trips, each timed; then the
/// run's exit code and stderr.
fn status_while(
    daemon: &TestDaemon,
    mut run: Child,
    limit: Duration,
) -> (Vec<Duration>, i32, String) {
    let deadline = Instant::now() + limit;
    let mut round_trips = Vec::new();
    while run.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the run did not end within {limit:?}"
        );
        let started = Instant::now();
        let out = daemon.guard(&["status", "--json"]);
        round_trips.push(started.elapsed());
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let out = run.wait_with_output().unwrap();
    (
        round_trips,
        out.status.code().unwrap_or(-1),
        text(&out.stderr),
    )
}

#[test]
fn a_users_overlay_cannot_spend_the_daemons_memory_or_hold_its_loop() {
    if !can_run() {
        return;
    }
    const MALLORY: u32 = 64_345;
    let daemon = TestDaemon::start(&setup(""));
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(work.path(), Some(MALLORY), Some(MALLORY)).unwrap();
    let overlay = |name: &str, rules: &str| {
        let path = work.path().join(name);
        std::fs::write(&path, rules).expect("writing the overlay");
        path
    };
    let marker = work.path().join("ran");
    // 22 bytes that ask for 300 MB in one step, before starlark's heap check.
    let big = overlay("big.rules", "x = \"a\" * 300000000\n");
    let before = peak_memory_kib(daemon.pid());
    let run = start_run_as(&daemon, MALLORY, &big, &marker);
    let (_, code, stderr) = status_while(&daemon, run, Duration::from_secs(30));
    assert_eq!(code, 125, "refused: {stderr}");
    assert!(
        stderr.contains("big.rules") && stderr.contains("32 MiB"),
        "names the overlay and the bound: {stderr}"
    );
    assert!(!marker.exists(), "the command did not run");
    let grown = peak_memory_kib(daemon.pid()).saturating_sub(before);
    eprintln!("the daemon's peak memory: {before} KiB before the overlay, grew by {grown} KiB");
    assert!(
        grown < 64 * 1024,
        "the daemon's peak memory grew by {grown} KiB under the overlay"
    );
    // An overlay whose loop takes its evaluation seconds (in the tests' debug build), and
    // which then does not parse: the daemon's loop answers meanwhile. (One that parses then
    // has its programs loaded on the loop: docs/limits.md.)
    let slow = overlay(
        "slow.rules",
        "def spin():\n    n = 0\n    for i in range(50000):\n        n += i\n    return n\n\
         x = spin()\nprefix_rule(pattern=[\"touch\"], decision=\"nope\")\n",
    );
    let started = Instant::now();
    let run = start_run_as(&daemon, MALLORY, &slow, &marker);
    let (round_trips, code, stderr) = status_while(&daemon, run, Duration::from_secs(60));
    let evaluation = started.elapsed();
    eprintln!("guard status while a slow overlay was evaluated ({evaluation:?}): {round_trips:?}");
    assert!(
        round_trips.len() >= 2,
        "status was asked again and again during the evaluation: {round_trips:?}"
    );
    // A loop that waited on the evaluation would hold one round trip for most of it; the bound
    // is relative, so it holds on a slow machine (the VM tier emulates its CPU) as on a fast one.
    let longest = round_trips.iter().max().copied().unwrap_or_default();
    assert!(
        longest < evaluation / 2,
        "no status waited for the evaluation ({evaluation:?}): {round_trips:?}"
    );
    assert_eq!(code, 125, "refused: {stderr}");
    // Its parse error, or, where the machine is too slow for its loop, the CPU bound.
    assert!(
        stderr.contains("slow.rules:7")
            || (stderr.contains("slow.rules") && stderr.contains("s of CPU")),
        "names its file, and its line or the bound: {stderr}"
    );
    assert!(!marker.exists(), "the command did not run");
    // An ordinary overlay still works.
    let ordinary = overlay(
        "ordinary.rules",
        "prefix_rule(pattern=[\"rm\"], decision=\"forbidden\")\n",
    );
    let run = start_run_as(&daemon, MALLORY, &ordinary, &marker);
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(marker.exists(), "the command ran under an ordinary overlay");
}
