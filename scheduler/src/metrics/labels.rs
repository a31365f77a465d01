//! What the series are made of: the state and hook sets the labels spell, the label sets, the
//! gauge types, a queue's three resource gauges, and the helpers that keep counters and state
//! gauges consistent.

use gantry_exposition::StateLabels;
use gantry_sdk::abi::*;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;

use super::Amount;

/// Node states, as the `state` label of `gantry_nodes` spells them.
pub(super) const NODE_STATES: [(u32, &str); 4] = [
    (GANTRY_NODE_RUNNING, "running"),
    (GANTRY_NODE_DRAINING, "draining"),
    (GANTRY_NODE_UNHEALTHY, "unhealthy"),
    (GANTRY_NODE_LOST, "lost"),
];

/// Application states, as the `state` label of `gantry_apps` spells them.
pub(super) const APP_STATES: [(u32, &str); 7] = [
    (GANTRY_APP_NEW, "new"),
    (GANTRY_APP_ACCEPTED, "accepted"),
    (GANTRY_APP_RUNNING, "running"),
    (GANTRY_APP_FINISHED, "finished"),
    (GANTRY_APP_FAILED, "failed"),
    (GANTRY_APP_KILLED, "killed"),
    (GANTRY_APP_REJECTED, "rejected"),
];

/// Container states that hold resources, as the `state` label of `gantry_containers` spells them.
/// Ended containers are not listed: the engine drops them at its next cycle, so a gauge of them
/// would only show what ended in the last fraction of a second.
pub(super) const CONTAINER_STATES: [(u32, &str); 3] = [
    (GANTRY_CONTAINER_ALLOCATED, "allocated"),
    (GANTRY_CONTAINER_RUNNING, "running"),
    (GANTRY_CONTAINER_STOPPING, "stopping"),
];

/// The extension points; the `hook` label is [`hook_name`]'s spelling.
pub(super) const HOOKS: [u32; 4] =
    [GANTRY_HOOK_ADMIT, GANTRY_HOOK_ORDER, GANTRY_HOOK_PLACE, GANTRY_HOOK_REBALANCE];

/// Label of per-queue series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct QueueLabels {
    pub(super) queue: String,
}

/// Label of reservation outcome counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    pub(super) outcome: &'static str,
}

/// Label of the plan's gauges: `capacity` (what the plan hands out) or `reserved` (held now).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct PlanLabels {
    pub(super) kind: &'static str,
}

/// Label of per-plugin series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct PluginLabels {
    pub(super) plugin: String,
}

/// Labels of hook latency.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct HookLabels {
    pub(super) plugin: String,
    pub(super) hook: String,
}

/// Label of per-node series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct NodeLabels {
    pub(super) node: String,
}

/// Label of counters by a fixed reason.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ReasonLabels {
    pub(super) reason: &'static str,
}

/// Labels of `gantry_node_condition`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, EncodeLabelSet)]
pub(super) struct ConditionLabels {
    pub(super) node: String,
    pub(super) condition: String,
}

/// Labels of rejected decisions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct RejectLabels {
    pub(super) plugin: String,
    pub(super) reason: String,
}

pub(super) type FloatGauge = Gauge<f64, AtomicU64>;
pub(super) type IntGauge = Gauge<u64, AtomicU64>;
pub(super) type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The three resource gauges of one queue figure (guaranteed, maximum, used or pending).
#[derive(Debug, Default)]
pub(super) struct QueueGauges {
    pub(super) cpu_cores: Family<QueueLabels, FloatGauge>,
    pub(super) memory_bytes: Family<QueueLabels, IntGauge>,
    pub(super) gpus: Family<QueueLabels, IntGauge>,
}

impl QueueGauges {
    pub(super) fn register(&self, registry: &mut Registry, figure: &str, help: &str) {
        registry.register(
            format!("gantry_queue_{figure}_cpu_cores"),
            format!("{help}, CPU in cores"),
            self.cpu_cores.clone(),
        );
        registry.register_with_unit(
            format!("gantry_queue_{figure}_memory"),
            format!("{help}, memory"),
            Unit::Bytes,
            self.memory_bytes.clone(),
        );
        registry.register(format!("gantry_queue_{figure}_gpus"), format!("{help}, GPUs"), self.gpus.clone());
    }

    pub(super) fn set(&self, labels: &QueueLabels, amount: Amount) {
        self.cpu_cores.get_or_create(labels).set(amount.cpu_millis as f64 / 1000.0);
        self.memory_bytes.get_or_create(labels).set(amount.memory_bytes);
        self.gpus.get_or_create(labels).set(amount.gpus);
    }

    pub(super) fn remove(&self, labels: &QueueLabels) {
        self.cpu_cores.remove(labels);
        self.memory_bytes.remove(labels);
        self.gpus.remove(labels);
    }
}

/// Buckets for the cycle and for plugin hooks: 50 µs to about 1.6 s. A cycle over a few thousand
/// nodes takes around a millisecond; the upper buckets catch a plugin that stalls the loop.
pub(super) fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// Raises a counter to `total` if that is higher: counters that mirror a running total kept
/// elsewhere (the engine's) must never go down, even if that total is reset.
pub(super) fn raise_to(counter: &Counter, total: u64) {
    let current = counter.get();
    if total > current {
        counter.inc_by(total - current);
    }
}

/// Counts records by state, in the order of `names`; states not in `names` are not counted.
pub(super) fn count_states<'a>(
    names: &[(u32, &'a str)],
    states: impl Iterator<Item = u32>,
) -> Vec<(&'a str, u64)> {
    let mut counts: Vec<(&str, u64)> = names.iter().map(|(_, name)| (*name, 0)).collect();
    for state in states {
        if let Some(i) = names.iter().position(|(id, _)| *id == state) {
            counts[i].1 += 1;
        }
    }
    counts
}

/// Sets one gauge per state; states seen before but missing from `counts` go to 0.
pub(super) fn set_states(
    family: &Family<StateLabels, IntGauge>,
    seen: &mut HashSet<String>,
    counts: &[(&str, u64)],
) {
    let mut now = HashSet::with_capacity(counts.len());
    for (state, count) in counts {
        family.get_or_create(&StateLabels { state: (*state).to_owned() }).set(*count);
        now.insert((*state).to_owned());
    }
    for state in seen.difference(&now) {
        family.get_or_create(&StateLabels { state: state.clone() }).set(0);
    }
    seen.extend(now);
}
