//! [`EnforcementImage`] → the exact entries of the kernel's maps, with no kernel in reach:
//! `kernel::maps` writes what this makes, and the host twins (`guard check --kernel`, the hold)
//! decide over the same entries with `guard_common::engine`, the code the BPF programs run.
//!
//! Trie node ids are keyed by the token path, so a path keeps its id across updates and
//! changes in place; long tokens keep their ids the same way.
//!
//! Exec approvals live in the argv trie: the node their token path ends at carries
//! [`VERDICT_APPROVAL`] in its `here` (added to the rule that ends there, or alone, with no
//! decision, where none does). The flag is never part of any `below`, so reading less argv
//! than an approval covers never weakens a decision.

use std::collections::{BTreeMap, HashMap};

use anyhow::{Result, bail};
use guard_common::engine::argv::ArgvTables;
use guard_common::limits::{
    MAX_ARGV_EDGES, MAX_EXEC_ENTRIES, MAX_LONG_TOKENS, TOKEN_LEN, UNIX_PATH_LEN,
};
use guard_common::maps::{
    ArgvEdge, ArgvNode, ExecIdentity, ExecName, LongToken, ScopedApproval, Settings, UnixKey,
    VERDICT_APPROVAL, Verdict,
};

use super::destination_maps::DestinationMaps;
pub use super::destination_maps::masked;
use super::image::{EnforcementImage, Verdict as ImageVerdict, validate_exec_approval};
/// Every map entry an image puts in force (the pattern tables are the image's own).
#[derive(Clone, Debug, Default)]
pub struct MapEntries {
    pub settings: Option<Settings>,
    pub identities: HashMap<ExecIdentity, Verdict>,
    pub names: HashMap<ExecName, Verdict>,
    /// `ARGV_TRIE`.
    pub edges: HashMap<ArgvEdge, ArgvNode>,
    /// The edges parents-first (so writing it reversed puts children first).
    pub edge_order: Vec<ArgvEdge>,
    /// `ARGV_ROOTS`.
    pub roots: HashMap<ExecIdentity, ArgvNode>,
    /// `LONG_TOKEN_IDS`: each long token's whole text → its id.
    pub long: HashMap<LongToken, u32>,
    /// `DEST_V4` and `DEST_V6`, and what they were made from.
    pub destinations: DestinationMaps,
    /// `UNIX_EXACT`.
    pub unix_exact: HashMap<UnixKey, Verdict>,
    /// `UNIX_PREFIX`: (length in bits, bytes) → verdict.
    pub unix_prefix: HashMap<(u32, [u8; UNIX_PATH_LEN]), Verdict>,
    /// `APPROVALS`: which scope was given each approval the tries mark → the approval's rule.
    pub approvals: HashMap<ScopedApproval, u32>,
}

/// How many entries a program set's exec maps hold: what the encoder may fill, and what the
/// loader makes them (they are preallocated, so their size is kernel memory spent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecMapSizes {
    /// `ARGV_TRIE`.
    pub argv_edges: u32,
    /// `EXEC_IDENTITIES`, `EXEC_NAMES` and `ARGV_ROOTS`.
    pub exec_entries: u32,
    /// `TASKS` (an LRU: the oldest process's entry goes first).
    pub tasks: u32,
}

impl ExecMapSizes {
    /// A daemon's or a `guard run`'s own set: any policy the limits allow (its maps take about
    /// 200 MiB of kernel memory).
    pub const FULL: ExecMapSizes = ExecMapSizes {
        argv_edges: MAX_ARGV_EDGES,
        exec_entries: MAX_EXEC_ENTRIES,
        tasks: guard_common::limits::MAX_TASKS,
    };
    /// A follower's set (a run's overlay, a cgroup pattern's rules): some thousand prefix rules
    /// and their scopes' approvals, in a tenth of the memory (`cargo xtask bench -- daemon`).
    pub const FOLLOWER: ExecMapSizes = ExecMapSizes {
        argv_edges: 16_384,
        exec_entries: 4_096,
        tasks: 4_096,
    };
}

impl Default for ExecMapSizes {
    fn default() -> Self {
        ExecMapSizes::FULL
    }
}

/// Encodes images, keeping node and long-token ids stable from one image to the next.
#[derive(Debug)]
pub struct MapEncoder {
    long_ids: HashMap<String, u32>,
    next_long_id: u32,
    node_ids: HashMap<Vec<ArgvToken>, u32>,
    next_node: u32,
    /// What the maps it encodes for hold.
    sizes: ExecMapSizes,
}

