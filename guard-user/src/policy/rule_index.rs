//! The prefix rules as a token trie, so matching a command costs what its own tokens and the
//! rules on their path cost, not what the other rules of its program do (the kernel walks its
//! argv trie the same way, `guard_common::engine::argv`).
//!
//! The root's children are programs (a rule's first token), then each further pattern token.
//! A token with alternatives fans out, one edge per alternative, until the rule's paths would
//! number more than [`FAN_OUT_LIMIT`]; the rule is placed at the nodes its fanned-out prefix
//! reaches. Walking a command visits one node per token and collects the rules placed there:
//! the candidates. A candidate placed before its pattern's end still has to match the rest, so
//! callers confirm each candidate with [`super::rule::PrefixRule::matches`]; for the others that
//! is a formality.
//!
//! Tokens are interned once for the whole policy and edges live in one map keyed by
//! (node, token): no map per node, no string per edge.

use std::collections::HashMap;

use super::rule::PrefixRule;

/// At most this many trie paths per rule: `["a", ["b1", ..., "b8"], ["c1", ..., "c8"]]` takes 64.
/// A rule with more alternatives stops fanning out at the token that would pass it, and is
/// confirmed by matching from there on.
const FAN_OUT_LIMIT: usize = 64;

/// A trie node; the root is [`ROOT`].
type Node = u32;
const ROOT: Node = 0;

/// The rule index, by the rules' positions in load order (their [`super::rule::RuleId`]).
#[derive(Clone, Debug)]
pub struct PrefixIndex {
    /// Every token the patterns name, each once.
    tokens: HashMap<Box<str>, u32>,
    /// (parent, token) → child.
    edges: HashMap<(Node, u32), Node>,
    /// Per node, the positions of the rules placed there, ascending.
    placed: Vec<Vec<u32>>,
}

impl Default for PrefixIndex {
    fn default() -> Self {
        PrefixIndex {
            tokens: HashMap::new(),
            edges: HashMap::new(),
            placed: vec![Vec::new()],
        }
    }
}

impl PrefixIndex {
    /// Adds the rule at `position`; positions must be added in ascending order.
    pub fn insert(&mut self, position: u32, rule: &PrefixRule) {
        let program = self.token_id(&rule.pattern.first);
        let mut frontier = vec![self.child(ROOT, program)];
        let mut paths = 1;
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
        }
        for node in frontier {
            let placed = &mut self.placed[node as usize];
            debug_assert!(placed.last().is_none_or(|&last| last <= position));
            if placed.last() != Some(&position) {
                placed.push(position);
            }
        }
    }

    /// Whether any rule's first token is `program`.
    pub fn has_program(&self, program: &str) -> bool {
        self.step(ROOT, program).is_some()
    }

    /// The positions of the rules that may match `cmd`, ascending (load order): every rule that
    /// matches is among them; the caller confirms each.
    pub fn candidates<S: AsRef<str>>(&self, cmd: &[S]) -> Vec<u32> {
        let mut found = Vec::new();
        let mut node = ROOT;
        for token in cmd {
            let Some(child) = self.step(node, token.as_ref()) else {
                break;
            };
            node = child;
            found.extend_from_slice(&self.placed[node as usize]);
        }
        // Each node's list is ascending; a rule sits at one depth, so there are no repeats.
        found.sort_unstable();
        found
    }

    fn step(&self, node: Node, token: &str) -> Option<Node> {
        let id = *self.tokens.get(token)?;
        self.edges.get(&(node, id)).copied()
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
}

#[cfg(test)]
#[path = "rule_index_tests.rs"]
mod tests;
