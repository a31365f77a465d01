//! Alibaba's GPU cluster trace of 2023 (`cluster-trace-gpu-v2023`, the pod lists
//! `openb_pod_list_*.csv` used in "Beware of Fragmentation", USENIX ATC '23).
//!
//! # Format
//!
//! CSV with a header line; columns are found by name, so their order does not matter and extra
//! columns are ignored, but a header without one of these is refused:
//!
//! `name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time,
//! deletion_time, scheduled_time`
//!
//! Times are seconds from the start of the trace. Every row must have as many fields as the
//! header; fields are not quoted (a quote is refused). Blank lines are skipped.
//!
//! # Model
//!
//! Each pod becomes one job of one stage of one container:
//!
//! - **submit** = `creation_time` (s → ms). Times are not rebased: the bulk of the trace starts
//!   near 10,000,000 s, and the 26 pods created before 9,900,000 s (long-running ones, the first
//!   at 0) precede it by up to 115 days.
//! - **duration** = `deletion_time − scheduled_time`: the time the pod held its resources. Where
//!   `scheduled_time` is empty or `0` the pod's start is taken to be `creation_time` (in the
//!   published lists this happens only for the Pending pods, whose `scheduled_time` is empty, and
//!   for the first pod, created and scheduled at 0). There is no slow duration
//!   (`slow_duration_ms = duration_ms`), except for a soft `gpu_spec` with a slowdown (below).
//! - Pods still **Running** when the trace was cut have `deletion_time` at the end of the
//!   collection window, so their durations are censored there; they are kept as they are.
//! - **Failed** pods ran (they have a `scheduled_time`) and held resources until deleted; they are
//!   kept with that duration and simulated as ending normally. **Succeeded** pods are kept.
//! - **Pending** pods never ran: no run time was observed. By default they are **skipped**
//!   ([`PendingPods::Skip`]); [`PendingPods::RunUntilDeleted`] keeps them with duration
//!   `deletion_time − creation_time` (how long their owner waited), for experiments that want all
//!   the demand that was asked for. In `openb_pod_list_default.csv` (and `gpuspec33`) 897 of the
//!   8,152 pods are Pending, so 7,255 jobs remain.
//! - **resources**: `cpu_milli` millicores; `memory_mib × 2^20` bytes; GPUs: `num_gpu` whole GPUs.
//!   A GPU-sharing pod (`num_gpu = 1`, `gpu_milli < 1000`, 3,078 pods in the default list) is
//!   **rounded up to one whole GPU**, because the engine allocates whole GPUs. This overstates
//!   GPU demand compared with the paper, whose scheduler packs fractional pods onto shared GPUs;
//!   GPU-fragmentation results from this reader are therefore not comparable to the paper's.
//!   `gpu_milli` must be 0 for a pod without GPUs and 1..=1000 for a pod with some.
//! - **gpu_spec** `A|B|…` (any of these models) becomes the selector `gpu_model = "A|B|…"`, which the
//!   engine reads as alternatives; repeated models are dropped (`V100M16|V100M32|V100M32` →
//!   `V100M16|V100M32`: 25 pods in `gpuspec33`). Empty (or `nan`, as pandas prints it) means no
//!   constraint. An empty alternative (`A||B`, `|A`) or whitespace inside a model name is refused.
//!   Cluster files label each GPU node `gpu_model=<model>` (see [`crate::cluster`]).
//!   [`GpuSpecAs::Preference`] (opt-in) makes the same label a soft preference instead: the pod
//!   may run on any node. The trace does not say how much slower a pod runs on another model, so
//!   by default it runs just as long there (`slowdown` 1.0); a slowdown `f` ≥ 1 sets
//!   `slow_duration_ms = round(duration_ms × f)` for the pods that have a `gpu_spec` (pods
//!   without one have no preference and no slow duration).
//! - **class** = `qos` (`LS`, `BE`, `Burstable`, `Guaranteed`), so per-class figures separate
//!   latency-sensitive from best-effort pods. **queue** `root.default`, **user** `alibaba`,
//!   **priority** 0, no **time limit**, no gang, no rack affinity (the trace has none of these).
//! - **name** = the pod's `name`.

