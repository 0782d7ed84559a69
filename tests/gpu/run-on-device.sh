#!/bin/bash
# tests/gpu/run-on-device.sh - runs the GPU tests on a machine with a CUDA
# device and writes their output to $OUT (the device tool's folder; ./gpu-out
# when unset). The one command a device session runs, from the repository
# root, with the bundle that tests/gpu/bundle.sh made here carried along:
#     run(command="bash tests/gpu/run-on-device.sh", carry=[".gpu-bundle"])
# Options: --sanitize  also run each test under compute-sanitizer memcheck
#          (Firecracker machines only; slow: budget a few minutes).
# What it does: prints the GPU and driver, finds libcublasLt.so.13 (the CUDA
# toolkit's lib64, or the nvidia-cublas Python wheel), runs every test of
# .gpu-bundle/bin with a time limit, keeps each one's full output in
# $OUT/gpu-tests.log and ends with a summary: per test PASS / FAIL / SKIP (a
# skip on a GPU machine means the device was not usable: a failure here),
# then every comparison line that failed. Exit status 0 only if all passed.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
log=$OUT/gpu-tests.log
sum=$OUT/summary.txt
: >"$log"
sanitize=0
[ "${1:-}" = "--sanitize" ] && sanitize=1
b=.gpu-bundle
if [ ! -d $b/bin ]; then
    echo "no $b/bin: run tests/gpu/bundle.sh on the build machine and carry .gpu-bundle" | tee "$sum"
    exit 2
fi
{
    echo "== bundle of commit $(cat $b/COMMIT 2>/dev/null || echo '?')"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || echo "nvidia-smi failed"
} | tee -a "$log"

# libcublasLt.so.13: the toolkit's, else the Python wheel's
cublas=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
    /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/libcublasLt.so.13" ] && { cublas=$d; break; }
done
if [ -z "$cublas" ]; then
    cublas=$(python3 -c 'import nvidia.cublas as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
    [ -e "$cublas/libcublasLt.so.13" ] || cublas=$(dirname "$(find / -name 'libcublasLt.so.13' -not -path '/proc/*' 2>/dev/null | head -1)" 2>/dev/null)
fi
echo "== libcublasLt.so.13 from: ${cublas:-NOT FOUND}" | tee -a "$log"
export LD_LIBRARY_PATH="$PWD/$b/lib${cublas:+:$cublas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

status=0
: >"$sum"
for t in "$b"/bin/*; do
    name=$(basename "$t")
    if ldd "$t" | grep -q "not found"; then # the device's C++ runtime missing or too old
        export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/$b/lib-fallback"
    fi
    if ldd "$t" | grep "not found" | tee -a "$log" | grep -q .; then
        echo "$name: FAIL (libraries not found, see the log)" >>"$sum"
        status=1
        continue
    fi
    echo "== $name" >>"$log"
    start=$(date +%s)
    timeout 480 "$t" >>"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - start))
    case $rc in
    0) verdict=PASS ;;
    77) verdict="SKIP (the device was not usable: see the log)"; status=1 ;;
    124) verdict="FAIL (timed out after 480 s)"; status=1 ;;
    *) verdict="FAIL (exit $rc)"; status=1 ;;
    esac
    echo "$name: $verdict in ${secs}s" >>"$sum"
    if [ $sanitize = 1 ] && command -v compute-sanitizer >/dev/null; then
        echo "== $name under compute-sanitizer memcheck" >>"$log"
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 "$t" >>"$log" 2>&1
        src=$?
        echo "$name memcheck: $([ $src = 0 ] && echo PASS || echo "FAIL (exit $src)")" >>"$sum"
        [ $src = 0 ] || status=1
    fi
done
{
    echo "== comparisons that failed (all lines: $log)"
    grep -E "FAIL|DIFFERENT|device error|skipped:|Assert|assert|ERROR|error:" "$log" | grep -v "^\[  PASSED" | head -60 || true
    echo "== the 15 largest errors printed (how close each op is to its tolerance)"
} >>"$sum"
grep -E "max rel (err|diff)" "$log" | sed -E 's/.*max rel (err|diff) ([0-9.e+-]+).*/\2 &/' | sort -g | tail -15 | cut -d' ' -f2- >>"$sum"
cat "$sum"
exit $status
