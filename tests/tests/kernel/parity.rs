//! Parity: for every generated (command, destination) case, the kernel decides what `guard
//! check` decides (`Policy::kernel_exec_decision`, `Policy::check_destination`), and what the
//! host's run of the kernel's decision engine over the same image decides (`ExecTwin`,
//! `DestinationTwin`: `guard check --kernel` and the hold), over several policies. The
//! kernel's decision is read from what happened (the exec ran or was killed, the connect
//! worked or got EPERM) and, for refusals, from the event's decision (prompt or forbidden).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use guard::compile::kernel_engine::KernelEngine;
use guard::compile::{DestinationTwin, ExecTwin, NoResolver};
use guard::kernel::events::{EventKind, KernelEvent};
use guard::policy::load::load_policy;
use guard::policy::{Decision, Policy, Transport};
use guard::session::{Session, SessionOptions};
use guard_tests::kernel;

/// Programs the exec cases run: copies of /bin/true under these names.
const PROGRAMS: [&str; 4] = ["pa", "pb", "pc", "pd"];
const TOKENS: [&str; 5] = ["x", "y", "push", "status", "-f"];
const PORTS: [u16; 4] = [1001, 1002, 1003, 1004];

/// Policies over the vocabulary above: overlapping rules of every decision, alternatives,
/// one-token and longer rules for one program, CIDRs, ports, transports, host rules, and
/// unmatched defaults other than allow.
const POLICIES: [&str; 4] = [
    r#"
prefix_rule(pattern=["pa", "x"], decision="forbidden")
prefix_rule(pattern=["pa", ["y", "push"]], decision="prompt")
prefix_rule(pattern=["pa", "y", "status"], decision="allow")
prefix_rule(pattern=["pb"], decision="prompt")
prefix_rule(pattern=["pb", "status"], decision="allow")
prefix_rule(pattern=["pc", "push", ["x", "y"], "-f"], decision="forbidden")
address_rule(addresses=["127.0.0.2"], decision="deny")
address_rule(addresses=["127.0.0.4/31"], ports=[1001, 1002], transport="tcp", decision="prompt")
address_rule(addresses=["127.0.0.5"], ports=[1002], transport="udp", decision="deny")
address_rule(addresses=["127.0.0.0/29"], ports=[1004], decision="allow")
"#,
    r#"
enforcement(unmatched_exec="prompt", unmatched_network="deny")
prefix_rule(pattern=["pa"], decision="allow")
prefix_rule(pattern=["pb", "x"], decision="allow")
prefix_rule(pattern=["pb", "x", "push"], decision="forbidden")
prefix_rule(pattern=["pc", ["x", "y", "status"]], decision="allow")
network_rule(host="127.0.0.1", protocol="http", decision="allow")
address_rule(addresses=["127.0.0.0/30"], ports=[1001, 1003], decision="allow")
address_rule(addresses=["127.0.0.3"], ports=[1003], transport="udp", decision="prompt")
"#,
    r#"
prefix_rule(pattern=["pd", "-f"], decision="forbidden", justification="no force")
prefix_rule(pattern=["pd", "-f", "x"], decision="allow")
prefix_rule(pattern=[["pa", "pb"], "status"], decision="prompt")
prefix_rule(pattern=["pc"], decision="forbidden")
network_rule(host="127.0.0.6", protocol="socks5_tcp", decision="deny")
network_rule(host="127.0.0.6", protocol="socks5_udp", decision="prompt")
network_rule(host="127.0.0.7", protocol="socks5_tcp", decision="prompt")
network_rule(host="127.0.0.7", protocol="socks5_tcp", decision="allow")
address_rule(addresses=["127.0.0.0/24"], ports=[1002], transport="udp", decision="prompt")
"#,
    r#"
enforcement(unmatched_network="prompt")
prefix_rule(pattern=["pa", "push"], decision="prompt")
prefix_rule(pattern=["pa", "push", "x"], decision="forbidden")
prefix_rule(pattern=["pb", ["x", "y"], ["x", "y"]], decision="forbidden")
address_rule(addresses=["127.0.0.1", "127.0.0.2", "127.0.0.3"], decision="allow")
address_rule(addresses=["127.0.0.2"], ports=[1003], decision="deny")
network_rule(host="127.0.0.4", protocol="socks5_udp", decision="allow")
"#,
];

