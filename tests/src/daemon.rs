//! A `guard daemon` per test: its own config, rules, state folder, socket, audit log, a private
//! bpffs for its pins and its own cgroup for run scopes. Drop stops it, releases the pins
//! (detaching every program it left), unmounts the bpffs and removes the cgroups, so nothing is
//! left attached whatever the test did.

use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::kernel::{in_ci, skip};
use crate::unit::UnitConfinement;

/// A program's output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Mounts a private bpffs at `dir` (with the syscall: the VM tier has no `mount` program).
fn mount_bpffs(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let target = CString::new(dir.as_os_str().as_bytes()).expect("a path without NUL");
    let bpf = CString::new("bpf").unwrap();
    // SAFETY: NUL-terminated strings that outlive the call; no data argument.
    let rc = unsafe {
        libc::mount(
            bpf.as_ptr(),
            target.as_ptr(),
            bpf.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(
        rc,
        0,
        "mount -t bpf at {}: {}",
        dir.display(),
        std::io::Error::last_os_error()
    );
}

/// Unmounts `dir` (lazily: a pin a test still holds open must not keep the mount busy).
fn unmount(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    if let Ok(target) = CString::new(dir.as_os_str().as_bytes()) {
        // SAFETY: a NUL-terminated string that outlives the call.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// The `guard` binary cargo built next to the test binaries (`GUARD_BIN` overrides).
pub fn guard_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("GUARD_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    dir.join("guard")
}

/// Whether daemon tests can run here: root, a guard with BPF programs, a cgroup backend that
/// loads. `false` after printing why (a panic under `CI=true`).
pub fn can_run() -> bool {
    // SAFETY: no arguments, no memory.
    if unsafe { libc::geteuid() } != 0 {
        skip("the daemon tests need root (they load BPF programs and make cgroups)");
        return false;
    }
    if !guard_bin().is_file() {
        skip(&format!("no guard binary at {}", guard_bin().display()));
        return false;
    }
    true
}

/// How long a held run may wait for its ask, and then for its end.
pub const HELD_WAIT: Duration = Duration::from_secs(30);

/// Waits (at most [`HELD_WAIT`]) for a run from [`TestDaemon::held_run`]: (exit code, stdout,
/// stderr).
pub fn finish_held(mut run: Child) -> (i32, String, String) {
    use std::io::Read;
    let status = crate::kernel::wait_status(&mut run, HELD_WAIT);
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let _ = run.stdout.take().unwrap().read_to_string(&mut stdout);
    let _ = run.stderr.take().unwrap().read_to_string(&mut stderr);
    (status.code().unwrap_or(-1), stdout, stderr)
}

/// `[resolver] enabled = false` for [`DaemonSetup::extra_config`]: the daemon resolves the
/// policy's names itself, before its scopes' programs look them up (as when guard's resolver is
/// not in their path), so a test can connect to a name's address without looking it up.
pub const NAMES_RESOLVED_BY_THE_DAEMON: &str = "[resolver]\nenabled = false\n";

/// What a test changes in the daemon's config before it starts.
#[derive(Clone, Debug, Default)]
pub struct DaemonSetup {
    /// The rules file's text.
    pub rules: String,
    /// Extra TOML lines appended to the generated config.
    pub extra_config: String,
    pub nameserver: Option<SocketAddr>,
    /// A cgroup to start the daemon in (it joins between fork and exec).
    pub daemon_cgroup: Option<PathBuf>,
    /// A legacy policy's text, written to `team.policy` and loaded after the rules.
    pub legacy_policy: Option<String>,
    /// Start the daemon the way `packaging/guard.service` does ([`UnitConfinement`]): its
    /// capabilities, no_new_privs, its read-only folders and /proc. GUARD_TEST_AS_UNIT=1 does
    /// so for every test's daemon.
    pub as_unit: bool,
    /// Start it as plain root even under GUARD_TEST_AS_UNIT=1 (a test of the move to the unit).
    pub as_root: bool,
    /// The front end and its flags in place of `daemon` (`["node", "--kubeconfig", ...]`).
    pub front: Vec<String>,
}

pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub rules_file: PathBuf,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub audit_log: PathBuf,
    pub pin_root: PathBuf,
    pub pin_dir: PathBuf,
    pub run_cgroup: String,
    daemon_cgroup: Option<PathBuf>,
    as_unit: bool,
    front: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
    /// The daemon's stderr, line by line, as it arrives.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Each start of the daemon and the `guard release` on drop remove abandoned scopes.
    _starting: crate::kernel::Starting,
}

/// How long a started daemon may take to answer on its socket.
const DAEMON_ANSWERS_WITHIN: Duration = Duration::from_secs(120);

static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl TestDaemon {
    /// Writes the config and rules, mounts the private bpffs, and starts the daemon (waiting
    /// until its socket answers). Panics with the daemon's output when it does not come up.
    pub fn start(setup: &DaemonSetup) -> TestDaemon {
        Self::start_with_env(setup, &[])
    }

    /// [`TestDaemon::start`] with extra environment variables for the daemon process.
    pub fn start_with_env(setup: &DaemonSetup, env: &[(&str, &str)]) -> TestDaemon {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let rules_file = dir.path().join("team.rules");
        std::fs::write(&rules_file, &setup.rules).expect("writing the rules");
        let pin_root = dir.path().join("bpffs");
        std::fs::create_dir(&pin_root).unwrap();
        mount_bpffs(&pin_root);
        let run_cgroup = format!("guard-test-{}-{n}", std::process::id());
        let mut daemon = TestDaemon {
            config: dir.path().join("guard.toml"),
            socket: dir.path().join("guard.sock"),
            state_dir: dir.path().join("state"),
            audit_log: dir.path().join("audit.jsonl"),
            pin_dir: pin_root.join("guard"),
            pin_root,
            rules_file,
            run_cgroup,
            daemon_cgroup: setup.daemon_cgroup.clone(),
            front: if setup.front.is_empty() {
                vec!["daemon".to_string()]
            } else {
                setup.front.clone()
            },
            as_unit: setup.as_unit
                || (!setup.as_root
                    && std::env::var_os("GUARD_TEST_AS_UNIT").is_some_and(|v| v == "1")),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
            log: Default::default(),
            _starting: crate::kernel::starting(),
            dir,
        };
        let mut rules = vec![daemon.rules_file.clone()];
        if let Some(legacy) = &setup.legacy_policy {
            let path = daemon.dir.path().join("team.policy");
            std::fs::write(&path, legacy).expect("writing the legacy policy");
            rules.push(path);
        }
        let mut config = format!(
            "rules = {:?}\nstate_dir = {:?}\nsocket = {:?}\npin_dir = {:?}\n\
             run_cgroup = {:?}\nbackend = {:?}\n",
            rules,
            daemon.state_dir,
            daemon.socket,
            daemon.pin_dir,
            daemon.run_cgroup,
            crate::kernel::backend().as_str()
        );
        if let Some(ns) = setup.nameserver {
            config.push_str(&format!("nameserver = \"{ns}\"\n"));
        }
        config.push_str(&setup.extra_config);
        std::fs::write(&daemon.config, config).expect("writing the config");
        daemon.spawn();
        daemon
    }

    /// Starts (or restarts) the daemon process on the same config.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the daemon is already running");
        let mut command = Command::new(guard_bin());
        command
            .args(&self.front)
            .arg("--config")
            .arg(&self.config)
            // A flag, so that a test's extra config may have an `[audit]` table of its own.
            .arg("--audit-log")
            .arg(&self.audit_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(cgroup) = &self.daemon_cgroup {
            let procs = procs_path(cgroup);
            // SAFETY: join_from_pre_exec makes only async-signal-safe calls.
            unsafe { command.pre_exec(move || guard::kernel::scope::join_from_pre_exec(&procs)) };
        }
        if self.as_unit {
            UnitConfinement::of_unit().install(&mut command);
        }
        let mut child = command.spawn().expect("starting guard daemon");
        let stderr = child.stderr.take().unwrap();
        let log = self.log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log.lock().unwrap().push(line);
            }
        });
        self.child = Some(child);
        // A bound for a daemon that hangs, not a measure: under emulation (the VM tier) beside
        // other work, a start that loads every program has taken over 30 s.
        let deadline = Instant::now() + DAEMON_ANSWERS_WITHIN;
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "guard daemon exited ({status}) before answering:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "guard daemon did not answer within {DAEMON_ANSWERS_WITHIN:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the next [`TestDaemon::spawn`] starts the daemon as the unit does.
    pub fn set_as_unit(&mut self, as_unit: bool) {
        assert!(self.child.is_none(), "stop the daemon first");
        self.as_unit = as_unit;
    }

    /// What the daemon wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon is running").id()
    }

    /// Sends `signal` and waits (up to 10 s) for the daemon to exit; how long it took.
    pub fn stop_with(&mut self, signal: i32) -> Duration {
        let mut child = self.child.take().expect("the daemon is running");
        let started = Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, signal) };
        let deadline = started + Duration::from_secs(10);
        loop {
            if child.try_wait().unwrap().is_some() {
                return started.elapsed();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon did not exit within 10 s of signal {signal}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `guard ARGS... --socket <this daemon's>` (the socket flag is added where it applies).
    pub fn guard(&self, args: &[&str]) -> Output {
        self.guard_command(args).output().expect("running guard")
    }

    /// `guard run -- PROGRAM ARGS...` under this daemon: (exit code, stdout, stderr). Run
    /// again while the program's exec is "text file busy" (a copy another test thread is
    /// writing; see [`crate::kernel::retry_while_busy`]).
    pub fn run_in_scope(&self, program: &Path, args: &[&str]) -> (i32, String, String) {
        let mut all = vec!["run", "--", program.to_str().expect("a UTF-8 path")];
        all.extend_from_slice(args);
        let out = crate::kernel::retry_while_busy(|| Ok(self.guard(&all))).expect("running guard");
        (
            out.status.code().unwrap_or(-1),
            text(&out.stdout),
            text(&out.stderr),
        )
    }

    /// `net-probe paced PREFIX RATE SECS PROGRESS` (`probe` is net-probe's path) in a scope of
    /// this daemon, started with its stdout piped; `PROGRESS` is in a folder of its own (the
    /// daemon's folder holds protected paths, which `guard run` confines). Returns the run and
    /// the progress file.
    pub fn paced_load(&self, probe: &Path, prefix: &str, rate: u64, secs: u64) -> (Child, PathBuf) {
        let folder = self.dir.path().join("paced");
        std::fs::create_dir_all(&folder).expect("a folder for the progress file");
        let progress = folder.join("progress");
        let run = self
            .guard_command(&[
                "run",
                "--",
                probe.to_str().expect("a UTF-8 path"),
                "paced",
                prefix,
                &rate.to_string(),
                &secs.to_string(),
                progress.to_str().expect("a UTF-8 path"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting guard run");
        (run, progress)
    }

    /// `guard run -- ARGS...` under this daemon, holding its prompted calls (GUARD_NO_HOLD
    /// removed), started with its output piped.
    pub fn held_run(&self, args: &[&str]) -> Child {
        let mut all = vec!["run", "--"];
        all.extend_from_slice(args);
        self.guard_command(&all)
            .env_remove("GUARD_NO_HOLD")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting guard run")
    }

    /// The one pending ask, once it is there (at most [`HELD_WAIT`]); panics with the run's
    /// stderr when `run` ends first, or with the daemon's log when none comes.
    pub fn pending_ask(&self, run: &mut Child) -> serde_json::Value {
        let deadline = Instant::now() + HELD_WAIT;
        loop {
            if let Some(ask) = self.prompts().into_iter().next() {
                return ask;
            }
            if let Ok(Some(status)) = run.try_wait() {
                let mut stderr = String::new();
                let _ = std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut stderr);
                panic!("the run ended ({status}) without an ask: {stderr}");
            }
            if Instant::now() >= deadline {
                // The run's output stays unread: its held command keeps the pipes open.
                let _ = run.kill();
                panic!("no ask within {HELD_WAIT:?}; daemon log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `guard ARGS...` under this daemon. A `guard run` refuses a prompt at once
    /// (GUARD_NO_HOLD=1), as the tests of asks and retries expect; the tests of held calls
    /// remove it.
    pub fn guard_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(guard_bin());
        command
            .args(args)
            .env("GUARD_SOCKET", &self.socket)
            .env("GUARD_NO_HOLD", "1");
        command
    }

    /// The same, as another user (uid and gid `id`, no supplementary groups). The binary and
    /// the working folder are this daemon's temporary folder's, which any user may enter: the
    /// checkout cargo built in may not be (a clone under /root, say).
    pub fn guard_as(&self, id: u32, args: &[&str]) -> Output {
        self.guard_command_as(id, args)
            .output()
            .expect("running guard as another user")
    }

    /// `guard ARGS...` to be run as user and group `id` (no supplementary groups).
    pub fn guard_command_as(&self, id: u32, args: &[&str]) -> Command {
        let bin = self.dir.path().join("guard-for-another-user");
        if !bin.exists() && std::fs::hard_link(guard_bin(), &bin).is_err() {
            std::fs::copy(guard_bin(), &bin).expect("copying guard where another user can run it");
        }
        let mut command = Command::new(&bin);
        command
            .args(args)
            .env("GUARD_SOCKET", &self.socket)
            .env("GUARD_NO_HOLD", "1")
            .current_dir(self.dir.path());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(id) != 0
                    || libc::setuid(id) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command
    }

    /// `guard ... --json` parsed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.guard(args);
        assert!(
            out.status.success(),
            "guard {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "guard {args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// The pending asks (`guard prompts --json`).
    pub fn prompts(&self) -> Vec<serde_json::Value> {
        self.json(&["prompts", "--json"])
            .as_array()
            .cloned()
            .expect("`guard prompts --json` prints a list")
    }

    /// The amendments file.
    pub fn amendments(&self) -> PathBuf {
        self.state_dir.join("rules").join("default.rules")
    }

    /// The cgroup of the `guard run` scopes (`<cgroup2>/<run_cgroup>`).
    pub fn runs_parent(&self) -> PathBuf {
        guard::kernel::scope::cgroup2_root()
            .expect("cgroup2")
            .join(&self.run_cgroup)
    }

    /// A command started inside cgroup `cgroup` (it joins between fork and exec).
    pub fn in_cgroup(cgroup: &Path, program: &Path, args: &[&str]) -> Output {
        let procs = procs_path(cgroup);
        let mut command = Command::new(program);
        command.args(args);
        // SAFETY: join_from_pre_exec makes only async-signal-safe calls.
        unsafe { command.pre_exec(move || guard::kernel::scope::join_from_pre_exec(&procs)) };
        command.output().expect("running a command in a cgroup")
    }
}

fn procs_path(cgroup: &Path) -> std::ffi::CString {
    std::ffi::CString::new(cgroup.join("cgroup.procs").as_os_str().as_encoded_bytes())
        .expect("a path without NUL")
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new(guard_bin())
            .args(["release", "--pin-dir"])
            .arg(&self.pin_dir)
            .output();
        unmount(&self.pin_root);
        // Run scopes left behind: kill what is in them, then remove them and their parent.
        let parent = self.runs_parent();
        for _ in 0..100 {
            let mut busy = false;
            if let Ok(entries) = std::fs::read_dir(&parent) {
                for entry in entries.filter_map(Result::ok) {
                    if entry.path().join("cgroup.procs").exists() {
                        let _ = std::fs::write(entry.path().join("cgroup.kill"), "1");
                        busy |= std::fs::remove_dir(entry.path()).is_err();
                    }
                }
            }
            if !busy && (std::fs::remove_dir(&parent).is_ok() || !parent.exists()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if in_ci() && parent.exists() {
            eprintln!("warning: {} was left behind", parent.display());
        }
    }
}

/// One `guard run` (one scope) that runs `PROGRAM ARGS...` when told to, as often as told, and
/// says how each time went: approvals belong to the scope whose ask they answered, so a retry
/// that an approval lets through must come from the same run.
pub struct RetryingRun {
    run: Child,
    /// Where the shell looks for `go-N` and writes `out-N` and `rc-N` (a folder of its own:
    /// the daemon's folder holds protected paths, which `guard run` confines).
    folder: PathBuf,
    tries: usize,
}

/// Who starts a [`RetryingRun`].
#[derive(Clone, Copy)]
enum Starter {
    Root { hold: bool },
    User(u32),
}

/// How long one try may take to start and finish.
const TRY_WAIT: Duration = Duration::from_secs(20);

impl RetryingRun {
    /// Starts the run; nothing runs until [`RetryingRun::attempt`].
    pub fn start(daemon: &TestDaemon, program: &Path, args: &[&str]) -> RetryingRun {
        Self::start_run(daemon, program, args, Starter::Root { hold: false })
    }

    /// The same, its prompted calls held while they are asked about (GUARD_NO_HOLD removed).
    pub fn start_holding(daemon: &TestDaemon, program: &Path, args: &[&str]) -> RetryingRun {
        Self::start_run(daemon, program, args, Starter::Root { hold: true })
    }

    /// The same, started by user and group `id` (no supplementary groups).
    pub fn start_as(daemon: &TestDaemon, id: u32, program: &Path, args: &[&str]) -> RetryingRun {
        Self::start_run(daemon, program, args, Starter::User(id))
    }

    fn start_run(daemon: &TestDaemon, program: &Path, args: &[&str], by: Starter) -> RetryingRun {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let folder = daemon.dir.path().join(format!("retrying-{n}"));
        std::fs::create_dir_all(&folder).expect("a folder for the tries");
        if let Starter::User(id) = by {
            std::os::unix::fs::chown(&folder, Some(id), Some(id))
                .expect("giving the user the folder");
        }
        let mut command = shlex::try_quote(program.to_str().expect("a UTF-8 path"))
            .expect("a quotable path")
            .into_owned();
        for arg in args {
            command.push(' ');
            command.push_str(&shlex::try_quote(arg).expect("a quotable argument"));
        }
        // Each try waits for its go file (at most 60 s in all), runs, and leaves its output and
        // exit code; `stop` ends the loop.
        let script = format!(
            "cd {dir} || exit 125; i=0; while [ $i -lt 100 ]; do n=0; \
             while [ ! -e go-$i ] && [ ! -e stop ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done; \
             [ -e go-$i ] || exit 0; {command} > out-$i 2>&1; echo $? > rc-$i.part; mv rc-$i.part rc-$i; \
             i=$((i+1)); done",
            dir = shlex::try_quote(folder.to_str().expect("a UTF-8 path")).expect("quotable"),
        );
        let run_args = ["run", "--", "sh", "-c", &script];
        let mut command = match by {
            Starter::User(id) => daemon.guard_command_as(id, &run_args),
            Starter::Root { hold } => {
                let mut command = daemon.guard_command(&run_args);
                if hold {
                    command.env_remove("GUARD_NO_HOLD");
                }
                command
            }
        };
        let run = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting guard run");
        RetryingRun {
            run,
            folder,
            tries: 0,
        }
    }

    /// Runs the program once more in the run's scope: its exit code and output.
    pub fn attempt(&mut self) -> (i32, String) {
        let i = self.tries;
        self.tries += 1;
        std::fs::write(self.folder.join(format!("go-{i}")), "").expect("writing the go file");
        let rc = self.folder.join(format!("rc-{i}"));
        let deadline = Instant::now() + TRY_WAIT;
        while !rc.exists() {
            if let Ok(Some(status)) = self.run.try_wait() {
                panic!("the run ended ({status}) before try {i}");
            }
            assert!(Instant::now() < deadline, "try {i} did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
        let code = std::fs::read_to_string(&rc)
            .ok()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or(-1);
        let out = std::fs::read_to_string(self.folder.join(format!("out-{i}"))).unwrap_or_default();
        (code, out)
    }
}

impl Drop for RetryingRun {
    fn drop(&mut self) {
        let _ = std::fs::write(self.folder.join("stop"), "");
        let deadline = Instant::now() + TRY_WAIT;
        while matches!(self.run.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.run.kill();
        let _ = self.run.wait();
    }
}
