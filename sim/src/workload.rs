//! Synthetic workloads for load sweeps: Poisson arrivals at a target load ρ, jobs drawn from
//! weighted classes with their sizes and durations.
//!
//! The offered load of a job is its work on its preferred resources — containers × duration ×
//! the container's share of the cluster in its dominant resource — so that ρ = λ · E[work]
//! where λ is the arrival rate. Given ρ the generator sets λ = ρ / E[work] and draws
//! exponential gaps (Poisson arrivals). For seed 002's cluster, where each container is one
//! machine, this is ρ = λ · E[k · d] / machines.
//!
//! The classes come from a TOML file:
//!
//! ```toml
//! [[classes]]
//! name = "GPU"            # class name; a CMU-format output uses it as the file prefix
//! weight = 1.0            # relative frequency
//! k = [2, 4]              # containers per job, uniform in the range (inclusive)
//! cpu_millis = 2000       # per container
//! memory_mib = 7168
//! gpus = 0
//! gang = true
//! preferred = { gpu = "true" }   # soft label preference (fast where it holds)
//! rack_affinity = "none"         # none | preferred | required
//! durations_s = [[39, 71], [172, 335]]   # (fast, slow) pairs, one drawn uniformly
//! time_limit_s = 1200            # optional
//! queue = "root.default"         # optional
//! ```

use crate::trace::{Job, Stage};
use gantry_engine::{RackAffinity, Resources};
use serde::Deserialize;
use std::collections::BTreeMap;

/// One class of jobs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    /// Name (also the job class in reports).
    pub name: String,
    /// Relative frequency.
    #[serde(default = "one")]
    pub weight: f64,
    /// Containers per job, inclusive range.
    pub k: [u32; 2],
    /// CPU per container, millicores.
    pub cpu_millis: u64,
    /// Memory per container, MiB.
    pub memory_mib: u64,
    /// GPUs per container.
    #[serde(default)]
    pub gpus: u32,
    /// Whether a job's containers start together.
    #[serde(default)]
    pub gang: bool,
    /// Soft label preferences.
    #[serde(default)]
    pub preferred: BTreeMap<String, String>,
    /// Hard label constraints.
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    /// Rack affinity: `none`, `preferred` or `required`.
    #[serde(default = "none")]
    pub rack_affinity: String,
    /// (fast, slow) durations in seconds; one pair is drawn uniformly per job.
    pub durations_s: Vec<[f64; 2]>,
    /// Time limit from submission, seconds.
    #[serde(default)]
    pub time_limit_s: Option<f64>,
    /// Queue.
    #[serde(default)]
    pub queue: Option<String>,
}

fn one() -> f64 {
    1.0
}

fn none() -> String {
    "none".into()
}

/// The classes file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassesFile {
    /// The classes.
    pub classes: Vec<ClassSpec>,
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenSpec {
    /// The classes.
    pub classes: Vec<ClassSpec>,
    /// Target load ρ (> 0).
    pub load: f64,
    /// Arrivals in `[0, span_ms)`.
    pub span_ms: u64,
    /// Seed.
    pub seed: u64,
}

/// Why nothing could be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GenError(pub String);

/// Reads a classes file.
pub fn parse_classes(text: &str, file: &str) -> Result<Vec<ClassSpec>, GenError> {
    let f: ClassesFile = toml::from_str(text).map_err(|e| GenError(format!("{file}: {e}")))?;
    for c in &f.classes {
        let bad = |m: &str| Err(GenError(format!("{file}: class {:?}: {m}", c.name)));
        if c.k[0] == 0 || c.k[0] > c.k[1] {
            return bad("k must be [min, max] with 1 <= min <= max");
        }
        if !(c.weight > 0.0 && c.weight.is_finite()) {
            return bad("weight must be a positive number");
        }
        if c.durations_s.is_empty()
            || c.durations_s.iter().any(|[f, s]| !(*f > 0.0 && s >= f && s.is_finite()))
        {
            return bad("durations_s must be non-empty [fast, slow] pairs with 0 < fast <= slow");
        }
        if c.cpu_millis == 0 && c.memory_mib == 0 && c.gpus == 0 {
            return bad("a container must ask for something");
        }
        if affinity(&c.rack_affinity).is_none() {
            return bad("rack_affinity must be none, preferred or required");
        }
    }
    if f.classes.is_empty() {
        return Err(GenError(format!("{file}: no [[classes]]")));
    }
    Ok(f.classes)
}

