//! The incremental destination entries against a full compile: after any sequence of answers
//! (a name's addresses set, changed or gone), the image updated one name at a time and its map
//! entries updated from the touched keys are exactly what compiling everything again gives.

use std::collections::HashMap;
use std::net::IpAddr;

use guard_common::maps::{
    DEST_HEAD_BITS, DestV4, DestV6, TRANSPORT_ANY, TRANSPORT_TCP, TRANSPORT_UDP, VERDICT_APPROVAL,
    Verdict, dest_key,
};
use proptest::prelude::*;

use crate::compile::destination_maps::DestinationMaps;
use crate::compile::image::EnforcementImage;
use crate::compile::{
    CompileEnv, HostResolver, NameChanges, compile, update_destinations, update_destinations_by,
};
use crate::policy::host::{host_covers, is_host_pattern};
use crate::policy::{PolicyParser, Transport};

/// Names the rules speak of, and the addresses they can have: few, so that names share
/// addresses and keys.
const NAMES: [&str; 6] = [
    "a.test",
    "b.test",
    "c.test",
    "x.p.test",
    "y.x.p.test",
    "p.test",
];
const ADDRESSES: [&str; 6] = [
    "10.0.0.1",
    "10.0.0.2",
    "10.0.1.7",
    "192.0.2.1",
    "2001:db8::1",
    "2001:db8::2",
];

/// What the resolver knows: a name set to no address was looked up and had none.
#[derive(Clone, Debug, Default)]
struct World(HashMap<String, Vec<IpAddr>>);

impl HostResolver for World {
    fn lookup(&self, host: &str) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = if is_host_pattern(host) {
            let covered = self.0.iter().filter(|(name, _)| host_covers(host, name));
            covered
                .flat_map(|(_, addrs)| addrs.iter().copied())
                .collect()
        } else {
            self.0.get(host).cloned().unwrap_or_default()
        };
        out.sort();
        out.dedup();
        out
    }

    fn covered_in_scopes(&self, name: &str) -> Option<Vec<(IpAddr, u64)>> {
        Some(self.lookup(name).into_iter().map(|ip| (ip, 0)).collect())
    }

    fn looked_up(&self, host: &str) -> bool {
        self.0.contains_key(host)
    }
}

fn decision() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("allow"), Just("deny"), Just("prompt")]
}

/// One rule's text: a network rule on a name or an address, or an address rule on names,
/// patterns and CIDRs, with ports, transports and audit-only.
fn rule() -> impl Strategy<Value = String> {
    let host = prop_oneof![
        (0..NAMES.len()).prop_map(|i| NAMES[i].to_string()),
        Just("10.0.0.1".to_string()),
    ];
    let protocol = prop_oneof![Just("https"), Just("http"), Just("socks5_tcp")];
    let network = (host, protocol, decision()).prop_map(|(host, protocol, decision)| {
        format!("network_rule(host=\"{host}\", protocol=\"{protocol}\", decision=\"{decision}\")")
    });
    let target = prop_oneof![
        (0..NAMES.len()).prop_map(|i| NAMES[i].to_string()),
        Just("*.p.test".to_string()),
        Just("**.p.test".to_string()),
        Just("10.0.0.0/24".to_string()),
        Just("2001:db8::/64".to_string()),
    ];
    let ports = prop_oneof![Just("None"), Just("[443]"), Just("[80, 443]")];
    let transport = prop_oneof![Just("tcp"), Just("udp"), Just("any")];
    let decision = prop_oneof![
        Just("allow"),
        Just("deny"),
        Just("prompt"),
        Just("audit_deny")
    ];
    let address = (
        prop::collection::vec(target, 1..3),
        ports,
        transport,
        decision,
    )
        .prop_map(|(targets, ports, transport, decision)| {
            let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
            let (decision, audit) = match decision {
                "audit_deny" => ("deny", ", audit_only=True"),
                other => (other, ""),
            };
            format!(
                "address_rule(addresses=[{}], ports={ports}, transport=\"{transport}\", \
                 decision=\"{decision}\"{audit})",
                targets.join(", ")
            )
        });
    prop_oneof![network, address]
}

/// An answer: `NAMES[name]` has these addresses now (none: it had none when looked up).
fn answer() -> impl Strategy<Value = (usize, Vec<usize>)> {
    (
        0..NAMES.len(),
        prop::collection::vec(0..ADDRESSES.len(), 0..3),
    )
}

/// The image as a full compile makes it, with the same approval on top.
fn full(policy: &crate::policy::Policy, world: &World) -> EnforcementImage {
    let mut image = compile(policy, world, &CompileEnv::default());
    approve(&mut image);
    image
}

