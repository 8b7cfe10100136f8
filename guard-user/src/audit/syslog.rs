//! Audit records as syslog messages (RFC 5424), sent to a local or remote receiver over UDP
//! (RFC 5426), TCP (RFC 6587, octet counting) or a local datagram socket (`/dev/log`), so that
//! a fleet can feed guard's records into the pipeline it already has.
//!
//! One record is one message: `<PRI>1 TIMESTAMP HOSTNAME guard PROCID TYPE [guard@32473 ...] MSG`.
//! The structured data carries the fields a receiver most often filters on; MSG is the record's
//! whole JSON line (after a BOM, RFC 5424 §6.4), so nothing is lost and a reader parses it back
//! with [`AuditRecord::parse`]. Sending blocks for at most a few seconds per record (TCP's
//! connect and write timeouts), so the writer calls [`SyslogSender::send`] from a thread of its
//! own, never from the kernel event loop.

use std::fmt;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;

use super::record::{AuditRecord, RecordType};

/// The SD-ID of guard's structured data. A private SD-ID is `NAME@PEN` with an IANA private
/// enterprise number; guard has none of its own, so it uses 32473, which IANA reserves as the
/// example number for documentation (RFC 5612). Receivers match it as an opaque string.
pub const SD_ID: &str = "guard@32473";
/// The APP-NAME of every message.
pub const APP_NAME: &str = "guard";
/// The port of `udp://HOST` and `tcp://HOST` without one (syslog's, for both transports).
pub const DEFAULT_PORT: u16 = 514;
/// The largest UDP or local datagram sent: an IPv4 UDP datagram's largest payload (65 535 less
/// the IP and UDP headers). A longer message is cut to it (at a character boundary), as RFC 5424
/// §6.1 lets a transport do; its JSON is then incomplete, but the header and structured data,
/// which come first, arrive whole. Receivers often keep less (rsyslog: `maxMessageSize`, 8 KiB
/// unless configured).
pub const MAX_DATAGRAM: usize = 65_507;
/// How long a TCP connect or write may block before the send counts as failed.
pub const TCP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a local datagram may wait for room in the receiver's queue.
const UNIX_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Who the messages say they come from (RFC 5424 §6.2.1, the numbers in its table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Facility {
    User,
    Daemon,
    Auth,
    /// The default: the records are authorization decisions (the `auth` family), and they hold
    /// command lines, user names and destinations that can be private. `authpriv` is the
    /// facility distributions keep out of their general logs (RHEL: `/var/log/secure`, 0600,
    /// while `auth` lands in `/var/log/messages`; Debian: `auth.log` for both), so a receiver's
    /// stock configuration does not spread the records wider than the audit log itself.
    #[default]
    Authpriv,
    Local0,
    Local1,
    Local2,
    Local3,
    Local4,
    Local5,
    Local6,
    Local7,
}

impl Facility {
    pub const ALL: [Facility; 12] = [
        Facility::User,
        Facility::Daemon,
        Facility::Auth,
        Facility::Authpriv,
        Facility::Local0,
        Facility::Local1,
        Facility::Local2,
        Facility::Local3,
        Facility::Local4,
        Facility::Local5,
        Facility::Local6,
        Facility::Local7,
    ];

    /// The facility's number.
    pub fn code(self) -> u8 {
        match self {
            Facility::User => 1,
            Facility::Daemon => 3,
            Facility::Auth => 4,
            Facility::Authpriv => 10,
            Facility::Local0 => 16,
            Facility::Local1 => 17,
            Facility::Local2 => 18,
            Facility::Local3 => 19,
            Facility::Local4 => 20,
            Facility::Local5 => 21,
            Facility::Local6 => 22,
            Facility::Local7 => 23,
        }
    }

    /// The name `FromStr` reads (and syslog configurations use).
    pub fn name(self) -> &'static str {
        match self {
            Facility::User => "user",
            Facility::Daemon => "daemon",
            Facility::Auth => "auth",
            Facility::Authpriv => "authpriv",
            Facility::Local0 => "local0",
            Facility::Local1 => "local1",
            Facility::Local2 => "local2",
            Facility::Local3 => "local3",
            Facility::Local4 => "local4",
            Facility::Local5 => "local5",
            Facility::Local6 => "local6",
            Facility::Local7 => "local7",
        }
    }
}

impl fmt::Display for Facility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A facility name `FromStr` does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown syslog facility {0:?}: use one of {names}", names = Facility::ALL.map(Facility::name).join(", "))]
pub struct UnknownFacility(pub String);

impl FromStr for Facility {
    type Err = UnknownFacility;

    fn from_str(s: &str) -> Result<Facility, UnknownFacility> {
        let lower = s.to_ascii_lowercase();
        Facility::ALL
            .into_iter()
            .find(|facility| facility.name() == lower)
            .ok_or_else(|| UnknownFacility(s.to_string()))
    }
}

