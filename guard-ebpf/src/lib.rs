//! guard's kernel programs. The object is the `guard` binary target (`src/main.rs`), built for
//! the BPF target by guard-user's build script; this library target exists so guard-user can
//! name the crate as a build dependency and be rebuilt when it changes.
#![no_std]
