//! A private rsyslogd per test, the receiver `audit_syslog` sends to: its own config, work folder
//! and ports (UDP and TCP on 127.0.0.1), started with `-n -f CONF -i PIDFILE`. The system's
//! rsyslog (its service, `/etc/rsyslog.conf`, `/dev/log`) is never touched: the config loads no
//! local-socket or kernel input, and no name lookups are made (`net.enableDNS="off"`).
//!
//! Per received message it writes one JSON line of what rsyslog *parsed* (the properties its
//! RFC 5424 parser fills, those `RSYSLOG_SyslogProtocol23Format` prints, and the structured data
//! as `mmpstrucdata` parsed it, values unescaped), so a test proves rsyslog read our messages as
//! RFC 5424 rather than finding its own bytes again. Drop stops it (SIGTERM, then SIGKILL) and
//! waits for it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::kernel::skip;

/// How long start-up may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Start-up attempts: the UDP port is chosen free before rsyslogd binds it, so another process
/// may take it in between (rsyslogd then never answers the probe); a new port is tried.
const START_ATTEMPTS: usize = 3;
/// The MSGID of the probes that tell when the UDP input is up; they go to a file of their own.
const PROBE_MSGID: &str = "rsyslog-probe";

/// What rsyslog parsed from one message.
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    pub pri: String,
    /// `protocol-version`: `1` for a message its RFC 5424 parser read, `0` for any other.
    pub version: String,
    /// `timereported` as RFC 3339.
    pub timestamp: String,
    pub hostname: String,
    pub app_name: String,
    pub procid: String,
    pub msgid: String,
    /// The STRUCTURED-DATA as received (escapes kept).
    pub structured_data: String,
    /// The structured data as `mmpstrucdata` parsed it: `{SD-ID: {name: value}}`, values
    /// unescaped.
    pub sd_params: Value,
    /// `udp` or `tcp`: the input that received it.
    pub input: String,
    /// MSG as rsyslog keeps it (with the BOM, when there was one).
    pub msg: String,
}

impl Received {
    /// One line of the received file.
    pub fn parse(line: &str) -> Result<Received> {
        let value: Value =
            serde_json::from_str(line).with_context(|| format!("not JSON: {line:?}"))?;
        let field = |name: &str| -> Result<String> {
            value[name]
                .as_str()
                .map(str::to_string)
                .with_context(|| format!("no {name:?} in {line:?}"))
        };
        let sd_text = field("sd_parsed")?;
        let sd_params = if sd_text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&sd_text)
                .with_context(|| format!("mmpstrucdata's output is not JSON: {sd_text:?}"))?
        };
        Ok(Received {
            pri: field("pri")?,
            version: field("version")?,
            timestamp: field("timestamp")?,
            hostname: field("hostname")?,
            app_name: field("app_name")?,
            procid: field("procid")?,
            msgid: field("msgid")?,
            structured_data: field("sd")?,
            sd_params,
            input: field("input")?,
            msg: field("msg")?,
        })
    }
}

pub struct Rsyslog {
    child: Option<Child>,
    udp_port: u16,
    tcp_port: u16,
    received: PathBuf,
    dir: tempfile::TempDir,
}

