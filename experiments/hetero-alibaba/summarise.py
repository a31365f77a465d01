#!/usr/bin/env python3
"""Table for experiments/hetero-alibaba: joins each run's jobs.csv with the pod list (GPUs,
gpu_spec) and prints GPU pods started, their share of the GPU demand (GPUs x run time of the
pods started, over that of all GPU pods the reader kept), and waits."""
import csv, sys, statistics

pods_csv, runs_txt, nodes = sys.argv[1], sys.argv[2], sys.argv[3]
pods = {r["name"]: r for r in csv.DictReader(open(pods_csv))}

def gpus(p):
    return int(p["num_gpu"])

def spec(p):
    return p["gpu_spec"] not in ("", "nan")

def demand(p):
    start = float(p["scheduled_time"] or 0) or float(p["creation_time"])
    return gpus(p) * max(0.0, float(p["deletion_time"]) - start)

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

print(f"\n{nodes} nodes\n")
print("| configuration | GPU pods started | share of GPU demand | mean wait (s) | p95 wait (s) | gpu_spec pods: started | mean wait (s) | ran off-model |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for line in open(runs_txt):
    name, out = line.rstrip("\n").split("|")
    jobs = [j for j in csv.DictReader(open(f"{out}/jobs.csv")) if gpus(pods[j["name"]]) > 0]
    started = [j for j in jobs if j["start_s"]]
    total = sum(demand(pods[j["name"]]) for j in jobs)
    placed = sum(demand(pods[j["name"]]) for j in started)
    waits = [float(j["wait_s"]) for j in started]
    sj = [j for j in jobs if spec(pods[j["name"]])]
    ss = [j for j in sj if j["start_s"]]
    swaits = [float(j["wait_s"]) for j in ss]
    slow = sum(1 for j in ss if j["ran_slow"] == "true")
    print(f"| {name} | {len(started)} / {len(jobs)} | {placed / total:.3f} | {statistics.mean(waits):,.0f} | "
          f"{pct(waits, 0.95):,.0f} | {len(ss)} / {len(sj)} | {statistics.mean(swaits) if swaits else float('nan'):,.0f} | {slow} |")
