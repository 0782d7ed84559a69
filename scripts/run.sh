#!/usr/bin/env bash
# `make run`: starts hpod on 127.0.0.1:PORT with its database in DATA_DIR and
# prints the URLs. Ctrl-C stops it gracefully.
set -euo pipefail
hpod=${1:-build/hpod}
port=${2:-8080}
data=${3:-./hpo-data}
url="http://127.0.0.1:${port}"
cat <<MSG
hpod: starting on ${url} (data in ${data}; Ctrl-C to stop)
  health:   ${url}/healthz
  API:      ${url}/api/v1/studies
  contract: ${url}/api/v1/openapi.yaml
  metrics:  ${url}/metrics
MSG
exec "$hpod" --port "$port" --data-dir "$data"
