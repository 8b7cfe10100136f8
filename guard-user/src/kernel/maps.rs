//! Keeps the BPF maps equal to an [`EnforcementImage`], one writer (this process): the entries
//! are [`MapEncoder`]'s, and this module writes what changed.
//!
//! An update never has a moment where neither the old nor the new rule holds: new and changed
//! entries are written first (argv trie children before their parents, so a parent never
//! points at a half-built subtree), and stale entries are removed last.

use std::collections::HashMap;

use anyhow::{Context, Result, anyhow};
use aya::Ebpf;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray};
use guard_common::dfa::{DfaHeader, DfaRow, header_index, row_index, table};
use guard_common::limits::UNIX_PATH_LEN;
use guard_common::maps::{
    ArgvEdge, ArgvNode, DestV4, DestV6, ExecIdentity, ExecName, LongToken, ScopedApproval,
    Settings, UnixKey, Verdict, approval_kind, counter,
};

use crate::compile::destination_maps::{Change, DestinationMaps};
use crate::compile::dfa::DfaTable;
use crate::compile::encode::{MapEncoder, MapEntries, destination_approvals};
use crate::compile::image::{DestinationKey, EnforcementImage};

/// What one [`MapSync::apply`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyncStats {
    pub identities: usize,
    pub names: usize,
    pub argv_edges: usize,
    pub destinations_v4: usize,
    pub destinations_v6: usize,
    /// argv trie nodes that carry an approval.
    pub approvals: usize,
    /// Rows of the pattern tables in force.
    pub pattern_rows: usize,
    pub removed: usize,
}

/// The last state written, to compute what to add and remove next time.
#[derive(Default)]
pub struct MapSync {
    encoder: MapEncoder,
    last: MapEntries,
    /// Each pattern table as last written, and the slot it is in.
    tables: [Option<DfaTable>; table::COUNT as usize],
    slots: [u32; table::COUNT as usize],
    /// `STAND_INS` as last written.
    stand_ins: HashMap<u32, u32>,
    /// A write of some destination entries failed: the tries may hold entries `last` does not
    /// know of, so the next change of destinations writes them all again.
    destinations_unsure: bool,
}

impl MapSync {
    pub fn new() -> Self {
        MapSync::default()
    }

    /// A sync for a program set whose exec maps hold `sizes`.
    pub fn with_sizes(sizes: crate::compile::encode::ExecMapSizes) -> Self {
        MapSync {
            encoder: MapEncoder::with_sizes(sizes),
            ..MapSync::default()
        }
    }

