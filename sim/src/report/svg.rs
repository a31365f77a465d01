//! The plots, as hand-written SVG: `utilisation.svg`, `completion_cdf.svg`, `nodes.svg`,
//! `queues.svg`, and the stacked line plots other programs draw in the same style.

use super::secs;
use crate::sim::{JobOutcome, SimResult};
use std::fmt::Write as _;

const W: f64 = 720.0;
const H: f64 = 360.0;
const PAD: f64 = 50.0;

/// One line of a plot: its name, its colour, its points (x, y).
pub type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// One panel of [`stacked_plots`]: title, x label, y label, y maximum, lines.
pub type Panel<'a> = (&'a str, &'a str, &'a str, f64, Vec<Series<'a>>);

/// Line plots one above the other in one SVG document (the simulator's plot style, for
/// programs that plot their own figures, such as the Rayon planning example).
pub fn stacked_plots(panels: &[Panel<'_>]) -> String {
    let mut svg = svg_start(H * panels.len().max(1) as f64);
    for (k, (title, x_label, y_label, y_max, series)) in panels.iter().enumerate() {
        panel(&mut svg, H * k as f64, title, x_label, y_label, *y_max, series);
    }
    svg.push_str("</svg>\n");
    svg
}

/// A line plot of `series` with y in 0..=`y_max`.
pub(crate) fn line_plot(
    title: &str,
    x_label: &str,
    y_label: &str,
    y_max: f64,
    series: &[Series<'_>],
) -> String {
    let mut svg = svg_start(H);
    panel(&mut svg, 0.0, title, x_label, y_label, y_max, series);
    svg.push_str("</svg>\n");
    svg
}

/// The opening of an SVG document `height` high (width `W`), white background.
fn svg_start(height: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" viewBox=\"0 0 {W} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    )
}

/// One plot (`W` × `H`: title, axes, ticks at quarters, legend, lines) whose top is `y0` pixels
/// down the document.
fn panel(
    svg: &mut String,
    y0: f64,
    title: &str,
    x_label: &str,
    y_label: &str,
    y_max: f64,
    series: &[Series<'_>],
) {
    let x_max = series.iter().flat_map(|s| s.2.iter().map(|p| p.0)).fold(0.0_f64, f64::max).max(1e-9);
    let sx = |x: f64| PAD + x / x_max * (W - 2.0 * PAD);
    let sy = |y: f64| H - PAD - y / y_max.max(1e-9) * (H - 2.0 * PAD);
    let _ = writeln!(svg, "<g transform=\"translate(0 {y0})\">");
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{}</text>",
        W / 2.0,
        xml(title)
    );
    // Axes, ticks at quarters.
    let _ = writeln!(
        svg,
        "<path d=\"M{PAD},{} V{} H{}\" stroke=\"black\" fill=\"none\"/>",
        PAD,
        H - PAD,
        W - PAD
    );
    for k in 0..=4 {
        let f = f64::from(k) / 4.0;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            sx(f * x_max),
            H - PAD + 16.0,
            short(f * x_max),
            PAD - 6.0,
            sy(f * y_max) + 4.0,
            short(f * y_max)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>",
        W / 2.0,
        H - 12.0,
        xml(x_label),
        H / 2.0,
        H / 2.0,
        xml(y_label)
    );
    for (i, (name, colour, points)) in series.iter().enumerate() {
        // Pixels to a tenth; a point inside a flat run (the same height as both neighbours)
        // adds nothing to the line and is left out, which keeps step-like series small.
        let pixels: Vec<(String, String)> =
            points.iter().map(|(x, y)| (format!("{:.1}", sx(*x)), format!("{:.1}", sy(*y)))).collect();
        let mut d = String::new();
        for (k, (x, y)) in pixels.iter().enumerate() {
            let flat = k > 0 && k + 1 < pixels.len() && pixels[k - 1].1 == *y && pixels[k + 1].1 == *y;
            if !flat {
                let _ = write!(d, "{}{x},{y}", if d.is_empty() { "M" } else { " L" });
            }
        }
        let _ = writeln!(svg, "<path d=\"{d}\" stroke=\"{colour}\" fill=\"none\" stroke-width=\"1.5\"/>");
        let ly = PAD + 14.0 * i as f64;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{ly:.1}\" fill=\"{colour}\">{}</text>",
            W - PAD - 100.0,
            xml(name)
        );
    }
    svg.push_str("</g>\n");
}

fn short(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `utilisation.svg`: allocated share of each resource over time.
pub fn utilisation_svg(result: &SimResult) -> String {
    let pick = |f: fn(&crate::sim::Sample) -> f64| -> Vec<(f64, f64)> {
        result.samples.iter().map(|s| (secs(s.t_ms), f(s))).collect()
    };
    let mut series = vec![("CPU", "#1f77b4", pick(|s| s.cpu)), ("memory", "#2ca02c", pick(|s| s.memory))];
    if result.samples.iter().any(|s| s.gpus > 0.0) {
        series.push(("GPUs", "#d62728", pick(|s| s.gpus)));
    }
    line_plot("Allocated share over time", "time (s)", "allocated share", 1.0, &series)
}

/// `completion_cdf.svg`: the share of completed jobs that completed within each time.
pub fn completion_cdf_svg(result: &SimResult) -> String {
    let mut times: Vec<f64> = result
        .jobs
        .iter()
        .filter(|j| j.outcome == JobOutcome::Completed)
        .filter_map(|j| j.completion_ms())
        .map(secs)
        .collect();
    times.sort_by(f64::total_cmp);
    let n = times.len().max(1) as f64;
    let points: Vec<(f64, f64)> = times.iter().enumerate().map(|(i, t)| (*t, (i + 1) as f64 / n)).collect();
    line_plot(
        "Completion time CDF",
        "completion time (s)",
        "share of completed jobs",
        1.0,
        &[("jobs", "#1f77b4", points)],
    )
}

/// `nodes.svg`: above, nodes registered and billed (registered or booting) over time; below, the
/// allocated share of the registered nodes' CPU and memory (GPUs if any) and of the pool's CPU.
pub fn nodes_svg(result: &SimResult) -> String {
    let pick = |f: fn(&crate::sim::Sample) -> f64| -> Vec<(f64, f64)> {
        result.samples.iter().map(|s| (secs(s.t_ms), f(s))).collect()
    };
    let y_max = result
        .elastic
        .as_ref()
        .map(|e| e.max_nodes as f64)
        .unwrap_or_else(|| result.samples.iter().map(|s| f64::from(s.nodes)).fold(1.0, f64::max));
    let counts = [
        ("billed", "#ff7f0e", pick(|s| f64::from(s.nodes + s.booting))),
        ("registered", "#1f77b4", pick(|s| f64::from(s.nodes))),
    ];
    let mut shares = vec![
        ("CPU", "#1f77b4", pick(|s| s.cpu_registered)),
        ("memory", "#2ca02c", pick(|s| s.memory_registered)),
    ];
    if result.samples.iter().any(|s| s.gpus_registered > 0.0) {
        shares.push(("GPUs", "#d62728", pick(|s| s.gpus_registered)));
    }
    shares.push(("CPU of the pool", "#7f7f7f", pick(|s| s.cpu)));
    let mut svg = svg_start(2.0 * H);
    panel(&mut svg, 0.0, "Nodes over time", "time (s)", "nodes", y_max, &counts);
    panel(
        &mut svg,
        H,
        "Allocated share of the registered nodes",
        "time (s)",
        "allocated share",
        1.0,
        &shares,
    );
    svg.push_str("</svg>\n");
    svg
}

/// Leaf queues with a panel of their own in `queues.svg`; the overview shows them all.
pub const QUEUE_PANELS: usize = 8;

const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf",
];

/// `queues.svg`: above, the memory each leaf queue holds; then, for the first [`QUEUE_PANELS`]
/// leaves, one panel each: memory held, ideal, guaranteed and pending (cut at 1), and CPU held.
pub fn queues_svg(result: &SimResult) -> String {
    let q = &result.queues;
    let pick = |leaf: usize, f: fn(&crate::queues::QueueSample) -> f64| -> Vec<(f64, f64)> {
        q.samples.iter().filter(|s| s.leaf == leaf).map(|s| (secs(s.t_ms), f(s))).collect()
    };
    let overview: Vec<Series<'_>> = q
        .leaves
        .iter()
        .enumerate()
        .map(|(k, l)| (l.path.as_str(), PALETTE[k % PALETTE.len()], pick(k, |s| s.used.memory)))
        .collect();
    let panels = q.leaves.len().min(QUEUE_PANELS);
    let mut svg = svg_start(H * (1 + panels) as f64);
    panel(
        &mut svg,
        0.0,
        "Memory held by each leaf queue",
        "time (s)",
        "share of the cluster",
        1.0,
        &overview,
    );
    for (k, l) in q.leaves.iter().enumerate().take(panels) {
        let series = [
            ("memory held", "#1f77b4", pick(k, |s| s.used.memory)),
            ("ideal", "#2ca02c", pick(k, |s| s.ideal.memory)),
            ("guaranteed", "#7f7f7f", pick(k, |s| s.guaranteed.memory)),
            ("pending (cut at 1)", "#ff7f0e", pick(k, |s| s.pending.memory.min(1.0))),
            ("CPU held", "#9467bd", pick(k, |s| s.used.cpu)),
        ];
        let title = format!("{}: memory (guaranteed {:.0} %)", l.path, l.guaranteed * 100.0);
        panel(&mut svg, H * (1 + k) as f64, &title, "time (s)", "share of the cluster", 1.0, &series);
    }
    svg.push_str("</svg>\n");
    svg
}
