//! What the loop does: the heap of things due, seeded at the start of a run, and the main loop
//! that pops every event due at an instant, hands each to the part of the simulation it concerns
//! (the agents, the jobs, the nodes, the reservations), runs one scheduling cycle, observes the
//! queues, takes a sample if one is due, and decides when time stops (every job ended,
//! `until_ms`, or a stall).
//!
//! Everything the scheduler is told passes through [`Sim::send`] and reaches it at
//! [`Sim::settle`] (`scheduler.rs`), after each event; the scheduler is polled once an instant's
//! events are in.

use super::{STALL_AFTER_MS, Sim, SimError};
use std::cmp::Reverse;

/// Something due at a virtual time: the heap holds (time, insertion number, `Due`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Due {
    /// A job arrives (index into the jobs).
    Arrival(usize),
    /// A container's natural end (its id); ignored if it was killed or lost first.
    End(u64),
    /// A stopped container's exit (its id): at once, or after its grace period.
    Killed(u64),
    /// A job's time limit.
    Limit(usize),
    /// A node fails (index into the failures).
    Fail(usize),
    /// A deadline job's Rayon reservation (index into the options' job reservations).
    ReserveJob(usize),
    /// A failed node registers again.
    Back(usize),
    /// A periodic scheduling cycle.
    Tick,
    /// The autoscaler's periodic check.
    Check,
    /// An elastic pool node (its index) finished booting and registers.
    Boot(usize),
    /// A time-series sample, taken at the end of its instant (after its events and cycle).
    Sample,
    /// A node's agent, out of contact, fences if its fencing timeout has passed.
    Fence(usize),
    /// The store commits its oldest job in flight (of the scheduler process named: jobs of a
    /// process that died are gone).
    Commit(u32),
    /// The scheduler restarts (index into the restarts).
    Restart(usize),
    /// A partition starts (index into the partitions).
    Cut(usize),
    /// A partition ends: the agent registers again.
    Heal(usize),
    /// A node's agent, without a stream, registers again.
    Reconnect(usize),
    /// The controller has something due (a restart's wait for the agents ends).
    Poll,
    /// A job's kill, not stored, is asked again.
    KillAgain(usize),
}

impl Due {
    /// Ticks, samples and checks recur for as long as the run goes on; the others are things
    /// that happen.
    fn periodic(self) -> bool {
        matches!(self, Due::Tick | Due::Sample | Due::Check)
    }
}

