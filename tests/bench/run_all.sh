#!/usr/bin/env bash
# `make bench`: every benchmark, each printing hpo's figures beside its peer's
# measured in the same run (about 20 minutes on 2 cores). Output also goes to
# tests/bench/out/. One benchmark: BENCH=e2e make bench.
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
mkdir -p tests/bench/out
export HPO_SHARED=${HPO_SHARED:-$(cd .. && pwd)/shared}
export HPO_HPOD=${HPO_HPOD:-$build/hpod}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
for b in "$build"/tests/bench/bench_${BENCH:-*}; do
  name=$(basename "$b")
  echo "=== $name"
  "$b" 2>&1 | tee "tests/bench/out/$name.txt"
done