fn affinity(s: &str) -> Option<RackAffinity> {
    match s {
        "none" => Some(RackAffinity::None),
        "preferred" => Some(RackAffinity::Preferred),
        "required" => Some(RackAffinity::Required),
        _ => None,
    }
}

/// A class's expected work: E[k] · E[fast duration] · its dominant share of `capacity`.
fn expected_work_s(c: &ClassSpec, capacity: &Resources) -> f64 {
    let share = |want: f64, have: u64| if have == 0 { 0.0 } else { want / have as f64 };
    let dominant = share(c.cpu_millis as f64, capacity.cpu_millis)
        .max(share((c.memory_mib << 20) as f64, capacity.memory_bytes))
        .max(share(f64::from(c.gpus), u64::from(capacity.gpus)));
    let k = f64::from(c.k[0] + c.k[1]) / 2.0;
    let d = c.durations_s.iter().map(|p| p[0]).sum::<f64>() / c.durations_s.len() as f64;
    k * d * dominant
}

/// Generates the jobs for `spec` on a cluster of `capacity`.
pub fn generate(spec: &GenSpec, capacity: &Resources) -> Result<Vec<Job>, GenError> {
    if !(spec.load > 0.0 && spec.load.is_finite()) || spec.span_ms == 0 {
        return Err(GenError("the load must be positive and the span non-zero".into()));
    }
    let total_weight: f64 = spec.classes.iter().map(|c| c.weight).sum();
    let work: f64 =
        spec.classes.iter().map(|c| c.weight / total_weight * expected_work_s(c, capacity)).sum::<f64>();
    if work <= 0.0 {
        return Err(GenError("the classes ask for nothing this cluster has".into()));
    }
    // Jobs per second.
    let rate = spec.load / work;
    let mut rng = gantry_sdk::rng::SplitMix64::new(spec.seed ^ 0x6761_6E74_7279);
    let mut jobs = Vec::new();
    let mut t = 0.0_f64;
    loop {
        t += -(1.0 - rng.unit()).ln() / rate;
        let at_ms = (t * 1000.0) as u64;
        if at_ms >= spec.span_ms {
            break;
        }
        let mut pick = rng.unit() * total_weight;
        let class = spec
            .classes
            .iter()
            .find(|c| {
                pick -= c.weight;
                pick < 0.0
            })
            .unwrap_or(&spec.classes[spec.classes.len() - 1]);
        let k = class.k[0] + rng.below(u64::from(class.k[1] - class.k[0]) + 1) as u32;
        let [fast, slow] = class.durations_s[rng.below(class.durations_s.len() as u64) as usize];
        let pairs = |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        jobs.push(Job {
            name: format!("{}-{}", class.name, jobs.len()),
            submit_ms: at_ms,
            queue: class.queue.clone().unwrap_or_else(|| "root.default".into()),
            user: "gen".into(),
            class: class.name.clone(),
            priority: 0,
            stages: vec![Stage {
                resources: Resources::new(class.cpu_millis, class.memory_mib << 20, class.gpus),
                count: k,
                gang: class.gang,
                selector: pairs(&class.selector),
                preferred: pairs(&class.preferred),
                rack_affinity: affinity(&class.rack_affinity).unwrap_or(RackAffinity::None),
                duration_ms: (fast * 1000.0) as u64,
                slow_duration_ms: (slow * 1000.0) as u64,
            }],
            time_limit_ms: class.time_limit_s.map(|s| (s * 1000.0) as u64),
        });
    }
    Ok(jobs)
}

