//! The experiment's skyline: per minute, the plan's capacity and the cores each plan holds.

use std::fmt::Write as _;

use gantry_rayon::plan::Plan;
use gantry_sim::report::{Series, stacked_plots};

const HOUR_MS: u64 = 3_600_000;
const MINUTE_MS: u64 = 60_000;

/// Per minute: the plan's capacity before and after the loss, and each plan's cores held (mean
/// and peak over the minute's steps); and the SVG of the means.
pub fn skyline(
    empty: &Plan,
    series: &[(String, &Plan)],
    loss_step: usize,
    step_ms: u64,
    loss_share: f64,
) -> (String, String) {
    let per_min = (MINUTE_MS / step_ms).max(1) as usize;
    let minutes = empty.steps().div_ceil(per_min);
    let cores = |v: Option<[i64; 3]>| v.map_or(0.0, |v| v[0] as f64 / 1000.0);
    let mut csv = String::from("minute,capacity_cores,capacity_after_loss_cores");
    for (name, _) in series {
        let n = name.replace([' ', ',', '(', ')'], "_").replace("__", "_");
        let _ = write!(csv, ",{n}_mean_cores,{n}_peak_cores");
    }
    csv.push('\n');
    let cap = cores(empty.capacity_at(0));
    let after = cap * (1.0 - loss_share);
    let mut lines: Vec<Vec<(f64, f64)>> = vec![Vec::with_capacity(minutes); series.len() + 2];
    for m in 0..minutes {
        let (lo, hi) = (m * per_min, ((m + 1) * per_min).min(empty.steps()));
        let cap_after = if lo >= loss_step { after } else { cap };
        let _ = write!(csv, "{m},{cap:.3},{cap_after:.3}");
        let x = (m * per_min) as f64 * step_ms as f64 / HOUR_MS as f64;
        lines[0].push((x, cap));
        lines[1].push((x, cap_after));
        for (k, (_, plan)) in series.iter().enumerate() {
            let (mut sum, mut peak) = (0.0, 0.0f64);
            for i in lo..hi {
                let c = cores(plan.used_at(i));
                sum += c;
                peak = peak.max(c);
            }
            let mean = sum / (hi - lo).max(1) as f64;
            let _ = write!(csv, ",{mean:.3},{peak:.3}");
            lines[k + 2].push((x, mean));
        }
        csv.push('\n');
    }
    // Panel 1: capacity and the two agents' plans; panel 2: after the loss.
    let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
    let mut p1: Vec<Series<'_>> = vec![("plan capacity", "black", lines[0].clone())];
    for (k, (name, _)) in series.iter().enumerate().take(2) {
        p1.push((name, colours[k], lines[k + 2].clone()));
    }
    let mut p2: Vec<Series<'_>> = vec![("capacity after loss", "black", lines[1].clone())];
    for (k, (name, _)) in series.iter().enumerate().skip(2) {
        p2.push((name, colours[k], lines[k + 2].clone()));
    }
    let y_max = cap * 1.05;
    let svg = stacked_plots(&[
        ("Cores held by reservations (per-minute mean)", "hours", "cores", y_max, p1),
        ("After the capacity loss (per-minute mean)", "hours", "cores", y_max, p2),
    ]);
    (csv, svg)
}
