// The daemon allocates in one thread and frees in another (audit records cross to the writer
// thread) at hundreds of thousands a second; glibc's malloc serialises that on an arena lock,
// which cost more CPU than writing the records (measured with `cargo xtask bench -- audit`).
// Bounded only in the daemon's child that evaluates a run's overlay (`daemon::overlay_eval`).
#[global_allocator]
static ALLOCATOR: guard::daemon::overlay_eval::BoundedAlloc<mimalloc::MiMalloc> =
    guard::daemon::overlay_eval::BoundedAlloc::new(mimalloc::MiMalloc);

fn main() -> std::process::ExitCode {
    guard::cli::main_bounded(|bytes| ALLOCATOR.limit(bytes))
}