impl Rsyslog {
    /// `rsyslogd` on `PATH`, else `/usr/sbin/rsyslogd` (a user's `PATH` may leave `/usr/sbin`
    /// out).
    pub fn find() -> Option<PathBuf> {
        let on_path = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("rsyslogd"))
                .find(|candidate| candidate.is_file())
        });
        on_path.or_else(|| {
            let sbin = PathBuf::from("/usr/sbin/rsyslogd");
            sbin.is_file().then_some(sbin)
        })
    }

    /// A started rsyslogd, or `None` after printing why there is none (a panic under
    /// `CI=true`, as for every test that may not skip there). Panics when rsyslogd is there but
    /// does not start: that is a failure, not something missing.
    pub fn start_or_skip() -> Option<Rsyslog> {
        if Rsyslog::find().is_none() {
            skip(
                "rsyslogd not found (on PATH or in /usr/sbin): the syslog tests need Debian's \
                 rsyslog; `cargo xtask setup` installs it",
            );
            return None;
        }
        Some(Rsyslog::start().unwrap_or_else(|err| panic!("{err:#}")))
    }

    /// Starts a private rsyslogd and waits (bounded) until both inputs take messages: the TCP
    /// port accepts a connection and a probe datagram to the UDP port has been written out.
    pub fn start() -> Result<Rsyslog> {
        let program = Rsyslog::find().context(
            "rsyslogd not found (on PATH or in /usr/sbin); `cargo xtask setup` installs it",
        )?;
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            match Rsyslog::start_once(&program) {
                Ok(rsyslog) => return Ok(rsyslog),
                Err(err) => last_err = Some(err),
            }
        }
        Err(last_err.expect("at least one attempt"))
            .with_context(|| format!("rsyslogd did not start in {START_ATTEMPTS} attempts"))
    }

    fn start_once(program: &Path) -> Result<Rsyslog> {
        let dir = tempfile::Builder::new()
            .prefix("guard-rsyslog-")
            .tempdir()?;
        let work = dir.path().join("work");
        std::fs::create_dir(&work)?;
        let udp_port = free_udp_port()?;
        let conf = dir.path().join("rsyslog.conf");
        let received = dir.path().join("received");
        std::fs::write(&conf, config(dir.path(), udp_port))?;
        let stderr = std::fs::File::create(dir.path().join("stderr"))?;
        let child = Command::new(program)
            .arg("-n")
            .arg("-f")
            .arg(&conf)
            .arg("-i")
            .arg(dir.path().join("rsyslogd.pid"))
            .stdin(Stdio::null())
            .stdout(stderr.try_clone()?)
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("could not run {}", program.display()))?;
        let mut rsyslog = Rsyslog {
            child: Some(child),
            udp_port,
            tcp_port: 0,
            received,
            dir,
        };
        // On an error, dropping `rsyslog` stops the child.
        rsyslog.tcp_port = rsyslog.wait_for_tcp()?;
        rsyslog.wait_for_udp()?;
        Ok(rsyslog)
    }

    /// The TCP port, once it is in the port file and accepts a connection.
    fn wait_for_tcp(&mut self) -> Result<u16> {
        let port_file = self.dir.path().join("tcp.port");
        let start = Instant::now();
        while start.elapsed() < START_TIMEOUT {
            self.ensure_running()?;
            let port = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|text| text.trim().parse::<u16>().ok());
            if let Some(port) = port
                && TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok()
            {
                return Ok(port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!(
            "rsyslogd's TCP input did not come up in {START_TIMEOUT:?}\n{}",
            self.diagnostics()
        )
    }

    /// Sends probes to the UDP port until rsyslogd has written one out.
    fn wait_for_udp(&mut self) -> Result<()> {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        let probe = format!("<14>1 - - guard-test - {PROBE_MSGID} - probe");
        let probes = self.dir.path().join("probes");
        let start = Instant::now();
        while start.elapsed() < START_TIMEOUT {
            self.ensure_running()?;
            // An error (a refusal while the port is not bound yet) just means "not yet".
            let _ = socket.send_to(probe.as_bytes(), (Ipv4Addr::LOCALHOST, self.udp_port));
            if std::fs::metadata(&probes).is_ok_and(|meta| meta.len() > 0) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "rsyslogd's UDP input on port {} did not answer in {START_TIMEOUT:?}\n{}",
            self.udp_port,
            self.diagnostics()
        )
    }

    fn ensure_running(&mut self) -> Result<()> {
        let child = self.child.as_mut().expect("running until dropped");
        if let Some(status) = child.try_wait()? {
            bail!("rsyslogd exited ({status})\n{}", self.diagnostics());
        }
        Ok(())
    }

    pub fn udp_port(&self) -> u16 {
        self.udp_port
    }

    pub fn tcp_port(&self) -> u16 {
        self.tcp_port
    }

    /// The folder with its config, work folder and output files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The lines received so far once there are at least `n`, or all there are when `timeout`
    /// runs out first (polls the file; only complete lines).
    pub fn wait_for_lines(&self, n: usize, timeout: Duration) -> Vec<String> {
        let start = Instant::now();
        loop {
            let lines = self.lines();
            if lines.len() >= n || start.elapsed() >= timeout {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`Rsyslog::wait_for_lines`], parsed. Panics on a line that does not parse.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        self.wait_for_lines(n, timeout)
            .iter()
            .map(|line| Received::parse(line).unwrap_or_else(|err| panic!("{err:#}")))
            .collect()
    }

    fn lines(&self) -> Vec<String> {
        let mut text = String::new();
        if let Ok(mut file) = std::fs::File::open(&self.received) {
            let _ = file.read_to_string(&mut text);
        }
        // A line rsyslogd is still writing has no newline yet.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .split('\n')
            .filter(|line| !line.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Its stderr and its own log messages (config errors, bind failures), for failure reports.
    pub fn diagnostics(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.path().join(name));
        format!(
            "rsyslogd stderr:\n{}\nrsyslogd's own messages:\n{}",
            read("stderr").unwrap_or_default(),
            read("rsyslogd.log").unwrap_or_default()
        )
    }
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::kernel::stop_child(&mut child, Duration::from_secs(5));
        }
    }
}

/// A UDP port on 127.0.0.1 that was free a moment ago.
fn free_udp_port() -> Result<u16> {
    Ok(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The config: UDP on `udp_port` and TCP on a port the kernel picks (written to `tcp.port`),
/// both on 127.0.0.1; probes to `probes`, received messages as JSON lines to `received`, and
/// everything else (rsyslogd's own messages) to `rsyslogd.log`.
fn config(dir: &Path, udp_port: u16) -> String {
    let path = |name: &str| dir.join(name).display().to_string();
    let mut conf = String::new();
    let mut line = |text: &str| {
        conf.push_str(text);
        conf.push('\n');
    };
    // Large enough for a record with a long command line (the default is 8 KiB).
    line(&format!(
        r#"global(workDirectory="{}" maxMessageSize="128k" net.enableDNS="off")"#,
        path("work")
    ));
    line(r#"module(load="imudp")"#);
    line(r#"module(load="imtcp")"#);
    line(r#"module(load="mmpstrucdata")"#);
    line(&format!(
        r#"input(type="imudp" address="127.0.0.1" port="{udp_port}" name="udp")"#
    ));
    line(&format!(
        r#"input(type="imtcp" address="127.0.0.1" port="0" listenPortFileName="{}" name="tcp")"#,
        path("tcp.port")
    ));
    line(r#"template(name="parsed" type="list") {"#);
    line(r#"  constant(value="{")"#);
    let fields = [
        ("pri", "pri", ""),
        ("version", "protocol-version", ""),
        ("timestamp", "timereported", r#" dateFormat="rfc3339""#),
        ("hostname", "hostname", ""),
        ("app_name", "app-name", ""),
        ("procid", "procid", ""),
        ("msgid", "msgid", ""),
        ("sd", "structured-data", ""),
        ("sd_parsed", "$!rfc5424-sd", ""),
        ("input", "inputname", ""),
        ("msg", "msg", ""),
    ];
    for (i, (outname, name, options)) in fields.iter().enumerate() {
        let comma = if i == 0 {
            ""
        } else {
            r#"constant(value=",") "#
        };
        line(&format!(
            r#"  {comma}property(outname="{outname}" name="{name}" format="jsonf"{options})"#
        ));
    }
    line(r#"  constant(value="}\n")"#);
    line("}");
    line(&format!(
        r#"if $msgid == "{PROBE_MSGID}" then {{ action(type="omfile" file="{}") stop }}"#,
        path("probes")
    ));
    line(r#"if $inputname == "udp" or $inputname == "tcp" then {"#);
    line(r#"  action(type="mmpstrucdata")"#);
    line(&format!(
        r#"  action(type="omfile" file="{}" template="parsed")"#,
        path("received")
    ));
    line("  stop");
    line("}");
    line(&format!(
        r#"action(type="omfile" file="{}")"#,
        path("rsyslogd.log")
    ));
    conf
}

/// Writes `bytes` to rsyslogd's TCP input on a connection of its own (for tests that frame
/// messages by hand).
pub fn send_tcp_raw(port: u16, bytes: &[u8]) -> Result<()> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    stream.write_all(bytes)?;
    Ok(())
}