    pub fn apply(&mut self, ebpf: &mut Ebpf, image: &EnforcementImage) -> Result<SyncStats> {
        // Everything is encoded before anything is written: a refused image changes nothing.
        let new = self.encoder.encode(image)?;
        // Until the whole image is in, the tries may hold entries `last` does not know of.
        self.destinations_unsure = true;
        let last = &self.last;
        let mut stats = SyncStats {
            identities: new.identities.len(),
            names: new.names.len(),
            argv_edges: new.edges.len(),
            destinations_v4: new.destinations.v4.len(),
            destinations_v6: new.destinations.v6.len(),
            approvals: new.edges.values().filter(|n| n.here.approved()).count(),
            ..SyncStats::default()
        };

        // 1. Write what is new or changed.
        // The scopes of approvals before the marks that need them: a mark without its scope's
        // entry approves nothing (fails closed), an entry without a mark nothing either.
        write_approvals(ebpf, &new.approvals, &last.approvals)?;
        {
            let mut map: BpfHashMap<_, ExecIdentity, Verdict> = hash_map(ebpf, "EXEC_IDENTITIES")?;
            write_changed(&new.identities, &last.identities, |k, v| {
                map.insert(k, v, 0)
            })?;
        }
        {
            let mut map: BpfHashMap<_, ExecName, Verdict> = hash_map(ebpf, "EXEC_NAMES")?;
            write_changed(&new.names, &last.names, |k, v| map.insert(k, v, 0))?;
        }
        {
            // Before the edges keyed by them: a long token's id is known before it leads on.
            let mut map: BpfHashMap<_, LongToken, u32> = hash_map(ebpf, "LONG_TOKEN_IDS")?;
            write_changed(&new.long, &last.long, |k, v| map.insert(k, v, 0))?;
        }
        {
            let mut map: BpfHashMap<_, ArgvEdge, ArgvNode> = hash_map(ebpf, "ARGV_TRIE")?;
            // Deepest first: a parent edge is written only after its subtree.
            for edge in new.edge_order.iter().rev() {
                let node = new.edges[edge];
                if last.edges.get(edge) != Some(&node) {
                    map.insert(edge, node, 0).context("writing ARGV_TRIE")?;
                }
            }
        }
        {
            // After the trie: a root points at a node that is already there.
            let mut map: BpfHashMap<_, ExecIdentity, ArgvNode> = hash_map(ebpf, "ARGV_ROOTS")?;
            write_changed(&new.roots, &last.roots, |k, v| map.insert(k, v, 0))?;
        }
        self.write_destinations(ebpf, &new.destinations)?;
        let stand_ins = stand_in_entries(image);
        self.write_stand_ins(ebpf, &stand_ins)?;
        {
            let mut map: BpfHashMap<_, UnixKey, Verdict> = hash_map(ebpf, "UNIX_EXACT")?;
            write_changed(&new.unix_exact, &last.unix_exact, |k, v| {
                map.insert(k, v, 0)
            })?;
            let mut map: LpmTrie<_, [u8; UNIX_PATH_LEN], Verdict> = lpm(ebpf, "UNIX_PREFIX")?;
            write_changed(&new.unix_prefix, &last.unix_prefix, |(len, data), v| {
                map.insert(&Key::new(*len, *data), v, 0)
            })?;
        }
        for (index, table) in image.patterns.by_index().into_iter().enumerate() {
            stats.pattern_rows += table.map_or(0, |t| t.rows.len());
            self.write_pattern_table(ebpf, index as u32, table)?;
        }
        // 2. Settings, which also marks the maps ready on the first apply.
        if let Some(settings) = new.settings {
            let mut map: Array<_, Settings> = array(ebpf, "SETTINGS")?;
            map.set(0, settings, 0).context("writing SETTINGS")?;
        }
        // 3. Remove what is gone.
        let last = &self.last;
        {
            let mut map: BpfHashMap<_, ExecIdentity, Verdict> = hash_map(ebpf, "EXEC_IDENTITIES")?;
            stats.removed += remove_stale(&new.identities, &last.identities, |k| map.remove(k))?;
        }
        {
            let mut map: BpfHashMap<_, ExecName, Verdict> = hash_map(ebpf, "EXEC_NAMES")?;
            stats.removed += remove_stale(&new.names, &last.names, |k| map.remove(k))?;
        }
        {
            let mut map: BpfHashMap<_, ExecIdentity, ArgvNode> = hash_map(ebpf, "ARGV_ROOTS")?;
            stats.removed += remove_stale(&new.roots, &last.roots, |k| map.remove(k))?;
        }
        {
            let mut map: BpfHashMap<_, ArgvEdge, ArgvNode> = hash_map(ebpf, "ARGV_TRIE")?;
            stats.removed += remove_stale(&new.edges, &last.edges, |k| map.remove(k))?;
        }
        {
            let mut map: BpfHashMap<_, LongToken, u32> = hash_map(ebpf, "LONG_TOKEN_IDS")?;
            stats.removed += remove_stale(&new.long, &last.long, |k| map.remove(k))?;
        }
        stats.removed += self.remove_stale_destinations(ebpf, &new.destinations)?;
        self.destinations_unsure = false;
        {
            let mut map: BpfHashMap<_, UnixKey, Verdict> = hash_map(ebpf, "UNIX_EXACT")?;
            stats.removed += remove_stale(&new.unix_exact, &last.unix_exact, |k| map.remove(k))?;
            let mut map: LpmTrie<_, [u8; UNIX_PATH_LEN], Verdict> = lpm(ebpf, "UNIX_PREFIX")?;
            stats.removed += remove_stale(&new.unix_prefix, &last.unix_prefix, |(len, data)| {
                map.remove(&Key::new(*len, *data))
            })?;
        }
        stats.removed += remove_stale_approvals(ebpf, &new.approvals, &last.approvals)?;
        stats.removed += self.remove_stale_stand_ins(ebpf, stand_ins)?;
        self.last = new;
        Ok(stats)
    }

