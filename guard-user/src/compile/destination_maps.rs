//! An image's destination entries as the kernel's LPM tries hold them (`DEST_V4`, `DEST_V6`),
//! kept with what they were made from, so that when some entries change only their map
//! entries are worked out again: an answer of guard's resolver changes one name's entries, not
//! the policy's.
//!
//! Each map entry's verdict is combined with every entry of the same (transport, port) class
//! whose prefix contains it, so the longest match the kernel finds carries the strongest
//! covering verdict: strongest wins, as in `guard check`. An approval is a full-length entry in
//! its exact class, marked ([`VERDICT_APPROVAL`]); where no rule covers the address in that
//! class the entry decides nothing itself (the mark only), so the kernel still takes the other
//! classes and the unmatched default, then lets a `prompt` through.
//!
//! An entry of one scope (a name's address as guard's resolver answered that scope) is the
//! full-length address followed by the scope's id ([`DEST_SCOPE_BITS`]): the entries of every
//! scope that contain the address cover it, as any shorter prefix does, and an approval of the
//! address marks it too.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use guard_common::maps::{
    DEST_HEAD_BITS, DEST_SCOPE_BITS, DestV4, DestV6, TRANSPORT_ANY, TRANSPORT_TCP, TRANSPORT_UDP,
    VERDICT_APPROVAL, Verdict, dest_key,
};
use ipnetwork::IpNetwork;

use super::destinations::DestinationKey;
use super::image::{EnforcementImage, Verdict as ImageVerdict};
use crate::policy::rule::Transport;

/// An address's bytes (the first 4 for IPv4), and after it the scope of an entry of one scope
/// (bytes 4..12 for IPv4, 16..24 for IPv6; zero for an entry of every scope).
type Bytes = [u8; 24];
/// (transport code, port with 0 for any, IPv6).
type Class = (u8, u16, bool);
/// A map entry before it is keyed for the kernel: its class, prefix length and address.
type Slot = (Class, u8, Bytes);

/// The destination tries' entries, and what they were made from.
#[derive(Clone, Debug, Default)]
pub struct DestinationMaps {
    /// Per class: (prefix, masked address) → the strongest verdict of the image's entries there.
    classes: HashMap<Class, HashMap<(u8, Bytes), Verdict>>,
    /// Per class: how many of those entries each prefix length has (the covers of an address
    /// are looked up at these lengths only).
    lengths: HashMap<Class, BTreeMap<u8, u32>>,
    /// Approved addresses → the approval's rule.
    approved: HashMap<(Class, Bytes), u32>,
    /// Full-length addresses → the scopes with an entry of their own there (whose map
    /// entries an entry of every scope at the address covers).
    scoped_at: HashMap<(Class, Bytes), Vec<u64>>,
    /// `DEST_V4`: (prefix length incl. the transport/port head, key data) → verdict.
    pub v4: HashMap<(u32, DestV4), Verdict>,
    /// `DEST_V6`.
    pub v6: HashMap<(u32, DestV6), Verdict>,
}

/// One map entry an update changed: its verdict before and after (`None`: no entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change<K> {
    pub key: K,
    pub old: Option<Verdict>,
    pub new: Option<Verdict>,
}

/// The map entries an update changed, per trie.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DestinationChanges {
    pub v4: Vec<Change<(u32, DestV4)>>,
    pub v6: Vec<Change<(u32, DestV6)>>,
}

