#!/bin/bash
# tests/gpu/run-on-device.sh - runs the GPU tests, then the GPU benchmark, on
# a machine with a CUDA device, and writes what they print to $OUT (the
# device tool's folder; ./gpu-out when unset). The one command a device
# session runs, from the repository root, with the archive that
# tests/gpu/bundle.sh made here carried along:
#     run(command="bash tests/gpu/run-on-device.sh", carry=[".gpu-pack"], timeout_s=600)
# Options: --tests-only       no benchmark
#          --no-sanitize      skip the last stage: each test program again
#                             under compute-sanitizer memcheck, with the
#                             time the benchmarks left (API errors a test
#                             provokes on purpose, such as its
#                             out-of-memory request, are not reported)
#          --torch-modes M    the PyTorch peer's modes (default eager,graph)
#          --budget SECONDS   the whole script's time (default 480: the
#                             device time of a session is 15 minutes, the
#                             machine's start included)
#          --dry-run          go on without a GPU (checks this script's own
#                             flow on the build machine: every test skips, the
#                             benchmark says why)
# What it does, writing partial results as it goes (a run stopped at its
# limit still brings back what ran):
#  1. unpacks .gpu-pack/bundle.tar.xz into .gpu-bundle/ (xz, or Python's
#     tarfile); a bundle built from other sources than this tree's
#     (tests/gpu/source-hash.sh) stops here: "STALE BUNDLE", exit 2
#  2. $OUT/env.txt: the GPU, driver, glibc, PyTorch, where libcublasLt.so.13
#     was found (the CUDA toolkit's lib64, else the nvidia-cublas wheel, else
#     a search); no usable CUDA device (bench_gpu_engine --check-device) ends
#     it here: "NO GPU: <the runtime's reason>" in $OUT/summary.txt, exit 3
#  3. every test of .gpu-bundle/bin/gpu_* with a 120 s limit, then every
#     tests/gpu/test_*.py (a real hpod with cuda: slots, the bundle's hpod)
#     with 300 s, each cut to what the budget has left less 120 s for the
#     benchmarks, full output in $OUT/gpu-tests.log, one verdict line each
#     (a C program that fails runs again one test per process, a verdict
#     each: a fault that poisons its context fails only its own test)
#     in $OUT/summary.txt at once (a skip on a GPU machine means the device
#     was not usable: a failure)
#  4. bench_gpu_engine with the time left (none below 100 s), its PyTorch peer
#     (which runs first; eager and CUDA-graph modes: torch.compile's
#     max-autotune spends minutes per row, more than a lease holds for all
#     twelve, so --torch-modes adds it where wanted) limited to that less 90
#     s for the engine's rows, then the engine's rows again with
#     steps_per_execution 16 (--no-torch), with batch 4096 added: the wide
#     MLP's share of the bf16 GEMM peak where its GEMMs, not Adam's pass
#     over the f32 blocks (about 110 us a step on an H200, whatever the
#     batch), bound the step; then bench_e2e: the search of 20
#     trials through hpod on 1, 2, 4 and 8 slots of GPU 0, beside Optuna +
#     PyTorch on the same GPU (the bundle's Optuna), 3 seeds; their output
#     in $OUT/bench.txt, bench-spe16.txt and e2e.txt as it runs, their
#     tables appended to the summary. A stage that no longer fits the
#     budget is skipped, saying so.
#  5. each test program again under compute-sanitizer memcheck, in the time
#     the budget has left (unless --no-sanitize; a verdict line each)
#  6. the summary printed last (the call's output_tail ends with it): the
#     verdicts, the comparison lines that failed and the 15 largest errors
#     of the tests (gathered after stage 3), the benchmarks' tables
# Exit status: 0 only if every test passed and the benchmark ran.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
log=$OUT/gpu-tests.log
sum=$OUT/summary.txt
envf=$OUT/env.txt
: >"$log"
: >"$sum"
sanitize=1 bench=1 budget=480 dry=0 torch_modes=eager,graph
while [ $# -gt 0 ]; do
    case "$1" in
    --no-sanitize) sanitize=0 ;;
    --tests-only) bench=0 ;;
    --dry-run) dry=1 ;;
    --budget) budget=$2; shift ;;
    --torch-modes) torch_modes=$2; shift ;;
    *) echo "usage: $0 [--tests-only] [--no-sanitize] [--torch-modes M] [--budget SECONDS] [--dry-run]" >&2; exit 2 ;;
    esac
    shift
done
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
say() { echo "$*" | tee -a "$sum"; }

b=.gpu-bundle
pack=.gpu-pack/bundle.tar.xz
if [ -f $pack ]; then
    rm -rf $b
    if ! tar -xJf $pack 2>>"$log"; then
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(".")' $pack 2>>"$log"
    fi
fi
if [ ! -d $b/bin ]; then
    say "no $b/bin: run tests/gpu/bundle.sh on the build machine and carry .gpu-pack"
    exit 2
