//! Into the kernel: pick a backend, load and attach the programs, keep the maps in step with the
//! [`EnforcementImage`](crate::compile::image::EnforcementImage), read the events back.
pub mod btf;
pub mod coverage;
pub mod dns_origins;
pub mod events;
pub mod held;
pub mod layers;
pub mod loader;
mod map_reset;
pub mod maps;
pub mod peer;
pub mod pins;
pub mod program_cache;
mod raw_link;
pub mod scope;
pub mod unix_hooks;

pub use loader::{Backend, Enforcer};
