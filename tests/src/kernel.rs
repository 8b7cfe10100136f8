//! Helpers for the tests that load guard's programs into the running kernel (`kernel_exec`,
//! `kernel_net`, `kernel_approvals`, `kernel_pins`): a [`Session`] per test over rules written to
//! a file of its own (or a bare [`Enforcer`] over a compiled image), the backend to use, skipping
//! (or failing, in CI) where the kernel cannot run them, bounded waits, commands run in a cgroup
//! of the test's own, and a private bpffs for pins.
//!
//! Every test makes its own session: its own programs, maps and a fresh cgroup, and only what it
//! spawns through [`Session::spawn`] is in that scope. Nothing here changes the process
//! environment, so tests may run in parallel threads. The one thing they share is the stand-alone
//! scopes a killed `guard run` leaves: every start removes them ([`starting`], [`no_other_starts`]).

use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use guard::compile::{CompileEnv, EnforcementImage, NoResolver, compile};
use guard::kernel::events::KernelEvent;
use guard::kernel::scope::{ScopeCgroup, join_from_pre_exec};
use guard::kernel::{Backend, Enforcer, pins};
use guard::policy::load::load_policy;
use guard::session::{Session, SessionOptions};

/// What `GUARD_TEST_BACKEND` may say: `lsm` or `cgroup`.
pub const BACKEND_ENV: &str = "GUARD_TEST_BACKEND";
/// A folder holding the helper programs (`argv-racer`, `net-probe`) when they are not where
/// cargo built them (e.g. in the VM of `cargo xtask vm-test`).
pub const HELPERS_ENV: &str = "GUARD_TEST_HELPERS";

/// Whether this run must not skip (`CI=true`): a test that cannot reach the kernel fails there.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Prints one `skipped: <why>` line, or panics with it when [`in_ci`].
pub fn skip(why: &str) {
    if in_ci() {
        panic!("CI=true, so this test may not skip: {why}");
    }
    println!("skipped: {why}");
}

/// The backend the tests use: `GUARD_TEST_BACKEND` (`lsm` or `cgroup`), else the preferred one
/// this kernel allows.
pub fn backend() -> Backend {
    match std::env::var(BACKEND_ENV).as_deref() {
        Ok("lsm") => Backend::Lsm,
        Ok("cgroup") => Backend::Cgroup,
        Ok(other) => panic!("{BACKEND_ENV}={other:?}: use lsm or cgroup"),
        Err(_) => Backend::detect().0,
    }
}

/// The starts under way in this test binary (sessions, daemons, `guard run`s, `guard release`s)
/// and the test thread, if any, that leaves a `guard run`'s scope abandoned. Each of those starts
/// removes the abandoned scopes it finds (`guard::kernel::scope::remove_abandoned_scopes`), so
/// one beside that test would remove its scope (and say so) in its place.
struct Starts {
    under_way: usize,
    alone: Option<ThreadId>,
}

static STARTS: Mutex<Starts> = Mutex::new(Starts {
    under_way: 0,
    alone: None,
});
static STARTS_CHANGED: Condvar = Condvar::new();

fn starts() -> MutexGuard<'static, Starts> {
    STARTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held while something that removes abandoned scopes runs: a session's start, a daemon's life,
/// a `guard run` a test spawns. Waits while another thread holds [`no_other_starts`]; many may be
/// held at once, by any thread.
#[must_use = "held while the start runs"]
pub struct Starting(());

pub fn starting() -> Starting {
    let me = std::thread::current().id();
    let mut state = starts();
    while state.alone.is_some_and(|alone| alone != me) {
        state = STARTS_CHANGED
            .wait(state)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }
    state.under_way += 1;
    Starting(())
}

impl Drop for Starting {
    fn drop(&mut self) {
        starts().under_way -= 1;
        STARTS_CHANGED.notify_all();
    }
}

/// Held by a test that kills a `guard run` with SIGKILL and checks what removes the scope it
/// left: it waits until no other thread's start is under way, and no other thread starts
/// anything ([`starting`]) until it is dropped. Its own thread's starts go on. Take it before
/// any start of the test's own.
#[must_use = "held for the whole test"]
pub struct NoOtherStarts(());

pub fn no_other_starts() -> NoOtherStarts {
    let me = std::thread::current().id();
    let mut state = starts();
    while state.alone.is_some() || state.under_way > 0 {
        state = STARTS_CHANGED
            .wait(state)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }
    state.alone = Some(me);
    NoOtherStarts(())
}

impl Drop for NoOtherStarts {
    fn drop(&mut self) {
        starts().alone = None;
        STARTS_CHANGED.notify_all();
    }
}

/// A running session with the rules file it came from and a temporary folder the test can use
/// (removed on drop, after the session).
pub struct TestSession {
    pub session: Session,
    /// The rules file, as rule origins name it.
    pub rules_file: PathBuf,
    /// The rules text, for [`TestSession::line_of`].
    pub rules: String,
    pub dir: tempfile::TempDir,
}

