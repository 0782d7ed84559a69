#!/bin/bash
# tests/gpu/source-hash.sh - prints one SHA-256 of the sources the GPU
# bundle is built from (the C, CUDA and CMake files of the programs in it,
# the GPU tests, the benchmarks), from the repository root. bundle.sh
# stores it in the bundle; run-on-device.sh compares it with the tree it
# runs in and stops on a stale bundle, so a device call never tests old
# binaries against new sources. Plain find, no git: the device machine's
# copy of the tree has no .git.
set -euo pipefail
cd "$(dirname "$0")/../.."
find CMakeLists.txt tests/CMakeLists.txt cmake engine api server common tuners storage cli tests/gpu tests/bench \
    -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path 'tests/bench/out/*' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
