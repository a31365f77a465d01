//! Cluster readers on the example files, the shared Alibaba node lists and malformed inputs.

mod common;
use common::shared;
use gantry_engine::{GpuSpec, Resources};
use gantry_sim::cluster::{AlibabaNodeOptions, ClusterError, ClusterSpec};
use std::path::{Path, PathBuf};

const GIB: u64 = 1 << 30;

fn local(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn label<'a>(labels: &'a [(String, String)], key: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[test]
fn seed_002_cluster() {
    let c = ClusterSpec::read(&local("examples/clusters/hetero-seed002.toml")).unwrap();
    assert_eq!(c.nodes.len(), 22);
    assert_eq!(c.racks(), ["rack0", "rack1", "rack2", "rack3"]);
    let per_rack: Vec<usize> =
        c.racks().iter().map(|r| c.nodes.iter().filter(|n| n.rack == *r).count()).collect();
    assert_eq!(per_rack, [4, 6, 6, 6]);
    let gpu: Vec<&str> = c.gpu_nodes().map(|n| n.name.as_str()).collect();
    assert_eq!(gpu, ["rack0-n0", "rack0-n1", "rack0-n2", "rack0-n3"]);
    let n = &c.nodes[0];
    assert_eq!(n.capacity, Resources { cpu_millis: 4000, memory_bytes: 8 * GIB, gpus: 1, reserved: 0 });
    assert_eq!(label(&n.labels, "gpu"), Some("true"));
    assert_eq!(label(&n.labels, "gpu_model"), Some("seed-gpu"));
    assert_eq!(n.gpu_list, [GpuSpec { index: 0, model: "seed-gpu".into(), memory_bytes: 0 }]);
    let small = c.nodes.iter().find(|n| n.name == "rack3-n5").unwrap();
    assert_eq!((small.rack.as_str(), small.capacity.cpu_millis, small.capacity.gpus), ("rack3", 2000, 0));
    assert!(small.labels.is_empty() && small.gpu_list.is_empty());
    // The CMU reader's default container fits exactly once on every machine.
    let container = gantry_sim::trace::cmu::CmuConfig::default().container;
    for n in &c.nodes {
        let fits = (n.capacity.cpu_millis / container.cpu_millis)
            .min(n.capacity.memory_bytes / container.memory_bytes);
        assert_eq!(fits, 1, "{}", n.name);
    }
    assert_eq!(
        c.total_capacity(),
        Resources { cpu_millis: 52_000, memory_bytes: 176 * GIB, gpus: 4, reserved: 0 }
    );
}

#[test]
fn small_cluster_classes_and_overrides() {
    let c = ClusterSpec::read_toml(&local("examples/clusters/small.toml")).unwrap();
    let names: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["r0-n0", "r0-n1", "r0-n2", "r0-n3", "r1-n0", "r1-n1", "r1-n2", "r1-n3"]);
    assert_eq!(c.description.as_deref(), Some("small: 2 racks, 8 nodes, 8 GPUs"));
    let a100 = &c.nodes[0];
    assert_eq!(
        a100.capacity,
        Resources { cpu_millis: 32_000, memory_bytes: 256 * GIB, gpus: 4, reserved: 0 }
    );
    assert_eq!(a100.gpu_list.len(), 4);
    assert_eq!(a100.gpu_list[3], GpuSpec { index: 3, model: "A100".into(), memory_bytes: 80 * GIB });
    assert_eq!(label(&c.nodes[2].labels, "disk"), Some("ssd"));
    assert_eq!(label(&c.nodes[4].labels, "disk"), None);
    assert_eq!(c.gpu_nodes().count(), 2);
    assert_eq!(c.total_capacity().gpus, 8);
}

