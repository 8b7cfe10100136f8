//! The kernel's decisions worked out on the host: `guard_common::engine`, the code the BPF
//! programs run, over the map entries [`MapEncoder`] makes from an image. The exec and
//! destination twins, `guard check --kernel` and the parity tests decide through it.

use std::net::IpAddr;

use guard_common::engine::Decided;
use guard_common::engine::argv::str_len;
use guard_common::engine::argv::walk;
use guard_common::engine::destination::{decide_destination, is_v4_mapped, lookup};
use guard_common::engine::exec::{ExecFindings, decide_exec};
use guard_common::limits::NAME_LEN;
use guard_common::maps::{
    DEST_HEAD_BITS, ExecIdentity, ExecName, ScopedApproval, Settings, TRANSPORT_ANY, TRANSPORT_TCP,
    TRANSPORT_UDP, Verdict, dest_key,
};

use super::encode::{MapEncoder, MapEntries, masked};
use super::image::EnforcementImage;
use crate::policy::rule::Transport;

/// An image and its map entries, for deciding many calls.
pub struct KernelEngine {
    pub image: EnforcementImage,
    entries: MapEntries,
    settings: Settings,
    /// The prefix lengths (head included) the IPv4 and IPv6 tables hold, longest first: a
    /// longest match looks up only these, as an LPM trie visits only the nodes it has.
    v4_lengths: Vec<u32>,
    v6_lengths: Vec<u32>,
}

/// The distinct prefix lengths of `entries`, longest first.
fn lengths<K>(entries: &std::collections::HashMap<(u32, K), Verdict>) -> Vec<u32> {
    let mut lengths: Vec<u32> = entries.keys().map(|(len, _)| *len).collect();
    lengths.sort_unstable_by(|a, b| b.cmp(a));
    lengths.dedup();
    lengths
}

impl KernelEngine {
    /// `Err` for an image the kernel would refuse (see [`MapEncoder::encode`]).
    pub fn new(image: EnforcementImage) -> anyhow::Result<KernelEngine> {
        let entries = MapEncoder::new().encode(&image)?;
        let settings = entries.settings.expect("the encoder always makes settings");
        Ok(KernelEngine {
            v4_lengths: lengths(&entries.destinations.v4),
            v6_lengths: lengths(&entries.destinations.v6),
            image,
            entries,
            settings,
        })
    }

