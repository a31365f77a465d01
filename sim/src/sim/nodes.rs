//! The cluster's membership: nodes registering (at the start, after a failure, after an elastic
//! node's boot), failing, and being removed by the autoscaler ([`crate::elastic`]) — with the
//! registered time and capacity each change adds or stops, for node-hours and the registered
//! share (`measure.rs`).

use super::events::Due;
use super::{Sim, SimError};
use gantry_engine::{Event, NodeCondition, Resources};

impl Sim<'_> {
    /// Registers node `i` of the cluster (or pool) with the engine now.
    pub(super) fn register(&mut self, i: usize) -> Result<(), SimError> {
        let n = &self.nodes[i];
        let cmds = self
            .engine
            .handle(self.now, Event::NodeRegistered(n.clone()))
            .map_err(|source| SimError::Engine { what: format!("node {}", n.name), source })?;
        self.node_time.entry(n.name.clone()).or_insert((None, 0)).0 = Some(self.now);
        add_capacity(&mut self.registered_capacity, &n.capacity, true);
        self.apply(cmds);
        Ok(())
    }

    /// Node `i` of the cluster (or pool) is no longer registered: stops its registered time.
    fn unregister(&mut self, i: usize) {
        let n = &self.nodes[i];
        if let Some((since, total)) = self.node_time.get_mut(&n.name) {
            if let Some(s) = since.take() {
                *total += self.now - s;
                add_capacity(&mut self.registered_capacity, &n.capacity, false);
            }
        }
    }

    /// Node failure `f` happens: the node stops counting, its containers are lost (their work
    /// runs again elsewhere) and the engine hears of the loss.
    pub(super) fn node_failed(&mut self, f: usize) -> Result<(), SimError> {
        let node = self.options.failures[f].node.clone();
        if let Some(i) = self.nodes.iter().position(|n| n.name == node) {
            self.unregister(i);
        }
        self.lose_containers(&node);
        self.engine
            .handle(self.now, Event::NodeLost { node: node.clone() })
            .map(|cmds| self.apply(cmds))
            .map_err(|source| SimError::Engine { what: format!("the loss of node {node}"), source })?;
        Ok(())
    }

    /// The node of failure `f` comes back and registers again.
    pub(super) fn node_back(&mut self, f: usize) -> Result<(), SimError> {
        let name = &self.options.failures[f].node;
        let Some(spec) = self.nodes.iter().find(|n| &n.name == name).cloned() else {
            return Err(SimError::Input(format!("node failure names an unknown node {name:?}")));
        };
        if let Some((since, _)) = self.node_time.get_mut(name) {
            if since.is_none() {
                *since = Some(self.now);
                add_capacity(&mut self.registered_capacity, &spec.capacity, true);
            }
        }
        self.engine
            .handle(self.now, Event::NodeRegistered(spec))
            .map(|cmds| self.apply(cmds))
            .map_err(|source| SimError::Engine { what: format!("node {name} coming back"), source })?;
        Ok(())
    }

    /// Elastic pool node `i` finished booting: it registers if the autoscaler still has it
    /// booting. True if it registered (and a cycle should follow).
    pub(super) fn booted(&mut self, i: usize) -> Result<bool, SimError> {
        let ready = self.elastic.as_mut().is_some_and(|a| a.booted(i, self.now));
        if ready {
            self.register(i)?;
        }
        Ok(ready)
    }

    /// The autoscaler's check: removes nodes idle past the cool-down, starts nodes for work
    /// waiting past the threshold. True if the engine should run a cycle.
    pub(super) fn autoscale(&mut self) -> Result<bool, SimError> {
        let Some(a) = self.elastic.as_ref() else { return Ok(false) };
        let idle = self.engine.idle_nodes();
        let remove = a.plan_scale_down(self.now, &idle, self.engine.state());
        for i in remove {
            let name = self.nodes[i].name.clone();
            let what = |source| SimError::Engine { what: format!("the removal of node {name}"), source };
            // Drain first (no new containers), then take the (empty) node away.
            let cmds = self
                .engine
                .handle(
                    self.now,
                    Event::NodeStateChanged { node: name.clone(), state: NodeCondition::Draining },
                )
                .map_err(what)?;
            self.apply(cmds);
            let cmds = self.engine.handle(self.now, Event::NodeLost { node: name.clone() }).map_err(what)?;
            self.apply(cmds);
            self.unregister(i);
            if let Some(a) = self.elastic.as_mut() {
                a.removed(i, self.now);
            }
        }
        let Some(a) = self.elastic.as_mut() else { return Ok(false) };
        let start = a.plan_scale_up(self.now, self.engine.state());
        if !start.is_empty() {
            a.stats.scale_ups += 1;
        }
        let boot = a.options.boot_ms;
        let check = a.options.check_ms;
        for &i in &start {
            a.start(i, self.now);
        }
        for i in start {
            self.push(self.now.saturating_add(boot), Due::Boot(i));
        }
        if !self.all_done() {
            self.push(self.now.saturating_add(check), Due::Check);
        }
        Ok(false)
    }
}

/// Adds `r` to (or takes it from) a capacity total of CPU, memory and GPUs.
fn add_capacity(total: &mut [u64; 3], r: &Resources, add: bool) {
    let r = [r.cpu_millis, r.memory_bytes, u64::from(r.gpus)];
    for k in 0..3 {
        total[k] = if add { total[k] + r[k] } else { total[k].saturating_sub(r[k]) };
    }
}