    /// Puts `image`'s destination entries (and destination approvals) in force and nothing
    /// else, all of them compared with what the maps hold. New and changed entries first, then
    /// the stale ones go, as in [`MapSync::apply`]; the other maps are not read or written.
    pub fn apply_destinations(
        &mut self,
        ebpf: &mut Ebpf,
        image: &EnforcementImage,
    ) -> Result<SyncStats> {
        let new = DestinationMaps::build(image);
        // The exec and unix approvals stay as they are; the destination approvals are the
        // image's.
        let mut approvals: HashMap<ScopedApproval, u32> = self
            .last
            .approvals
            .iter()
            .filter(|(k, _)| !matches!(k.kind, approval_kind::V4 | approval_kind::V6))
            .map(|(k, v)| (*k, *v))
            .collect();
        approvals.extend(destination_approvals(image));
        write_approvals(ebpf, &approvals, &self.last.approvals)?;
        self.destinations_unsure = true;
        let mut stats = SyncStats {
            destinations_v4: new.v4.len(),
            destinations_v6: new.v6.len(),
            ..SyncStats::default()
        };
        self.write_destinations(ebpf, &new)?;
        let stand_ins = stand_in_entries(image);
        self.write_stand_ins(ebpf, &stand_ins)?;
        stats.removed += self.remove_stale_destinations(ebpf, &new)?;
        stats.removed += self.remove_stale_stand_ins(ebpf, stand_ins)?;
        stats.removed += remove_stale_approvals(ebpf, &approvals, &self.last.approvals)?;
        self.last.approvals = approvals;
        self.last.destinations = new;
        self.destinations_unsure = false;
        Ok(stats)
    }

    /// Puts in force the entries of `image` at `keys` (the ones a name's new addresses
    /// changed, see [`crate::compile::update_destinations`]) and the stand-ins, writing only
    /// the map entries that change: new and changed ones first, then the stale ones go. What
    /// a failed write did not change stays known as the maps hold it.
    pub fn update_destinations(
        &mut self,
        ebpf: &mut Ebpf,
        image: &EnforcementImage,
        keys: &[DestinationKey],
    ) -> Result<SyncStats> {
        if self.destinations_unsure {
            return self.apply_destinations(ebpf, image);
        }
        let changes = self.last.destinations.update(image, keys);
        let mut stats = SyncStats {
            destinations_v4: self.last.destinations.v4.len(),
            destinations_v6: self.last.destinations.v6.len(),
            ..SyncStats::default()
        };
        let written = self.write_changes(ebpf, &changes.v4, &changes.v6);
        if let Err(err) = written {
            self.destinations_unsure = true;
            return Err(err);
        }
        stats.removed = changes.v4.iter().filter(|c| c.new.is_none()).count()
            + changes.v6.iter().filter(|c| c.new.is_none()).count();
        let stand_ins = stand_in_entries(image);
        self.write_stand_ins(ebpf, &stand_ins)?;
        stats.removed += self.remove_stale_stand_ins(ebpf, stand_ins)?;
        Ok(stats)
    }

