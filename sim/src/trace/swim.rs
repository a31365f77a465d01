//! SWIM workloads: Facebook's 2009 Hadoop workload as synthesised by SWIM
//! (`FB-2009_samples_24_times_1hr_0.tsv`).
//!
//! SWIM (the Statistical Workload Injector for MapReduce) comes from Chen, Ganapathi, Griffith
//! and Katz, "The Case for Evaluating MapReduce Performance Using Workload Suites" (MASCOTS 2011).
//! The authors analysed production MapReduce traces (among them six months of a Facebook cluster
//! in 2009), argued that MapReduce systems should be evaluated against representative
//! workloads rather than single benchmarks, and built synthetic workloads by sampling short time
//! windows of the real traces, keeping each job's arrival and data sizes. This file is 24
//! one-hour samples laid end to end (a synthetic day, 5,894 jobs).
//!
//! # Format
//!
//! Tab-separated, no header, six fields per line:
//! `job_id  submit_time_s  gap_s  map_input_bytes  shuffle_bytes  reduce_output_bytes`.
//! `submit_time_s` is seconds from the start of the workload; `gap_s` (the time since the
//! previous job) is redundant with it and only checked to be a number. Blank lines are skipped.
//!
//! # Model ([`SwimModel`], every number configurable)
//!
//! The trace gives data sizes, not tasks or run times, so a stated model turns them into a map
//! stage followed by a reduce stage (a job without shuffle data is map-only):
//!
//! - **maps** = `max(1, ceil(input / block_bytes))`, one map per HDFS block; `block_bytes`
//!   defaults to 128 MiB, HDFS's default block size since Hadoop 2 (Hadoop of 2009 used 64 MiB).
//! - **reduces** = `ceil(shuffle / reduce_bytes)`, `reduce_bytes` 1 GiB by default, after Hive's
//!   `hive.exec.reducers.bytes.per.reducer` of the time (1 GB until Hive 0.14; Facebook's 2009
//!   jobs were largely Hive queries); shuffle 0 → no reduce stage.
//! - Counts are capped at `max_tasks` (the engine's 100,000 per request); a capped stage gives
//!   each task more data instead. Nothing in this trace reaches the cap (the largest job has
//!   56,262 maps).
//! - **data per task**: a map reads `input / maps` and writes `shuffle / maps` (its share of the
//!   map output) — or, in a map-only job, `output / maps`; a reduce reads `shuffle / reduces` and
//!   writes `output / reduces` (rounded up).
//! - **task duration** = `task_overhead_ms + data per task / task_bytes_per_s`, rounded up to the
//!   ms. Defaults: 50 MB/s per task and 2 s of start-up (JVM launch and task set-up). Both are
//!   **assumptions**, not measurements: 50 MB/s is in the range of one 2009-era disk's sequential
//!   throughput shared by a node's task slots. There is no slow duration (no preferences).
//! - **containers**: 1 core and 2 GiB for maps and for reduces. One vcore is MapReduce's default
//!   (`mapreduce.{map,reduce}.cpu.vcores = 1`); 2 GiB is twice the stock
//!   `mapreduce.{map,reduce}.memory.mb` of 1024 MiB, the size vendors recommend for maps in
//!   practice — an assumption, as is everything about task sizes here.
//! - No gang (MapReduce tasks start independently), no rack affinity (data locality is not
//!   modelled), class `mapreduce`, queue `root.default`, user `swim`, priority 0, no time limit,
//!   name = `job_id`.
//!
//! With the defaults the Facebook file gives 5,894 jobs, 205,713 map tasks, 1,446 reduce stages
//! and 21,895 reduce tasks.

use super::{
    DEFAULT_QUEUE, Job, Stage, TraceError, check_line_len, parse_u64, read_text, secs_to_ms, sort_by_submit,
    validate_job,
};
use gantry_engine::{MAX_CONTAINERS_PER_REQUEST, RackAffinity, Resources};
use std::path::Path;

/// The class of every SWIM job.
pub const CLASS: &str = "mapreduce";
/// The user of every SWIM job (the trace has no users).
pub const USER: &str = "swim";

/// How bytes become tasks and run times. See the module documentation for the reasoning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwimModel {
    /// Input bytes per map task (HDFS block size).
    pub block_bytes: u64,
    /// Shuffle bytes per reduce task.
    pub reduce_bytes: u64,
    /// Bytes a task reads plus writes per second.
    pub task_bytes_per_s: u64,
    /// Fixed start-up time of every task, ms.
    pub task_overhead_ms: u64,
    /// Container of a map task.
    pub map_container: Resources,
    /// Container of a reduce task.
    pub reduce_container: Resources,
    /// Most tasks in one stage.
    pub max_tasks: u32,
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

impl Default for SwimModel {
    fn default() -> Self {
        let container = Resources { cpu_millis: 1000, memory_bytes: 2 * GIB, gpus: 0, reserved: 0 };
        SwimModel {
            block_bytes: 128 * MIB,
            reduce_bytes: GIB,
            task_bytes_per_s: 50_000_000,
            task_overhead_ms: 2_000,
            map_container: container,
            reduce_container: container,
            max_tasks: MAX_CONTAINERS_PER_REQUEST,
        }
    }
}

