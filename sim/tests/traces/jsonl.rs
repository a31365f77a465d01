use super::{assert_err, assert_sorted, local};
use gantry_engine::{RackAffinity, Resources};
use gantry_sim::trace::jsonl;
use gantry_sim::trace::{Job, Stage};
use proptest::prelude::*;

#[test]
fn example_file_reads_with_defaults_and_order() {
    let jobs = jsonl::read(&local("examples/traces/mixed.jsonl")).unwrap();
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    // Sorted by submit time; train-7 and tiny share 1500 ms and keep their file order.
    assert_eq!(names, ["etl-1", "mpi-3", "train-7", "tiny"]);
    assert_sorted(&jobs);

    let etl = &jobs[0];
    assert_eq!(etl.stages.len(), 2);
    assert_eq!(etl.stages[0].count, 40);
    assert_eq!(etl.stages[1].resources.memory_bytes, 4 << 30);
    assert_eq!(etl.class, "mapreduce");

    let train = &jobs[2];
    assert_eq!(train.priority, 10);
    assert_eq!(train.time_limit_ms, Some(1_200_000));
    let s = &train.stages[0];
    assert_eq!(s.resources, Resources { cpu_millis: 8000, memory_bytes: 64 << 30, gpus: 1, reserved: 0 });
    assert!(s.gang);
    assert_eq!(s.selector, [("gpu_model".to_owned(), "A100|H100".to_owned())]);
    assert_eq!(s.preferred, [("gpu_model".to_owned(), "A100".to_owned())]);
    assert_eq!(s.rack_affinity, RackAffinity::Preferred);
    assert_eq!((s.duration_ms, s.slow_duration_ms), (600_000, 900_000));

    // Every optional field at its default.
    let tiny = &jobs[3];
    assert_eq!(
        (tiny.queue.as_str(), tiny.user.as_str(), tiny.class.as_str()),
        ("root.default", "default", "job")
    );
    assert_eq!((tiny.priority, tiny.time_limit_ms), (0, None));
    let s = &tiny.stages[0];
    assert_eq!(s.resources, Resources { cpu_millis: 500, memory_bytes: 0, gpus: 0, reserved: 0 });
    assert_eq!((s.count, s.gang, s.rack_affinity), (1, false, RackAffinity::None));
    assert!(s.selector.is_empty() && s.preferred.is_empty());
    assert_eq!(s.slow_duration_ms, s.duration_ms);

    assert_eq!(jobs[1].stages[0].rack_affinity, RackAffinity::Required);
}

#[test]
fn writer_output_reads_back_and_leaves_defaults_out() {
    let jobs = jsonl::read(&local("examples/traces/mixed.jsonl")).unwrap();
    let text = jsonl::write(&jobs);
    assert_eq!(text.lines().count(), jobs.len());
    assert!(
        text.contains(r#"{"name":"tiny","submit_ms":1500,"stages":[{"cpu_millis":500,"duration_ms":5000}]}"#),
        "{text}"
    );
    assert_eq!(jsonl::parse(&text, "written").unwrap(), jobs);
}

#[test]
fn label_order_is_kept() {
    let line = r#"{"name":"a","submit_ms":0,"stages":[{"cpu_millis":1,"duration_ms":1,"selector":{"z":"1","a":"2","m":""}}]}"#;
    let jobs = jsonl::parse(line, "t").unwrap();
    let keys: Vec<&str> = jobs[0].stages[0].selector.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["z", "a", "m"]);
}

