//! Empties pinned maps, so a kept program set starts a run as a fresh load would
//! ([`super::program_cache`]): every key of a hash or trie deleted, every slot of an array
//! zeroed, the ring buffer read to its end. The object's read-only data (`.rodata`, pinned as
//! `map-_rodata`, frozen) is left alone: it is what the object was built with.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use aya::maps::{Map, MapData, MapInfo, MapType, RingBuf};

const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

/// `struct bpf_attr` for the element commands.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    /// `value`, or `next_key` for `BPF_MAP_GET_NEXT_KEY`.
    value: u64,
    flags: u64,
}

/// `struct bpf_attr` for the batch commands.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    /// In: the entries given; out: the entries done.
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Empties each map pinned at `pins`.
pub fn empty_pinned_maps(pins: &[PathBuf]) -> Result<()> {
    for path in pins {
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("map-{}", super::program_cache::DOT)))
        {
            continue;
        }
        empty_pinned(path).with_context(|| format!("emptying {}", path.display()))?;
    }
    Ok(())
}

fn empty_pinned(path: &Path) -> Result<()> {
    let info = MapInfo::from_pin(path)?;
    let fd = info.fd()?;
    let fd = fd.as_fd();
    match info.map_type()? {
        MapType::Hash
        | MapType::LruHash
        | MapType::PerCpuHash
        | MapType::LruPerCpuHash
        | MapType::LpmTrie => delete_every_key(fd, info.key_size(), info.max_entries()),
        MapType::Array => zero_every_slot(fd, info.value_size() as usize, info.max_entries()),
        MapType::PerCpuArray => {
            let cpus =
                aya::util::nr_cpus().map_err(|(what, err)| anyhow::anyhow!("{what}: {err}"))?;
            // Per-CPU values are 8-byte aligned, one after another for every possible CPU.
            let width = (info.value_size() as usize).div_ceil(8) * 8 * cpus;
            zero_every_slot(fd, width, info.max_entries())
        }
        MapType::RingBuf => drain(path, info.max_entries()),
        other => bail!("guard keeps no map of type {other:?}: nothing says how to empty it"),
    }
}

fn delete_every_key(fd: BorrowedFd<'_>, key_size: u32, max_entries: u32) -> Result<()> {
    // Every key first, each found from the one before (a walk of the buckets once; asking for
    // the first key again after each deletion walks them again every time), then deleted.
    let key_size = key_size as usize;
    let mut keys: Vec<u8> = Vec::new();
    let mut next = vec![0u8; key_size];
    for _ in 0..=max_entries {
        let previous = keys
            .len()
            .checked_sub(key_size)
            .map(|at| keys[at..].as_ptr());
        let attr = ElemAttr {
            map_fd: fd.as_raw_fd() as u32,
            key: previous.map_or(0, |p| p as u64),
            value: next.as_mut_ptr() as u64,
            ..ElemAttr::default()
        };
        match bpf(BPF_MAP_GET_NEXT_KEY, &attr) {
            Ok(()) => keys.extend_from_slice(&next),
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => break,
            Err(err) => return Err(err).context("finding a key"),
        }
    }
    for key in keys.chunks_exact(key_size.max(1)) {
        let attr = ElemAttr {
            map_fd: fd.as_raw_fd() as u32,
            key: key.as_ptr() as u64,
            ..ElemAttr::default()
        };
        match bpf(BPF_MAP_DELETE_ELEM, &attr) {
            Ok(()) => {}
            // An LRU map or the programs may have removed it meanwhile.
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
            Err(err) => return Err(err).context("deleting a key"),
        }
    }
    // Nothing runs on a set while it is leased and unattached: it must be empty now.
    let attr = ElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        value: next.as_mut_ptr() as u64,
        ..ElemAttr::default()
    };
    match bpf(BPF_MAP_GET_NEXT_KEY, &attr) {
        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Ok(()) => bail!("the map still has keys after every key found was deleted"),
        Err(err) => Err(err).context("checking the map is empty"),
    }
}

fn zero_every_slot(fd: BorrowedFd<'_>, width: usize, max_entries: u32) -> Result<()> {
    let keys: Vec<u32> = (0..max_entries).collect();
    let zeros = vec![0u8; width * max_entries as usize];
    // One call for the whole array (Linux 5.6+); slot by slot where the kernel has no batches.
    let mut attr = BatchAttr {
        keys: keys.as_ptr() as u64,
        values: zeros.as_ptr() as u64,
        count: max_entries,
        map_fd: fd.as_raw_fd() as u32,
        ..BatchAttr::default()
    };
    // SAFETY: a valid `bpf_attr` for BPF_MAP_UPDATE_BATCH whose key and value arrays hold
    // `count` entries of the map's sizes and outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_BATCH,
            &mut attr as *mut BatchAttr,
            std::mem::size_of::<BatchAttr>(),
        )
    };
    if rc == 0 && attr.count == max_entries {
        return Ok(());
    }
    let zero = vec![0u8; width];
    for index in 0..max_entries {
        let attr = ElemAttr {
            map_fd: fd.as_raw_fd() as u32,
            key: &index as *const u32 as u64,
            value: zero.as_ptr() as u64,
            ..ElemAttr::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &attr).with_context(|| format!("zeroing slot {index}"))?;
    }
    Ok(())
}

/// Reads the ring buffer to its end: what the run before wrote and nobody read.
fn drain(path: &Path, bytes: u32) -> Result<()> {
    let mut ring = RingBuf::try_from(Map::RingBuf(MapData::from_pin(path)?))?;
    // Every record takes at least 8 bytes of header.
    for _ in 0..bytes / 8 {
        if ring.next().is_none() {
            return Ok(());
        }
    }
    bail!("the ring buffer did not run empty")
}

fn bpf(command: libc::c_long, attr: &ElemAttr) -> std::io::Result<()> {
    // SAFETY: a valid `bpf_attr` prefix for the element commands, whose pointers outlive the
    // call and point at buffers of the map's key and value sizes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            attr as *const ElemAttr,
            std::mem::size_of::<ElemAttr>(),
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