impl Default for MapEncoder {
    fn default() -> Self {
        MapEncoder::with_sizes(ExecMapSizes::FULL)
    }
}

/// The argv trie as [`MapEncoder::build_trie`] makes it.
struct ArgvTrie {
    edges: HashMap<ArgvEdge, ArgvNode>,
    /// Edges parents-first.
    order: Vec<ArgvEdge>,
    /// Each long token's whole text → its id (`LONG_TOKEN_IDS`).
    long: HashMap<LongToken, u32>,
}

/// A token of an argv trie path, whole (a long one's edge key holds only its first bytes).
type ArgvToken = String;

/// The trie paths an approved argv ends at: by the program's name, and under an exec allowlist
/// also by its files' identity.
fn approval_paths(
    image: &EnforcementImage,
    allowlist: bool,
    tokens: &[String],
) -> Vec<Vec<ArgvToken>> {
    let path: Vec<ArgvToken> = tokens.iter().map(|t| token(t)).collect();
    let mut paths = vec![path.clone()];
    if allowlist
        && let Some((program, rest)) = path.split_first()
        && has_files(image, program)
    {
        let mut by_identity = vec![identity_token(program)];
        by_identity.extend(rest.iter().cloned());
        paths.push(by_identity);
    }
    paths
}

/// The destination approvals' scopes: exactly the address, port and transport each approved.
pub fn destination_approvals(image: &EnforcementImage) -> HashMap<ScopedApproval, u32> {
    let mut approvals = HashMap::new();
    for approval in &image.destination_approvals {
        let (v4, addr) = match approval.address {
            std::net::IpAddr::V4(ip) => {
                let mut addr = [0u8; 16];
                addr[..4].copy_from_slice(&ip.octets());
                (true, addr)
            }
            std::net::IpAddr::V6(ip) => (false, ip.octets()),
        };
        let transport = super::destination_maps::transport_code(approval.transport);
        approvals
            .entry(ScopedApproval::destination(
                approval.scope,
                v4,
                addr,
                approval.port,
                transport,
            ))
            .or_insert(approval.rule);
    }
    approvals
}

fn kernel_verdict(v: &ImageVerdict) -> Verdict {
    Verdict::new(v.decision, v.rule, v.audit_only)
}

impl MapEncoder {
    pub fn new() -> Self {
        MapEncoder::default()
    }

    /// An encoder for maps of `sizes`.
    pub fn with_sizes(sizes: ExecMapSizes) -> Self {
        MapEncoder {
            long_ids: HashMap::new(),
            next_long_id: 0,
            node_ids: HashMap::new(),
            next_node: 1,
            sizes,
        }
    }

    /// Every entry of `image`. Refused before anything is made: an approval the kernel cannot
    /// match exactly (it would approve more than what was approved), and more long tokens
    /// than the kernel holds.
    pub fn encode(&mut self, image: &EnforcementImage) -> Result<MapEntries> {
        for approval in &image.exec_approvals {
            validate_exec_approval(&approval.tokens)
                .map_err(|err| anyhow::anyhow!("exec approval {:?}: {err}", approval.tokens))?;
        }
        let identities = merge(image.identities.iter().map(|e| {
            (
                ExecIdentity {
                    dev: e.dev,
                    ino: e.ino,
                },
                kernel_verdict(&e.verdict),
            )
        }));
        let names = merge(image.names.iter().filter_map(|e| {
            ExecName::new(e.name.as_bytes()).map(|name| (name, kernel_verdict(&e.verdict)))
        }));
        let ArgvTrie { edges, order, long } = self.build_trie(image)?;
        // Refused before anything is written: a map that fills up half-way would leave a
        // reload's new entries beside the old ones.
        for (map, held, most) in [
            ("argv trie edges", edges.len(), self.sizes.argv_edges),
            ("file identities", identities.len(), self.sizes.exec_entries),
            ("program names", names.len(), self.sizes.exec_entries),
        ] {
            if held > most as usize {
                bail!(
                    "the rules need {held} {map} in the kernel, which holds at most {most}; \
                     split the policy between scopes or use fewer prefix rules (a rule that \
                     refuses or asks is held three times: as itself, and as busybox's and \
                     toybox's applet)"
                );
            }
        }
        let mut approvals = self.exec_approvals(image);
        approvals.extend(destination_approvals(image));
        let roots = argv_roots(image, &edges, &self.long_ids);
        let destinations = DestinationMaps::build(image);
        let (unix_exact, unix_prefix) = unix_entries(image);
        approvals.extend(unix_approvals(image, &unix_exact));
        let exec_approvals = edges.values().any(|n| n.here.approved());
        Ok(MapEntries {
            settings: Some(Settings {
                unmatched_exec: image.settings.unmatched_exec as u8,
                unmatched_network: image.settings.unmatched_network as u8,
                audit_only: image.settings.audit_only as u8,
                ready: 1,
                exec_approvals: u8::from(exec_approvals),
                record_allowed: u8::from(image.record_allowed),
                anonymous_exec: image.settings.anonymous_exec as u8,
                socket_kinds: image.settings.socket_kinds.bits(),
            }),
            identities,
            names,
            edges,
            edge_order: order,
            roots,
            long,
            destinations,
            unix_exact,
            unix_prefix,
            approvals,
        })
    }

