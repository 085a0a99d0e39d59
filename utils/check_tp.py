#!/usr/bin/env python3
"""Check amk-run --tp N against the single-rank program.

    check_tp.py AMK_RUN TARGET --tp N [--ref-passes P] [--tol T]
                [--golden FILE] [amk-run options...]

Decodes TARGET (a model folder) with --tp 1 and with --tp N on the CPU
reference VM in fp32, feeding the same tokens (the golden sequence with
--golden, else the prompt 1,17,42,99,3 and 8 greedy tokens), and compares
the logits after every fed token: max |tp - single| over max |single| must be
at most --tol (default 1e-5: fp32 summation-order rounding). The greedy
tokens must be identical. With --golden the tp logits are also held to the
golden fp32 logits (max absolute error 1e-4, as check_golden.py does). When
N does not divide the model's KV heads, says SKIP and exits 0 (the shard
pass's refusal is tested apart). Extra options go to both runs
(--random-weights S, --passes for the single run via --ref-passes).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(amk_run, target, extra, dump):
    cmd = [amk_run, target, "--device", "cpu", "--json", "--dtype", "f32",
           "--dump-logits", dump] + extra
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("amk_run")
    ap.add_argument("target")
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--ref-passes")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--golden")
    args, extra = ap.parse_known_args()

    name = os.path.basename(os.path.normpath(args.target))
    with open(os.path.join(args.target, "config.json")) as f:
        cfg = json.load(f)
    n_kv = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    if n_kv % args.tp:
        print(f"SKIP {name} tp={args.tp}: {n_kv} KV heads are not a multiple of {args.tp}")
        return 0
    if args.golden:
        with open(args.golden) as f:
            golden = json.load(f)
        seq = golden["sequence"]
        feed = ["--prompt-ids", ",".join(map(str, seq[:-1])), "-n", "1"]
    else:
        golden = None
        feed = ["--prompt-ids", "1,17,42,99,3", "-n", "8"]
    with tempfile.TemporaryDirectory() as tmp:
        ref_dump, tp_dump = os.path.join(tmp, "ref.json"), os.path.join(tmp, "tp.json")
        ref_extra = extra + feed + (["--passes", args.ref_passes] if args.ref_passes else [])
        ref = run(args.amk_run, args.target, ref_extra, ref_dump)
        got = run(args.amk_run, args.target, extra + feed + ["--tp", str(args.tp)], tp_dump)
        for what, proc in (("tp=1", ref), (f"tp={args.tp}", got)):
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr)
                print(f"FAIL {name} {what}: amk-run exited {proc.returncode}")
                return 1
        with open(ref_dump) as f:
            ref_rows = json.load(f)
        with open(tp_dump) as f:
            tp_rows = json.load(f)
        ref_out, tp_out = json.loads(ref.stdout), json.loads(got.stdout)
    if len(ref_rows) != len(tp_rows) or not ref_rows:
        print(f"FAIL {name} tp={args.tp}: {len(tp_rows)} logit rows, the single program {len(ref_rows)}")
        return 1
    worst = 0.0
    for a, b in zip(ref_rows, tp_rows):
        scale = max(abs(v) for v in a) or 1.0
        worst = max(worst, max(abs(x - y) for x, y in zip(a, b)) / scale)
    ok = worst <= args.tol
    print(f"{'PASS' if ok else 'FAIL'} {name} tp={args.tp} logits: {len(ref_rows)} positions, "
          f"max relative difference {'<=' if ok else '>'} {args.tol:g}")
    same = ref_out["generated"] == tp_out["generated"]
    print(f"{'PASS' if same else 'FAIL'} {name} tp={args.tp} tokens: "
          f"{'identical' if same else 'differ'}")
    ok = ok and same
    if golden is not None:
        rows = golden["logits"]
        positions = golden.get("logit_positions", list(range(len(rows))))
        err = 0.0
        for row, p in zip(rows, positions):
            if p < len(tp_rows):
                err = max(err, max(abs(x - y) for x, y in zip(row, tp_rows[p])))
        gold_ok = err <= 1e-4
        print(f"{'PASS' if gold_ok else 'FAIL'} {name} tp={args.tp} golden: max abs error "
              f"{'<=' if gold_ok else '>'} 1e-4")
        ok = ok and gold_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
