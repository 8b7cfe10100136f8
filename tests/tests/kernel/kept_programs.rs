//! Kept program sets (`guard::kernel::program_cache`): a stand-alone run reuses the programs an
//! earlier run loaded and verified, and enforces its own policy with them, never the earlier
//! run's: the maps are emptied first. Each test keeps its sets in a store of its own on the
//! bpffs (removed at its end), so the `guard run`s of other tests do not take them.

use std::io;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use guard::kernel::Backend;
use guard::kernel::program_cache::{Store, release_unused};
use guard::session::SessionOptions;
use guard_tests::kernel::{TestSession, copy_program, killed, session_in_or_skip, touch_program};

use crate::common::{assert_absent, assert_exists, assert_ran, stderr};

const RUN_TIMEOUT: Duration = Duration::from_secs(20);

/// A store of the test's own, removed (with what is kept in it) when dropped.
struct TestStore(Store);

impl TestStore {
    fn new(name: &str) -> TestStore {
        let tag = format!("{name}-{}", std::process::id());
        TestStore(Store {
            root: Path::new("/sys/fs/bpf").join(format!("guard-test-cache-{tag}")),
            locks: std::env::temp_dir().join(format!("guard-test-cache-locks-{tag}")),
        })
    }

    /// The programs pinned in the store's sets, by kernel id.
    fn pinned_program_ids(&self) -> Vec<u32> {
        let mut ids = Vec::new();
        for key in std::fs::read_dir(&self.0.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            for slot in std::fs::read_dir(key.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                for pin in std::fs::read_dir(slot.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    if pin.file_name().to_string_lossy().starts_with("prog-") {
                        let info = aya::programs::ProgramInfo::from_pin(pin.path())
                            .unwrap_or_else(|err| panic!("{}: {err}", pin.path().display()));
                        ids.push(info.id());
                    }
                }
            }
        }
        ids.sort_unstable();
        ids
    }
}

impl TestStore {
    /// How many sets hold pinned programs.
    fn filled_sets(&self) -> usize {
        let mut filled = 0;
        for key in std::fs::read_dir(&self.0.root)
            .into_iter()
            .flatten()
            .flatten()
        {
            for slot in std::fs::read_dir(key.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let has_program = std::fs::read_dir(slot.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|pin| pin.file_name().to_string_lossy().starts_with("prog-"));
                filled += usize::from(has_program);
            }
        }
        filled
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let _ = release_unused(&self.0);
        let _ = std::fs::remove_dir_all(&self.0.locks);
    }
}

/// A session whose rules forbid `forbidden` (a program in the test's folder), kept in `store`.
fn session_forbidding(store: &TestStore, forbidden: &str) -> Option<(TestSession, Programs)> {
    let dir = tempfile::tempdir().expect("making a temporary folder");
    let programs = Programs::copy_into(dir.path());
    let options = SessionOptions {
        extra_path_dirs: vec![dir.path().to_path_buf()],
        keep_programs: Some(store.0.clone()),
        ..SessionOptions::default()
    };
    let rules = format!("prefix_rule(pattern=[\"{forbidden}\"], decision=\"forbidden\")\n");
    session_in_or_skip(dir, &rules, options).map(|session| (session, programs))
}

/// Two copies of `touch`, each a program of its own (its file identity).
struct Programs {
    a: std::path::PathBuf,
    b: std::path::PathBuf,
}

impl Programs {
    fn copy_into(dir: &Path) -> Programs {
        let touch = touch_program();
        Programs {
            a: copy_program(&touch, dir, "gt-kept-a"),
            b: copy_program(&touch, dir, "gt-kept-b"),
        }
    }
}

fn run(session: &TestSession, program: &Path, marker: &Path) -> io::Result<Output> {
    session.run(Command::new(program).arg(marker), RUN_TIMEOUT)
}

/// The exec was refused the way the backend refuses one: SIGKILL (`cgroup`), EPERM (`lsm`).
fn assert_refused(backend: Backend, what: &str, result: io::Result<Output>) {
    match (backend, result) {
        (Backend::Cgroup, Ok(output)) if killed(&output.status) => {}
        (Backend::Lsm, Err(err)) if err.kind() == io::ErrorKind::PermissionDenied => {}
        (_, Ok(output)) => panic!(
            "{what}: expected a refusal, got {} (stderr: {})",
            output.status,
            stderr(&output)
        ),
        (_, Err(err)) => panic!("{what}: expected a refusal, the exec failed otherwise: {err}"),
    }
}

