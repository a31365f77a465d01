#!/usr/bin/env bash
# Capacity preemption (seed 004, plugins/preemption) on the seed's two scenarios, on a simulated
# 10-node cluster (cluster.toml: 10 x 16 cores / 64 GiB; every container 2 cores / 8 GiB, so 80
# fit).
#
# (a) scenario-a.jsonl: queue B (guaranteed 20 %) runs 80 containers of 20 minutes from 0 s; at
#     400 s queue A (guaranteed 80 %) submits 64 containers of 5 minutes. Configurations:
#       none-100    no preemption, both maxima 100 %  (the plugin answers `order` only)
#       none-80-20  no preemption, hard maxima A 80 % / B 20 %
#       yarn        preemption with YARN's defaults (3 s rounds, 15 s before the kill, 10 % of
#                   the cluster per round, dead zone 10 %, natural termination 0.2)
#       observe     the same with observe_only = true: must write the same jobs.csv, queues.csv
#                   and timeseries.csv as none-100 (checked; the script fails otherwise)
#       round-1     YARN's defaults but no bound per round (1.0, as the seed's second graph)
#       all-at-once no bound per round and natural termination 1.0: the whole imbalance is
#                   asked back in one round
# (b) scenario-b.jsonl: queues A, B, C (guaranteed 40 / 20 / 40 %) each want more than the
#     cluster (jobs of 20 containers of 6 to 15.5 minutes), arriving at 0, 700 and 1500 s;
#     simulated until 2400 s. Configurations none (order only), yarn, round-1.
#
# Every run uses the plugin's `order` hook (the leaf furthest below its guarantee first, as the
# CapacityScheduler picks queues); the preemption runs also its `rebalance` hook. Samples every
# 5 s. Prints markdown tables (summarise.py); the runs stay in $OUT/runs, the plots go to
# $PLOTS (default $OUT/plots). A few seconds once built.
source "$(dirname "$0")/../common.sh"
here="$(cd "$(dirname "$0")" && pwd)"
plugin="$(plugin_so gantry-preemption gantry_preemption)"
mkdir -p "$OUT/runs" "$OUT/configs"
: > "$OUT/runs.txt"

# config NAME QUEUE_SPECS HOOKS [SETTING…]: a scheduler configuration with the queues
# ("path:guaranteed:maximum" separated by spaces), the plugin for HOOKS ("order" or
# "order rebalance") and its settings (TOML lines for [plugins.config]).
config() {
  local file="$OUT/configs/$1.toml" specs=$2 hooks=$3; shift 3
  {
    for q in $specs; do
      IFS=: read -r path g m <<< "$q"
      printf '[[queues]]\npath = "%s"\nguaranteed = %s\nmaximum = %s\n' "$path" "$g" "$m"
    done
    printf '[[plugins]]\nname = "preemption"\npath = "%s"\n[plugins.config]\n' "$plugin"
    if [ $# -gt 0 ]; then printf '%s\n' "$@"; fi
    printf '[profile]\n'
    for h in $hooks; do printf '%s = "preemption"\n' "$h"; done
  } > "$file"
  echo "$file"
}

# YARN's defaults, written out.
yarn=('monitoring_interval_ms = 3000' 'max_wait_before_kill_ms = 15000'
  'total_preemption_per_round = 0.1' 'max_ignored_over_capacity = 0.1'
  'natural_termination_factor = 0.2' 'observe_only = false' 'kill_grace_ms = 250'
  'resource_calculator = "memory"')
with() { # SETTING…: YARN's defaults, one a line, with these replaced
  local s o
  for s in "${yarn[@]}"; do
    for o in "$@"; do
      if [ "${o%% =*}" = "${s%% =*}" ]; then s="$o"; fi
    done
    echo "$s"
  done
}

simulate() { # SCENARIO LABEL CONFIG [GANTRY SIM FLAGS…]
  local scenario=$1 label=$2 cfg=$3; shift 3
  local dir="$OUT/runs/$scenario/$label"
  "$GANTRY" sim --cluster "$here/cluster.toml" --trace "$here/scenario-$scenario.jsonl" --format gantry \
    --config "$cfg" --sample 5 "$@" --out "$dir" > /dev/null
  echo "$scenario|$label|$dir" >> "$OUT/runs.txt"
}

ab="root.a:0.8:1.0 root.b:0.2:1.0"
mapfile -t defaults < <(with)
mapfile -t observe < <(with 'observe_only = true')
mapfile -t round1 < <(with 'total_preemption_per_round = 1.0')
mapfile -t at_once < <(with 'total_preemption_per_round = 1.0' 'natural_termination_factor = 1.0')

simulate a none-100 "$(config a-none-100 "$ab" order)"
simulate a none-80-20 "$(config a-none-80-20 "root.a:0.8:0.8 root.b:0.2:0.2" order)"
simulate a yarn "$(config a-yarn "$ab" "order rebalance" "${defaults[@]}")"
simulate a observe "$(config a-observe "$ab" "order rebalance" "${observe[@]}")"
simulate a round-1 "$(config a-round-1 "$ab" "order rebalance" "${round1[@]}")"
simulate a all-at-once "$(config a-all-at-once "$ab" "order rebalance" "${at_once[@]}")"

abc="root.a:0.4:1.0 root.b:0.2:1.0 root.c:0.4:1.0"
simulate b none "$(config b-none "$abc" order)" --until 2400
simulate b yarn "$(config b-yarn "$abc" "order rebalance" "${defaults[@]}")" --until 2400
simulate b round-1 "$(config b-round-1 "$abc" "order rebalance" "${round1[@]}")" --until 2400

# observe_only must change nothing.
for f in jobs.csv queues.csv timeseries.csv; do
  if ! cmp -s "$OUT/runs/a/none-100/$f" "$OUT/runs/a/observe/$f"; then
    echo "observe_only changed $f (compare $OUT/runs/a/none-100 and $OUT/runs/a/observe)" >&2
    exit 1
  fi
done

plots="${PLOTS:-$OUT/plots}"
mkdir -p "$plots"
python3 "$here/summarise.py" "$OUT/runs.txt" "$here/cluster.toml" "$plots"