/// How urgent a record is (RFC 5424 §6.2.1); guard uses these four.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    Err = 3,
    Warning = 4,
    Notice = 5,
    Info = 6,
}

/// A record's severity: a refusal is a warning, a prompt (someone must answer) a notice, a
/// refused control request a warning, lost records an error; the rest is information.
pub fn severity(record: &AuditRecord) -> Severity {
    match record.kind {
        RecordType::Decision | RecordType::Ask => match record.decision() {
            Some("forbidden") => Severity::Warning,
            Some("prompt") => Severity::Notice,
            _ => Severity::Info,
        },
        RecordType::ControlRefused => Severity::Warning,
        RecordType::Loss | RecordType::ScopeLoss => Severity::Err,
        // Records leave the log: a flood folded, or a file deleted.
        RecordType::Folded | RecordType::RotatedOut => Severity::Notice,
        _ => Severity::Info,
    }
}

/// One RFC 5424 message for `record`, without transport framing.
pub fn rfc5424(record: &AuditRecord, facility: Facility) -> String {
    let pri = u16::from(facility.code()) * 8 + severity(record) as u16;
    let json = serde_json::to_string(record).expect("an audit record always serializes");
    format!(
        "<{pri}>1 {time} {host} {APP_NAME} {pid} {msgid} {sd} \u{feff}{json}",
        time = timestamp(&record.time),
        host = header_field(&record.host, 255),
        pid = std::process::id(),
        msgid = header_field(record.kind.as_str(), 32),
        sd = structured_data(record),
    )
}

/// The record's time as an RFC 5424 TIMESTAMP: RFC 3339 with at most 6 fractional digits (the
/// record has nanoseconds; the rest is cut, not rounded, so a time never moves into the next
/// second). `-` for a time that is not RFC 3339 (the JSON in MSG still has it as written).
fn timestamp(time: &str) -> String {
    let bytes = time.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        bytes
            .get(range)
            .is_some_and(|b| b.iter().all(u8::is_ascii_digit))
    };
    let shape_ok = digits(0..4)
        && bytes.get(4) == Some(&b'-')
        && digits(5..7)
        && bytes.get(7) == Some(&b'-')
        && digits(8..10)
        && bytes.get(10) == Some(&b'T')
        && digits(11..13)
        && bytes.get(13) == Some(&b':')
        && digits(14..16)
        && bytes.get(16) == Some(&b':')
        && digits(17..19);
    if !shape_ok {
        return "-".to_string();
    }
    let (date_time, mut rest) = time.split_at(19);
    let mut fraction = "";
    if let Some(after_dot) = rest.strip_prefix('.') {
        let len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 {
            return "-".to_string();
        }
        fraction = &after_dot[..len.min(6)];
        rest = &after_dot[len..];
    }
    let offset_ok = rest == "Z" || {
        let b = rest.as_bytes();
        b.len() == 6
            && (b[0] == b'+' || b[0] == b'-')
            && digits(time.len() - 5..time.len() - 3)
            && b[3] == b':'
            && digits(time.len() - 2..time.len())
    };
    if !offset_ok {
        return "-".to_string();
    }
    if fraction.is_empty() {
        format!("{date_time}{rest}")
    } else {
        format!("{date_time}.{fraction}{rest}")
    }
}

/// A header field (HOSTNAME, APP-NAME, MSGID): printable US-ASCII only (anything else becomes
/// `_`, so a field never splits the header), at most `max` characters, `-` (nil) when empty.
fn header_field(value: &str, max: usize) -> String {
    let field: String = value
        .chars()
        .take(max)
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    if field.is_empty() {
        "-".to_string()
    } else {
        field
    }
}

/// `[guard@32473 name="value" ...]` with the fields a receiver filters on, those the record has.
fn structured_data(record: &AuditRecord) -> String {
    let mut params: Vec<(&str, String)> = vec![
        ("v", record.v.to_string()),
        ("seq", record.seq.to_string()),
        ("owner", record.owner.clone()),
    ];
    let optional = [
        ("decision", record.decision.clone()),
        ("event", record.event.clone()),
        ("action", record.action.clone()),
        ("rule", record.rule.as_ref().map(|rule| rule.location())),
    ];
    params.extend(
        optional
            .into_iter()
            .filter_map(|(name, value)| Some((name, value?))),
    );
    if let Some(process) = &record.process {
        params.push(("pid", process.pid.to_string()));
        params.push(("uid", process.uid.to_string()));
        params.push(("exe", process.exe.clone()));
    }
    if let Some(dest) = &record.destination {
        let host = dest.host.as_deref().unwrap_or(&dest.address);
        // An IPv6 address is bracketed, so the port after it stays readable (its `]` is then
        // escaped, as every `]` in a value is).
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        params.push(("dest", format!("{host}:{}/{}", dest.port, dest.transport)));
    }
    if let Some(ask) = record.ask {
        params.push(("ask", ask.to_string()));
    }
    if let Some(approval) = &record.approval {
        params.push(("by", approval.by.clone()));
        params.push(("mode", approval.mode.clone()));
    }
    let mut sd = format!("[{SD_ID}");
    for (name, value) in params {
        sd.push(' ');
        sd.push_str(name);
        sd.push_str("=\"");
        push_param_value(&mut sd, &value);
        sd.push('"');
    }
    sd.push(']');
    sd
}

