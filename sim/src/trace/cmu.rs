//! The CMU 15-719 heterogeneity traces behind seed 002 ("Intelligent scheduling on YARN"): a
//! cluster with one rack of GPU machines and racks of plain ones, GPU jobs that run fast on GPU
//! machines, MPI jobs that run fast inside one rack.
//!
//! # Format
//!
//! One CSV file per job type, no header, one job per line: `arrival,start,finish,k,prio`.
//! `arrival`, `start`, `finish` are seconds (fractional, as the course's generator writes them);
//! `k` is the number of machines (containers), `prio` an integer priority. The job type comes from
//! the file name: `traceGPU…` holds GPU jobs, `traceMPI…` MPI jobs (any other name is refused).
//! Blank lines and lines starting with `#` are skipped.
//!
//! # Model ([`CmuConfig`])
//!
//! - **submit** = `arrival` (s → ms, rounded). `start` and `finish` are the trace generator's own
//!   schedule and are **not** used as one; only `finish − start`, the job's run time on its
//!   preferred resources, is.
//! - **durations**: `finish − start`, rounded to the nearest second (as the course's replay script
//!   did), must be a fast duration of the type's table; the table gives the slow duration, the
//!   run time off the preferred resources. The defaults are the course's job sets (s):
//!   GPU 39/71, 70/120, 172/335, 196/318, 243/410, 295/558; MPI 67/78, 139/165, 198/229,
//!   278/305, 315/345, 344/387. A duration not in the table is an error naming the line, unless
//!   [`UnknownDuration::TypeRatio`] is chosen: then slow = fast × the mean slow/fast ratio of the
//!   type's table, rounded to the second — an explicit opt-in, since such a job is not one the
//!   course measured. (The course's script keyed MPI jobs by duration *and* k; the table here is
//!   keyed by duration alone, which is unambiguous for the seed's job sets.)
//! - **GPU jobs**: one stage of `k` containers, **gang**, preferring the GPU label
//!   (`gpu=true` by default, which cluster files put on every GPU node): `duration` where every
//!   container is on a GPU machine, `slow_duration` otherwise.
//! - **MPI jobs**: one stage of `k` containers, **gang**, rack affinity **Preferred**: `duration`
//!   when all containers share one rack, `slow_duration` when spread.
//! - **containers**: the course runs one container per machine. Rather than asking for a whole
//!   machine, each container asks for [`CmuConfig::container`], sized so that exactly one fits a
//!   machine of the seed cluster (`examples/clusters/hetero-seed002.toml`): 2 cores and 7 GiB
//!   (the course's 7168 MiB) on machines of 2 or 4 cores and 8 GiB. A different cluster needs a
//!   different size.
//! - **time limit** 1200 s from submission (the course's YARN kills a job at 1200 s, where its
//!   utility `1200 − completion time` reaches 0); configurable, `None` for none.
//! - **priority** = `prio`; **class** `GPU` or `MPI`; queue `root.default`; user `cmu`;
//!   **name** `<file name>:<line>`, unique across the files of a job set.
//!
//! [`read_many`] reads several files (e.g. a `traceGPU` and a `traceMPI` file of one experiment)
//! into one job set, sorted by arrival, files in the order given for equal times.

use super::{
    DEFAULT_QUEUE, Job, Stage, TraceError, check_line_len, parse_f64, parse_i64, parse_u32, read_text,
    secs_f64_to_ms, secs_to_ms, sort_by_submit, split_csv, validate_job,
};
use gantry_engine::{RackAffinity, Resources};
use std::collections::BTreeMap;
use std::path::Path;

/// The user of every CMU job.
pub const USER: &str = "cmu";

/// The two job types of the course.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CmuJobType {
    /// Prefers GPU machines.
    Gpu,
    /// Prefers one rack.
    Mpi,
}

impl CmuJobType {
    /// The type named by a trace file's name (`traceGPU…`, `traceMPI…`).
    pub fn from_file_name(file_name: &str) -> Option<Self> {
        let base = Path::new(file_name).file_name().and_then(|b| b.to_str()).unwrap_or(file_name);
        if base.starts_with("traceGPU") {
            Some(CmuJobType::Gpu)
        } else if base.starts_with("traceMPI") {
            Some(CmuJobType::Mpi)
        } else {
            None
        }
    }

    /// `GPU` or `MPI`: the jobs' class.
    pub fn class(self) -> &'static str {
        match self {
            CmuJobType::Gpu => "GPU",
            CmuJobType::Mpi => "MPI",
        }
    }
}

/// What to do with a duration the table does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownDuration {
    /// Refuse the line.
    #[default]
    Error,
    /// Slow = fast × the mean slow/fast ratio of the type's table.
    TypeRatio,
}

/// How CMU traces are read. The defaults are the course's (seed 002).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmuConfig {
    /// GPU jobs: fast duration (s) → slow duration (s).
    pub gpu_slow_s: BTreeMap<u64, u64>,
    /// MPI jobs: fast duration (s) → slow duration (s).
    pub mpi_slow_s: BTreeMap<u64, u64>,
    /// What to do with a duration the table does not list.
    pub unknown_duration: UnknownDuration,
    /// The node label GPU jobs prefer.
    pub gpu_label: (String, String),
    /// Each container's resources (one per machine on the seed cluster).
    pub container: Resources,
    /// Kill a job this long after its submission, ms.
    pub time_limit_ms: Option<u64>,
}

