//! Definitions in the ABI's node form (ABI 1.3, `GantryRdlNode`): how the engine lays a
//! reservation's expression out in a plugin's view, and how a Rust planner reads it back.
//!
//! The layout (sdk/ABI.md §6, `GantryRdlNode`): a reservation's nodes form one block, root first,
//! breadth first, so the children of every node are contiguous and a C plugin walks them with a
//! range; ranges are indexes into the view's whole `rdl_nodes` array. An atom's `atom` field is
//! its position among the expression's atoms in pre-order ([`Expr::atoms`]), the index an
//! allocation piece names.

use std::collections::VecDeque;

use gantry_sdk::abi::*;

use crate::{Atom, Expr, MAX_NESTING, Window};

/// Why nodes could not be read back as an expression (a host that broke the layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodesError {
    /// A node index or child range lies outside the array.
    OutOfRange(u32),
    /// A node has a kind this crate does not know.
    UnknownKind { node: u32, kind: u32 },
    /// A node has the wrong number of children for its kind.
    Children { node: u32, kind: &'static str, len: u32 },
    /// An atom's index is not its pre-order position.
    AtomIndex { node: u32, got: u32, want: u32 },
    /// Deeper than [`MAX_NESTING`].
    TooDeep,
    /// More nodes than a `u32` index can name.
    TooMany,
}

impl std::fmt::Display for NodesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodesError::OutOfRange(i) => write!(f, "definition node {i} is out of range"),
            NodesError::UnknownKind { node, kind } => {
                write!(f, "definition node {node} has unknown kind {kind}")
            }
            NodesError::Children { node, kind, len } => {
                write!(f, "definition node {node} ({kind}) has {len} children")
            }
            NodesError::AtomIndex { node, got, want } => {
                write!(f, "definition node {node} is atom {got}, but pre-order makes it atom {want}")
            }
            NodesError::TooDeep => write!(f, "definition nested deeper than {MAX_NESTING}"),
            NodesError::TooMany => write!(f, "more definition nodes than a u32 index can name"),
        }
    }
}

impl std::error::Error for NodesError {}

fn index(n: usize) -> Result<u32, NodesError> {
    u32::try_from(n).ok().filter(|&i| i != GANTRY_NONE).ok_or(NodesError::TooMany)
}

fn children(e: &Expr) -> &[Expr] {
    match e {
        Expr::Atom(_) => &[],
        Expr::Window(w) => std::slice::from_ref(&*w.inner),
        Expr::Order(v) | Expr::All(v) | Expr::Any(v) => v,
    }
}

/// Appends `expr`'s nodes to `out` (the whole array being built for a view) and returns the
/// index of its root.
pub fn push_nodes(expr: &Expr, out: &mut Vec<GantryRdlNode>) -> Result<u32, NodesError> {
    let root = index(out.len())?;
    out.push(GantryRdlNode::default());
    let mut queue = VecDeque::from([(expr, root)]);
    while let Some((e, at)) = queue.pop_front() {
        let kids = children(e);
        let start = index(out.len())?;
        for kid in kids {
            queue.push_back((kid, index(out.len())?));
            out.push(GantryRdlNode::default());
        }
        let range = if kids.is_empty() {
            GantryRange::default()
        } else {
            GantryRange { start, len: index(kids.len())? }
        };
        let mut node = GantryRdlNode { children: range, atom: GANTRY_NONE, ..GantryRdlNode::default() };
        match e {
            Expr::Atom(a) => {
                node.kind = GANTRY_RDL_ATOM;
                node.bundle = a.bundle;
                node.min_parallel = a.min_parallel;
                node.max_parallel = a.max_parallel;
                node.min_lease_ms = a.min_lease_ms;
                node.work = a.work;
            }
            Expr::Window(w) => {
                node.kind = GANTRY_RDL_WINDOW;
                node.start_ms = w.start_ms;
                node.end_ms = w.end_ms;
            }
            Expr::Order(_) => node.kind = GANTRY_RDL_ORDER,
            Expr::All(_) => node.kind = GANTRY_RDL_ALL,
            Expr::Any(_) => node.kind = GANTRY_RDL_ANY,
        }
        out[at as usize] = node;
    }
    // Atoms are numbered in pre-order: walk the laid-out block depth first, children in order.
    let mut next_atom = 0u32;
    let mut stack = vec![root];
    while let Some(at) = stack.pop() {
        let node = &mut out[at as usize];
        if node.kind == GANTRY_RDL_ATOM {
            node.atom = next_atom;
            next_atom += 1;
        }
        let GantryRange { start, len } = node.children;
        stack.extend((start..start + len).rev());
    }
    Ok(root)
}

/// `expr` as a block of nodes of its own (root at 0).
pub fn to_nodes(expr: &Expr) -> Result<Vec<GantryRdlNode>, NodesError> {
    let mut out = Vec::new();
    push_nodes(expr, &mut out)?;
    Ok(out)
}