#[test]
fn malformed_lines_name_their_line_and_the_expectation() {
    let ok = r#"{"name":"a","submit_ms":0,"stages":[{"cpu_millis":1,"duration_ms":1}]}"#;
    let with = |bad: &str| format!("# header\n{ok}\n\n{bad}\n{ok}\n");
    // Line 4: the bad one (comment, good line, blank line before it).
    assert_err(
        jsonl::parse(
            &with(r#"{"name":"a","submit_ms":0,"stages":[{"cpu_millis":1,"duration_ms":1,"gnag":true}]}"#),
            "t",
        ),
        4,
        &["unknown field `gnag`", "expected one of", "gang"],
    );
    assert_err(
        jsonl::parse(&with(r#"{"name":"a","submit_ms":0,"stages":[],"extra":1}"#), "t"),
        4,
        &["unknown field `extra`"],
    );
    assert_err(jsonl::parse(&with(r#"{"name":"a","stages":[]}"#), "t"), 4, &["missing field `submit_ms`"]);
    assert_err(
        jsonl::parse(&with(r#"{"name":"a","submit_ms":-5,"stages":[]}"#), "t"),
        4,
        &["invalid value", "-5", "u64"],
    );
    assert_err(
        jsonl::parse(&with(r#"{"name":"a","submit_ms":"soon","stages":[]}"#), "t"),
        4,
        &["invalid type", "string \"soon\"", "u64"],
    );
    assert_err(
        jsonl::parse(&with(r#"{"name":"a","submit_ms":18446744073709551616,"stages":[]}"#), "t"),
        4,
        &["u64"],
    );
    assert_err(
        jsonl::parse(
            &with(r#"{"name":"a","submit_ms":0,"stages":[{"gpus":4294967296,"duration_ms":1}]}"#),
            "t",
        ),
        4,
        &["u32"],
    );
    assert_err(
        jsonl::parse(
            &with(
                r#"{"name":"a","submit_ms":0,"stages":[{"cpu_millis":1,"duration_ms":1,"rack_affinity":"rack"}]}"#,
            ),
            "t",
        ),
        4,
        &["unknown variant `rack`", "none", "preferred", "required"],
    );
    assert_err(
        jsonl::parse(
            &with(
                r#"{"name":"a","submit_ms":0,"stages":[{"cpu_millis":1,"duration_ms":1,"selector":{"gpu":1}}]}"#,
            ),
            "t",
        ),
        4,
        &["invalid type", "string"],
    );
    assert_err(
        jsonl::parse(&with(r#"{"name":"a","submit_ms":0,"stages":[]}"#), "t"),
        4,
        &["at least one stage"],
    );
    assert_err(
        jsonl::parse(&with(r#"{"name":"a","submit_ms":0,"stages":[{"duration_ms":1}]}"#), "t"),
        4,
        &["stage 0", "asks for no resources"],
    );
    assert_err(
        jsonl::parse(
            &with(r#"{"name":"a","submit_ms":0,"stages":[{"cpu_millis":1,"count":0,"duration_ms":1}]}"#),
            "t",
        ),
        4,
        &["count 0", "1..=100000"],
    );
    assert_err(
        jsonl::parse(
            &with(
                r#"{"name":"a","submit_ms":0,"stages":[{"cpu_millis":1,"duration_ms":10,"slow_duration_ms":5}]}"#,
            ),
            "t",
        ),
        4,
        &["slow_duration_ms 5 is shorter than duration_ms 10"],
    );
    assert_err(
        jsonl::parse(&with(r#"{"name":"","submit_ms":0,"stages":[{"cpu_millis":1,"duration_ms":1}]}"#), "t"),
        4,
        &["name must not be empty"],
    );
    assert_err(jsonl::parse(&with("not json"), "t"), 4, &["expected a gantry job object", "column"]);
    let e = jsonl::parse(&with("{"), "file.jsonl").unwrap_err();
    assert_eq!(e.file, "file.jsonl");
    assert!(e.to_string().starts_with("file.jsonl:4: "), "{e}");
}

#[test]
fn an_unreadable_file_is_an_error_at_line_0() {
    let e = jsonl::read(&local("tests/data/does-not-exist.jsonl")).unwrap_err();
    assert_eq!(e.line, 0);
    assert!(e.message.contains("cannot read"), "{e}");
}

fn name() -> impl Strategy<Value = String> {
    // Printable text, quotes and backslashes and non-ASCII included (JSON escapes them).
    "[a-zA-Z0-9 ._:/\"\\\\|=é漢-]{1,20}"
}

fn labels() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec((name(), "[a-zA-Z0-9|._\"-]{0,12}"), 0..4)
}

fn stage() -> impl Strategy<Value = Stage> {
    (
        (1u64..u64::MAX, any::<u64>(), any::<u32>()),
        1u32..=100_000,
        any::<bool>(),
        labels(),
        labels(),
        prop_oneof![Just(RackAffinity::None), Just(RackAffinity::Preferred), Just(RackAffinity::Required)],
        any::<u64>(),
        prop_oneof![Just(0u64), any::<u64>()],
    )
        .prop_map(
            |((cpu, mem, gpus), count, gang, selector, preferred, rack_affinity, duration_ms, extra)| Stage {
                resources: Resources { cpu_millis: cpu, memory_bytes: mem, gpus, reserved: 0 },
                count,
                gang,
                selector,
                preferred,
                rack_affinity,
                duration_ms,
                slow_duration_ms: duration_ms.saturating_add(extra),
            },
        )
}

fn job() -> impl Strategy<Value = Job> {
    (
        name(),
        any::<u64>(),
        prop_oneof![Just("root.default".to_owned()), "root\\.[a-z]{1,8}"],
        prop_oneof![Just("default".to_owned()), name()],
        prop_oneof![Just("job".to_owned()), name()],
        any::<i32>(),
        prop::collection::vec(stage(), 1..4),
        prop::option::of(any::<u64>()),
    )
        .prop_map(|(name, submit_ms, queue, user, class, priority, stages, time_limit_ms)| Job {
            name,
            submit_ms,
            queue,
            user,
            class,
            priority,
            stages,
            time_limit_ms,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever jobs the generator writes, the reader gives back the same jobs (sorted by
    /// submission time, stably).
    #[test]
    fn written_jobs_read_back_equal(jobs in prop::collection::vec(job(), 0..20)) {
        let text = jsonl::write(&jobs);
        let back = jsonl::parse(&text, "roundtrip").unwrap();
        let mut expected = jobs.clone();
        expected.sort_by_key(|j| j.submit_ms);
        prop_assert_eq!(back, expected);
    }
}
