#!/usr/bin/env bash
# SWIM's Facebook 2009 sample (5,894 MapReduce jobs over 24 one-hour samples) on 50 nodes,
# built-in first-fit FIFO; maps then reduces, per the model in sim/TRACES.md.
source "$(dirname "$0")/../common.sh"
"$GANTRY" sim --cluster "$(dirname "$0")/cluster.toml" \
  --trace "$TRACES/swim-fb-2009/FB-2009_samples_24_times_1hr_0.tsv" --format swim \
  --seed 1 --out "$OUT"