/// A PARAM-VALUE (RFC 5424 §6.3.3): `"`, `\` and `]` take a backslash; anything else (UTF-8,
/// even a newline) stays as it is, which octet-counted TCP and datagrams carry intact.
fn push_param_value(out: &mut String, value: &str) {
    for c in value.chars() {
        if matches!(c, '"' | '\\' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
}

/// Where messages go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyslogTarget {
    /// One datagram per message.
    Udp(SocketAddr),
    /// A stream of octet-counted messages (RFC 6587 §3.4.1).
    Tcp(SocketAddr),
    /// One datagram per message to a local receiver's socket, e.g. `/dev/log`.
    Unix(PathBuf),
}

impl fmt::Display for SyslogTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyslogTarget::Udp(addr) => write!(f, "udp://{addr}"),
            SyslogTarget::Tcp(addr) => write!(f, "tcp://{addr}"),
            SyslogTarget::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

/// A syslog target that does not parse (or whose host does not resolve); the message says which
/// forms are accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "syslog target {target:?}: {why}; use udp://HOST[:PORT], tcp://HOST[:PORT] (HOST a name, an \
     IPv4 address or an [IPv6] address in brackets; port {DEFAULT_PORT} when left out) or \
     unix:///PATH (a local receiver's socket, e.g. unix:///dev/log)"
)]
pub struct BadTarget {
    pub target: String,
    pub why: String,
}

impl FromStr for SyslogTarget {
    type Err = BadTarget;

    /// Names are resolved here (the first address the resolver gives), so a name that does not
    /// resolve is refused when the target is read, not at the first record.
    fn from_str(s: &str) -> Result<SyslogTarget, BadTarget> {
        let bad = |why: String| BadTarget {
            target: s.to_string(),
            why,
        };
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err(bad("no scheme".into()));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "udp" => host_port(rest).map(SyslogTarget::Udp).map_err(bad),
            "tcp" => host_port(rest).map(SyslogTarget::Tcp).map_err(bad),
            "unix" if rest.starts_with('/') => Ok(SyslogTarget::Unix(PathBuf::from(rest))),
            "unix" => Err(bad(
                "unix:// takes an absolute path (three slashes: unix:///dev/log)".into(),
            )),
            other => Err(bad(format!("unknown scheme {other:?}"))),
        }
    }
}

/// `HOST[:PORT]` to one address; the error says what is wrong with it.
fn host_port(s: &str) -> Result<SocketAddr, String> {
    if s.contains(['/', '?', '#', '@']) {
        return Err("only a host and a port may follow the scheme".into());
    }
    let (host, port) = if let Some(bracketed) = s.strip_prefix('[') {
        let (v6, after) = bracketed
            .split_once(']')
            .ok_or("an IPv6 address's [ has no ]")?;
        let addr: Ipv6Addr = v6
            .parse()
            .map_err(|_| format!("{v6:?} in brackets is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("only :PORT may follow the ] of an IPv6 address")?,
            ),
        };
        (HostPart::Ip(IpAddr::V6(addr)), port)
    } else {
        match s.split_once(':') {
            Some((_, after)) if after.contains(':') => {
                return Err("an IPv6 address goes in brackets, e.g. udp://[::1]:514".into());
            }
            Some((host, port)) => (HostPart::parse(host)?, Some(port)),
            None => (HostPart::parse(s)?, None),
        }
    };
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(0) | Err(_) => return Err(format!("port {port:?} is not a number from 1 to 65535")),
            Ok(port) => port,
        },
    };
    match host {
        HostPart::Ip(ip) => Ok(SocketAddr::new(ip, port)),
        HostPart::Name(name) => (name, port)
            .to_socket_addrs()
            .map_err(|err| format!("{name:?} does not resolve: {err}"))?
            .next()
            .ok_or_else(|| format!("{name:?} resolves to no address")),
    }
}

enum HostPart<'a> {
    Ip(IpAddr),
    Name(&'a str),
}