impl Deref for TestSession {
    type Target = Session;
    fn deref(&self) -> &Session {
        &self.session
    }
}

impl DerefMut for TestSession {
    fn deref_mut(&mut self) -> &mut Session {
        &mut self.session
    }
}

impl TestSession {
    /// The temporary folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The 1-based line of the rules text that contains `needle` (the first one); panics when
    /// none does.
    pub fn line_of(&self, needle: &str) -> usize {
        self.rules
            .lines()
            .position(|line| line.contains(needle))
            .map(|i| i + 1)
            .unwrap_or_else(|| panic!("no line of the rules contains {needle:?}"))
    }

    /// Runs `command` inside the scope, waiting at most `timeout`, retrying (bounded) while the
    /// exec fails with "text file busy" (see [`retry_while_busy`]); the spawn error when the exec
    /// failed (e.g. `PermissionDenied`: refused on the `lsm` backend).
    pub fn run(&self, command: &mut Command, timeout: Duration) -> io::Result<Output> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        retry_while_busy(|| {
            let child =
                self.session
                    .spawn(command)
                    .map_err(|err| match err.downcast::<io::Error>() {
                        Ok(io) => io,
                        Err(other) => io::Error::other(format!("{other:#}")),
                    })?;
            Ok(wait_output(child, timeout))
        })
    }

    /// Polls events until one satisfies `wanted` or `timeout` passes; every event seen, in
    /// order (the matching one last, if any).
    pub fn events_until(
        &mut self,
        timeout: Duration,
        wanted: impl Fn(&KernelEvent) -> bool,
    ) -> Vec<KernelEvent> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let batch = self
                .session
                .poll_events(left.min(Duration::from_millis(100)));
            for event in batch {
                let found = wanted(&event);
                seen.push(event);
                if found {
                    return seen;
                }
            }
            if Instant::now() >= deadline {
                return seen;
            }
        }
    }

    /// The first event satisfying `wanted` within `timeout`; panics naming what did arrive.
    pub fn expect_event(
        &mut self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&KernelEvent) -> bool,
    ) -> KernelEvent {
        let seen = self.events_until(timeout, &wanted);
        match seen.last() {
            Some(event) if wanted(event) => event.clone(),
            _ => panic!("no event for {what} within {timeout:?}; got {seen:#?}"),
        }
    }

    /// Every event that arrives within `quiet` of the last one (at most `limit` in all).
    pub fn drain_events(&mut self, quiet: Duration, limit: Duration) -> Vec<KernelEvent> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            let batch = self.session.poll_events(quiet);
            if batch.is_empty() {
                break;
            }
            seen.extend(batch);
        }
        seen
    }
}

/// Starts a session over `rules` (written to `<tempdir>/test.rules` and loaded the way `guard`
/// loads files, so rule origins have file and line), on [`backend`] unless `options` names one.
/// `None` after printing `skipped: ...` when not root or when the kernel cannot run guard's
/// programs (a panic instead when [`in_ci`]). A rules file that does not parse panics.
pub fn session_or_skip(rules: &str, options: SessionOptions) -> Option<TestSession> {
    session_in_or_skip(
        tempfile::tempdir().expect("making a temporary folder"),
        rules,
        options,
    )
}

/// [`session_or_skip`] with a temporary folder the test has already filled (for example with
/// programs that the rules name and `options.extra_path_dirs` points at).
pub fn session_in_or_skip(
    dir: tempfile::TempDir,
    rules: &str,
    options: SessionOptions,
) -> Option<TestSession> {
    session_from_files_or_skip(dir, &[("test.rules", rules)], options)
}

/// [`session_in_or_skip`] over several files written to the folder and loaded in order (e.g. a
/// `.rules` file and a legacy `.policy` file); the first is [`TestSession::rules_file`].
pub fn session_from_files_or_skip(
    dir: tempfile::TempDir,
    files: &[(&str, &str)],
    mut options: SessionOptions,
) -> Option<TestSession> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("guard's kernel tests need root (they load BPF programs and make cgroups)");
        return None;
    }
    let paths: Vec<PathBuf> = files
        .iter()
        .map(|(name, text)| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("writing a rules file");
            path
        })
        .collect();
    let rules_file = paths[0].clone();
    let rules = files[0].1;
    let loaded = load_policy(&paths, &[])
        .unwrap_or_else(|err| panic!("the test's rules do not load: {err}\n{files:?}"));
    let backend = options.backend.unwrap_or_else(backend);
    options.backend = Some(backend);
    let starting = starting();
    let started = Session::start(loaded.policy, &options);
    drop(starting);
    match started {
        Ok(session) => Some(TestSession {
            session,
            rules_file,
            rules: rules.to_string(),
            dir,
        }),
        Err(err) => {
            skip_unless_rejected(backend, &format!("{err:#}"));
            None
        }
    }
}

