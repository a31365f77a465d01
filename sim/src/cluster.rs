//! Cluster descriptions: gantry's TOML (racks of node classes) and Alibaba's node list CSV,
//! both turned into the engine's [`gantry_engine::NodeSpec`]s.
//!
//! # gantry's TOML
//!
//! ```toml
//! description = "seed 002: one rack of GPU machines, three of plain ones"   # optional
//!
//! # Reusable node shapes (optional).
//! [classes.gpu]
//! cpu_cores = 4            # > 0; fractions allowed down to a millicore
//! memory_gib = 8           # > 0; fractions allowed
//! gpus = 1                 # default 0
//! gpu_model = "K80"        # optional; only with gpus > 0
//! gpu_memory_gib = 12      # optional, per GPU; 0 (unknown) if left out
//! labels = { tier = "big" } # optional, extra labels
//!
//! [[racks]]
//! name = "rack0"           # optional; default "rack<i>", i = position in the file
//! [[racks.nodes]]          # a group of identical nodes
//! class = "gpu"            # optional: start from a class ...
//! count = 4                # default 1
//! # ... and/or give (or override) any class field here: cpu_cores, memory_gib, gpus,
//! # gpu_model, gpu_memory_gib, labels (merged with the class's; the group's win)
//!
//! [[racks]]
//! [[racks.nodes]]
//! count = 6
//! cpu_cores = 2
//! memory_gib = 8
//! ```
//!
//! - Node names are `<rack>-n<i>`, `i` counting from 0 through the rack's groups in order, so
//!   the same file always gives the same names in the same order (racks in file order).
//! - Every node's rack is its rack's name.
//! - Labels added automatically (and so not allowed in `labels`): `gpu=true` on every node with
//!   GPUs, and `gpu_model=<model>` when its model is given — the labels trace selectors and
//!   preferences use (an Alibaba `gpu_spec`, a CMU GPU job's preference). GPU nodes with a model
//!   (or a GPU memory) also list their GPUs (index, model, memory), so plugins see the model.
//! - Refused, with the file and what was expected: unknown fields anywhere, a group naming an
//!   unknown class, sizes ≤ 0, a cpu size finer than a millicore, `gpu_model` without GPUs,
//!   counts of 0, duplicate rack names, duplicate node names, empty or over-long names and label
//!   keys (the engine's limits), more than the engine's 64 labels, and a cluster without nodes.
//!
//! # Alibaba's node list
//!
//! `openb_node_list_*.csv` (from the same trace as the pod lists): a header naming at least
//! `sn, cpu_milli, memory_mib, gpu, model`, then one node per line. A node is named `sn`, has
//! `cpu_milli` millicores, `memory_mib × 2^20` bytes and `gpu` whole GPUs of `model` (empty, or
//! `nan`, for CPU-only nodes), and gets the same automatic labels as above (`gpu=true`,
//! `gpu_model=<model>`). The list says nothing about racks: by default every node has the empty
//! rack (the engine's "unknown"), which is harmless for the Alibaba pods (none asks for rack
//! affinity); [`AlibabaNodeOptions::nodes_per_rack`] instead cuts the list, in file order, into
//! racks `rack0`, `rack1`, … of that many nodes — an invention, for experiments that need racks.

use gantry_engine::{GpuSpec, MAX_LABELS, NodeSpec, Resources};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The label every node with GPUs gets, `gpu=true`.
pub const GPU_LABEL: (&str, &str) = ("gpu", "true");
/// The label key of a GPU node's model.
pub const GPU_MODEL_LABEL: &str = "gpu_model";

/// A cluster description that cannot be used: where, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct ClusterError {
    /// The file.
    pub file: String,
    /// 1-based line (0: the file as a whole, or a problem that is not on one line).
    pub line: usize,
    /// What was wrong, and what was expected.
    pub message: String,
}

impl ClusterError {
    fn new(file: &str, line: usize, message: impl Into<String>) -> Self {
        ClusterError { file: file.to_owned(), line, message: message.into() }
    }
}

