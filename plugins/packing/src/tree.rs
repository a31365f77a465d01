//! The index: a tournament tree over a set of nodes that finds the fitting node with the smallest
//! key without looking at every node.
//!
//! Leaves hold each member's key and free room; an inner entry holds the smallest key below it
//! and, per dimension, the largest free room below it. A search is branch and bound: it descends
//! towards the smaller key first and skips a subtree whose smallest key is no better than the best
//! fitting node found so far, or whose largest free room in some dimension is below the request.
//! When the node with the smallest key fits (the common case), the search walks one path:
//! O(log n). Nodes that fit nothing pending are given [`NO_KEY`](crate::usage::NO_KEY) and free
//! room 0 by the caller, so full nodes do not mislead the bounds. An update (a placement changed
//! one node) rewrites the path from its leaf to the root, stopping early where nothing changed:
//! O(log n). A build, once per call, is O(n).

use crate::usage::NO_KEY;
use gantry_sdk::abi::{GANTRY_NONE, GantryResources};

/// One entry of the tree: 32 bytes, two to a cache line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    key: u64,
    cpu: u64,
    mem: u64,
    gpus: u32,
}

const EMPTY: Entry = Entry { key: NO_KEY, cpu: 0, mem: 0, gpus: 0 };

impl Entry {
    #[inline]
    fn leaf(key: u64, free: &GantryResources) -> Entry {
        if key == NO_KEY {
            EMPTY
        } else {
            Entry { key, cpu: free.cpu_millis, mem: free.memory_bytes, gpus: free.gpus }
        }
    }

    #[inline]
    fn join(a: &Entry, b: &Entry) -> Entry {
        Entry {
            key: a.key.min(b.key),
            cpu: a.cpu.max(b.cpu),
            mem: a.mem.max(b.mem),
            gpus: a.gpus.max(b.gpus),
        }
    }

    #[inline]
    fn holds(&self, shape: &GantryResources) -> bool {
        self.cpu >= shape.cpu_millis && self.mem >= shape.memory_bytes && self.gpus >= shape.gpus
    }
}

/// The index over one set of nodes (all running nodes, or those matching a label filter).
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// Number of leaves: the number of members (at least 1).
    width: usize,
    /// `entries[1]` is the root, entry `i < width` joins `2i` and `2i + 1`, and the leaves are
    /// `entries[width..2 * width]`. With `width` not a power of two, leaves sit at two depths;
    /// nothing here needs a leaf's subtree to be a contiguous range, only that every entry
    /// bounds its two children.
    entries: Vec<Entry>,
    /// Node index of each leaf.
    members: Vec<u32>,
    /// Leaf of each node index, or `GANTRY_NONE` when the node is not a member.
    leaf_of: Vec<u32>,
}

impl Tree {
    /// Rebuilds the tree over `members` (node indexes below `nodes`), reading each member's key
    /// and free room through `get`. Reuses the allocations of the previous build.
    pub fn build(
        &mut self,
        nodes: usize,
        members: impl IntoIterator<Item = u32>,
        get: impl Fn(u32) -> (u64, GantryResources),
    ) {
        self.members.clear();
        self.members.extend(members);
        self.leaf_of.clear();
        self.leaf_of.resize(nodes, GANTRY_NONE);
        for (leaf, &node) in self.members.iter().enumerate() {
            if let Some(slot) = self.leaf_of.get_mut(node as usize) {
                *slot = leaf as u32;
            }
        }
        self.width = self.members.len().max(1);
        self.entries.clear();
        self.entries.resize(2 * self.width, EMPTY);
        for (leaf, &node) in self.members.iter().enumerate() {
            let (key, free) = get(node);
            self.entries[self.width + leaf] = Entry::leaf(key, &free);
        }
        for i in (1..self.width).rev() {
            self.entries[i] = Entry::join(&self.entries[2 * i], &self.entries[2 * i + 1]);
        }
    }

    /// Whether node `node` is a member.
    #[cfg(test)]
    pub fn contains(&self, node: u32) -> bool {
        self.leaf_of.get(node as usize).is_some_and(|&l| l != GANTRY_NONE)
    }