/// Skips a test whose programs the kernel would not load, unless the verifier ran and rejected
/// them: a kernel that cannot run them answers at once (EPERM, no verifier log), while a
/// verifier that processed instructions and refused found a bug in the programs, which must
/// fail the test on any machine, `CI=true` or not.
fn skip_unless_rejected(backend: Backend, err: &str) {
    let verified = err.contains("processed ") && err.contains(" insns");
    assert!(
        !verified,
        "the verifier rejected guard's programs on the {} backend (a bug, not a missing kernel \
         feature): {err}",
        backend.as_str()
    );
    skip(&format!(
        "the kernel cannot run guard's programs on the {} backend: {err}",
        backend.as_str()
    ));
}

/// Starts `command` with no stdin and its output piped, and waits for it as [`wait_output`].
pub fn piped_output(command: &mut Command, timeout: Duration) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("starting {:?}: {err}", command.get_program()));
    wait_output(child, timeout)
}

/// Waits for `child` at most `timeout` (killing it then, and panicking), collecting its output.
pub fn wait_output(mut child: Child, timeout: Duration) -> Output {
    wait_status(&mut child, timeout);
    child
        .wait_with_output()
        .expect("reading the child's output")
}

/// Ends a server the test started: SIGTERM, up to `grace` for it to exit, then SIGKILL; it is
/// reaped either way.
pub fn stop_child(child: &mut Child, grace: Duration) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: signals our own child, which has not been waited for (so the pid is its).
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let start = Instant::now();
    while start.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits for `child` at most `timeout` (killing it then, and panicking).
pub fn wait_status(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "pid {} did not finish within {timeout:?}; killed",
                    child.id()
                );
            }
            Err(err) => panic!("waiting for pid {}: {err}", child.id()),
        }
    }
}

/// Whether a status is death by SIGKILL (how the `cgroup` backend refuses an exec, and how
/// either backend refuses by argv).
pub fn killed(status: &ExitStatus) -> bool {
    status.signal() == Some(libc::SIGKILL)
}

/// A helper program of this package (`argv-racer`, `net-probe`): in `$GUARD_TEST_HELPERS`, else
/// where cargo built it (`built`, the test's `env!("CARGO_BIN_EXE_<name>")`), else in a
/// `helpers` folder beside the folder of the running test binary.
pub fn helper(name: &str, built: &str) -> PathBuf {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os(HELPERS_ENV) {
        candidates.push(PathBuf::from(dir).join(name));
    }
    candidates.push(PathBuf::from(built));
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join("helpers").join(name));
    }
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("the helper program {name} is in none of {candidates:?} (set {HELPERS_ENV})")
        })
}

/// The first of `paths` that is a file; panics when none is.
pub fn system_program(paths: &[&str]) -> PathBuf {
    paths
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("none of {paths:?} exists"))
}

/// `touch` (the side effect every exec test looks for: a file that appears or does not).
pub fn touch_program() -> PathBuf {
    system_program(&["/usr/bin/touch", "/bin/touch"])
}

/// `sh`.
pub fn shell_program() -> PathBuf {
    system_program(&["/bin/sh", "/usr/bin/sh"])
}

/// Copies `program` to `dir/name` (a new file: its own inode), keeping its permissions.
pub fn copy_program(program: &Path, dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(program, &to)
        .unwrap_or_else(|err| panic!("copying {} to {}: {err}", program.display(), to.display()));
    to
}

/// Whether this process is root; prints `skipped: ...` (a panic when [`in_ci`]) when it is not.
pub fn root_or_skip() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("guard's kernel tests need root (they load BPF programs and make cgroups)");
        return false;
    }
    true
}

/// Compiles `rules` (written to `<dir>/test.rules`) the way a session does, with `dir` searched
/// first for one-token rules' programs. A rules file that does not parse panics.
pub fn compile_rules(dir: &Path, rules: &str) -> EnforcementImage {
    let rules_file = dir.join("test.rules");
    std::fs::write(&rules_file, rules).expect("writing the rules file");
    let loaded = load_policy(std::slice::from_ref(&rules_file), &[])
        .unwrap_or_else(|err| panic!("the test's rules do not load: {err}\n{rules}"));
    let mut env = CompileEnv::from_process();
    env.path_dirs.insert(0, dir.to_path_buf());
    compile(&loaded.policy, &NoResolver, &env)
}

/// A freshly loaded [`Enforcer`] on [`backend`], nothing scoped yet; `None` after
/// `skipped: ...` when not root or when the kernel cannot run the programs (a panic in CI).
pub fn enforcer_or_skip() -> Option<Enforcer> {
    if !root_or_skip() {
        return None;
    }
    let backend = backend();
    match Enforcer::load(backend) {
        Ok(enforcer) => Some(enforcer),
        Err(err) => {
            skip_unless_rejected(backend, &format!("{err:#}"));
            None
        }
    }
}

