#!/usr/bin/python3
"""compose_lint.py - checks docker/compose.yaml without Docker (ctest
lint.compose): several hpod nodes on one PostgreSQL.

  compose_lint.py COMPOSE_YAML HPOD

- The file parses as YAML (Python's yaml module; else the js-yaml of
  web/node_modules through node; neither: exit 77, skipped). Merge keys
  (<<: *anchor) are resolved by both parsers.
- A postgres service (image postgres:<major> or built) with a healthcheck,
  and at least two hpod services, each built from docker/Dockerfile (which
  installs its packages with scripts/deps.sh) and running /src/build/hpod
  (the Dockerfile builds there).
- Every --flag an hpod service passes (entrypoint + command) is one
  `HPOD --help` documents, and a flag documented with a value (--port N)
  is given one.
- Each node: --database is a postgresql:// URL naming the postgres service
  and its POSTGRES_USER / POSTGRES_DB (${VAR:-default} read as its
  default); it waits for postgres to be healthy; its --data-dir and
  --artifacts-dir lie in a volume it mounts; the data dirs, node names and
  published host ports differ between nodes; every named volume is declared.
- The nodes share their files: one --artifacts-dir, the same path in the
  same named volume for every node, outside each node's --data-dir (a
  trial one node trained resumes on another from its checkpoint there).
Prints what it checked; exit 1 with the reasons on a failure.
"""
import json
import os
import re
import subprocess
import sys
from urllib.parse import urlsplit