    /// Writes `v4` and `v6`'s new and changed entries, then removes those that went; a change
    /// that could not be written is taken back from `last`, which goes on saying what the
    /// maps hold.
    fn write_changes(
        &mut self,
        ebpf: &mut Ebpf,
        v4: &[Change<(u32, DestV4)>],
        v6: &[Change<(u32, DestV6)>],
    ) -> Result<()> {
        let mut done4 = vec![false; v4.len()];
        let mut done6 = vec![false; v6.len()];
        let result = (|| -> Result<()> {
            let mut map: LpmTrie<_, DestV4, Verdict> = lpm(ebpf, "DEST_V4")?;
            for (change, done) in v4.iter().zip(&mut done4).filter(|(c, _)| c.new.is_some()) {
                let (len, data) = change.key;
                let verdict = change.new.expect("filtered");
                map.insert(&Key::new(len, data), verdict, 0)
                    .context("writing DEST_V4")?;
                *done = true;
            }
            let mut map: LpmTrie<_, DestV6, Verdict> = lpm(ebpf, "DEST_V6")?;
            for (change, done) in v6.iter().zip(&mut done6).filter(|(c, _)| c.new.is_some()) {
                let (len, data) = change.key;
                let verdict = change.new.expect("filtered");
                map.insert(&Key::new(len, data), verdict, 0)
                    .context("writing DEST_V6")?;
                *done = true;
            }
            // Only now, with every new entry in place, do the old ones go.
            let mut map: LpmTrie<_, DestV4, Verdict> = lpm(ebpf, "DEST_V4")?;
            for (change, done) in v4.iter().zip(&mut done4).filter(|(c, _)| c.new.is_none()) {
                let (len, data) = change.key;
                map.remove(&Key::new(len, data))
                    .context("removing from DEST_V4")?;
                *done = true;
            }
            let mut map: LpmTrie<_, DestV6, Verdict> = lpm(ebpf, "DEST_V6")?;
            for (change, done) in v6.iter().zip(&mut done6).filter(|(c, _)| c.new.is_none()) {
                let (len, data) = change.key;
                map.remove(&Key::new(len, data))
                    .context("removing from DEST_V6")?;
                *done = true;
            }
            Ok(())
        })();
        for (change, _) in v4.iter().zip(&done4).filter(|(_, done)| !**done) {
            self.last.destinations.undo_v4(change);
        }
        for (change, _) in v6.iter().zip(&done6).filter(|(_, done)| !**done) {
            self.last.destinations.undo_v6(change);
        }
        result
    }

    /// Writes the stand-ins that are new or go somewhere else now (with the destinations: a
    /// stand-in is let through and sent on in one decision).
    fn write_stand_ins(&self, ebpf: &mut Ebpf, stand_ins: &HashMap<u32, u32>) -> Result<()> {
        let mut map: BpfHashMap<_, u32, u32> = hash_map(ebpf, "STAND_INS")?;
        write_changed(stand_ins, &self.stand_ins, |k, v| map.insert(k, v, 0))
    }

    /// Removes the stand-ins no longer mapped, and keeps `stand_ins` as written.
    fn remove_stale_stand_ins(
        &mut self,
        ebpf: &mut Ebpf,
        stand_ins: HashMap<u32, u32>,
    ) -> Result<usize> {
        let mut map: BpfHashMap<_, u32, u32> = hash_map(ebpf, "STAND_INS")?;
        let removed = remove_stale(&stand_ins, &self.stand_ins, |k| map.remove(k))?;
        self.stand_ins = stand_ins;
        Ok(removed)
    }

    /// Writes the destination entries that are new or changed since the last sync.
    fn write_destinations(&self, ebpf: &mut Ebpf, new: &DestinationMaps) -> Result<()> {
        let last = &self.last.destinations;
        let mut map: LpmTrie<_, DestV4, Verdict> = lpm(ebpf, "DEST_V4")?;
        write_changed(&new.v4, &last.v4, |(len, data), v| {
            map.insert(&Key::new(*len, *data), v, 0)
        })?;
        let mut map: LpmTrie<_, DestV6, Verdict> = lpm(ebpf, "DEST_V6")?;
        write_changed(&new.v6, &last.v6, |(len, data), v| {
            map.insert(&Key::new(*len, *data), v, 0)
        })?;
        Ok(())
    }

    /// Removes the destination entries the last sync wrote that `v4`/`v6` no longer have.
    fn remove_stale_destinations(&self, ebpf: &mut Ebpf, new: &DestinationMaps) -> Result<usize> {
        let last = &self.last.destinations;
        let mut map: LpmTrie<_, DestV4, Verdict> = lpm(ebpf, "DEST_V4")?;
        let mut removed = remove_stale(&new.v4, &last.v4, |(len, data)| {
            map.remove(&Key::new(*len, *data))
        })?;
        let mut map: LpmTrie<_, DestV6, Verdict> = lpm(ebpf, "DEST_V6")?;
        removed += remove_stale(&new.v6, &last.v6, |(len, data)| {
            map.remove(&Key::new(*len, *data))
        })?;
        Ok(removed)
    }

