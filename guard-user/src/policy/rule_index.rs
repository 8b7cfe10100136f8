//! The prefix rules as a token trie, so matching a command costs what its own tokens and the
//! rules on their path cost, not what the other rules of its program do (the kernel walks its
//! argv trie the same way, `guard_common::engine::argv`).
//!
//! The root's children are programs (a rule's first token), then each further pattern token.
//! A token with alternatives fans out, one edge per alternative, until the rule's paths would
//! number more than [`FAN_OUT_LIMIT`]; the rule is placed at the nodes its fanned-out prefix
//! reaches. Walking a command visits one node per token and collects the rules placed there.
//! A rule placed at the end of its whole pattern matches every command whose walk reaches it
//! (the path spells one of the pattern's readings); one placed before its end matches if the
//! command's next tokens are among the alternatives of its remaining pattern tokens, which the
//! index keeps as token ids beside the trie.
//!
//! A policy's rules are inserted into a [`TrieBuilder`] and then laid out flat ([`Trie`]), so a
//! check reads few cache lines in a policy of 100 000 rules, not many more than in one of 100
//! (`check_shared_prefixes` in `benches/policy.rs`, docs/performance.md): the nodes depth first,
//! each with its edges and what its children hold, so a program's subtree is one run of memory;
//! the rules placed at each node in one run too, with their positions, so rules that the path
//! does not match are never read. Rules appended later (approved amendments) are kept by program
//! beside it, until there are enough of them that the policy builds the index again
//! ([`PrefixIndex::needs_rebuild`]). Clones share the built trie.

use std::collections::HashMap;
use std::sync::Arc;

use super::rule::PrefixRule;

/// At most this many trie paths per rule: `["a", ["b1", ..., "b8"], ["c1", ..., "c8"]]` takes 64.
/// A rule with more alternatives stops fanning out at the token that would pass it, and is
/// confirmed by matching from there on.
const FAN_OUT_LIMIT: usize = 64;

/// Rules appended after the build, past which the policy builds the index again: each appended
/// rule costs the checks of its program a match of its pattern, a build costs the whole policy's.
const APPENDED_LIMIT: usize = 256;

/// The rule index. Rules are ordered by [`PrefixRule::id`], their position in load order.
#[derive(Clone, Debug, Default)]
pub struct PrefixIndex {
    /// The rules of the last build; shared by clones.
    built: Arc<Trie>,
    /// Rules appended since, by program (their first token), ascending; all after the built ones.
    appended: HashMap<Arc<str>, Vec<Arc<PrefixRule>>>,
    appended_count: usize,
}

impl PrefixIndex {
    /// The index of `rules`, in load order.
    pub fn build(rules: &[Arc<PrefixRule>]) -> Self {
        let mut builder = TrieBuilder::default();
        for (position, rule) in rules.iter().enumerate() {
            let position = u32::try_from(position).expect("fewer than 2^32 prefix rules");
            builder.insert(position, rule);
        }
        PrefixIndex {
            built: Arc::new(builder.lay_out(rules)),
            appended: HashMap::new(),
            appended_count: 0,
        }
    }

    /// Adds `rule`, after every rule indexed so far.
    pub fn append(&mut self, rule: Arc<PrefixRule>) {
        self.appended
            .entry(rule.pattern.first.clone())
            .or_default()
            .push(rule);
        self.appended_count += 1;
    }

    /// Enough rules were appended that the policy should build the index again.
    pub fn needs_rebuild(&self) -> bool {
        self.appended_count > APPENDED_LIMIT
    }

    /// Whether any rule's first token is `program`.
    pub fn has_program(&self, program: &str) -> bool {
        self.built.program(program).is_some() || self.appended.contains_key(program)
    }

    /// Every rule that matches `cmd`, in load order.
    pub fn matching<S: AsRef<str>>(&self, cmd: &[S]) -> Vec<&Arc<PrefixRule>> {
        let mut found: Vec<&Arc<PrefixRule>> = self
            .built
            .reached(cmd)
            .into_iter()
            .filter(|&(placed, depth)| self.built.rest_matches(placed.rest, &cmd[depth..]))
            .map(|(placed, _)| &placed.rule)
            .collect();
        found.extend(
            self.appended_for(cmd)
                .iter()
                .filter(|rule| rule.pattern.is_prefix_of(cmd)),
        );
        found
    }

