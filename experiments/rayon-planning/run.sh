#!/usr/bin/env bash
# Rayon planning (seed 001, plugins/rayon) on the SWIM Facebook 2009 day: GREE vs GREE-L
# admission, the MILP on a one-hour subset, and replanning after a capacity loss (gantry's
# replanner vs YARN's SimpleCapacityReplanner), with the planner driven through the plugin's
# reserve hook. The experiment program is plugins/rayon/examples/rayon_planning/main.rs; its module
# documentation states the rule that turns SWIM jobs
# into reservations (30 % of the jobs, drawn with SplitMix64 from the seed, become deadline jobs
# whose window is 2 to 3 times their ideal runtime from their arrival).
#
# Configurations (EXPERIMENTS.md says why):
# - swim-pool: the SWIM pool of experiments/packing-elastic (100 nodes of 8 cores / 16 GiB), the
#   plan 70 % of it — the example's defaults;
# - contended: 20 such nodes (plan 112 cores), where the deadline jobs' peaks exceed the plan;
# - contended-no-lease: the same with no minimum lease (l = one 1 s step), so the MILP's slots
#   can be one step and it has room to move reservations (with leases of whole task durations
#   its slots are at least the longest task of the subset and it can only keep the input).
#
# - milp-5, milp-10: contended-no-lease with the optimiser on the hour's first 5 and 10
#   reservations instead of 25 (how far microlp gets).
#
# SEEDS (default 3) seeds for swim-pool and contended; the others run seed 1 only (their MILP
# runs take up to 2 x 20 s). Writes under OUT (default: a fresh temporary folder) one folder per
# configuration and seed with tables.md, result.json, skyline.csv and skyline.svg, then prints
# the seed-1 tables and two summaries: admission and replanning over the seeds, and every MILP
# run. About two and a half minutes once built.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
TRACES="${GANTRY_TRACES:-$ROOT/../shared/traces}"
OUT="${OUT:-$(mktemp -d)}"
seeds="${SEEDS:-3}"
trace="$TRACES/swim-fb-2009/FB-2009_samples_24_times_1hr_0.tsv"
cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml" -p gantry-rayon --example rayon_planning >&2
bin="$ROOT/target/release/examples/rayon_planning"
mkdir -p "$OUT"
: > "$OUT/runs.txt"

run() { # NAME SEED [FLAGS…]
  local name=$1 seed=$2; shift 2
  local dir="$OUT/$name/seed$seed"
  mkdir -p "$dir"
  echo "+ rayon_planning --trace $trace --seed $seed $* --out $dir --json $dir/result.json" >&2
  "$bin" --trace "$trace" --seed "$seed" "$@" --out "$dir" --json "$dir/result.json" > "$dir/tables.md"
  echo "$name|$seed|$dir" >> "$OUT/runs.txt"
}

for seed in $(seq 1 "$seeds"); do
  run swim-pool "$seed"
  run contended "$seed" --nodes 20
done
run contended-no-lease 1 --nodes 20 --lease none
# The optimiser's reach: the same hour's first 5 and 10 reservations.
run milp-5 1 --nodes 20 --lease none --milp-n 5
run milp-10 1 --nodes 20 --lease none --milp-n 10

for name in swim-pool contended contended-no-lease milp-5 milp-10; do
  echo "# $name (seed 1)"
  echo
  cat "$OUT/$name/seed1/tables.md"
  echo
done
python3 "$here/summarise.py" "$OUT/runs.txt"
echo "outputs under $OUT" >&2
