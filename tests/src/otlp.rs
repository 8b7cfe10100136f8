//! A private OTLP/HTTP logs receiver per test (`otlp_receiver.py`, built on PyPI's
//! `opentelemetry-proto`, the official protobuf definitions): what the daemon's
//! `[export.otlp]` sends, decoded by someone else's code, one JSON line per log record.
//! Drop stops it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::kernel::skip;

/// Where `cargo xtask setup` installs the Python packages (outside the clone, once per
/// machine); xtask/src/setup.rs names the same folder.
pub const PYTHON_PACKAGES: &str = "/usr/local/lib/guard-tests/python";

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/otlp_receiver.py");

pub struct OtlpReceiver {
    child: Child,
    pub port: u16,
    pub out: PathBuf,
    _dir: tempfile::TempDir,
}

impl OtlpReceiver {
    /// A receiver that decodes and keeps everything; `None` (after one `skipped:` line, a
    /// failure under `CI=true`) where the packages are not installed.
    pub fn start_or_skip() -> Option<OtlpReceiver> {
        Self::start_with_or_skip(&[])
    }

    /// With the script's options: `["--status", "503"]` fails every request.
    pub fn start_with_or_skip(options: &[&str]) -> Option<OtlpReceiver> {
        let marker = Path::new(PYTHON_PACKAGES).join("opentelemetry/proto/collector/logs/v1");
        if !marker.is_dir() {
            skip(&format!(
                "no opentelemetry-proto in {PYTHON_PACKAGES} (`cargo xtask setup` installs it)"
            ));
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary folder");
        let out = dir.path().join("received.jsonl");
        let mut child = Command::new("python3")
            .arg(SCRIPT)
            .arg(&out)
            .args(options)
            .env("PYTHONPATH", PYTHON_PACKAGES)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("the receiver's port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the receiver did not start: {line:?}"));
        Some(OtlpReceiver {
            child,
            port,
            out,
            _dir: dir,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every log record received so far.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("the receiver writes JSON lines"))
            .collect()
    }

    /// Waits (at most `within`) until `done` holds for what was received, and returns it.
    pub fn wait_for(&self, within: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let received = self.received();
            if done(&received) || Instant::now() >= deadline {
                return received;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
