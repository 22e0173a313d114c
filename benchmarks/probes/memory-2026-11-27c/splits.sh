#!/bin/bash
# Issue 21: penguins on three more test splits (--split-seed 1..3), seed 0, both arms at c1f05f4,
# 10 minutes, alone; arms interleaved per split; the on arm with a fresh store (shipped memory).
cd /tmp/tree-pg
for split in 1 2 3; do
  for arm in off on; do
    if [ $arm = off ]; then mem=off; else mem=/tmp/exp/pg/mem-split$split.sqlite; fi
    echo "$arm split $split start $(date -u +%H:%M:%S)"
    PYTHONPATH=/tmp/tree-pg RAY_AUTH_MODE=disabled XDG_CACHE_HOME=/tmp/exp/cache \
      /work/main/.venv-bench/bin/python -m benchmarks.run --suite penguins --protocol amlb --policies greedy \
      --baselines "" --seeds 1 --split-seed $split --budget 10m --memory $mem --out /tmp/exp/pg/$arm-split$split
    echo "$arm split $split end $(date -u +%H:%M:%S) rc $?"
  done
done