impl DestinationChanges {
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

fn kernel_verdict(v: &ImageVerdict) -> Verdict {
    Verdict::new(v.decision, v.rule, v.audit_only)
}

pub(crate) fn transport_code(t: Transport) -> u8 {
    match t {
        Transport::Tcp => TRANSPORT_TCP,
        Transport::Udp => TRANSPORT_UDP,
        Transport::Any => TRANSPORT_ANY,
    }
}

/// Where an image entry goes (an IPv4-mapped network is an IPv4 one).
fn slot_of((network, port, transport, scope): &DestinationKey) -> Slot {
    let mut bytes = [0u8; 24];
    let (prefix, v6) = match network.ip() {
        IpAddr::V4(a) => {
            bytes[..4].copy_from_slice(&a.octets());
            (network.prefix(), false)
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => {
                bytes[..4].copy_from_slice(&v4.octets());
                (network.prefix().saturating_sub(96), false)
            }
            None => {
                bytes[..16].copy_from_slice(&a.octets());
                (network.prefix(), true)
            }
        },
    };
    let class = (transport_code(*transport), port.unwrap_or(0), v6);
    let bytes = masked(bytes, prefix);
    if *scope == 0 {
        return (class, prefix, bytes);
    }
    (
        class,
        scoped_length(&class),
        with_scope(&class, bytes, *scope),
    )
}

/// `bytes` (a full-length address) with `scope` after the address.
fn with_scope(class: &Class, mut bytes: Bytes, scope: u64) -> Bytes {
    let at = full_length(class) as usize / 8;
    bytes[at..at + 8].copy_from_slice(&scope.to_be_bytes());
    bytes
}

fn full_length(class: &Class) -> u8 {
    if class.2 { 128 } else { 32 }
}

/// The prefix length of an entry of one scope.
fn scoped_length(class: &Class) -> u8 {
    full_length(class) + DEST_SCOPE_BITS as u8
}

/// The trie key of `slot`.
fn kernel_key<const N: usize>(&(class, prefix, bytes): &Slot) -> (u32, [u8; N]) {
    let len = DEST_HEAD_BITS + prefix as u32;
    let kept = full_length(&class) as usize / 8 + 8;
    (len, dest_key::<N>(class.0, class.1, &bytes[..kept]))
}

/// `bytes` with only their first `prefix` bits kept.
pub fn masked<const N: usize>(bytes: [u8; N], prefix: u8) -> [u8; N] {
    let mut out = bytes;
    for (i, b) in out.iter_mut().enumerate() {
        let bits = (prefix as usize).saturating_sub(i * 8).min(8);
        *b = if bits == 0 {
            0
        } else {
            *b & (0xffu8 << (8 - bits))
        };
    }
    out
}

impl DestinationMaps {
    /// Every destination map entry of `image`.
    pub fn build(image: &EnforcementImage) -> DestinationMaps {
        let mut maps = DestinationMaps::default();
        for entry in image.destinations.iter() {
            let (class, prefix, bytes) = slot_of(&entry.key());
            let verdict = kernel_verdict(&entry.verdict);
            let kept = maps
                .classes
                .get(&class)
                .and_then(|entries| entries.get(&(prefix, bytes)))
                .map_or(verdict, |kept| kept.strongest(verdict));
            maps.set_base(class, prefix, bytes, Some(kept));
        }
        for approval in &image.destination_approvals {
            let key = (
                IpNetwork::from(approval.address),
                Some(approval.port),
                approval.transport,
                0,
            );
            let (class, _, bytes) = slot_of(&key);
            // The first approval of an address names it.
            maps.approved.entry((class, bytes)).or_insert(approval.rule);
        }
        let slots: Vec<Slot> = maps
            .classes
            .iter()
            .flat_map(|(class, entries)| entries.keys().map(|(p, b)| (*class, *p, *b)))
            .chain(
                maps.approved
                    .keys()
                    .map(|(class, bytes)| (*class, full_length(class), *bytes)),
            )
            .collect();
        for slot in slots {
            if let Some(verdict) = maps.combined(&slot) {
                maps.set(&slot, Some(verdict));
            }
        }
        maps
    }

    /// The image's entries at `keys` changed (came, went, or got another verdict): works out
    /// their map entries again, and those of every entry they cover, and returns what changed.
    /// A name's entries are single addresses, which cover nothing: only they are looked at.
    pub fn update(
        &mut self,
        image: &EnforcementImage,
        keys: &[DestinationKey],
    ) -> DestinationChanges {
        let mut slots: Vec<Slot> = Vec::new();
        let mut whole: HashSet<Class> = HashSet::new();
        for key in keys {
            let slot @ (class, prefix, bytes) = slot_of(key);
            let verdict = image
                .destinations
                .get(key)
                .map(|e| kernel_verdict(&e.verdict));
            self.set_base(class, prefix, bytes, verdict);
            if prefix == full_length(&class) {
                slots.push(slot);
                // It covers the entries of single scopes at its address.
                let scoped = self.scoped_at.get(&(class, bytes)).into_iter().flatten();
                slots.extend(scoped.map(|scope| {
                    (
                        class,
                        scoped_length(&class),
                        with_scope(&class, bytes, *scope),
                    )
                }));
            } else if prefix == scoped_length(&class) {
                slots.push(slot);
            } else {
                whole.insert(class);
            }
        }
        for class in whole {
            let entries = self.classes.get(&class).into_iter().flatten();
            slots.extend(entries.map(|((p, b), _)| (class, *p, *b)));
            let approved = self.approved.keys().filter(|(c, _)| *c == class);
            slots.extend(approved.map(|(c, b)| (*c, full_length(c), *b)));
            // Entries whose own base went: they are in `keys` already, or no longer covered.
            slots.extend(self.held_in(class));
        }
        slots.sort_unstable();
        slots.dedup();
        let mut changes = DestinationChanges::default();
        for slot in slots {
            let new = self.combined(&slot);
            let old = self.set(&slot, new);
            if old != new {
                if slot.0.2 {
                    let key = kernel_key(&slot);
                    changes.v6.push(Change { key, old, new });
                } else {
                    let key = kernel_key(&slot);
                    changes.v4.push(Change { key, old, new });
                }
            }
        }
        changes
    }

