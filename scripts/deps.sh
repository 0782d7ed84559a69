#!/usr/bin/env bash
# Installs every Debian package hpo needs, idempotently. Used by `make deps`,
# docker/Dockerfile and .ci/run, so the three cannot drift.
#   scripts/deps.sh          build, run and test dependencies
#   scripts/deps.sh --bench  also the peers the benchmarks compare against
#   scripts/deps.sh --fuzz   also clang and libFuzzer (cmake -DHPO_FUZZ=ON, tests/fuzz/)
set -euo pipefail

build_pkgs=(
  build-essential cmake pkg-config git ca-certificates
  libmicrohttpd-dev libjansson-dev libsqlite3-dev libuv1-dev
  libopenblas-dev liblapacke-dev libdnnl-dev libnlopt-dev
  zlib1g-dev libcurl4-openssl-dev libcmocka-dev
  libisal-dev  # ISA-L's crc32_iscsi: the CRC-32C of TensorBoard event files (engine/tb_events.c)
  libpq-dev  # the PostgreSQL backend (storage/sql_pg.c, hpod --database)
  postgresql  # a throwaway server for the tests labelled pg (tests/pg/pg_server.sh; psql for api.test_postgres)
  dataset-fashion-mnist
  curl jq procps python3  # jq: the README's curl examples
  chromium  # the dashboard's browser test (headless; tests/api/test_dashboard.py)
  python3-pip python3-setuptools  # pip install ./clients/python (tests/api/test_python_client.py)
)
# Node.js for the dashboard's pinned JavaScript (web/package-lock.json): Debian's
# nodejs and npm, unless a node (e.g. NodeSource's, which bundles npm) is there.
command -v node >/dev/null 2>&1 || build_pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || build_pkgs+=(npm)
bench_pkgs=(python3-torch python3-optuna python3-threadpoolctl python3-numpy
  python3-psycopg2)  # Optuna's RDB storage on PostgreSQL (tests/bench/peers/optuna_pg.py)
fuzz_pkgs=(clang-14 libclang-rt-14-dev)

pkgs=("${build_pkgs[@]}")
[[ "${1:-}" == "--bench" ]] && pkgs+=("${bench_pkgs[@]}")
[[ "${1:-}" == "--fuzz" ]] && pkgs+=("${fuzz_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "deps: all ${#pkgs[@]} packages present"
else
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# web/node_modules (ECharts, embedded into hpod; playwright-core, which drives
# /usr/bin/chromium and never downloads a browser): `npm ci` when missing or
# older than the lock file.
# Skipped where web/ is not there yet (docker/Dockerfile runs this script
# before copying the sources, and again after).
web="$(dirname "${BASH_SOURCE[0]}")/../web"
if [[ ! -f "$web/package-lock.json" ]]; then
  echo "deps: no web/package-lock.json here; skipping npm ci"
elif [[ ! -f "$web/node_modules/.package-lock.json" || "$web/package-lock.json" -nt "$web/node_modules/.package-lock.json" ]]; then
  echo "deps: npm ci in web/"
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error)
fi
