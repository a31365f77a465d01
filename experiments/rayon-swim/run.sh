#!/usr/bin/env bash
# Rayon reservations end to end (seed 001, issue 9) on the SWIM Facebook 2009 day: deadline jobs
# that reserve capacity (GREE or GREE-L admission, the plan follower, the preemption plugin
# enforcing reservation queues' guarantees, replanning after node losses) against the same jobs
# as plain jobs of a capacity queue. Everything runs in `gantry sim` (the real engine and the
# real preemption .so on a virtual clock); the rules are in sim/src/deadlines.rs and
# sim/TRACES.md ("Deadline jobs and reservations").
#
# Workload: the whole SWIM day (5,894 jobs; maps then reduces of 1 core / 2 GiB). 20 % of the
#   jobs, drawn with SplitMix64 from the seed, are deadline jobs: deadline = arrival + 3 x their
#   ideal run time (critical path on the empty cluster). With reservations each submits at its
#   arrival an RDL request (one atom per stage in `order`, inside window(0, deadline − arrival))
#   to root.prod; admitted jobs run in their reservation's queue, rejected ones best-effort in
#   root.prod.default. The other jobs go to root.adhoc.
# Queues: root.prod (the plan queue with reservations) and root.adhoc, guaranteed 50 % each,
#   both allowed 100 %. Baseline: no plan, the deadline jobs are plain jobs of root.prod.
# Preemption (plugins/preemption, `order` and `rebalance`): "fast" — a round every second
#   ([engine] rebalance_interval_ms = 1000), the whole imbalance at once (per-round bound and
#   natural termination 1.0), no dead zone, no wait before the kill, 250 ms grace. The table
#   "preemption" repeats the main runs with YARN's defaults (3 s rounds, 15 s wait, 10 % x 0.2
#   per round, dead zone 10 %), and the table "operations" with deploy/OPERATIONS.md's settings
#   for plans (YARN's but the whole imbalance a round).
# Clusters: cluster.toml (20 x 4 cores / 8 GiB; 29 % CPU used) for every table, and
#   cluster-busy.toml (20 x 2 cores / 4 GiB; 59 %) for the main table again.
# Enforcement: in the fast-preemption tables, guarantees rise 3 s before each piece and no
#   allocation starts sooner than 3 s after admission (--plan-enforce-ahead 3s); the table
#   "exactly" repeats GREE and GREE-L without it; the YARN-settings tables follow the plan exactly.
# Failures: --lose-nodes 0.05 (one node of 20) for good at 43,200 s (mid-run), chosen by the
#   seed. The table "exposed" moves that loss to 12 instants at which the plan is nearly full
#   for the coming hour (so that the loss must re-plan), with each replanner.
#
# SEEDS (default 3) seeds for the main tables (the seed picks the deadline jobs and the lost
# node); the other tables run seed 1. Prints markdown tables (summarise.py); the runs stay in
# $OUT/runs. About six minutes on 2 cores once built (122 runs of 1.5 to 5 s).
source "$(dirname "$0")/../common.sh"
here="$(cd "$(dirname "$0")" && pwd)"
plugin="$(plugin_so gantry-preemption gantry_preemption)"
# The reservation planner: the Rayon plugin, which `gantry sim --reservations` loads from beside
# the gantry binary (target/release/libgantry_rayon.so).
plugin_so gantry-rayon gantry_rayon > /dev/null
trace="$TRACES/swim-fb-2009/FB-2009_samples_24_times_1hr_0.tsv"
seeds="${SEEDS:-3}"
mkdir -p "$OUT/runs" "$OUT/configs"
: > "$OUT/runs.txt"

config() { # NAME SETTING…: queues, the preemption plugin with these settings (TOML lines)
  local file="$OUT/configs/$1.toml" rebalance=$2; shift 2
  {
    printf '[engine]\nrebalance_interval_ms = %s\n' "$rebalance"
    printf '[[queues]]\npath = "root.prod"\nguaranteed = 0.5\nmaximum = 1.0\n'
    printf '[[queues]]\npath = "root.adhoc"\nguaranteed = 0.5\nmaximum = 1.0\n'
    printf '[[plugins]]\nname = "preemption"\npath = "%s"\n[plugins.config]\n' "$plugin"
    printf '%s\n' "$@"
    printf '[profile]\norder = "preemption"\nrebalance = "preemption"\n'
  } > "$file"
  echo "$file"
}
fast="$(config fast 1000 'monitoring_interval_ms = 1000' 'max_wait_before_kill_ms = 0' \
  'total_preemption_per_round = 1.0' 'natural_termination_factor = 1.0' \
  'max_ignored_over_capacity = 0.0' 'kill_grace_ms = 250')"
# deploy/OPERATIONS.md's advice for plans: YARN's rounds and wait, the whole imbalance a round.
operations="$(config operations 3000 'monitoring_interval_ms = 3000' 'max_wait_before_kill_ms = 15000' \
  'total_preemption_per_round = 1.0' 'natural_termination_factor = 1.0' \
  'max_ignored_over_capacity = 0.1' 'kill_grace_ms = 250')"
yarn="$(config yarn 3000 'monitoring_interval_ms = 3000' 'max_wait_before_kill_ms = 15000' \
  'total_preemption_per_round = 0.1' 'natural_termination_factor = 0.2' \
  'max_ignored_over_capacity = 0.1' 'kill_grace_ms = 250')"