def load_yaml(path):
    try:
        import yaml  # python3-yaml
        with open(path) as f:
            return yaml.safe_load(f)
    except ImportError:
        pass
    web = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "web", "node_modules", "js-yaml")
    if os.path.isdir(web):
        js = "const y=require(process.argv[1]);const fs=require('fs');" \
             "process.stdout.write(JSON.stringify(y.load(fs.readFileSync(process.argv[2],'utf8'))))"
        out = subprocess.run(["node", "-e", js, os.path.abspath(web), path], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise ValueError(out.stderr.strip())
        return json.loads(out.stdout)
    print("no YAML parser (python3-yaml, or js-yaml in web/node_modules): skipped")
    sys.exit(77)


def expand(s):
    """${VAR:-default} and ${VAR} as compose reads them with VAR unset."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}", lambda m: m.group(1) or "", str(s))


def as_list(v):
    if v is None:
        return []
    return v.split() if isinstance(v, str) else [str(x) for x in v]


def help_flags(hpod):
    text = subprocess.run([hpod, "--help"], capture_output=True, text=True, timeout=60).stdout
    flags = {}
    for m in re.finditer(r"^\s+(--[a-z][a-z0-9-]*)(?: ([A-Z]+))?", text, re.M):
        flags.setdefault(m.group(1), m.group(2) is not None)
    return flags


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    path, hpod = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(path))
    errors = []

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            errors.append(what)

    try:
        doc = load_yaml(path)
    except Exception as e:  # noqa: BLE001 - a parse error is the finding
        check(False, "%s parses as YAML: %s" % (path, e))
        sys.exit(1)
    check(isinstance(doc, dict) and isinstance(doc.get("services"), dict), "the file parses, with services")
    services = doc.get("services") or {}
    declared = set((doc.get("volumes") or {}).keys())
    flags = help_flags(hpod)
    check("--database" in flags and "--data-dir" in flags, "hpod --help lists %d flags" % len(flags))

    pg = [n for n, s in services.items() if "postgres" in str(s.get("image", "")) or n == "postgres"]
    check(len(pg) == 1, "one postgres service (%s)" % pg)
    pgname = pg[0] if pg else None
    pgsvc = services.get(pgname) or {}
    env = {k: expand(v) for k, v in (pgsvc.get("environment") or {}).items()}
    check(bool(pgsvc.get("healthcheck")), "postgres has a healthcheck (the nodes wait for it)")

    nodes = {n: s for n, s in services.items() if n != pgname}
    check(len(nodes) >= 2, "at least two hpod nodes (%s)" % sorted(nodes))
    data_dirs, host_ports, artifacts, names = [], [], [], []
    for name, s in sorted(nodes.items()):
        build = s.get("build") or {}
        dockerfile = os.path.normpath(os.path.join(here, build.get("context", "."), build.get("dockerfile", "Dockerfile")))
        ok = os.path.isfile(dockerfile)
        check(ok, "%s: built from %s" % (name, os.path.relpath(dockerfile, here)))
        if ok:
            text = open(dockerfile).read()
            check("scripts/deps.sh" in text and "/src" in text and "make build" in text,
                  "%s: that Dockerfile installs with scripts/deps.sh and builds in /src" % name)
        argv = [expand(a) for a in as_list(s.get("entrypoint")) + as_list(s.get("command"))]
        check(argv[:1] == ["/src/build/hpod"], "%s: runs /src/build/hpod (%s)" % (name, argv[:1]))
        args = {}
        for i, a in enumerate(argv[1:], 1):
            if not a.startswith("--"):
                continue
            check(a in flags, "%s: %s is an hpod flag" % (name, a))
            if flags.get(a):
                ok = i + 1 < len(argv) and not argv[i + 1].startswith("--")
                check(ok, "%s: %s is given a value" % (name, a))
                if ok:
                    args[a] = argv[i + 1]
        url = urlsplit(args.get("--database", ""))
        check(url.scheme in ("postgresql", "postgres") and url.hostname == pgname,
              "%s: --database names the postgres service (%s)" % (name, url.hostname))
        check(url.username == env.get("POSTGRES_USER") and url.path.lstrip("/") == env.get("POSTGRES_DB")
              and (url.password or "") == env.get("POSTGRES_PASSWORD", ""),
              "%s: --database's user, password and database are the postgres service's" % name)
        deps = s.get("depends_on") or {}
        check(isinstance(deps, dict) and (deps.get(pgname) or {}).get("condition") == "service_healthy",
              "%s: waits for postgres to be healthy" % name)
        mounts = {}
        for v in as_list(s.get("volumes")):
            src, _, dst = v.partition(":")
            mounts[dst.split(":")[0]] = src
            if not src.startswith((".", "/")):
                check(src in declared, "%s: volume %s is declared" % (name, src))
        for flag in ("--data-dir", "--artifacts-dir"):
            if flag in args:
                d = args[flag]
                check(any(d == m or d.startswith(m.rstrip("/") + "/") for m in mounts),
                      "%s: %s %s is in a mounted volume" % (name, flag, d))
        data_dirs.append(args.get("--data-dir"))
        names.append(args.get("--node-name", name))
        art = args.get("--artifacts-dir")
        check(art is not None, "%s: passes --artifacts-dir (the nodes' shared files)" % name)
        volume = [src for dst, src in mounts.items() if art and (art == dst or art.startswith(dst.rstrip("/") + "/"))]
        artifacts.append((art, volume[0] if volume else None))
        d = args.get("--data-dir") or ""
        check(art is None or not (art == d or art.startswith(d.rstrip("/") + "/") or d.startswith(art.rstrip("/") + "/")),
              "%s: --artifacts-dir %s is not inside its --data-dir %s, nor around it" % (name, art, d))
        for p in as_list(s.get("ports")):
            host_ports.append(p.rsplit(":", 1)[0])
    check(None not in data_dirs and len(set(data_dirs)) == len(data_dirs), "each node its own --data-dir %s" % data_dirs)
    check(len(set(host_ports)) == len(host_ports), "the nodes publish different host ports %s" % host_ports)
    check(len(set(names)) == len(names), "the nodes have different names %s" % names)
    check(len(set(artifacts)) == 1 and None not in artifacts[0] and not artifacts[0][1].startswith((".", "/")),
          "the nodes share one --artifacts-dir in one named volume %s" % artifacts)
    if errors:
        print("%d check(s) failed" % len(errors))
        sys.exit(1)
    print("compose: ok")


if __name__ == "__main__":
    main()
