//! `net-probe tcp|udp-connect|udp-sendto ADDR PORT`: makes one socket call and says how it went,
//! `ok` (exit 0) or `errno N` (exit 1). The kernel network tests spawn it inside a session's
//! scope, so the call is one guard decides (the test's own threads are outside the scope).
//!
//! - `tcp`: a TCP connect (5 s at most);
//! - `udp-connect`: `connect` on a UDP socket;
//! - `udp-sendto`: one datagram with `sendto` on an unconnected UDP socket;
//! - `udp-flood ADDR PORT COUNT`: COUNT datagrams with `sendto` on one socket, printing
//!   `refused N` (how many got EPERM): a burst of refusals faster than anyone reads events.
//! - `udp-loop ALLOWED DENIED PORT STOPFILE MAX_SECS`: UDP connects in a loop, one to ALLOWED
//!   (must succeed) and one to DENIED (must get EPERM) per round, until STOPFILE exists or
//!   MAX_SECS pass; prints `rounds N wrong M` (and the first wrong answer): a policy change
//!   while it runs must not make a single decision wrong.
//! - `paced PREFIX RATE SECS LOGFILE`: RATE refused UDP sends a second for SECS, attempt `i`
//!   going to `PREFIX.(i / 256 % 256).(i % 256)` port `1 + i / 65536` (PREFIX is two octets,
//!   e.g. 127.88), so every attempt is a destination of its own that its audit record names.
//!   Every 100 attempts it appends `i UNIX_NANOS` to LOGFILE (i attempts made by then); at the
//!   end it prints `sent N refused M`.
//! - `connect-loop ADDR PORT SECS [RATE]`: UDP connect() to ADDR:PORT on one socket for SECS, as
//!   fast as it can or at RATE a second; prints `connects N refused M secs S` (the audit
//!   benchmark's load).
//!
//! - `socket ping|raw|sctp`: makes one socket of that kind (`ping` first enters a network
//!   namespace of its own that lets every group ping, so the kernel's `ping_group_range` is not
//!   what refuses it), prints `ok` or `errno N`.
//! - `socket udplite|mptcp ADDR PORT`: a UDP-Lite socket connected to ADDR:PORT that sends
//!   `guard` once, or an MPTCP connect to ADDR:PORT (IPv4).
//!
//! - `from SRC tcp|udp-connect|udp-sendto ADDR PORT`: the same calls from a socket bound to
//!   SRC first (port 0): a connect to the unspecified address (0.0.0.0, `::`) goes to the
//!   socket's own address.
//!
//! - `thread CALL ADDR PORT`: the same call from a thread other than the main one (Go, Java and
//!   Node make their connects on worker threads).
//! - `alarm SECS CALL ADDR PORT`: the same call with a SIGALRM in SECS whose handler does not
//!   restart calls: a program's own timeout, which ends a call that is still waiting (EINTR).
//!
//! - `timed SECS ADDR PORT`: a TCP connect with a timeout of SECS (a non-blocking connect and a
//!   poll, as `curl --connect-timeout` and python's `settimeout` make it), or a blocking connect
//!   with SECS 0; prints `ok MS`, `timeout MS` or `errno N MS` (how long the connect took).
//!
//! - `name SECS NAME PORT [v4|v6] [send-close]`: the same timed connect to NAME's first IPv4
//!   address (looked up with the C library, so in a scope guard's resolver answers it), from an
//!   IPv6 socket to its IPv4-mapped address with `v6`; connected, it sends an HTTP request and
//!   reads the reply to its end, and prints `ok MS peer ADDR:PORT reply BODY` (`getpeername`'s
//!   answer, the reply's body), else `timeout MS` or `errno N MS`. With `send-close` it closes
//!   the socket as soon as the request is sent and prints `ok MS sent`.
//!
//! Anything else it cannot do (bad arguments, a socket it cannot make) exits 2 with a message.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [call, allowed, denied, port, stop, secs] = args.as_slice()
        && call == "udp-loop"
    {
        return udp_loop(allowed, denied, port, Path::new(stop), secs);
    }
    if let [call, addr, port, secs, rest @ ..] = args.as_slice()
        && call == "connect-loop"
        && rest.len() <= 1
    {
        return connect_loop(addr, port, secs, rest.first().map(String::as_str));
    }
    if let [call, prefix, rate, secs, log] = args.as_slice()
        && call == "paced"
    {
        return paced(prefix, rate, secs, Path::new(log));
    }
    if let [call, addr, port, count] = args.as_slice()
        && call == "udp-flood"
    {
        return flood(addr, port, count);
    }
    if let [call, what, rest @ ..] = args.as_slice()
        && call == "socket"
    {
        return report(socket_kind(what, rest));
    }
    if let [thread, call, addr, port] = args.as_slice()
        && thread == "thread"
    {
        let target = match target(addr, port) {
            Ok(target) => target,
            Err(code) => return code,
        };
        let call = call.clone();
        let worker = std::thread::spawn(move || one_call(&call, target, None));
        return match worker.join() {
            Ok(Ok(result)) => report(result),
            Ok(Err(code)) => code,
            Err(_) => ExitCode::from(2),
        };
    }
    if let [alarm, secs, call, addr, port] = args.as_slice()
        && alarm == "alarm"
    {
        let (target, Ok(secs)) = (target(addr, port), secs.parse::<u32>()) else {
            eprintln!("net-probe: {secs:?} is not a number of seconds");
            return ExitCode::from(2);
        };
        let target = match target {
            Ok(target) => target,
            Err(code) => return code,
        };
        interrupt_after(secs);
        return match one_call(call, target, None) {
            Ok(result) => report(result),
            Err(code) => code,
        };
    }
    if let [timed, secs, addr, port] = args.as_slice()
        && timed == "timed"
    {
        return timed_connect(secs, addr, port);
    }
    if let [name, secs, host, port, rest @ ..] = args.as_slice()
        && name == "name"
        && rest
            .iter()
            .all(|word| ["v4", "v6", "send-close"].contains(&word.as_str()))
    {
        let has = |word: &str| rest.iter().any(|w| w == word);
        return named_connect(secs, host, port, has("v6"), has("send-close"));
    }
    if let [from, source, call, addr, port] = args.as_slice()
        && from == "from"
    {
        return from_bound(source, call, addr, port);
    }
    let [call, addr, port] = args.as_slice() else {
        eprintln!("usage: net-probe tcp|udp-connect|udp-sendto ADDR PORT");
        return ExitCode::from(2);
    };
    let (Ok(ip), Ok(port)) = (addr.parse::<IpAddr>(), port.parse::<u16>()) else {
        eprintln!("net-probe: {addr:?} is not an IP address or {port:?} not a port");
        return ExitCode::from(2);
    };
    let target = SocketAddr::new(ip, port);
    match one_call(call, target, None) {
        Ok(result) => report(result),
        Err(code) => code,
    }
}