use super::{
    DEFAULT_QUEUE, Job, Stage, TraceError, check_line_len, parse_u32, parse_u64, read_text, secs_to_ms,
    sort_by_submit, split_csv, validate_job,
};
use gantry_engine::{RackAffinity, Resources};
use std::path::Path;

/// The label key the GPU-model selector uses (cluster files set it on every GPU node).
pub const GPU_MODEL_LABEL: &str = "gpu_model";
/// The user of every Alibaba job (the trace has no users).
pub const USER: &str = "alibaba";

/// What to do with pods that never ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PendingPods {
    /// Leave them out: they have no observed run time.
    #[default]
    Skip,
    /// Submit them, running `deletion_time − creation_time`.
    RunUntilDeleted,
}

/// What a pod's `gpu_spec` becomes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum GpuSpecAs {
    /// A hard constraint: the selector `gpu_model = "A|B|…"`. The pod runs only on those models.
    #[default]
    Selector,
    /// A soft preference: `preferred` `gpu_model = "A|B|…"`. The pod may run on any node; off
    /// its models it runs `slowdown` times as long (rounded to the ms). `slowdown` must be finite
    /// and at least 1.0; 1.0 (see [`GpuSpecAs::preference`]) means just as long.
    Preference {
        /// How many times longer a pod runs on a GPU model outside its `gpu_spec`.
        slowdown: f64,
    },
}

impl GpuSpecAs {
    /// A soft preference with this slowdown, checked: a finite factor ≥ 1.0, or an error saying
    /// what was expected.
    pub fn preference(slowdown: f64) -> Result<Self, String> {
        let me = GpuSpecAs::Preference { slowdown };
        me.check()?;
        Ok(me)
    }

    /// Whether the slowdown (if any) is a finite factor ≥ 1.0.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            GpuSpecAs::Selector => Ok(()),
            GpuSpecAs::Preference { slowdown } if slowdown.is_finite() && slowdown >= 1.0 => Ok(()),
            GpuSpecAs::Preference { slowdown } => Err(format!(
                "the gpu_spec slowdown is {slowdown}; expected a finite factor of at least 1.0 \
                 (how many times longer a pod runs off its GPU models; 1.0 = just as long)"
            )),
        }
    }
}

/// How pod lists are read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AlibabaOptions {
    /// What to do with Pending pods.
    pub pending: PendingPods,
    /// What `gpu_spec` becomes: a selector (default) or a preference.
    pub gpu_spec: GpuSpecAs,
}

/// What a read did, for the log and the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlibabaStats {
    /// Data rows read.
    pub pods: usize,
    /// Jobs returned.
    pub jobs: usize,
    /// Pending pods left out.
    pub skipped_pending: usize,
    /// GPU-sharing pods rounded up to one whole GPU.
    pub fractional_gpus_rounded_up: usize,
    /// Pods whose `gpu_spec` listed a model twice.
    pub duplicate_models_dropped: usize,
}

/// The columns the reader needs.
const COLUMNS: [&str; 11] = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];

/// Reads a pod list file.
pub fn read(path: &Path, opts: &AlibabaOptions) -> Result<Vec<Job>, TraceError> {
    let text = read_text(path)?;
    let (jobs, stats) = parse_with_stats(&text, &path.display().to_string(), opts)?;
    tracing::info!(
        file = %path.display(),
        pods = stats.pods,
        jobs = stats.jobs,
        skipped_pending = stats.skipped_pending,
        fractional_gpus_rounded_up = stats.fractional_gpus_rounded_up,
        gpu_spec = ?opts.gpu_spec,
        "read Alibaba pod list"
    );
    Ok(jobs)
}

