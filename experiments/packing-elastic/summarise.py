#!/usr/bin/env python3
"""Tables of experiments/packing-elastic: reads runs.txt (table|trace|label|seed|dir per line)
and each run's summary.json; prints markdown tables of means over the seeds."""
import csv
import json
import math
import sys
from collections import OrderedDict

TRACES = {"swim": "SWIM FB 2009, pool 100 x 8 cores / 16 GiB",
          "swim-16c": "SWIM FB 2009, pool 50 x 16 cores / 64 GiB",
          "alibaba": "Alibaba GPU 2023 default (from 9,900,000 s), pool 39 G3 nodes"}


def load(path):
    runs = OrderedDict()
    with open(path) as f:
        for line in f:
            table, trace, label, seed, d = line.rstrip("\n").split("|")
            with open(f"{d}/summary.json") as s:
                summary = json.load(s)
            with open(f"{d}/jobs.csv") as j:
                waits = [float(r["wait_s"]) for r in csv.DictReader(j) if r["wait_s"]]
            summary["waited_1min"] = sum(1 for w in waits if w > 60.0)
            summary["bound_nh"] = fluid_bound(d, summary)
            runs.setdefault((table, trace, label), []).append(summary)
    return runs


def fluid_bound(d, summary):
    """Node-hours no autoscaler and no placement can go below while every container starts when
    it did in this run: at each sample, the nodes that hold the allocated total in the scarcest
    dimension (the pools are of one node shape), at least the minimum, over the run's samples
    (one a minute). None for a fixed cluster."""
    e = summary.get("elastic")
    if not e:
        return None
    pool, least = e["nodes"]["pool"], e["nodes"]["min"]
    with open(f"{d}/nodes.csv") as f:
        rows = list(csv.DictReader(f))
    total = 0.0
    for a, b in zip(rows, rows[1:]):
        demand = max(float(a[k]) * pool for k in ("cpu_pool", "memory_pool", "gpus_pool"))
        total += max(least, math.ceil(demand - 1e-9)) * (float(b["t_s"]) - float(a["t_s"]))
    return total / 3600.0


def figures(summary):
    e = summary.get("elastic")
    reg = e["utilisation_registered"] if e else summary["utilisation"]
    return {
        "nh": summary["node_hours"],
        "mean": e["nodes"]["mean"] if e else None,
        "peak": e["nodes"]["peak"] if e else None,
        "prov": e["nodes"]["provisioned"] if e else None,
        "ups": e["autoscaler"]["scale_ups"] if e else None,
        "removed": e["autoscaler"]["nodes_removed"] if e else None,
        "wait_mean": summary["wait_s"]["mean"],
        "wait_p95": summary["wait_s"]["p95"],
        "wait_p99": summary["wait_s"]["p99"],
        "waited_1min": summary["waited_1min"],
        "compl_mean": summary["completion_s"]["mean"],
        "compl_p95": summary["completion_s"]["p95"],
        "cpu": reg["cpu"], "mem": reg["memory"], "gpu": reg["gpus"],
        "pool_cpu": summary["utilisation"]["cpu"],
        "done": summary["completed"], "jobs": summary["jobs"],
        "bound": summary["bound_nh"],
    }


def mean(runs):
    rows = [figures(s) for s in runs]
    out = {}
    for k in rows[0]:
        vals = [r[k] for r in rows]
        out[k] = None if vals[0] is None else sum(vals) / len(vals)
    out["n"] = len(rows)
    out["nh_min"] = min(r["nh"] for r in rows)
    out["nh_max"] = max(r["nh"] for r in rows)
    return out


def pct(x, base):
    return f"{100.0 * (x - base) / base:+.1f} %" if base else "n/a"


def opt(v, fmt):
    return "–" if v is None else format(v, fmt)


