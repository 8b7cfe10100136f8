//! A real browser for the console's tests: Debian's headless Chromium driven through its
//! WebDriver (`chromedriver` on a loopback port of its own, a fresh profile per browser), with
//! fantoccini as the WebDriver client. Drop ends the session and stops the driver.

use std::future::Future;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

use crate::kernel::skip;

/// How long the driver may take to listen.
const DRIVER_START: Duration = Duration::from_secs(20);

pub struct Browser {
    pub client: Client,
    driver: Child,
    runtime: tokio::runtime::Runtime,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A headless Chromium; `None` (after one `skipped:` line, a failure under `CI=true`)
    /// where Chromium or its driver is not installed.
    pub fn start_or_skip() -> Option<Browser> {
        let (Some(chromium), Some(driver)) = (on_path("chromium"), on_path("chromedriver")) else {
            skip("no chromium or chromedriver (`cargo xtask setup` installs Debian's)");
            return None;
        };
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let deadline = Instant::now() + DRIVER_START;
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().expect("a profile folder");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                // As root, Chromium's own sandbox cannot start; the page is the test's own.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--no-first-run", "--window-size=1400,1000",
                         format!("--user-data-dir={}", profile.path().display())],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = runtime
            .block_on(
                ClientBuilder::new(connector)
                    .capabilities(capabilities)
                    .connect(&format!("http://127.0.0.1:{port}")),
            )
            .expect("a WebDriver session");
        Some(Browser {
            client,
            driver,
            runtime,
            _profile: profile,
        })
    }

    /// Runs `work` (with the client) to its end.
    pub fn run<F: Future>(&self, work: F) -> F::Output {
        self.runtime.block_on(work)
    }

    /// A screenshot of the page, written to `path` (PNG).
    pub fn screenshot(&self, path: &Path) {
        let png = self.run(self.client.screenshot()).expect("a screenshot");
        std::fs::write(path, png).expect("writing the screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let client = self.client.clone();
        let _ = self.runtime.block_on(client.close());
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn on_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}