fi
if [ "$(cat $b/SOURCES 2>/dev/null)" != "$(bash tests/gpu/source-hash.sh)" ]; then
    say "STALE BUNDLE: built from $(tr '\n' ' ' <$b/COMMIT 2>/dev/null || echo '?')whose sources differ from this tree's;" \
        "run tests/gpu/bundle.sh on the build machine after the last edit"
    exit 2
fi

# libcublasLt.so.13: the toolkit's, else the Python wheel's, else a search
cublas=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
    /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/libcublasLt.so.13" ] && { cublas=$d; break; }
done
if [ -z "$cublas" ]; then
    f=$(timeout 60 find /opt /usr/local /usr/lib /root -name 'libcublasLt.so.13' 2>/dev/null | head -1)
    [ -n "$f" ] && cublas=$(dirname "$f")
fi
# libnccl.so.2, dlopen'd only by replicas that span GPUs (nccl_api.cu):
# beside cuBLAS, else (where there are two GPUs) PyTorch's nvidia-nccl wheel
nccl=""
for d in "$cublas" /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
    [ -n "$d" ] && [ -e "$d/libnccl.so.2" ] && { nccl=$d; break; }
done
if [ -z "$nccl" ] && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
    f=$(timeout 60 find /opt /usr/local /usr/lib /root -name 'libnccl.so.2' 2>/dev/null | head -1)
    [ -n "$f" ] && nccl=$(dirname "$f")
fi
[ "$nccl" = "$cublas" ] && nccl=""
# PyTorch keeps the machine's own library path: the bundle's libraries (zlib, libgomp, the
# toolkit's cuBLAS) could shadow those its wheels bring
export HPO_PEER_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
peer_env=(env -u LD_LIBRARY_PATH)
[ -n "$HPO_PEER_LD_LIBRARY_PATH" ] && peer_env=(env "LD_LIBRARY_PATH=$HPO_PEER_LD_LIBRARY_PATH")
export LD_LIBRARY_PATH="$PWD/$b/lib${cublas:+:$cublas}${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HPO_FASHION_MNIST_DIR=$PWD/$b/data/fashion-mnist # hpod's and the benchmark's builtin dataset
if ldd $b/bin/bench_gpu_engine | grep -q "not found"; then # the device's C++ runtime missing or too old
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/$b/lib-fallback"
fi

{
    echo "== bundle of commit $(tr '\n' ' ' <$b/COMMIT 2>/dev/null || echo '?')"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm,clocks.max.sm --format=csv 2>&1 ||
        echo "nvidia-smi failed"
    echo "glibc: $(ldd --version 2>&1 | head -1)"
    echo "python3: $(command -v python3) $("${peer_env[@]}" python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1)"
    echo "libcublasLt.so.13 from: ${cublas:-NOT FOUND}; libnccl.so.2 (replicas across GPUs) added: ${nccl:-none}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd $b/bin/bench_gpu_engine 2>&1 | grep -E "not found|stdc\+\+" # cuBLASLt: dlopen, from LD_LIBRARY_PATH
} >"$envf" 2>&1
cat "$envf" >>"$sum"
cat "$envf"

check=$($b/bin/bench_gpu_engine --check-device 2>&1)
rc=$?
echo "$check" >>"$log"
if [ $rc = 77 ]; then
    say "NO GPU: $(echo "$check" | grep -m1 'skipped:' | sed 's/.*skipped: //')"
    if [ $dry = 0 ]; then
        say "nothing ran; see $envf"
        exit 3
    fi
    say "--dry-run: going on without one"
elif [ $rc != 0 ]; then
    say "FAIL: bench_gpu_engine --check-device exited $rc: $(echo "$check" | tail -3)"
    exit 3
fi
[ $rc = 0 ] && say "$check"

status=0
# run_test NAME LIMIT COMMAND...: runs it with its output in the log, says its verdict
run_test() {
    local name=$1 limit=$2 t0 rc verdict
    shift 2
    echo "== $name" >>"$log"
    t0=$(date +%s)
    timeout "$limit" "$@" >>"$log" 2>&1
    rc=$?
    case $rc in
    0) verdict=PASS ;;
    77) verdict="SKIP (the device was not usable: see the log)"; status=1 ;;
    124) verdict="FAIL (timed out after $limit s)"; status=1 ;;
    *) verdict="FAIL (exit $rc)"; status=1 ;;
    esac
    say "$name: $verdict in $(($(date +%s) - t0))s"
}
# run_in_budget NAME LIMIT COMMAND...: run_test within what the budget has
# left (the benchmarks keep 120 s of it when they are to run)
run_in_budget() {
    local name=$1 limit=$2 left
    shift 2
    left=$((budget - $(elapsed) - (bench ? 120 : 0)))
    if [ $left -lt 20 ]; then
        say "$name: NOT RUN (no time left in the budget)"
        status=1
        return
    fi
    run_test "$name" $((left < limit ? left : limit)) "$@"
}
say "== tests (each limited to 120 s, a Python one to 300 s, all within the budget)"
for t in "$b"/bin/gpu_*; do
    before=$status
    status=0
    run_in_budget "$(basename "$t")" 120 "$t"
    if [ $status != 0 ]; then
        # a device fault is sticky for the process: each test again in a
        # process of its own, so one fault does not fail the tests after it
        for name in $(HPO_TEST_LIST=1 "$t"); do
            run_in_budget "$(basename "$t"):$name" 120 env HPO_TEST_FILTER="$name" "$t"
        done
        status=1
    fi
    [ $before = 0 ] || status=1
