//! What the hold of prompted calls (`guard run`, see `guard::hold`) costs the calls that are
//! not prompted: a worker process makes fork+exec of `/bin/true`, `getppid`, loopback TCP
//! connects and loopback UDP datagrams, once plain and once under the hold's seccomp filter
//! with guard's supervisor deciding every exec, connect and datagram (a policy with a prompt
//! rule for another program and another address, so each is read, decided and continues).
//! Each round runs plain, held, and plain again: the figures are medians, the ratio is held ÷
//! plain and the noise plain ÷ plain, all of the same run. No BPF program is loaded: this is
//! the hold's cost alone. Writes target/bench/hold.json.
//!
//! Then the same for the kernel's hold of prompted connects and sends (`NET_HOLD`: the connect
//! and sendmsg programs list a prompted call's socket, `cgroup_skb/egress` and `sock_ops` run
//! on every packet and TCP socket of the scope): the worker in a guard scope with the hold on,
//! and in one without guard, alternated the same way. Its ratio is what a prompting scope's
//! calls that are not prompted pay for being holdable, BPF decisions included.
//!
//! And what a held connect itself does, `HELD_ROUNDS` times each: a connect with its own 2 s
//! timeout to a prompted destination (it must return in 2 s, on the program's schedule), the
//! time from an approval to a waiting blocking connect's completion, and the same for a connect
//! to a stand-in address held on its way to guard's splice listener (approved, its stand-in
//! mapped: its next SYN reaches the listener, which splices it to the real listener).
//!
//! `cargo bench -p guard-tests --bench hold [-- --rounds N --execs N --calls N]`.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use guard::compile::{CompileEnv, NoResolver, compile};
use guard::hold::{Hold, Twins};
use guard::policy::PolicyParser;

/// Prompts for an exec and a destination the worker never makes: every exec and connect is
/// read and decided, and continues.
const POLICY: &str = "prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\", justification=\"asks\")\n\
     address_rule(addresses=[\"10.9.9.9\"], decision=\"prompt\")\n";

struct Options {
    rounds: usize,
    execs: usize,
    calls: usize,
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        return worker(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("--held-connect") {
        return held_connect(&args[1..]);
    }
    let mut options = Options {
        rounds: 7,
        execs: 300,
        calls: 2000,
    };
    let mut rest = args.iter().filter(|a| *a != "--bench");
    while let Some(flag) = rest.next() {
        let value = || -> Result<usize> {
            Ok(rest
                .clone()
                .next()
                .context("a number after the flag")?
                .parse()?)
        };
        match flag.as_str() {
            "--rounds" => options.rounds = value()?,
            "--execs" => options.execs = value()?,
            "--calls" => options.calls = value()?,
            _ => continue,
        }
        rest.next();
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("hold: skipped: the seccomp listener needs root (CAP_SYS_ADMIN)");
        if std::env::var("CI").as_deref() == Ok("true") {
            bail!("CI=true: the hold benchmark must run");
        }
        return Ok(());
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            drop(stream);
        }
    });
    // A second plain worker each round is the A/A baseline: the noise a ratio must beat.
    let (mut plain, mut held, mut again) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        plain.push(run_worker(&options, port, false)?);
        held.push(run_worker(&options, port, true)?);
        again.push(run_worker(&options, port, false)?);
    }
    println!(
        "hold: {} rounds of {} execs and {} calls (medians; ratio held ÷ plain, and the noise \
         plain ÷ plain, same run)",
        options.rounds, options.execs, options.calls
    );
    let mut json = rows("seccomp", "held", &plain, &held, &again);
    json.extend(kernel_hold(&options, port)?);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("hold.json"), format!("[{}]\n", json.join(",")))?;
    Ok(())
}

