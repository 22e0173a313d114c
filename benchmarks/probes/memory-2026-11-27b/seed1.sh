#!/bin/bash
# Issue 21 protocol, seed 1, both arms at 1b6b50f, run one after the other, alone.
cd /tmp/tree-s1
for arm in off on; do
  if [ $arm = off ]; then mem=off; out=/tmp/exp/off-s01; else mem=/tmp/exp/on-s1-memory.sqlite; out=/tmp/exp/on-s01; fi
  echo "$arm start $(date -u +%H:%M:%S)"
  PYTHONPATH=/tmp/tree-s1 RAY_AUTH_MODE=disabled XDG_CACHE_HOME=/tmp/exp/cache \
    /work/main/.venv-bench/bin/python -m benchmarks.run --suite lite --protocol amlb --policies greedy \
    --baselines "" --seeds 2 --budget 10m --memory $mem --out $out
  echo "$arm end $(date -u +%H:%M:%S) rc $?"
done
