//! What the kernel's DNS redirect recorded of each query socket it sent to guard's resolver
//! (`DNS_ORIGINALS`, keyed by socket cookie): the scope and the process that sent it. guard's
//! resolver reads it on its own thread, through a descriptor of its own, to name who asked
//! without a look through every process's descriptors in `/proc`.

use std::os::fd::{AsFd, OwnedFd};

use anyhow::{Context, Result};
use aya::maps::{HashMap, Map, MapData, MapError};
use guard_common::maps::DnsOriginal;

/// Who sent a redirected query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DnsOrigin {
    /// The scope (cgroup id).
    pub scope: u64,
    /// The process (thread group id, as the initial pid namespace numbers it).
    pub pid: u32,
}

/// A reader of `DNS_ORIGINALS`, safe to use from any thread.
pub struct DnsOrigins {
    map: HashMap<MapData, u64, DnsOriginal>,
}

impl std::fmt::Debug for DnsOrigins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsOrigins").finish_non_exhaustive()
    }
}

impl DnsOrigins {
    /// A reader of `map` (the loaded `DNS_ORIGINALS`), through a descriptor of its own.
    pub fn open(map: &Map) -> Result<DnsOrigins> {
        let Map::LruHashMap(data) = map else {
            anyhow::bail!("DNS_ORIGINALS is not an LRU hash map");
        };
        let fd: OwnedFd = data
            .fd()
            .as_fd()
            .try_clone_to_owned()
            .context("duplicating the DNS_ORIGINALS descriptor")?;
        let data = MapData::from_fd(fd).context("opening DNS_ORIGINALS")?;
        let map = HashMap::try_from(Map::LruHashMap(data)).context("reading DNS_ORIGINALS")?;
        Ok(DnsOrigins { map })
    }

    /// What the redirect recorded for socket `cookie` (`None`: not redirected by this set, or
    /// its entry is gone).
    pub fn get(&self, cookie: u64) -> Result<Option<DnsOrigin>> {
        match self.map.get(&cookie, 0) {
            Ok(original) => Ok(Some(DnsOrigin {
                scope: original.scope,
                pid: original.pid,
            })
            .filter(|origin| origin.scope != 0)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(err) => Err(err).context("reading a DNS_ORIGINALS entry"),
        }
    }
}