    /// Puts back what a failed write of `change` left in the kernel, so these entries stay
    /// what the maps hold.
    pub fn undo_v4(&mut self, change: &Change<(u32, DestV4)>) {
        restore(&mut self.v4, change);
    }

    pub fn undo_v6(&mut self, change: &Change<(u32, DestV6)>) {
        restore(&mut self.v6, change);
    }

    /// The slots of `class` the tries hold now (to find one whose entry must go).
    fn held_in(&self, class: Class) -> Vec<Slot> {
        let (code, port, v6) = class;
        let unkey = |len: u32, data: &[u8]| -> Option<Slot> {
            // dest_key's layout: transport, port (big-endian), then the address and scope.
            (data[0] == code && u16::from_be_bytes([data[1], data[2]]) == port).then(|| {
                let mut bytes = [0u8; 24];
                bytes[..data.len() - 3].copy_from_slice(&data[3..]);
                (class, (len - DEST_HEAD_BITS) as u8, bytes)
            })
        };
        if v6 {
            self.v6
                .keys()
                .filter_map(|(len, k)| unkey(*len, k))
                .collect()
        } else {
            self.v4
                .keys()
                .filter_map(|(len, k)| unkey(*len, k))
                .collect()
        }
    }

    fn set_base(&mut self, class: Class, prefix: u8, bytes: Bytes, verdict: Option<Verdict>) {
        let entries = self.classes.entry(class).or_default();
        let lengths = self.lengths.entry(class).or_default();
        let had = match verdict {
            Some(verdict) => entries.insert((prefix, bytes), verdict).is_some(),
            None => entries.remove(&(prefix, bytes)).is_some(),
        };
        match (had, verdict.is_some()) {
            (false, true) => *lengths.entry(prefix).or_default() += 1,
            (true, false) => {
                if let Some(count) = lengths.get_mut(&prefix) {
                    *count -= 1;
                    if *count == 0 {
                        lengths.remove(&prefix);
                    }
                }
            }
            _ => {}
        }
        if entries.is_empty() {
            self.classes.remove(&class);
            self.lengths.remove(&class);
        }
        if prefix == scoped_length(&class) && had != verdict.is_some() {
            let at = full_length(&class) as usize / 8;
            let scope = u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
            let address = masked(bytes, full_length(&class));
            let scopes = self.scoped_at.entry((class, address)).or_default();
            if had {
                scopes.retain(|s| *s != scope);
                if scopes.is_empty() {
                    self.scoped_at.remove(&(class, address));
                }
            } else {
                scopes.push(scope);
            }
        }
    }

    /// The map entry `slot` should have: its own verdict combined with every entry of its
    /// class whose prefix contains it, and an approval's mark (`None`: no entry).
    fn combined(&self, &(class, prefix, bytes): &Slot) -> Option<Verdict> {
        let entries = self.classes.get(&class);
        let own = entries.and_then(|e| e.get(&(prefix, bytes))).copied();
        // An approval of the address marks its entries of single scopes too: one of them is
        // the longest match there.
        let approval = if prefix == full_length(&class) {
            self.approved.get(&(class, bytes))
        } else if prefix == scoped_length(&class) {
            self.approved
                .get(&(class, masked(bytes, full_length(&class))))
        } else {
            None
        };
        if own.is_none() && approval.is_none() {
            return None;
        }
        let mut combined = own.unwrap_or(Verdict::NONE);
        if let (Some(entries), Some(lengths)) = (entries, self.lengths.get(&class)) {
            for shorter in lengths.range(..prefix).map(|(len, _)| *len) {
                if let Some(cover) = entries.get(&(shorter, masked(bytes, shorter))) {
                    combined = combined.strongest(*cover);
                }
            }
        }
        Some(match approval {
            Some(rule) if combined.is_none() => Verdict::approval(*rule),
            Some(_) => Verdict {
                flags: combined.flags | VERDICT_APPROVAL,
                ..combined
            },
            // A covering approval never lends its mark to another address.
            None => Verdict {
                flags: combined.flags & !VERDICT_APPROVAL,
                ..combined
            },
        })
    }

    /// Sets `slot`'s map entry; returns what it was.
    fn set(&mut self, slot: &Slot, verdict: Option<Verdict>) -> Option<Verdict> {
        if slot.0.2 {
            let key = kernel_key(slot);
            match verdict {
                Some(v) => self.v6.insert(key, v),
                None => self.v6.remove(&key),
            }
        } else {
            let key = kernel_key(slot);
            match verdict {
                Some(v) => self.v4.insert(key, v),
                None => self.v4.remove(&key),
            }
        }
    }
}

fn restore<K: std::hash::Hash + Eq + Copy>(map: &mut HashMap<K, Verdict>, change: &Change<K>) {
    match change.old {
        Some(old) => map.insert(change.key, old),
        None => map.remove(&change.key),
    };
}