/// Reads the expression rooted at `root` back from a view's `rdl_nodes`, checking the layout.
pub fn from_nodes(nodes: &[GantryRdlNode], root: u32) -> Result<Expr, NodesError> {
    let mut next_atom = 0u32;
    read(nodes, root, 0, &mut next_atom)
}

fn read(nodes: &[GantryRdlNode], at: u32, depth: usize, next_atom: &mut u32) -> Result<Expr, NodesError> {
    if depth > MAX_NESTING {
        return Err(NodesError::TooDeep);
    }
    let node = nodes.get(at as usize).ok_or(NodesError::OutOfRange(at))?;
    let start = node.children.start as usize;
    let kids = nodes
        .get(start..start.saturating_add(node.children.len as usize))
        .ok_or(NodesError::OutOfRange(node.children.start))?;
    let len = node.children.len;
    let wrong = |kind| NodesError::Children { node: at, kind, len };
    let parts = |next_atom: &mut u32| -> Result<Vec<Expr>, NodesError> {
        (0..kids.len()).map(|i| read(nodes, node.children.start + i as u32, depth + 1, next_atom)).collect()
    };
    Ok(match node.kind {
        GANTRY_RDL_ATOM => {
            if len != 0 {
                return Err(wrong("atom"));
            }
            if node.atom != *next_atom {
                return Err(NodesError::AtomIndex { node: at, got: node.atom, want: *next_atom });
            }
            *next_atom += 1;
            Expr::Atom(Atom {
                bundle: node.bundle,
                min_parallel: node.min_parallel,
                max_parallel: node.max_parallel,
                min_lease_ms: node.min_lease_ms,
                work: node.work,
            })
        }
        GANTRY_RDL_WINDOW => {
            if len != 1 {
                return Err(wrong("window"));
            }
            let inner = read(nodes, node.children.start, depth + 1, next_atom)?;
            Expr::Window(Window { start_ms: node.start_ms, end_ms: node.end_ms, inner: Box::new(inner) })
        }
        GANTRY_RDL_ORDER | GANTRY_RDL_ALL | GANTRY_RDL_ANY => {
            if len == 0 {
                return Err(wrong(match node.kind {
                    GANTRY_RDL_ORDER => "order",
                    GANTRY_RDL_ALL => "all",
                    _ => "any",
                }));
            }
            let v = parts(next_atom)?;
            match node.kind {
                GANTRY_RDL_ORDER => Expr::Order(v),
                GANTRY_RDL_ALL => Expr::All(v),
                _ => Expr::Any(v),
            }
        }
        kind => return Err(NodesError::UnknownKind { node: at, kind }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_text;

    #[test]
    fn nodes_round_trip_with_contiguous_children_and_pre_order_atoms() {
        let e = parse_text(
            "window(0s, 4h, order(atom(1c, 1, 2, 1m, 1h), all(atom(2c, 2, 4, 1m, 2h), \
             any(atom(1gpu, 1, 1, 1s, 1h), atom(1c, 1, 1, 1s, 2h)))))",
        )
        .expect("parses");
        let mut nodes = vec![GantryRdlNode::default(); 3]; // another reservation's block before
        let root = push_nodes(&e, &mut nodes).expect("lays out");
        assert_eq!(root, 3);
        assert_eq!(from_nodes(&nodes, root).expect("reads back"), e);
        // Breadth first: window, order, then order's two children side by side.
        assert_eq!(nodes[3].kind, GANTRY_RDL_WINDOW);
        assert_eq!(nodes[3].children, GantryRange { start: 4, len: 1 });
        assert_eq!(nodes[4].children, GantryRange { start: 5, len: 2 });
        let atoms: Vec<u32> = nodes.iter().filter(|n| n.kind == GANTRY_RDL_ATOM).map(|n| n.atom).collect();
        assert_eq!(atoms.len(), 4);
        // Pre-order: the order's first atom is 0, the all's atom 1, the any's atoms 2 and 3.
        assert_eq!(nodes[5].atom, 0);
        assert_eq!(nodes[6].kind, GANTRY_RDL_ALL);
    }

    #[test]
    fn a_broken_layout_is_an_error_not_a_panic() {
        let e = parse_text("all(atom(1c, 1, 1, 1s, 1h), atom(1c, 1, 1, 1s, 1h))").expect("parses");
        let mut nodes = to_nodes(&e).expect("lays out");
        nodes[0].children.len = 9;
        assert!(matches!(from_nodes(&nodes, 0), Err(NodesError::OutOfRange(_))));
        let mut nodes = to_nodes(&e).expect("lays out");
        nodes[2].atom = 0;
        assert!(matches!(from_nodes(&nodes, 0), Err(NodesError::AtomIndex { .. })));
        assert!(matches!(from_nodes(&nodes, 7), Err(NodesError::OutOfRange(7))));
        let mut nodes = to_nodes(&e).expect("lays out");
        nodes[1].kind = 99;
        assert!(matches!(from_nodes(&nodes, 0), Err(NodesError::UnknownKind { kind: 99, .. })));
    }
}
