#!/usr/bin/env python3
"""Tables for experiments/hetero-seed: reads runs/<config>/<trace>/summary.json under the output
directory and prints, per load and configuration, the mean over the traces of: Σutility,
E(T) over completed jobs, E(T) counting killed jobs as 1200 s, jobs killed, and memory
utilisation (one container per machine, so memory is the machines' share)."""
import json, sys, pathlib, collections, statistics

out = pathlib.Path(sys.argv[1])
order = [l.strip() for l in (out / "configs.txt").read_text().splitlines() if l.strip()]
rows = collections.defaultdict(list)  # (rho, config) -> [summary]
for f in sorted(out.glob("runs/*/*/summary.json")):
    config, trace = f.parent.parent.name, f.parent.name
    group = trace.split("-")[0]  # rho0.7, …, or seed80 / seed70 (shaped like the seed's traces)
    rows[(group, config)].append(json.loads(f.read_text()))

def row(ss):
    n = len(ss)
    util = statistics.mean(s["utility"] for s in ss)
    et = statistics.mean(s["completion_s"]["mean"] for s in ss)
    horizon = ss[0]["utility_horizon_s"]
    et_all = statistics.mean(
        (s["completion_s"]["mean"] * s["completed"] + horizon * (s["jobs"] - s["completed"])) / s["jobs"] for s in ss)
    killed = statistics.mean(s["killed"] for s in ss)
    jobs = statistics.mean(s["jobs"] for s in ss)
    mem = statistics.mean(s["utilisation"]["memory"] for s in ss)
    return f"| {util:9.0f} | {util / jobs:6.1f} | {et:6.1f} | {et_all:6.1f} | {killed:5.1f} / {jobs:4.1f} | {mem:5.3f} |"

for rho in sorted({r for r, _ in rows}):
    n = len(rows[(rho, order[0])])
    title = f"ρ = {rho[3:]}" if rho.startswith("rho") else f"shaped like the seed's trace \"{rho[4:]}\""
    print(f"\n### {title} (mean of {n} traces)\n")
    print("| configuration | Σutility | per job | E(T) done | E(T) all | killed / jobs | utilisation |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in order:
        if rows.get((rho, c)):
            print(f"| {c} {row(rows[(rho, c)])}")
