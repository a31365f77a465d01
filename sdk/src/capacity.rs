//! The host's rule for what queue shares are shares of, in one place: the engine derives queue
//! capacities with it and the test kit ([`crate::testkit`]) lays hand-built views out with it, so
//! a plugin's tests see the figures the engine would give.

use crate::abi::{GANTRY_NODE_LOST, GANTRY_NODE_RUNNING, GantryNode, GantryResources};

/// What a cluster's nodes give the queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capacity {
    /// The RUNNING nodes' capacity: what new work can be placed on.
    pub cluster: GantryResources,
    /// What queue shares are shares of: the RUNNING nodes' capacity plus what draining and
    /// unhealthy nodes still hold. Their containers still count against their queues, so leaving
    /// them out would let a drained node's work block idle capacity elsewhere.
    pub base: GantryResources,
}

/// The capacity `nodes` give (lost nodes give nothing).
pub fn capacity(nodes: &[GantryNode]) -> Capacity {
    let mut c = Capacity::default();
    for n in nodes {
        match n.state {
            GANTRY_NODE_RUNNING => {
                c.cluster = c.cluster.plus(&n.capacity);
                c.base = c.base.plus(&n.capacity);
            }
            GANTRY_NODE_LOST => {}
            _ => c.base = c.base.plus(&n.allocated),
        }
    }
    c
}

/// `r` scaled by the share `f`, each dimension rounded down (a queue never gets more than its
/// share).
pub fn scale(r: &GantryResources, f: f64) -> GantryResources {
    GantryResources {
        cpu_millis: (r.cpu_millis as f64 * f).floor() as u64,
        memory_bytes: (r.memory_bytes as f64 * f).floor() as u64,
        gpus: (f64::from(r.gpus) * f).floor() as u32,
        reserved: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{GANTRY_NODE_DRAINING, GANTRY_NODE_UNHEALTHY};

    fn node(state: u32, cpu: u64, allocated: u64) -> GantryNode {
        GantryNode {
            state,
            capacity: GantryResources { cpu_millis: cpu, ..Default::default() },
            allocated: GantryResources { cpu_millis: allocated, ..Default::default() },
            ..Default::default()
        }
    }

    #[test]
    fn draining_and_unhealthy_nodes_give_what_they_hold_and_lost_nodes_nothing() {
        let nodes = [
            node(GANTRY_NODE_RUNNING, 4_000, 1_000),
            node(GANTRY_NODE_DRAINING, 4_000, 3_000),
            node(GANTRY_NODE_UNHEALTHY, 4_000, 500),
            node(GANTRY_NODE_LOST, 4_000, 2_000),
        ];
        let c = capacity(&nodes);
        assert_eq!(c.cluster.cpu_millis, 4_000);
        assert_eq!(c.base.cpu_millis, 7_500);
    }

    #[test]
    fn shares_round_down() {
        let r = GantryResources { cpu_millis: 999, memory_bytes: 10, gpus: 3, reserved: 7 };
        assert_eq!(
            scale(&r, 0.5),
            GantryResources { cpu_millis: 499, memory_bytes: 5, gpus: 1, reserved: 0 }
        );
    }
}
