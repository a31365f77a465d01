//! The trace readers' bounds on hostile input — file size, line length — and the inputs fuzzing
//! found (`fuzz/regressions/trace_*/`), each refused with an error that names the line.

use gantry_sim::trace::alibaba::{self, AlibabaOptions};
use gantry_sim::trace::cmu::{self, CmuConfig};
use gantry_sim::trace::swf::{self, SwfOptions};
use gantry_sim::trace::swim::{self, SwimModel};
use gantry_sim::trace::{Job, MAX_LINE_BYTES, MAX_TRACE_BYTES, TraceError, jsonl};

/// Every reader on `text`, by name.
fn every_reader(text: &str) -> Vec<(&'static str, Result<Vec<Job>, TraceError>)> {
    vec![
        ("jsonl", jsonl::parse(text, "t.jsonl")),
        ("alibaba", alibaba::parse(text, "t.csv", &AlibabaOptions::default())),
        ("swim", swim::parse(text, "t.tsv", &SwimModel::default())),
        ("swf", swf::parse(text, "t.swf", &SwfOptions::default())),
        ("cmu", cmu::parse(text, "traceGPU-t.csv", &CmuConfig::default())),
    ]
}

#[test]
fn a_line_over_the_limit_is_refused_by_every_reader() {
    let long = "9".repeat(MAX_LINE_BYTES + 1);
    for (reader, result) in every_reader(&format!("{long}\n")) {
        let e = result.expect_err(reader);
        assert_eq!(e.line, 1, "{reader}: {e}");
        assert!(e.message.contains("bytes long; expected at most 1048576"), "{reader}: {e}");
    }
    // After lines each reader accepts or skips, the same, at the long line's number.
    let header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";
    let after = [
        ("jsonl", jsonl::parse(&format!("# comment\n\n{long}\n"), "t.jsonl")),
        ("alibaba", alibaba::parse(&format!("{header}\n{long}\n"), "t.csv", &AlibabaOptions::default())),
        ("swim", swim::parse(&format!("\n\n{long}\n"), "t.tsv", &SwimModel::default())),
        ("swf", swf::parse(&format!("; header\n\n{long}\n"), "t.swf", &SwfOptions::default())),
        ("cmu", cmu::parse(&format!("# comment\n\n{long}\n"), "traceMPI-t.csv", &CmuConfig::default())),
    ];
    for (reader, result) in after {
        let e = result.expect_err(reader);
        let want_line = if reader == "alibaba" { 2 } else { 3 };
        assert_eq!(e.line, want_line, "{reader}: {e}");
        assert!(e.message.contains("bytes long"), "{reader}: {e}");
    }
}

#[test]
fn a_file_over_the_limit_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("huge.swf");
    // Sparse: the length is what is checked, nothing is written or read.
    std::fs::File::create(&path).and_then(|f| f.set_len(MAX_TRACE_BYTES + 1)).expect("sparse file");
    let e = swf::read(&path, &SwfOptions::default()).expect_err("too large");
    assert_eq!(e.line, 0, "{e}");
    assert!(e.message.contains("larger than the 1073741824-byte limit"), "{e}");
}

#[test]
fn a_file_that_is_not_utf8_names_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, b"# fine\n# also fine\n{\"name\": \"\xff\"}\n").expect("write");
    let e = jsonl::read(&path).expect_err("not UTF-8");
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("not UTF-8"), "{e}");
}