impl<'a> HostPart<'a> {
    fn parse(host: &'a str) -> Result<HostPart<'a>, String> {
        if host.is_empty() {
            return Err("no host".into());
        }
        Ok(match host.parse::<IpAddr>() {
            Ok(ip) => HostPart::Ip(ip),
            Err(_) => HostPart::Name(host),
        })
    }
}

/// Sends records to one [`SyslogTarget`], counting what was sent and what failed.
pub struct SyslogSender {
    target: SyslogTarget,
    facility: Facility,
    conn: Conn,
    sent: u64,
    failed: u64,
}

enum Conn {
    Udp(UdpSocket),
    /// `None` after a failed reconnect: the next send connects again.
    Tcp(Option<TcpStream>),
    Unix(UnixDatagram),
}

impl SyslogSender {
    /// Opens the transport: for TCP, connects (within [`TCP_TIMEOUT`]), so an unreachable
    /// receiver is an error now rather than a failed count later; for a local socket, checks
    /// that a receiver is bound there.
    pub fn connect(target: &SyslogTarget, facility: Facility) -> anyhow::Result<SyslogSender> {
        let conn = match target {
            SyslogTarget::Udp(addr) => {
                let local: SocketAddr = match addr {
                    SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
                    SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
                };
                let socket = UdpSocket::bind(local).context("could not open a UDP socket")?;
                // Connected, so a receiver's refusals (ICMP port unreachable) come back as errors.
                socket
                    .connect(addr)
                    .with_context(|| format!("could not address {target}"))?;
                Conn::Udp(socket)
            }
            SyslogTarget::Tcp(addr) => Conn::Tcp(Some(
                tcp_connect(addr).with_context(|| format!("could not connect to {target}"))?,
            )),
            SyslogTarget::Unix(path) => Conn::Unix(
                unix_connect(path).with_context(|| format!("could not connect to {target}"))?,
            ),
        };
        Ok(SyslogSender {
            target: target.clone(),
            facility,
            conn,
            sent: 0,
            failed: 0,
        })
    }

    /// Sends one record as one message. TCP and the local socket reconnect once when the
    /// receiver went away (it restarted) before the send counts as failed. Over UDP a datagram
    /// that leaves is counted as sent (UDP cannot know more); an error is usually the receiver's
    /// refusal of an earlier datagram, reported on this send, which is then not sent.
    pub fn send(&mut self, record: &AuditRecord) -> io::Result<()> {
        let message = rfc5424(record, self.facility);
        let result = match &mut self.conn {
            Conn::Udp(socket) => socket.send(datagram(&message)).map(drop),
            Conn::Tcp(stream) => {
                let SyslogTarget::Tcp(addr) = &self.target else {
                    unreachable!("a TCP connection is made for a TCP target")
                };
                let frame = format!("{} {message}", message.len());
                send_tcp(addr, stream, frame.as_bytes())
            }
            Conn::Unix(socket) => {
                let SyslogTarget::Unix(path) = &self.target else {
                    unreachable!("a local socket is made for a unix target")
                };
                send_unix(path, socket, datagram(&message))
            }
        };
        match result {
            Ok(()) => self.sent += 1,
            Err(_) => self.failed += 1,
        }
        result
    }

    /// Records sent (for UDP: handed to the network).
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Records that could not be sent.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    pub fn target(&self) -> &SyslogTarget {
        &self.target
    }

    pub fn facility(&self) -> Facility {
        self.facility
    }
}

/// `message`, cut to [`MAX_DATAGRAM`] bytes at a character boundary.
fn datagram(message: &str) -> &[u8] {
    let mut end = message.len().min(MAX_DATAGRAM);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message.as_bytes()[..end]
}

fn tcp_connect(addr: &SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(addr, TCP_TIMEOUT)?;
    stream.set_write_timeout(Some(TCP_TIMEOUT))?;
    Ok(stream)
}

/// Writes one frame, reconnecting once if the connection is gone or the write fails. A failed
/// write may have sent part of the frame, so that connection is never written to again (the
/// receiver drops the torn frame when it closes).
fn send_tcp(addr: &SocketAddr, slot: &mut Option<TcpStream>, frame: &[u8]) -> io::Result<()> {
    if let Some(stream) = slot.as_mut()
        && !peer_closed(stream)
        && stream.write_all(frame).is_ok()
    {
        return Ok(());
    }
    *slot = None;
    let mut stream = tcp_connect(addr)?;
    stream.write_all(frame)?;
    *slot = Some(stream);
    Ok(())
}

/// Whether the receiver closed the connection (or it failed). A syslog receiver never writes to
/// us, so anything to read is its FIN or an error. Checked before each write because a write
/// into a connection the receiver closed still succeeds locally (the reset comes later), which
/// would lose that record silently when the receiver restarts.
fn peer_closed(stream: &TcpStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: reads at most one byte into `byte`, which lives across the call; the descriptor is
    // the stream's, open while it is borrowed.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&raw mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock,
    }
}

fn unix_connect(path: &Path) -> io::Result<UnixDatagram> {
    let socket = UnixDatagram::unbound()?;
    socket.connect(path)?;
    // A full receiver queue blocks a datagram send; never for long.
    socket.set_write_timeout(Some(UNIX_WRITE_TIMEOUT))?;
    Ok(socket)
}

