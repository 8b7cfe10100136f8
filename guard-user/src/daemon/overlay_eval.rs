//! A run's overlay is Starlark any local user may send. The parser bounds its steps and heap,
//! but starlark checks the heap only every thousand steps, so one `"a" * 300000000` allocates
//! before any check. So the daemon evaluates an overlay first in a child process of its own
//! binary (`guard __eval-overlay`, [`child_main`]) whose allocations are bounded
//! ([`OVERLAY_MEMORY`], held by [`BoundedAlloc`]) and its CPU and wall time too; only an overlay
//! the child read within those bounds is parsed again in the daemon, off its loop, where it takes
//! what it took in the child (evaluation is deterministic), one at a time.

use std::alloc::{GlobalAlloc, Layout};
use std::io::{Read, Write};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::wire::protocol::{MAX_REQUEST_BYTES, OverlayFile};
use crate::policy::Policy;

/// The hidden subcommand the daemon runs its own binary with.
pub const SUBCOMMAND: &str = "__eval-overlay";

/// Bytes an overlay's evaluation may allocate (in the child, and so in the daemon after it).
pub const OVERLAY_MEMORY: i64 = 32 << 20;

/// CPU seconds the child may take (the parser's step bound stops a loop well before).
const OVERLAY_CPU_SECS: u64 = 5;

/// Wall time the daemon waits for the child before it kills it.
const OVERLAY_WALL: Duration = Duration::from_secs(10);

/// Overlays evaluated at once: each may take [`OVERLAY_MEMORY`] in the daemon when it is parsed
/// there again; the rest wait their turn (off the loop).
static EVALUATIONS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// A global allocator that refuses allocations past a budget once one is set
/// ([`BoundedAlloc::limit`]): a refused allocation aborts the process (Rust's
/// `handle_alloc_error`), which is what the child is for. Without a budget it only reads one
/// flag per call.
pub struct BoundedAlloc<A> {
    inner: A,
    limited: AtomicBool,
    /// Bytes allocated since the budget was set, less those freed (negative when memory from
    /// before is freed).
    used: AtomicI64,
    budget: AtomicI64,
}

impl<A> BoundedAlloc<A> {
    pub const fn new(inner: A) -> Self {
        BoundedAlloc {
            inner,
            limited: AtomicBool::new(false),
            used: AtomicI64::new(0),
            budget: AtomicI64::new(i64::MAX),
        }
    }

    /// From now on, at most `bytes` more may be allocated.
    pub fn limit(&self, bytes: i64) {
        self.used.store(0, Ordering::Relaxed);
        self.budget.store(bytes, Ordering::Relaxed);
        self.limited.store(true, Ordering::Release);
    }

