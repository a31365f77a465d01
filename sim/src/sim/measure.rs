//! What a run measures as it goes and hands back at the end: the clock's advance integrates
//! the allocation (over the cluster, the registered nodes and the billed ones), the periodic
//! samples of the cluster and the Rayon plan, and [`Sim::finish`], which turns the loop's state
//! into a [`SimResult`] — node-hours, utilisation and one [`JobRecord`] per job.

use super::{JobOutcome, JobRecord, PlanSample, Sample, Sim, SimResult};

impl Sim<'_> {
    /// Moves the clock to `t`, integrating the allocation over the interval.
    pub(super) fn advance(&mut self, t: u64) {
        if t > self.area_at {
            let dt = (t - self.area_at) as f64;
            let billed = self.elastic.as_ref().map_or(self.registered_capacity, |a| a.billed_capacity());
            for (k, billed) in billed.iter().enumerate() {
                if self.capacity[k] > 0 {
                    self.area[k] += dt * self.allocated[k] as f64 / self.capacity[k] as f64;
                }
                self.allocated_area[k] += dt * self.allocated[k] as f64;
                self.registered_area[k] += dt * self.registered_capacity[k] as f64;
                self.billed_area[k] += dt * *billed as f64;
            }
            self.area_at = t;
        }
        self.now = self.now.max(t);
    }

    /// Takes a time-series sample now (and the queues' and the plan's).
    pub(super) fn sample(&mut self) {
        let share = |k: usize, s: &Self| {
            if s.capacity[k] == 0 { 0.0 } else { s.allocated[k] as f64 / s.capacity[k] as f64 }
        };
        let registered = |k: usize, s: &Self| {
            let cap = s.registered_capacity[k];
            if cap == 0 { 0.0 } else { s.allocated[k] as f64 / cap as f64 }
        };
        let waiting = self.not_started;
        let (nodes, booting) = match &self.elastic {
            Some(a) => (a.registered(), a.booting()),
            None => (self.node_time.values().filter(|(since, _)| since.is_some()).count(), 0),
        };
        self.queues.sample(self.now, self.ctl.engine().state());
        self.sample_plan();
        self.samples.push(Sample {
            t_ms: self.now,
            cpu: share(0, self),
            memory: share(1, self),
            gpus: share(2, self),
            running: self.running.len() as u64,
            waiting_jobs: waiting as u64,
            nodes: nodes as u32,
            booting: booting as u32,
            cpu_registered: registered(0, self),
            memory_registered: registered(1, self),
            gpus_registered: registered(2, self),
        });
    }

    /// Records the Rayon plan now, if the engine has one.
    fn sample_plan(&mut self) {
        let Some(book) = self.ctl.engine().reservation_book() else { return };
        let step = book.config().step_ms;
        let now = book.skyline(self.now, self.now.saturating_add(1), step);
        // No plan before the first reservation.
        let Some(&(_, capacity, reserved)) = now.first() else { return };
        let (capacity_cpu, reserved_cpu) = (capacity.cpu_millis, reserved.cpu_millis);
        let reserved_next_hour_cpu = book
            .skyline(self.now, self.now.saturating_add(3_600_000), step.saturating_mul(10))
            .iter()
            .map(|(_, _, r)| r.cpu_millis)
            .max()
            .unwrap_or(0);
        let queues = self.ctl.engine().state().queues();
        let used_cpu =
            book.reservations().filter_map(|r| queues.get(r.queue as usize)).map(|q| q.used.cpu_millis).sum();
        self.plan.push(PlanSample {
            t_ms: self.now,
            capacity_cpu,
            reserved_cpu,
            reserved_next_hour_cpu,
            used_cpu,
            reservations: book.reservations().count() as u32,
        });
    }

    /// Ends the run at the current time: a last sample, then the figures.
    pub(super) fn finish(mut self) -> SimResult {
        let end = self.now;
        self.sample();
        let queues = self.queues.finish(self.ctl.engine().state(), self.ctl.engine().stats());
        let registered_ms = self
            .node_time
            .values()
            .map(|&(since, total)| total + since.map_or(0, |s| end.saturating_sub(s)))
            .sum::<u64>();
        let utilisation = self.area.map(|a| if end == 0 { 0.0 } else { a / end as f64 });
        let ratio = |num: &[f64; 3], den: &[f64; 3]| {
            [0, 1, 2].map(|k| if den[k] > 0.0 { num[k] / den[k] } else { 0.0 })
        };
        let elastic = self.elastic.take().map(|mut a| {
            a.finish(end);
            a.stats.utilisation_registered = ratio(&self.allocated_area, &self.registered_area);
            a.stats.utilisation_billed = ratio(&self.allocated_area, &self.billed_area);
            a.stats
        });
        let billed_ms = elastic.as_ref().map_or(registered_ms, |e| e.billed_node_ms);
        let hours = billed_ms as f64 / 3_600_000.0;
        let jobs = self
            .jobs
            .iter()
            .zip(&self.state)
            .map(|(j, s)| JobRecord {
                name: j.name.clone(),
                class: j.class.clone(),
                containers: j.stages.iter().map(|st| st.count).max().unwrap_or(0),
                submit_ms: j.submit_ms,
                start_ms: s.started,
                end_ms: s.ended.map(|(t, _)| t),
                outcome: s.ended.map_or(JobOutcome::Unfinished, |(_, o)| o),
                ran_slow: s.ran_slow,
                preempted: s.preempted,
            })
            .collect();
        SimResult {
            jobs,
            samples: self.samples,
            end_ms: end,
            utilisation,
            node_hours: hours,
            stalled_at_ms: self.stalled_at_ms,
            elastic,
            preemptions: self.preemptions,
            cycles: self.cycles,
            launches: self.launches,
            job_reservations: self.job_reservations,
            replans: self.replans,
            queues,
            plan: self.plan,
            plugins: self.ctl.engine().policy_status(),
            daemon: {
                let mut figures = self.sched.figures.clone();
                figures.add(self.ctl.stats());
                figures
            },
        }
    }
}
