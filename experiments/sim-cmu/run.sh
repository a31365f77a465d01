#!/usr/bin/env bash
# The CMU 15-719 format: a 30-minute trace at load 0.8 from the generator (seed 002's job
# types), written in the CMU format and read back, on the seed's cluster, built-in policies.
source "$(dirname "$0")/../common.sh"
here="$(cd "$(dirname "$0")" && pwd)"
"$GANTRY" trace gen --classes "$here/classes.toml" --cluster "$ROOT/sim/examples/clusters/hetero-seed002.toml" \
  --load 0.8 --span 1800 --seed 1 --format cmu --out "$OUT/traces" > "$OUT/traces.txt" 2>/dev/null
mapfile -t files < "$OUT/traces.txt"
args=()
for f in "${files[@]}"; do args+=(--trace "$f"); done
"$GANTRY" sim --cluster "$ROOT/sim/examples/clusters/hetero-seed002.toml" "${args[@]}" --format cmu \
  --seed 1 --out "$OUT/sim"
