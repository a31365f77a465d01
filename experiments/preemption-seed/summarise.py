#!/usr/bin/env python3
"""Tables and plots of experiments/preemption-seed.

Usage: summarise.py RUNS_TXT CLUSTER_TOML PLOTS_DIR

RUNS_TXT has one line per run, `scenario|label|output directory` (a `gantry sim --out`).
Prints markdown tables for scenario (a) and (b); writes preemption-a.svg (A's and B's memory over
time per configuration) and copies each scenario (b) run's queues.svg to PLOTS_DIR.
"""

import csv
import json
import shutil
import sys
import textwrap
import tomllib
from pathlib import Path

GIB = 1 << 30

A_RUNS = [
    ("none-100", "no preemption, maxima 100 % / 100 %"),
    ("none-80-20", "no preemption, hard maxima A 80 % / B 20 %"),
    ("yarn", "preemption, YARN's defaults"),
    ("observe", "preemption, YARN's defaults, observe_only"),
    ("round-1", "preemption, no bound per round (1.0)"),
    ("all-at-once", "preemption, no bound per round, natural termination 1.0"),
]
B_RUNS = [
    ("none", "no preemption"),
    ("yarn", "preemption, YARN's defaults"),
    ("round-1", "preemption, no bound per round (1.0)"),
]
# Scenario (b): phases (start, end s), and the ideal shares by hand (A, B, C): one queue alone
# takes everything; A and B share by their guarantees 40 : 20; all three get their guarantees.
PHASES = [
    ("A alone", 0, 700, (1.0, 0.0, 0.0)),
    ("A and B", 700, 1500, (2 / 3, 1 / 3, 0.0)),
    ("A, B and C", 1500, 2400, (0.4, 0.2, 0.4)),
]
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def load(directory):
    d = Path(directory)
    summary = json.loads((d / "summary.json").read_text())
    with open(d / "jobs.csv", newline="") as f:
        jobs = list(csv.DictReader(f))
    series = {}
    with open(d / "queues.csv", newline="") as f:
        for row in csv.DictReader(f):
            series.setdefault(row["queue"], []).append({k: (v if k == "queue" else float(v)) for k, v in row.items()})
    return summary, jobs, series


def prose(text):
    print(textwrap.fill(text, width=100, break_on_hyphens=False))


def fmt(x, digits=1):
    return "–" if x is None else f"{x:,.{digits}f}"


def sec(x, digits=2):
    """Seconds, or '–' for never."""
    return "–" if x is None else f"{x:,.{digits}f} s"


def at(series, queue, t):
    """The sample of `queue` at time t (the first at or after it)."""
    return next(s for s in series[queue] if s["t_s"] >= t)


def scenario_a(runs, cluster_gib, plots):
    print("#### Scenario (a): B (20 %) fills the cluster, A (80 %) arrives at 400 s\n")
    print(
        "| configuration | A's first container | A at 90 % / 100 % of its guarantee | A's peak share "
        "| A completes | B completes at | memory utilisation | containers preempted "
        "| preempted / needed (GiB) | over-preemption (GiB) |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---|---:|")
    loaded = {}
    for label, title in A_RUNS:
        if label not in runs:
            continue
        summary, jobs, series = loaded[label] = load(runs[label])
        qa, qb = summary["queues"]["root.a"], summary["queues"]["root.b"]
        submit = qa["first_submit_s"]
        a = next(j for j in jobs if j["class"] == "a")
        b = next(j for j in jobs if j["class"] == "b")
        reached = qa["reached_guarantee_s"]["memory"]
        after = lambda t: None if t is None else t - submit  # noqa: E731
        peak = max(s["memory_used"] for s in series["root.a"])
        # What A needed taken back: its demand within its guarantee, less the free room, at arrival.
        s_a, s_b = at(series, "root.a", submit), at(series, "root.b", submit)
        free = max(0.0, 1.0 - s_a["memory_used"] - s_b["memory_used"])
        demand = s_a["memory_used"] + s_a["memory_pending"]
        needed = max(0.0, min(demand, s_a["memory_guaranteed"]) - s_a["memory_used"] - free) * cluster_gib
        preempted = (qa["preempted"]["memory_bytes"] + qb["preempted"]["memory_bytes"]) / GIB
        containers = qa["preempted_containers"] + qb["preempted_containers"]
        print(
            f"| {title} | {sec(float(a['wait_s']))} | {sec(after(reached['90']))} / {sec(after(reached['100']))} "
            f"| {peak * 100:.1f} % | {sec(float(a['completion_s']))} | {sec(float(b['end_s']))} "
            f"| {summary['utilisation']['memory'] * 100:.1f} % | {containers} "
            f"| {preempted:,.0f} / {needed:,.0f} | {max(0.0, preempted - needed):,.0f} |"
        )
    print()
    prose(
        "Times of A are from its submission (400 s); B completes at an absolute time. "
        "'–': never. The peak share is sampled every 5 s; the guarantee times are exact. Memory "
        "utilisation is the time-averaged allocated share until the last job ends."
    )
    if "observe" in runs and "none-100" in runs:
        same = all(
            (Path(runs["observe"]) / f).read_bytes() == (Path(runs["none-100"]) / f).read_bytes()
            for f in ("jobs.csv", "queues.csv", "timeseries.csv")
        )
        print()
        prose(
            f"observe_only against no preemption (maxima 100 %): jobs.csv, queues.csv and timeseries.csv "
            f"{'byte-identical' if same else 'DIFFER'}."
        )
        print()
    plot_a(loaded, plots / "preemption-a.svg")