/// The kernel hold's rows: the worker in a scope whose prompted connects are held ÷ the worker
/// without guard.
fn kernel_hold(options: &Options, port: u16) -> Result<Vec<String>> {
    let dir = tempfile::tempdir()?;
    let rules = dir.path().join("bench.rules");
    // Listeners on 127.0.0.9 whose connects are prompted: one per held connect measured (the
    // last `HELD_ROUNDS` are the real addresses of spliced connects' stand-ins).
    let listeners: Vec<TcpListener> = (0..3 * HELD_ROUNDS)
        .map(|_| TcpListener::bind("127.0.0.9:0"))
        .collect::<std::io::Result<_>>()?;
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<_>>()?;
    let listed: Vec<String> = ports.iter().map(u16::to_string).collect();
    std::fs::write(
        &rules,
        format!(
            "{POLICY}address_rule(addresses=[\"127.0.0.9\"], ports=[{}], transport=\"tcp\", \
             decision=\"prompt\")\n\
             address_rule(addresses=[\"{STAND_INS}\"], transport=\"tcp\", decision=\"prompt\")\n",
            listed.join(", ")
        ),
    )?;
    let policy = guard::policy::load::load_policy(std::slice::from_ref(&rules), &[])
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .policy;
    // The same policy enforced without the hold: what guard's decisions cost alone.
    let unheld =
        guard::session::Session::start(policy.clone(), &guard::session::SessionOptions::default())?;
    let mut splices = guard::hold::splice::SpliceListener::start()?;
    let session = guard::session::Session::start(
        policy,
        &guard::session::SessionOptions {
            hold_network: Some(std::time::Duration::from_secs(60)),
            splice_port: Some(splices.port()),
            ..Default::default()
        },
    )?;
    let (mut plain, mut decided, mut held, mut again) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        plain.push(run_worker_in(options, port, None)?);
        decided.push(run_worker_in(options, port, Some(&unheld))?);
        held.push(run_worker_in(options, port, Some(&session))?);
        again.push(run_worker_in(options, port, None)?);
    }
    drop(unheld);
    let counters = session.enforcer().counters()?;
    let count = |name: &str| counters.iter().find(|(n, _)| *n == name).map_or(0, |c| c.1);
    if count("net_held") != 0 || count("net_held_dropped") != 0 {
        bail!("a call that is not prompted was held in the kernel");
    }
    let mut session = session;
    let mut held_json = held_connects(&mut session, &ports[..2 * HELD_ROUNDS])?;
    held_json.extend(spliced_connects(
        &mut session,
        &mut splices,
        &listeners[2 * HELD_ROUNDS..],
    )?);
    println!(
        "kernel hold ({} rounds; the worker in a guard scope ÷ without guard, first without the \
         hold, then holding prompted connects):",
        options.rounds
    );
    let mut json = rows("none", "guard", &plain, &decided, &again);
    json.extend(rows("kernel", "holding", &plain, &held, &again));
    json.extend(held_json);
    Ok(json)
}

/// What the worker measures, in the order of its figures.
const CALLS: [&str; 4] = [
    "fork+exec /bin/true",
    "getppid",
    "loopback TCP connect",
    "loopback UDP sendto",
];

/// One line per call of the medians of `plain`, `held` (shown as `label`) and `again` runs,
/// with the ratio held ÷ plain and the noise again ÷ plain; the same as JSON rows.
fn rows(
    hold: &str,
    label: &str,
    plain: &[[f64; 4]],
    held: &[[f64; 4]],
    again: &[[f64; 4]],
) -> Vec<String> {
    let mut json = Vec::new();
    for (i, name) in CALLS.iter().enumerate() {
        let p = median(plain.iter().map(|r| r[i]).collect());
        let h = median(held.iter().map(|r| r[i]).collect());
        let a = median(again.iter().map(|r| r[i]).collect());
        println!(
            "  {name:<22} plain {:>10}  {label} {:>10}  ×{:.2}  (noise ×{:.2})",
            format_ns(p),
            format_ns(h),
            h / p,
            a / p
        );
        json.push(format!(
            "{{\"call\":\"{name}\",\"hold\":\"{hold}\",\"plain_ns\":{p:.0},\"held_ns\":{h:.0},\"ratio\":{:.3},\"noise_ratio\":{:.3}}}",
            h / p,
            a / p
        ));
    }
    json
}

/// Held connects measured per round.
const HELD_ROUNDS: usize = 5;

/// A held connect with a 2 s timeout (ms until it gave up), and from an approval to a waiting
/// connect's completion (ms), `HELD_ROUNDS` each, over `ports` (two per round: an approved port
/// stays approved).
fn held_connects(session: &mut guard::session::Session, ports: &[u16]) -> Result<Vec<String>> {
    let mut timeouts = Vec::new();
    let mut latencies = Vec::new();
    for round in 0..HELD_ROUNDS {
        let out = held_worker(session, "2", ports[2 * round])?
            .wait_with_output()
            .context("the held worker")?;
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let ms = line
            .strip_prefix("timeout ")
            .and_then(|ms| ms.parse::<f64>().ok())
            .with_context(|| format!("a held 2 s connect printed {line:?}"))?;
        timeouts.push(ms);
        let port = ports[2 * round + 1];
        let waiting = held_worker(session, "0", port)?;
        std::thread::sleep(std::time::Duration::from_millis(1_200));
        let approved = Instant::now();
        session.hold_approval(guard::asks::Approval {
            ask: round as u64,
            mode: guard::asks::ApprovalMode::Session,
            by: "bench".into(),
            target: guard::asks::ApprovalTarget::Network {
                address: "127.0.0.9".parse()?,
                port,
                transport: guard::policy::Transport::Tcp,
                host: None,
            },
            scope: None,
            for_scope: session.scope().id(),
            until: None,
        })?;
        let out = waiting.wait_with_output().context("the waiting worker")?;
        latencies.push(approved.elapsed().as_secs_f64() * 1000.0);
        let line = String::from_utf8_lossy(&out.stdout);
        if !line.starts_with("ok") {
            bail!("an approved held connect printed {line:?}");
        }
    }
    let (timeout, latency) = (median(timeouts.clone()), median(latencies.clone()));
    println!(
        "  held connect, own 2 s timeout: returned after {timeout:.0} ms (median of {HELD_ROUNDS}; \
         {timeouts:.0?})\n  approval to connected: {latency:.0} ms (median; {latencies:.0?})"
    );
    Ok(vec![format!(
        "{{\"held_connect_timeout_2s_ms\":{timeout:.0},\"approval_to_connected_ms\":{latency:.0}}}"
    )])
}

