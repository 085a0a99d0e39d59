#!/usr/bin/env python3
"""Compare our validator's verdicts with the oracle labels and the reference.

  validate_conformance.py --batch BUILD/bin/amk-validate-batch
      (--population DIR_WITH_labels.jsonl | --edge-cases DIR --verdicts TSV)
      [--differences FILE.tsv] [--show N]

Population (labels.jsonl lines: file, kind, oracle_unsafe, validate_ok,
first_error): counts false accepts (oracle_unsafe but we accept: must be 0),
rejected real lowerings (kind "valid" that we reject: must be 0), verdicts
differing from the reference, and first errors differing where both reject.
Edge cases (TSV: file, "ACCEPT" | "REJECT: message"): the same comparison
against the reference's verdicts. Verdict differences are allowed only when
listed (file<TAB>reason) in --differences: the documented deliberate ones.
Exit 1 on a false accept, a rejected real lowering, or an unlisted verdict
difference. Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys


def run_batch(batch, root, files):
    out = subprocess.run([batch, "--root", root], input="\n".join(files) + "\n",
                         capture_output=True, text=True, check=False)
    verdicts = {}
    for line in out.stdout.splitlines():
        name, _, verdict = line.partition("\t")
        verdicts[name] = verdict
    missing = [f for f in files if f not in verdicts]
    if missing:
        sys.exit(f"batch gave no verdict for {len(missing)} files, e.g. {missing[0]}"
                 f"\n{out.stderr[-2000:]}")
    return verdicts


def accepted(verdict):
    return verdict == "ACCEPT"


def message(verdict):
    return verdict.split(": ", 1)[1] if ": " in verdict else ""


def load_differences(path):
    allowed = {}
    if path:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line and not line.startswith("#"):
                    name, _, reason = line.partition("\t")
                    allowed[name] = reason
    return allowed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", required=True)
    ap.add_argument("--population")
    ap.add_argument("--edge-cases")
    ap.add_argument("--verdicts")
    ap.add_argument("--differences")
    ap.add_argument("--show", type=int, default=10)
    args = ap.parse_args()
    allowed = load_differences(args.differences)

    rows = []  # (file, kind, oracle_unsafe or None, ref_ok, ref_first_error)
    if args.population:
        root = args.population
        with open(os.path.join(root, "labels.jsonl"), encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                rows.append((r["file"], r["kind"], r["oracle_unsafe"],
                             r["validate_ok"], r["first_error"]))
    elif args.edge_cases and args.verdicts:
        root = args.edge_cases
        with open(args.verdicts, encoding="utf-8") as f:
            for line in f:
                name, _, verdict = line.rstrip("\n").partition("\t")
                if name:
                    rows.append((name, "edge", None, verdict == "ACCEPT",
                                 message(verdict)))
    else:
        ap.error("give --population or --edge-cases with --verdicts")

    ours = run_batch(args.batch, root, [r[0] for r in rows])
    false_accepts, rejected_real, differ, unlisted, first_differ = [], [], [], [], []
    same_first = both_reject = 0
    for name, kind, unsafe, ref_ok, ref_first in rows:
        v = ours[name]
        if unsafe and accepted(v):
            false_accepts.append(name)
        if kind == "valid" and not accepted(v):
            rejected_real.append((name, v))
        if accepted(v) != ref_ok:
            differ.append((name, v, ref_first))
            if name not in allowed:
                unlisted.append((name, v, ref_first))
        elif not ref_ok:
            both_reject += 1
            if message(v) == ref_first:
                same_first += 1
            else:
                first_differ.append((name, message(v), ref_first))

    print(f"programs: {len(rows)}")
    print(f"false accepts (oracle unsafe, we accept): {len(false_accepts)}")
    print(f"real lowerings rejected: {len(rejected_real)}")
    print(f"verdicts differing from the reference: {len(differ)} "
          f"({len(differ) - len(unlisted)} documented, {len(unlisted)} not)")
    print(f"same first error where both reject: {same_first}/{both_reject}")
    for title, items in (("FALSE ACCEPT", false_accepts),
                         ("REJECTED REAL LOWERING", rejected_real),
                         ("UNDOCUMENTED DIFFERENCE", unlisted),
                         ("documented difference", [d for d in differ if d[0] in allowed]),
                         ("first error differs", first_differ)):
        for item in items[:args.show]:
            print(f"  {title}: {item}")
    return 1 if false_accepts or rejected_real or unlisted else 0


if __name__ == "__main__":
    sys.exit(main())
