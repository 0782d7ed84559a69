#!/bin/bash
# tests/gpu/bundle.sh - packs the GPU tests for a device machine.
#
# Run HERE (a machine with the build dependencies and the CUDA toolkit, no
# GPU needed), from the repository root:
#     tests/gpu/bundle.sh [BUILD_DIR]          (default: build-gpu)
# It configures a Release build with HPO_CUDA=ON (sm_80, sm_90), builds the
# gpu-labelled test executables and copies them with the shared libraries
# they need that a bare CUDA image may lack (cmocka, ...) into .gpu-bundle/
# (git-ignored): bin/ the tests, lib/ their libraries, lib-fallback/ the C++
# runtime, used only when the device's own does not load them. The CUDA
# runtime is linked statically; cuBLASLt (500 MB) is NOT copied: the device
# image has CUDA 13 and run-on-device.sh finds its libcublasLt.so.13.
# Then, on the device (the `run` tool), carry ".gpu-bundle" and run
#     tests/gpu/run-on-device.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
build=${1:-build-gpu}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPO_WERROR=ON -DHPO_CUDA=ON >/dev/null
tests=$(sed -n 's/^add_test(\(gpu\.[a-z_0-9]*\) .*/\1/p' "$build/tests/CTestTestfile.cmake" | sed 's/^gpu\./gpu_/')
[ -n "$tests" ] || { echo "no gpu tests registered in $build" >&2; exit 1; }
# shellcheck disable=SC2086
cmake --build "$build" -j"${JOBS:-2}" --target $tests
rm -rf .gpu-bundle
mkdir -p .gpu-bundle/bin .gpu-bundle/lib .gpu-bundle/lib-fallback
for t in $tests; do
    cp "$build/tests/$t" .gpu-bundle/bin/
    ldd "$build/tests/$t" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
        case "$name" in
        linux-vdso* | ld-linux* | libc.so* | libm.so* | libpthread* | libdl.so* | librt.so* | libcuda.so* | libcublas*) ;;
        libstdc++* | libgcc_s*) cp -L "$path" .gpu-bundle/lib-fallback/ ;;
        *) cp -L "$path" .gpu-bundle/lib/ ;;
        esac
    done
done
git rev-parse HEAD > .gpu-bundle/COMMIT
strip --strip-debug .gpu-bundle/bin/* 2>/dev/null || true
du -sh .gpu-bundle
ls -R .gpu-bundle
