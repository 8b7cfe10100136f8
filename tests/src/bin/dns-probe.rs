//! `dns-probe SERVER NAME [udp|udp-connected|tcp|raw|getaddrinfo] [ROUNDS] [CONNECT_PORT]`:
//! asks SERVER (IP:PORT) for NAME's A records ROUNDS times (default 1), the way stub resolvers
//! do: over an unconnected UDP socket that takes only a reply from SERVER's own address
//! (hickory, dig), a connected one (glibc), or TCP. `raw`: NAME is a whole packet in hex, sent
//! as it is over UDP (a query an attacker writes by hand). `getaddrinfo`: the C library looks
//! NAME up its own way (`/etc/resolv.conf`; SERVER is not used). After each answer it connects
//! over TCP to every address at CONNECT_PORT, if given. A `{}` in NAME is replaced with the
//! round (0, 1, ...): a name of its own each round. It prints one JSON line:
//!
//! `{"rounds":R,"answers":A,"rcode":"NoError","addresses":[...],"connected":C,"refused":F,
//!   "other_errors":E,"wrong_source":W,"id":I,"question":"Q","round_ns":N}`
//!
//! with `rcode`, `addresses`, `id` and `question` (the first question's name as the reply
//! spells it) of the last answer, `round_ns` the median time of a round (the lookup and its
//! connects, for the benchmarks), `refused` the connects that got EPERM and
//! `wrong_source` the replies that came from another address than SERVER (ignored, as a stub
//! resolver ignores them). Exits 0 when every round got an answer, 1 otherwise, 2 on bad
//! arguments.
//!
//! With `DNS_PROBE_RETRY_AFTER=FILE` set, after the last round it waits (at most 60 s) for FILE
//! to exist and connects again to the last answer's addresses without asking again (a program
//! that keeps its answer), adding `"retried":{"connected":C,"refused":F,"reached":[...]}`, where
//! `reached` lists the peers the connects reached. The resolver tests spawn it inside a scope, so its DNS is what guard redirects.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use hickory_server::proto::op::{Message, Query};
use hickory_server::proto::rr::{Name, RData, RecordType};

