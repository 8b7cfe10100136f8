//! Pinned links in the real kernel: enforcement outlives the Enforcer that set it up (dropped, or
//! its process killed with SIGKILL), a new Enforcer takes over with no moment where a forbidden
//! exec runs or a denied connect goes through, and releasing the pins leaves nothing behind.
//!
//! Every test pins in a bpffs of its own ([`TestBpffs`], released and unmounted on drop) and
//! enforces in a cgroup of its own; all traffic stays on loopback. Needs root; without it, or
//! where the kernel cannot run the programs, each test prints `skipped: ...` (and fails when
//! CI=true).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{LSM_HOOKS, net_probe};
use aya::programs::links::{FdLink, PinnedLink};
use guard::compile::EnforcementImage;
use guard::kernel::scope::ScopeCgroup;
use guard::kernel::{Backend, Enforcer, pins};
use guard_tests::kernel::{
    TestBpffs, backend, compile_rules, copy_program, enforcer_or_skip, exec_refused, helper,
    run_in, touch_program, wait_status,
};

const RUN_TIMEOUT: Duration = Duration::from_secs(20);

static CGROUPS: AtomicU32 = AtomicU32::new(0);

/// What each test enforces: a forbidden program and a denied loopback destination.
struct Fixture {
    dir: tempfile::TempDir,
    program: PathBuf,
    probe: PathBuf,
    /// Something listens there, so a connect that gets through succeeds.
    _listener: TcpListener,
    port: u16,
    image: EnforcementImage,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("making a temporary folder");
        let program = copy_program(&touch_program(), dir.path(), "gt-pinned");
        let listener = TcpListener::bind("127.0.0.4:0").expect("listening on 127.0.0.4");
        let port = listener.local_addr().unwrap().port();
        let rules = format!(
            "prefix_rule(pattern=[\"gt-pinned\"], decision=\"forbidden\")\n\
             address_rule(addresses=[\"127.0.0.4\"], ports=[{port}], decision=\"deny\")\n"
        );
        let image = compile_rules(dir.path(), &rules);
        Fixture {
            dir,
            program,
            probe: net_probe(),
            _listener: listener,
            port,
            image,
        }
    }

    fn cgroup(&self) -> ScopeCgroup {
        let n = CGROUPS.fetch_add(1, Ordering::Relaxed);
        ScopeCgroup::create(&format!("pins-{}-{n}", std::process::id())).expect("making a cgroup")
    }

    /// Loads, fills, attaches to and scopes `cgroup` (the handover's first steps, before pinning).
    fn enforce(&self, mut enforcer: Enforcer, cgroup: &ScopeCgroup) -> Enforcer {
        enforcer.apply(&self.image).expect("applying the image");
        enforcer
            .attach_cgroup(cgroup.path())
            .expect("attaching to the cgroup");
        enforcer.add_scope(cgroup.id()).expect("scoping the cgroup");
        enforcer
    }

    /// Whether `gt-pinned` runs in `cgroup` (its marker appears); panics on anything but a run
    /// or a refusal.
    fn exec_runs(&self, cgroup: &ScopeCgroup, marker: &Path) -> bool {
        let result = run_in(cgroup, Command::new(&self.program).arg(marker), RUN_TIMEOUT);
        if exec_refused(&result) {
            assert!(!marker.exists(), "refused, yet {} exists", marker.display());
            return false;
        }
        match result {
            Ok(output) if output.status.success() && marker.exists() => true,
            other => panic!(
                "gt-pinned in {}: neither ran nor refused: {other:?}",
                cgroup.path().display()
            ),
        }
    }

    /// What `net-probe tcp` to the denied destination says from `cgroup`: `ok` or `errno N`.
    fn connect(&self, cgroup: &ScopeCgroup) -> String {
        let output = run_in(
            cgroup,
            Command::new(&self.probe).args(["tcp", "127.0.0.4", &self.port.to_string()]),
            RUN_TIMEOUT,
        )
        .expect("net-probe starts");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    #[track_caller]
    fn assert_enforced(&self, cgroup: &ScopeCgroup, when: &str) {
        let marker = self.marker(when);
        assert!(
            !self.exec_runs(cgroup, &marker),
            "gt-pinned ran {when}: it must be refused"
        );
        assert_eq!(
            self.connect(cgroup),
            format!("errno {}", libc::EPERM),
            "the denied connect {when}"
        );
    }

    /// Nothing enforces any more, within a second: the kernel unregisters a tracepoint
    /// program when its last link goes, but a CPU already inside the tracepoint may still run it
    /// (the probe list is freed after an RCU grace period), so an exec at that very moment can
    /// still meet it. Seen once in a run on a loaded machine.
    #[track_caller]
    fn assert_not_enforced(&self, cgroup: &ScopeCgroup, when: &str) {
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut tries = 0;
        loop {
            tries += 1;
            let marker = self.marker(&format!("{when} (try {tries})"));
            if self.exec_runs(cgroup, &marker) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "gt-pinned is refused {when} ({tries} tries in a second)"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(self.connect(cgroup), "ok", "the connect {when}");
    }

    fn marker(&self, when: &str) -> PathBuf {
        let name: String = when
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        self.dir.path().join(format!("marker-{name}"))
    }
}

/// Execs `gt-pinned` in a cgroup over and over from another thread until stopped (bounded: 120 s
/// or 5000 runs), to catch any moment of a handover where it would run.
struct Hammer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(u32, Vec<PathBuf>)>,
}