fn approve(image: &mut EnforcementImage) {
    image.add_destination_approval(
        1,
        "10.0.0.2".parse().unwrap(),
        443,
        Transport::Tcp,
        "approval".into(),
        "approved".into(),
    );
}

/// The destination tries as the encoder made them before it kept them (every entry combined
/// with every shorter prefix of its class, written out plainly): the reference the kept maps
/// are held to.
#[allow(clippy::type_complexity)]
fn reference_tries(
    image: &EnforcementImage,
) -> (
    HashMap<(u32, DestV4), Verdict>,
    HashMap<(u32, DestV6), Verdict>,
) {
    fn mask(bytes: &[u8], prefix: u8) -> Vec<u8> {
        let bit = |i: usize| (prefix as usize) > i;
        bytes
            .iter()
            .enumerate()
            .map(|(at, byte)| {
                (0..8).fold(0u8, |out, b| {
                    out | if bit(at * 8 + b) {
                        byte & (0x80 >> b)
                    } else {
                        0
                    }
                })
            })
            .collect()
    }
    let code = |t: Transport| match t {
        Transport::Tcp => TRANSPORT_TCP,
        Transport::Udp => TRANSPORT_UDP,
        Transport::Any => TRANSPORT_ANY,
    };
    let mut classes: HashMap<(u8, u16, bool), HashMap<(u8, Vec<u8>), Verdict>> = HashMap::new();
    // An address's bytes, then the scope's (zero for every scope's entries).
    let with_scope = |mut address: Vec<u8>, scope: u64| {
        address.extend(scope.to_be_bytes());
        address
    };
    for entry in image.destinations.iter() {
        let (bytes, prefix, v6) = match entry.network.ip() {
            IpAddr::V4(a) => (a.octets().to_vec(), entry.network.prefix(), false),
            IpAddr::V6(a) => (a.octets().to_vec(), entry.network.prefix(), true),
        };
        let bytes = with_scope(bytes, entry.scope);
        let prefix = if entry.scope == 0 {
            prefix
        } else {
            prefix + 64
        };
        let v = &entry.verdict;
        let slot = classes
            .entry((code(entry.transport), entry.port.unwrap_or(0), v6))
            .or_default()
            .entry((prefix, mask(&bytes, prefix)))
            .or_insert(Verdict::NONE);
        *slot = slot.strongest(Verdict::new(v.decision, v.rule, v.audit_only));
    }
    let mut approved = HashMap::new();
    for approval in &image.destination_approvals {
        let (bytes, v6) = match approval.address {
            IpAddr::V4(a) => (a.octets().to_vec(), false),
            IpAddr::V6(a) => (a.octets().to_vec(), true),
        };
        let bytes = with_scope(bytes, 0);
        let class = (code(approval.transport), approval.port, v6);
        let full = if v6 { 128 } else { 32 };
        classes
            .entry(class)
            .or_default()
            .entry((full, bytes.clone()))
            .or_insert(Verdict::NONE);
        approved.entry((class, bytes)).or_insert(approval.rule);
    }
    let (mut v4, mut v6) = (HashMap::new(), HashMap::new());
    for (class, entries) in &classes {
        for ((prefix, bytes), verdict) in entries {
            let mut combined = *verdict;
            for shorter in 0..*prefix {
                if let Some(cover) = entries.get(&(shorter, mask(bytes, shorter))) {
                    combined = combined.strongest(*cover);
                }
            }
            let full = if class.2 { 128 } else { 32 };
            // An entry of one scope is marked by an approval of its address.
            let at_address = *prefix == full || *prefix == full + 64;
            match approved.get(&(*class, mask(bytes, full))) {
                Some(rule) if at_address && combined.is_none() => {
                    combined = Verdict::approval(*rule)
                }
                Some(_) if at_address => combined.flags |= VERDICT_APPROVAL,
                _ => combined.flags &= !VERDICT_APPROVAL,
            }
            let len = DEST_HEAD_BITS + *prefix as u32;
            if class.2 {
                v6.insert((len, dest_key::<27>(class.0, class.1, bytes)), combined);
            } else {
                v4.insert((len, dest_key::<15>(class.0, class.1, bytes)), combined);
            }
        }
    }
    (v4, v6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn answers_one_name_at_a_time_give_what_a_full_compile_gives(
        rules in prop::collection::vec(rule(), 1..8),
        answers in prop::collection::vec(answer(), 1..12),
    ) {
        let mut parser = PolicyParser::new();
        parser.parse("t.rules", &rules.join("\n")).unwrap();
        let policy = parser.build();
        let mut world = World::default();
        let mut image = full(&policy, &world);
        let mut maps = DestinationMaps::build(&image);
        for (name, addresses) in answers {
            let name = NAMES[name];
            let addresses = addresses.iter().map(|a| ADDRESSES[*a].parse().unwrap()).collect();
            world.0.insert(name.to_string(), addresses);
            let touched = update_destinations(&mut image, &[name.to_string()], &world);
            let changes = maps.update(&image, &touched);
            let expected = full(&policy, &world);
            prop_assert_eq!(&image.destinations, &expected.destinations);
            prop_assert_eq!(image.unresolved_hosts(), expected.unresolved_hosts());
            let (v4, v6) = reference_tries(&expected);
            prop_assert_eq!(&maps.v4, &v4, "after {}: {:?}", name, changes);
            prop_assert_eq!(&maps.v6, &v6);
            // Every change is one the tries need: none writes what they hold already.
            prop_assert!(changes.v4.iter().all(|c| c.old != c.new));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Answers from guard's resolver only add addresses: a name marked grown gives its
    /// patterns its addresses without their other names being looked at, and the image and
    /// the tries are still what a full compile gives.
    #[test]
    fn names_that_only_gain_addresses_give_what_a_full_compile_gives(
        rules in prop::collection::vec(rule(), 1..8),
        answers in prop::collection::vec(answer(), 1..12),
    ) {
        let mut parser = PolicyParser::new();
        parser.parse("t.rules", &rules.join("\n")).unwrap();
        let policy = parser.build();
        let mut world = World::default();
        let mut image = full(&policy, &world);
        let mut maps = DestinationMaps::build(&image);
        for (name, addresses) in answers {
            let name = NAMES[name];
            let known = world.0.entry(name.to_string()).or_default();
            for a in addresses {
                let ip: IpAddr = ADDRESSES[a].parse().unwrap();
                if !known.contains(&ip) {
                    known.push(ip);
                }
            }
            let grown = NameChanges { changed: Vec::new(), grown: vec![name.to_string()] };
            let touched = update_destinations_by(&mut image, &grown, &world);
            let changes = maps.update(&image, &touched);
            let expected = full(&policy, &world);
            prop_assert_eq!(&image.destinations, &expected.destinations);
            prop_assert_eq!(image.unresolved_hosts(), expected.unresolved_hosts());
            let (v4, v6) = reference_tries(&expected);
            prop_assert_eq!(&maps.v4, &v4, "after {}: {:?}", name, changes);
            prop_assert_eq!(&maps.v6, &v6);
        }
    }
}

#[test]
fn a_key_two_names_share_keeps_the_other_names_verdict_when_one_goes() {
    let mut parser = PolicyParser::new();
    parser
        .parse(
            "t.rules",
            "network_rule(host=\"a.test\", protocol=\"https\", decision=\"deny\")\n\
             network_rule(host=\"b.test\", protocol=\"https\", decision=\"allow\")\n",
        )
        .unwrap();
    let policy = parser.build();
    let shared: IpAddr = "192.0.2.1".parse().unwrap();
    let mut world = World::default();
    world.0.insert("a.test".into(), vec![shared]);
    world.0.insert("b.test".into(), vec![shared]);
    let mut image = compile(&policy, &world, &CompileEnv::default());
    let key = (
        ipnetwork::IpNetwork::from(shared),
        Some(443),
        Transport::Tcp,
        0,
    );
    let entry = image.destinations.get(&key).unwrap();
    assert_eq!(entry.host.as_deref(), Some("a.test"), "deny is stronger");
    let deny_rule = entry.verdict.rule;
    assert_eq!(
        image
            .destinations
            .host_for(shared, 443, Transport::Udp, deny_rule, 0),
        Some("a.test"),
        "a refusal names the name whose rule decided"
    );
    // a.test moves away: the address is b.test's again, allowed.
    world
        .0
        .insert("a.test".into(), vec!["192.0.2.9".parse().unwrap()]);
    let touched = update_destinations(&mut image, &["a.test".into()], &world);
    assert!(touched.contains(&key));
    let entry = image.destinations.get(&key).unwrap();
    assert_eq!(entry.host.as_deref(), Some("b.test"));
    assert_eq!(entry.verdict.decision, crate::policy::Decision::Allow);
    // Only a.test's entries were looked at: its old and new address, on its two endpoints.
    assert_eq!(touched.len(), 4, "{touched:?}");
}
