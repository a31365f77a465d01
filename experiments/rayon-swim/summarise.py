#!/usr/bin/env python3
"""Tables of experiments/rayon-swim: reads runs.txt (table|cluster|label|seed|dir per line) and
each run's deadlines.json (sim/src/deadlines.rs); prints markdown tables, means over the seeds
(with the range over the seeds where there are several)."""
import csv
import json
import re
import sys
from collections import OrderedDict

CLUSTERS = {"cluster": "20 nodes x 4 cores / 8 GiB",
            "cluster-busy": "20 nodes x 2 cores / 4 GiB (busy)"}
TITLES = {"main": "Main: fast preemption, guarantees enforced 3 s ahead",
          "exactly": "Fast preemption, the plan followed exactly (no enforcement ahead)",
          "preemption": "YARN's preemption defaults (seed 1)",
          "margin": "Reservation window ending 1 s before the deadline (fast preemption, enforced 3 s ahead, seed 1)",
          "lead": "Reservations submitted 6 h before their jobs arrive (fast preemption, enforced 3 s ahead, seed 1)",
          "operations": "deploy/OPERATIONS.md's preemption settings for plans (seed 1)"}


def misses(d):
    """Accepted jobs that missed their deadline in run `d`: (all, own containers preempted,
    not preempted and at most 2 s late, the others)."""
    with open(f"{d}/jobs.csv") as f:
        preempted = {r["name"]: int(r["preempted"]) for r in csv.DictReader(f)}
    out = [0, 0, 0, 0]
    with open(f"{d}/deadlines.csv") as f:
        for r in csv.DictReader(f):
            if r["answer"] != "admitted" or r["met"] == "true":
                continue
            out[0] += 1
            late = float(r["end_s"]) - float(r["deadline_s"]) if r["end_s"] else float("inf")
            if preempted.get(r["job"], 0) > 0:
                out[1] += 1
            elif late <= 2.0:
                out[2] += 1
            else:
                out[3] += 1
    return out


def load(path):
    runs = OrderedDict()
    with open(path) as f:
        for line in f:
            table, cluster, label, seed, d = line.rstrip("\n").split("|")
            with open(f"{d}/deadlines.json") as s:
                r = json.load(s)
            r["misses"] = misses(d) if r["reservations"] else [0, 0, 0, 0]
            runs.setdefault((table, cluster, label), []).append(r)
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
        if table == "exposed":
            continue
        seeds = len(rows[0][1])
        title = TITLES.get(table, table)
        suffix = f", mean of {seeds} seeds" if seeds > 1 else ""
        print(f"#### {title} — {CLUSTERS.get(cluster, cluster)}{suffix}\n")
        print(HEADER)
        for label, rs in rows:
            print(row(label, rs, not label.startswith("baseline")))
        print()
    plan_rows = [(c, label, rs) for (t, c, label), rs in runs.items()
                 if t in ("main", "exactly") and not label.startswith("baseline")]
    if plan_rows:
        print("#### The plan and the accepted jobs that missed (main and 'exactly' tables, summed over the seeds)\n")
        print("| cluster | configuration | plan capacity (cores) | reserved, mean / peak % of the plan | "
              "samples exposed to a 5 % loss % | reserved capacity used % | accepted that missed | "
              "own containers preempted | not preempted, ≤ 2 s late | other |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c, label, rs in plan_rows:
            col = lambda k: [r[k] for r in rs]
            m = [sum(r["misses"][i] for r in rs) for i in range(4)]
            print(f"| {CLUSTERS.get(c, c)} | {label} | {mean(col('plan_capacity_cores'), '{:.0f}')} | "
                  f"{mean([100 * x for x in col('plan_reserved_mean')], '{:.1f}')} / "
                  f"{mean([100 * x for x in col('plan_reserved_peak')], '{:.0f}')} | "
                  f"{mean([100 * x for x in col('plan_exposed_to_5pct_loss')], '{:.1f}')} | "
                  f"{mean([100 * x for x in col('plan_reserved_used')], '{:.1f}')} | "
                  f"{m[0]} | {m[1]} | {m[2]} | {m[3]} |")
        print()
    exposed = [(label, rs[0]) for (t, _, label), rs in runs.items() if t == "exposed"]
    if exposed:
        print("#### One node (5 %) lost when the plan is nearly full — fast preemption, "
              "20 x 4 cores, seed 1\n")
        print("| agent | replanner | losses | replans: moved / removed | accepted met %, mean (min–max) | "
              "kept met %, mean (min–max) | all deadline jobs met % |")
        print("|---|---|---:|---:|---:|---:|---:|")
        groups = OrderedDict()
        for label, r in exposed:
            agent, replanner, _ = label.split(";")
            groups.setdefault((agent, replanner), []).append(r)
        for (agent, replanner), rs in groups.items():
            kept = [r["kept_met"] / r["kept"] if r["kept"] else 0.0 for r in rs]
            acc = [r["admitted_met_share"] for r in rs]
            print(f"| {agent} | {replanner} | {len(rs)} | {sum(r['replan_moved'] for r in rs)} / "
                  f"{sum(r['replan_removed'] for r in rs)} | "
                  f"{100 * sum(acc) / len(acc):.2f} ({100 * min(acc):.2f}–{100 * max(acc):.2f}) | "
                  f"{100 * sum(kept) / len(kept):.2f} ({100 * min(kept):.2f}–{100 * max(kept):.2f}) | "
                  f"{100 * sum(r['deadline_met_share'] for r in rs) / len(rs):.2f} |")
        print()
        print("Per loss instant (moved / removed, accepted met %):\n")
        print("| agent | lost at (s) | Rayon | YARN |")
        print("|---|---:|---|---|")
        cells = OrderedDict()
        for label, r in exposed:
            agent, replanner, t = label.split(";")
            cells.setdefault((agent, t), {})[replanner] = (
                f"{r['replan_moved']} / {r['replan_removed']}, {100 * r['admitted_met_share']:.2f}")
        for (agent, t), c in cells.items():
            print(f"| {agent} | {float(t):,.0f} | {c.get('rayon', '–')} | {c.get('yarn', '–')} |")
        print()

if __name__ == "__main__":
    main()
