#!/usr/bin/env bash
# run_all.sh CODE OUT BUDGET NAME...: a floor run (--llm none) per data set from checkout CODE.
set -u
code=$1; out=$2; budget=$3; shift 3
for name in "$@"; do
  read file target < <(cd /work/main && .venv/bin/python -c "
from benchmarks.datasets import REGISTRY; d=REGISTRY['$name']; print(d.path, d.target)")
  mkdir -p $out/$name
  start=$(date +%s)
  (cd $code && PYTHONPATH=$code /work/main/.venv/bin/python -m engine.run --data $file --target $target \
     --budget $budget --llm none --memory off --out $out/$name --quiet > $out/$name.log 2>&1)
  echo "$name rc=$? $(( $(date +%s) - start ))s" >> $out/times.txt
done