    /// The rules the walk of `cmd` reaches, in load order, before their patterns are matched:
    /// every rule that matches is among them, and few others (a rule whose alternatives stopped
    /// its fan-out, one appended since the build).
    pub fn candidates<S: AsRef<str>>(&self, cmd: &[S]) -> Vec<&Arc<PrefixRule>> {
        let mut found: Vec<&Arc<PrefixRule>> = self
            .built
            .reached(cmd)
            .into_iter()
            .map(|(placed, _)| &placed.rule)
            .collect();
        found.extend(self.appended_for(cmd));
        found
    }

    fn appended_for<S: AsRef<str>>(&self, cmd: &[S]) -> &[Arc<PrefixRule>] {
        if self.appended.is_empty() {
            return &[];
        }
        cmd.first()
            .and_then(|program| self.appended.get(program.as_ref()))
            .map_or(&[], Vec::as_slice)
    }
}

/// The built trie. Its nodes with children are laid out one after another in depth-first order
/// in [`Trie::nodes`] (the root is not stored: [`Trie::tokens`] says where each program's node
/// is). At a node's offset: its number of edges `E`, its edges' `E` tokens, ascending, then per
/// edge, in the same order, where the child is (its offset, or [`LEAF`]) and where its rules are
/// in [`Trie::placed`] (start and count). A step reads its node's words alone: what the child
/// holds is in the edge, so the last node of a walk is not read at all.
#[derive(Clone, Debug)]
struct Trie {
    /// Every token the patterns name, each once.
    tokens: HashMap<Box<str>, Token>,
    nodes: Vec<u32>,
    /// The rules placed at each node, node after node in depth-first order, each node's in load
    /// order.
    placed: Vec<Placed>,
    /// The remaining patterns of the rules placed before their ends: at a rule's offset, how
    /// many tokens remain, then per token its number of alternatives and their token ids.
    rests: Vec<u32>,
}

/// A token's id, and its program's node if some rule's first token is this one.
#[derive(Clone, Copy, Debug)]
struct Token {
    id: u32,
    program: Option<Reached>,
}

/// A node the walk reached: where it is, and its rules.
#[derive(Clone, Copy, Debug)]
struct Reached {
    /// Offset in [`Trie::nodes`], or [`LEAF`].
    node: u32,
    placed: u32,
    count: u32,
}

/// A rule placed at a node.
#[derive(Clone, Debug)]
struct Placed {
    rule: Arc<PrefixRule>,
    /// The rule's position in load order (its id), kept here so ordering reads no rule.
    position: u32,
    /// Its remaining pattern's offset in [`Trie::rests`], or [`WHOLE`].
    rest: u32,
}

/// The offset of a node without children (which takes no words).
const LEAF: u32 = u32::MAX;
/// The words of an edge after its token: the child, its rules' start and count.
const EDGE: usize = 3;
/// [`Placed::rest`] of a rule placed at the end of its whole pattern.
const WHOLE: u32 = u32::MAX;

impl Default for Trie {
    fn default() -> Self {
        TrieBuilder::default().lay_out(&[])
    }
}

impl Trie {
    /// The rules placed on `cmd`'s path, each with its depth (the tokens the path took), in
    /// load order.
    fn reached<S: AsRef<str>>(&self, cmd: &[S]) -> Vec<(&Placed, usize)> {
        let mut found = Vec::new();
        let mut at: Option<Reached> = None;
        for (depth, token) in cmd.iter().enumerate().map(|(i, token)| (i + 1, token)) {
            let token = token.as_ref();
            let Some(next) = (match at {
                None => self.program(token),
                Some(node) => self.step(node, token),
            }) else {
                break;
            };
            at = Some(next);
            let (start, count) = (next.placed as usize, next.count as usize);
            found.extend(self.placed[start..start + count].iter().map(|p| (p, depth)));
        }
        // Each node's run is in load order; a rule sits at one depth, so there are no repeats.
        found.sort_unstable_by_key(|(placed, _)| placed.position);
        found
    }

