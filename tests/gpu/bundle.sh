#!/bin/bash
# tests/gpu/bundle.sh - packs the GPU tests and the GPU benchmark for a
# device machine (the `run` tool), which has CUDA 13, PyTorch and a driver
# but none of Debian's libraries and no network.
#
# Run HERE (a machine with the build dependencies and the CUDA toolkit, no
# GPU needed), from anywhere in the repository:
#     tests/gpu/bundle.sh [BUILD_DIR]          (default: build-gpu)
# It configures a Release build with HPO_CUDA=ON (sm_80, sm_90), builds the
# GPU test executables (tests/gpu/test_*.c), hpod (for tests/gpu/test_*.py,
# which run from the checkout), bench_gpu_engine and bench_e2e, stages them
# in .gpu-bundle/ (git-ignored):
#   bin/              the programs (debug info stripped)
#   lib/              the libraries they load that a bare CUDA image lacks
#                     (OpenBLAS, oneDNN, cmocka, jansson, ...)
#   lib-fallback/     the C++ runtime, used only when the device's own does
#                     not load them
#   data/fashion-mnist/  the benchmark's dataset, uncompressed (xz packs the
#                     raw files tighter than their .gz)
#   py/               Debian's Optuna 3.1 (pure Python) and the two modules
#                     it imports that the device's Python lacks (colorlog,
#                     cmaes): bench_e2e's peer there (PYTHONPATH)
#   COMMIT, MANIFEST  the commit built, and every file with the newest glibc
#                     symbol versions the programs need
#   SOURCES           tests/gpu/source-hash.sh of the sources built, which
#                     run-on-device.sh checks against the tree it runs in
# and packs it into .gpu-pack/bundle.tar.xz (.gpu-pack/ is the one folder a
# device call carries):
# what travels (the working tree and carried paths) is limited to 64 MiB, and
# OpenBLAS + oneDNN + the dataset alone are ~125 MB unpacked. The script
# fails when what would travel is over the limit, or when a program needs a
# library that is neither in the bundle nor one the device has.
# Not bundled: cuBLASLt (libcublasLt.so.13, ~500 MB: the device image has
# CUDA 13 and run-on-device.sh finds it) and the driver (libcuda.so.1). The
# CUDA runtime is linked statically.
# Then a device session makes one call (README.md, "GPU"):
#     run(command="bash tests/gpu/run-on-device.sh", carry=[".gpu-pack"], timeout_s=600)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
build=${1:-build-gpu}
limit=$((64 * 1024 * 1024))
sources=$(tests/gpu/source-hash.sh) # before the build: an edit made during it makes the bundle stale
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPO_WERROR=ON -DHPO_CUDA=ON >/dev/null
tests=$(for f in tests/gpu/test_*.c; do basename "$f" .c | sed 's/^/gpu_/'; done)
[ -n "$tests" ] || { echo "no tests/gpu/test_*.c" >&2; exit 1; }
# shellcheck disable=SC2086
cmake --build "$build" -j"${JOBS:-2}" --target $tests bench_gpu_engine bench_e2e hpod

b=.gpu-bundle
rm -rf $b .gpu-pack
mkdir -p .gpu-pack $b/bin $b/lib $b/lib-fallback $b/data/fashion-mnist $b/py
for t in $tests; do cp "$build/tests/$t" $b/bin/; done
cp "$build/tests/bench/bench_gpu_engine" "$build/tests/bench/bench_e2e" "$build/hpod" $b/bin/
strip --strip-debug $b/bin/*
# what the device's CUDA image provides: the C library, the driver, cuBLASLt
system='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv\.so|libcuda\.so|libcublas)'
for t in "$b"/bin/*; do
    ldd "$t" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
        if [[ $name =~ $system ]]; then continue; fi
        case "$name" in
        libstdc++* | libgcc_s*) cp -L "$path" $b/lib-fallback/ ;;
        *) cp -L "$path" $b/lib/ ;;
        esac
    done
done
# every library a program loads is now in the bundle or the device's own
bad=0
for t in "$b"/bin/*; do
    while read -r name path; do
        if [[ $name =~ $system || $path == "$PWD/$b/"* ]]; then continue; fi
        echo "$(basename "$t") needs $name ($path), which is neither bundled nor on the device" >&2
        bad=1
    done < <(LD_LIBRARY_PATH="$PWD/$b/lib:$PWD/$b/lib-fallback" ldd "$t" |
        awk '$2 == "=>" {print $1, ($3 ~ /^\// ? $3 : "not-found")}')
done
[ $bad = 0 ] || exit 1

for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    src=${HPO_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}/$f.gz
    [ -r "$src" ] || { echo "no $src (Debian: dataset-fashion-mnist)" >&2; exit 1; }
    gzip -dc "$src" >$b/data/fashion-mnist/$f
done

for m in optuna colorlog cmaes; do
    src=/usr/lib/python3/dist-packages/$m
    [ -d "$src" ] || { echo "no $src (Debian: python3-optuna; scripts/deps.sh --bench)" >&2; exit 1; }
    cp -r "$src" $b/py/
done
find $b/py -name __pycache__ -prune -exec rm -rf {} +

git rev-parse HEAD >$b/COMMIT
git diff --quiet HEAD || echo "with uncommitted changes" >>$b/COMMIT
echo "$sources" >$b/SOURCES
{
    echo "# file bytes, and for programs and libraries the newest GLIBC_ / GLIBCXX_ symbol versions they need"
    find $b -type f ! -name MANIFEST | sort | while read -r f; do
        v=$( (objdump -T "$f" 2>/dev/null || true) | grep -oE '(GLIBC|GLIBCXX)_[0-9.]+' | sort -t_ -k2 -V |
            awk -F_ '{m[$1]=$0} END {for (k in m) printf "%s ", m[k]}' || true)
        echo "$f $(stat -c %s "$f") $v"
    done
} >$b/MANIFEST

XZ_OPT=-6 tar -C . -cJf .gpu-pack/bundle.tar.xz $b
# what a device call sends: the tracked and untracked-not-ignored files, and the archive
tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
pack=$(du -cb .gpu-pack | tail -1 | cut -f1)
echo "staged $(du -sb $b | cut -f1) bytes in $b; .gpu-pack $pack bytes; working tree $tree bytes;" \
    "together $((pack + tree)) of the $limit a device call may send"
if [ $((pack + tree)) -gt $limit ]; then
    echo "too large for a device call: shrink the bundle or the working tree" >&2
    exit 1
fi
cat $b/MANIFEST
