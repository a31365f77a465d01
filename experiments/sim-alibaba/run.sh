#!/usr/bin/env bash
# The Alibaba GPU 2023 default pod list (7,255 pods that ran) on its own 1,213 GPU nodes,
# built-in first-fit FIFO. Prints summary.json; the other outputs stay in $OUT.
source "$(dirname "$0")/../common.sh"
"$GANTRY" sim --cluster "$TRACES/alibaba-gpu-2023/openb_node_list_gpu_node.csv" \
  --trace "$TRACES/alibaba-gpu-2023/openb_pod_list_default.csv" --format alibaba \
  --seed 1 --out "$OUT"