    /// The exec approvals' scopes, by the trie node each approved path ends at (after
    /// [`MapEncoder::build_trie`] gave the paths their ids).
    fn exec_approvals(&self, image: &EnforcementImage) -> HashMap<ScopedApproval, u32> {
        let allowlist = allowlist(image);
        let mut approvals = HashMap::new();
        for approval in &image.exec_approvals {
            for path in approval_paths(image, allowlist, &approval.tokens) {
                if let Some(&node) = self.node_ids.get(&path) {
                    approvals
                        .entry(ScopedApproval::exec(approval.scope, node))
                        .or_insert(approval.rule);
                }
            }
        }
        approvals
    }

    /// The argv trie as edges, with `order` listing edges parents-first (so writing it reversed
    /// puts children first). Alternatives at a position fan out from every node reached so far;
    /// a shared prefix shares nodes.
    fn build_trie(&mut self, image: &EnforcementImage) -> Result<ArgvTrie> {
        // path -> (here, children paths)
        let mut here: BTreeMap<Vec<ArgvToken>, Verdict> = BTreeMap::new();
        let allowlist = allowlist(image);
        for rule in &image.argv_rules {
            // A program written as a path never equals a file name, so such a rule holds nothing
            // in the kernel (compile warns about it), as `Policy::kernel_exec_decision` says.
            // Under an exec allowlist an allow is reached by the file's identity alone.
            // A program whose name resolves to no file keeps its allows by name: there is no
            // identity to hold them by.
            let allow = rule.verdict.decision == crate::policy::Decision::Allow;
            let by_identity = allowlist && has_files(image, &rule.program);
            let mut starts = Vec::new();
            if !(by_identity && allow) {
                starts.push(token(&rule.program));
            }
            if by_identity {
                starts.push(identity_token(&rule.program));
            }
            for start in starts {
                Self::add_rule_paths(&mut here, start, rule);
            }
        }
        // Approvals: their paths exist (intermediate nodes lead on, deciding nothing); the flag
        // is added after `below` is computed, so it never reaches a `below`.
        let mut approved: BTreeMap<Vec<ArgvToken>, u32> = BTreeMap::new();
        for approval in &image.exec_approvals {
            for path in approval_paths(image, allowlist, &approval.tokens) {
                for depth in 1..=path.len() {
                    here.entry(path[..depth].to_vec()).or_insert(Verdict::NONE);
                }
                // The first approval of a path names it.
                approved.entry(path).or_insert(approval.rule);
            }
        }
        self.finish_trie(here, approved)
    }

    /// Adds `rule`'s paths from the root token `start` (its program, or the program's identity
    /// token) to `here`, with its verdict where they end. Alternatives at a position fan out
    /// from every node reached so far.
    fn add_rule_paths(
        here: &mut BTreeMap<Vec<ArgvToken>, Verdict>,
        start: ArgvToken,
        rule: &super::image::ArgvRule,
    ) {
        let mut frontier: Vec<Vec<ArgvToken>> = vec![vec![start]];
        here.entry(frontier[0].clone()).or_insert(Verdict::NONE);
        for alternatives in &rule.rest {
            let mut next = Vec::new();
            for path in &frontier {
                for alt in alternatives {
                    let mut child = path.clone();
                    child.push(token(alt));
                    here.entry(child.clone()).or_insert(Verdict::NONE);
                    next.push(child);
                }
            }
            frontier = next;
        }
        let verdict = kernel_verdict(&rule.verdict);
        for path in frontier {
            let slot = here.get_mut(&path).expect("inserted above");
            *slot = slot.strongest(verdict);
        }
    }

