//! Stand-in addresses for names that must not leave the host before a person approves them
//! (under `unmatched_network="prompt"`): each such name gets one address of
//! [`STAND_IN_NET`](guard_common::maps::STAND_IN_NET), the same one every time it is asked while
//! the resolver runs, so an approval of the stand-in's connect holds for the program's next
//! lookup too. The kernel decides a connect to a stand-in like any address (the answer book
//! names its name in the ask) and sends an approved one to the name's real address
//! (`guard-ebpf/src/stand_in.rs`).

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

use guard_common::maps::{STAND_IN_NET, STAND_IN_PREFIX, is_stand_in};

/// How many addresses the network has (the first and last are not handed out).
const POOL: u32 = 1 << (32 - STAND_IN_PREFIX);

/// Whether `ip` is one of guard's stand-in addresses.
pub fn is_stand_in_ip(ip: std::net::IpAddr) -> bool {
    match crate::policy::rule::canonical_ip(ip) {
        std::net::IpAddr::V4(v4) => is_stand_in(v4.octets()),
        std::net::IpAddr::V6(_) => false,
    }
}

/// Names and their stand-ins, both ways. Past [`POOL`] names the one asked least recently gives
/// its address up (a flood of names cannot grow this without bound).
#[derive(Default)]
pub struct StandIns {
    by_name: HashMap<String, (Ipv4Addr, u64)>,
    by_address: HashMap<Ipv4Addr, String>,
    /// When each name was last asked → the name: the oldest first.
    by_age: BTreeMap<u64, String>,
    next: u32,
    /// Increases with every lookup: the last time each name was asked.
    clock: u64,
}

impl StandIns {
    /// The stand-in of `name` (normalised), given out now if it had none.
    pub fn address_for(&mut self, name: &str) -> Ipv4Addr {
        self.clock += 1;
        if let Some((address, asked)) = self.by_name.get_mut(name) {
            self.by_age.remove(asked);
            *asked = self.clock;
            self.by_age.insert(self.clock, name.to_string());
            return *address;
        }
        if self.by_address.len() as u32 >= POOL - 2 {
            self.give_up_oldest();
        }
        let base = u32::from(Ipv4Addr::from(STAND_IN_NET));
        let address = loop {
            // 1 ..= POOL - 2: neither the network's first nor its last address.
            self.next = self.next % (POOL - 2) + 1;
            let candidate = Ipv4Addr::from(base + self.next);
            if !self.by_address.contains_key(&candidate) {
                break candidate;
            }
        };
        self.by_name.insert(name.to_string(), (address, self.clock));
        self.by_address.insert(address, name.to_string());
        self.by_age.insert(self.clock, name.to_string());
        address
    }

    /// The name `address` stands for, if it is a stand-in given out.
    pub fn name_of(&self, address: Ipv4Addr) -> Option<&str> {
        self.by_address.get(&address).map(String::as_str)
    }

    fn give_up_oldest(&mut self) {
        let Some((_, name)) = self.by_age.pop_first() else {
            return;
        };
        if let Some((address, _)) = self.by_name.remove(&name) {
            self.by_address.remove(&address);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_its_stand_in_and_names_get_their_own() {
        let mut stand_ins = StandIns::default();
        let a = stand_ins.address_for("a.example.test");
        let b = stand_ins.address_for("b.example.test");
        assert_ne!(a, b);
        assert_eq!(stand_ins.address_for("a.example.test"), a);
        assert_eq!(a, Ipv4Addr::new(198, 18, 0, 1));
        assert!(is_stand_in_ip(a.into()) && is_stand_in_ip(Ipv4Addr::new(198, 19, 255, 1).into()));
        assert!(!is_stand_in_ip(Ipv4Addr::new(198, 20, 0, 1).into()));
        assert!(is_stand_in_ip("::ffff:198.18.0.1".parse().unwrap()));
        assert_eq!(stand_ins.name_of(b), Some("b.example.test"));
    }

    #[test]
    fn past_the_pool_the_least_recently_asked_name_gives_its_address_up() {
        let mut stand_ins = StandIns::default();
        let first = stand_ins.address_for("first.test");
        for i in 0..(POOL - 3) {
            stand_ins.address_for(&format!("n{i}.test"));
            if i == 10 {
                // Asked again: no longer the oldest.
                stand_ins.address_for("first.test");
            }
        }
        assert_eq!(stand_ins.by_address.len() as u32, POOL - 2);
        stand_ins.address_for("one.more.test");
        assert_eq!(stand_ins.by_address.len() as u32, POOL - 2);
        assert_eq!(stand_ins.name_of(first), Some("first.test"));
        assert!(!stand_ins.by_name.contains_key("n0.test"));
    }
}