/// Sends one datagram, reconnecting once on an error: a receiver that restarted bound a new
/// socket at the path, and the old connection refuses.
fn send_unix(path: &Path, socket: &mut UnixDatagram, bytes: &[u8]) -> io::Result<()> {
    if socket.send(bytes).is_ok() {
        return Ok(());
    }
    *socket = unix_connect(path)?;
    socket.send(bytes).map(drop)
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Instant;

    use serde_json::Value;

    use super::*;
    use crate::audit::record::{
        ApprovalInfo, DestinationInfo, ProcessInfo, RuleRef, SCHEMA_VERSION,
    };

    fn refusal() -> AuditRecord {
        AuditRecord {
            v: SCHEMA_VERSION,
            seq: 42,
            time: "2026-12-02T10:11:12.123456789Z".into(),
            host: "box".into(),
            kind: RecordType::Decision,
            owner: "alice".into(),
            decision: Some("forbidden".into()),
            event: Some("connect".into()),
            action: Some("eperm".into()),
            rule: Some(RuleRef {
                file: "/etc/guard/rules/a\"b].rules".into(),
                line: 7,
                text: "forbid(...)".into(),
                justification: None,
            }),
            process: Some(ProcessInfo {
                pid: 100,
                tid: 101,
                ppid: 1,
                uid: 1000,
                user: "alice".into(),
                exe: "/usr/bin/c\\url".into(),
                argv: vec!["curl".into(), "https://example.com".into()],
                comm: "curl".into(),
                ..Default::default()
            }),
            destination: Some(DestinationInfo {
                host: None,
                hosts: Vec::new(),
                address: "2001:db8::1".into(),
                port: 443,
                transport: "tcp".into(),
                protocol: "https".into(),
            }),
            ..Default::default()
        }
    }

    fn json(record: &AuditRecord) -> String {
        serde_json::to_string(record).unwrap()
    }

    #[test]
    fn a_refusal_is_one_exact_message() {
        let record = refusal();
        let expected = format!(
            "<36>1 2026-12-02T10:11:12.123456Z box guard {pid} decision [guard@32473 v=\"1\" \
             seq=\"42\" owner=\"alice\" decision=\"forbidden\" event=\"connect\" action=\"eperm\" \
             rule=\"/etc/guard/rules/a\\\"b\\].rules:7\" pid=\"100\" uid=\"1000\" \
             exe=\"/usr/bin/c\\\\url\" dest=\"[2001:db8::1\\]:443/tcp\"] \u{feff}{json}",
            pid = std::process::id(),
            json = json(&record),
        );
        assert_eq!(rfc5424(&record, Facility::Auth), expected);
    }

    #[test]
    fn an_approval_names_who_and_how_and_its_ask() {
        let record = AuditRecord {
            v: 1,
            seq: 3,
            time: "2026-12-02T10:11:12Z".into(),
            host: String::new(),
            kind: RecordType::Approval,
            owner: "bob".into(),
            decision: Some("prompt".into()),
            ask: Some(9),
            approval: Some(ApprovalInfo {
                by: "carol".into(),
                uid: 1001,
                mode: "once".into(),
            }),
            destination: Some(DestinationInfo {
                host: Some("example.com".into()),
                hosts: Vec::new(),
                address: "192.0.2.1".into(),
                port: 80,
                transport: "tcp".into(),
                protocol: "http".into(),
            }),
            ..Default::default()
        };
        // authpriv (10) * 8 + info (6): an approval is information even with decision prompt.
        let expected = format!(
            "<86>1 2026-12-02T10:11:12Z - guard {pid} approval [guard@32473 v=\"1\" seq=\"3\" \
             owner=\"bob\" decision=\"prompt\" dest=\"example.com:80/tcp\" ask=\"9\" by=\"carol\" \
             mode=\"once\"] \u{feff}{json}",
            pid = std::process::id(),
            json = json(&record),
        );
        assert_eq!(rfc5424(&record, Facility::default()), expected);
    }

    #[test]
    fn severity_follows_the_record() {
        let with = |kind, decision: Option<&str>| AuditRecord {
            kind,
            decision: decision.map(str::to_string),
            ..Default::default()
        };
        let cases = [
            (
                with(RecordType::Decision, Some("forbidden")),
                Severity::Warning,
            ),
            (with(RecordType::Ask, Some("forbidden")), Severity::Warning),
            (with(RecordType::Decision, Some("prompt")), Severity::Notice),
            (with(RecordType::Ask, Some("prompt")), Severity::Notice),
            (with(RecordType::Decision, Some("allow")), Severity::Info),
            (with(RecordType::Denial, Some("forbidden")), Severity::Info),
            (with(RecordType::ControlRefused, None), Severity::Warning),
            (with(RecordType::Loss, None), Severity::Err),
            (with(RecordType::Reload, None), Severity::Info),
            (with(RecordType::DaemonStart, None), Severity::Info),
        ];
        for (record, expected) in cases {
            assert_eq!(
                severity(&record),
                expected,
                "{:?} {:?}",
                record.kind,
                record.decision
            );
        }
        let loss = with(RecordType::Loss, None);
        assert!(
            rfc5424(&loss, Facility::Local7).starts_with("<187>1 "),
            "23*8+3"
        );
        assert!(
            rfc5424(&loss, Facility::User).starts_with("<11>1 "),
            "1*8+3"
        );
    }

    #[test]
    fn timestamps_keep_at_most_microseconds() {
        let cases = [
            (
                "2026-12-02T10:11:12.123456789Z",
                "2026-12-02T10:11:12.123456Z",
            ),
            (
                "2026-12-02T10:11:12.999999999Z",
                "2026-12-02T10:11:12.999999Z",
            ),
            (
                "2026-12-02T10:11:12.000000001Z",
                "2026-12-02T10:11:12.000000Z",
            ),
            ("2026-12-02T10:11:12.12Z", "2026-12-02T10:11:12.12Z"),
            ("2026-12-02T10:11:12Z", "2026-12-02T10:11:12Z"),
            (
                "2026-12-02T10:11:12.1234567+02:00",
                "2026-12-02T10:11:12.123456+02:00",
            ),
            ("2026-12-02T10:11:12-05:30", "2026-12-02T10:11:12-05:30"),
            // Not RFC 3339 (or not as RFC 5424 allows it): nil.
            ("t", "-"),
            ("", "-"),
            ("2026-12-02 10:11:12Z", "-"),
            ("2026-12-02t10:11:12z", "-"),
            ("2026-12-02T10:11:12", "-"),
            ("2026-12-02T10:11:12.Z", "-"),
            ("2026-12-02T10:11:12.5+0200", "-"),
            ("2026-12-02T10:11:12Z trailing", "-"),
        ];
        for (time, expected) in cases {
            assert_eq!(timestamp(time), expected, "{time:?}");
        }
    }

    #[test]
    fn header_fields_are_printable_ascii_bounded_and_never_empty() {
        assert_eq!(header_field("", 255), "-");
        assert_eq!(header_field("my host\tname", 255), "my_host_name");
        assert_eq!(header_field("höst", 255), "h_st");
        assert_eq!(header_field(&"h".repeat(300), 255), "h".repeat(255));
        let record = AuditRecord {
            host: "a b".into(),
            time: "2026-12-02T10:11:12Z".into(),
            ..Default::default()
        };
        let message = rfc5424(&record, Facility::Daemon);
        let fields: Vec<&str> = message.splitn(7, ' ').collect();
        assert_eq!(&fields[..3], ["<30>1", "2026-12-02T10:11:12Z", "a_b"]);
        assert_eq!(fields[3], "guard");
        assert_eq!(fields[5], "decision");
    }

    #[test]
    fn the_message_carries_the_whole_record_after_a_bom() {
        let mut record = refusal();
        record.message = Some("line one\nline \"two\"".into());
        record.details.insert("extra".into(), Value::from(5));
        let message = rfc5424(&record, Facility::Auth);
        let (_, msg) = message
            .split_once("] \u{feff}")
            .expect("SD, then SP, BOM, MSG");
        assert_eq!(AuditRecord::parse(msg), Some(record));
        assert!(!message.contains('\n'), "JSON escapes the newline");
    }

    #[test]
    fn facilities_parse_by_name() {
        assert_eq!("auth".parse(), Ok(Facility::Auth));
        assert_eq!("AUTHPRIV".parse(), Ok(Facility::Authpriv));
        assert_eq!("local0".parse(), Ok(Facility::Local0));
        assert_eq!("local7".parse(), Ok(Facility::Local7));
        for facility in Facility::ALL {
            assert_eq!(facility.name().parse(), Ok(facility));
        }
        let codes: Vec<u8> = Facility::ALL.map(Facility::code).to_vec();
        assert_eq!(codes, [1, 3, 4, 10, 16, 17, 18, 19, 20, 21, 22, 23]);
        let err = "local8".parse::<Facility>().unwrap_err().to_string();
        assert!(
            err.contains("\"local8\"") && err.contains("authpriv, local0"),
            "{err}"
        );
    }

    #[test]
    fn targets_parse_in_their_accepted_forms() {
        let parse = |s: &str| s.parse::<SyslogTarget>().unwrap();
        let v4: SocketAddr = "127.0.0.1:5514".parse().unwrap();
        assert_eq!(parse("udp://127.0.0.1:5514"), SyslogTarget::Udp(v4));
        assert_eq!(parse("TCP://127.0.0.1:5514"), SyslogTarget::Tcp(v4));
        assert_eq!(
            parse("udp://127.0.0.1"),
            SyslogTarget::Udp("127.0.0.1:514".parse().unwrap())
        );
        assert_eq!(
            parse("tcp://[::1]:601"),
            SyslogTarget::Tcp("[::1]:601".parse().unwrap())
        );
        assert_eq!(
            parse("tcp://[::1]"),
            SyslogTarget::Tcp("[::1]:514".parse().unwrap())
        );
        let SyslogTarget::Udp(local) = parse("udp://localhost") else {
            panic!("udp")
        };
        assert!(local.ip().is_loopback() && local.port() == 514, "{local}");
        assert_eq!(
            parse("unix:///dev/log"),
            SyslogTarget::Unix(PathBuf::from("/dev/log"))
        );
        for s in ["udp://127.0.0.1:5514", "tcp://[::1]:601", "unix:///dev/log"] {
            assert_eq!(parse(s).to_string(), s);
        }
    }

    #[test]
    fn bad_targets_say_what_is_wrong_and_what_is_accepted() {
        let cases = [
            ("127.0.0.1:514", "no scheme"),
            ("http://example.com", "unknown scheme \"http\""),
            ("udp://", "no host"),
            ("udp://:514", "no host"),
            ("udp://::1:514", "IPv6 address goes in brackets"),
            ("tcp://[::1", "has no ]"),
            ("tcp://[127.0.0.1]:514", "not an IPv6 address"),
            ("tcp://[::1]514", "only :PORT"),
            ("udp://127.0.0.1:0", "port \"0\""),
            ("udp://127.0.0.1:65536", "port \"65536\""),
            ("udp://127.0.0.1:syslog", "port \"syslog\""),
            ("udp://127.0.0.1:514/x", "only a host and a port"),
            ("unix://dev/log", "absolute path"),
            ("unix://", "absolute path"),
            ("udp://no-such-host.invalid", "does not resolve"),
        ];
        for (target, why) in cases {
            let err = target.parse::<SyslogTarget>().unwrap_err().to_string();
            assert!(err.contains(why), "{target}: {err}");
            assert!(
                err.contains("use udp://HOST[:PORT], tcp://HOST[:PORT]")
                    && err.contains("unix:///PATH"),
                "{target}: {err}"
            );
        }
    }

    /// Splits an octet-counted stream into its messages, checking each count.
    fn frames(mut stream: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        while !stream.is_empty() {
            let space = stream.iter().position(|b| *b == b' ').expect("LEN SP");
            let len: usize = std::str::from_utf8(&stream[..space])
                .unwrap()
                .parse()
                .unwrap();
            let msg = &stream[space + 1..space + 1 + len];
            out.push(String::from_utf8(msg.to_vec()).unwrap());
            stream = &stream[space + 1 + len..];
        }
        out
    }

    /// The next connection, or a panic after 10 s (a sender that never connects fails the test
    /// instead of hanging it).
    fn accept_within(listener: &TcpListener) -> TcpStream {
        listener.set_nonblocking(true).unwrap();
        let start = Instant::now();
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    return stream;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "no connection came"
                    );
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(err) => panic!("accept: {err}"),
            }
        }
    }

    fn read_to_end_bounded(mut stream: TcpStream) -> Vec<u8> {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn tcp_frames_each_message_with_its_octet_count() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || read_to_end_bounded(accept_within(&listener)));
        let mut first = refusal();
        // A newline inside a field: only the count, not a line end, delimits the message.
        first.process.as_mut().unwrap().exe = "/tmp/a\nb".into();
        let mut second = refusal();
        second.seq = 43;
        second.host = "hé".into();
        let mut sender = SyslogSender::connect(&SyslogTarget::Tcp(addr), Facility::Auth).unwrap();
        sender.send(&first).unwrap();
        sender.send(&second).unwrap();
        assert_eq!((sender.sent(), sender.failed()), (2, 0));
        drop(sender);
        let got = frames(&server.join().unwrap());
        assert_eq!(
            got,
            [
                rfc5424(&first, Facility::Auth),
                rfc5424(&second, Facility::Auth)
            ]
        );
        assert!(got[0].contains("exe=\"/tmp/a\nb\""));
    }

    #[test]
    fn tcp_reconnects_when_the_receiver_closed_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (closed_tx, closed_rx) = mpsc::channel();
        let server = std::thread::spawn(move || {
            // The first connection gets one frame, then the receiver "restarts".
            let mut first = accept_within(&listener);
            first
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut buf = [0u8; 4096];
            let n = first.read(&mut buf).unwrap();
            drop(first);
            closed_tx.send(()).unwrap();
            let second = read_to_end_bounded(accept_within(&listener));
            (frames(&buf[..n]), frames(&second))
        });
        let mut sender = SyslogSender::connect(&SyslogTarget::Tcp(addr), Facility::Auth).unwrap();
        let mut record = refusal();
        sender.send(&record).unwrap();
        closed_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // Let the receiver's FIN arrive (loopback: at once; bounded anyway).
        let start = Instant::now();
        while let Conn::Tcp(Some(stream)) = &sender.conn
            && !peer_closed(stream)
            && start.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        record.seq = 43;
        sender.send(&record).unwrap();
        assert_eq!((sender.sent(), sender.failed()), (2, 0));
        drop(sender);
        let (first, second) = server.join().unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(second, [rfc5424(&record, Facility::Auth)]);
    }

    #[test]
    fn tcp_counts_a_failure_when_reconnecting_fails_too() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut sender = SyslogSender::connect(&SyslogTarget::Tcp(addr), Facility::Auth).unwrap();
        // The receiver goes away for good: its connection and its port close.
        drop(accept_within(&listener));
        drop(listener);
        let start = Instant::now();
        let mut result = Ok(());
        // Bounded: the first send may still land in the dying connection's buffer.
        for _ in 0..10 {
            result = sender.send(&refusal());
            if result.is_err() || start.elapsed() > Duration::from_secs(5) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let err = result.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
        assert_eq!(sender.failed(), 1);
        // A later send tries again (and fails again: nothing listens).
        assert!(sender.send(&refusal()).is_err());
        assert_eq!(sender.failed(), 2);
        let refused = SyslogSender::connect(&SyslogTarget::Tcp(addr), Facility::Auth);
        let err = refused.err().expect("nothing listens").to_string();
        assert!(err.contains(&format!("tcp://{addr}")), "{err}");
    }

    fn udp_receiver() -> (UdpSocket, SocketAddr) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        (socket, addr)
    }

    #[test]
    fn udp_sends_one_datagram_per_message() {
        let (receiver, addr) = udp_receiver();
        let mut sender = SyslogSender::connect(&SyslogTarget::Udp(addr), Facility::Local3).unwrap();
        let mut record = refusal();
        sender.send(&record).unwrap();
        record.seq = 43;
        record.kind = RecordType::Loss;
        sender.send(&record).unwrap();
        let mut buf = vec![0u8; 70_000];
        let mut got = Vec::new();
        for _ in 0..2 {
            let n = receiver.recv(&mut buf).unwrap();
            got.push(String::from_utf8(buf[..n].to_vec()).unwrap());
        }
        assert_eq!(got[1], rfc5424(&record, Facility::Local3));
        assert!(got[0].starts_with("<156>1 "), "19*8+4: {}", got[0]);
        assert!(got[1].starts_with("<155>1 "), "19*8+3: {}", got[1]);
        assert_eq!((sender.sent(), sender.failed()), (2, 0));
    }

    #[test]
    fn udp_cuts_a_long_message_to_one_datagram() {
        let (receiver, addr) = udp_receiver();
        let mut sender = SyslogSender::connect(&SyslogTarget::Udp(addr), Facility::Auth).unwrap();
        let mut record = refusal();
        // Multi-byte characters, so the cut must find a character boundary.
        record.process.as_mut().unwrap().argv = vec!["é".repeat(40_000)];
        let full = rfc5424(&record, Facility::Auth);
        assert!(full.len() > MAX_DATAGRAM);
        sender.send(&record).unwrap();
        let mut buf = vec![0u8; 70_000];
        let n = receiver.recv(&mut buf).unwrap();
        let got = std::str::from_utf8(&buf[..n]).expect("cut at a character boundary");
        assert!(n <= MAX_DATAGRAM && n > MAX_DATAGRAM - 4, "{n}");
        assert!(full.starts_with(got));
    }

    #[test]
    fn udp_counts_the_refusals_of_a_closed_port() {
        // A port nothing listens on: bound, then closed.
        let (closed, addr) = udp_receiver();
        drop(closed);
        let mut sender = SyslogSender::connect(&SyslogTarget::Udp(addr), Facility::Auth).unwrap();
        let mut attempts = 0;
        let start = Instant::now();
        while sender.failed() == 0 && attempts < 50 && start.elapsed() < Duration::from_secs(5) {
            attempts += 1;
            let result = sender.send(&refusal());
            if let Err(err) = result {
                assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            sender.failed(),
            1,
            "the refusal comes back as a failed send"
        );
        assert_eq!(sender.sent() + sender.failed(), attempts);
    }

    #[test]
    fn unix_sends_a_datagram_and_finds_a_restarted_receiver() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let bind = || {
            let socket = UnixDatagram::bind(&path).unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            socket
        };
        let receiver = bind();
        let target: SyslogTarget = format!("unix://{}", path.display()).parse().unwrap();
        let mut sender = SyslogSender::connect(&target, Facility::Auth).unwrap();
        let mut record = refusal();
        sender.send(&record).unwrap();
        let mut buf = vec![0u8; 70_000];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], rfc5424(&record, Facility::Auth).as_bytes());
        // The receiver restarts: a new socket at the same path.
        drop(receiver);
        std::fs::remove_file(&path).unwrap();
        let receiver = bind();
        record.seq = 43;
        sender.send(&record).unwrap();
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], rfc5424(&record, Facility::Auth).as_bytes());
        assert_eq!((sender.sent(), sender.failed()), (2, 0));
        // Gone for good: the send fails and is counted.
        drop(receiver);
        std::fs::remove_file(&path).unwrap();
        assert!(sender.send(&record).is_err());
        assert_eq!(sender.failed(), 1);
        let err = SyslogSender::connect(&target, Facility::Auth)
            .err()
            .expect("no receiver");
        assert!(err.to_string().contains("unix://"), "{err}");
    }
}
