#!/usr/bin/env python3
"""Check amk-run against a HuggingFace fixture's golden.json.

    check_golden.py AMK_RUN TARGET [--golden FILE] [--passes P] [-b B] [--dtype D]
                    [--device DEV] [--tol T] [--first-tokens K]

TARGET is the fixture folder or a program compiled from it (then --golden
names the fixture's golden.json). Two checks:

  logits   the whole golden sequence is fed (teacher forcing) and the logits
           after every token must match the golden fp32 logits within --tol
           (max absolute error);
  tokens   greedy decoding from the golden prompt must give the golden
           continuation. Where the golden continuation is itself not the
           argmax of the golden logits (a fixture whose generation was not
           greedy on its own logits), the tokens are compared up to that
           point and the disagreement is reported, not failed.

With --first-tokens K (for lower-precision programs, e.g. --dtype bf16) the
first K greedy tokens are compared with those of the same pipeline in fp32
(and with the golden ones where those are greedy); the logits check is
skipped.

A golden trimmed by utils/trim_golden.py keeps the logits of some positions
only (`logit_positions`): those are compared, and the continuation is taken
as greedy where no row says otherwise. A golden with no logits at all (a
bf16 decode's) has its tokens compared, all of them.
Prints one line per check; exits 1 on any failure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(args, prompt, n_new, dump):
    cmd = [args.amk_run, args.target, "--device", args.device, "--json",
           "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n_new)]
    if dump:
        cmd += ["--dump-logits", dump]
    if args.passes:
        cmd += ["--passes", args.passes]
    if args.batch_size:
        cmd += ["-b", args.batch_size]
    if args.dtype:
        cmd += ["--dtype", args.dtype]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return None
    return json.loads(proc.stdout)


def argmax(row):
    best = 0
    for i, v in enumerate(row):
        if v > row[best]:
            best = i
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("amk_run")
    ap.add_argument("target")
    ap.add_argument("--golden")
    ap.add_argument("--passes")
    ap.add_argument("-b", "--batch-size", help="amk-run's -b (prompt tokens per prefill step)")
    ap.add_argument("--dtype")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--first-tokens", type=int, default=0)
    args = ap.parse_args()

    golden_path = args.golden or os.path.join(args.target, "golden.json")
    with open(golden_path) as f:
        golden = json.load(f)
    prompt, want, sequence = golden["prompt"], golden["generated"], golden["sequence"]
    name = os.path.basename(os.path.dirname(os.path.abspath(golden_path)))
    label = f"{name} [{args.passes or os.path.basename(args.target)}" \
            f"{', ' + args.dtype if args.dtype else ''}]"
    failed = False

    # The golden logits by position in the sequence.
    ref_rows = golden.get("logits", [])
    positions = golden.get("logit_positions", list(range(len(ref_rows))))
    golden_rows = dict(zip(positions, ref_rows))
    if not args.first_tokens and golden_rows:
        with tempfile.TemporaryDirectory() as tmp:
            dump = os.path.join(tmp, "logits.json")
            if run(args, sequence, 0, dump) is None:
                print(f"FAIL {label} logits: amk-run failed")
                return 1
            with open(dump) as f:
                rows = json.load(f)
        if len(rows) != len(sequence) or any(
                p >= len(rows) or len(rows[p]) != len(g) for p, g in golden_rows.items()):
            print(f"FAIL {label} logits: {len(rows)} rows, the sequence has {len(sequence)}")
            failed = True
        else:
            worst = max(abs(a - b) for p, g in golden_rows.items() for a, b in zip(rows[p], g))
            ok = worst <= args.tol
            failed |= not ok
            kept = "" if len(golden_rows) == len(rows) else f" of {len(rows)}"
            print(f"{'PASS' if ok else 'FAIL'} {label} logits: {len(golden_rows)}{kept} positions "
                  f"teacher-forced, max |error| {worst:.3g} (tolerance {args.tol:g})")

    n = args.first_tokens or len(want)
    result = run(args, prompt, n, None)
    if result is None:
        print(f"FAIL {label} tokens: amk-run failed")
        return 1
    got = result["generated"]
    if args.first_tokens:
        fp32 = run(argparse.Namespace(**{**vars(args), "dtype": None}), prompt, n, None)
        if fp32 is None or fp32["generated"] != got:
            print(f"FAIL {label} tokens: first {n} {got} != the fp32 program's "
                  f"{fp32['generated'] if fp32 else '(failed)'}")
            return 1
        print(f"PASS {label} tokens: first {n} identical to the fp32 program's")
    # How far the golden continuation is greedy on its own golden logits.
    greedy_upto = len(want)
    for i, token in enumerate(want):
        row = golden_rows.get(len(prompt) - 1 + i)
        if row is not None and argmax(row) != token:
            greedy_upto = i
            break
    compare = min(n, greedy_upto)
    if got[:compare] != want[:compare]:
        print(f"FAIL {label} tokens: {got[:compare]} != golden {want[:compare]}")
        failed = True
    elif greedy_upto < min(n, len(want)):
        print(f"PASS {label} tokens: first {compare} identical; the golden continuation "
              f"stops being greedy on its own logits at token {greedy_upto} "
              f"(golden {want[greedy_upto]}, argmax "
              f"{argmax(golden_rows[len(prompt) - 1 + greedy_upto])}), ours {got[greedy_upto]}")
    else:
        print(f"PASS {label} tokens: {compare} greedy tokens identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