    /// The node of the rules whose first token is `program`.
    fn program(&self, program: &str) -> Option<Reached> {
        self.tokens.get(program)?.program
    }

    fn step(&self, from: Reached, token: &str) -> Option<Reached> {
        if from.node == LEAF {
            return None;
        }
        let id = self.tokens.get(token)?.id;
        let at = from.node as usize;
        let edges = self.nodes[at] as usize;
        let found = self.nodes[at + 1..at + 1 + edges].binary_search(&id).ok()?;
        let edge = at + 1 + edges + EDGE * found;
        Some(Reached {
            node: self.nodes[edge],
            placed: self.nodes[edge + 1],
            count: self.nodes[edge + 2],
        })
    }

    /// Whether `tail`, the command's tokens after a rule's placement, starts with the rule's
    /// remaining pattern at `rest`.
    fn rest_matches<S: AsRef<str>>(&self, rest: u32, tail: &[S]) -> bool {
        if rest == WHOLE {
            return true;
        }
        let mut at = rest as usize;
        let remaining = self.rests[at] as usize;
        at += 1;
        if tail.len() < remaining {
            return false;
        }
        tail[..remaining].iter().all(|token| {
            let alternatives = self.rests[at] as usize;
            let ids = &self.rests[at + 1..at + 1 + alternatives];
            at += 1 + alternatives;
            // A token no pattern names is no alternative.
            self.tokens
                .get(token.as_ref())
                .is_some_and(|token| ids.contains(&token.id))
        })
    }
}

/// A node of the [`TrieBuilder`]; the root is [`ROOT`].
type Node = u32;
const ROOT: Node = 0;

/// The trie while rules are inserted: edges in one map keyed by (node, token), no map per node.
#[derive(Debug)]
struct TrieBuilder {
    tokens: HashMap<Box<str>, u32>,
    /// (parent, token) → child.
    edges: HashMap<(Node, u32), Node>,
    /// Per node, the positions of the rules placed there, ascending.
    placed: Vec<Vec<u32>>,
    /// As [`Trie::rests`].
    rests: Vec<u32>,
    /// The offset in `rests` of each rule placed before its pattern's end, by position.
    rest_of: HashMap<u32, u32>,
}

impl Default for TrieBuilder {
    fn default() -> Self {
        TrieBuilder {
            tokens: HashMap::new(),
            edges: HashMap::new(),
            placed: vec![Vec::new()],
            rests: Vec::new(),
            rest_of: HashMap::new(),
        }
    }
}

impl TrieBuilder {
    /// Adds the rule at `position`; positions must be added in ascending order.
    fn insert(&mut self, position: u32, rule: &PrefixRule) {
        let program = self.token_id(&rule.pattern.first);
        let mut frontier = vec![self.child(ROOT, program)];
        let mut paths = 1;
        let mut fanned_out = 0;
        for token in rule.pattern.rest.iter() {
            let alternatives = token.alternatives();
            paths *= alternatives.len();
            if paths > FAN_OUT_LIMIT {
                break;
            }
            let ids: Vec<u32> = alternatives.iter().map(|alt| self.token_id(alt)).collect();
            let mut next = Vec::with_capacity(frontier.len() * ids.len());
            for &node in &frontier {
                for &id in &ids {
                    let child = self.child(node, id);
                    if !next.contains(&child) {
                        next.push(child);
                    }
                }
            }
            frontier = next;
            fanned_out += 1;
        }
        let rest = &rule.pattern.rest[fanned_out..];
        if !rest.is_empty() {
            let offset = u32::try_from(self.rests.len())
                .ok()
                .filter(|&offset| offset != WHOLE)
                .expect("fewer than 2^32 words of remaining patterns");
            self.rest_of.insert(position, offset);
            self.rests.push(rest.len() as u32);
            for token in rest {
                let alternatives = token.alternatives();
                self.rests.push(alternatives.len() as u32);
                for alt in alternatives {
                    let id = self.token_id(alt);
                    self.rests.push(id);
                }
            }
        }
        for node in frontier {
            let placed = &mut self.placed[node as usize];
            debug_assert!(placed.last().is_none_or(|&last| last <= position));
            if placed.last() != Some(&position) {
                placed.push(position);
            }
        }
    }