impl Sim<'_> {
    pub(super) fn push(&mut self, at: u64, due: Due) {
        if !due.periodic() {
            self.due_events += 1;
        }
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, due)));
    }

    /// Registers the first nodes and puts everything the inputs schedule into the heap.
    pub(super) fn start(&mut self) -> Result<(), SimError> {
        let first: Vec<usize> = match self.elastic.as_mut() {
            Some(a) => a.initial(0),
            None => (0..self.nodes.len()).collect(),
        };
        for i in first {
            self.register(i);
        }
        self.settle();
        let daemon = &self.options.daemon;
        for (i, &at) in daemon.restarts_at_ms.iter().enumerate() {
            self.push(at, Due::Restart(i));
        }
        for (i, p) in daemon.partitions.iter().enumerate() {
            self.push(p.at_ms, Due::Cut(i));
            self.push(p.at_ms.saturating_add(p.duration_ms), Due::Heal(i));
        }
        if let Some(a) = &self.elastic {
            let check = a.options.check_ms;
            self.push(check, Due::Check);
        }
        // Before the arrivals, so that a reservation submitted at its job's arrival is answered
        // before the job's first stage is submitted.
        for (i, r) in self.options.job_reservations.iter().enumerate() {
            if r.job >= self.jobs.len() {
                return Err(SimError::Input(format!(
                    "job reservation {i} names job {}, of {}",
                    r.job,
                    self.jobs.len()
                )));
            }
            self.push(r.at_ms, Due::ReserveJob(i));
        }
        for (i, job) in self.jobs.iter().enumerate() {
            self.push(job.submit_ms, Due::Arrival(i));
            if let Some(limit) = job.time_limit_ms {
                self.push(job.submit_ms.saturating_add(limit), Due::Limit(i));
            }
        }
        for (i, f) in self.options.failures.iter().enumerate() {
            self.push(f.at_ms, Due::Fail(i));
            if let Some(back) = f.back_at_ms {
                self.push(back, Due::Back(i));
            }
        }
        self.push(0, Due::Sample);
        Ok(())
    }

    pub(super) fn all_done(&self) -> bool {
        self.ended_jobs == self.jobs.len()
    }

    pub(super) fn main_loop(&mut self) -> Result<(), SimError> {
        let mut quiet_since: Option<u64> = None;
        while let Some(Reverse((at, _, _))) = self.heap.peek().copied() {
            if self.options.until_ms.is_some_and(|u| at > u) {
                self.advance(self.options.until_ms.unwrap_or(at));
                break;
            }
            self.advance(at);
            let mut tick = false;
            // Every event due now, then one cycle.
            while let Some(Reverse((t, _, due))) = self.heap.peek().copied() {
                if t != at {
                    break;
                }
                self.heap.pop();
                if !due.periodic() {
                    self.due_events -= 1;
                }
                tick |= self.handle_due(due)?;
                self.settle();
            }
            if tick {
                self.poll();
            }
            self.queues.observe(self.now, self.ctl.engine().state());
            if std::mem::take(&mut self.sample_due) {
                self.sample();
            }
            if self.all_done() {
                break;
            }
            if self.due_events == 0 {
                let since = *quiet_since.get_or_insert(self.now);
                if self.now.saturating_sub(since) >= STALL_AFTER_MS {
                    self.stalled_at_ms = Some(since);
                    break;
                }
            } else {
                quiet_since = None;
            }
            // Keep time moving for pending work: visit the controller when its next cycle is
            // due (the interval counts from its last cycle, as in the daemon), or the engine's
            // rebalance policy is, whichever comes first.
            if !self.tick_scheduled && self.pending_work() {
                self.tick_scheduled = true;
                let at = self.ctl.next_cycle_ms().min(self.ctl.next_rebalance_ms()).max(self.now + 1);
                self.push(at, Due::Tick);
            }
        }
        Ok(())
    }

    fn pending_work(&self) -> bool {
        self.pending_jobs > 0
    }

    /// Applies one due event; true if the scheduler should be polled after the instant.
    fn handle_due(&mut self, due: Due) -> Result<bool, SimError> {
        match due {
            Due::Arrival(i) => self.submit_stage(i),
            Due::End(c) => self.container_ended(c, false),
            Due::Killed(c) => self.container_ended(c, true),
            Due::Limit(i) => self.time_limit(i),
            Due::KillAgain(i) => self.kill_app(i),
            Due::Fail(f) => self.node_failed(f),
            Due::Back(f) => self.node_back(f),
            Due::Tick => self.tick_scheduled = false,
            Due::Check => return self.autoscale(),
            Due::Boot(i) => return Ok(self.booted(i)),
            Due::ReserveJob(k) => self.reserve_job(k),
            Due::Fence(i) => self.fence_if_cut_off(i),
            Due::Commit(generation) => {
                if generation == self.sched.generation {
                    self.commit();
                }
            }
            Due::Restart(_) => self.restart_scheduler()?,
            Due::Cut(p) => {
                if let Some(&i) = self.node_index.get(&self.options.daemon.partitions[p].node) {
                    self.falls_silent(i);
                    self.agents[i].cut = true;
                }
            }
            Due::Heal(p) => {
                if let Some(&i) = self.node_index.get(&self.options.daemon.partitions[p].node) {
                    // Its old stream died with the partition.
                    self.agents[i].cut = false;
                    self.agents[i].stream = 0;
                    self.connect(i);
                }
            }
            Due::Reconnect(i) => {
                if self.agents[i].stream == 0 {
                    self.connect(i);
                }
            }
            Due::Poll => {}
            Due::Sample => {
                // Taken once this instant is over (its events and its cycle applied).
                self.sample_due = true;
                if !self.all_done() {
                    self.push(self.now + self.options.sample_ms, Due::Sample);
                }
                return Ok(false);
            }
        }
        Ok(true)
    }
}
