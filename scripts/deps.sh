#!/usr/bin/env bash
# Installs every Debian package hpo needs, idempotently. Used by `make deps`,
# docker/Dockerfile and .ci/run, so the three cannot drift.
#   scripts/deps.sh          build, run and test dependencies
#   scripts/deps.sh --bench  also the peers the benchmarks compare against
set -euo pipefail

build_pkgs=(
  build-essential cmake pkg-config git ca-certificates
  libmicrohttpd-dev libjansson-dev libsqlite3-dev libuv1-dev
  libopenblas-dev liblapacke-dev libdnnl-dev libnlopt-dev
  zlib1g-dev libcurl4-openssl-dev libcmocka-dev
  dataset-fashion-mnist
  curl procps python3
)
bench_pkgs=(python3-torch python3-optuna python3-threadpoolctl python3-numpy)

pkgs=("${build_pkgs[@]}")
[[ "${1:-}" == "--bench" ]] && pkgs+=("${bench_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && { echo "deps: all ${#pkgs[@]} packages present"; exit 0; }

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