const WAIT: Duration = Duration::from_secs(3);
const EPERM: i32 = 1;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(server), Some(name)) = (args.first(), args.get(1)) else {
        eprintln!("usage: dns-probe SERVER NAME [udp|udp-connected|tcp] [ROUNDS] [CONNECT_PORT]");
        return ExitCode::from(2);
    };
    let Ok(server) = server.parse::<SocketAddr>() else {
        eprintln!("dns-probe: {server} is not IP:PORT");
        return ExitCode::from(2);
    };
    let mode = args.get(2).map_or("udp", String::as_str);
    let rounds: usize = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(1);
    let connect_port: Option<u16> = args.get(4).and_then(|p| p.parse().ok());
    let mut tally = Tally::default();
    let mut round_ns = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let started = std::time::Instant::now();
        let bytes = match mode {
            "raw" => match hex(name) {
                Some(bytes) => bytes,
                None => {
                    eprintln!("dns-probe: {name} is not hex");
                    return ExitCode::from(2);
                }
            },
            "getaddrinfo" => {
                match (name.replace("{}", &round.to_string()).as_str(), 0u16).to_socket_addrs() {
                    Ok(found) => {
                        tally.answers += 1;
                        tally.rcode = "NoError".into();
                        tally.addresses = found.map(|a| a.ip()).collect();
                    }
                    Err(e) => tally.rcode = e.to_string().replace('"', "'"),
                }
                connect_all(connect_port, &mut tally);
                round_ns.push(started.elapsed().as_nanos() as u64);
                continue;
            }
            _ => {
                // `{}` in NAME is the round: a name of its own each round.
                let name = name.replace("{}", &round.to_string());
                let Ok(name) = Name::from_str(&format!("{}.", name.trim_end_matches('.'))) else {
                    eprintln!("dns-probe: {name} is not a name");
                    return ExitCode::from(2);
                };
                let mut query = Message::query();
                query.metadata.id = (round as u16).wrapping_add(1);
                query.metadata.recursion_desired = true;
                query.add_query(Query::query(name, RecordType::A));
                let Ok(bytes) = query.to_vec() else {
                    return ExitCode::from(2);
                };
                bytes
            }
        };
        let answer = match mode {
            "udp" | "raw" => ask_udp(server, &bytes, false, &mut tally),
            "udp-connected" => ask_udp(server, &bytes, true, &mut tally),
            "tcp" => ask_tcp(server, &bytes),
            _ => {
                eprintln!("dns-probe: unknown mode {mode}");
                return ExitCode::from(2);
            }
        };
        let Some(answer) = answer.and_then(|b| Message::from_vec(&b).ok()) else {
            continue;
        };
        tally.answers += 1;
        tally.rcode = format!("{:?}", answer.metadata.response_code);
        tally.id = answer.metadata.id;
        tally.question = answer
            .queries
            .first()
            .map_or_else(String::new, |q| q.name().to_ascii());
        tally.addresses = answer
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                _ => None,
            })
            .collect();
        connect_all(connect_port, &mut tally);
        round_ns.push(started.elapsed().as_nanos() as u64);
    }
    round_ns.sort_unstable();
    let median_ns = round_ns.get(round_ns.len() / 2).copied().unwrap_or(0);
    let retried = match (std::env::var_os("DNS_PROBE_RETRY_AFTER"), connect_port) {
        (Some(file), Some(port)) => {
            retry_after(std::path::Path::new(&file), &tally.addresses, port)
        }
        _ => String::new(),
    };
    println!(
        "{{\"rounds\":{rounds},\"answers\":{},\"rcode\":\"{}\",\"addresses\":[{}],\"connected\":{},\"refused\":{},\"other_errors\":{},\"wrong_source\":{},\"id\":{},\"question\":\"{}\",\"round_ns\":{median_ns}{retried}}}",
        tally.answers,
        tally.rcode,
        tally
            .addresses
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(","),
        tally.connected,
        tally.refused,
        tally.other_errors,
        tally.wrong_source,
        tally.id,
        tally.question.replace(['"', '\\'], "?")
    );
    if tally.answers == rounds {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `,"retried":{...}`: the connects to `addresses` once `file` exists (waited for at most 60 s).
fn retry_after(file: &std::path::Path, addresses: &[IpAddr], port: u16) -> String {
    for _ in 0..600 {
        if file.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (mut connected, mut refused, mut reached) = (0, 0, Vec::new());
    for ip in addresses {
        match TcpStream::connect_timeout(&SocketAddr::new(*ip, port), WAIT) {
            Ok(stream) => {
                connected += 1;
                if let Ok(peer) = stream.peer_addr() {
                    reached.push(format!("\"{}\"", peer.ip()));
                }
            }
            Err(e) if e.raw_os_error() == Some(EPERM) => refused += 1,
            Err(_) => {}
        }
    }
    format!(
        ",\"retried\":{{\"connected\":{connected},\"refused\":{refused},\"reached\":[{}]}}",
        reached.join(",")
    )
}

/// Connects over TCP to each address of the last answer at `port`, if given.
fn connect_all(port: Option<u16>, tally: &mut Tally) {
    let Some(port) = port else { return };
    for ip in tally.addresses.clone() {
        match TcpStream::connect_timeout(&SocketAddr::new(ip, port), WAIT) {
            Ok(_) => tally.connected += 1,
            Err(e) if e.raw_os_error() == Some(EPERM) => tally.refused += 1,
            Err(_) => tally.other_errors += 1,
        }
    }
}

/// `text` as bytes, two hex digits each.
fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[derive(Default)]
struct Tally {
    id: u16,
    question: String,
    answers: usize,
    rcode: String,
    addresses: Vec<IpAddr>,
    connected: usize,
    refused: usize,
    other_errors: usize,
    wrong_source: usize,
}

fn ask_udp(
    server: SocketAddr,
    query: &[u8],
    connected: bool,
    tally: &mut Tally,
) -> Option<Vec<u8>> {
    let local = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = UdpSocket::bind(local).ok()?;
    socket.set_read_timeout(Some(WAIT)).ok()?;
    if connected {
        socket.connect(server).ok()?;
        socket.send(query).ok()?;
    } else {
        socket.send_to(query, server).ok()?;
    }
    let mut buffer = vec![0u8; 4096];
    // A bounded number of datagrams: a reply from elsewhere is counted and skipped.
    for _ in 0..4 {
        let (n, from) = socket.recv_from(&mut buffer).ok()?;
        if from != server {
            tally.wrong_source += 1;
            continue;
        }
        return Some(buffer[..n].to_vec());
    }
    None
}

fn ask_tcp(server: SocketAddr, query: &[u8]) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&server, WAIT).ok()?;
    stream.set_read_timeout(Some(WAIT)).ok()?;
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    stream.write_all(&framed).ok()?;
    let mut length = [0u8; 2];
    stream.read_exact(&mut length).ok()?;
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut answer).ok()?;
    Some(answer)
}
