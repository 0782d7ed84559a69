#!/usr/bin/env bash
# pg_server.sh - a throwaway PostgreSQL server for the tests labelled `pg`
# (ctest runs `start` as the fixture's setup and `stop` as its cleanup, so
# one server serves a whole ctest run; each test makes its own database).
#
#   pg_server.sh start STATE_DIR   initdb into a fresh /tmp/hpo-pg-XXXXXX,
#                                  start postgres on 127.0.0.1:<free port>
#                                  (its socket in that folder too, trust
#                                  auth, fsync off: it is thrown away), and
#                                  write STATE_DIR/url
#                                  (postgresql://postgres@127.0.0.1:PORT)
#                                  and STATE_DIR/pgdir
#   pg_server.sh stop STATE_DIR    stop it (immediate) and remove everything
#
# postgres refuses to run as root: as root (CI, containers) initdb and
# pg_ctl run as the `postgres` system user (the Debian package makes it),
# owning the temp folder. Every wait is bounded; a failed start cleans up.
set -euo pipefail

cmd="${1:-}"
state="${2:-}"
[[ -n "$cmd" && -n "$state" ]] || { echo "usage: $0 start|stop STATE_DIR" >&2; exit 2; }

bindir=""
for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V); do
  [[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && bindir="$d"
done
if [[ -z "$bindir" ]]; then
  echo "pg_server: no PostgreSQL server in /usr/lib/postgresql/*/bin (make deps installs postgresql)" >&2
  exit 1
fi

as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

stop() {
  local pgdir
  pgdir="$(cat "$state/pgdir" 2>/dev/null || true)"
  if [[ -n "$pgdir" && -d "$pgdir" ]]; then
    if [[ -f "$pgdir/data/postmaster.pid" ]]; then
      as_owner "$bindir/pg_ctl" -D "$pgdir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || {
        # pg_ctl could not stop it: kill that postmaster by its pid
        pid="$(head -1 "$pgdir/data/postmaster.pid" 2>/dev/null || true)"
        [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null || true
      }
    fi
    rm -rf "$pgdir"
  fi
  rm -f "$state/url" "$state/pgdir"
}

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
  mkdir -p "$state"
  stop # a server a killed run left behind
  local pgdir
  pgdir="$(mktemp -d /tmp/hpo-pg-XXXXXX)"
  echo "$pgdir" > "$state/pgdir"
  chmod 700 "$pgdir"
  [[ $(id -u) -eq 0 ]] && chown postgres: "$pgdir"
  if ! as_owner "$bindir/initdb" -D "$pgdir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
      >"$state/initdb.log" 2>&1; then
    cat "$state/initdb.log" >&2
    stop
    exit 1
  fi
  # a port another process takes between free_port and the start: try again
  for attempt in 1 2 3; do
    port="$(free_port)"
    if as_owner "$bindir/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $pgdir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
        start >/dev/null 2>&1; then
      echo "postgresql://postgres@127.0.0.1:$port" > "$state/url"
      echo "pg_server: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port ($pgdir)"
      return 0
    fi
    echo "pg_server: start on port $port failed (attempt $attempt):" >&2
    tail -5 "$pgdir/log" >&2 || true
  done
  stop
  exit 1
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop STATE_DIR" >&2; exit 2 ;;
esac
