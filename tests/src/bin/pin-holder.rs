//! `pin-holder DIR CGROUP PIN_DIR`: a daemon that dies hard. It loads guard's programs (on the
//! backend `GUARD_TEST_BACKEND` names, else the preferred one), enforces the rules of
//! `DIR/test.rules` (one-token rules' programs looked up in `DIR` first) in the cgroup `CGROUP`,
//! pins its links in `PIN_DIR`, prints `pinned N` (N links) and waits for SIGKILL: the kernel
//! pin tests kill it and check that the pinned links go on enforcing.
//!
//! It waits at most 60 s, then exits (its pins stay; the test's bpffs guard releases them).
//! Anything it cannot do exits 2 with a message.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use guard::kernel::Enforcer;
use guard::kernel::scope::cgroup_id;
use guard_tests::kernel::{backend, compile_rules};

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [dir, cgroup, pin_dir] = args.as_slice() else {
        eprintln!("usage: pin-holder DIR CGROUP PIN_DIR");
        return ExitCode::from(2);
    };
    let rules = match std::fs::read_to_string(dir.join("test.rules")) {
        Ok(rules) => rules,
        Err(err) => {
            eprintln!("pin-holder: reading {}/test.rules: {err}", dir.display());
            return ExitCode::from(2);
        }
    };
    let pinned = (|| -> anyhow::Result<usize> {
        let image = compile_rules(dir, &rules);
        let mut enforcer = Enforcer::load(backend())?;
        enforcer.apply(&image)?;
        enforcer.attach_cgroup(cgroup)?;
        enforcer.add_scope(cgroup_id(cgroup)?)?;
        enforcer.pin_links(pin_dir)?;
        let count = std::fs::read_dir(pin_dir)?.count();
        // Held, not dropped: the point is to die with it alive.
        std::mem::forget(enforcer);
        Ok(count)
    })();
    let count = match pinned {
        Ok(count) => count,
        Err(err) => {
            eprintln!("pin-holder: {err:#}");
            return ExitCode::from(2);
        }
    };
    println!("pinned {count}");
    let _ = std::io::stdout().flush();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    ExitCode::SUCCESS
}
