#!/usr/bin/env bash
# gantry's own JSON-lines format: the example trace (stages, gangs, selectors, preferences,
# time limits) on the small cluster.
source "$(dirname "$0")/../common.sh"
"$GANTRY" sim --cluster "$ROOT/sim/examples/clusters/small.toml" \
  --trace "$ROOT/sim/examples/traces/mixed.jsonl" --format gantry --seed 1 --out "$OUT"
