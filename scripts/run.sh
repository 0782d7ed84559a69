#!/usr/bin/env bash
# `make run`: starts hpod on 127.0.0.1:PORT with its database in DATA_DIR,
# prints the URLs, submits the bundled example study (an MLP search on
# Fashion-MNIST) unless it already ran in DATA_DIR, shows its progress live
# and prints the best hyperparameters. hpod keeps serving until Ctrl-C.
set -euo pipefail
build=${1:-build}
port=${2:-8080}
data=${3:-./hpo-data}
example=${EXAMPLE:-scripts/example-study.json}
hpod="$build/hpod"
hpo="$build/hpo"
url="http://127.0.0.1:${port}"
export HPO_URL="$url"

"$hpod" --port "$port" --data-dir "$data" 2>>"$data.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; exit 0' INT TERM
for _ in $(seq 100); do
  curl -sf "$url/healthz" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { echo "hpod did not start; see $data.log" >&2; exit 1; }
  sleep 0.1
done
cat <<MSG
hpod is running on ${url} (data in ${data}, log in ${data}.log; Ctrl-C to stop)
  dashboard: ${url}/
  API:       ${url}/api/v1/studies
  contract:  ${url}/api/v1/openapi.yaml
  metrics:   ${url}/metrics
  events:    ${url}/api/v1/studies/ID/events
MSG

name=$(sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' "$example" | head -1)
id=$("$hpo" study list --json 2>/dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)
for s in (d.get('studies', []) if isinstance(d, dict) else d):
    if s['name'] == '$name' and s['state'] in ('running', 'complete', 'paused'):
        print(s['id']); break" || true)
if [ -z "$id" ]; then
  id=$("$hpo" study create "$example")
  echo "submitted the example study $example as study $id"
else
  echo "the example study already ran here as study $id"
fi
"$hpo" study watch "$id" || true
echo "best hyperparameters:"
"$hpo" best "$id" --top 3 || true
echo "hpod keeps serving on ${url}; Ctrl-C to stop."
wait $pid
