//! The queue hierarchy: building it from the configuration, the absolute capacities that follow
//! from each queue's shares (and a reservation plan's rules), queues a plan adds, renames and
//! retires, and charging usage up a queue's ancestry.

use super::{ClusterState, container_is_live};
use crate::error::EngineError;
use crate::model::*;
use gantry_sdk::abi::*;
use gantry_sdk::capacity::scale;

/// How a queue's absolute guarantee follows from its parent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum GuaranteeRule {
    /// Its configured fraction of the parent's (every configured queue).
    #[default]
    Share,
    /// Exactly these resources (at most the parent's): a reservation's planned allocation now.
    Fixed(GantryResources),
    /// What the parent's guarantee leaves after its other children's: a plan's default queue.
    Rest,
}

/// The largest share `part` is of `whole` in any dimension `whole` has (0 when it has none).
fn dominant_share(part: &GantryResources, whole: &GantryResources) -> f64 {
    let dims = [
        (part.cpu_millis as f64, whole.cpu_millis as f64),
        (part.memory_bytes as f64, whole.memory_bytes as f64),
        (f64::from(part.gpus), f64::from(whole.gpus)),
    ];
    dims.iter().filter(|(_, w)| *w > 0.0).map(|(p, w)| p / w).fold(0.0, f64::max).min(1.0)
}

impl ClusterState {
    pub(super) fn build_queues(&mut self, specs: &[QueueSpec]) -> Result<(), EngineError> {
        let default = [QueueSpec { path: "root.default".into(), guaranteed: 1.0, maximum: 1.0 }];
        let specs = if specs.is_empty() { &default[..] } else { specs };
        let root = self.strings.intern("root");
        self.queues.push(GantryQueue {
            name: root,
            parent: GANTRY_NONE,
            flags: 0,
            guaranteed: 1.0,
            maximum: 1.0,
            ..Default::default()
        });
        self.queue_index.insert("root".into(), 0);
        let mut sorted: Vec<&QueueSpec> = specs.iter().collect();
        sorted.sort_by_key(|q| q.path.matches('.').count());
        for q in sorted {
            let bad = |m: String| EngineError::QueueConfig(format!("queue `{}`: {m}", q.path));
            crate::model::check_name("queue path", &q.path, false)?;
            let Some((parent_path, leaf)) = q.path.rsplit_once('.') else {
                return Err(bad("must be a path below `root`, e.g. `root.prod`".into()));
            };
            if leaf.is_empty() || !q.path.starts_with("root.") {
                return Err(bad("must be a path below `root`, e.g. `root.prod`".into()));
            }
            if self.queue_index.contains_key(&q.path) {
                return Err(bad("is defined twice".into()));
            }
            let Some(&parent) = self.queue_index.get(parent_path) else {
                return Err(bad(format!("parent `{parent_path}` is not defined")));
            };
            if !(0.0..=1.0).contains(&q.guaranteed) || q.guaranteed.is_nan() {
                return Err(bad(format!("guaranteed {} is not in 0..=1", q.guaranteed)));
            }
            if !(q.guaranteed..=1.0).contains(&q.maximum) || q.maximum.is_nan() {
                return Err(bad(format!("maximum {} is not in guaranteed..=1", q.maximum)));
            }
            let name = self.strings.intern(&q.path);
            let idx = self.queues.len() as u32;
            self.queues.push(GantryQueue {
                name,
                parent,
                flags: GANTRY_QUEUE_LEAF,
                guaranteed: q.guaranteed,
                maximum: q.maximum,
                ..Default::default()
            });
            self.queues[parent as usize].flags &= !GANTRY_QUEUE_LEAF;
            self.queue_index.insert(q.path.clone(), idx);
        }
        for (p, _) in self.queues.iter().enumerate() {
            let sum: f64 = self.queues.iter().filter(|c| c.parent == p as u32).map(|c| c.guaranteed).sum();
            if sum > 1.0 + 1e-9 {
                return Err(EngineError::QueueConfig(format!(
                    "children of `{}` are guaranteed {:.3} of it, more than 1",
                    self.strings.get(self.queues[p].name),
                    sum
                )));
            }
        }
        Ok(())
    }