/// Parses pod-list text; `file_name` is only used in errors.
pub fn parse(text: &str, file_name: &str, opts: &AlibabaOptions) -> Result<Vec<Job>, TraceError> {
    parse_with_stats(text, file_name, opts).map(|(jobs, _)| jobs)
}

/// [`parse`], also saying what was skipped or rounded.
pub fn parse_with_stats(
    text: &str,
    file_name: &str,
    opts: &AlibabaOptions,
) -> Result<(Vec<Job>, AlibabaStats), TraceError> {
    let err = |line: usize, m: String| TraceError::new(file_name, line, m);
    opts.gpu_spec.check().map_err(|m| err(0, m))?;
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((hi, header)) = lines.next() else {
        return Err(err(
            1,
            format!("expected a header line naming the columns {}; the file is empty", COLUMNS.join(",")),
        ));
    };
    check_line_len(file_name, hi + 1, header)?;
    let header_fields = split_csv(header).map_err(|m| err(hi + 1, m))?;
    let mut idx = [0usize; COLUMNS.len()];
    let mut missing = Vec::new();
    for (slot, col) in idx.iter_mut().zip(COLUMNS) {
        let mut found = header_fields.iter().enumerate().filter(|(_, h)| **h == col);
        match (found.next(), found.next()) {
            (Some((i, _)), None) => *slot = i,
            (Some(_), Some(_)) => return Err(err(hi + 1, format!("the header names column `{col}` twice"))),
            (None, _) => missing.push(col),
        }
    }
    if !missing.is_empty() {
        return Err(err(
            hi + 1,
            format!(
                "the header lacks column(s) {}; expected a header naming {}",
                missing.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", "),
                COLUMNS.join(",")
            ),
        ));
    }
    let [c_name, c_cpu, c_mem, c_ngpu, c_gmilli, c_spec, c_qos, c_phase, c_create, c_delete, c_sched] = idx;

    let mut stats = AlibabaStats::default();
    let mut jobs = Vec::new();
    for (i, line) in lines {
        let lineno = i + 1;
        check_line_len(file_name, lineno, line)?;
        let at = |m: String| err(lineno, m);
        let f = split_csv(line).map_err(at)?;
        if f.len() != header_fields.len() {
            return Err(at(format!(
                "expected {} comma-separated fields (as many as the header), found {}",
                header_fields.len(),
                f.len()
            )));
        }
        stats.pods += 1;
        let name = f[c_name];
        let cpu_millis = parse_u64("cpu_milli", f[c_cpu]).map_err(at)?;
        let memory_mib = parse_u64("memory_mib", f[c_mem]).map_err(at)?;
        let memory_bytes = memory_mib
            .checked_mul(1 << 20)
            .ok_or_else(|| at(format!("memory_mib: {memory_mib} MiB is too large to count in bytes")))?;
        let num_gpu = parse_u32("num_gpu", f[c_ngpu]).map_err(at)?;
        let gpu_milli = parse_u64("gpu_milli", f[c_gmilli]).map_err(at)?;
        if num_gpu == 0 && gpu_milli != 0 {
            return Err(at(format!(
                "gpu_milli is {gpu_milli} but num_gpu is 0; expected gpu_milli 0 for a pod without GPUs"
            )));
        }
        if num_gpu > 0 && !(1..=1000).contains(&gpu_milli) {
            return Err(at(format!(
                "gpu_milli: expected 1..=1000 thousandths of a GPU for a pod with GPUs, found {gpu_milli}"
            )));
        }
        if num_gpu == 1 && gpu_milli < 1000 {
            stats.fractional_gpus_rounded_up += 1;
        }
        let (spec, had_duplicates) = gpu_spec(f[c_spec]).map_err(at)?;
        if had_duplicates {
            stats.duplicate_models_dropped += 1;
        }
        let qos = f[c_qos];
        let phase = f[c_phase];
        let create = parse_u64("creation_time", f[c_create]).map_err(at)?;
        let delete = parse_u64("deletion_time", f[c_delete]).map_err(at)?;
        let sched = match f[c_sched] {
            "" => None,
            s => Some(parse_u64("scheduled_time", s).map_err(at)?),
        };
        let start = match phase {
            "Running" | "Succeeded" | "Failed" => match sched {
                Some(s) if s != 0 => {
                    if s < create {
                        return Err(at(format!(
                            "scheduled_time {s} is before creation_time {create}; expected a pod to be scheduled after it is created"
                        )));
                    }
                    s
                }
                _ => create,
            },
            "Pending" => {
                if opts.pending == PendingPods::Skip {
                    stats.skipped_pending += 1;
                    continue;
                }
                create
            }
            other => {
                return Err(at(format!(
                    "pod_phase: expected Running, Succeeded, Failed or Pending, found `{other}`"
                )));
            }
        };
        if delete < start {
            return Err(at(format!(
                "deletion_time {delete} is before the pod started ({start}); expected deletion after start"
            )));
        }
        let submit_ms = secs_to_ms("creation_time", create).map_err(at)?;
        let duration_ms = secs_to_ms("deletion_time", delete - start).map_err(at)?;
        let (selector, preferred, slow_duration_ms) = match (spec, opts.gpu_spec) {
            (None, _) => (Vec::new(), Vec::new(), duration_ms),
            (Some(s), GpuSpecAs::Selector) => {
                (vec![(GPU_MODEL_LABEL.to_owned(), s)], Vec::new(), duration_ms)
            }
            (Some(s), GpuSpecAs::Preference { slowdown }) => (
                Vec::new(),
                vec![(GPU_MODEL_LABEL.to_owned(), s)],
                slow_duration(duration_ms, slowdown).map_err(at)?,
            ),
        };
        let job = Job {
            name: name.to_owned(),
            submit_ms,
            queue: DEFAULT_QUEUE.to_owned(),
            user: USER.to_owned(),
            class: qos.to_owned(),
            priority: 0,
            stages: vec![Stage {
                resources: Resources { cpu_millis, memory_bytes, gpus: num_gpu, reserved: 0 },
                count: 1,
                gang: false,
                selector,
                preferred,
                rack_affinity: RackAffinity::None,
                duration_ms,
                slow_duration_ms,
            }],
            time_limit_ms: None,
        };
        validate_job(&job).map_err(at)?;
        jobs.push(job);
    }
    stats.jobs = jobs.len();
    sort_by_submit(&mut jobs);
    Ok((jobs, stats))
}

