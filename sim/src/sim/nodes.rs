//! The cluster's membership: nodes registering (at the start, after a failure, after an elastic
//! node's boot), failing, and being removed by the autoscaler ([`crate::elastic`]) — with the
//! registered time and capacity each change adds or stops, for node-hours and the registered
//! share (`measure.rs`).

use super::events::Due;
use super::scheduler::Asked;
use super::{Sim, SimError};
use gantry_controller::Input;
use gantry_engine::Resources;

impl Sim<'_> {
    /// Node `i` of the cluster (or pool) starts: its agent registers now.
    pub(super) fn register(&mut self, i: usize) {
        let n = &self.nodes[i];
        let (name, capacity) = (n.name.clone(), n.capacity);
        let since = &mut self.node_time.entry(name).or_insert((None, 0)).0;
        if since.is_none() {
            *since = Some(self.now);
            add_capacity(&mut self.registered_capacity, &capacity, true);
        }
        let agent = &mut self.agents[i];
        agent.up = true;
        agent.stream = 0;
        self.connect(i);
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

    /// Node failure `f` happens: the node stops counting and its containers are lost (their
    /// work runs again elsewhere). The scheduler hears nothing: its agent falls silent, and the
    /// node is lost after the node timeout.
    pub(super) fn node_failed(&mut self, f: usize) {
        let Some(&i) = self.node_index.get(&self.options.failures[f].node) else { return };
        self.unregister(i);
        self.falls_silent(i);
        self.machine_down(i);
    }

    /// The node of failure `f` comes back and registers again.
    pub(super) fn node_back(&mut self, f: usize) {
        if let Some(&i) = self.node_index.get(&self.options.failures[f].node) {
            self.register(i);
        }
    }

    /// Asks the scheduler to drain (or undrain) node `i`, as an operator would.
    pub(super) fn set_drain(&mut self, i: usize, drained: bool) {
        let reply = self.sched.ask(Asked::Drain(i, drained));
        let node = self.nodes[i].name.clone();
        self.send(Input::SetNodeDrain { reply, node, drained });
    }

    /// Elastic pool node `i` finished booting: it registers if the autoscaler still has it
    /// booting (and is undrained if the autoscaler had removed it before). True if it
    /// registered (and a cycle should follow).
    pub(super) fn booted(&mut self, i: usize) -> bool {
        let ready = self.elastic.as_mut().is_some_and(|a| a.booted(i, self.now));
        if ready {
            self.register(i);
            if self.ctl.drained_nodes().contains(&self.nodes[i].name) {
                self.set_drain(i, false);
            }
        }
        ready
    }

    /// The autoscaler's check: removes nodes idle past the cool-down, starts nodes for work
    /// waiting past the threshold. True if the scheduler should be polled.
    pub(super) fn autoscale(&mut self) -> Result<bool, SimError> {
        let Some(a) = self.elastic.as_ref() else { return Ok(false) };
        let idle = self.ctl.engine().idle_nodes();
        let remove = a.plan_scale_down(self.now, &idle, self.ctl.engine().state());
        let removing = !remove.is_empty();
        for i in remove {
            // Drained first (no new containers), then the machine stops; its agent closes its
            // stream, and the scheduler loses the (empty) node after its timeout.
            self.set_drain(i, true);
            self.settle();
            self.falls_silent(i);
            let stream = std::mem::take(&mut self.agents[i].stream);
            if stream != 0 {
                self.send(Input::AgentDisconnected { node: self.nodes[i].name.clone(), stream });
            }
            self.machine_down(i);
            self.unregister(i);
            if let Some(a) = self.elastic.as_mut() {
                a.removed(i, self.now);
            }
        }
        let Some(a) = self.elastic.as_mut() else { return Ok(removing) };
        let start = a.plan_scale_up(self.now, self.ctl.engine().state());
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
        Ok(removing)
    }
}

/// Adds `r` to (or takes it from) a capacity total of CPU, memory and GPUs.
fn add_capacity(total: &mut [u64; 3], r: &Resources, add: bool) {
    let r = [r.cpu_millis, r.memory_bytes, u64::from(r.gpus)];
    for k in 0..3 {
        total[k] = if add { total[k] + r[k] } else { total[k].saturating_sub(r[k]) };
    }
}