impl Hammer {
    fn start(program: &Path, cgroup: &ScopeCgroup, markers: &Path) -> Hammer {
        let stop = Arc::new(AtomicBool::new(false));
        let (program, markers) = (program.to_path_buf(), markers.to_path_buf());
        std::fs::create_dir_all(&markers).unwrap();
        // The thread needs the cgroup's procs path only; the test keeps the cgroup alive.
        let procs = cgroup.procs_path().clone();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let (mut runs, mut ran) = (0u32, Vec::new());
            while !flag.load(Ordering::Relaxed) && runs < 5000 && Instant::now() < deadline {
                let marker = markers.join(runs.to_string());
                let mut command = Command::new(&program);
                command
                    .arg(&marker)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                let procs = procs.clone();
                use std::os::unix::process::CommandExt;
                // SAFETY: only async-signal-safe calls between fork and exec.
                unsafe {
                    command.pre_exec(move || guard::kernel::scope::join_from_pre_exec(&procs))
                };
                // A spawn error is EPERM (a refusal on `lsm`) or another test's "text file
                // busy": either way nothing ran, which the marker shows.
                if let Ok(mut child) = command.spawn() {
                    let _ = wait_status(&mut child, RUN_TIMEOUT);
                }
                if marker.exists() {
                    ran.push(marker);
                }
                runs += 1;
            }
            (runs, ran)
        });
        Hammer { stop, thread }
    }

    /// Stops it; panics if `gt-pinned` ever ran, or never was tried.
    fn finish(self, what: &str) {
        self.stop.store(true, Ordering::Relaxed);
        let (runs, ran) = self.thread.join().expect("the hammer thread panicked");
        println!("{what}: gt-pinned refused {runs} times in a row");
        assert!(runs > 0, "{what}: the hammer never ran");
        assert!(
            ran.is_empty(),
            "{what}: gt-pinned ran {} of {runs} times: {ran:?}",
            ran.len()
        );
    }
}

/// The names of the files in `dir`.
fn pin_names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// What an Enforcer pins on `backend`: every link, one file each.
/// The pins an Enforcer makes, in the order it attaches: its global programs, then per cgroup
/// sock_create, cgroup/dev, the unix socket hooks where the kernel has them, and on the cgroup
/// backend the sock_addr hooks; each numbered in that order.
fn expected_pins(backend: Backend, unix: bool) -> BTreeSet<String> {
    let mut names: Vec<&str> = match backend {
        Backend::Cgroup => vec!["sched_process_exec"],
        Backend::Lsm => std::iter::once("sched_process_exec")
            .chain(LSM_HOOKS.iter().copied())
            .collect(),
    };
    names.extend(["sock_create", "device_access"]);
    if unix {
        names.extend(["connect_unix", "sendmsg_unix"]);
    }
    if backend == Backend::Cgroup {
        names.extend([
            "connect4", "connect6", "sendmsg4", "sendmsg6", "recvmsg4", "recvmsg6",
        ]);
    }
    names
        .iter()
        .enumerate()
        .map(|(i, name)| format!("{name}-{i}"))
        .collect()
}

