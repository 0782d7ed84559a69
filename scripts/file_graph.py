#!/usr/bin/env python3
"""file_graph.py - the call graph between the project's source files, from
the object files of a build, and its cycles.

A file A depends on a file B when A's object file refers to a global symbol
that B's defines. The layers are meant to depend one way (server ->
api/jobs -> storage, tuners, engine -> common), so any strongly connected
group of more than one file is a cycle: it is printed with one symbol per
edge, and the exit status is 1. Test programs and fuzz harnesses are left
out (they call everything by design).

usage: file_graph.py BUILD_DIR [--print]   (--print: every edge too)
"""
import os
import subprocess
import sys


def source_of(build, obj):
    """api/CMakeFiles/hpo_api.dir/job_trial.c.o -> api/job_trial.c"""
    rel = os.path.relpath(obj, build)
    head, _, tail = rel.partition("/CMakeFiles/")
    name = tail.split("/", 1)[1] if "/" in tail else tail
    if name.endswith(".o"):
        name = name[:-2]
    return os.path.normpath(os.path.join(head, name.replace("__/", "../")))


def symbols(objs):
    """{object: (defined, used)} from one nm run over all of them (nm's
    start-up, not its reading, is most of its time)."""
    table = {obj: (set(), set()) for obj in objs}
    if not objs:
        return table
    out = subprocess.run(["nm", "-P", "-A"] + objs, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        obj, _, rest = line.partition(": ")
        parts = rest.split()
        if obj not in table or len(parts) < 2:
            continue
        sym, kind = parts[0], parts[1]
        defined, used = table[obj]
        if kind == "U":
            used.add(sym)
        elif kind in "TDBRCVW":
            defined.add(sym)
    return table


def source_dir(build):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                return line.split("=", 1)[1].strip()
    return None


def objects(build):
    for root, dirs, files in os.walk(build):
        dirs[:] = [d for d in dirs if d not in ("tests", "fuzz", "_deps", "Testing")]
        for f in files:
            if f.endswith(".c.o") and "/CMakeFiles/" in os.path.join(root, f):
                yield os.path.join(root, f)


def strongly_connected(graph):
    """Tarjan's algorithm, iterative: the groups of files that reach each other."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                groups.append(sorted(group))
    return groups


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    build = sys.argv[1]
    owner, uses = {}, {}
    top = source_dir(build)
    kept = []
    for obj in objects(build):
        # one executable's main.c is not another's: key by target folder too
        src = source_of(build, obj)
        if top and not os.path.exists(os.path.join(top, src)) and "../" not in src:
            continue  # the object of a file that was removed or renamed
        target = os.path.basename(os.path.dirname(obj))
        kept.append((obj, src if target.startswith("hpo_") else "%s (%s)" % (src, target[:-4])))
    table = symbols([obj for obj, _ in kept])
    for obj, key in kept:
        defined, used = table[obj]
        uses[key] = used
        for sym in defined:
            owner.setdefault(sym, key)
    if not uses:
        print("file_graph: no object files under %s" % build, file=sys.stderr)
        return 2
    graph, witness = {k: set() for k in uses}, {}
    for key, used in uses.items():
        for sym in used:
            dep = owner.get(sym)
            if dep and dep != key:
                graph[key].add(dep)
                witness.setdefault((key, dep), sym)
    edges = sum(len(v) for v in graph.values())
    if "--print" in sys.argv:
        for key in sorted(graph):
            for dep in sorted(graph[key]):
                print("%s -> %s (%s)" % (key, dep, witness[(key, dep)]))
    cycles = [g for g in strongly_connected(graph) if len(g) > 1]
    for group in cycles:
        print("cycle among %d files:" % len(group))
        members = set(group)
        for key in group:
            for dep in sorted(graph[key] & members):
                print("  %s -> %s (%s)" % (key, dep, witness[(key, dep)]))
    print("file_graph: %d files, %d edges, %d cycles" % (len(graph), edges, len(cycles)))
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
