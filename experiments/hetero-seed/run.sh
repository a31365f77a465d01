#!/usr/bin/env bash
# Seed 002's problem: the heterogeneity-aware plugin (plugins/hetero) on the seed's cluster
# (rack0 = 4 GPU machines, rack1..3 = 6 plain machines), on traces generated in the CMU format
# from the seed's job types (experiments/sim-cmu/classes.toml: MPI k = 4, GPU k uniform in
# 2..4, the seed's fast/slow durations, killed 1200 s after submission), Poisson arrivals at
# ρ = 0.7, 0.8, 0.9 over 30 minutes, SEEDS traces per load (default 10).
#
# Every policy × placement with the refinements off, then the refinements one at a time on the
# best base, all of them together, and all but one. Prints the tables (EXPERIMENTS.md holds a
# copy); every run's outputs stay in $OUT/runs/<configuration>/<trace>/.
source "$(dirname "$0")/../common.sh"
here="$(cd "$(dirname "$0")" && pwd)"
cluster="$ROOT/sim/examples/clusters/hetero-seed002.toml"
plugin="$(plugin_so gantry-hetero gantry_hetero)"
seeds="${SEEDS:-10}"

# name|plugin settings (TOML lines separated by ';')
configs=(
  "builtin first-fit FIFO|"
)
for p in fcfs fcfs-random fcfs-hetero sjf-hetero greedy-utility; do
  for m in none soft hard; do
    configs+=("$p $m|policy=\"$p\";placement=\"$m\";improvements=\"none\"")
  done
done
base='policy="sjf-hetero";placement="soft";improvements="none"'
for s in no_mixing protect_preferred sjf_machine_seconds wait_for_better backfill skip_hopeless; do
  configs+=("sjf-hetero soft + $s|$base;$s=true")
done
all='policy="sjf-hetero";placement="soft";improvements="all"'
configs+=("sjf-hetero soft, all|$all")
for s in no_mixing protect_preferred sjf_machine_seconds wait_for_better backfill skip_hopeless; do
  configs+=("sjf-hetero soft, all but $s|$all;$s=false")
done
configs+=("sjf-hetero soft, recommended (the defaults)|# no settings: the defaults")
configs+=("sjf-hetero hard, all|policy=\"sjf-hetero\";placement=\"hard\";improvements=\"all\"")
configs+=("fcfs-hetero soft, all|policy=\"fcfs-hetero\";placement=\"soft\";improvements=\"all\"")
configs+=("greedy-utility soft, all|policy=\"greedy-utility\";placement=\"soft\";improvements=\"all\"")

# Traces shaped like the seed's table (its utilities and E(T) imply 58 jobs, none killed, for
# "80" and 35 for "70"): the same loads over the spans that give those counts on average.
shaped=("seed80|0.8|2285" "seed70|0.7|1575")
shaped_configs=("builtin first-fit FIFO" "fcfs-hetero soft" "sjf-hetero soft" "greedy-utility soft"
  "sjf-hetero soft, recommended (the defaults)" "greedy-utility soft, all")

mkdir -p "$OUT/traces" "$OUT/configs" "$OUT/runs"
: > "$OUT/configs.txt"
for rho in 0.7 0.8 0.9; do
  for seed in $(seq 1 "$seeds"); do
    "$GANTRY" trace gen --classes "$ROOT/experiments/sim-cmu/classes.toml" --cluster "$cluster" \
      --load "$rho" --span 1800 --seed "$seed" --format cmu --out "$OUT/traces/rho$rho-s$seed" >/dev/null 2>&1
  done
done
# simulate CONFIG NAME TRACE_DIR: one run, outputs in $OUT/runs/NAME/<trace dir's name>.
simulate() {
  local args=() f
  for f in "$3"/*.csv; do args+=(--trace "$f"); done
  "$GANTRY" sim --cluster "$cluster" "${args[@]}" --format cmu --seed 1 --config "$1" \
    --out "$OUT/runs/$2/$(basename "$3")" > /dev/null 2>"$OUT/runs.log" || { cat "$OUT/runs.log" >&2; exit 1; }
}
for entry in "${shaped[@]}"; do
  IFS='|' read -r label rho span <<< "$entry"
  for seed in $(seq 1 "$seeds"); do
    "$GANTRY" trace gen --classes "$ROOT/experiments/sim-cmu/classes.toml" --cluster "$cluster" \
      --load "$rho" --span "$span" --seed "$seed" --format cmu --out "$OUT/shaped/$label-s$seed" >/dev/null 2>&1
  done
done
for entry in "${configs[@]}"; do
  name="${entry%%|*}"
  settings="${entry#*|}"
  echo "$name" >> "$OUT/configs.txt"
  slug="$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_')"
  cfg="$OUT/configs/$slug.toml"
  if [ -n "$settings" ]; then
    IFS=';' read -r -a lines <<< "$settings"
    place_plugin_config "$cfg" hetero "$plugin" "${lines[@]}"
  else
    : > "$cfg"
  fi
  for dir in "$OUT"/traces/*; do simulate "$cfg" "$name" "$dir"; done
  for wanted in "${shaped_configs[@]}"; do
    [ "$wanted" = "$name" ] || continue
    for dir in "$OUT"/shaped/*; do simulate "$cfg" "$name" "$dir"; done
  done
done
python3 "$here/summarise.py" "$OUT"