/// Deterministic case generator (no randomness between runs).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % bound
    }
}

/// Root, or one `skipped:` line (a failure under CI=true).
fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    kernel::skip("the parity tests load BPF programs and need root");
    false
}

fn load(dir: &Path, index: usize, text: &str) -> Policy {
    let path = dir.join(format!("parity-{index}.rules"));
    std::fs::write(&path, text).unwrap();
    load_policy(&[path], &[])
        .unwrap_or_else(|e| panic!("policy {index} does not load: {e}"))
        .policy
}

fn programs_dir(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let source = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    for name in PROGRAMS {
        std::fs::copy(source, bin.join(name)).unwrap();
    }
    bin
}

/// The decision the kernel took for each refused pid, from the events.
fn refusals(session: &mut Session, kind: &[EventKind], expected: usize) -> HashMap<u32, Decision> {
    let mut out = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.len() < expected && Instant::now() < deadline {
        for event in session.poll_events(Duration::from_millis(100)) {
            let KernelEvent {
                kind: k,
                tgid,
                decision,
                ..
            } = event;
            if kind.contains(&k) {
                out.insert(tgid, decision);
            }
        }
    }
    out
}

/// The cases must exercise every decision, or agreeing proves little.
fn assert_every_decision_seen(seen: &HashMap<Decision, usize>) {
    for decision in [Decision::Allow, Decision::Prompt, Decision::Forbidden] {
        let n = seen.get(&decision).copied().unwrap_or(0);
        assert!(
            n >= 50,
            "only {n} cases decided {decision:?}: the generator is too narrow"
        );
    }
}

#[test]
fn kernel_exec_decisions_equal_guard_check() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = programs_dir(dir.path());
    let mut rng = Lcg(7);
    let mut total = 0;
    let mut seen: HashMap<Decision, usize> = HashMap::new();
    for (index, text) in POLICIES.iter().enumerate() {
        let policy = load(dir.path(), index, text);
        let options = SessionOptions {
            backend: Some(kernel::backend()),
            extra_path_dirs: vec![bin.clone()],
            ..SessionOptions::default()
        };
        let starting = kernel::starting();
        let mut session = Session::start(policy.clone(), &options)
            .unwrap_or_else(|err| panic!("the kernel refused guard's programs: {err:#}"));
        drop(starting);
        let engine = Arc::new(KernelEngine::new(session.image().clone()).unwrap());
        let twin = ExecTwin::new(engine);
        // (command, expected, pid, exit status says refused)
        let mut cases = Vec::new();
        for _ in 0..260 {
            let program = PROGRAMS[rng.next(PROGRAMS.len())];
            let mut cmd = vec![program.to_string()];
            for _ in 0..rng.next(4) {
                cmd.push(TOKENS[rng.next(TOKENS.len())].to_string());
            }
            let expected = policy.kernel_exec_decision(&cmd);
            let by_engine = twin.decide(&bin.join(program), &cmd).decision;
            assert_eq!(
                by_engine, expected,
                "policy {index}: the host's engine and guard check differ on {cmd:?}"
            );
            let mut command = Command::new(bin.join(program));
            command.args(&cmd[1..]).stdin(Stdio::null());
            let outcome = session.spawn(&mut command).map(|mut child| {
                let pid = child.id();
                let status = child.wait().unwrap();
                (pid, status.success(), status.signal())
            });
            cases.push((cmd, expected, outcome));
        }
        let refused_count = cases
            .iter()
            .filter(|(_, _, o)| !matches!(o, Ok((_, true, _))))
            .count();
        let events = refusals(&mut session, &[EventKind::Exec], refused_count);
        for (cmd, expected, outcome) in &cases {
            let kernel = match outcome {
                Ok((_, true, _)) => Decision::Allow,
                Ok((pid, false, signal)) => {
                    assert_eq!(
                        *signal,
                        Some(9),
                        "{cmd:?}: a refused exec is killed with SIGKILL"
                    );
                    *events
                        .get(pid)
                        .unwrap_or_else(|| panic!("{cmd:?} refused without an event"))
                }
                // lsm backend: refused by identity or name in execve (EPERM); the event has
                // no pid of ours to match, so take the expected one only if it is a refusal.
                Err(err) => {
                    assert!(
                        format!("{err:#}").contains("Operation not permitted"),
                        "{cmd:?}: spawn failed: {err:#}"
                    );
                    assert_ne!(
                        *expected,
                        Decision::Allow,
                        "{cmd:?}: refused, guard check allows"
                    );
                    *expected
                }
            };
            assert_eq!(kernel, *expected, "policy {index}: exec {cmd:?}");
            *seen.entry(kernel).or_insert(0) += 1;
            total += 1;
        }
    }
    assert!(total >= 1000, "only {total} exec cases");
    assert_every_decision_seen(&seen);
    eprintln!(
        "{total} exec cases ({seen:?}): the kernel, the host's engine and guard check agree on \
         every one"
    );
}

