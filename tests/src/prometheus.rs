//! A private Prometheus server per test, the scraper `daemon_metrics` checks the daemon's
//! `/metrics` with: Debian's `prometheus` binary run with a config, storage folder and port of
//! its own (a temporary folder, `127.0.0.1:<free port>`), scraping one target every second. The
//! system's service (`prometheus.service`, `/etc/prometheus`, `/var/lib/prometheus`) is never
//! touched. Drop stops it (SIGTERM, then SIGKILL) and waits for it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::kernel::skip;

/// How long start-up may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Start-up attempts: the port is chosen free before Prometheus binds it, so another process
/// may take it in between.
const START_ATTEMPTS: usize = 3;
/// How long one HTTP exchange with it may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Prometheus {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// `prometheus` on `PATH`, else `/usr/bin/prometheus` (Debian's).
    pub fn find() -> Option<PathBuf> {
        let on_path = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("prometheus"))
                .find(|candidate| candidate.is_file())
        });
        on_path.or_else(|| {
            let bin = PathBuf::from("/usr/bin/prometheus");
            bin.is_file().then_some(bin)
        })
    }

    /// A started Prometheus scraping `target` (`IP:PORT`, path `/metrics`) every second, or
    /// `None` after printing why there is none (a panic under `CI=true`). Panics when the
    /// program is there but does not start: that is a failure, not something missing.
    pub fn start_or_skip(target: SocketAddr) -> Option<Prometheus> {
        if Prometheus::find().is_none() {
            skip(
                "prometheus not found (on PATH or in /usr/bin): the metrics test needs Debian's \
                 prometheus; `cargo xtask setup` installs it",
            );
            return None;
        }
        Some(Prometheus::start(target).unwrap_or_else(|err| panic!("{err:#}")))
    }

    pub fn start(target: SocketAddr) -> Result<Prometheus> {
        let program =
            Prometheus::find().context("prometheus not found; `cargo xtask setup` installs it")?;
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            match Prometheus::start_once(&program, target) {
                Ok(prometheus) => return Ok(prometheus),
                Err(err) => last_err = Some(err),
            }
        }
        Err(last_err.expect("at least one attempt"))
            .with_context(|| format!("prometheus did not start in {START_ATTEMPTS} attempts"))
    }

    fn start_once(program: &Path, target: SocketAddr) -> Result<Prometheus> {
        let dir = tempfile::Builder::new()
            .prefix("guard-prometheus-")
            .tempdir()?;
        let port = free_tcp_port()?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: guard\n    static_configs:\n      \
                 - targets: [\"{target}\"]\n"
            ),
        )?;
        let log = std::fs::File::create(dir.path().join("log"))?;
        let child = Command::new(program)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("could not run {}", program.display()))?;
        let mut prometheus = Prometheus {
            child: Some(child),
            port,
            dir,
        };
        // On an error, dropping `prometheus` stops the child.
        prometheus.wait_ready()?;
        Ok(prometheus)
    }

    /// Until `/-/ready` answers 200.
    fn wait_ready(&mut self) -> Result<()> {
        let start = Instant::now();
        while start.elapsed() < START_TIMEOUT {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                bail!("prometheus exited ({status})\n{}", self.log());
            }
            if let Ok((200, _)) = http_get(self.port, "/-/ready") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "prometheus on port {} was not ready in {START_TIMEOUT:?}\n{}",
            self.port,
            self.log()
        )
    }

    /// Its log (stdout and stderr), for a failure's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// An instant query over the HTTP API (`/api/v1/query`): its `data.result` array.
    pub fn query(&self, promql: &str) -> Result<Vec<Value>> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let (status, body) = http_get(self.port, &path)?;
        let value: Value = serde_json::from_str(&body)
            .with_context(|| format!("the query API answered {status} with no JSON: {body}"))?;
        if value["status"] != "success" {
            bail!("query {promql:?} failed ({status}): {body}");
        }
        value["data"]["result"]
            .as_array()
            .cloned()
            .with_context(|| format!("no data.result in {body}"))
    }

    /// The value of the first series `promql` answers, as Prometheus sends it (a string).
    pub fn value(&self, promql: &str) -> Result<Option<String>> {
        Ok(self
            .query(promql)?
            .first()
            .and_then(|series| series["value"][1].as_str().map(str::to_string)))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            crate::kernel::stop_child(&mut child, Duration::from_secs(10));
        }
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_tcp_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// `GET path` from 127.0.0.1:`port` over HTTP/1.1 with `Connection: close`: (status, body).
pub fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    let mut stream =
        TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), HTTP_TIMEOUT)?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = String::from_utf8(answer).context("the answer is not UTF-8")?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("no end of head in {answer:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status in {head:?}"))?;
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    Ok((
        status,
        if chunked {
            unchunk(body)?
        } else {
            body.to_string()
        },
    ))
}

/// A chunked body, joined.
fn unchunk(mut body: &str) -> Result<String> {
    let mut out = String::new();
    for _ in 0..100_000 {
        let (size, rest) = body
            .split_once("\r\n")
            .context("a chunk without its size")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("a chunk size {size:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).context("a chunk shorter than its size")?);
        body = rest.get(size + 2..).context("a chunk without its end")?;
    }
    bail!("more than 100000 chunks")
}

/// `text` as a URL query value: unreserved characters as they are, every other byte `%XX`.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
