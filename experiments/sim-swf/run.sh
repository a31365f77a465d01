#!/usr/bin/env bash
# The Standard Workload Format reader on the hand-written sample (no archive log ships with
# the repository): parallel jobs as gangs of one-core containers on the small cluster.
source "$(dirname "$0")/../common.sh"
"$GANTRY" sim --cluster "$ROOT/sim/examples/clusters/small.toml" \
  --trace "$ROOT/sim/tests/data/sample.swf" --format swf --seed 1 --out "$OUT"