    /// Whether `grow` more bytes fit the budget (counted when they do).
    fn take(&self, grow: i64) -> bool {
        if !self.limited.load(Ordering::Relaxed) {
            return true;
        }
        let used = self.used.fetch_add(grow, Ordering::Relaxed) + grow;
        if used > self.budget.load(Ordering::Relaxed) {
            self.used.fetch_sub(grow, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn give(&self, bytes: i64) {
        if self.limited.load(Ordering::Relaxed) {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call goes to `inner` unchanged; a refused one returns null, as allowed.
unsafe impl<A: GlobalAlloc> GlobalAlloc for BoundedAlloc<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !self.take(layout.size() as i64) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { self.inner.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !self.take(layout.size() as i64) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { self.inner.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.give(layout.size() as i64);
        // SAFETY: the caller's pointer and layout, passed on.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grow = new_size as i64 - layout.size() as i64;
        if !self.take(grow) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's pointer, layout and size, passed on.
        unsafe { self.inner.realloc(ptr, layout, new_size) }
    }
}

/// What the child says of an overlay.
#[derive(Serialize, Deserialize)]
struct Verdict {
    /// Why it does not parse; `None`: it parses within the bounds.
    error: Option<String>,
}

/// The child's side (`guard __eval-overlay`): the overlay's files as JSON on stdin, the verdict
/// as JSON on stdout. `limit` sets the allocation budget of the binary's allocator.
pub fn child_main(limit: impl FnOnce(i64)) -> ExitCode {
    let mut input = String::new();
    // The files came in one request: at most its size (JSON escapes may add some).
    let read = std::io::stdin()
        .take(4 * MAX_REQUEST_BYTES as u64)
        .read_to_string(&mut input);
    let files: Vec<OverlayFile> = match read
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_str(&input).map_err(|e| e.to_string()))
    {
        Ok(files) => files,
        Err(err) => {
            eprintln!("guard {SUBCOMMAND}: reading the overlay: {err}");
            return ExitCode::from(2);
        }
    };
    drop(input);
    bound_cpu();
    limit(OVERLAY_MEMORY);
    let verdict = Verdict {
        error: super::service::parse_overlay(&files).err(),
    };
    let mut out = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut out, &verdict).map_err(std::io::Error::from);
    match written.and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

/// The child's CPU time, and no core file of it.
fn bound_cpu() {
    let cpu = libc::rlimit {
        rlim_cur: OVERLAY_CPU_SECS,
        rlim_max: OVERLAY_CPU_SECS + 1,
    };
    let core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain setrlimit calls with valid structs; a failure leaves the wall-clock bound.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CPU, &cpu);
        libc::setrlimit(libc::RLIMIT_CORE, &core);
    }
}

/// An overlay's policy, read first by a bounded child and then, if that read it within the
/// bounds, by the daemon off its loop. The error names the overlay and the bound it passed.
pub async fn evaluate(files: Vec<OverlayFile>) -> Result<Policy, String> {
    let _turn = EVALUATIONS
        .acquire()
        .await
        .map_err(|_| "the daemon is stopping".to_string())?;
    let names = files
        .iter()
        .map(|f| f.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    child_verdict(&files, &names).await?;
    tokio::task::spawn_blocking(move || super::service::parse_overlay(&files))
        .await
        .map_err(|err| format!("reading the overlay {names} failed: {err}"))?
}

/// Runs the child on `files`: `Ok` when it read them within the bounds.
async fn child_verdict(files: &[OverlayFile], names: &str) -> Result<(), String> {
    let failed = |why: String| format!("the overlay {names} could not be evaluated: {why}");
    let input = serde_json::to_vec(files).map_err(|e| failed(e.to_string()))?;
    // The daemon's own binary, even when the file it was started from has been replaced.
    let mut child = tokio::process::Command::new("/proc/self/exe")
        .arg(SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("starting /proc/self/exe {SUBCOMMAND}: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let write = async move {
        let _ = stdin.write_all(&input).await;
    };
    let run = async move { tokio::join!(write, child.wait_with_output()).1 };
    let output = match tokio::time::timeout(OVERLAY_WALL, run).await {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => return Err(failed(err.to_string())),
        // Dropping the child kills it.
        Err(_) => return Err(over_time(names)),
    };
    if output.status.success()
        && let Ok(verdict) = serde_json::from_slice::<Verdict>(&output.stdout)
    {
        return verdict.error.map_or(Ok(()), Err);
    }
    use std::os::unix::process::ExitStatusExt;
    match output.status.signal() {
        Some(libc::SIGXCPU | libc::SIGKILL) => Err(over_time(names)),
        // A refused allocation aborts (SIGABRT) after saying so.
        _ if String::from_utf8_lossy(&output.stderr).contains("memory allocation") => Err(format!(
            "the overlay {names} needs more than {} MiB of memory to evaluate, the most an \
                 overlay may take (a `*` that repeats a string or list a huge number of times?): \
                 a rules file declares rules, build smaller strings and lists",
            OVERLAY_MEMORY >> 20
        )),
        _ => Err(failed(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))),
    }
}

fn over_time(names: &str) -> String {
    format!(
        "the overlay {names} took more than {OVERLAY_CPU_SECS} s of CPU (or {} s) to evaluate, \
         the most an overlay may: a rules file declares rules, shorten its loops",
        OVERLAY_WALL.as_secs()
    )
}