/// A cluster: its nodes, as the simulated agents register them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    /// What the file says it is.
    pub description: Option<String>,
    /// The nodes, in a deterministic order (file order).
    pub nodes: Vec<NodeSpec>,
}

/// How Alibaba node lists are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlibabaNodeOptions {
    /// Cut the list into racks of this many nodes (`None`: no racks).
    pub nodes_per_rack: Option<u32>,
}

impl ClusterSpec {
    /// Reads a cluster file: `.csv` as an Alibaba node list (default options), anything else as
    /// gantry's TOML.
    pub fn read(path: &Path) -> Result<Self, ClusterError> {
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
            Self::read_alibaba(path, &AlibabaNodeOptions::default())
        } else {
            Self::read_toml(path)
        }
    }

    /// Reads gantry's TOML cluster file.
    pub fn read_toml(path: &Path) -> Result<Self, ClusterError> {
        let text = read_text(path)?;
        Self::parse_toml(&text, &path.display().to_string())
    }

    /// Parses gantry's TOML cluster description; `file_name` is only used in errors.
    pub fn parse_toml(text: &str, file_name: &str) -> Result<Self, ClusterError> {
        let file: ClusterFile = toml::from_str(text).map_err(|e| {
            // The line of the error, and its text: toml's messages do not always name the key.
            let (line, source) = match e.span() {
                Some(s) => {
                    let start = s.start.min(text.len());
                    let line = text.get(..start).map_or(0, |t| t.matches('\n').count() + 1);
                    (line, text.lines().nth(line.saturating_sub(1)).unwrap_or("").trim())
                }
                None => (0, ""),
            };
            let at = if source.is_empty() { String::new() } else { format!(" (in `{source}`)") };
            ClusterError::new(
                file_name,
                line,
                format!("expected a gantry cluster description: {}{at}", e.message()),
            )
        })?;
        file.resolve(file_name)
    }

    /// Reads an Alibaba node list CSV.
    pub fn read_alibaba(path: &Path, opts: &AlibabaNodeOptions) -> Result<Self, ClusterError> {
        let text = read_text(path)?;
        Self::parse_alibaba(&text, &path.display().to_string(), opts)
    }

    /// Parses an Alibaba node list; `file_name` is only used in errors.
    pub fn parse_alibaba(
        text: &str,
        file_name: &str,
        opts: &AlibabaNodeOptions,
    ) -> Result<Self, ClusterError> {
        parse_alibaba(text, file_name, opts)
    }

    /// Rack names in order of first appearance (the empty rack included if a node has it).
    pub fn racks(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.nodes.iter().map(|n| n.rack.as_str()).filter(|r| seen.insert(*r)).collect()
    }

    /// The nodes with GPUs.
    pub fn gpu_nodes(&self) -> impl Iterator<Item = &NodeSpec> {
        self.nodes.iter().filter(|n| n.capacity.gpus > 0)
    }

    /// The sum of the nodes' capacities.
    pub fn total_capacity(&self) -> Resources {
        self.nodes.iter().fold(Resources::default(), |a, n| Resources {
            cpu_millis: a.cpu_millis.saturating_add(n.capacity.cpu_millis),
            memory_bytes: a.memory_bytes.saturating_add(n.capacity.memory_bytes),
            gpus: a.gpus.saturating_add(n.capacity.gpus),
            reserved: 0,
        })
    }
}