impl SwimModel {
    /// Refuses a model that cannot work (zero sizes or rates, empty containers).
    pub fn validate(&self) -> Result<(), String> {
        if self.block_bytes == 0 || self.reduce_bytes == 0 || self.task_bytes_per_s == 0 {
            return Err("block_bytes, reduce_bytes and task_bytes_per_s must be positive".into());
        }
        if self.max_tasks == 0 || self.max_tasks > MAX_CONTAINERS_PER_REQUEST {
            return Err(format!("max_tasks must be in 1..={MAX_CONTAINERS_PER_REQUEST}"));
        }
        for (what, c) in
            [("map_container", &self.map_container), ("reduce_container", &self.reduce_container)]
        {
            if c.cpu_millis == 0 && c.memory_bytes == 0 && c.gpus == 0 {
                return Err(format!("{what} asks for no resources"));
            }
        }
        Ok(())
    }

    /// How many tasks `bytes` make at `per_task` each, at least `min`, at most `max_tasks`.
    fn tasks(&self, bytes: u64, per_task: u64, min: u64) -> u32 {
        let n = bytes.div_ceil(per_task).max(min);
        n.min(u64::from(self.max_tasks)) as u32
    }

    /// Run time of a task moving `bytes` (read plus written), ms.
    fn duration_ms(&self, bytes: u128) -> Result<u64, String> {
        let transfer = (bytes * 1000).div_ceil(u128::from(self.task_bytes_per_s));
        u64::try_from(transfer)
            .ok()
            .and_then(|t| t.checked_add(self.task_overhead_ms))
            .ok_or_else(|| format!("a task moving {bytes} bytes would run longer than {} ms", u64::MAX))
    }
}

/// Reads a SWIM workload file.
pub fn read(path: &Path, model: &SwimModel) -> Result<Vec<Job>, TraceError> {
    let text = read_text(path)?;
    let jobs = parse(&text, &path.display().to_string(), model)?;
    tracing::info!(file = %path.display(), jobs = jobs.len(), "read SWIM workload");
    Ok(jobs)
}

/// Parses SWIM text; `file_name` is only used in errors.
pub fn parse(text: &str, file_name: &str, model: &SwimModel) -> Result<Vec<Job>, TraceError> {
    model.validate().map_err(|m| TraceError::new(file_name, 0, format!("invalid SWIM model: {m}")))?;
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        check_line_len(file_name, lineno, line)?;
        let at = |m: String| TraceError::new(file_name, lineno, m);
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').map(str::trim).collect();
        if f.len() != 6 {
            return Err(at(format!(
                "expected 6 tab-separated fields (job_id, submit_time_s, gap_s, map_input_bytes, shuffle_bytes, reduce_output_bytes), found {}",
                f.len()
            )));
        }
        if f[0].is_empty() {
            return Err(at("job_id: expected a job identifier, found an empty field".into()));
        }
        let submit_s = parse_u64("submit_time_s", f[1]).map_err(at)?;
        parse_u64("gap_s", f[2]).map_err(at)?;
        let input = parse_u64("map_input_bytes", f[3]).map_err(at)?;
        let shuffle = parse_u64("shuffle_bytes", f[4]).map_err(at)?;
        let output = parse_u64("reduce_output_bytes", f[5]).map_err(at)?;

        let maps = model.tasks(input, model.block_bytes, 1);
        let reduces = model.tasks(shuffle, model.reduce_bytes, 0);
        let map_written = if reduces > 0 { shuffle } else { output };
        let map_bytes =
            u128::from(input).div_ceil(u128::from(maps)) + u128::from(map_written).div_ceil(u128::from(maps));
        let mut stages = vec![stage(model.map_container, maps, model.duration_ms(map_bytes).map_err(at)?)];
        if reduces > 0 {
            let reduce_bytes = u128::from(shuffle).div_ceil(u128::from(reduces))
                + u128::from(output).div_ceil(u128::from(reduces));
            stages.push(stage(model.reduce_container, reduces, model.duration_ms(reduce_bytes).map_err(at)?));
        }
        let job = Job {
            name: f[0].to_owned(),
            submit_ms: secs_to_ms("submit_time_s", submit_s).map_err(at)?,
            queue: DEFAULT_QUEUE.to_owned(),
            user: USER.to_owned(),
            class: CLASS.to_owned(),
            priority: 0,
            stages,
            time_limit_ms: None,
        };
        validate_job(&job).map_err(at)?;
        jobs.push(job);
    }
    sort_by_submit(&mut jobs);
    Ok(jobs)
}

fn stage(resources: Resources, count: u32, duration_ms: u64) -> Stage {
    Stage {
        resources,
        count,
        gang: false,
        selector: Vec::new(),
        preferred: Vec::new(),
        rack_affinity: RackAffinity::None,
        duration_ms,
        slow_duration_ms: duration_ms,
    }
}