    /// The trie's edges from every path's `here` and the approved paths.
    fn finish_trie(
        &mut self,
        mut here: BTreeMap<Vec<ArgvToken>, Verdict>,
        approved: BTreeMap<Vec<ArgvToken>, u32>,
    ) -> Result<ArgvTrie> {
        // below(path) = strongest `here` of every strict descendant. BTreeMap order puts a path
        // before its descendants, so walk it backwards.
        let mut below: HashMap<Vec<ArgvToken>, Verdict> = HashMap::new();
        for (path, verdict) in here.iter().rev() {
            let mine = below.get(path).copied().unwrap_or(Verdict::NONE);
            if path.len() > 1 {
                let parent = path[..path.len() - 1].to_vec();
                let slot = below.entry(parent).or_insert(Verdict::NONE);
                *slot = slot.strongest(*verdict).strongest(mine);
            }
        }
        for (path, rule) in &approved {
            let slot = here.get_mut(path).expect("inserted above");
            *slot = if slot.is_none() {
                Verdict::approval(*rule)
            } else {
                Verdict {
                    flags: slot.flags | VERDICT_APPROVAL,
                    ..*slot
                }
            };
        }
        let mut edges = HashMap::new();
        let mut order = Vec::new();
        let mut ids = HashMap::new();
        let mut long = HashMap::new();
        for (path, verdict) in &here {
            let id = match self.node_ids.get(path) {
                Some(id) => *id,
                None => {
                    let id = self.next_node;
                    self.next_node += 1;
                    id
                }
            };
            ids.insert(path.clone(), id);
            let parent = if path.len() == 1 {
                0
            } else {
                ids[&path[..path.len() - 1]]
            };
            let last = &path[path.len() - 1];
            let edge = ArgvEdge::new(parent, last.as_bytes());
            let edge = match LongToken::new(last.as_bytes()) {
                Some(whole) => {
                    let id = self.long_token_id(last);
                    long.insert(whole, id);
                    ArgvEdge::long(parent, id)
                }
                None => edge,
            };
            edges.insert(
                edge,
                ArgvNode {
                    id,
                    here: *verdict,
                    below: below.get(path).copied().unwrap_or(Verdict::NONE),
                },
            );
            order.push(edge);
        }
        if long.len() > MAX_LONG_TOKENS as usize {
            bail!(
                "the rules and approvals hold {} distinct argv tokens longer than {TOKEN_LEN} \
                 bytes, and the kernel holds at most {MAX_LONG_TOKENS}; shorten the rules \
                 before their long tokens",
                long.len()
            );
        }
        // Kept only for an image that encodes: a refused one changes nothing.
        self.node_ids = ids;
        // Ids of long tokens no longer held are not reused while this process runs (a walk in
        // progress never meets an old id on a new token).
        Ok(ArgvTrie { edges, order, long })
    }

    /// The id of a long token: the same for the same text across updates.
    fn long_token_id(&mut self, text: &str) -> u32 {
        if let Some(id) = self.long_ids.get(text) {
            return *id;
        }
        let id = self.next_long_id;
        self.next_long_id += 1;
        self.long_ids.insert(text.to_string(), id);
        id
    }
}

/// `ARGV_ROOTS`: each argv root file → the trie node of its program's first token.
fn argv_roots(
    image: &EnforcementImage,
    edges: &HashMap<ArgvEdge, ArgvNode>,
    long_ids: &HashMap<String, u32>,
) -> HashMap<ExecIdentity, ArgvNode> {
    image
        .argv_roots
        .iter()
        .filter_map(|root| {
            let program = if allowlist(image) && has_files(image, &root.program) {
                identity_token(&root.program)
            } else {
                root.program.clone()
            };
            let edge = match long_ids.get(&program) {
                Some(id) => ArgvEdge::long(0, *id),
                None => ArgvEdge::new(0, program.as_bytes()),
            };
            let identity = ExecIdentity {
                dev: root.dev,
                ino: root.ino,
            };
            edges.get(&edge).map(|node| (identity, *node))
        })
        .collect()
}