/// `timed SECS ADDR PORT`.
fn timed_connect(secs: &str, addr: &str, port: &str) -> ExitCode {
    let Ok(secs) = secs.parse::<u64>() else {
        eprintln!("net-probe: {secs:?} is not a number of seconds");
        return ExitCode::from(2);
    };
    let target = match target(addr, port) {
        Ok(target) => target,
        Err(code) => return code,
    };
    let start = Instant::now();
    let result = if secs == 0 {
        TcpStream::connect(target)
    } else {
        TcpStream::connect_timeout(&target, Duration::from_secs(secs))
    };
    let ms = start.elapsed().as_millis();
    match result {
        Ok(_) => {
            println!("ok {ms}");
            ExitCode::SUCCESS
        }
        Err(err) if err.kind() == io::ErrorKind::TimedOut && err.raw_os_error().is_none() => {
            println!("timeout {ms}");
            ExitCode::from(1)
        }
        Err(err) => {
            println!("errno {} {ms}", err.raw_os_error().unwrap_or(0));
            ExitCode::from(1)
        }
    }
}

/// `name SECS NAME PORT [v4|v6] [send-close]`.
fn named_connect(secs: &str, host: &str, port: &str, v6: bool, send_close: bool) -> ExitCode {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let (Ok(secs), Ok(port)) = (secs.parse::<u64>(), port.parse::<u16>()) else {
        eprintln!("net-probe: {secs:?} is not a number of seconds or {port:?} not a port");
        return ExitCode::from(2);
    };
    let found = match (host, port).to_socket_addrs() {
        Ok(found) => found.into_iter().find(SocketAddr::is_ipv4),
        Err(err) => {
            println!("lookup failed: {err}");
            return ExitCode::from(1);
        }
    };
    let Some(SocketAddr::V4(found)) = found else {
        println!("lookup failed: no IPv4 address");
        return ExitCode::from(1);
    };
    let target = if v6 {
        SocketAddr::new(IpAddr::V6(found.ip().to_ipv6_mapped()), port)
    } else {
        SocketAddr::V4(found)
    };
    let start = Instant::now();
    let result = TcpStream::connect_timeout(&target, Duration::from_secs(secs.max(1)));
    let ms = start.elapsed().as_millis();
    let mut stream = match result {
        Ok(stream) => stream,
        Err(err) if err.kind() == io::ErrorKind::TimedOut && err.raw_os_error().is_none() => {
            println!("timeout {ms}");
            return ExitCode::from(1);
        }
        Err(err) => {
            println!("errno {} {ms}", err.raw_os_error().unwrap_or(0));
            return ExitCode::from(1);
        }
    };
    let peer = stream
        .peer_addr()
        .map_or_else(|e| format!("error:{e}"), |p| p.to_string());
    let request = format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n");
    if send_close {
        return match stream.write_all(request.as_bytes()) {
            Ok(()) => {
                println!("ok {ms} sent");
                ExitCode::SUCCESS
            }
            Err(err) => {
                println!("ok {ms} send-error {err}");
                ExitCode::from(1)
            }
        };
    }
    let mut reply = Vec::new();
    let talked = stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| stream.write_all(request.as_bytes()))
        .and_then(|()| stream.read_to_end(&mut reply));
    let reply = String::from_utf8_lossy(&reply);
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    match talked {
        Ok(_) => {
            println!("ok {ms} peer {peer} reply {body}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            println!("ok {ms} peer {peer} reply-error {err}");
            ExitCode::from(1)
        }
    }
}