/// The kernel ids of the programs the links pinned in `dir` run.
fn pinned_program_ids(dir: &Path) -> Vec<u32> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let link = FdLink::from(
                PinnedLink::from_pin(&path)
                    .unwrap_or_else(|err| panic!("opening the pin {}: {err}", path.display())),
            );
            link.info()
                .unwrap_or_else(|err| panic!("{} is not a link: {err}", path.display()))
                .program_id()
        })
        .collect()
}

/// Waits (bounded: 3 s; freeing is RCU-deferred) until none of `ids` is loaded.
#[track_caller]
fn assert_unloaded(ids: &[u32], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: Vec<u32> = aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .map(|info| info.id())
            .filter(|id| ids.contains(id))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "3 s after {what}, programs {left:?} of {ids:?} are still loaded"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Daemon B's half of the handover: a fresh Enforcer that enforces in `cgroup`, pins in
/// `<root>/gen-2`, then releases `<root>/gen-1` (whose programs must then be gone). Returns B.
fn take_over(fixture: &Fixture, bpffs: &TestBpffs, cgroup: &ScopeCgroup) -> Enforcer {
    let gen1 = bpffs.root().join("gen-1");
    let old_programs = pinned_program_ids(&gen1);
    let old_pins = pin_names(&gen1).len();
    let b = enforcer_or_skip().expect("a second Enforcer loads where the first did");
    let mut b = fixture.enforce(b, cgroup);
    let gen2 = pins::next_generation(bpffs.root());
    assert_eq!(gen2, bpffs.root().join("gen-2"));
    b.pin_links(&gen2).expect("pinning B's links");
    assert_eq!(
        pin_names(&gen2),
        expected_pins(b.backend(), b.decides_unix_sockets())
    );
    assert_eq!(
        pins::generations(bpffs.root()),
        [gen1.clone(), gen2.clone()]
    );
    assert_eq!(
        pins::release(&gen1).expect("releasing gen-1"),
        old_pins,
        "every link of gen-1 released"
    );
    assert!(!gen1.exists(), "the emptied gen-1 folder is removed");
    assert_unloaded(&old_programs, "releasing gen-1");
    b
}

/// The last step: releasing the whole root detaches B's pinned links, and nothing enforces in
/// the cgroup any more.
fn release_everything(fixture: &Fixture, bpffs: &TestBpffs, cgroup: &ScopeCgroup) {
    let gen2 = bpffs.root().join("gen-2");
    let programs = pinned_program_ids(&gen2);
    let count = pin_names(&gen2).len();
    assert_eq!(
        pins::release(bpffs.root()).expect("releasing the root"),
        count
    );
    assert!(pins::generations(bpffs.root()).is_empty());
    assert_eq!(
        pins::release(bpffs.root()).unwrap(),
        0,
        "nothing is left to release"
    );
    assert_unloaded(&programs, "releasing the root");
    fixture.assert_not_enforced(cgroup, "after everything is released");
}

#[test]
fn pinned_links_enforce_after_their_enforcer_is_dropped_and_hand_over_without_a_gap() {
    let fixture = Fixture::new();
    let Some(a) = enforcer_or_skip() else {
        return;
    };
    let backend = a.backend();
    let cgroup = fixture.cgroup();
    let bpffs = TestBpffs::new();
    let gen1 = bpffs.root().join("gen-1");

    // Pinned before the cgroup hooks are attached: those are pinned as they attach.
    let mut a = a;
    a.apply(&fixture.image).expect("applying the image");
    a.pin_links(&gen1).expect("pinning A's links");
    assert_eq!(a.pin_dir(), Some(gen1.as_path()));
    a.attach_cgroup(cgroup.path()).expect("attaching A");
    a.add_scope(cgroup.id()).expect("scoping the cgroup");
    assert_eq!(
        pin_names(&gen1),
        expected_pins(backend, a.decides_unix_sockets())
    );
    fixture.assert_enforced(&cgroup, "while A holds");
    let counters = a.counters().expect("reading A's counters");
    assert!(
        counters
            .iter()
            .any(|(name, n)| *name == "exec_forbidden" && *n > 0),
        "A counted its refusal: {counters:?}"
    );

    drop(a);
    fixture.assert_enforced(&cgroup, "after A is dropped");

    let hammer = Hammer::start(
        &fixture.program,
        &cgroup,
        &fixture.dir.path().join("hammer"),
    );
    let b = take_over(&fixture, &bpffs, &cgroup);
    fixture.assert_enforced(&cgroup, "after gen-1 is released");
    drop(b);
    fixture.assert_enforced(&cgroup, "after B is dropped too");
    hammer.finish("handover from a dropped Enforcer");

    release_everything(&fixture, &bpffs, &cgroup);
}

#[test]
fn pinned_links_enforce_after_their_process_is_killed_and_hand_over_without_a_gap() {
    let fixture = Fixture::new();
    // Root and a kernel that runs the programs, as the helper will need.
    let Some(probe) = enforcer_or_skip() else {
        return;
    };
    drop(probe);
    let cgroup = fixture.cgroup();
    let bpffs = TestBpffs::new();
    let gen1 = bpffs.root().join("gen-1");

    let holder = helper("pin-holder", env!("CARGO_BIN_EXE_pin-holder"));
    let mut child = Command::new(&holder)
        .arg(fixture.dir.path())
        .arg(cgroup.path())
        .arg(&gen1)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("starting {}: {err}", holder.display()));
    // Kill it whatever happens below (SIGKILL of a dead process is harmless).
    struct KillOnDrop(u32);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            // SAFETY: sending a signal to our own child.
            unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
        }
    }
    let _kill = KillOnDrop(child.id());
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    // A bound for a hung loader, not a measure: under emulation beside other work, loading
    // every program has taken over 60 s.
    let line = rx
        .recv_timeout(Duration::from_secs(180))
        .unwrap_or_default();
    if line.trim().is_empty() {
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        panic!(
            "pin-holder did not pin: {} ({})",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // The kernel has the unix hooks when its BTF has their context's address length.
    let unix = guard::kernel::btf::kernel_offsets().is_ok_and(|o| o.sock_addr_uaddrlen != 0);
    let expected = expected_pins(backend(), unix);
    assert_eq!(line.trim(), format!("pinned {}", expected.len()));
    assert_eq!(pin_names(&gen1), expected);
    fixture.assert_enforced(&cgroup, "while pin-holder holds");

    let hammer = Hammer::start(
        &fixture.program,
        &cgroup,
        &fixture.dir.path().join("hammer"),
    );
    child.kill().expect("SIGKILL to pin-holder");
    let status = wait_status(&mut child, RUN_TIMEOUT);
    assert!(
        guard_tests::kernel::killed(&status),
        "pin-holder died of SIGKILL: {status}"
    );
    fixture.assert_enforced(&cgroup, "after pin-holder is killed");

    let b = take_over(&fixture, &bpffs, &cgroup);
    fixture.assert_enforced(&cgroup, "after gen-1 is released");
    drop(b);
    hammer.finish("handover from a killed process");

    release_everything(&fixture, &bpffs, &cgroup);
}

#[test]
fn pin_links_refuses_a_folder_that_is_not_on_a_bpffs_and_keeps_enforcing() {
    let fixture = Fixture::new();
    let Some(enforcer) = enforcer_or_skip() else {
        return;
    };
    let cgroup = fixture.cgroup();
    let mut enforcer = fixture.enforce(enforcer, &cgroup);
    let plain = fixture.dir.path().join("not-bpffs");
    let err = enforcer.pin_links(&plain).unwrap_err();
    assert!(format!("{err:#}").contains("not on a bpffs"), "{err:#}");
    assert_eq!(enforcer.pin_dir(), None);
    fixture.assert_enforced(&cgroup, "after a refused pin_links");
    drop(enforcer);
    // Nothing was pinned: dropping the Enforcer detached everything.
    fixture.assert_not_enforced(&cgroup, "after the unpinned Enforcer is dropped");
}