simulate() { # TABLE CLUSTER LABEL CONFIG SEED [GANTRY SIM FLAGS…]
  local table=$1 cluster=$2 label=$3 cfg=$4 seed=$5; shift 5
  local dir="$OUT/runs/$table/$cluster/$(echo "$label" | tr -c 'a-zA-Z0-9.\n' '_')/seed$seed"
  "$GANTRY" sim --cluster "$here/$cluster.toml" --trace "$trace" --format swim --config "$cfg" \
    --seed "$seed" --deadline-seed "$seed" --deadline-share 0.2 --deadline-slack 3 \
    --deadline-queue root.prod --best-effort-queue root.adhoc "$@" --out "$dir" > /dev/null
  echo "$table|$cluster|$label|$seed|$dir" >> "$OUT/runs.txt"
}

loss=(--lose-nodes 0.05 --lose-at 43200)
# Guarantees raised 3 s before each piece of an allocation, and no allocation sooner than 3 s
# after admission: a fast preemption round (1 s), its grace (250 ms), the cycle after, and the
# follower's 1 s step ([reservations] enforce_ahead_ms; deploy/OPERATIONS.md §8).
ahead=(--plan-enforce-ahead 3s)
main() { # TABLE CLUSTER CONFIG SEED [FLAGS…]: the eight configurations of the main table, the
         # flags added to the runs with reservations
  local t=$1 c=$2 cfg=$3 s=$4; shift 4
  simulate "$t" "$c" "baseline (capacity queues)" "$cfg" "$s"
  simulate "$t" "$c" "GREE" "$cfg" "$s" --reservations gree "$@"
  simulate "$t" "$c" "GREE-L" "$cfg" "$s" --reservations gree-l "$@"
  simulate "$t" "$c" "baseline, 5 % lost" "$cfg" "$s" "${loss[@]}"
  simulate "$t" "$c" "GREE, 5 % lost, Rayon replanner" "$cfg" "$s" --reservations gree "${loss[@]}" "$@"
  simulate "$t" "$c" "GREE-L, 5 % lost, Rayon replanner" "$cfg" "$s" --reservations gree-l "${loss[@]}" "$@"
  simulate "$t" "$c" "GREE, 5 % lost, YARN replanner" "$cfg" "$s" --reservations gree --replanner yarn "${loss[@]}" "$@"
  simulate "$t" "$c" "GREE-L, 5 % lost, YARN replanner" "$cfg" "$s" --reservations gree-l --replanner yarn "${loss[@]}" "$@"
}

for seed in $(seq 1 "$seeds"); do
  main main cluster "$fast" "$seed" "${ahead[@]}"
  main main cluster-busy "$fast" "$seed" "${ahead[@]}"
  # The plan followed exactly (no enforcement ahead), for comparison.
  for c in cluster cluster-busy; do
    for a in gree gree-l; do
      simulate exactly "$c" "${a^^}, plan followed exactly" "$fast" "$seed" --reservations "$a"
    done
  done
done
# YARN's preemption defaults instead of the fast settings.
main preemption cluster "$yarn" 1
main operations cluster "$operations" 1
# The reservation's window ends 1 s before the deadline (room for getting the capacity back).
for a in gree gree-l; do
  simulate margin cluster "${a^^}, margin 1 s" "$fast" 1 --reservations "$a" --reservation-margin 1s "${ahead[@]}"
  simulate margin cluster "${a^^}, margin 1 s, 5 % lost" "$fast" 1 --reservations "$a" \
    --reservation-margin 1s "${loss[@]}" "${ahead[@]}"
done
# Reservations submitted 6 h before their jobs arrive (Rayon's production jobs reserve ahead), so
# that the plan holds the coming hours' reservations when the node is lost.
for a in gree gree-l; do
  simulate lead cluster "${a^^}, lead 6 h" "$fast" 1 --reservations "$a" --reservation-lead 6h "${ahead[@]}"
  for r in rayon yarn; do
    simulate lead cluster "${a^^}, lead 6 h, 5 % lost, $([ "$r" = yarn ] && echo YARN || echo Rayon) replanner" "$fast" 1 --reservations "$a" \
      --reservation-lead 6h --replanner "$r" "${loss[@]}" "${ahead[@]}"
  done
done
# The loss where it hurts: one node (5 %) lost at 12 instants at which the plan of the run
# without failures (seed 1; identical up to the loss) reserves more than 95 % of its capacity
# somewhere in the next hour (plan.csv), spread evenly over those instants; each replanner.
for a in gree gree-l; do
  plan_csv="$OUT/runs/main/cluster/$(echo "${a^^}" | tr -c 'a-zA-Z0-9.\n' '_')/seed1/plan.csv"
  [ -f "$plan_csv" ] || { echo "no $plan_csv" >&2; exit 1; }
  for t in $(awk -F, 'NR > 1 && $4 > 0.95 * $2 { print $1 }' "$plan_csv" |
             awk '{ t[NR] = $1 } END { for (k = 0; k < 12 && NR > 0; k++) print t[1 + int(k * NR / 12)] }'); do
    for r in rayon yarn; do
      simulate exposed cluster "${a^^};$r;$t" "$fast" 1 --reservations "$a" --replanner "$r" \
        --lose-nodes 0.05 --lose-at "$t" "${ahead[@]}"
    done
  done
done
python3 "$here/summarise.py" "$OUT/runs.txt"
