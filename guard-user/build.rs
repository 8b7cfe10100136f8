//! Builds the BPF object (`guard-ebpf`'s `guard` binary) with aya-build: nightly Rust with
//! `rust-src`, `-Z build-std=core`, for `bpfel-unknown-none`, linked by `bpf-linker`. The object
//! is embedded in the `guard` binary. `cargo xtask setup` installs what this needs.
//!
//! `AYA_BUILD_SKIP=1` skips it (for tools that only read the sources, like rust-analyzer); the
//! binary then carries an empty object and says so when asked to enforce.
fn main() -> anyhow::Result<()> {
    commit();
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let skip =
        std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        std::fs::write(out_dir.join("guard"), b"")?;
        println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
        return Ok(());
    }
    let root_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../guard-ebpf");
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "guard-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}

/// `GUARD_COMMIT` for `guard --version`: the checkout's commit, or `unknown` outside a git
/// checkout (a source tarball). Reruns when the checked-out commit changes.
fn commit() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=GUARD_COMMIT={commit}");
    // HEAD, the checked-out branch's own ref (not every branch's: another checkout's commit must
    // not rebuild this one) and packed-refs. `--git-path` names each where git keeps it: in a
    // linked worktree HEAD is the worktree's and the refs the main checkout's (a path that does
    // not exist reruns this on every build, so only those that exist are named: packed-refs
    // often does not, and packing refs removes the branch's file, which reruns it).
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for file in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", file])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
