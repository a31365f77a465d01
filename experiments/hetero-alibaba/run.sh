#!/usr/bin/env bash
# Alibaba GPU 2023, `openb_pod_list_gpuspec33.csv` (a third of the GPU pods name the GPU
# models they accept, `gpu_spec`), on a sample of the trace's GPU node list (EVERY, default
# 100, below), so that pods queue. GPU-model constraints as hard
# selectors vs soft preferences, against first-fit and random placement.
#
# Its own 1,213 nodes never make a pod wait (peak demand: 71 of their 6,212 GPUs), so the
# cluster is every EVERY-th node of each GPU model (default 100: 17 nodes, 85 GPUs, every model
# kept).
#
# The trace says nothing about how much slower a pod runs on a model it did not ask for, so
# soft runs are made twice: no slowdown (an upper bound for soft) and 1.5x. The trace's clock is
# not rebased (its bulk starts near 10,000,000 s); runs stop at UNTIL_S (default 13,500,000 s,
# a week after the last arrival); scheduling cycles every 10 s (TICK_MS).
# Prints, per configuration: GPU pods started by then and their share of the GPU demand
# (GPUs x run time), mean and p95 wait of GPU pods, and of the pods with a gpu_spec.
source "$(dirname "$0")/../common.sh"
here="$(cd "$(dirname "$0")" && pwd)"
plugin="$(plugin_so gantry-hetero gantry_hetero)"
every="${EVERY:-100}"
until_s="${UNTIL_S:-13500000}"
tick="${TICK_MS:-10000}"
pods="$TRACES/alibaba-gpu-2023/openb_pod_list_gpuspec33.csv"
mkdir -p "$OUT/runs" "$OUT/configs"
nodes="$OUT/nodes.csv"
awk -F, -v every="$every" 'NR == 1 { print; next } { if (seen[$5]++ % every == 0) print }' \
  "$TRACES/alibaba-gpu-2023/openb_node_list_gpu_node.csv" > "$nodes"

hetero() { # NAME SETTINGS…: a scheduler config with the hetero plugin
  local cfg="$OUT/configs/$1.toml"; shift
  place_plugin_config "$cfg" hetero "$plugin" "$@"
  echo "$cfg"
}
: > "$OUT/empty.toml"
# name | config | gpu_spec as | slowdown
runs=(
  "first-fit FIFO (built-in), hard|$OUT/empty.toml|hard|1"
  "fcfs-random, hard|$(hetero random-hard 'policy = "fcfs-random"' 'placement = "hard"' 'improvements = "none"')|hard|1"
  "fcfs-hetero, hard|$(hetero fcfs-hard 'policy = "fcfs-hetero"' 'placement = "hard"')|hard|1"
  "sjf-hetero, hard|$(hetero sjf-hard 'policy = "sjf-hetero"' 'placement = "hard"')|hard|1"
  "fcfs-random, soft, no slowdown|$(hetero random-soft 'policy = "fcfs-random"' 'placement = "soft"' 'improvements = "none"')|soft|1"
  "fcfs-hetero, soft, no slowdown|$(hetero fcfs-soft 'policy = "fcfs-hetero"' 'placement = "soft"')|soft|1"
  "sjf-hetero, soft, no slowdown|$(hetero sjf-soft 'policy = "sjf-hetero"' 'placement = "soft"')|soft|1"
  "fcfs-hetero, soft, 1.5x slower off-model|$OUT/configs/fcfs-soft.toml|soft|1.5"
  "sjf-hetero, soft, 1.5x slower off-model|$OUT/configs/sjf-soft.toml|soft|1.5"
)
: > "$OUT/runs.txt"
for entry in "${runs[@]}"; do
  IFS='|' read -r name cfg spec slowdown <<< "$entry"
  slug="$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_')"
  extra=()
  [ "$spec" = soft ] && extra=(--alibaba-slowdown "$slowdown")
  "$GANTRY" sim --cluster "$nodes" --trace "$pods" --format alibaba --alibaba-gpu-spec "$spec" "${extra[@]}" \
    --config "$cfg" --seed 1 --tick-ms "$tick" --until "$until_s" --out "$OUT/runs/$slug" > /dev/null
  echo "$name|$OUT/runs/$slug" >> "$OUT/runs.txt"
done
python3 "$here/summarise.py" "$pods" "$OUT/runs.txt" "$(($(wc -l < "$nodes") - 1))"
