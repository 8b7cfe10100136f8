// The daemon allocates in one thread and frees in another (audit records cross to the writer
// thread) at hundreds of thousands a second; glibc's malloc serialises that on an arena lock,
// which cost more CPU than writing the records (measured with `cargo xtask bench -- audit`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    guard::cli::main()
}
