//! What the hooks that close a scope's ways out cost the calls they see: a worker makes unix
//! stream connects (`cgroup/connect_unix`), opens of `/dev/null` (`cgroup/dev`), `ioctl`s and
//! `getppid`s (the seccomp filter every `guard run` command gets, which looks at every call),
//! once plain and once in a guard scope under that filter. Each round runs plain, guarded and
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

/// A policy that names a unix socket the worker never uses: every connect is looked up.
const POLICY: &str = "unix_rule(socket=\"/run/guard-bench-never.sock\", decision=\"forbidden\")\n";

const CALLS: [&str; 4] = [
    "unix stream connect",
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
    let session = Session::start(parser.build(), &SessionOptions::default())?;
    if !session.enforcer().decides_unix_sockets() {
        bail!("this kernel has no unix socket hooks (Linux 6.7+)");
    }
    let (mut plain, mut guarded, mut again) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        plain.push(run_worker(calls, &socket, None)?);
        guarded.push(run_worker(calls, &socket, Some(&session))?);
        again.push(run_worker(calls, &socket, None)?);
    }
    let counters: std::collections::HashMap<_, _> =
        session.enforcer().counters()?.into_iter().collect();
    // Every guarded connect was decided in the kernel (and let through).
    let decided = counters.get("unix_allow").copied().unwrap_or(0);
    if decided < (rounds * calls / 10) as u64 {
        bail!("the kernel decided {decided} unix connects: the worker was not in the scope");
    }
    println!(
        "escapes: {rounds} rounds of {calls} calls ({} connects) on the {} backend (medians; \
         ratio guarded ÷ plain, and the noise plain ÷ plain, same run)",
        calls / 10,
        session.backend().as_str()
    );
    let mut json = Vec::new();
    for (i, name) in CALLS.iter().enumerate() {
        let p = median(plain.iter().map(|r: &[f64; 4]| r[i]).collect());
        let g = median(guarded.iter().map(|r: &[f64; 4]| r[i]).collect());
        let a = median(again.iter().map(|r: &[f64; 4]| r[i]).collect());
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

/// One worker run (in `session`'s scope under the seccomp filter, or plain): ns per unix
/// connect, per open+close, per ioctl, per getppid.
fn run_worker(
    calls: usize,
    socket: &std::path::Path,
    session: Option<&Session>,
) -> Result<[f64; 4]> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("--worker")
        .arg(calls.to_string())
        .arg(socket)
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
    Ok([values[0], values[1], values[2], values[3]])
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
    println!("{connect} {open} {ioctl} {getppid}");
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