    fn token_id(&mut self, token: &str) -> u32 {
        if let Some(&id) = self.tokens.get(token) {
            return id;
        }
        let id = self.tokens.len() as u32;
        self.tokens.insert(token.into(), id);
        id
    }

    fn child(&mut self, node: Node, token: u32) -> Node {
        let next = self.placed.len() as Node;
        let child = *self.edges.entry((node, token)).or_insert(next);
        if child == next {
            self.placed.push(Vec::new());
        }
        child
    }

    /// The flat trie of the rules inserted, `rules` by position (see [`Trie`]).
    fn lay_out(self, rules: &[Arc<PrefixRule>]) -> Trie {
        let TrieBuilder {
            tokens,
            edges,
            placed,
            rests,
            rest_of,
        } = self;
        // Each node's children, by token: sorted (parent, token, child) triples, and where each
        // parent's run starts.
        let mut children: Vec<(Node, u32, Node)> = edges
            .into_iter()
            .map(|((parent, token), child)| (parent, token, child))
            .collect();
        children.sort_unstable();
        let mut first_child = vec![0u32; placed.len() + 1];
        for &(parent, _, _) in &children {
            first_child[parent as usize + 1] += 1;
        }
        for i in 1..first_child.len() {
            first_child[i] += first_child[i - 1];
        }
        let children_of = |node: Node| {
            &children[first_child[node as usize] as usize..first_child[node as usize + 1] as usize]
        };
        // Depth-first order below the root, children by token; each node's offset (leaves take
        // none) and where its rules start.
        let mut order = Vec::with_capacity(placed.len());
        let mut offsets = vec![LEAF; placed.len()];
        let mut placed_start = vec![0u32; placed.len()];
        let (mut size, mut placements) = (0usize, 0usize);
        let mut stack: Vec<Node> = children_of(ROOT)
            .iter()
            .rev()
            .map(|&(_, _, child)| child)
            .collect();
        while let Some(node) = stack.pop() {
            order.push(node);
            let edges = children_of(node);
            if !edges.is_empty() {
                offsets[node as usize] = u32::try_from(size)
                    .ok()
                    .filter(|&offset| offset != LEAF)
                    .expect("a trie of fewer than 2^32 words");
                size += 1 + (1 + EDGE) * edges.len();
            }
            placed_start[node as usize] = placements as u32;
            placements += placed[node as usize].len();
            stack.extend(edges.iter().rev().map(|&(_, _, child)| child));
        }
        let reached = |node: Node| Reached {
            node: offsets[node as usize],
            placed: placed_start[node as usize],
            count: placed[node as usize].len() as u32,
        };
        let programs: HashMap<u32, Reached> = children_of(ROOT)
            .iter()
            .map(|&(_, token, child)| (token, reached(child)))
            .collect();
        let tokens = tokens
            .into_iter()
            .map(|(text, id)| {
                let program = programs.get(&id).copied();
                (text, Token { id, program })
            })
            .collect();
        let mut trie = Trie {
            tokens,
            nodes: Vec::with_capacity(size),
            placed: Vec::with_capacity(placements),
            rests,
        };
        for &node in &order {
            let edges = children_of(node);
            if !edges.is_empty() {
                trie.nodes.push(edges.len() as u32);
                trie.nodes.extend(edges.iter().map(|&(_, token, _)| token));
                for &(_, _, child) in edges {
                    let child = reached(child);
                    trie.nodes.extend([child.node, child.placed, child.count]);
                }
            }
            trie.placed
                .extend(placed[node as usize].iter().map(|&position| Placed {
                    rule: rules[position as usize].clone(),
                    position,
                    rest: rest_of.get(&position).copied().unwrap_or(WHOLE),
                }));
        }
        trie
    }
}

#[cfg(test)]
#[path = "rule_index_tests.rs"]
mod tests;
