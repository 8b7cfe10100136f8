//! The end of `cargo xtask run`: the same embedded default policy held by a `guard daemon`, a
//! command whose prompted exec is held while it asks, the ask listed and approved once, and the
//! held command going on. Everything lives in a temporary folder (state, socket, pins on a
//! private bpffs, a cgroup of its own), so nothing a real daemon on the host uses is touched;
//! at the end, whatever happened, the daemon is stopped, its pinned programs released, the bpffs
//! unmounted, its cgroups and the folder removed, and the demo says so (and fails if anything is
//! left).

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
    /// Whether `pins` is a bpffs mounted by the demo (to release and unmount).
    mounted: bool,
    daemon: Option<Child>,
    /// Set once `release` ran: `Drop` releases only what an early return left.
    released: bool,
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

impl Demo {
    /// Stops the daemon and releases everything the demo loaded or made, in that order (pins
    /// go once no daemon can pin again; the bpffs once its pins are gone; cgroups once their
    /// processes are). Returns what it did and, separately, what is still there.
    fn release(&mut self) -> (Vec<String>, Vec<String>) {
        self.released = true;
        let mut done = Vec::new();
        if let Some(mut daemon) = self.daemon.take() {
            let pid = daemon.id();
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            // It stops within a second on SIGTERM; past 10 s it is killed.
            match wait_bounded(&mut daemon, Duration::from_secs(10)) {
                Ok(status) => done.push(format!("stopped guard daemon (pid {pid}): {status}")),
                Err(_) => done.push(format!("killed guard daemon (pid {pid}): no stop in 10 s")),
            }
        }
        if self.mounted {
            let pin_dir = self.pins.join("guard");
            // The demo daemon's pins only: `--pin-dir` names its private folder, and its socket
            // is asked (it is stopped) so a daemon of the host is never the one released.
            let released = Command::new(&self.guard)
                .args(["release", "--pin-dir"])
                .arg(&pin_dir)
                .arg("--socket")
                .arg(&self.socket)
                .stderr(Stdio::inherit())
                .output();
            match released {
                Ok(out) => done.extend(
                    String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .map(|line| format!("guard release: {line}")),
                ),
                Err(err) => done.push(format!("guard release did not run: {err}")),
            }
            if Command::new("umount")
                .arg(&self.pins)
                .status()
                .is_ok_and(|s| s.success())
            {
                self.mounted = false;
                done.push(format!(
                    "unmounted the demo's bpffs at {}",
                    self.pins.display()
                ));
            }
        }
        if let Some(root) = cgroup2_root() {
            let parent = root.join(&self.run_cgroup);
            if parent.exists() {
                let scopes = remove_cgroup_tree(&parent);
                if !parent.exists() {
                    done.push(format!(
                        "removed the cgroup {} and its {scopes} run scope(s)",
                        parent.display()
                    ));
                }
            }
        }
        if std::fs::remove_dir_all(&self.dir).is_ok() {
            done.push(format!("removed {}", self.dir.display()));
        }
        (done, self.left_behind())
    }

    /// What of the demo is still on the machine: the daemon's pins or their bpffs, its cgroup,
    /// its folder.
    fn left_behind(&self) -> Vec<String> {
        let mut left = Vec::new();
        if mounted_at(&self.pins) {
            left.push(format!("a bpffs mounted at {}", self.pins.display()));
        }
        if let Some(root) = cgroup2_root() {
            let parent = root.join(&self.run_cgroup);
            if parent.exists() {
                left.push(format!("the cgroup {}", parent.display()));
            }
        }
        if self.dir.exists() {
            left.push(format!("the folder {}", self.dir.display()));
        }
        left
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // An early return (an error): release all the same, and say what.
        let (done, left) = self.release();
        for line in done {
            println!("released: {line}");
        }
        for thing in left {
            eprintln!("left behind: {thing}");
        }
    }
}

/// Removes the cgroup at `path` and the cgroups below it (deepest first, at most 4 levels: the
/// daemon makes one); the number of cgroups removed below it.
fn remove_cgroup_tree(path: &Path) -> usize {
    fn remove(path: &Path, depth: usize) -> usize {
        let mut removed = 0;
        if depth < 4
            && let Ok(entries) = std::fs::read_dir(path)
        {
            for entry in entries.filter_map(Result::ok) {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    removed += remove(&entry.path(), depth + 1);
                    if std::fs::remove_dir(entry.path()).is_ok() {
                        removed += 1;
                    }
                }
            }
        }
        removed
    }
    let removed = remove(path, 0);
    let _ = std::fs::remove_dir(path);
    removed
}

/// Whether a file system is mounted at `path` (/proc/self/mountinfo).
fn mounted_at(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|mounts| {
        mounts
            .lines()
            .any(|line| line.split_whitespace().nth(4) == Some(&*path.to_string_lossy()))
    })
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
        mounted: false,
        daemon: None,
        released: false,
    };
    std::fs::create_dir_all(&demo.pins)?;
    let mounted = Command::new("mount")
        .args(["-t", "bpf", "bpf"])
        .arg(&demo.pins)
        .status()?;
    if !mounted.success() {
        bail!("mount -t bpf failed (the daemon demo needs root)");
    }
    demo.mounted = true;
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
    println!();
    println!("=== the demo releases what it loaded");
    let (done, left) = demo.release();
    for line in done {
        println!("{line}");
    }
    if !left.is_empty() {
        bail!("the demo left behind: {}", left.join("; "));
    }
    println!("nothing of the demo is left: no pins, no bpffs, no cgroup, no folder");
    Ok(0)
}
