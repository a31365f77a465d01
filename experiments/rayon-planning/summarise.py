#!/usr/bin/env python3
"""Summarises experiments/rayon-planning runs: admission and replanning per configuration over
its seeds (means, and the range where the seeds differ; configurations named milp-* repeat
contended-no-lease's admission and are left out), then one row per agent for every MILP run."""
import json
import sys
from collections import defaultdict


def main(runs_txt):
    runs = defaultdict(list)
    with open(runs_txt) as f:
        for line in f:
            name, seed, d = line.strip().split("|")
            with open(f"{d}/result.json") as r:
                runs[name].append(json.load(r))
    print("| configuration | seeds | reservations | agent | accepted | accepted work | height changes | "
          "bundle-hours | p99 latency (us) | affected by the loss | rejected: gantry / YARN | "
          "bundle-hours rejected: gantry / YARN |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, results in runs.items():
        if name.startswith("milp-"):
            continue
        n = len(results)

        def mean(xs):
            return sum(xs) / len(xs)

        def fmt(xs, f="{:.0f}"):
            lo, hi = min(xs), max(xs)
            return f.format(mean(xs)) + ("" if lo == hi else f" ({f.format(lo)}–{f.format(hi)})")

        for agent in ("GREE", "GREE-L"):
            adm = [next(a for a in r["admission"] if a["agent"] == agent) for r in results]
            loss = [[x for x in r["capacity_loss"] if x["agent"] == agent] for r in results]
            gantry = [next(x for x in l if x["replanner"].startswith("gantry")) for l in loss]
            yarn = [next(x for x in l if x["replanner"].startswith("YARN")) for l in loss]
            print("| " + " | ".join([
                name, str(n), fmt([r["setup"]["reservations"] for r in results]), agent,
                fmt([100 * a["accepted"] / a["reservations"] for a in adm], "{:.1f} %"),
                fmt([100 * a["accepted_work_share"] for a in adm], "{:.1f} %"),
                fmt([a["height_changes"] for a in adm]),
                fmt([a["bundle_hours"] for a in adm]),
                fmt([a["latency_p99_us"] for a in adm], "{:.1f}"),
                fmt([g["affected"] for g in gantry]),
                fmt([g["rejected"] for g in gantry]) + " / " + fmt([y["rejected"] for y in yarn]),
                fmt([g["rejected_bundle_hours"] for g in gantry], "{:.1f}") + " / "
                + fmt([y["rejected_bundle_hours"] for y in yarn], "{:.1f}"),
            ]) + " |")
    print()
    print("| configuration | seed | hour | subset | agent | held | agent's objective | MILP objective | change | "
          "height changes: agent / MILP | moved | MILP time (s) | cells (slot steps) | optimal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, results in runs.items():
        for r in results:
            for m in r["milp"]:
                a, o = m["agent_objective"], m["milp_objective"]
                print("| " + " | ".join([
                    name, str(r["setup"]["seed"]), str(m["hour"]), str(m["subset"]), m["agent"],
                    str(m["accepted"]), f"{a:.4f}", f"{o:.4f}",
                    f"{100 * (o - a) / a:+.1f} %" if a else "-",
                    f"{m['agent_height_changes']} / {m['milp_height_changes']}", str(m["milp_moved"]),
                    f"{m['milp_time_s']:.2f}", f"{m['cells']} ({m['slot_steps']})",
                    "yes" if m["optimal"] else "no",
                ]) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