def scenario_b(runs, plots):
    print("#### Scenario (b): A, B, C (40 / 20 / 40 %) arrive at 0, 700 and 1500 s\n")
    prose(
        "Held memory share per queue, time-averaged over the second half of each phase, against the "
        "ideal computed by hand and by the simulator (its mean over the same window); 'newcomer at "
        "50 % / 90 %': seconds from the phase's start until the queue that arrived then first holds "
        "half and 90 % of its ideal by hand (5 s samples; '–': not in the phase)."
    )
    print()
    print("| phase | ideal by hand A / B / C | simulator's ideal A / B / C | configuration | held A / B / C | newcomer at 50 % / 90 % |")
    print("|---|---|---|---|---|---|")
    data = {label: load(runs[label]) for label, _ in B_RUNS if label in runs}
    queues = ["root.a", "root.b", "root.c"]
    for k, (name, start, end, hand) in enumerate(PHASES):
        mid = (start + end) / 2
        for label, title in B_RUNS:
            if label not in data:
                continue
            _, _, series = data[label]
            window = lambda q: [s for s in series[q] if mid <= s["t_s"] < end]  # noqa: E731
            held = [sum(s["memory_used"] for s in window(q)) / max(1, len(window(q))) for q in queues]
            ideal = [sum(s["memory_ideal"] for s in window(q)) / max(1, len(window(q))) for q in queues]
            arrival = queues[k]
            reach = [
                next(
                    (s["t_s"] - start for s in series[arrival] if start <= s["t_s"] < end and s["memory_used"] >= f * hand[k]),
                    None,
                )
                for f in (0.5, 0.9)
            ]
            pct = lambda v: " / ".join(f"{x * 100:.1f}" for x in v)  # noqa: E731
            print(
                f"| {k + 1}: {name} ({start}–{end} s) | {pct(hand)} % | {pct(ideal)} % | {title} | {pct(held)} % "
                f"| {sec(reach[0], 0)} / {sec(reach[1], 0)} |"
            )
    print()
    print("| configuration | containers preempted from A / B / C |")
    print("|---|---|")
    for label, title in B_RUNS:
        if label not in data:
            continue
        q = data[label][0]["queues"]
        print(f"| {title} | {' / '.join(str(q[x]['preempted_containers']) for x in queues)} |")
        shutil.copyfile(Path(runs[label]) / "queues.svg", plots / f"preemption-b-{label}.svg")
    print()


PLOT_A_UNTIL_S = 2500


def plot_a(loaded, path):
    """A's and B's memory share over the first PLOT_A_UNTIL_S seconds, one line per configuration
    (observe_only is left out: it is no preemption, to the byte; under hard maxima B goes on at
    20 % until 6,000 s)."""
    w, h, pad = 720, 360, 50
    labels = [(label, title) for label, title in A_RUNS if label in loaded and label != "observe"]
    x_max = PLOT_A_UNTIL_S
    sx = lambda x: pad + x / x_max * (w - 2 * pad)  # noqa: E731
    sy = lambda y: h - pad - y * (h - 2 * pad)  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{2 * h}" viewBox="0 0 {w} {2 * h}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for p, (queue, title) in enumerate([
            ("root.a", f"Memory held by A (guaranteed 80 %), first {x_max} s"),
            ("root.b", f"Memory held by B (guaranteed 20 %), first {x_max} s"),
        ]):
        out.append(f'<g transform="translate(0 {p * h})">')
        out.append(f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>')
        out.append(f'<path d="M{pad},{pad} V{h - pad} H{w - pad}" stroke="black" fill="none"/>')
        for k in range(5):
            f = k / 4
            out.append(
                f'<text x="{sx(f * x_max):.1f}" y="{h - pad + 16}" text-anchor="middle">{f * x_max:.0f}</text>'
                f'<text x="{pad - 6}" y="{sy(f) + 4:.1f}" text-anchor="end">{f:.2f}</text>'
            )
        out.append(f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">time (s)</text>')
        out.append(
            f'<text x="14" y="{h / 2}" text-anchor="middle" transform="rotate(-90 14 {h / 2})">share of the cluster</text>'
        )
        for i, (label, name) in enumerate(labels):
            pts = [(f"{sx(s['t_s']):.1f}", f"{sy(s['memory_used']):.1f}") for s in loaded[label][2][queue] if s["t_s"] <= x_max]
            # Points inside a flat run add nothing to the line.
            kept = [p for k, p in enumerate(pts) if not (0 < k < len(pts) - 1 and pts[k - 1][1] == p[1] == pts[k + 1][1])]
            d = " L".join(f"{x},{y}" for x, y in kept)
            colour = COLOURS[i % len(COLOURS)]
            out.append(f'<path d="M{d}" stroke="{colour}" fill="none" stroke-width="1.5"/>')
            out.append(f'<text x="{w - pad - 330}" y="{pad + 14 * i}" fill="{colour}">{name}</text>')
        out.append("</g>")
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main():
    runs_txt, cluster_toml, plots = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    cluster = tomllib.loads(Path(cluster_toml).read_text())
    cluster_gib = sum(
        g.get("count", 1) * g["memory_gib"] for rack in cluster["racks"] for g in rack["nodes"]
    )
    runs = {"a": {}, "b": {}}
    for line in Path(runs_txt).read_text().splitlines():
        scenario, label, directory = line.split("|")
        runs[scenario][label] = directory
    scenario_a(runs["a"], cluster_gib, plots)
    scenario_b(runs["b"], plots)


if __name__ == "__main__":
    main()
