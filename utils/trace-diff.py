#!/usr/bin/env python3
"""Where two decode launches' time differs, task kind by task kind.

  utils/trace-diff.py A.trace.json B.trace.json [--group N] [--kinds-only]

A and B are `amk-run --trace` files (Chrome traces of one launch each, of
the same model, e.g. two variants of a `utils/bench-ab.sh` call). A task's
event spans its run (start to end: `dur`); `args.wait_us` is the time from
its arrival on its block to its start (its waits), `args.kind` its kind (the
event's category says "critical" on the critical chain instead). Prints,
per kind: the tasks, their mean run and wait in A and in B, and the mean
run's change; then, per kind in both, the change of the mean run of the
blocks in each group of N (default 16) block ids, which tells a change on
a few blocks from one on all (--kinds-only: the kinds' table alone, as
utils/bench-ab.sh prints it). Exit 1 on a file with no task events, 2 on
bad usage or a file that cannot be read.
"""
import argparse
import json
import sys
from collections import defaultdict


def load(path):
    """{kind: {block: [(run_us, wait_us), ...]}} of a trace file."""
    try:
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    except (OSError, ValueError, AttributeError) as e:
        print(f"trace-diff: {path}: {e}", file=sys.stderr)
        sys.exit(2)
    tasks = defaultdict(lambda: defaultdict(list))
    for e in events:
        args = e.get("args") if isinstance(e, dict) else None
        if not isinstance(args, dict) or "kind" not in args:
            continue
        tasks[args["kind"]][e.get("tid", 0)].append(
            (float(e.get("dur", 0.0)), float(args.get("wait_us", 0.0))))
    if not tasks:
        print(f"trace-diff: {path}: no task events (is it an amk-run --trace file?)",
              file=sys.stderr)
        sys.exit(1)
    return tasks


def mean(values):
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--group", type=int, default=16, help="block ids a group (default 16)")
    ap.add_argument("--kinds-only", action="store_true", help="print the kinds' table alone")
    opt = ap.parse_args()
    if opt.group < 1:
        ap.error("--group takes a positive number of blocks")
    a, b = load(opt.a), load(opt.b)

    def stats(tasks, kind):
        rows = [x for block in tasks.get(kind, {}).values() for x in block]
        return len(rows), mean(r for r, _ in rows), mean(w for _, w in rows)

    kinds = sorted(set(a) | set(b), key=lambda k: -sum(
        r for block in a.get(k, b.get(k, {})).values() for r, _ in block))
    print("| kind | tasks A | tasks B | run us A | run us B | run B - A | wait us A | wait us B |")
    print("|---|---|---|---|---|---|---|---|")
    for k in kinds:
        na, ra, wa = stats(a, k)
        nb, rb, wb = stats(b, k)
        cell = lambda n, v: f"{v:.2f}" if n else "-"
        diff = f"{rb - ra:+.2f}" if na and nb else "-"
        print(f"| {k} | {na} | {nb} | {cell(na, ra)} | {cell(nb, rb)} | {diff} | "
              f"{cell(na, wa)} | {cell(nb, wb)} |")
    if opt.kinds_only:
        return 0
    print()
    print(f"mean run B - A of the blocks in each group of {opt.group} block ids "
          "(blocks that run the kind in both):")
    for k in kinds:
        if k not in a or k not in b:
            print(f"{k}: only in {'A' if k in a else 'B'}")
            continue
        common = sorted(set(a[k]) & set(b[k]))
        groups = defaultdict(list)
        for block in common:
            diff = mean(r for r, _ in b[k][block]) - mean(r for r, _ in a[k][block])
            groups[block // opt.group].append(diff)
        cells = " ".join(f"[{g * opt.group},{g * opt.group + opt.group}) {mean(d):+.2f}"
                         for g, d in sorted(groups.items()))
        print(f"{k}: {cells or 'no block runs it in both'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