/// `round(duration_ms × slowdown)`, never below `duration_ms`; `slowdown` is finite and ≥ 1.0
/// (checked before). Exactly `duration_ms` for 1.0.
fn slow_duration(duration_ms: u64, slowdown: f64) -> Result<u64, String> {
    if slowdown == 1.0 {
        return Ok(duration_ms);
    }
    let slow = (duration_ms as f64 * slowdown).round();
    // 2^64 is the first f64 past u64::MAX.
    if slow >= 18_446_744_073_709_551_616.0 {
        return Err(format!(
            "the duration {duration_ms} ms times the gpu_spec slowdown {slowdown} is too large to count in ms"
        ));
    }
    Ok((slow as u64).max(duration_ms))
}

/// `A|B|…` → the selector value with duplicates dropped (first occurrence kept), or `None` for
/// no constraint; whether a duplicate was dropped.
fn gpu_spec(field: &str) -> Result<(Option<String>, bool), String> {
    if field.is_empty() || field == "nan" {
        return Ok((None, false));
    }
    let mut models: Vec<&str> = Vec::new();
    let mut dup = false;
    for m in field.split('|') {
        if m.is_empty() {
            return Err(format!(
                "gpu_spec `{field}` has an empty alternative; expected GPU models separated by single `|`, e.g. `V100M16|V100M32`"
            ));
        }
        if m.chars().any(char::is_whitespace) {
            return Err(format!(
                "gpu_spec `{field}`: the model `{m}` contains whitespace; expected model names like `V100M16`"
            ));
        }
        if models.contains(&m) {
            dup = true;
        } else {
            models.push(m);
        }
    }
    Ok((Some(models.join("|")), dup))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";
    // p0 asks for T4 or V100M16 and holds its GPU 101 s; p1 has no gpu_spec.
    const PODS: &str = "p0,1000,1024,1,1000,T4|V100M16|T4,LS,Succeeded,10,111,10\n\
                        p1,1000,1024,1,500,,BE,Succeeded,10,20,10\n";

    fn read(gpu_spec: GpuSpecAs) -> Result<Vec<Job>, TraceError> {
        parse(&format!("{HEADER}\n{PODS}"), "pods.csv", &AlibabaOptions { gpu_spec, ..Default::default() })
    }

    fn model(v: &str) -> Vec<(String, String)> {
        vec![(GPU_MODEL_LABEL.to_owned(), v.to_owned())]
    }

    #[test]
    fn gpu_spec_is_a_selector_by_default() {
        assert_eq!(AlibabaOptions::default().gpu_spec, GpuSpecAs::Selector);
        let jobs = read(GpuSpecAs::Selector).unwrap();
        let s = &jobs[0].stages[0];
        assert_eq!((s.selector.clone(), s.preferred.clone()), (model("T4|V100M16"), Vec::new()));
        assert_eq!((s.duration_ms, s.slow_duration_ms), (101_000, 101_000));
        let s = &jobs[1].stages[0];
        assert!(s.selector.is_empty() && s.preferred.is_empty());
    }

    #[test]
    fn gpu_spec_as_preference_keeps_the_duration_by_default() {
        let jobs = read(GpuSpecAs::preference(1.0).unwrap()).unwrap();
        let s = &jobs[0].stages[0];
        assert_eq!((s.selector.clone(), s.preferred.clone()), (Vec::new(), model("T4|V100M16")));
        assert_eq!((s.duration_ms, s.slow_duration_ms), (101_000, 101_000));
        let s = &jobs[1].stages[0];
        assert!(s.selector.is_empty() && s.preferred.is_empty());
        assert_eq!(s.slow_duration_ms, s.duration_ms);
    }

    #[test]
    fn gpu_spec_preference_slowdown_scales_and_rounds() {
        let jobs = read(GpuSpecAs::preference(1.5).unwrap()).unwrap();
        assert_eq!((jobs[0].stages[0].duration_ms, jobs[0].stages[0].slow_duration_ms), (101_000, 151_500));
        // Without a gpu_spec there is no preference, hence no slow duration.
        assert_eq!(jobs[1].stages[0].slow_duration_ms, jobs[1].stages[0].duration_ms);
        // Rounded to the nearest ms.
        assert_eq!(slow_duration(101_000, 1.000_004_9), Ok(101_000));
        assert_eq!(slow_duration(101_000, 1.000_005_1), Ok(101_001));
        assert_eq!(slow_duration(3, 1.5), Ok(5));
        assert_eq!(slow_duration(0, 7.0), Ok(0));
        assert!(slow_duration(u64::MAX / 2, 3.0).unwrap_err().contains("too large"));
    }

    #[test]
    fn gpu_spec_slowdown_must_be_finite_and_at_least_one() {
        for bad in [0.99, 0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let e = GpuSpecAs::preference(bad).unwrap_err();
            assert!(e.contains("expected a finite factor of at least 1.0"), "{bad}: {e}");
            // Options built by hand are checked by the reader too, before any line.
            let e = read(GpuSpecAs::Preference { slowdown: bad }).unwrap_err();
            assert_eq!(e.line, 0, "{e}");
            assert!(e.message.contains("slowdown"), "{e}");
        }
        assert!(GpuSpecAs::preference(1.0).is_ok() && GpuSpecAs::preference(1e6).is_ok());
        assert_eq!(GpuSpecAs::Selector.check(), Ok(()));
    }
}