def main_table(runs, trace, table="main"):
    """Policies under one autoscaler. 'vs spread' and 'target met' compare with spread under the
    seed's autoscaler (table main), the issue's baseline; the table of another autoscaler also
    compares with spread under that autoscaler."""
    base = mean(runs[("main", trace, "spread")])
    same = mean(runs[(table, trace, "spread")]) if table != "main" else None
    print(f"\n#### {TRACES[trace]}\n")
    extra_head, extra_rule = ("| vs spread, same autoscaler: node-hours / p95 ", "---|") if same else ("", "")
    print("| policy | node-hours | vs spread | nodes mean / peak | provisioned | scale-ups | removed "
          "| wait mean / p95 / p99 (s) | jobs waiting > 1 min | completion mean / p95 (s) | p95 vs spread "
          f"{extra_head}| util. CPU / mem / GPU (registered) | CPU of pool | target met |")
    print(f"|---|---:|---:|---|---:|---:|---:|---|---:|---|---:|{extra_rule}---|---:|---|")
    for (tb, tr, label), rs in runs.items():
        if tb != table or tr != trace:
            continue
        m = mean(rs)
        spread_seeds = f" ({m['nh_min']:.0f}–{m['nh_max']:.0f})" if m["n"] > 1 and m["nh_max"] - m["nh_min"] >= 0.5 else ""
        met = ""
        if not (table == "main" and label == "spread") and not label.startswith("fixed"):
            met = "yes" if m["nh"] <= 0.6 * base["nh"] and m["compl_p95"] <= 1.05 * base["compl_p95"] else "no"
        extra = f"| {pct(m['nh'], same['nh'])} / {pct(m['compl_p95'], same['compl_p95'])} " if same else ""
        print(f"| {label} | {m['nh']:.1f}{spread_seeds} | {pct(m['nh'], base['nh'])} "
              f"| {opt(m['mean'], '.1f')} / {opt(m['peak'], '.0f')} | {opt(m['prov'], '.0f')} | {opt(m['ups'], '.0f')} "
              f"| {opt(m['removed'], '.0f')} | {m['wait_mean']:.1f} / {m['wait_p95']:.1f} / {m['wait_p99']:.1f} "
              f"| {m['waited_1min']:.0f} | {m['compl_mean']:.1f} / {m['compl_p95']:.1f} "
              f"| {pct(m['compl_p95'], base['compl_p95'])} {extra}"
              f"| {m['cpu']:.3f} / {m['mem']:.3f} / {m['gpu']:.3f} | {m['pool_cpu']:.3f} | {met} |")
    if table == "main":
        print(f"\nFluid lower bound (from spread's runs, see the text): {base['bound']:.1f} node-hours, "
              f"{pct(base['bound'], base['nh'])} against spread.")


def threshold_table(runs, trace):
    base = mean(runs[("main", trace, "spread")])
    print(f"\n#### {TRACES[trace]}: packed, by usage measure and high_threshold\n")
    print("| usage | high_threshold | node-hours | vs spread | nodes mean | wait mean / p95 (s) "
          "| completion p95 (s) | p95 vs spread | util. CPU / mem / GPU (registered) |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---|")
    for ref in ("spread", "best-fit"):
        m = mean(runs[("main", trace, ref)])
        print(f"| ({ref}) | – | {m['nh']:.1f} | {pct(m['nh'], base['nh'])} | {m['mean']:.1f} "
              f"| {m['wait_mean']:.1f} / {m['wait_p95']:.1f} | {m['compl_p95']:.1f} "
              f"| {pct(m['compl_p95'], base['compl_p95'])} | {m['cpu']:.3f} / {m['mem']:.3f} / {m['gpu']:.3f} |")
    for (table, tr, label), rs in runs.items():
        if table != "threshold" or tr != trace:
            continue
        usage, t = label[len("packed ("):-1].split(", ")
        m = mean(rs)
        print(f"| {usage} | {t} | {m['nh']:.1f} | {pct(m['nh'], base['nh'])} | {m['mean']:.1f} "
              f"| {m['wait_mean']:.1f} / {m['wait_p95']:.1f} | {m['compl_p95']:.1f} "
              f"| {pct(m['compl_p95'], base['compl_p95'])} | {m['cpu']:.3f} / {m['mem']:.3f} / {m['gpu']:.3f} |")


def delay_table(runs, trace):
    print(f"\n#### {TRACES[trace]}: scale-down delay (cool-down)\n")
    print("| policy | cool-down | node-hours | vs spread, same delay | nodes mean | removed "
          "| wait mean / p95 (s) | jobs waiting > 1 min | completion p95 (s) |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|")
    main_label = {"spread": "spread", "best-fit": "best-fit", "packed": "packed (memory, 0.6)"}
    for mode in ("spread", "best-fit", "packed"):
        for delay in (2, 5, 10, 20, 30):
            def key(md):
                return ("main", trace, main_label[md]) if delay == 10 else ("scale-down", trace, f"{md}, {delay}m")
            if key(mode) not in runs:
                continue
            m, base = mean(runs[key(mode)]), mean(runs[key("spread")])
            print(f"| {mode} | {delay} min | {m['nh']:.1f} | {pct(m['nh'], base['nh'])} | {m['mean']:.1f} "
                  f"| {m['removed']:.0f} | {m['wait_mean']:.1f} / {m['wait_p95']:.1f} | {m['waited_1min']:.0f} "
                  f"| {m['compl_p95']:.1f} |")


def main():
    runs = load(sys.argv[1])
    seeds = max(len(v) for v in runs.values())
    print(f"Means over {seeds} seed(s). 'target met': node-hours at least 40 % below spread and "
          "p95 completion at most 5 % above spread's.")
    print("\n### Policies, the seed's autoscaler (scale-up after 3 min of waiting, sized by count; cool-down 10 min)")
    for trace in ("swim", "swim-16c", "alibaba"):
        main_table(runs, trace)
    print("\n### Policies, scale-up sized by work (after 10 s of waiting, for 150 s; cool-down 10 min)")
    for trace in ("swim", "swim-16c", "alibaba"):
        main_table(runs, trace, "work")
    print("\n### Sensitivity to high_threshold (cool-down 10 min)")
    for trace in ("swim", "alibaba"):
        threshold_table(runs, trace)
    print("\n### Scale-down delay")
    for trace in ("swim", "alibaba"):
        delay_table(runs, trace)


if __name__ == "__main__":
    main()