/// Runs both programs in `session`: `refused` must be refused, the other must run.
fn assert_enforces(session: &TestSession, programs: &Programs, refused: char, when: &str) {
    let backend = session.backend();
    let (no, yes) = match refused {
        'a' => (&programs.a, &programs.b),
        _ => (&programs.b, &programs.a),
    };
    let (no_marker, yes_marker) = (
        session.path().join(format!("{when}-refused")),
        session.path().join(format!("{when}-ran")),
    );
    assert_refused(
        backend,
        &format!("{when}: {}", no.display()),
        run(session, no, &no_marker),
    );
    assert_absent(&no_marker, "the forbidden program must not run");
    assert_ran(
        &format!("{when}: {}", yes.display()),
        run(session, yes, &yes_marker),
    );
    assert_exists(&yes_marker, "the other program runs");
}

#[test]
fn a_second_run_reuses_the_kept_programs_and_enforces_its_own_policy_not_the_first_ones() {
    let store = TestStore::new("reuse");
    let Some((first, programs)) = session_forbidding(&store, "gt-kept-a") else {
        return;
    };
    let kept = first
        .kept_set()
        .expect("the first run leases a set of its own store");
    assert!(!kept.reused(), "a fresh store has nothing to reuse");
    assert_enforces(&first, &programs, 'a', "first");
    let first_ids = store.pinned_program_ids();
    assert!(
        !first_ids.is_empty(),
        "the first run pinned its programs in the store"
    );
    drop(first);

    let (mut second, programs) = session_forbidding(&store, "gt-kept-b").expect("root already");
    let kept = second
        .kept_set()
        .expect("the second run leases the kept set");
    assert!(
        kept.reused(),
        "the second run reuses the first one's programs"
    );
    let mut second_ids: Vec<u32> = second
        .session
        .program_ids()
        .iter()
        .map(|(_, id)| *id)
        .collect();
    second_ids.sort_unstable();
    assert!(
        second_ids.iter().all(|id| first_ids.contains(id)),
        "every program of the second run was loaded by the first: {second_ids:?} vs {first_ids:?}"
    );
    // The first run's rule is gone with its maps' contents: `a` runs now, `b` does not.
    assert_enforces(&second, &programs, 'b', "second");
}

#[test]
fn two_runs_at_once_get_a_set_each_and_each_enforces_its_own_policy() {
    let store = TestStore::new("parallel");
    let Some((first, programs_1)) = session_forbidding(&store, "gt-kept-a") else {
        return;
    };
    drop(first);
    // Both at once: one reuses the kept set, the other cannot share it and loads its own.
    let (one, programs_1b) = session_forbidding(&store, "gt-kept-a").expect("root already");
    let (two, programs_2) = session_forbidding(&store, "gt-kept-b").expect("root already");
    let (one_set, two_set) = (one.kept_set().unwrap(), two.kept_set().unwrap());
    assert!(one_set.reused() && !two_set.reused());
    assert_ne!(one_set.paths().dir(), two_set.paths().dir());
    assert_enforces(&one, &programs_1b, 'a', "one");
    assert_enforces(&two, &programs_2, 'b', "two");
    drop((one, two, programs_1));
    // Each idle set holds its maps' kernel memory: the next run keeps one, the other goes.
    let (three, _) = session_forbidding(&store, "gt-kept-a").expect("root already");
    assert!(three.kept_set().unwrap().reused());
    assert_eq!(
        store.filled_sets(),
        1,
        "only the set in use is left once a run took one of two idle sets"
    );
}

#[test]
fn a_set_missing_a_pinned_map_is_not_trusted_and_the_run_loads_afresh() {
    let store = TestStore::new("broken");
    let Some((first, _)) = session_forbidding(&store, "gt-kept-a") else {
        return;
    };
    let dir = first.kept_set().unwrap().paths().dir().to_path_buf();
    drop(first);
    // A pin removed by hand: the kept programs would decide with a map the next run never fills.
    std::fs::remove_file(dir.join("map-SCOPES")).expect("removing a pinned map");
    let (second, programs) = session_forbidding(&store, "gt-kept-b").expect("root already");
    assert!(
        !second.kept_set().unwrap().reused(),
        "a set whose programs use a map it does not pin is not reused"
    );
    assert_enforces(&second, &programs, 'b', "after the broken set");
}