fn target(addr: &str, port: &str) -> Result<SocketAddr, ExitCode> {
    match (addr.parse::<IpAddr>(), port.parse::<u16>()) {
        (Ok(ip), Ok(port)) => Ok(SocketAddr::new(ip, port)),
        _ => {
            eprintln!("net-probe: {addr:?} is not an IP address or {port:?} not a port");
            Err(ExitCode::from(2))
        }
    }
}

/// A SIGALRM in `secs` seconds whose handler does nothing and does not restart the call it
/// interrupts (no `SA_RESTART`): the call fails with EINTR.
fn interrupt_after(secs: u32) {
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: a zeroed sigaction with a handler that touches nothing; alarm takes a number.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = nothing as extern "C" fn(libc::c_int) as usize;
        libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut());
        libc::alarm(secs);
    }
}

/// One call from a socket bound to `source` (port 0).
fn from_bound(source: &str, call: &str, addr: &str, port: &str) -> ExitCode {
    let (Ok(source), Ok(ip), Ok(port)) = (
        source.parse::<IpAddr>(),
        addr.parse::<IpAddr>(),
        port.parse::<u16>(),
    ) else {
        eprintln!("usage: net-probe from SRC tcp|udp-connect|udp-sendto ADDR PORT");
        return ExitCode::from(2);
    };
    match one_call(call, SocketAddr::new(ip, port), Some(source)) {
        Ok(result) => report(result),
        Err(code) => code,
    }
}

/// One `call` to `target`, from a socket bound to `source` (port 0) when given. `Err`: the call
/// could not be set up, which is not the call under test (said on stderr, exit 2).
fn one_call(
    call: &str,
    target: SocketAddr,
    source: Option<IpAddr>,
) -> Result<io::Result<()>, ExitCode> {
    Ok(match call {
        "tcp" => match source {
            None => TcpStream::connect_timeout(&target, Duration::from_secs(5)).map(drop),
            Some(source) => bound_tcp_connect(SocketAddr::new(source, 0), target),
        },
        "udp-connect" | "udp-sendto" => {
            let socket = match source {
                None => udp_socket(target.ip()),
                Some(source) => UdpSocket::bind(SocketAddr::new(source, 0)),
            }
            .map_err(|err| {
                eprintln!("net-probe: cannot make a UDP socket: {err}");
                ExitCode::from(2)
            })?;
            if call == "udp-connect" {
                socket.connect(target)
            } else {
                socket.send_to(b"guard", target).map(drop)
            }
        }
        other => {
            eprintln!("net-probe: unknown call {other:?} (tcp, udp-connect, udp-sendto)");
            return Err(ExitCode::from(2));
        }
    })
}

