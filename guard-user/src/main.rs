fn main() -> std::process::ExitCode {
    guard::cli::main()
}