#[test]
fn alibaba_node_lists() {
    let gpu = ClusterSpec::read(&shared("alibaba-gpu-2023/openb_node_list_gpu_node.csv")).unwrap();
    assert_eq!(gpu.nodes.len(), 1213);
    assert_eq!(gpu.gpu_nodes().count(), 1213);
    assert_eq!(gpu.total_capacity().gpus, 6212);
    assert_eq!(gpu.total_capacity().cpu_millis, 107_018_000);
    assert_eq!(gpu.racks(), [""], "the list has no racks");
    // openb-node-0000,64000,262144,2,P100
    let n = &gpu.nodes[0];
    assert_eq!(n.name, "openb-node-0000");
    assert_eq!(
        n.capacity,
        Resources { cpu_millis: 64_000, memory_bytes: 262_144 << 20, gpus: 2, reserved: 0 }
    );
    assert_eq!((label(&n.labels, "gpu"), label(&n.labels, "gpu_model")), (Some("true"), Some("P100")));
    assert_eq!(n.gpu_list.len(), 2);
    // openb-node-1212,96000,393216,8,G2
    assert_eq!(gpu.nodes[1212].name, "openb-node-1212");
    assert_eq!(label(&gpu.nodes[1212].labels, "gpu_model"), Some("G2"));

    let all = ClusterSpec::read_alibaba(
        &shared("alibaba-gpu-2023/openb_node_list_all_node.csv"),
        &AlibabaNodeOptions { nodes_per_rack: Some(40) },
    )
    .unwrap();
    assert_eq!((all.nodes.len(), all.gpu_nodes().count()), (1523, 1213));
    // openb-node-0000,32000,262144,0,: CPU-only, no labels.
    assert!(all.nodes[0].labels.is_empty() && all.nodes[0].gpu_list.is_empty());
    assert_eq!(all.racks().len(), 39, "1523 nodes in racks of 40");
    assert_eq!((all.nodes[39].rack.as_str(), all.nodes[40].rack.as_str()), ("rack0", "rack1"));
}

#[track_caller]
fn toml_err(text: &str, needles: &[&str]) -> ClusterError {
    let e = ClusterSpec::parse_toml(text, "c.toml").expect_err("expected the cluster to be refused");
    for n in needles {
        assert!(e.message.contains(n), "message {:?} lacks {n:?}", e.message);
    }
    e
}