/// A TCP connect from a socket bound to `bound` first (std has no bind-then-connect).
fn bound_tcp_connect(bound: SocketAddr, target: SocketAddr) -> io::Result<()> {
    fn raw(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
        // SAFETY: all-zero is a valid sockaddr_storage; the family's struct fits in it.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = match addr {
            SocketAddr::V4(v4) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: v4.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(v4.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
                std::mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(v6) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: v6.port().to_be(),
                    sin6_flowinfo: 0,
                    sin6_addr: libc::in6_addr {
                        s6_addr: v6.ip().octets(),
                    },
                    sin6_scope_id: 0,
                };
                unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        (storage, len as libc::socklen_t)
    }
    let family = if bound.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket calls on a descriptor this function owns and closes.
    unsafe {
        let fd = check(libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let (addr, len) = raw(bound);
        let result = check(libc::bind(fd, (&raw const addr).cast(), len)).and_then(|_| {
            let (addr, len) = raw(target);
            check(libc::connect(fd, (&raw const addr).cast(), len))
        });
        libc::close(fd);
        result.map(drop)
    }
}

fn flood(addr: &str, port: &str, count: &str) -> ExitCode {
    let (Ok(ip), Ok(port), Ok(count)) = (
        addr.parse::<IpAddr>(),
        port.parse::<u16>(),
        count.parse::<u32>(),
    ) else {
        eprintln!("usage: net-probe udp-flood ADDR PORT COUNT");
        return ExitCode::from(2);
    };
    let socket = match udp_socket(ip) {
        Ok(socket) => socket,
        Err(err) => {
            eprintln!("net-probe: cannot make a UDP socket: {err}");
            return ExitCode::from(2);
        }
    };
    let target = SocketAddr::new(ip, port);
    let refused = (0..count)
        .filter(|_| {
            socket
                .send_to(b"guard", target)
                .is_err_and(|err| err.raw_os_error() == Some(1))
        })
        .count();
    println!("refused {refused}");
    ExitCode::SUCCESS
}

fn connect_loop(addr: &str, port: &str, secs: &str, rate: Option<&str>) -> ExitCode {
    let (Ok(ip), Ok(port), Ok(secs), Ok(rate)) = (
        addr.parse::<IpAddr>(),
        port.parse::<u16>(),
        secs.parse::<f64>(),
        rate.map(str::parse::<f64>).transpose(),
    ) else {
        eprintln!("usage: net-probe connect-loop ADDR PORT SECS [RATE]");
        return ExitCode::from(2);
    };
    let Ok(socket) = udp_socket(ip) else {
        eprintln!("net-probe: cannot make a UDP socket");
        return ExitCode::from(2);
    };
    let target = SocketAddr::new(ip, port);
    let start = Instant::now();
    let limit = Duration::from_secs_f64(secs);
    let (mut connects, mut refused) = (0u64, 0u64);
    // The clock is read once per 1024 calls: the loop measures connect, not Instant::now.
    while start.elapsed() < limit {
        // Paced: the next 1024 calls are due when the rate says so (a busy wait would take the
        // CPU the daemon needs).
        if let Some(rate) = rate {
            let due = Duration::from_secs_f64(connects as f64 / rate);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        for _ in 0..1024 {
            if socket
                .connect(target)
                .is_err_and(|e| e.raw_os_error() == Some(1))
            {
                refused += 1;
            }
            connects += 1;
        }
    }
    println!(
        "connects {connects} refused {refused} secs {:.3}",
        start.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

/// Attempt `i`'s destination under `prefix` (`a.b`).
fn paced_target(prefix: [u8; 2], i: u64) -> SocketAddr {
    let ip = Ipv4Addr::new(prefix[0], prefix[1], (i / 256 % 256) as u8, (i % 256) as u8);
    SocketAddr::new(IpAddr::V4(ip), 1 + (i / 65536) as u16)
}

fn paced(prefix: &str, rate: &str, secs: &str, log: &Path) -> ExitCode {
    use std::io::Write;
    let octets: Vec<Option<u8>> = prefix.split('.').map(|o| o.parse().ok()).collect();
    let (Ok(rate), Ok(secs), [Some(a), Some(b)]) =
        (rate.parse::<u64>(), secs.parse::<u64>(), octets.as_slice())
    else {
        eprintln!("usage: net-probe paced A.B RATE SECS LOGFILE");
        return ExitCode::from(2);
    };
    let Ok(socket) = udp_socket(IpAddr::V4(Ipv4Addr::LOCALHOST)) else {
        eprintln!("net-probe: cannot make a UDP socket");
        return ExitCode::from(2);
    };
    let Ok(mut out) = std::fs::File::create(log) else {
        eprintln!("net-probe: cannot create {}", log.display());
        return ExitCode::from(2);
    };
    let start = Instant::now();
    let total = rate * secs;
    let (mut sent, mut refused) = (0u64, 0u64);
    while sent < total {
        // Paced: attempt i is due at i / rate seconds.
        let due = start + Duration::from_secs_f64(sent as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let result = socket.send_to(b"guard", paced_target([*a, *b], sent));
        if result.is_err_and(|e| e.raw_os_error() == Some(1)) {
            refused += 1;
        }
        sent += 1;
        if sent % 100 == 0 {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let _ = writeln!(out, "{sent} {}", now.as_nanos());
        }
    }
    println!("sent {sent} refused {refused}");
    ExitCode::SUCCESS
}

fn udp_loop(allowed: &str, denied: &str, port: &str, stop: &Path, secs: &str) -> ExitCode {
    let (Ok(allowed), Ok(denied), Ok(port), Ok(secs)) = (
        allowed.parse::<IpAddr>(),
        denied.parse::<IpAddr>(),
        port.parse::<u16>(),
        secs.parse::<u64>(),
    ) else {
        eprintln!("usage: net-probe udp-loop ALLOWED DENIED PORT STOPFILE MAX_SECS");
        return ExitCode::from(2);
    };
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (mut rounds, mut wrong) = (0u64, 0u64);
    let mut first_wrong = None;
    while !stop.exists() && Instant::now() < deadline {
        for (target, want_refused) in [(allowed, false), (denied, true)] {
            let Ok(socket) = udp_socket(target) else {
                eprintln!("net-probe: cannot make a UDP socket");
                return ExitCode::from(2);
            };
            let refused = socket
                .connect(SocketAddr::new(target, port))
                .is_err_and(|err| err.raw_os_error() == Some(1));
            if refused != want_refused {
                wrong += 1;
                first_wrong.get_or_insert(format!("round {rounds}: {target} refused={refused}"));
            }
        }
        rounds += 1;
    }
    println!("rounds {rounds} wrong {wrong}");
    if let Some(first) = first_wrong {
        println!("first wrong: {first}");
    }
    ExitCode::SUCCESS
}

/// An unconnected UDP socket of `ip`'s family, bound to an ephemeral port (an IPv6 one also
/// reaches IPv4-mapped addresses).
fn udp_socket(ip: IpAddr) -> io::Result<UdpSocket> {
    let any = match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    UdpSocket::bind(SocketAddr::new(any, 0))
}

fn report(result: io::Result<()>) -> ExitCode {
    match result {
        Ok(()) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(err) => match err.raw_os_error() {
            Some(errno) => {
                println!("errno {errno}");
                ExitCode::from(1)
            }
            None => {
                eprintln!("net-probe: {err}");
                ExitCode::from(2)
            }
        },
    }
}

/// `-1` from a libc call as the errno.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn socket_kind(what: &str, rest: &[String]) -> io::Result<()> {
    let (ty, protocol) = match what {
        "ping" => {
            // A namespace of its own: its ping_group_range is ours to set, the host's is not
            // touched. Setup failures are not the call under test: exit 2.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0
                || std::fs::write("/proc/sys/net/ipv4/ping_group_range", "0 2147483647").is_err()
            {
                eprintln!("net-probe: cannot enter a network namespace that allows ping sockets");
                std::process::exit(2);
            }
            (libc::SOCK_DGRAM, libc::IPPROTO_ICMP)
        }
        "raw" => (libc::SOCK_RAW, libc::IPPROTO_ICMP),
        "sctp" => (libc::SOCK_STREAM, libc::IPPROTO_SCTP),
        "udplite" => (libc::SOCK_DGRAM, libc::IPPROTO_UDPLITE),
        "mptcp" => (libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
        other => {
            eprintln!("net-probe: unknown socket kind {other:?} (ping, raw, sctp, udplite, mptcp)");
            std::process::exit(2);
        }
    };
    // SAFETY: plain integer arguments.
    let fd = check(unsafe { libc::socket(libc::AF_INET, ty | libc::SOCK_CLOEXEC, protocol) })?;
    let result = match (what, rest) {
        ("udplite" | "mptcp", [addr, port]) => {
            let (Ok(ip), Ok(port)) = (addr.parse::<Ipv4Addr>(), port.parse::<u16>()) else {
                eprintln!("net-probe: {addr:?} is not an IPv4 address or {port:?} not a port");
                std::process::exit(2);
            };
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(ip).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a valid sockaddr_in and its length; a valid buffer.
            check(unsafe {
                libc::connect(
                    fd,
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            })
            .and_then(|_| {
                if what == "udplite" {
                    check(unsafe { libc::send(fd, b"guard".as_ptr().cast(), 5, 0) as libc::c_int })
                        .map(drop)
                } else {
                    Ok(())
                }
            })
        }
        ("udplite" | "mptcp", _) => {
            eprintln!("usage: net-probe socket {what} ADDR PORT");
            std::process::exit(2);
        }
        _ => Ok(()),
    };
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    result
}