/// Starts `command` as a member of `cgroup` (it joins between fork and exec, so its first exec
/// is already decided there).
pub fn spawn_in(cgroup: &ScopeCgroup, command: &mut Command) -> io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let procs = cgroup.procs_path().clone();
    // SAFETY: the closure only makes async-signal-safe calls (open/write/close).
    unsafe { command.pre_exec(move || join_from_pre_exec(&procs)) };
    command.spawn()
}

/// Runs `command` in `cgroup`, waiting at most `timeout`, retrying (bounded) while the exec
/// fails with "text file busy" (see [`retry_while_busy`]). The spawn error when the exec failed.
pub fn run_in(
    cgroup: &ScopeCgroup,
    command: &mut Command,
    timeout: Duration,
) -> io::Result<Output> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    retry_while_busy(|| spawn_in(cgroup, command).map(|child| wait_output(child, timeout)))
}

/// Runs `run` again (for at most 5 s) while its exec failed with ETXTBSY, in the spawn or in a
/// shell the command started. Not a decision of guard's: a test thread copying a program holds
/// it open for writing, and a child another test thread forks meanwhile inherits that
/// descriptor until its own exec closes it; an exec of the copy in that window is "busy".
pub fn retry_while_busy(mut run: impl FnMut() -> io::Result<Output>) -> io::Result<Output> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let result = run();
        let busy = match &result {
            Err(err) => err.kind() == io::ErrorKind::ExecutableFileBusy,
            Ok(output) => String::from_utf8_lossy(&output.stderr).contains("Text file busy"),
        };
        if !busy || Instant::now() > deadline {
            return result;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a run was refused the way either backend refuses an exec: SIGKILL, or EPERM from
/// execve (`lsm`, by identity or name).
pub fn exec_refused(result: &io::Result<Output>) -> bool {
    match result {
        Ok(output) => killed(&output.status),
        Err(err) => err.kind() == io::ErrorKind::PermissionDenied,
    }
}

/// A bpffs of the test's own, mounted on a fresh temporary folder; on drop every pin under it
/// is released and it is unmounted (so nothing a test pinned outlives the test, even when it
/// panics).
pub struct TestBpffs {
    root: PathBuf,
    // Removed after the unmount (fields drop after `drop` runs).
    _dir: tempfile::TempDir,
}

impl TestBpffs {
    /// Mounts it (twice through [`pins::ensure_bpffs`], which must be idempotent).
    pub fn new() -> TestBpffs {
        let dir = tempfile::tempdir().expect("making a temporary folder");
        let root = dir.path().join("bpffs");
        pins::ensure_bpffs(&root)
            .unwrap_or_else(|err| panic!("mounting a bpffs on {}: {err:#}", root.display()));
        let bpffs = TestBpffs { root, _dir: dir };
        pins::ensure_bpffs(&bpffs.root).expect("ensure_bpffs on a bpffs changes nothing");
        assert!(
            pins::is_bpffs(&bpffs.root).unwrap(),
            "{} is a bpffs now",
            bpffs.root.display()
        );
        bpffs
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Default for TestBpffs {
    fn default() -> Self {
        TestBpffs::new()
    }
}

impl Drop for TestBpffs {
    fn drop(&mut self) {
        if let Err(err) = pins::release(&self.root) {
            eprintln!("releasing the pins under {}: {err:#}", self.root.display());
        }
        let target = std::ffi::CString::new(self.root.as_os_str().as_encoded_bytes())
            .expect("a temporary path has no NUL");
        // SAFETY: a NUL-terminated path. MNT_DETACH: unmounted even if something still has it
        // open; the kernel frees what is left pinned in it once the last user is gone.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            eprintln!(
                "unmounting {}: {}",
                self.root.display(),
                io::Error::last_os_error()
            );
        }
    }
}

/// An HTTP server on a loopback port that answers `held-ok` to at most `count` requests (the
/// held-connect tests; 0 accepts nothing, for a connect that must never get through).
pub fn http_server(count: usize) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(count) {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 1024];
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\nheld-ok");
        }
    });
    port
}

/// A pseudo-terminal: (the controller, which a test reads and types on; the terminal's own
/// side, which a command runs on).
pub fn pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut controller, mut terminal) = (0, 0);
    // SAFETY: openpty writes two descriptors; no name, termios or size is asked for.
    let rc = unsafe {
        libc::openpty(
            &mut controller,
            &mut terminal,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both were just made and are owned here alone.
    unsafe {
        (
            OwnedFd::from_raw_fd(controller),
            OwnedFd::from_raw_fd(terminal),
        )
    }
}