fn token(text: &str) -> ArgvToken {
    text.to_string()
}

/// Whether the image is an exec allowlist (`unmatched_exec` is not `allow`): then an allow
/// holds only for the files a rule's name resolves to, never for a file that takes the name.
fn allowlist(image: &EnforcementImage) -> bool {
    !image.allow_by_name
}

/// Whether `program`'s name resolves to files the image knows (`ARGV_ROOTS` for it).
fn has_files(image: &EnforcementImage, program: &str) -> bool {
    image.argv_roots.iter().any(|root| root.program == program)
}

/// The root token of a program's paths that only its files' identity reaches (`ARGV_ROOTS`):
/// a leading NUL, which no name the kernel reads starts with, so no name reading gets there.
fn identity_token(program: &str) -> ArgvToken {
    format!("\0{program}")
}

/// One entry per key, strongest verdict kept.
fn merge<K: std::hash::Hash + Eq>(
    entries: impl Iterator<Item = (K, Verdict)>,
) -> HashMap<K, Verdict> {
    let mut out: HashMap<K, Verdict> = HashMap::new();
    for (key, verdict) in entries {
        let slot = out.entry(key).or_insert(Verdict::NONE);
        *slot = slot.strongest(verdict);
    }
    out
}

impl ArgvTables for MapEntries {
    fn child(&self, edge: &ArgvEdge) -> Option<ArgvNode> {
        self.edges.get(edge).copied()
    }

    fn root(&self, identity: &ExecIdentity) -> Option<ArgvNode> {
        self.roots.get(identity).copied()
    }

    fn long_token_id(&self, token: &LongToken) -> Option<u32> {
        self.long.get(token).copied()
    }
}

impl MapEntries {
    /// The verdict of the executed file's identity and name entries, as the exec hooks look
    /// them up.
    pub fn file_verdict(&self, identity: &ExecIdentity, name: &ExecName) -> Verdict {
        let by_identity = self.identities.get(identity).copied();
        let by_name = self.names.get(name).copied();
        Verdict::NONE
            .strongest(by_identity.unwrap_or(Verdict::NONE))
            .strongest(by_name.unwrap_or(Verdict::NONE))
    }
}

/// The unix socket tables: whole names keyed as the hooks read an address, prefixes with their
/// length in bits. An approved address marks its whole name's entry ([`Verdict::approved`]),
/// or is one with no decision of its own (the prefix still decides it), named by the first
/// approval of it.
#[allow(clippy::type_complexity)]
pub fn unix_entries(
    image: &EnforcementImage,
) -> (
    HashMap<UnixKey, Verdict>,
    HashMap<(u32, [u8; UNIX_PATH_LEN]), Verdict>,
) {
    let mut exact = HashMap::new();
    let mut prefixes = HashMap::new();
    for entry in &image.unix {
        let bytes = &entry.socket.bytes;
        let mut path = [0u8; UNIX_PATH_LEN];
        path[..bytes.len()].copy_from_slice(bytes);
        let verdict = kernel_verdict(&entry.verdict);
        if entry.socket.prefix {
            prefixes.insert((8 * bytes.len() as u32, path), verdict);
        } else if let Some(key) = unix_key(bytes) {
            exact.insert(key, verdict);
        }
    }
    for approval in &image.unix_approvals {
        if let Some(key) = unix_key(&approval.address) {
            exact
                .entry(key)
                .and_modify(|v: &mut Verdict| v.flags |= VERDICT_APPROVAL)
                .or_insert(Verdict::approval(approval.rule));
        }
    }
    (exact, prefixes)
}

/// The unix approvals' scopes, by the rule id of the exact entry each approved address has in
/// `exact` (a unix rule names one socket, an approval-only entry its first approval: the id
/// names the address).
fn unix_approvals(
    image: &EnforcementImage,
    exact: &HashMap<UnixKey, Verdict>,
) -> HashMap<ScopedApproval, u32> {
    let mut approvals = HashMap::new();
    for approval in &image.unix_approvals {
        if let Some(entry) = unix_key(&approval.address).and_then(|key| exact.get(&key)) {
            approvals
                .entry(ScopedApproval::unix(approval.scope, entry.rule))
                .or_insert(approval.rule);
        }
    }
    approvals
}