/// The jobs of `class` in the CMU 15-719 format (`arrival,start,finish,k,prio`, seconds), with
/// start = arrival and finish − start = the fast duration, as the seed's traces record them.
pub fn to_cmu(jobs: &[Job], class: &str) -> String {
    let mut out = String::new();
    for j in jobs.iter().filter(|j| j.class == class) {
        if let Some(s) = j.stages.first() {
            let a = j.submit_ms as f64 / 1000.0;
            let f = a + s.duration_ms as f64 / 1000.0;
            out.push_str(&format!("{a:.3},{a:.3},{f:.3},{},{}\n", s.count, j.priority));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_CLASSES: &str = r#"
        [[classes]]
        name = "GPU"
        k = [2, 4]
        cpu_millis = 1000
        memory_mib = 1024
        gang = true
        preferred = { gpu = "true" }
        durations_s = [[39, 71], [172, 335], [295, 558], [196, 318], [70, 120], [243, 410]]
        time_limit_s = 1200
        [[classes]]
        name = "MPI"
        k = [4, 4]
        cpu_millis = 1000
        memory_mib = 1024
        gang = true
        rack_affinity = "preferred"
        durations_s = [[67, 78], [139, 165], [198, 229], [278, 305], [315, 345], [344, 387]]
        time_limit_s = 1200
    "#;

    /// 22 machines of one core: each container is one machine's worth.
    fn machines() -> Resources {
        Resources::new(22 * 1000, (22 * 1024) << 20, 0)
    }

    #[test]
    fn the_offered_load_matches_the_target() {
        let classes = parse_classes(SEED_CLASSES, "t.toml").expect("classes");
        for load in [0.7, 0.8, 0.9] {
            // Long enough for the sample mean to settle.
            let spec = GenSpec { classes: classes.clone(), load, span_ms: 2_000_000_000, seed: 3 };
            let jobs = generate(&spec, &machines()).expect("jobs");
            let work: f64 = jobs
                .iter()
                .map(|j| f64::from(j.stages[0].count) * j.stages[0].duration_ms as f64 / 1000.0 / 22.0)
                .sum();
            let offered = work / (spec.span_ms as f64 / 1000.0);
            assert!((offered - load).abs() < 0.02 * load, "target {load}, offered {offered}");
            let mpi = jobs.iter().filter(|j| j.class == "MPI").count() as f64 / jobs.len() as f64;
            assert!((mpi - 0.5).abs() < 0.02, "equal weights: {mpi}");
            assert!(jobs.windows(2).all(|w| w[0].submit_ms <= w[1].submit_ms));
        }
    }

    #[test]
    fn same_seed_same_jobs_and_the_cmu_form_reads_back() {
        let classes = parse_classes(SEED_CLASSES, "t.toml").expect("classes");
        let spec = GenSpec { classes, load: 0.8, span_ms: 1_800_000, seed: 11 };
        let a = generate(&spec, &machines()).expect("jobs");
        assert_eq!(a, generate(&spec, &machines()).expect("jobs"));
        assert_ne!(a, generate(&GenSpec { seed: 12, ..spec.clone() }, &machines()).expect("jobs"));
        let gpu = to_cmu(&a, "GPU");
        let back =
            crate::trace::cmu::parse(&gpu, "traceGPU-gen.csv", &Default::default()).expect("reads back");
        assert_eq!(back.len(), a.iter().filter(|j| j.class == "GPU").count());
    }

    #[test]
    fn bad_classes_are_refused_with_the_reason() {
        for (text, want) in [
            (
                "[[classes]]\nname='x'\nk=[3,2]\ncpu_millis=1\nmemory_mib=1\ndurations_s=[[1,1]]\n",
                "k must be",
            ),
            (
                "[[classes]]\nname='x'\nk=[1,2]\ncpu_millis=1\nmemory_mib=1\ndurations_s=[[5,1]]\n",
                "fast <= slow",
            ),
            (
                "[[classes]]\nname='x'\nk=[1,2]\ncpu_millis=1\nmemory_mib=1\ndurations_s=[[1,1]]\nrack_affinity='some'\n",
                "rack_affinity",
            ),
            (
                "[[classes]]\nname='x'\nk=[1,2]\ncpu_millis=1\nmemory_mib=1\ndurations_s=[[1,1]]\ncolour='red'\n",
                "unknown field",
            ),
            ("", "classes"),
        ] {
            let e = parse_classes(text, "c.toml").expect_err(text);
            assert!(e.0.contains(want), "{e} lacks {want}");
        }
    }
}