    /// Whether an approval the tries mark holds for `scope` (`None`: a decision for no scope
    /// in particular, where every approval the image holds counts).
    fn approval_holds(&self, scope: Option<u64>, key: impl Fn(u64) -> ScopedApproval) -> bool {
        scope.is_none_or(|scope| self.entries.approvals.contains_key(&key(scope)))
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The text of kernel rule `rule`, as written.
    pub fn rule_text(&self, rule: u32) -> Option<String> {
        self.image.rules.get(rule as usize).map(|r| r.text.clone())
    }

    /// The decision for an exec of the file `identity` named `name` with `argv` (`argv[0]` as
    /// the caller gave it), as `sched_process_exec` makes it; the pattern tables are walked by
    /// their own twin ([`super::patterns::PatternTables::decide_exec`]).
    pub fn exec(&self, identity: ExecIdentity, name: &str, argv: &[String]) -> Decided {
        self.exec_in(None, identity, name, argv)
    }

    /// [`KernelEngine::exec`] for a process of `scope` (a cgroup id): only that scope's
    /// approvals count, as in the kernel (`None`: every approval counts).
    pub fn exec_in(
        &self,
        scope: Option<u64>,
        identity: ExecIdentity,
        name: &str,
        argv: &[String],
    ) -> Decided {
        let name = exec_name(name);
        let mut region = Vec::new();
        for token in argv {
            region.extend_from_slice(token.as_bytes());
            region.push(0);
        }
        let by_argv = walk(&self.entries, &identity, &name, &region, |node| {
            self.approval_holds(scope, |scope| ScopedApproval::exec(scope, node))
        });
        let argv0 = argv.first().map_or("", String::as_str);
        let args: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
        let file_name = String::from_utf8_lossy(&name.name[..str_len(&name.name)]).into_owned();
        let by_pattern = self.image.patterns.exec_verdict(&file_name, argv0, &args);
        let found = ExecFindings {
            by_file: self.entries.file_verdict(&identity, &name),
            by_argv,
            by_pattern,
            anonymous: false,
        };
        decide_exec(&self.settings, &found)
    }

    /// The decision for a connect or send to `address`, `port` over `transport`, as the
    /// destination programs make it (an IPv4-mapped address is decided as IPv4).
    pub fn destination(&self, address: IpAddr, port: u16, transport: Transport) -> Decided {
        self.destination_in(None, address, port, transport)
    }

    /// [`KernelEngine::destination`] for a process of `scope` (a cgroup id): only that scope's
    /// approvals count (`None`: every approval counts).
    pub fn destination_in(
        &self,
        scope: Option<u64>,
        address: IpAddr,
        port: u16,
        transport: Transport,
    ) -> Decided {
        let address = match address {
            IpAddr::V6(v6) if is_v4_mapped(&v6.octets()) => {
                IpAddr::V4(v6.to_ipv4_mapped().expect("checked mapped"))
            }
            other => other,
        };
        let code = match transport {
            Transport::Tcp => TRANSPORT_TCP,
            Transport::Udp => TRANSPORT_UDP,
            Transport::Any => TRANSPORT_ANY,
        };
        let (found, marked) = lookup(code, port, |transport, port| {
            self.longest_match(transport, port, address, scope.unwrap_or(0))
        });
        let (v4, addr) = match address {
            IpAddr::V4(a) => {
                let mut addr = [0; 16];
                addr[..4].copy_from_slice(&a.octets());
                (true, addr)
            }
            IpAddr::V6(a) => (false, a.octets()),
        };

        let (mut verdict, mut flags) = (found, 0);
        decide_destination(&self.settings, &mut verdict, &mut flags, marked, || {
            self.approval_holds(scope, |scope| {
                ScopedApproval::destination(scope, v4, addr, port, code)
            })
        });
        Decided { verdict, flags }
    }

    /// The longest match of a destination table, as the kernel's LPM lookup finds it: the entry
    /// of the longest prefix that holds `transport`, `port` and `address` in `scope`.
    fn longest_match(
        &self,
        transport: u8,
        port: u16,
        address: IpAddr,
        scope: u64,
    ) -> Option<Verdict> {
        let bits = |len: u32| (len - DEST_HEAD_BITS) as u8;
        let mut full = [0u8; 24];
        let scope = scope.to_be_bytes();
        match address {
            IpAddr::V4(a) => {
                full[..4].copy_from_slice(&a.octets());
                full[4..12].copy_from_slice(&scope);
                self.v4_lengths.iter().find_map(|&len| {
                    let key = dest_key::<15>(transport, port, &masked(full, bits(len))[..12]);
                    self.entries.destinations.v4.get(&(len, key)).copied()
                })
            }
            IpAddr::V6(a) => {
                full[..16].copy_from_slice(&a.octets());
                full[16..].copy_from_slice(&scope);
                self.v6_lengths.iter().find_map(|&len| {
                    let key = dest_key::<27>(transport, port, &masked(full, bits(len)));
                    self.entries.destinations.v6.get(&(len, key)).copied()
                })
            }
        }
    }
}

/// The name as the exec hooks read it: the dentry name, at most `NAME_LEN - 1` bytes.
fn exec_name(name: &str) -> ExecName {
    let bytes = name.as_bytes();
    let kept = &bytes[..bytes.len().min(NAME_LEN - 1)];
    ExecName::new(kept).unwrap_or(ExecName {
        name: [0; NAME_LEN],
    })
}
