//! What the hooks that close a scope's ways out cost the calls they see: a worker makes unix
//! stream connects (`cgroup/connect_unix`), TCP connects to a stand-in address that guard's
//! resolver answered for a name since approved (decided, then sent on to 127.0.0.1 by
//! `cgroup/connect4`; plain: a connect to 127.0.0.1 itself), opens of `/dev/null`
//! (`cgroup/dev`), `ioctl`s and `getppid`s (the seccomp filter every `guard run` command gets,
//! which looks at every call), once plain and once in a guard scope under that filter. Each round runs plain, guarded and
//! plain again: the figures are medians, the ratio guarded ÷ plain and the noise plain ÷ plain,
//! all of the same run. Writes target/bench/escapes.json.
//!
//! `cargo bench -p guard-tests --bench escapes [-- --rounds N --calls N]`.

use std::io::{BufRead, BufReader};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use guard::confine::syscalls;
use guard::kernel::scope::join_from_pre_exec;
use guard::policy::PolicyParser;
use guard::session::{Session, SessionOptions};

/// A policy that names a unix socket the worker never uses: every connect is looked up, and
/// let through (its own socket is one nothing names, which the default would refuse).
const POLICY: &str = "unix_rule(socket=\"/run/guard-bench-never.sock\", decision=\"forbidden\")\n\
                      enforcement(unmatched_unix=\"allow\")\n";

/// The stand-in the worker connects to in the scope, and where it goes.
const STAND_IN: std::net::Ipv4Addr = std::net::Ipv4Addr::new(198, 18, 0, 1);
const REAL: std::net::Ipv4Addr = std::net::Ipv4Addr::LOCALHOST;

const CALLS: [&str; 5] = [
    "unix stream connect",
    "TCP connect, stand-in",
    "open+close /dev/null",
    "ioctl(FIONREAD)",
    "getppid",
];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        return worker(&args[1..]);
    }
    let (mut rounds, mut calls) = (7usize, 4000usize);
    let mut rest = args.iter().filter(|a| *a != "--bench");
    while let Some(flag) = rest.next() {
        let value = |v: Option<&String>| -> Result<usize> {
            Ok(v.context("a number after the flag")?.parse()?)
        };
        match flag.as_str() {
            "--rounds" => rounds = value(rest.next())?,
            "--calls" => calls = value(rest.next())?,
            _ => continue,
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("escapes: skipped: loading guard's programs needs root");
        if std::env::var("CI").as_deref() == Ok("true") {
            bail!("CI=true: the escapes benchmark must run");
        }
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("bench.sock");
    let listener = UnixListener::bind(&socket)?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            drop(stream);
        }
    });
    let mut parser = PolicyParser::new();
    parser
        .parse("bench.rules", POLICY)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // guard's resolver on (stand-ins are sent on only where it is), asking nobody.
    let options = SessionOptions {
        resolver: Some(guard::resolve::Refusal::Refused),
        nameserver: Some((std::net::Ipv4Addr::LOCALHOST, 9).into()),
        ..SessionOptions::default()
    };
    let mut session = Session::start(parser.build(), &options)?;
    if !session.enforcer().decides_unix_sockets() {
        bail!("this kernel has no unix socket hooks (Linux 6.7+)");
    }
    // As if a name had been answered with STAND_IN and approved: the policy allows what no rule
    // names, so the connect is decided, let through and sent on.
    let mut image = session.image().clone();
    image.stand_ins = vec![guard::policy::destination::StandIn {
        stand_in: STAND_IN,
        real: REAL,
        name: "bench.example.test".to_string(),
    }];
    session.apply_image(image)?;
    let (mut plain, mut guarded, mut again) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        plain.push(run_worker(calls, &socket, None)?);
        guarded.push(run_worker(calls, &socket, Some(&session))?);
        again.push(run_worker(calls, &socket, None)?);
    }
    let counters: std::collections::HashMap<_, _> =
        session.enforcer().counters()?.into_iter().collect();
    // Every guarded connect was decided in the kernel (and let through), and every connect to
    // the stand-in reached the listener (the worker fails otherwise).
    let decided = counters.get("unix_allow").copied().unwrap_or(0);
    if decided < (rounds * calls / 10) as u64 {
        bail!("the kernel decided {decided} unix connects: the worker was not in the scope");
    }
    let unmapped = counters.get("stand_in_unmapped").copied().unwrap_or(0);
    if unmapped != 0 {
        bail!("{unmapped} connects to the stand-in had nowhere to go");
    }
    println!(
        "escapes: {rounds} rounds of {calls} calls ({} connects) on the {} backend (medians; \
         ratio guarded ÷ plain, and the noise plain ÷ plain, same run)",
        calls / 10,
        session.backend().as_str()
    );
    let mut json = Vec::new();
    for (i, name) in CALLS.iter().enumerate() {
        let p = median(plain.iter().map(|r: &[f64; 5]| r[i]).collect());
        let g = median(guarded.iter().map(|r: &[f64; 5]| r[i]).collect());
        let a = median(again.iter().map(|r: &[f64; 5]| r[i]).collect());
        println!(
            "  {name:<22} plain {:>9.0} ns  guarded {:>9.0} ns  ×{:.2}  (noise ×{:.2})",
            p,
            g,
            g / p,
            a / p
        );
        json.push(format!(
            "{{\"call\":\"{name}\",\"plain_ns\":{p:.0},\"guarded_ns\":{g:.0},\"ratio\":{:.3},\"noise_ratio\":{:.3}}}",
            g / p,
            a / p
        ));
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("escapes.json"), format!("[{}]\n", json.join(",")))?;
    Ok(())
}

