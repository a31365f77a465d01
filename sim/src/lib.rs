//! gantry's simulator: the scheduler's own controller ([`gantry_controller::Controller`]) and its
//! [`gantry_engine::Engine`] — with whatever plugins it was built with, loaded `.so` files
//! included — driven on a virtual clock as the daemon drives them: simulated agents that speak
//! the agent protocol, an in-memory store, submissions and kills as the REST API makes them,
//! and the faults the daemon faces (node failures, partitions, scheduler restarts, slow or
//! failing commits).
//!
//! - [`trace`]: the workload model ([`trace::Job`]) and one reader per trace format, each
//!   in its own module, each refusing a malformed line with its file, line and what was expected.
//! - [`cluster`]: cluster descriptions (gantry's TOML, Alibaba's node list CSV) → node specs.
//! - [`sim`]: the discrete-event loop itself; [`report`]: what a run writes (summary, per-job
//!   and time-series CSV, SVG plots); [`workload`]: synthetic workloads at a target load.
//! - [`queues`]: per-leaf-queue figures — held, pending, guaranteed and ideal shares over time,
//!   guarantee reached, what preemption took.
//! - [`elastic`]: elastic clusters, where the cluster file is a pool of machines that an
//!   autoscaler starts (after a boot delay) and removes (after an idle cool-down).
//! - [`deadlines`]: deadline jobs with Rayon reservations — which jobs, their deadlines, their
//!   RDL, their queues, node losses — and the figures of such a run.
//! - [`reservation_mix`]: a seeded random mix of reservations on a 10,000-node, one-day plan,
//!   what the admission benchmarks submit.
//!
//! Same inputs and seed ⇒ byte-identical outputs: nothing here reads a clock, iterates a hash
//! map in an order that reaches the output, or uses a random source other than the seed.

#![forbid(unsafe_code)]

pub mod cluster;
pub mod deadlines;
pub mod elastic;
pub mod queues;
pub mod report;
pub mod reservation_mix;
pub mod sim;
pub mod trace;
pub mod workload;
