#!/usr/bin/env bash
# Container packing (seed 003, plugins/packing) on an elastic cluster: does packing containers
# onto few nodes let the autoscaler give nodes back, and what does it cost in latency?
#
# Policies: the packing plugin in `mode = "packed"` (Qubole's container packing: medium-usage
# nodes fullest first, empty nodes at random, high-usage nodes last), the same with empty nodes
# in node order (`ties = "node-order"`), `"lifetime"` (nodes whose work ends last first, then
# empty nodes in node order), `"spread"` (least used first, YARN's uniform default) and
# `"best-fit"` (most used first); the built-in first-fit FIFO for reference. Every run is
# elastic (`gantry sim --elastic-min/--elastic-max`, sim/TRACES.md): at least 5 nodes, 2
# minutes of boot, scale-down of nodes the engine reports empty for 10 minutes, checks every
# 10 s; scale-up either the seed's way (containers waiting 3 minutes, Qubole's trigger, a slot
# for each: table "main") or sized by work (after 10 s of waiting, for the backlog to be done
# within 150 s: table "work").
#
# Traces and pools (EXPERIMENTS.md says why):
# - swim: SWIM Facebook 2009 (5,894 jobs, 24 h) on a pool of 100 nodes of 8 cores / 16 GiB
#   (swim-pool.toml), at most 100;
# - swim-16c: the same trace on experiments/sim-swim's 50 nodes of 16 cores / 64 GiB, where a
#   full node is only half used by memory (main table only);
# - alibaba: the Alibaba GPU 2023 default pod list from 9,900,000 s on (the trace's clock minus
#   9,900,000 s; the 26 pods created earlier start at 0 with what is left of their run time, so
#   the 115 nearly idle days before the bulk are not simulated) on the trace's own 39 G3 nodes
#   (128 cores, 768 GiB, 8 GPUs: the only node model that holds its largest pods), at most 39.
#
# SEEDS (default 3) seeds per configuration (the seed orders packed's empty nodes); the tables
# show means over the seeds. Prints markdown tables: the policies under each autoscaler,
# high_threshold sensitivity, scale-down delay. About two minutes once built.
source "$(dirname "$0")/../common.sh"
here="$(cd "$(dirname "$0")" && pwd)"
plugin="$(plugin_so gantry-packing gantry_packing)"
seeds="${SEEDS:-3}"
mkdir -p "$OUT/runs" "$OUT/configs" "$OUT/inputs"
: > "$OUT/runs.txt"

swim_trace="$TRACES/swim-fb-2009/FB-2009_samples_24_times_1hr_0.tsv"
ali="$TRACES/alibaba-gpu-2023"
ali_trace="$OUT/inputs/alibaba-default-from-9900000.csv"
awk -F, -v t0=9900000 'BEGIN { OFS = "," }
  NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; print; next }
  { c = col["creation_time"]; d = col["deletion_time"]; s = col["scheduled_time"]
    $c = ($c > t0) ? $c - t0 : 0; $d = ($d > t0) ? $d - t0 : 0
    if ($s != "" && $s != 0) $s = ($s > t0) ? $s - t0 : 0
    print }' "$ali/openb_pod_list_default.csv" > "$ali_trace"
g3_nodes="$OUT/inputs/g3-nodes.csv"
awk -F, 'NR == 1 || $5 == "G3"' "$ali/openb_node_list_gpu_node.csv" > "$g3_nodes"

# trace → pool|trace file|format|min|max
declare -A setups=(
  [swim]="$here/swim-pool.toml|$swim_trace|swim|5|100"
  [swim-16c]="$ROOT/experiments/sim-swim/cluster.toml|$swim_trace|swim|5|50"
  [alibaba]="$g3_nodes|$ali_trace|alibaba|5|39"
)

packing() { # NAME SETTING…: a scheduler configuration that places with the packing plugin
  local cfg="$OUT/configs/$1.toml"; shift
  [ -f "$cfg" ] || place_plugin_config "$cfg" packing "$plugin" "$@" 'min_nodes = 5'
  echo "$cfg"
}
: > "$OUT/configs/builtin.toml"

simulate() { # TABLE TRACE LABEL CONFIG SEED [GANTRY SIM FLAGS…]; "--fixed" as a flag: no autoscaler
  local table=$1 trace=$2 label=$3 cfg=$4 seed=$5; shift 5
  local pool file format min max
  IFS='|' read -r pool file format min max <<< "${setups[$trace]}"
  local elastic=(--elastic-min "$min" --elastic-max "$max")
  if [ "${1:-}" = --fixed ]; then elastic=(); shift; fi
  local dir="$OUT/runs/$table/$trace/$(echo "$label" | tr -c 'a-zA-Z0-9.\n' '_')/seed$seed"
  "$GANTRY" sim --cluster "$pool" --trace "$file" --format "$format" --config "$cfg" --seed "$seed" \
    "${elastic[@]}" "$@" --out "$dir" > /dev/null
  echo "$table|$trace|$label|$seed|$dir" >> "$OUT/runs.txt"
}

spread="$(packing spread 'mode = "spread"')"
best_fit="$(packing best-fit 'mode = "best-fit"')"
packed="$(packing packed 'mode = "packed"')"
packed_in_order="$(packing packed-node-order 'mode = "packed"' 'ties = "node-order"')"
lifetime="$(packing lifetime 'mode = "lifetime"')"
# The autoscaler of the second table: scale up at the first check (10 s) where anything waits,
# sized for the backlog to be done 30 s after the new nodes have booted (2 min).
by_work=(--scale-up-after 10s --scale-up-for 150s)
for seed in $(seq 1 "$seeds"); do
  for trace in swim swim-16c alibaba; do
    for table in main work; do
      flags=(); [ "$table" = work ] && flags=("${by_work[@]}")
      simulate "$table" "$trace" "spread" "$spread" "$seed" "${flags[@]}"
      simulate "$table" "$trace" "best-fit" "$best_fit" "$seed" "${flags[@]}"
      simulate "$table" "$trace" "packed (memory, 0.6)" "$packed" "$seed" "${flags[@]}"
      simulate "$table" "$trace" "packed, node-order ties" "$packed_in_order" "$seed" "${flags[@]}"
      simulate "$table" "$trace" "lifetime" "$lifetime" "$seed" "${flags[@]}"
      simulate "$table" "$trace" "built-in first-fit" "$OUT/configs/builtin.toml" "$seed" "${flags[@]}"
    done
  done
  for trace in swim alibaba; do
    # On swim's pool a node's memory share equals its CPU share, so `dominant` would repeat
    # `memory`; on the GPU nodes the dominant share is mostly the GPUs'.
    usages=(memory); [ "$trace" = alibaba ] && usages=(memory dominant)
    for usage in "${usages[@]}"; do
      for t in 0.4 0.5 0.6 0.7 0.8 0.9; do
        cfg="$(packing "packed-$usage-$t" 'mode = "packed"' "usage = \"$usage\"" "high_threshold = $t")"
        simulate threshold "$trace" "packed ($usage, $t)" "$cfg" "$seed"
      done
    done
    for delay in 2 5 20 30; do
      for mode in spread best-fit packed; do
        simulate scale-down "$trace" "$mode, ${delay}m" "$(packing "$mode" "mode = \"$mode\"")" "$seed" \
          --scale-down-after "${delay}m"
      done
    done
  done
done
# What the pool costs with every node up all along (spread; one seed).
for trace in swim swim-16c alibaba; do
  simulate main "$trace" "fixed at the maximum (spread)" "$spread" 1 --fixed
done
python3 "$here/summarise.py" "$OUT/runs.txt"