#[test]
fn malformed_toml_is_refused() {
    let e = toml_err(
        "[[racks]]\nname = \"a\"\n[[racks.nodes]]\ncount = 2\ncpu_cores = 2\nmemroy_gib = 8\n",
        &["unknown field `memroy_gib`"],
    );
    assert_eq!(e.line, 6);
    toml_err("[[racks]]\n[[racks.nodes]]\ncpu_cores = 2\n", &["memory_gib is missing"]);
    toml_err("[[racks]]\n[[racks.nodes]]\ncpu_cores = 0\nmemory_gib = 8\n", &["cpu_cores is 0", "positive"]);
    toml_err(
        "[[racks]]\n[[racks.nodes]]\ncpu_cores = -2\nmemory_gib = 8\n",
        &["cpu_cores is -2", "positive"],
    );
    toml_err("[[racks]]\n[[racks.nodes]]\ncpu_cores = 0.0001\nmemory_gib = 8\n", &["millicores"]);
    toml_err("[[racks]]\n[[racks.nodes]]\ncpu_cores = 2\nmemory_gib = 0\n", &["memory_gib is 0"]);
    toml_err("[[racks]]\n[[racks.nodes]]\ncpu_cores = 2\nmemory_gib = 8\ngpus = -1\n", &["gpus"]);
    toml_err("[[racks]]\n[[racks.nodes]]\ncpu_cores = 2\nmemory_gib = 8\ncount = 0\n", &["count is 0"]);
    toml_err(
        "[[racks]]\n[[racks.nodes]]\ncpu_cores = 2\nmemory_gib = 8\ngpu_model = \"A100\"\n",
        &["gpu_model is set but gpus is 0"],
    );
    toml_err(
        "[[racks]]\n[[racks.nodes]]\ncpu_cores = 2\nmemory_gib = 8\ngpus = 1\ngpu_model = \"A|B\"\n",
        &["without `|`"],
    );
    toml_err("[[racks]]\n[[racks.nodes]]\nclass = \"big\"\n", &["unknown class `big`"]);
    toml_err(
        "[[racks]]\n[[racks.nodes]]\ncpu_cores = 2\nmemory_gib = 8\ngpus = 1\nlabels = { gpu = \"yes\" }\n",
        &["label `gpu` is set automatically"],
    );
    toml_err(
        "[[racks]]\nname = \"a\"\n[[racks.nodes]]\ncpu_cores = 1\nmemory_gib = 1\n[[racks]]\nname = \"a\"\n[[racks.nodes]]\ncpu_cores = 1\nmemory_gib = 1\n",
        &["rack `a` is named twice"],
    );
    toml_err(
        "[[racks]]\nname = \"\"\n[[racks.nodes]]\ncpu_cores = 1\nmemory_gib = 1\n",
        &["racks[0].name is empty"],
    );
    toml_err(
        "[[racks]]\nname = \"r\\u202E1\"\n[[racks.nodes]]\ncpu_cores = 1\nmemory_gib = 1\n",
        &["racks[0].name", "contains U+202E (RIGHT-TO-LEFT OVERRIDE)"],
    );
    toml_err(
        "[[racks]]\n[[racks.nodes]]\ncpu_cores = 1\nmemory_gib = 1\nlabels = { zone = \"a\\u200B\" }\n",
        &["contains U+200B (ZERO WIDTH SPACE)"],
    );
    toml_err("[[racks]]\nname = \"a\"\n", &["rack `a` has no [[racks.nodes]] groups"]);
    toml_err("description = \"nothing\"\n", &["no nodes"]);
    toml_err("racks = 3\n", &["invalid type"]);
    let many: String = (0..65).map(|i| format!("l{i} = \"v\", ")).collect();
    toml_err(
        &format!(
            "[[racks]]\n[[racks.nodes]]\ncpu_cores = 1\nmemory_gib = 1\nlabels = {{ {} }}\n",
            many.trim_end_matches(", ")
        ),
        &["65 labels", "at most 64"],
    );
}

#[track_caller]
fn csv_err(body: &str, line: usize, needles: &[&str]) {
    let text = format!("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,0,\n{body}\n");
    let e = ClusterSpec::parse_alibaba(&text, "nodes.csv", &AlibabaNodeOptions::default())
        .expect_err("expected the node list to be refused");
    assert_eq!(e.line, line, "{e}");
    for n in needles {
        assert!(e.message.contains(n), "message {:?} lacks {n:?}", e.message);
    }
}

#[test]
fn malformed_node_lists_are_refused() {
    csv_err("n1,1000,1024,0", 3, &["expected 5 comma-separated fields", "found 4"]);
    csv_err("n1,many,1024,0,", 3, &["cpu_milli", "non-negative integer"]);
    csv_err("n1,1000,-1,0,", 3, &["memory_mib", "negative"]);
    csv_err("n1,0,1024,0,", 3, &["positive CPU and memory"]);
    csv_err("n1,1000,1024,99999999999,V100", 3, &["gpu", "too large"]);
    csv_err("n1,1000,1024,0,V100", 3, &["model is `V100` but gpu is 0"]);
    csv_err("n0,1000,1024,0,", 3, &["sn `n0` already appears on line 2"]);
    csv_err(",1000,1024,0,", 3, &["sn is empty"]);
    let e = ClusterSpec::parse_alibaba(
        "sn,cpu_milli,memory_mib,gpu\nn0,1,1,0\n",
        "n.csv",
        &AlibabaNodeOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.line, 1);
    assert!(e.message.contains("lacks column `model`"), "{e}");
    let e = ClusterSpec::parse_alibaba(
        "sn,cpu_milli,memory_mib,gpu,model\n",
        "n.csv",
        &AlibabaNodeOptions::default(),
    )
    .unwrap_err();
    assert!(e.message.contains("no nodes"), "{e}");
    let e = ClusterSpec::read(&local("examples/clusters/missing.toml")).unwrap_err();
    assert_eq!(e.line, 0);
}
