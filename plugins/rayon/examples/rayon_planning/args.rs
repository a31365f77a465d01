//! The experiment's command line (see the module documentation of `main.rs`).

use std::path::PathBuf;
use std::time::Duration;

use gantry_sdk::units::{Fraction, QuantityError, Reading, parse_quantity};

use crate::{GIB, HOUR_MS, Res};

/// Command-line settings (see the module documentation).
pub struct Args {
    pub trace: PathBuf,
    pub nodes: u64,
    pub node_cores: u64,
    pub node_mem: u64,
    pub plan_share: f64,
    pub deadline_share: f64,
    pub slack: (f64, f64),
    pub max_parallel: u32,
    pub lease: bool,
    pub seed: u64,
    pub step_ms: u64,
    pub milp_hour: Option<u64>,
    pub milp_n: usize,
    pub milp_time_limit: Duration,
    pub milp_cells: usize,
    pub milp_slot: Option<usize>,
    pub loss_at_ms: u64,
    pub loss_share: f64,
    pub out: Option<PathBuf>,
    pub json: Option<PathBuf>,
}

const USAGE: &str = "usage: rayon_planning --trace FILE [--nodes 100] [--node-cpu 8] [--node-mem 16GiB] \
[--plan-share 0.7] [--deadline-share 0.3] [--slack 2..3] [--max-parallel 200] [--lease task|none] [--seed 1] [--step-ms 1000] \
[--milp-hour H] [--milp-n 25] [--milp-time-limit 20s] [--milp-cells 1500] [--milp-slot STEPS] [--loss-at 12h] \
[--loss-share 0.05] [--out DIR] [--json FILE]";

pub fn parse_args() -> Res<Args> {
    let mut a = Args {
        trace: PathBuf::new(),
        nodes: 100,
        node_cores: 8,
        node_mem: 16 * GIB,
        plan_share: 0.7,
        deadline_share: 0.3,
        slack: (2.0, 3.0),
        max_parallel: 200,
        lease: true,
        seed: 1,
        step_ms: 1000,
        milp_hour: None,
        milp_n: 25,
        milp_time_limit: Duration::from_secs(20),
        milp_cells: 1500,
        milp_slot: None,
        loss_at_ms: 12 * HOUR_MS,
        loss_share: 0.05,
        out: None,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |what: &str| format!("{flag} {v}: expected {what}");
        match flag.as_str() {
            "--trace" => a.trace = PathBuf::from(&v),
            "--nodes" => a.nodes = v.parse().map_err(|_| bad("a count"))?,
            "--node-cpu" => a.node_cores = v.parse().map_err(|_| bad("cores"))?,
            "--node-mem" => a.node_mem = parse_bytes(&v).map_err(|e| format!("{flag}: {e}"))?,
            "--plan-share" => a.plan_share = parse_share(&v).ok_or_else(|| bad("a share in (0, 1]"))?,
            "--deadline-share" => {
                a.deadline_share = parse_share(&v).ok_or_else(|| bad("a share in (0, 1]"))?
            }
            "--slack" => a.slack = parse_range(&v).ok_or_else(|| bad("LO..HI or one number, at least 1"))?,
            "--max-parallel" => {
                a.max_parallel = v.parse().ok().filter(|&h| h > 0).ok_or_else(|| bad("a count"))?
            }
            "--lease" => {
                a.lease = match v.as_str() {
                    "task" => true,
                    "none" => false,
                    _ => return Err(bad("task or none").into()),
                }
            }
            "--seed" => a.seed = v.parse().map_err(|_| bad("an integer"))?,
            "--step-ms" => {
                a.step_ms = v.parse().ok().filter(|&s| s > 0).ok_or_else(|| bad("milliseconds"))?
            }
            "--milp-hour" => a.milp_hour = Some(v.parse().map_err(|_| bad("an hour"))?),
            "--milp-n" => a.milp_n = v.parse().map_err(|_| bad("a count"))?,
            "--milp-time-limit" => {
                a.milp_time_limit = Duration::from_millis(parse_ms(&v).map_err(|e| format!("{flag}: {e}"))?)
            }
            "--milp-cells" => a.milp_cells = v.parse().map_err(|_| bad("a count"))?,
            "--milp-slot" => {
                a.milp_slot = Some(v.parse().ok().filter(|&s| s > 0).ok_or_else(|| bad("steps"))?)
            }
            "--loss-at" => a.loss_at_ms = parse_ms(&v).map_err(|e| format!("{flag}: {e}"))?,
            "--loss-share" => a.loss_share = parse_share(&v).ok_or_else(|| bad("a share in (0, 1]"))?,
            "--out" => a.out = Some(PathBuf::from(&v)),
            "--json" => a.json = Some(PathBuf::from(&v)),
            _ => return Err(format!("unknown option {flag}\n{USAGE}").into()),
        }
    }
    if a.trace.as_os_str().is_empty() {
        return Err(format!("--trace is required\n{USAGE}").into());
    }
    Ok(a)
}

fn parse_share(v: &str) -> Option<f64> {
    v.parse::<f64>().ok().filter(|x| *x > 0.0 && *x <= 1.0)
}

fn parse_range(v: &str) -> Option<(f64, f64)> {
    let (lo, hi) = match v.split_once("..") {
        Some((lo, hi)) => (lo.parse::<f64>().ok()?, hi.parse::<f64>().ok()?),
        None => {
            let x = v.parse::<f64>().ok()?;
            (x, x)
        }
    };
    (lo >= 1.0 && hi >= lo && hi.is_finite()).then_some((lo, hi))
}

/// `16GiB`, `16G`, `512MiB`, or bytes: the SDK's grammar, a bare number being bytes, more than 0.
fn parse_bytes(v: &str) -> Result<u64, QuantityError> {
    let reading =
        Reading { bare: Some(1), fraction: Fraction::Down, lenient: true, min: 1, ..Reading::MEMORY };
    parse_quantity(v, &reading)
}

/// `12h`, `30m`, `20s`, `500ms`, or milliseconds: the SDK's grammar, a bare number being ms.
fn parse_ms(v: &str) -> Result<u64, QuantityError> {
    let reading = Reading { bare: Some(1), fraction: Fraction::Down, lenient: true, ..Reading::DURATION };
    parse_quantity(v, &reading)
}