fn read_text(path: &Path) -> Result<String, ClusterError> {
    std::fs::read_to_string(path)
        .map_err(|e| ClusterError::new(&path.display().to_string(), 0, format!("cannot read the file: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    description: Option<String>,
    #[serde(default)]
    classes: BTreeMap<String, NodeShape>,
    #[serde(default)]
    racks: Vec<RackFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RackFile {
    name: Option<String>,
    #[serde(default)]
    nodes: Vec<GroupFile>,
}

/// The fields a class and a group share; everything optional so a group can override a class.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct NodeShape {
    cpu_cores: Option<f64>,
    memory_gib: Option<f64>,
    gpus: Option<u32>,
    gpu_model: Option<String>,
    gpu_memory_gib: Option<f64>,
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupFile {
    class: Option<String>,
    count: Option<u32>,
    cpu_cores: Option<f64>,
    memory_gib: Option<f64>,
    gpus: Option<u32>,
    gpu_model: Option<String>,
    gpu_memory_gib: Option<f64>,
    labels: Option<BTreeMap<String, String>>,
}

const GIB: f64 = (1u64 << 30) as f64;

impl ClusterFile {
    fn resolve(self, file: &str) -> Result<ClusterSpec, ClusterError> {
        let bad = |m: String| ClusterError::new(file, 0, m);
        let mut nodes = Vec::new();
        let mut rack_names = BTreeSet::new();
        for (ri, rack) in self.racks.iter().enumerate() {
            let rack_name = rack.name.clone().unwrap_or_else(|| format!("rack{ri}"));
            check_name(&format!("racks[{ri}].name"), &rack_name).map_err(bad)?;
            if !rack_names.insert(rack_name.clone()) {
                return Err(bad(format!("rack `{rack_name}` is named twice; expected unique rack names")));
            }
            if rack.nodes.is_empty() {
                return Err(bad(format!(
                    "rack `{rack_name}` has no [[racks.nodes]] groups; expected at least one"
                )));
            }
            let mut n = 0u64;
            for (gi, g) in rack.nodes.iter().enumerate() {
                let at = |m: String| bad(format!("rack `{rack_name}`, node group {gi}: {m}"));
                let class = match &g.class {
                    Some(c) => self.classes.get(c).cloned().ok_or_else(|| {
                        let known =
                            self.classes.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
                        at(format!("unknown class `{c}`; expected one of the [classes.*] tables ({known})"))
                    })?,
                    None => NodeShape::default(),
                };
                let mut labels = class.labels.unwrap_or_default();
                labels.extend(g.labels.clone().unwrap_or_default());
                let shape = Shape {
                    cpu_cores: g.cpu_cores.or(class.cpu_cores),
                    memory_gib: g.memory_gib.or(class.memory_gib),
                    gpus: g.gpus.or(class.gpus).unwrap_or(0),
                    gpu_model: g.gpu_model.clone().or(class.gpu_model),
                    gpu_memory_gib: g.gpu_memory_gib.or(class.gpu_memory_gib),
                    labels,
                };
                let count = g.count.unwrap_or(1);
                if count == 0 {
                    return Err(at("count is 0; expected at least 1 node".into()));
                }
                let template = shape.node(&rack_name).map_err(at)?;
                for _ in 0..count {
                    let mut node = template.clone();
                    node.name = format!("{rack_name}-n{n}");
                    n += 1;
                    nodes.push(node);
                }
            }
        }
        finish(file, self.description, nodes)
    }
}

/// A node group with its class applied.
struct Shape {
    cpu_cores: Option<f64>,
    memory_gib: Option<f64>,
    gpus: u32,
    gpu_model: Option<String>,
    gpu_memory_gib: Option<f64>,
    labels: BTreeMap<String, String>,
}

impl Shape {
    /// The node this shape describes (named later).
    fn node(&self, rack: &str) -> Result<NodeSpec, String> {
        let cores = self.cpu_cores.ok_or("cpu_cores is missing; expected it here or in the class")?;
        let gib = self.memory_gib.ok_or("memory_gib is missing; expected it here or in the class")?;
        if !(cores.is_finite() && cores > 0.0) {
            return Err(format!("cpu_cores is {cores}; expected a positive number"));
        }
        let millis = cores * 1000.0;
        if (millis - millis.round()).abs() > 1e-6 || millis.round() < 1.0 {
            return Err(format!(
                "cpu_cores {cores} is not a whole number of millicores; expected a multiple of 0.001"
            ));
        }
        if !(gib.is_finite() && gib > 0.0) {
            return Err(format!("memory_gib is {gib}; expected a positive number"));
        }
        let memory_bytes = (gib * GIB).round();
        if memory_bytes >= u64::MAX as f64 {
            return Err(format!("memory_gib {gib} is too large"));
        }
        let gpu_memory_bytes = match self.gpu_memory_gib {
            Some(g) if !(g.is_finite() && g > 0.0) => {
                return Err(format!("gpu_memory_gib is {g}; expected a positive number"));
            }
            Some(g) if g * GIB >= u64::MAX as f64 => return Err(format!("gpu_memory_gib {g} is too large")),
            Some(g) => (g * GIB).round() as u64,
            None => 0,
        };
        if self.gpus == 0 && self.gpu_model.is_some() {
            return Err("gpu_model is set but gpus is 0; expected gpus > 0 for a GPU model".into());
        }
        if self.gpus == 0 && self.gpu_memory_gib.is_some() {
            return Err("gpu_memory_gib is set but gpus is 0; expected gpus > 0".into());
        }
        let labels: Vec<(String, String)> = self.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        gpu_node(
            String::new(),
            rack.to_owned(),
            Resources {
                cpu_millis: millis.round() as u64,
                memory_bytes: memory_bytes as u64,
                gpus: self.gpus,
                reserved: 0,
            },
            self.gpu_model.as_deref(),
            gpu_memory_bytes,
            labels,
        )
    }
}

/// A node with its automatic GPU labels and GPU list; refuses labels that clash with them.
fn gpu_node(
    name: String,
    rack: String,
    capacity: Resources,
    gpu_model: Option<&str>,
    gpu_memory_bytes: u64,
    mut labels: Vec<(String, String)>,
) -> Result<NodeSpec, String> {
    for (k, _) in &labels {
        if k == GPU_LABEL.0 || k == GPU_MODEL_LABEL {
            return Err(format!(
                "label `{k}` is set automatically from gpus and gpu_model; expected it not to be given in labels"
            ));
        }
    }
    let mut gpu_list = Vec::new();
    if capacity.gpus > 0 {
        labels.push((GPU_LABEL.0.to_owned(), GPU_LABEL.1.to_owned()));
        if let Some(model) = gpu_model {
            if model.is_empty() || model.contains('|') || model.chars().any(char::is_whitespace) {
                return Err(format!(
                    "gpu_model {model:?}: expected a non-empty model name without `|` or whitespace"
                ));
            }
            labels.push((GPU_MODEL_LABEL.to_owned(), model.to_owned()));
        }
        // Listed GPUs carry what is known about them; with neither model nor memory known they
        // stay anonymous (the engine's default for an empty list).
        if gpu_model.is_some() || gpu_memory_bytes > 0 {
            gpu_list = (0..capacity.gpus)
                .map(|index| GpuSpec {
                    index,
                    model: gpu_model.unwrap_or_default().to_owned(),
                    memory_bytes: gpu_memory_bytes,
                })
                .collect();
        }
    }
    if labels.len() > MAX_LABELS {
        return Err(format!("{} labels; expected at most {MAX_LABELS}", labels.len()));
    }
    for (k, v) in &labels {
        check_name("label key", k)?;
        crate::trace::check_name(&format!("the value of label {k:?}"), v, true)?;
    }
    Ok(NodeSpec { name, rack, labels, capacity, gpu_list })
}

/// The engine's rule for names, non-empty.
fn check_name(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} is empty; expected a name"));
    }
    crate::trace::check_name(what, s, false)
}

/// Checks what applies to the whole cluster: some nodes, unique names.
fn finish(
    file: &str,
    description: Option<String>,
    nodes: Vec<NodeSpec>,
) -> Result<ClusterSpec, ClusterError> {
    if nodes.is_empty() {
        return Err(ClusterError::new(file, 0, "the cluster has no nodes; expected at least one"));
    }
    let mut names = BTreeSet::new();
    for n in &nodes {
        check_name("node name", &n.name).map_err(|m| ClusterError::new(file, 0, m))?;
        if !names.insert(n.name.as_str()) {
            return Err(ClusterError::new(
                file,
                0,
                format!("node `{}` appears twice; expected unique node names", n.name),
            ));
        }
    }
    Ok(ClusterSpec { description, nodes })
}

const ALIBABA_COLUMNS: [&str; 5] = ["sn", "cpu_milli", "memory_mib", "gpu", "model"];

fn parse_alibaba(text: &str, file: &str, opts: &AlibabaNodeOptions) -> Result<ClusterSpec, ClusterError> {
    if opts.nodes_per_rack == Some(0) {
        return Err(ClusterError::new(file, 0, "nodes_per_rack is 0; expected at least 1"));
    }
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((hi, header)) = lines.next() else {
        return Err(ClusterError::new(
            file,
            1,
            format!("expected a header naming {}; the file is empty", ALIBABA_COLUMNS.join(",")),
        ));
    };
    let header_fields = crate::trace::split_csv(header).map_err(|m| ClusterError::new(file, hi + 1, m))?;
    let mut idx = [0usize; 5];
    for (slot, col) in idx.iter_mut().zip(ALIBABA_COLUMNS) {
        let hits: Vec<usize> =
            header_fields.iter().enumerate().filter(|(_, h)| **h == col).map(|(i, _)| i).collect();
        match hits.as_slice() {
            [i] => *slot = *i,
            [] => {
                return Err(ClusterError::new(
                    file,
                    hi + 1,
                    format!(
                        "the header lacks column `{col}`; expected a header naming {}",
                        ALIBABA_COLUMNS.join(",")
                    ),
                ));
            }
            _ => {
                return Err(ClusterError::new(
                    file,
                    hi + 1,
                    format!("the header names column `{col}` twice"),
                ));
            }
        }
    }
    let [c_sn, c_cpu, c_mem, c_gpu, c_model] = idx;
    let mut nodes = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, line) in lines {
        let lineno = i + 1;
        let at = |m: String| ClusterError::new(file, lineno, m);
        let f = crate::trace::split_csv(line).map_err(at)?;
        if f.len() != header_fields.len() {
            return Err(at(format!(
                "expected {} comma-separated fields (as many as the header), found {}",
                header_fields.len(),
                f.len()
            )));
        }
        let cpu_millis = crate::trace::parse_u64("cpu_milli", f[c_cpu]).map_err(at)?;
        let memory_mib = crate::trace::parse_u64("memory_mib", f[c_mem]).map_err(at)?;
        let gpus = crate::trace::parse_u32("gpu", f[c_gpu]).map_err(at)?;
        if cpu_millis == 0 || memory_mib == 0 {
            return Err(at(format!(
                "cpu_milli {cpu_millis}, memory_mib {memory_mib}: expected a node with positive CPU and memory"
            )));
        }
        let memory_bytes = memory_mib
            .checked_mul(1 << 20)
            .ok_or_else(|| at(format!("memory_mib {memory_mib} is too large to count in bytes")))?;
        let model = match f[c_model] {
            "" | "nan" => None,
            m => Some(m),
        };
        if gpus == 0 && model.is_some() {
            return Err(at(format!(
                "model is `{}` but gpu is 0; expected no model for a node without GPUs",
                f[c_model]
            )));
        }
        let rack = match opts.nodes_per_rack {
            Some(per) => format!("rack{}", nodes.len() / per as usize),
            None => String::new(),
        };
        let name = f[c_sn].to_owned();
        check_name("sn", &name).map_err(at)?;
        if let Some(first) = seen.insert(name.clone(), lineno) {
            return Err(at(format!(
                "sn `{name}` already appears on line {first}; expected unique node names"
            )));
        }
        let node = gpu_node(
            name,
            rack,
            Resources { cpu_millis, memory_bytes, gpus, reserved: 0 },
            model,
            0,
            Vec::new(),
        )
        .map_err(at)?;
        nodes.push(node);
    }
    finish(file, None, nodes)
}
