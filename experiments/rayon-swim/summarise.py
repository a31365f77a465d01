#!/usr/bin/env python3
"""Tables of experiments/rayon-swim: reads runs.txt (table|cluster|label|seed|dir per line) and
each run's deadlines.json (sim/src/deadlines.rs); prints markdown tables, means over the seeds
(with the range over the seeds where there are several)."""
import json
import re
import sys
from collections import OrderedDict

CLUSTERS = {"cluster": "20 nodes x 4 cores / 8 GiB",
            "cluster-busy": "20 nodes x 2 cores / 4 GiB (busy)"}
TITLES = {"main": "Main: fast preemption",
          "preemption": "YARN's preemption defaults (seed 1)",
          "margin": "Reservation window ending 1 s before the deadline (fast preemption, seed 1)",
          "quarter": "25 % of the nodes lost at 43,200 s (fast preemption, seed 1)"}


def load(path):
    runs = OrderedDict()
    with open(path) as f:
        for line in f:
            table, cluster, label, seed, d = line.rstrip("\n").split("|")
            with open(f"{d}/deadlines.json") as s:
                runs.setdefault((table, cluster, label), []).append(json.load(s))
    return runs


def pct(xs):
    m = 100 * sum(xs) / len(xs)
    if len(xs) > 1 and max(xs) != min(xs):
        return f"{m:.1f} ({100 * min(xs):.1f}–{100 * max(xs):.1f})"
    return f"{m:.1f}"


def mean(xs, fmt="{:,.0f}"):
    return fmt.format(sum(xs) / len(xs))


def row(label, rs, reservations):
    col = lambda k: [r[k] for r in rs]
    def kept_share(r):
        return r["kept_met"] / r["kept"] if r["kept"] else 0.0
    if reservations:
        acc = f"{pct(col('accepted_share'))} ({mean(col('admitted'))} of {mean(col('deadline_jobs'))})"
        met = pct(col("admitted_met_share"))
        kept = pct([kept_share(r) for r in rs])
        replans = f"{mean(col('replan_moved'), '{:.1f}')} / {mean(col('replan_removed'), '{:.1f}')}"
    else:
        acc, met, kept, replans = "–", "–", "–", "–"
    return (f"| {label} | {acc} | {met} | {kept} | {pct(col('deadline_met_share'))} | "
            f"{mean(col('best_effort_mean_s'), '{:,.1f}')} / {mean(col('best_effort_p95_s'), '{:,.0f}')} | "
            f"{mean([100 * x for x in col('cpu_utilisation')], '{:.1f}')} % | {mean(col('preemptions'))} | {replans} |")


HEADER = ("| configuration | accepted (of deadline jobs) | accepted that met the deadline % | "
          "kept (not removed by a replan) that met it % | all deadline jobs that met it % | "
          "best-effort completion mean / p95 (s) | CPU used | preemptions | replans: moved / removed |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def main():
    runs = load(sys.argv[1])
    tables = OrderedDict()
    for (table, cluster, label), rs in runs.items():
        tables.setdefault((table, cluster), []).append((label, rs))
    for (table, cluster), rows in tables.items():
        if table == "loss-times":
            continue
        seeds = len(rows[0][1])
        title = TITLES.get(table, table)
        suffix = f", mean of {seeds} seeds" if seeds > 1 else ""
        print(f"#### {title} — {CLUSTERS.get(cluster, cluster)}{suffix}\n")
        print(HEADER)
        for label, rs in rows:
            print(row(label, rs, not label.startswith("baseline")))
        print()
    losses = [(label, rs[0]) for (t, _, label), rs in runs.items() if t == "loss-times"]
    if losses:
        print("#### One node (5 %) lost at other times — GREE, fast preemption, 20 x 4 cores, seed 1\n")
        print("| node lost at | Rayon: moved / removed | Rayon: accepted met % | Rayon: kept met % | "
              "YARN: moved / removed | YARN: accepted met % | YARN: kept met % |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        by_hour = OrderedDict()
        for label, r in losses:
            m = re.search(r"(rayon|yarn) replanner, node lost at (\d+) h", label)
            if m:
                by_hour.setdefault(int(m.group(2)), {})[m.group(1)] = r
        tot = {"rayon": [0, 0], "yarn": [0, 0]}
        for h, rr in by_hour.items():
            cells = []
            for k in ("rayon", "yarn"):
                r = rr.get(k)
                if r is None:
                    cells += ["–"] * 3
                    continue
                tot[k][0] += r["replan_moved"]
                tot[k][1] += r["replan_removed"]
                kept = 100 * r["kept_met"] / r["kept"] if r["kept"] else 0.0
                cells += [f"{r['replan_moved']} / {r['replan_removed']}",
                          f"{100 * r['admitted_met_share']:.2f}", f"{kept:.2f}"]
            print(f"| {h} h | " + " | ".join(cells) + " |")
        print(f"| all | {tot['rayon'][0]} / {tot['rayon'][1]} | | | {tot['yarn'][0]} / {tot['yarn'][1]} | | |")
        print()


if __name__ == "__main__":
    main()
