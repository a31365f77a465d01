use super::{assert_err, assert_sorted, shared};
use gantry_engine::{RackAffinity, Resources};
use gantry_sim::trace::Job;
use gantry_sim::trace::alibaba::{self, AlibabaOptions, AlibabaStats, GpuSpecAs, PendingPods};

const MIB: u64 = 1 << 20;

fn find<'a>(jobs: &'a [Job], name: &str) -> Option<&'a Job> {
    jobs.iter().find(|j| j.name == name)
}

fn read_default(opts: &AlibabaOptions) -> (Vec<Job>, AlibabaStats) {
    let path = shared("alibaba-gpu-2023/openb_pod_list_default.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    alibaba::parse_with_stats(&text, "openb_pod_list_default.csv", opts).unwrap()
}

#[test]
fn default_pod_list_counts() {
    let (jobs, stats) = read_default(&AlibabaOptions::default());
    // 8,152 pods, of which 897 are Pending (never ran) and skipped by default.
    assert_eq!(
        stats,
        AlibabaStats {
            pods: 8152,
            jobs: 7255,
            skipped_pending: 897,
            fractional_gpus_rounded_up: 3078,
            duplicate_models_dropped: 0
        }
    );
    assert_eq!(jobs.len(), 7255);
    assert_sorted(&jobs);
    assert!(jobs.iter().all(|j| j.stages.len() == 1 && j.stages[0].count == 1 && !j.stages[0].gang));
    assert!(jobs.iter().all(|j| j.stages[0].selector.is_empty()), "the default list has no gpu_spec");
    let gpus: u64 = jobs.iter().map(|j| u64::from(j.stages[0].resources.gpus)).sum();
    assert_eq!(gpus, 6571);
    let cpu: u64 = jobs.iter().map(|j| j.stages[0].resources.cpu_millis).sum();
    assert_eq!(cpu, 76_423_916);
    let by_class = |c: &str| jobs.iter().filter(|j| j.class == c).count();
    assert_eq!(
        (by_class("LS"), by_class("BE"), by_class("Burstable"), by_class("Guaranteed")),
        (4193, 2957, 98, 7)
    );
    // The same through `read`.
    let read =
        alibaba::read(&shared("alibaba-gpu-2023/openb_pod_list_default.csv"), &AlibabaOptions::default())
            .unwrap();
    assert_eq!(read, jobs);
}

#[test]
fn default_pod_list_spot_checks() {
    let (jobs, _) = read_default(&AlibabaOptions::default());
    // openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
    let j = find(&jobs, "openb-pod-0000").unwrap();
    assert_eq!(
        (j.submit_ms, j.class.as_str(), j.queue.as_str(), j.user.as_str()),
        (0, "LS", "root.default", "alibaba")
    );
    let s = &j.stages[0];
    assert_eq!(s.resources, Resources { cpu_millis: 12000, memory_bytes: 16384 * MIB, gpus: 1, reserved: 0 });
    assert_eq!((s.duration_ms, s.slow_duration_ms), (12_537_496_000, 12_537_496_000));
    assert_eq!((s.rack_affinity, j.time_limit_ms, j.priority), (RackAffinity::None, None, 0));

    // openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061: 0.46 GPU → 1 GPU.
    let j = find(&jobs, "openb-pod-0001").unwrap();
    assert_eq!(j.submit_ms, 427_061_000);
    assert_eq!(j.stages[0].resources.gpus, 1);
    assert_eq!(j.stages[0].duration_ms, (12_902_960 - 427_061) * 1000);

    // openb-pod-0033,3152,5600,1,1000,,BE,Failed,9965463,9965645,9965463: a Failed pod is kept.
    let j = find(&jobs, "openb-pod-0033").unwrap();
    assert_eq!((j.class.as_str(), j.submit_ms, j.stages[0].duration_ms), ("BE", 9_965_463_000, 182_000));

    // openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497
    let j = find(&jobs, "openb-pod-0017").unwrap();
    assert_eq!(
        j.stages[0].resources,
        Resources { cpu_millis: 88000, memory_bytes: 327_680 * MIB, gpus: 8, reserved: 0 }
    );

    // openb-pod-1523,14000,0,1,1000,,Burstable,Succeeded,...: no memory, still a valid request.
    assert_eq!(find(&jobs, "openb-pod-1523").unwrap().stages[0].resources.memory_bytes, 0);

    // openb-pod-8151,...,Failed,12901761,12901792,12901762: scheduled a second after creation.
    let last = jobs.last().unwrap();
    assert_eq!(
        (last.name.as_str(), last.submit_ms, last.stages[0].duration_ms),
        ("openb-pod-8151", 12_901_761_000, 30_000)
    );

    // openb-pod-0061 is Pending: skipped.
    assert!(find(&jobs, "openb-pod-0061").is_none());

    // Two pods created at the same second keep the file's order.
    let i48 = jobs.iter().position(|j| j.name == "openb-pod-0048").unwrap();
    assert_eq!(jobs[i48 + 1].name, "openb-pod-0049");
    assert_eq!(jobs[i48].submit_ms, jobs[i48 + 1].submit_ms);
}

#[test]
fn pending_pods_can_be_kept() {
    let (jobs, stats) =
        read_default(&AlibabaOptions { pending: PendingPods::RunUntilDeleted, ..Default::default() });
    assert_eq!((stats.jobs, stats.skipped_pending, jobs.len()), (8152, 0, 8152));
    // openb-pod-0061,11908,47104,1,1000,,BE,Pending,10001278,10001403,
    let j = find(&jobs, "openb-pod-0061").unwrap();
    assert_eq!((j.submit_ms, j.stages[0].duration_ms), (10_001_278_000, 125_000));
    assert_sorted(&jobs);
}

#[test]
fn gpuspec33_selectors() {
    let path = shared("alibaba-gpu-2023/openb_pod_list_gpuspec33.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let (jobs, stats) = alibaba::parse_with_stats(&text, "gpuspec33", &AlibabaOptions::default()).unwrap();
    assert_eq!(
        (stats.pods, stats.jobs, stats.skipped_pending, stats.duplicate_models_dropped),
        (8152, 7255, 897, 25)
    );
    assert_eq!(jobs.iter().filter(|j| !j.stages[0].selector.is_empty()).count(), 2092);
    let sel = |name: &str| find(&jobs, name).unwrap().stages[0].selector.clone();
    // openb-pod-0012,8000,32768,1,1000,T4,LS,Running,6588193,10959245,6595531
    assert_eq!(sel("openb-pod-0012"), [("gpu_model".to_owned(), "T4".to_owned())]);
    let j = find(&jobs, "openb-pod-0012").unwrap();
    assert_eq!(
        j.stages[0].duration_ms,
        (10_959_245 - 6_595_531) * 1000,
        "duration counts from scheduled_time"
    );
    // openb-pod-0598,...,V100M16|V100M32|V100M32,...: the repeated model is dropped.
    assert_eq!(sel("openb-pod-0598"), [("gpu_model".to_owned(), "V100M16|V100M32".to_owned())]);
    // openb-pod-1444,...,A10|G2|P100|T4|V100M16|V100M32|V100M32,BE,Failed,...
    assert_eq!(
        sel("openb-pod-1444"),
        [("gpu_model".to_owned(), "A10|G2|P100|T4|V100M16|V100M32".to_owned())]
    );
    assert!(sel("openb-pod-0000").is_empty());
}

#[test]
fn gpuspec33_as_preferences() {
    let path = shared("alibaba-gpu-2023/openb_pod_list_gpuspec33.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let read = |gpu_spec| {
        let opts = AlibabaOptions { gpu_spec, ..Default::default() };
        alibaba::parse_with_stats(&text, "gpuspec33", &opts).unwrap()
    };
    let (hard, hard_stats) = read(GpuSpecAs::Selector);
    let (soft, soft_stats) = read(GpuSpecAs::preference(1.0).unwrap());
    assert_eq!(soft_stats, hard_stats);
    assert_eq!((hard.len(), soft.len()), (7255, 7255));
    let mut moved = 0;
    for (h, s) in hard.iter().zip(&soft) {
        assert_eq!((h.name.as_str(), h.submit_ms), (s.name.as_str(), s.submit_ms), "same jobs, same order");
        let (hs, ss) = (&h.stages[0], &s.stages[0]);
        assert!(hs.preferred.is_empty() && ss.selector.is_empty(), "{}", h.name);
        assert_eq!(ss.preferred, hs.selector, "{}: the selector becomes the preference", h.name);
        assert_eq!((ss.duration_ms, ss.slow_duration_ms), (hs.duration_ms, hs.duration_ms), "{}", h.name);
        moved += usize::from(!hs.selector.is_empty());
    }
    assert_eq!(moved, 2092);
    assert_eq!(
        find(&soft, "openb-pod-0598").unwrap().stages[0].preferred,
        [("gpu_model".to_owned(), "V100M16|V100M32".to_owned())]
    );

    // With a slowdown, only the jobs with a preference get a longer slow duration.
    let (slow, _) = read(GpuSpecAs::preference(1.5).unwrap());
    for (h, s) in hard.iter().zip(&slow) {
        let d = h.stages[0].duration_ms;
        let want = if h.stages[0].selector.is_empty() { d } else { (d as f64 * 1.5).round() as u64 };
        assert_eq!((s.stages[0].duration_ms, s.stages[0].slow_duration_ms), (d, want), "{}", h.name);
    }
    // openb-pod-0012,...,T4,LS,Running,6588193,10959245,6595531
    let j = find(&slow, "openb-pod-0012").unwrap();
    assert_eq!(j.stages[0].slow_duration_ms, (10_959_245 - 6_595_531) * 1500);
}

const HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";
const GOOD: &str = "p0,1000,1024,1,500,,LS,Running,10,20,12";

fn parse_with(bad: &str) -> Result<Vec<Job>, gantry_sim::trace::TraceError> {
    // The bad row is line 3 (header, good row, bad row).
    alibaba::parse(&format!("{HEADER}\n{GOOD}\n{bad}\n{GOOD}\n"), "pods.csv", &AlibabaOptions::default())
}

#[test]
fn malformed_pod_lists_are_refused() {
    assert_err(
        parse_with("p1,1000,1024,1,500,,LS,Running,10,20"),
        3,
        &["expected 11 comma-separated fields", "found 10"],
    );
    assert_err(
        parse_with("p1,lots,1024,1,500,,LS,Running,10,20,12"),
        3,
        &["cpu_milli", "non-negative integer", "`lots`"],
    );
    assert_err(
        parse_with("p1,1000,-1024,1,500,,LS,Running,10,20,12"),
        3,
        &["memory_mib", "negative number `-1024`"],
    );
    assert_err(
        parse_with("p1,1000,1024,1,500,,LS,Running,99999999999999999999,20,12"),
        3,
        &["creation_time", "too large"],
    );
    assert_err(
        parse_with("p1,1000,18446744073709551615,1,500,,LS,Running,10,20,12"),
        3,
        &["memory_mib", "too large"],
    );
    assert_err(parse_with("p1,1000,1024,1,500,,LS,Running,1.5,20,12"), 3, &["creation_time", "`1.5`"]);
    assert_err(
        parse_with("p1,1000,1024,1,500,A||B,LS,Running,10,20,12"),
        3,
        &["gpu_spec `A||B`", "empty alternative", "single `|`"],
    );
    assert_err(parse_with("p1,1000,1024,1,500,|T4,LS,Running,10,20,12"), 3, &["empty alternative"]);
    assert_err(parse_with("p1,1000,1024,1,500,T4|,LS,Running,10,20,12"), 3, &["empty alternative"]);
    assert_err(parse_with("p1,1000,1024,1,500,T4|V100 M16,LS,Running,10,20,12"), 3, &["whitespace"]);
    assert_err(
        parse_with("p1,1000,1024,0,500,,LS,Running,10,20,12"),
        3,
        &["gpu_milli is 500 but num_gpu is 0"],
    );
    assert_err(parse_with("p1,1000,1024,2,0,,LS,Running,10,20,12"), 3, &["gpu_milli", "1..=1000"]);
    assert_err(parse_with("p1,1000,1024,1,1001,,LS,Running,10,20,12"), 3, &["gpu_milli", "1..=1000"]);
    assert_err(
        parse_with("p1,1000,1024,1,500,,LS,Sleeping,10,20,12"),
        3,
        &["pod_phase", "Running, Succeeded, Failed or Pending", "`Sleeping`"],
    );
    assert_err(
        parse_with("p1,1000,1024,1,500,,LS,Running,10,20,5"),
        3,
        &["scheduled_time 5 is before creation_time 10"],
    );
    assert_err(
        parse_with("p1,1000,1024,1,500,,LS,Running,10,11,12"),
        3,
        &["deletion_time 11 is before the pod started (12)"],
    );
    assert_err(parse_with("p1,0,0,0,0,,LS,Running,10,20,12"), 3, &["asks for no resources"]);
    assert_err(
        parse_with(r#""p1",1000,1024,1,500,,LS,Running,10,20,12"#),
        3,
        &["quoted CSV fields are not supported"],
    );
    assert_err(parse_with(",1000,1024,1,500,,LS,Running,10,20,12"), 3, &["name must not be empty"]);
}

#[test]
fn headers_are_read_by_name() {
    // Columns in another order, plus an extra one: fine.
    let text = "qos,extra,name,pod_phase,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,scheduled_time,deletion_time,creation_time\n\
                BE,x,p9,Succeeded,500,256,0,0,,7,9,7\n";
    let jobs = alibaba::parse(text, "reordered.csv", &AlibabaOptions::default()).unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!((jobs[0].name.as_str(), jobs[0].class.as_str(), jobs[0].submit_ms), ("p9", "BE", 7000));
    assert_eq!(jobs[0].stages[0].duration_ms, 2000);

    let missing = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,pod_phase,creation_time,deletion_time\np,1,1,0,0,LS,Running,1,2\n";
    assert_err(
        alibaba::parse(missing, "m.csv", &AlibabaOptions::default()),
        1,
        &["lacks column(s) `gpu_spec`, `scheduled_time`", "expected a header naming"],
    );
    let twice = format!("{HEADER},qos\n");
    assert_err(alibaba::parse(&twice, "t.csv", &AlibabaOptions::default()), 1, &["column `qos` twice"]);
    assert_err(alibaba::parse("", "e.csv", &AlibabaOptions::default()), 1, &["expected a header", "empty"]);
}