impl Default for CmuConfig {
    fn default() -> Self {
        CmuConfig {
            gpu_slow_s: BTreeMap::from([(39, 71), (70, 120), (172, 335), (196, 318), (243, 410), (295, 558)]),
            mpi_slow_s: BTreeMap::from([
                (67, 78),
                (139, 165),
                (198, 229),
                (278, 305),
                (315, 345),
                (344, 387),
            ]),
            unknown_duration: UnknownDuration::Error,
            gpu_label: ("gpu".to_owned(), "true".to_owned()),
            container: Resources { cpu_millis: 2000, memory_bytes: 7 << 30, gpus: 0, reserved: 0 },
            time_limit_ms: Some(1_200_000),
        }
    }
}

impl CmuConfig {
    /// The fast → slow table of a type.
    pub fn table(&self, t: CmuJobType) -> &BTreeMap<u64, u64> {
        match t {
            CmuJobType::Gpu => &self.gpu_slow_s,
            CmuJobType::Mpi => &self.mpi_slow_s,
        }
    }

    /// The slow duration (s) of a fast one (s), per the table and [`Self::unknown_duration`].
    fn slow_s(&self, t: CmuJobType, fast_s: u64) -> Result<u64, String> {
        let table = self.table(t);
        if let Some(&slow) = table.get(&fast_s) {
            return Ok(slow);
        }
        let known = table.keys().map(|k| format!("{k}")).collect::<Vec<_>>().join(", ");
        match self.unknown_duration {
            UnknownDuration::Error => Err(format!(
                "finish − start = {fast_s} s is not a known {} duration; expected one of {known} s (the fast → slow table of the configuration)",
                t.class()
            )),
            UnknownDuration::TypeRatio => {
                let ratios: Vec<f64> =
                    table.iter().filter(|(f, _)| **f > 0).map(|(&f, &s)| s as f64 / f as f64).collect();
                if ratios.is_empty() {
                    return Err(format!(
                        "finish − start = {fast_s} s: the {} table is empty, so there is no ratio to apply",
                        t.class()
                    ));
                }
                let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
                Ok((fast_s as f64 * mean).round() as u64)
            }
        }
    }
}

/// Reads one trace file; its type comes from its name.
pub fn read(path: &Path, cfg: &CmuConfig) -> Result<Vec<Job>, TraceError> {
    let text = read_text(path)?;
    parse(&text, &path.display().to_string(), cfg)
}

/// Reads several trace files into one job set, sorted by arrival (files in the order given, then
/// lines, for equal arrivals).
pub fn read_many<P: AsRef<Path>>(paths: &[P], cfg: &CmuConfig) -> Result<Vec<Job>, TraceError> {
    let mut jobs = Vec::new();
    for p in paths {
        jobs.extend(read(p.as_ref(), cfg)?);
    }
    sort_by_submit(&mut jobs);
    tracing::info!(files = paths.len(), jobs = jobs.len(), "read CMU traces");
    Ok(jobs)
}

/// Parses one trace's text; the type comes from `file_name` (`traceGPU…` or `traceMPI…`).
pub fn parse(text: &str, file_name: &str, cfg: &CmuConfig) -> Result<Vec<Job>, TraceError> {
    let job_type = CmuJobType::from_file_name(file_name).ok_or_else(|| {
        TraceError::new(
            file_name,
            0,
            "cannot tell the job type: expected a file name starting with `traceGPU` or `traceMPI`",
        )
    })?;
    let base = Path::new(file_name).file_name().and_then(|b| b.to_str()).unwrap_or(file_name);
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        check_line_len(file_name, lineno, line)?;
        let at = |m: String| TraceError::new(file_name, lineno, m);
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let f = split_csv(t).map_err(at)?;
        if f.len() != 5 {
            return Err(at(format!(
                "expected 5 comma-separated fields (arrival,start,finish,k,prio), found {}",
                f.len()
            )));
        }
        let arrival = parse_f64("arrival", f[0]).map_err(at)?;
        let start = parse_f64("start", f[1]).map_err(at)?;
        let finish = parse_f64("finish", f[2]).map_err(at)?;
        let k = parse_u32("k", f[3]).map_err(at)?;
        let prio = parse_i64("prio", f[4]).map_err(at)?;
        let priority = i32::try_from(prio)
            .map_err(|_| at(format!("prio: {prio} is out of range; expected {}..={}", i32::MIN, i32::MAX)))?;
        if finish < start {
            return Err(at(format!("finish {finish} is before start {start}; expected finish ≥ start")));
        }
        if k == 0 {
            return Err(at("k: expected at least 1 machine, found 0".into()));
        }
        let fast_s = (finish - start).round() as u64;
        let slow_s = cfg.slow_s(job_type, fast_s).map_err(at)?;
        let duration_ms = secs_to_ms("finish − start", fast_s).map_err(at)?;
        let slow_duration_ms = secs_to_ms("slow duration", slow_s).map_err(at)?;
        let (preferred, rack_affinity) = match job_type {
            CmuJobType::Gpu => (vec![cfg.gpu_label.clone()], RackAffinity::None),
            CmuJobType::Mpi => (Vec::new(), RackAffinity::Preferred),
        };
        let job = Job {
            name: format!("{base}:{lineno}"),
            submit_ms: secs_f64_to_ms("arrival", arrival).map_err(at)?,
            queue: DEFAULT_QUEUE.to_owned(),
            user: USER.to_owned(),
            class: job_type.class().to_owned(),
            priority,
            stages: vec![Stage {
                resources: cfg.container,
                count: k,
                gang: true,
                selector: Vec::new(),
                preferred,
                rack_affinity,
                duration_ms,
                slow_duration_ms,
            }],
            time_limit_ms: cfg.time_limit_ms,
        };
        validate_job(&job).map_err(at)?;
        jobs.push(job);
    }
    sort_by_submit(&mut jobs);
    Ok(jobs)
}
