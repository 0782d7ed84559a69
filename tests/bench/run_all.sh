#!/usr/bin/env bash
# `make bench`: every benchmark, each printing hpo's figures beside its peer's
# measured in the same run (about 20 minutes on 2 cores). Output also goes to
# tests/bench/out/. One benchmark: BENCH=e2e make bench. Then the soaks
# (Python programs against the built hpod: BENCH=crash_soak make bench);
# the script exits 1 if a soak found a lost result.
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
mkdir -p tests/bench/out
export HPO_HPOD=${HPO_HPOD:-$build/hpod}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
for b in "$build"/tests/bench/bench_${BENCH:-*}; do
  [[ -x $b ]] || continue # BENCH named a soak, not a built benchmark
  [[ $b == */bench_tabular_gen ]] && continue # makes the tabular table (tests/bench/data), measures nothing
  name=$(basename "$b")
  echo "=== $name"
  "$b" 2>&1 | tee "tests/bench/out/$name.txt"
done
status=0
for s in tests/bench/crash_soak.py; do
  name=bench_$(basename "$s" .py)
  [[ $name == bench_${BENCH:-*} ]] || continue
  echo "=== $name"
  /usr/bin/python3 "$s" --hpod "$HPO_HPOD" 2>&1 | tee "tests/bench/out/$name.txt" || status=1
done
exit $status
