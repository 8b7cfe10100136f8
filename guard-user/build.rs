//! Builds the BPF object (`guard-ebpf`'s `guard` binary) with aya-build: nightly Rust with
//! `rust-src`, `-Z build-std=core`, for `bpfel-unknown-none`, linked by `bpf-linker`. The object
//! is embedded in the `guard` binary. `cargo xtask setup` installs what this needs.
//!
//! `AYA_BUILD_SKIP=1` skips it (for tools that only read the sources, like rust-analyzer); the
//! binary then carries an empty object and says so when asked to enforce.
fn main() -> anyhow::Result<()> {
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