    /// Recomputes the cluster total and each queue's absolute capacities. Parents come before
    /// children in the queue array, so one pass suffices.
    ///
    /// Queue capacities are shares of the schedulable capacity *plus* what draining and unhealthy
    /// nodes still hold: their containers still count against their queues, so leaving them out
    /// of the base would let a drained node's work block idle capacity elsewhere.
    pub(crate) fn recompute_capacity(&mut self) {
        let gantry_sdk::capacity::Capacity { cluster, base } = gantry_sdk::capacity::capacity(&self.nodes);
        self.cluster = cluster;
        for i in 0..self.queues.len() {
            let q = self.queues[i];
            let (pg, pm) = match self.queues.get(q.parent as usize) {
                Some(p) => (p.absolute_guaranteed, p.absolute_maximum),
                None => (base, base),
            };
            self.queues[i].absolute_maximum = scale(&pm, q.maximum);
            match self.queue_rules.get(i).copied().unwrap_or_default() {
                GuaranteeRule::Share | GuaranteeRule::Rest => {
                    self.queues[i].absolute_guaranteed = scale(&pg, q.guaranteed);
                }
                GuaranteeRule::Fixed(r) => {
                    let g = r.min_each(&pg);
                    self.queues[i].absolute_guaranteed = g;
                    self.queues[i].guaranteed = dominant_share(&g, &pg);
                }
            }
        }
        // A `Rest` queue takes what its siblings leave; its own children (none in practice)
        // were scaled from its share above.
        for i in 0..self.queues.len() {
            if self.queue_rules.get(i).copied() != Some(GuaranteeRule::Rest) {
                continue;
            }
            let parent = self.queues[i].parent;
            let Some(p) = self.queues.get(parent as usize).map(|p| p.absolute_guaranteed) else { continue };
            let taken = self
                .queues
                .iter()
                .enumerate()
                .filter(|&(j, c)| j != i && c.parent == parent && c.maximum > 0.0)
                .fold(GantryResources::default(), |acc, (_, c)| acc.plus(&c.absolute_guaranteed));
            let rest = p.minus(&taken.min_each(&p));
            self.queues[i].absolute_guaranteed = rest;
            self.queues[i].guaranteed = dominant_share(&rest, &p);
        }
    }

    /// Appends a leaf queue `path` under `parent` (nodes and queues are never removed; a
    /// reservation plan reuses its ended reservations' queues with [`ClusterState::rename_queue`]).
    pub(crate) fn add_queue(&mut self, path: &str, parent: u32, maximum: f64, rule: GuaranteeRule) -> u32 {
        let name = self.strings.intern(path);
        let idx = self.queues.len() as u32;
        self.queues.push(GantryQueue {
            name,
            parent,
            flags: GANTRY_QUEUE_LEAF,
            guaranteed: 0.0,
            maximum,
            ..Default::default()
        });
        if let Some(p) = self.queues.get_mut(parent as usize) {
            p.flags &= !GANTRY_QUEUE_LEAF;
        }
        self.queue_index.insert(path.to_owned(), idx);
        self.set_queue_rule(idx, rule);
        idx
    }

    /// Gives queue `queue` a new path (the old one no longer resolves) and maximum share.
    pub(crate) fn rename_queue(&mut self, queue: u32, path: &str, maximum: f64) {
        let old = self.queue_path(queue).to_owned();
        self.queue_index.remove(&old);
        let name = self.strings.intern(path);
        if let Some(q) = self.queues.get_mut(queue as usize) {
            q.name = name;
            q.maximum = maximum;
        }
        self.queue_index.insert(path.to_owned(), queue);
    }

    /// Takes a queue's path out of the index: submissions naming it are refused from now on.
    pub(crate) fn retire_queue(&mut self, queue: u32) {
        let old = self.queue_path(queue).to_owned();
        self.queue_index.remove(&old);
        if let Some(q) = self.queues.get_mut(queue as usize) {
            q.maximum = 0.0;
            q.guaranteed = 0.0;
        }
        self.set_queue_rule(queue, GuaranteeRule::Fixed(GantryResources::default()));
    }

    pub(crate) fn set_queue_rule(&mut self, queue: u32, rule: GuaranteeRule) {
        let i = queue as usize;
        if self.queue_rules.len() <= i {
            self.queue_rules.resize(i + 1, GuaranteeRule::Share);
        }
        self.queue_rules[i] = rule;
    }

    /// Moves application `app` (an index) and what its live containers hold to `queue`.
    pub(crate) fn move_app(&mut self, app: u32, queue: u32) {
        let Some(from) = self.apps.get(app as usize).map(|a| a.queue) else { return };
        if from == queue {
            return;
        }
        let held: Vec<GantryResources> = self
            .containers
            .iter()
            .filter(|c| c.app == app && container_is_live(c.state))
            .map(|c| c.resources)
            .collect();
        for r in &held {
            self.charge_queue(from, r, false);
            self.charge_queue(queue, r, true);
        }
        self.apps[app as usize].queue = queue;
    }

    /// Adds `delta` to (or, with `add == false`, removes it from) a queue and all its ancestors.
    pub(crate) fn charge_queue(&mut self, queue: u32, delta: &GantryResources, add: bool) {
        let mut q = queue;
        while let Some(rec) = self.queues.get_mut(q as usize) {
            rec.used = if add { rec.used.plus(delta) } else { rec.used.minus(delta) };
            q = rec.parent;
        }
    }

    /// The queue path of a queue index.
    pub fn queue_path(&self, queue: u32) -> &str {
        self.queues.get(queue as usize).map(|q| self.strings.get(q.name)).unwrap_or("")
    }
}