/// The exact table's key of an address (`None`: empty, or longer than an address can be).
fn unix_key(bytes: &[u8]) -> Option<UnixKey> {
    if bytes.is_empty() || bytes.len() > UNIX_PATH_LEN {
        return None;
    }
    let mut path = [0u8; UNIX_PATH_LEN];
    path[..bytes.len()].copy_from_slice(bytes);
    Some(UnixKey {
        len: bytes.len() as u32,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::destination_maps::DestinationMaps;
    use crate::compile::{CompileEnv, NoResolver, compile};
    use crate::policy::PolicyParser;
    use crate::policy::rule::Transport;
    use guard_common::Decision;
    use guard_common::maps::{DEST_HEAD_BITS, DestV4, TRANSPORT_UDP, dest_key};

    /// The image of `rules`, without the multi-call programs' forms of its rules (their trie
    /// paths are `compile::exec`'s to test; here they would only add edges to count).
    fn image(rules: &str) -> EnforcementImage {
        let mut parser = PolicyParser::new();
        parser
            .parse("t.rules", rules)
            .unwrap_or_else(|err| panic!("{rules:?} was refused: {err}"));
        let mut image = compile(&parser.build(), &NoResolver, &CompileEnv::default());
        image.argv_rules.retain(|rule| {
            !crate::policy::rule::MULTI_CALL_PROGRAMS.contains(&rule.program.as_str())
        });
        image
    }

    fn tokens(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    fn approve(image: &mut EnforcementImage, text: &str) -> u32 {
        image
            .add_exec_approval(
                1,
                &tokens(text),
                format!("approved `{text}`"),
                text.to_string(),
            )
            .unwrap()
    }

    /// The node at the end of `path` (space-separated tokens), if the trie has it.
    fn node(edges: &HashMap<ArgvEdge, ArgvNode>, path: &str) -> Option<ArgvNode> {
        let mut parent = 0;
        let mut found = None;
        for word in path.split_whitespace() {
            let n = *edges.get(&ArgvEdge::new(parent, word.as_bytes()))?;
            parent = n.id;
            found = Some(n);
        }
        found
    }

    fn verdict(decision: Decision, rule: u32) -> Verdict {
        Verdict::new(decision, rule, false)
    }

    #[test]
    fn an_approval_below_a_prompt_rule_marks_only_its_own_node() {
        let mut image = image("prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n");
        let rules = image.rules.len() as u32;
        let rule = approve(&mut image, "git push origin main");
        assert_eq!(
            rule, rules,
            "after the policy's rules (its one, the unix lists)"
        );
        let ArgvTrie { edges, order, .. } = MapEncoder::new().build_trie(&image).unwrap();
        assert_eq!(edges.len(), 4, "git, push, origin, main: {edges:?}");

        let push = node(&edges, "git push").unwrap();
        assert_eq!(push.here, verdict(Decision::Prompt, 0));
        assert_eq!(push.below, Verdict::NONE, "the approval is in no below");
        let origin = node(&edges, "git push origin").unwrap();
        assert_eq!(origin.here, Verdict::NONE, "a node that only leads on");
        let main = node(&edges, "git push origin main").unwrap();
        assert_eq!(main.here, Verdict::approval(rule));
        assert!(main.here.is_none() && main.here.approved());
        assert_eq!(
            node(&edges, "git").unwrap().below,
            verdict(Decision::Prompt, 0)
        );
        for n in edges.values() {
            assert!(
                !n.below.approved(),
                "a below carries the approval flag: {n:?}"
            );
            assert!(n.here.approved() == (n.id == main.id), "{n:?}");
        }
        // Children are written first (the order is written reversed): `main` before `origin`.
        let position = |path: &str| {
            let id = node(&edges, path).unwrap().id;
            order.iter().position(|e| edges[e].id == id).unwrap()
        };
        assert!(position("git push origin main") > position("git push origin"));
        assert!(position("git push origin") > position("git push"));
    }

    #[test]
    fn an_approval_where_a_rule_ends_keeps_the_rule_and_adds_the_flag() {
        let mut image = image(
            "prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n\
             prefix_rule(pattern=[\"git\", \"push\", \"origin\"], decision=\"forbidden\")\n",
        );
        approve(&mut image, "git push");
        approve(&mut image, "git push origin");
        let edges = MapEncoder::new().build_trie(&image).unwrap().edges;
        let push = node(&edges, "git push").unwrap();
        assert_eq!(push.here.decision, Decision::Prompt as u8);
        assert_eq!(push.here.rule, 0, "the rule's id, not the approval's");
        assert!(push.here.approved());
        assert_eq!(
            push.below,
            verdict(Decision::Forbidden, 1),
            "without the flag"
        );
        let origin = node(&edges, "git push origin").unwrap();
        assert_eq!(origin.here.decision, Decision::Forbidden as u8);
        assert!(
            origin.here.approved(),
            "flagged, though the kernel never lets an approval override forbidden"
        );
        assert_eq!(
            node(&edges, "git").unwrap().below,
            verdict(Decision::Forbidden, 1)
        );
    }

    #[test]
    fn an_approval_of_a_program_alone_marks_its_root_node() {
        let mut image = image("enforcement(unmatched_exec=\"prompt\")\n");
        let rule = approve(&mut image, "gt-unmatched");
        let edges = MapEncoder::new().build_trie(&image).unwrap().edges;
        // A name that resolves to no file has its paths by name alone, allowlist or not.
        assert_eq!(edges.len(), 1);
        assert_eq!(
            node(&edges, "gt-unmatched").unwrap().here,
            Verdict::approval(rule)
        );
    }

    #[test]
    fn removing_an_approval_unflags_in_place_and_drops_only_its_own_nodes() {
        let base = image("prefix_rule(pattern=[\"git\", \"push\"], decision=\"prompt\")\n");
        let mut approved = base.clone();
        approve(&mut approved, "git push origin main");
        approve(&mut approved, "git push");
        let mut sync = MapEncoder::new();
        let before = sync.build_trie(&approved).unwrap().edges;
        let after = sync.build_trie(&base).unwrap().edges;
        assert_eq!(after.len(), 2, "git and push remain: {after:?}");
        for path in ["git", "git push"] {
            let (old, new) = (node(&before, path).unwrap(), node(&after, path).unwrap());
            assert_eq!(
                old.id, new.id,
                "{path} keeps its id, so its edge changes in place"
            );
        }
        assert!(node(&before, "git push").unwrap().here.approved());
        assert_eq!(
            node(&after, "git push").unwrap().here,
            verdict(Decision::Prompt, 0)
        );
        assert!(node(&after, "git push origin").is_none());
    }

    #[test]
    fn masks_keep_the_prefix_bits_only() {
        assert_eq!(masked([10, 1, 2, 3], 8), [10, 0, 0, 0]);
        assert_eq!(masked([10, 255, 2, 3], 12), [10, 240, 0, 0]);
        assert_eq!(masked([10, 1, 2, 3], 32), [10, 1, 2, 3]);
        assert_eq!(masked([10, 1, 2, 3], 0), [0, 0, 0, 0]);
    }

    fn approve_destination(image: &mut EnforcementImage, ip: &str, port: u16) -> u32 {
        image.add_destination_approval(
            1,
            ip.parse().unwrap(),
            port,
            Transport::Udp,
            "approval".into(),
            "approved".into(),
        )
    }

    /// The v4 entries in the exact (udp, port) class at `ip`/32.
    fn v4_exact(
        entries: &HashMap<(u32, DestV4), Verdict>,
        ip: [u8; 4],
        port: u16,
    ) -> Option<Verdict> {
        entries
            .get(&(
                DEST_HEAD_BITS + 32,
                dest_key::<15>(TRANSPORT_UDP, port, &ip),
            ))
            .copied()
    }

    #[test]
    fn a_destination_approval_marks_only_its_exact_entry_and_keeps_forbidden() {
        let mut image = image(
            "address_rule(addresses=[\"10.0.0.0/24\"], ports=[53], transport=\"udp\", decision=\"prompt\")\n\
             address_rule(addresses=[\"10.0.1.0/24\"], ports=[53], transport=\"udp\", decision=\"forbidden\")\n",
        );
        let prompt_ok = approve_destination(&mut image, "10.0.0.5", 53);
        approve_destination(&mut image, "10.0.1.5", 53);
        let lone = approve_destination(&mut image, "10.0.2.5", 53);
        let v4 = DestinationMaps::build(&image).v4;
        // Under a prompt rule: the prompt, marked (the kernel lets it through).
        let marked = v4_exact(&v4, [10, 0, 0, 5], 53).unwrap();
        assert_eq!(marked.decision, Decision::Prompt as u8);
        assert!(marked.approved());
        assert_ne!(
            marked.rule, prompt_ok,
            "the rule that decides is still the prompt rule"
        );
        // Under a forbidden rule: forbidden, marked (the kernel never lets a forbidden through).
        let forbidden = v4_exact(&v4, [10, 0, 1, 5], 53).unwrap();
        assert_eq!(forbidden.decision, Decision::Forbidden as u8);
        // Under no rule of this class: the mark only, no decision of its own (the kernel still
        // combines the other classes and the unmatched default, then lets only a prompt through).
        assert_eq!(
            v4_exact(&v4, [10, 0, 2, 5], 53),
            Some(Verdict::approval(lone))
        );
        // Nothing else carries a mark.
        let marks = v4.values().filter(|v| v.approved()).count();
        assert_eq!(marks, 3, "{v4:?}");
    }

    #[test]
    fn a_unix_approval_marks_its_whole_name_and_is_held_for_its_scope_by_that_entrys_rule() {
        let mut image = image(
            "unix_rule(socket=\"/run/ask.sock\", decision=\"prompt\")\n\
             unix_rule(socket=\"/run/no.sock\", decision=\"forbidden\")\n",
        );
        let mut approve = |scope, address: &str| {
            image.add_unix_approval(scope, address.as_bytes().to_vec(), "a".into(), "a".into())
        };
        let named = approve(1, "/run/ask.sock");
        approve(1, "/run/no.sock");
        let lone = approve(1, "/tmp/t/srv.sock");
        let again = approve(2, "/tmp/t/srv.sock");
        let entries = MapEncoder::new().encode(&image).unwrap();
        let exact = |address: &str| entries.unix_exact[&unix_key(address.as_bytes()).unwrap()];
        // A rule's entry keeps its decision and rule, marked (the kernel lets only a prompt by).
        let ask = exact("/run/ask.sock");
        assert_eq!(
            (ask.decision, ask.approved()),
            (Decision::Prompt as u8, true)
        );
        assert_ne!(
            ask.rule, named,
            "the rule that decides is still the prompt rule"
        );
        let no = exact("/run/no.sock");
        assert_eq!(
            (no.decision, no.approved()),
            (Decision::Forbidden as u8, true)
        );
        // A name nothing names whole: the mark alone, the first approval's (the prefix decides).
        assert_eq!(exact("/tmp/t/srv.sock"), Verdict::approval(lone));
        // Each approval is its scope's, keyed by the rule its entry carries.
        let unix: HashMap<ScopedApproval, u32> = entries
            .approvals
            .iter()
            .filter(|(k, _)| k.kind == guard_common::maps::approval_kind::UNIX)
            .map(|(k, v)| (*k, *v))
            .collect();
        assert_eq!(unix.len(), 4, "{unix:?}");
        assert_eq!(unix[&ScopedApproval::unix(1, ask.rule)], named);
        assert_eq!(unix[&ScopedApproval::unix(1, lone)], lone);
        assert_eq!(unix[&ScopedApproval::unix(2, lone)], again);
        assert!(!unix.contains_key(&ScopedApproval::unix(2, ask.rule)));
        let marks = entries.unix_exact.values().filter(|v| v.approved()).count();
        assert_eq!(marks, 3);
    }

    #[test]
    fn a_long_token_is_keyed_by_its_id_and_keeps_the_id_across_updates() {
        let long = "l".repeat(TOKEN_LEN + 8);
        let base = image(&format!(
            "prefix_rule(pattern=[\"tool\", \"{long}\"], decision=\"forbidden\")\n"
        ));
        let mut sync = MapEncoder::new();
        let first = sync.build_trie(&base).unwrap();
        let (whole, id) = first.long.iter().next().map(|(k, v)| (*k, *v)).unwrap();
        assert_eq!(&whole.bytes[..long.len()], long.as_bytes());
        let tool = first.edges[&ArgvEdge::new(0, b"tool")];
        let node = first.edges[&ArgvEdge::long(tool.id, id)];
        assert_eq!(node.here.decision, Decision::Forbidden as u8);
        // A token alike in its first 32 bytes is another key, not this one.
        assert!(
            !first
                .edges
                .contains_key(&ArgvEdge::new(tool.id, long.as_bytes()))
        );
        let again = sync.build_trie(&base).unwrap();
        assert_eq!(again.long, first.long, "the same text keeps its id");
    }
}