/// The stand-ins the spliced connects go to (one per round: `198.18.0.1` and on), prompted by
/// the bench's policy.
const STAND_INS: &str = "198.18.0.0/24";

/// From an approval to a waiting blocking connect to a stand-in's completion (ms),
/// `HELD_ROUNDS` times: the connect is held on its way to guard's splice listener; approved and
/// its stand-in mapped to a listener of `real` (one per round), its next SYN reaches the splice
/// listener and the hold's turn (every 10 ms here) splices it to the real listener, which must
/// accept it.
fn spliced_connects(
    session: &mut guard::session::Session,
    splices: &mut guard::hold::splice::SpliceListener,
    real: &[TcpListener],
) -> Result<Vec<String>> {
    use guard_common::maps::held;
    let mut latencies = Vec::new();
    for (round, listener) in real.iter().enumerate().take(HELD_ROUNDS) {
        let port = listener.local_addr()?.port();
        let stand_in = std::net::Ipv4Addr::new(198, 18, 0, round as u8 + 1);
        let waiting = held_worker_to(session, "0", &stand_in.to_string(), port)?;
        std::thread::sleep(std::time::Duration::from_millis(1_200));
        let cookie = session
            .enforcer()
            .held_sockets()?
            .into_iter()
            .find(|(_, e)| e.state == held::SPLICED && e.port == port)
            .map(|(cookie, _)| cookie)
            .context("the connect to the stand-in is held on its way to the splice listener")?;
        let approved = Instant::now();
        session.hold_approval(guard::asks::Approval {
            ask: round as u64,
            mode: guard::asks::ApprovalMode::Session,
            by: "bench".into(),
            target: guard::asks::ApprovalTarget::Network {
                address: stand_in.into(),
                port,
                transport: guard::policy::Transport::Tcp,
                host: None,
            },
            scope: None,
            for_scope: session.scope().id(),
            until: None,
        })?;
        // As if the approved name had resolved to the real listener's address.
        let mut image = session.image().clone();
        image.stand_ins = vec![guard::policy::destination::StandIn {
            stand_in,
            real: std::net::Ipv4Addr::new(127, 0, 0, 9),
            name: format!("spliced{round}.example.test"),
        }];
        session.apply_image(image)?;
        let answer = guard::asks::AskState::Approved {
            mode: guard::asks::ApprovalMode::Session,
            by: "bench".into(),
        };
        let mut socket = guard::hold::sockets::HeldSocket::new(
            cookie,
            round as u64,
            0,
            guard_common::maps::TRANSPORT_TCP,
            String::new(),
        );
        let mut outcome = None;
        for _ in 0..1_000 {
            outcome = socket.step(session.enforcer_mut(), Some(&answer), Some(&mut *splices))?;
            if outcome.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let out = waiting.wait_with_output().context("the waiting worker")?;
        latencies.push(approved.elapsed().as_secs_f64() * 1000.0);
        let line = String::from_utf8_lossy(&out.stdout);
        if !line.starts_with("ok") || outcome != Some(guard::hold::sockets::HeldOutcome::Approved) {
            bail!("an approved spliced connect printed {line:?} ({outcome:?})");
        }
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while listener.accept().is_err() {
            if Instant::now() > deadline {
                bail!("the spliced connect never reached its real listener");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    let latency = median(latencies.clone());
    println!(
        "  approval to connected, spliced (a stand-in): {latency:.0} ms (median; {latencies:.0?})"
    );
    Ok(vec![format!(
        "{{\"spliced_approval_to_connected_ms\":{latency:.0}}}"
    )])
}

/// `--held-connect SECS 127.0.0.9 PORT` in `session`'s scope.
fn held_worker(
    session: &guard::session::Session,
    secs: &str,
    port: u16,
) -> Result<std::process::Child> {
    held_worker_to(session, secs, "127.0.0.9", port)
}

/// `--held-connect SECS ADDR PORT` in `session`'s scope.
fn held_worker_to(
    session: &guard::session::Session,
    secs: &str,
    addr: &str,
    port: u16,
) -> Result<std::process::Child> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["--held-connect", secs, addr, &port.to_string()])
        .stdout(Stdio::piped());
    session.spawn(&mut command)
}

/// A TCP connect with a timeout of `args[0]` seconds (0: blocking) to `args[1]:args[2]`; prints
/// `ok MS`, `timeout MS` or `error MS`.
fn held_connect(args: &[String]) -> Result<()> {
    let secs: u64 = args[0].parse()?;
    let target: std::net::SocketAddr = format!("{}:{}", args[1], args[2]).parse()?;
    let start = Instant::now();
    let result = if secs == 0 {
        TcpStream::connect(target)
    } else {
        TcpStream::connect_timeout(&target, std::time::Duration::from_secs(secs))
    };
    let ms = start.elapsed().as_millis();
    match result {
        Ok(_) => println!("ok {ms}"),
        Err(err) if err.kind() == std::io::ErrorKind::TimedOut => println!("timeout {ms}"),
        Err(_) => println!("error {ms}"),
    }
    Ok(())
}

/// One worker run in `session`'s scope (or outside any): as [`run_worker`].
fn run_worker_in(
    options: &Options,
    port: u16,
    session: Option<&guard::session::Session>,
) -> Result<[f64; 4]> {
    let mut command = worker_command(options, port)?;
    let mut child = match session {
        Some(session) => session.spawn(&mut command)?,
        None => command.spawn()?,
    };
    read_worker(&mut child)
}

/// This bench as the worker, its figures on a pipe.
fn worker_command(options: &Options, port: u16) -> Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args([
            "--worker",
            &options.execs.to_string(),
            &options.calls.to_string(),
        ])
        .arg(port.to_string())
        .stdout(Stdio::piped());
    Ok(command)
}

/// What a worker printed: ns per exec, per getppid, per connect, per datagram.
fn read_worker(child: &mut std::process::Child) -> Result<[f64; 4]> {
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("worker stdout")?).read_line(&mut line)?;
    if !child.wait()?.success() {
        bail!("the worker failed");
    }
    let values: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    Ok([values[0], values[1], values[2], values[3]])
}