    /// Puts `new` in force for pattern table `index` if it changed: the rows and header go to
    /// the slot not in use, then one write to `DFA_SLOTS` switches the programs to it, so a
    /// walk in progress keeps reading a whole table (the old one) to its end.
    fn write_pattern_table(
        &mut self,
        ebpf: &mut Ebpf,
        index: u32,
        new: Option<&DfaTable>,
    ) -> Result<()> {
        let at = index as usize;
        if self.tables[at].as_ref() == new {
            return Ok(());
        }
        let slot = 1 - self.slots[at];
        {
            let mut rows: Array<_, DfaRow> = array(ebpf, "DFA_ROWS")?;
            for (state, row) in new.map_or(&[][..], |t| &t.rows).iter().enumerate() {
                rows.set(row_index(index, slot, state as u16), *row, 0)
                    .context("writing DFA_ROWS")?;
            }
        }
        {
            let mut headers: Array<_, DfaHeader> = array(ebpf, "DFA_HEADERS")?;
            let header = new.map_or(DfaHeader::EMPTY, |t| t.header);
            headers
                .set(header_index(index, slot), header, 0)
                .context("writing DFA_HEADERS")?;
        }
        let mut slots: Array<_, u32> = array(ebpf, "DFA_SLOTS")?;
        slots.set(index, slot, 0).context("writing DFA_SLOTS")?;
        self.slots[at] = slot;
        self.tables[at] = new.cloned();
        Ok(())
    }

    /// Lists `cgroup_id` as in scope: it and the cgroups below it are enforced on, unless a
    /// deeper listed cgroup says otherwise (the deepest listed cgroup decides).
    pub fn add_scope(&mut self, ebpf: &mut Ebpf, cgroup_id: u64) -> Result<()> {
        let mut map: BpfHashMap<_, u64, u32> = hash_map(ebpf, "SCOPES")?;
        map.insert(cgroup_id, 1, 0).context("adding the scope")?;
        Ok(())
    }

    /// Lists `cgroup_id` as exempt: it and the cgroups below it are not enforced on even when
    /// an ancestor is in scope, unless a deeper listed cgroup is in scope again.
    pub fn exempt_scope(&mut self, ebpf: &mut Ebpf, cgroup_id: u64) -> Result<()> {
        let mut map: BpfHashMap<_, u64, u32> = hash_map(ebpf, "SCOPES")?;
        map.insert(cgroup_id, 0, 0)
            .context("exempting the cgroup")?;
        Ok(())
    }

    pub fn remove_scope(&mut self, ebpf: &mut Ebpf, cgroup_id: u64) -> Result<()> {
        let mut map: BpfHashMap<_, u64, u32> = hash_map(ebpf, "SCOPES")?;
        map.remove(&cgroup_id).context("removing the scope")?;
        Ok(())
    }
}

/// Writes the approvals' scopes that are new or changed (`APPROVALS`).
fn write_approvals(
    ebpf: &mut Ebpf,
    new: &HashMap<ScopedApproval, u32>,
    last: &HashMap<ScopedApproval, u32>,
) -> Result<()> {
    let mut map: BpfHashMap<_, ScopedApproval, u32> = hash_map(ebpf, "APPROVALS")?;
    write_changed(new, last, |k, v| map.insert(k, v, 0))
}

/// Removes the approvals' scopes no longer held; how many went.
fn remove_stale_approvals(
    ebpf: &mut Ebpf,
    new: &HashMap<ScopedApproval, u32>,
    last: &HashMap<ScopedApproval, u32>,
) -> Result<usize> {
    let mut map: BpfHashMap<_, ScopedApproval, u32> = hash_map(ebpf, "APPROVALS")?;
    remove_stale(new, last, |k| map.remove(k))
}

fn write_changed<K: std::hash::Hash + Eq, V: PartialEq + Copy>(
    new: &HashMap<K, V>,
    old: &HashMap<K, V>,
    mut write: impl FnMut(&K, V) -> Result<(), aya::maps::MapError>,
) -> Result<()> {
    for (key, value) in new {
        if old.get(key) != Some(value) {
            write(key, *value).context("writing a map entry")?;
        }
    }
    Ok(())
}

fn remove_stale<K: std::hash::Hash + Eq, V>(
    new: &HashMap<K, V>,
    old: &HashMap<K, V>,
    mut remove: impl FnMut(&K) -> Result<(), aya::maps::MapError>,
) -> Result<usize> {
    let mut removed = 0;
    for key in old.keys().filter(|k| !new.contains_key(k)) {
        remove(key).context("removing a map entry")?;
        removed += 1;
    }
    Ok(removed)
}