done
for t in tests/gpu/test_*.py; do
    run_in_budget "$(basename "$t" .py)" 300 python3 "$t" --hpod "$b/bin/hpod"
done
{
    echo "== comparisons that failed (all lines: $log)"
    grep -E "FAIL|DIFFERENT|device error|skipped:|Assert|assert|ERROR|error:" "$log" | grep -v "^\[  PASSED" | head -60 || true
    echo "== the 15 largest errors printed (how close each op is to its tolerance)"
    grep -E "max rel (err|diff)" "$log" | sed -E 's/.*max rel (err|diff) ([0-9.e+-]+).*/\2 &/' | sort -g | tail -15 |
        cut -d' ' -f2-
} >>"$sum"

left=$((budget - $(elapsed)))
if [ $bench = 1 ] && [ $left -lt 100 ]; then
    say "no time left for the benchmarks ($left s)"
    status=1
elif [ $bench = 1 ]; then
    say "== bench_gpu_engine ($left s; PyTorch's peer $((left - 90)) s) at $(elapsed) s"
    HPO_PYTHON=$(command -v python3) HPO_PEERS=$PWD/tests/bench/peers PYTHONUNBUFFERED=1 \
        timeout $left $b/bin/bench_gpu_engine --torch-modes "$torch_modes" --torch-time-limit $((left - 90)) 2>&1 |
        grep --line-buffered -v -E 'AUTOTUNE|triton_mm|select_algorithm' | tee "$OUT/bench.txt"
    rc=${PIPESTATUS[0]}
    case $rc in
    0) say "bench_gpu_engine: ran in $(elapsed) s from the start" ;;
    124) say "bench_gpu_engine: stopped at its $left s limit (partial output in bench.txt)"; status=1 ;;
    13[0-9] | 14[0-9]) say "bench_gpu_engine: killed by signal $((rc - 128)) (PyTorch's lines and the rows before it are in bench.txt)"; status=1 ;;
    *) say "bench_gpu_engine: exit $rc"; status=1 ;;
    esac
    sed -n '/^## bench_gpu_engine/,$p' "$OUT/bench.txt" >>"$sum"
    left=$((budget - $(elapsed)))
    if [ $left -ge 30 ]; then
        say "== bench_gpu_engine --steps-per-execution 16 --no-torch, batches 128, 512, 4096 ($left s) at $(elapsed) s"
        timeout $left $b/bin/bench_gpu_engine --no-torch --models mlp,wide --batches 128,512,4096 --steps-per-execution 16 2>&1 |
            tee "$OUT/bench-spe16.txt"
        rc=${PIPESTATUS[0]}
        [ "$rc" = 0 ] || { say "bench_gpu_engine --steps-per-execution 16: exit $rc"; status=1; }
        sed -n '/^## bench_gpu_engine/,$p' "$OUT/bench-spe16.txt" >>"$sum"
    else
        say "no time left for the steps_per_execution 16 rows"
    fi
    left=$((budget - $(elapsed)))
    if [ $left -ge 60 ]; then
        say "== bench_e2e on cuda:0x1,2,4,8 beside Optuna + PyTorch on the GPU ($left s) at $(elapsed) s"
        HPO_HPOD=$b/bin/hpod HPO_PYTHON=$(command -v python3) HPO_PEERS=$PWD/tests/bench/peers \
            PYTHONPATH=$PWD/$b/py${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 \
            timeout $left $b/bin/bench_e2e --devices cuda:0x1 --devices cuda:0x2 --devices cuda:0x4 \
            --devices cuda:0x8 --precision mixed_bf16 --seeds 3 --peer-device cuda --threads 4 2>&1 |
            grep --line-buffered -v ' INFO ' | tee "$OUT/e2e.txt"
        rc=${PIPESTATUS[0]}
        [ "$rc" = 0 ] || { say "bench_e2e: exit $rc (partial output in e2e.txt)"; status=1; }
        sed -n '/^medians/,$p' "$OUT/e2e.txt" >>"$sum"
    else
        say "no time left for bench_e2e"
    fi
fi
# last, with what the budget left: memory checking slows kernels tens of
# times, and the training tests would eat the benchmarks' time
if [ $sanitize = 1 ] && command -v compute-sanitizer >/dev/null; then
    for t in "$b"/bin/gpu_*; do
        left=$((budget - $(elapsed)))
        if [ $left -lt 30 ]; then
            say "no time left for $(basename "$t") under memcheck"
            continue
        fi
        run_test "$(basename "$t") memcheck" $((left < 300 ? left : 300)) \
            compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 "$t"
    done
fi
echo
echo "==================== summary ($(elapsed) s) ===================="
cat "$sum"
exit $status