/// One worker run (in `session`'s scope under the seccomp filter, connecting to the stand-in,
/// or plain, to the real address): ns per unix connect, per TCP connect, per open+close, per
/// ioctl, per getppid.
fn run_worker(
    calls: usize,
    socket: &std::path::Path,
    session: Option<&Session>,
) -> Result<[f64; 5]> {
    let tcp_to = if session.is_some() { STAND_IN } else { REAL };
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("--worker")
        .arg(calls.to_string())
        .arg(socket)
        .arg(tcp_to.to_string())
        .stdout(Stdio::piped());
    if let Some(session) = session {
        let procs = session.scope().procs_path().clone();
        let program = syscalls::program();
        // SAFETY: the closure makes only raw syscalls on data made before the fork.
        unsafe {
            command.pre_exec(move || {
                join_from_pre_exec(&procs)?;
                syscalls::install_from_pre_exec(&program)
            })
        };
    }
    let mut child = command.spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("worker stdout")?).read_line(&mut line)?;
    if !child.wait()?.success() {
        bail!("the worker failed");
    }
    let values: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    Ok([values[0], values[1], values[2], values[3], values[4]])
}

fn worker(args: &[String]) -> Result<()> {
    let calls: usize = args[0].parse()?;
    let socket = std::path::Path::new(&args[1]);
    // Median connect: a full backlog makes a rare one wait.
    let mut connects = Vec::with_capacity(calls / 10);
    for _ in 0..calls / 10 {
        let start = Instant::now();
        UnixStream::connect(socket)?;
        connects.push(start.elapsed().as_nanos() as f64);
    }
    let connect = median(connects);
    // TCP in a network namespace of the worker's own, with only loopback: the listener is there,
    // and a connect to the stand-in that were not sent on could not leave the host.
    own_loopback()?;
    let listener = std::net::TcpListener::bind((REAL, 0))?;
    let tcp_to = std::net::SocketAddr::new(args[2].parse()?, listener.local_addr()?.port());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            drop(stream);
        }
    });
    let mut tcp_connects = Vec::with_capacity(calls / 10);
    for _ in 0..calls / 10 {
        let start = Instant::now();
        std::net::TcpStream::connect(tcp_to)?;
        tcp_connects.push(start.elapsed().as_nanos() as f64);
    }
    let tcp_connect = median(tcp_connects);
    let start = Instant::now();
    for _ in 0..calls {
        drop(std::fs::File::open("/dev/null")?);
    }
    let open = start.elapsed().as_nanos() as f64 / calls as f64;
    let (reader, _writer) = std::io::pipe()?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&reader);
    let mut pending: libc::c_int = 0;
    let start = Instant::now();
    for _ in 0..calls {
        // SAFETY: FIONREAD writes one int.
        unsafe { libc::ioctl(fd, libc::FIONREAD, &mut pending) };
    }
    let ioctl = start.elapsed().as_nanos() as f64 / calls as f64;
    let start = Instant::now();
    for _ in 0..calls {
        // SAFETY: no preconditions.
        unsafe { libc::getppid() };
    }
    let getppid = start.elapsed().as_nanos() as f64 / calls as f64;
    println!("{connect} {tcp_connect} {open} {ioctl} {getppid}");
    Ok(())
}

/// Moves this process into a new network namespace and brings its loopback up.
fn own_loopback() -> Result<()> {
    // SAFETY: unshare, socket, ioctl and close on values made here.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            return Err(std::io::Error::last_os_error()).context("unshare(CLONE_NEWNET)");
        }
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("a socket for ioctl");
        }
        let mut request: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        let up = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut request) == 0 && {
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS, &request) == 0
        };
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        if !up {
            return Err(error).context("bringing loopback up");
        }
    }
    Ok(())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}
