//! The end of `cargo xtask run`: the same embedded default policy held by a `guard daemon`, a
//! command whose prompted exec is held while it asks, the ask listed and approved once, and the
//! held command going on. Everything lives
//! in a temporary folder (state, socket, pins on a private bpffs, a cgroup of its own), and is
//! stopped, released and removed at the end whatever happened.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

const PUSH: &str =
    "git push --dry-run guard-demo-no-such-remote main; echo \"git push: exit status $?\"";

struct Demo {
    guard: PathBuf,
    dir: PathBuf,
    socket: PathBuf,
    pins: PathBuf,
    run_cgroup: String,
    daemon: Option<Child>,
}

impl Demo {
    fn guard(&self, args: &[&str]) -> Result<std::process::ExitStatus> {
        println!();
        println!("=== guard {}", args.join(" "));
        Command::new(&self.guard)
            .args(args)
            .env("GUARD_SOCKET", &self.socket)
            .status()
            .context("running guard")
    }

    fn stdout(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.guard)
            .args(args)
            .env("GUARD_SOCKET", &self.socket)
            .output()
            .context("running guard")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Some(mut daemon) = self.daemon.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
            let _ = daemon.wait();
        }
        let _ = Command::new(&self.guard)
            .args(["release", "--pin-dir"])
            .arg(self.pins.join("guard"))
            .stdout(Stdio::null())
            .status();
        let _ = Command::new("umount").arg(&self.pins).status();
        if let Some(root) = cgroup2_root() {
            let parent = root.join(&self.run_cgroup);
            if let Ok(entries) = std::fs::read_dir(&parent) {
                for entry in entries.filter_map(Result::ok) {
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
            let _ = std::fs::remove_dir(parent);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The id of the first ask the daemon lists, once there is one (at most 30 s); an error when
/// `run` ends first or none comes.
fn first_ask(demo: &Demo, run: &mut Child) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let asks: serde_json::Value =
            serde_json::from_str(&demo.stdout(&["prompts", "--json"])?).unwrap_or_default();
        if let Some(id) = asks.get(0).and_then(|a| a["id"].as_u64()) {
            return Ok(id);
        }
        if let Some(status) = run.try_wait()? {
            bail!("the run ended ({status}) and the daemon listed no ask for `git push`");
        }
        if Instant::now() > deadline {
            bail!("the daemon listed no ask for `git push` within 30 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for `child` at most `limit`; killed (and an error) past it.
fn wait_bounded(child: &mut Child, limit: Duration) -> Result<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the held run did not end within {limit:?} of the approval");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mount_point))
    })
}

/// Runs the daemon part of the demo with the release build of `guard` at `guard`.
pub fn run(guard: &Path) -> Result<i32> {
    let dir = std::env::temp_dir().join(format!("guard-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut demo = Demo {
        guard: guard.to_path_buf(),
        socket: dir.join("guard.sock"),
        pins: dir.join("bpffs"),
        run_cgroup: format!("guard-demo-{}", std::process::id()),
        dir,
        daemon: None,
    };
    std::fs::create_dir_all(&demo.pins)?;
    let mounted = Command::new("mount")
        .args(["-t", "bpf", "bpf"])
        .arg(&demo.pins)
        .status()?;
    if !mounted.success() {
        bail!("mount -t bpf failed (the daemon demo needs root)");
    }
    let config = demo.dir.join("guard.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\nsocket = {:?}\npin_dir = {:?}\nrun_cgroup = {:?}\n\n[audit]\npath = {:?}\n",
            demo.dir.join("state"),
            demo.socket,
            demo.pins.join("guard"),
            demo.run_cgroup,
            demo.dir.join("audit.jsonl")
        ),
    )?;
    println!();
    println!(
        "=== guard daemon --config {}   (the embedded default policy, in the background)",
        config.display()
    );
    demo.daemon = Some(
        Command::new(&demo.guard)
            .arg("daemon")
            .arg("--config")
            .arg(&config)
            // No system rules folder: the embedded default policy.
            .env("GUARD_SYSTEM_RULES", demo.dir.join("no-system-rules"))
            .stdin(Stdio::null())
            .spawn()
            .context("starting guard daemon")?,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&demo.socket).is_err() {
        if Instant::now() > deadline {
            bail!("the daemon did not answer within 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The push is held in its exec while the daemon asks: the run waits in the background.
    println!();
    println!(
        "=== guard run -- sh -c '{PUSH}'   (in the background: its push waits for the answer)"
    );
    let mut held = Command::new(&demo.guard)
        .args(["run", "--", "sh", "-c", PUSH])
        .env("GUARD_SOCKET", &demo.socket)
        .stdin(Stdio::null())
        .spawn()
        .context("starting guard run")?;
    let asked = first_ask(&demo, &mut held);
    let id = match asked {
        Ok(id) => id,
        Err(err) => {
            let _ = held.kill();
            let _ = held.wait();
            return Err(err);
        }
    };
    demo.guard(&["prompts"])?;
    demo.guard(&["approve", &id.to_string(), "--once"])?;
    // Approved once: the held push goes on (and fails on its own: the remote does not exist).
    let status = wait_bounded(&mut held, Duration::from_secs(60))?;
    println!("=== the held run ended: {status}");
    demo.guard(&["status"])?;
    // What the audit log holds of it: the decision, the ask and its approval, each with the
    // rule's file and line.
    demo.guard(&[
        "audit", "--type", "decision", "--type", "ask", "--type", "approval",
    ])?;
    Ok(0)
}