    /// Sets a member's key and free room; returns whether its free room grew in some dimension.
    /// Does nothing for a node that is not a member.
    pub fn update(&mut self, node: u32, key: u64, free: &GantryResources) -> bool {
        let Some(&leaf) = self.leaf_of.get(node as usize) else { return false };
        if leaf == GANTRY_NONE {
            return false;
        }
        let mut i = self.width + leaf as usize;
        let new = Entry::leaf(key, free);
        let old = self.entries[i];
        if old == new {
            return false;
        }
        let grew = new.cpu > old.cpu || new.mem > old.mem || new.gpus > old.gpus;
        self.entries[i] = new;
        while i > 1 {
            i /= 2;
            let joined = Entry::join(&self.entries[2 * i], &self.entries[2 * i + 1]);
            if self.entries[i] == joined {
                break;
            }
            self.entries[i] = joined;
        }
        grew
    }

    /// The member with the smallest key whose free room holds `shape`, with that key.
    pub fn best(&self, shape: &GantryResources) -> Option<(u32, u64)> {
        if self.members.is_empty() {
            return None;
        }
        let mut best_key = NO_KEY;
        let mut best_leaf = usize::MAX;
        // Depth-first: each step pops one entry and pushes at most two children, the better one
        // last, so the stack never holds more than one entry per level (at most 34 for u32 leaves).
        let mut stack = [0usize; 64];
        stack[0] = 1;
        let mut top = 1usize;
        while top > 0 {
            top -= 1;
            let i = stack[top];
            let e = &self.entries[i];
            if e.key >= best_key || !e.holds(shape) {
                continue;
            }
            if i >= self.width {
                // A leaf's bounds are its own room: it fits.
                best_key = e.key;
                best_leaf = i - self.width;
                continue;
            }
            let (l, r) = (2 * i, 2 * i + 1);
            let (first, second) = if self.entries[l].key <= self.entries[r].key { (l, r) } else { (r, l) };
            stack[top] = second;
            stack[top + 1] = first;
            top += 2;
        }
        self.members.get(best_leaf).map(|&node| (node, best_key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_sdk::rng::SplitMix64 as Rng;

    fn brute(
        keys: &[u64],
        free: &[GantryResources],
        members: &[u32],
        shape: &GantryResources,
    ) -> Option<(u32, u64)> {
        members
            .iter()
            .map(|&m| (m, keys[m as usize], free[m as usize]))
            .filter(|(_, k, f)| *k != NO_KEY && shape.fits_in(f))
            .min_by_key(|(_, k, _)| *k)
            .map(|(m, k, _)| (m, k))
    }

    #[test]
    fn empty_and_single() {
        let mut t = Tree::default();
        t.build(3, [], |_| (0, GantryResources::default()));
        assert_eq!(t.best(&GantryResources::default()), None);
        t.build(3, [2], |_| (7, GantryResources::new(1, 1, 0)));
        assert_eq!(t.best(&GantryResources::new(1, 1, 0)), Some((2, 7)));
        assert_eq!(t.best(&GantryResources::new(2, 1, 0)), None);
        assert!(t.contains(2) && !t.contains(0) && !t.contains(9));
        t.update(2, NO_KEY, &GantryResources::new(5, 5, 5));
        assert_eq!(t.best(&GantryResources::default()), None);
    }

    #[test]
    fn matches_a_linear_scan_under_random_updates() {
        let mut rng = Rng::new(11);
        for round in 0..200 {
            let n = 1 + rng.below(70) as usize;
            let mut keys: Vec<u64> = (0..n as u64).map(|i| (rng.below(50) << 32) | i).collect();
            let mut free: Vec<GantryResources> = (0..n)
                .map(|_| GantryResources::new(rng.below(9), rng.below(9), rng.below(3) as u32))
                .collect();
            for k in keys.iter_mut() {
                if rng.below(8) == 0 {
                    *k = NO_KEY;
                }
            }
            let members: Vec<u32> = (0..n as u32).filter(|_| round % 3 != 0 || rng.below(2) == 0).collect();
            let mut t = Tree::default();
            t.build(n, members.iter().copied(), |m| (keys[m as usize], free[m as usize]));
            for _ in 0..100 {
                let shape = GantryResources::new(rng.below(9), rng.below(9), rng.below(3) as u32);
                assert_eq!(t.best(&shape), brute(&keys, &free, &members, &shape), "round {round}");
                let m = rng.below(n as u64) as u32;
                // Keys change with most placements, but not all (a request with nothing in the
                // usage dimension), and rooms grow when a gang is given back.
                match rng.below(3) {
                    0 => {}
                    _ if rng.below(10) == 0 => keys[m as usize] = NO_KEY,
                    _ => keys[m as usize] = (rng.below(50) << 32) | u64::from(m),
                }
                free[m as usize] = GantryResources::new(rng.below(9), rng.below(9), rng.below(3) as u32);
                t.update(m, keys[m as usize], &free[m as usize]);
            }
        }
    }
}