#[test]
fn kernel_destination_decisions_equal_guard_check() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let probe = crate::common::net_probe();
    let mut rng = Lcg(11);
    let mut total = 0;
    let mut seen: HashMap<Decision, usize> = HashMap::new();
    for (index, text) in POLICIES.iter().enumerate() {
        // The probe itself must be allowed to run under policies whose unmatched execs are
        // refused: by its path (under an exec allowlist a name allows only the files it
        // resolves to, and the probe is on no PATH folder).
        let text = format!(
            "{text}\nprefix_rule(pattern=[\"{}\"], decision=\"allow\")\n",
            probe.display()
        );
        let policy = load(dir.path(), index, &text);
        let options = SessionOptions {
            backend: Some(kernel::backend()),
            ..SessionOptions::default()
        };
        let starting = kernel::starting();
        let mut session = Session::start(policy.clone(), &options)
            .unwrap_or_else(|err| panic!("the kernel refused guard's programs: {err:#}"));
        drop(starting);
        let engine = Arc::new(KernelEngine::new(session.image().clone()).unwrap());
        let twin = DestinationTwin::new(engine, session.resolver_port().is_some());
        let mut cases = Vec::new();
        for _ in 0..260 {
            let ip = Ipv4Addr::new(127, 0, 0, 1 + rng.next(8) as u8);
            let port = PORTS[rng.next(PORTS.len())];
            let (mode, transport) = match rng.next(3) {
                0 => ("tcp", Transport::Tcp),
                1 => ("udp-connect", Transport::Udp),
                _ => ("udp-sendto", Transport::Udp),
            };
            // Some cases as IPv4-mapped IPv6: the kernel must look them up as IPv4.
            let shown = if rng.next(4) == 0 {
                format!("::ffff:{ip}")
            } else {
                ip.to_string()
            };
            let expected = policy
                .check_destination(IpAddr::V4(ip), port, transport, &NoResolver)
                .decision;
            let by_engine = twin
                .decide(shown.parse().unwrap(), port, transport)
                .decision;
            assert_eq!(
                by_engine, expected,
                "policy {index}: the host's engine and guard check differ on {shown}:{port}"
            );
            let mut command = Command::new(&probe);
            command
                .args([mode, &shown, &port.to_string()])
                .stdout(Stdio::piped())
                .stdin(Stdio::null());
            let child = session.spawn(&mut command).expect("the probe starts");
            let pid = child.id();
            let output = child.wait_with_output().unwrap();
            let said = String::from_utf8_lossy(&output.stdout).trim().to_string();
            cases.push((format!("{mode} {shown}:{port}"), expected, pid, said));
        }
        let refused = cases.iter().filter(|c| c.3 == "errno 1").count();
        let events = refusals(
            &mut session,
            &[EventKind::Connect, EventKind::Sendmsg],
            refused,
        );
        for (case, expected, pid, said) in &cases {
            let kernel = if said == "errno 1" {
                *events
                    .get(pid)
                    .unwrap_or_else(|| panic!("{case} refused without an event"))
            } else {
                Decision::Allow
            };
            assert_eq!(
                kernel, *expected,
                "policy {index}: {case} (probe said {said})"
            );
            *seen.entry(kernel).or_insert(0) += 1;
            total += 1;
        }
    }
    assert!(total >= 1000, "only {total} destination cases");
    assert_every_decision_seen(&seen);
    eprintln!(
        "{total} destination cases ({seen:?}): the kernel, the host's engine and guard check \
         agree on every one"
    );
}