/// One worker run: ns per exec, per getppid, per connect, per datagram.
fn run_worker(options: &Options, port: u16, held: bool) -> Result<[f64; 4]> {
    let mut command = worker_command(options, port)?;
    let mut hold = if held {
        let mut parser = PolicyParser::new();
        parser
            .parse("bench.rules", POLICY)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let policy = parser.build();
        let image = compile(&policy, &NoResolver, &CompileEnv::default());
        Some(Hold::start(Twins::of_image(&image, true, true, false)?)?)
    } else {
        None
    };
    if let Some(end) = hold.as_ref().and_then(Hold::child_end) {
        // SAFETY: the filter's install makes only raw syscalls.
        unsafe { command.pre_exec(move || end.install_from_pre_exec()) };
    }
    let mut child = command.spawn()?;
    if let Some(hold) = hold.as_mut() {
        hold.started();
    }
    let values = read_worker(&mut child)?;
    if let Some(hold) = &hold
        && !hold.take_held().is_empty()
    {
        bail!("a call that is not prompted was held");
    }
    Ok(values)
}

fn worker(args: &[String]) -> Result<()> {
    let execs: usize = args[0].parse()?;
    let calls: usize = args[1].parse()?;
    let port: u16 = args[2].parse()?;
    let start = Instant::now();
    for _ in 0..execs {
        let status = Command::new("/bin/true").status()?;
        if !status.success() {
            bail!("/bin/true failed");
        }
    }
    let exec = start.elapsed().as_nanos() as f64 / execs as f64;
    let start = Instant::now();
    for _ in 0..calls {
        // SAFETY: no preconditions.
        unsafe { libc::getppid() };
    }
    let getppid = start.elapsed().as_nanos() as f64 / calls as f64;
    // The median connect, not the mean: a SYN the listener's full backlog dropped waits a
    // second for its retry, which would swamp the mean of hundreds.
    let mut connects = Vec::with_capacity(calls / 10);
    for _ in 0..calls / 10 {
        let start = Instant::now();
        TcpStream::connect(("127.0.0.1", port))?;
        connects.push(start.elapsed().as_nanos() as f64);
    }
    let connect = median(connects);
    // Addressed datagrams: held only because the policy prompts a destination of any
    // transport (a TCP-only prompt holds none).
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let start = Instant::now();
    for _ in 0..calls / 10 {
        socket.send_to(b"x", ("127.0.0.1", port))?;
    }
    let datagram = start.elapsed().as_nanos() as f64 / (calls / 10) as f64;
    println!("{exec} {getppid} {connect} {datagram}");
    Ok(())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn format_ns(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.1} µs", ns / 1000.0)
    } else {
        format!("{ns:.0} ns")
    }
}
