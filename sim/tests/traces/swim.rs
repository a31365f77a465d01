use super::{assert_err, assert_sorted, shared};
use gantry_engine::{RackAffinity, Resources};
use gantry_sim::trace::swim::{self, SwimModel};
use gantry_sim::trace::{Job, TraceError};

fn fb() -> Vec<Job> {
    swim::read(&shared("swim-fb-2009/FB-2009_samples_24_times_1hr_0.tsv"), &SwimModel::default()).unwrap()
}

fn shape(j: &Job) -> Vec<(u32, u64)> {
    j.stages.iter().map(|s| (s.count, s.duration_ms)).collect()
}

#[test]
fn facebook_2009_counts() {
    let jobs = fb();
    assert_eq!(jobs.len(), 5894);
    assert_sorted(&jobs);
    let maps: u64 = jobs.iter().map(|j| u64::from(j.stages[0].count)).sum();
    let reduce_stages: Vec<_> = jobs.iter().filter_map(|j| j.stages.get(1)).collect();
    let reduces: u64 = reduce_stages.iter().map(|s| u64::from(s.count)).sum();
    assert_eq!((maps, reduce_stages.len(), reduces), (205_713, 1446, 21_895));
    assert!(jobs.iter().all(|j| j.stages.len() <= 2));
    // Total container time of the day under the default model.
    let task_ms: u64 = jobs.iter().flat_map(|j| &j.stages).map(|s| u64::from(s.count) * s.duration_ms).sum();
    assert_eq!(task_ms, 2_018_781_158);
    let container = Resources { cpu_millis: 1000, memory_bytes: 2 << 30, gpus: 0, reserved: 0 };
    for j in &jobs {
        assert_eq!(
            (j.class.as_str(), j.queue.as_str(), j.user.as_str(), j.time_limit_ms),
            ("mapreduce", "root.default", "swim", None)
        );
        for s in &j.stages {
            assert_eq!(s.resources, container);
            assert!(!s.gang && s.selector.is_empty() && s.preferred.is_empty());
            assert_eq!((s.rack_affinity, s.slow_duration_ms), (RackAffinity::None, s.duration_ms));
        }
    }
}

#[test]
fn facebook_2009_spot_checks() {
    let jobs = fb();
    let find = |n: &str| jobs.iter().find(|j| j.name == n).unwrap();
    // job0  49  49  740773  2339561  627471: one map (0.7 MB < 128 MiB) reading the input and
    // writing the shuffle: 3,080,334 B at 50 MB/s = 62 ms + 2 s; one reduce (2.3 MB ≤ 1 GiB).
    let j = find("job0");
    assert_eq!(j.submit_ms, 49_000);
    assert_eq!(shape(j), [(1, 2062), (1, 2060)]);
    // job4  208  11  3623279  0  9838062: no shuffle → map-only; the map writes the output.
    assert_eq!(shape(find("job4")), [(1, 2270)]);
    // job969  17519  1  7551263722208  51038659744  103464: the largest job.
    // 7,551,263,722,208 B / 128 MiB → 56,262 maps; 51,038,659,744 B / 1 GiB → 48 reduces.
    let j = find("job969");
    assert_eq!((j.submit_ms, shape(j)), (17_519_000, vec![(56_262, 4703), (48, 23_267)]));
    let last = jobs.last().unwrap();
    assert_eq!((last.name.as_str(), last.submit_ms), ("job5893", 86_404_000));
    // job36 and job37 arrive at the same second and keep their order.
    let i = jobs.iter().position(|j| j.name == "job36").unwrap();
    assert_eq!((jobs[i + 1].name.as_str(), jobs[i + 1].submit_ms), ("job37", jobs[i].submit_ms));
}

#[test]
fn the_model_is_configurable() {
    let model = SwimModel {
        block_bytes: 64 << 20,
        reduce_bytes: 256 << 20,
        task_bytes_per_s: 100_000_000,
        task_overhead_ms: 0,
        max_tasks: 10,
        ..SwimModel::default()
    };
    // 1 GiB input → 16 maps of 64 MiB, capped at 10 maps of ~107 MB (each also writing 1/10 of
    // 512 MiB of shuffle); 512 MiB shuffle → 2 reduces.
    let jobs = swim::parse("j\t5\t5\t1073741824\t536870912\t1000\n", "t", &model).unwrap();
    let s = &jobs[0].stages;
    assert_eq!((s[0].count, s[1].count), (10, 2));
    // Map: ceil(1073741824/10) + ceil(536870912/10) = 161,061,274 B at 100 MB/s → 1,611 ms.
    assert_eq!(s[0].duration_ms, 1611);
    // Reduce: 268,435,456 + 500 B → 2,685 ms.
    assert_eq!(s[1].duration_ms, 2685);

    let bad = SwimModel { block_bytes: 0, ..SwimModel::default() };
    let e = swim::parse("", "t", &bad).unwrap_err();
    assert_eq!(e.line, 0);
    assert!(e.message.contains("invalid SWIM model"), "{e}");
}

fn parse_with(bad: &str) -> Result<Vec<Job>, TraceError> {
    swim::parse(&format!("job0\t1\t1\t10\t10\t10\n\n{bad}\n"), "fb.tsv", &SwimModel::default())
}

#[test]
fn malformed_lines_are_refused() {
    assert_err(parse_with("job1\t2\t1\t10\t10"), 3, &["expected 6 tab-separated fields", "found 5"]);
    assert_err(parse_with("job1 2 1 10 10 10"), 3, &["expected 6 tab-separated fields", "found 1"]);
    assert_err(parse_with("job1\t2\t1\t10\t10\t10\t7"), 3, &["found 7"]);
    assert_err(
        parse_with("job1\tsoon\t1\t10\t10\t10"),
        3,
        &["submit_time_s", "non-negative integer", "`soon`"],
    );
    assert_err(parse_with("job1\t2\t1\t-10\t10\t10"), 3, &["map_input_bytes", "negative number `-10`"]);
    assert_err(parse_with("job1\t2\t1\t10\t1.5e9\t10"), 3, &["shuffle_bytes", "`1.5e9`"]);
    assert_err(
        parse_with("job1\t2\t1\t10\t10\t99999999999999999999"),
        3,
        &["reduce_output_bytes", "too large"],
    );
    assert_err(
        parse_with("job1\t18446744073709551615\t1\t10\t10\t10"),
        3,
        &["submit_time_s", "too large to count in milliseconds"],
    );
    assert_err(parse_with("\t2\t1\t10\t10\t10"), 3, &["job_id", "empty"]);
    assert_err(
        swim::parse(
            "job_id\tsubmit_time_s\tgap_s\tmap_input_bytes\tshuffle_bytes\treduce_output_bytes\n",
            "h.tsv",
            &SwimModel::default(),
        ),
        1,
        &["submit_time_s", "`submit_time_s`"],
    );
}