fn hash_map<'a, K: aya::Pod, V: aya::Pod>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> Result<BpfHashMap<&'a mut MapData, K, V>> {
    let map = ebpf.map_mut(name).ok_or_else(|| anyhow!("no {name} map"))?;
    BpfHashMap::try_from(map).with_context(|| format!("map {name}"))
}

fn array<'a, V: aya::Pod>(ebpf: &'a mut Ebpf, name: &str) -> Result<Array<&'a mut MapData, V>> {
    Array::try_from(
        ebpf.map_mut(name)
            .ok_or_else(|| anyhow!("the BPF object has no {name} map"))?,
    )
    .with_context(|| format!("opening {name}"))
}

fn lpm<'a, K: aya::Pod, V: aya::Pod>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> Result<LpmTrie<&'a mut MapData, K, V>> {
    let map = ebpf.map_mut(name).ok_or_else(|| anyhow!("no {name} map"))?;
    LpmTrie::try_from(map).with_context(|| format!("map {name}"))
}

/// Sums the per-CPU counters.
pub fn read_counters(ebpf: &Ebpf) -> Result<Vec<(&'static str, u64)>> {
    let map = ebpf
        .map("COUNTERS")
        .ok_or_else(|| anyhow!("no COUNTERS map"))?;
    let counters: PerCpuArray<_, u64> = PerCpuArray::try_from(map)?;
    let mut out = Vec::new();
    for slot in 0..counter::COUNT {
        let values = counters.get(&slot, 0).context("reading COUNTERS")?;
        out.push((counter::NAMES[slot as usize], values.iter().sum()));
    }
    Ok(out)
}

/// Kernel events lost, from summed counters: the ring buffer full, or a scope past its share.
pub fn events_lost(counters: &[(&'static str, u64)]) -> u64 {
    counters
        .iter()
        .filter(|(name, _)| matches!(*name, "events_lost" | "events_over_budget"))
        .map(|(_, n)| n)
        .sum()
}

/// What each scope put in the event ring buffer and lost (past its share, or the ring full),
/// summed over CPUs, by the scope's cgroup id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeEventCounts {
    pub submitted: u64,
    pub lost: u64,
}

pub fn read_scope_events(ebpf: &Ebpf) -> Result<HashMap<u64, ScopeEventCounts>> {
    let map = ebpf
        .map("SCOPE_EVENTS")
        .ok_or_else(|| anyhow!("no SCOPE_EVENTS map"))?;
    let shares: aya::maps::PerCpuHashMap<_, u64, guard_common::maps::ScopeEvents> =
        aya::maps::PerCpuHashMap::try_from(map)?;
    let mut out = HashMap::new();
    for entry in shares.iter() {
        let (scope, per_cpu) = entry.context("reading SCOPE_EVENTS")?;
        let counts = per_cpu
            .iter()
            .fold(ScopeEventCounts::default(), |sum, cpu| ScopeEventCounts {
                submitted: sum.submitted + cpu.submitted,
                lost: sum.lost + cpu.lost,
            });
        out.insert(scope, counts);
    }
    Ok(out)
}

/// The decisions that failed open, per hook (`exec`, `net`, `file`), from summed counters: each
/// is a call the programs let through undecided because kernel memory could not be read.
pub fn failed_open(counters: &[(&'static str, u64)]) -> Vec<(&'static str, u64)> {
    counter::FAILED_OPEN
        .iter()
        .map(|&slot| {
            let name = counter::NAMES[slot as usize];
            let n = counters
                .iter()
                .find(|(counted, _)| *counted == name)
                .map_or(0, |(_, n)| *n);
            (name.trim_end_matches("_failed_open"), n)
        })
        .collect()
}

/// `STAND_INS` for `image`: each address as the kernel stores it (network-order bytes read as a
/// native word, as `user_ip4` is).
fn stand_in_entries(image: &EnforcementImage) -> HashMap<u32, u32> {
    image
        .stand_ins
        .iter()
        .map(|s| {
            (
                u32::from_ne_bytes(s.stand_in.octets()),
                u32::from_ne_bytes(s.real.octets()),
            )
        })
        .collect()
}
