#!/usr/bin/env python3
"""Quality of weight-only quantization against HuggingFace's fp32 logits.

  quant-quality.py AMK_RUN [FIXTURE ...] [--modes f32,bf16,int8,int4]
                   [--quant-keep LIST] [--quant-group N] [--act-dtype bf16|f32]
                   [--min-int8 0.95]

For every fixture (a model folder with golden.json: a token sequence and the
fp32 logits HuggingFace computes after each of its tokens) and every mode,
the whole sequence is fed to amk-run on the CPU reference VM (teacher
forcing, --dump-logits) and compared with the golden logits:

  top-1   the share of positions whose greedy choice (argmax, lowest index
          on ties) is the golden one's;
  max err the largest |logit - golden logit| over every position and token.

Modes: f32 and bf16 are the program dtypes; int8 and int4 quantize the GEMV
weights (amk-run --quant) and run with --act-dtype activations (bf16 by
default: W8A16 / W4A16, what the GPU runs). Fixtures default to every folder
of ../shared/fixtures/hf; without them the script says so and succeeds.
Prints one markdown table; exits 1 when an int8 row keeps the greedy choice
at fewer than --min-int8 of its positions (or a run fails).
Python standard library only.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

MODES = {
    "f32": ["--dtype", "f32"],
    "bf16": ["--dtype", "bf16"],
    "int8": ["--quant", "int8"],
    "int4": ["--quant", "int4"],
}


def argmax(row):
    best = 0
    for i, v in enumerate(row):
        if v > row[best]:
            best = i
    return best


def run_mode(amk_run, fixture, sequence, mode, args, tmp):
    cmd = [amk_run, fixture, "--device", "cpu", "--json", "-n", "0",
           "--prompt-ids", ",".join(map(str, sequence))] + MODES[mode]
    if mode.startswith("int"):
        cmd += ["--dtype", args.act_dtype]
        if args.quant_keep:
            cmd += ["--quant-keep", args.quant_keep]
        if args.quant_group:
            cmd += ["--quant-group", str(args.quant_group)]
    dump = os.path.join(tmp, "logits.json")
    cmd += ["--dump-logits", dump]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        return None
    with open(dump) as f:
        return json.load(f)


def weight_bytes(amk_opt, fixture, mode, args):
    """Weight bytes of the program the mode runs (amk-opt -stats)."""
    cmd = [amk_opt, fixture, "-import", "-disable-output", "-stats"]
    dtype = MODES[mode][1] if not mode.startswith("int") else args.act_dtype
    cmd += ["--dtype=" + dtype]
    if mode.startswith("int"):
        cmd += ["-quantize", "--quant=" + mode]
        if args.quant_keep:
            cmd += ["--quant-keep=" + args.quant_keep]
        if args.quant_group:
            cmd += ["--quant-group=%d" % args.quant_group]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wanted = "quantize - weight bytes after" if mode.startswith("int") else "import - weight bytes"
    for line in proc.stderr.splitlines():
        if line.strip().endswith(wanted):
            return int(line.split()[0])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("amk_run")
    ap.add_argument("fixtures", nargs="*")
    ap.add_argument("--modes", default="f32,bf16,int8,int4")
    ap.add_argument("--quant-keep")
    ap.add_argument("--quant-group", type=int)
    ap.add_argument("--act-dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--min-int8", type=float, default=0.95)
    args = ap.parse_args()

    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            ap.error(f"unknown mode '{mode}' (known: {', '.join(MODES)})")
    fixtures = args.fixtures
    if not fixtures:
        shared = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                              "fixtures", "hf")
        fixtures = sorted(d for d in glob.glob(os.path.join(shared, "*"))
                          if os.path.isfile(os.path.join(d, "golden.json")))
        if not fixtures:
            print(f"quant-quality: no fixtures ({os.path.normpath(shared)} is absent); "
                  "nothing to measure")
            return 0
    amk_opt = os.path.join(os.path.dirname(os.path.abspath(args.amk_run)), "amk-opt")

    keep = args.quant_keep or "(amk-run's default)"
    group = args.quant_group or "(amk-run's default)"
    print(f"Teacher-forced against the fp32 golden logits; int8/int4 weights with "
          f"{args.act_dtype} activations, --quant-keep {keep}, --quant-group {group}.\n")
    print("| fixture | mode | weight bytes | positions | top-1 agreement | max abs logit error |")
    print("|---|---|---:|---:|---:|---:|")
    failed = []
    for fixture in fixtures:
        with open(os.path.join(fixture, "golden.json")) as f:
            golden = json.load(f)
        sequence, ref = golden["sequence"], golden["logits"]
        name = os.path.basename(os.path.normpath(fixture))
        for mode in modes:
            with tempfile.TemporaryDirectory() as tmp:
                rows = run_mode(args.amk_run, fixture, sequence, mode, args, tmp)
            if rows is None or len(rows) != len(ref):
                print(f"| {name} | {mode} | | | amk-run failed | |")
                failed.append(f"{name} {mode}: amk-run failed")
                continue
            agree = sum(argmax(a) == argmax(b) for a, b in zip(rows, ref))
            worst = max(abs(x - y) for a, b in zip(rows, ref) for x, y in zip(a, b))
            share = agree / len(ref)
            wbytes = weight_bytes(amk_opt, fixture, mode, args)
            print(f"| {name} | {mode} | {wbytes if wbytes is not None else '?'} | {len(ref)} | "
                  f"{agree}/{len(ref)} ({100 * share:.1f}%) | {worst:.4g} |")
            if mode == "int8" and share < args.min_int8:
                failed.append(f"{name} int8: top-1 agreement {100 * share:.1f}% < "
                              f"{100 * args.min_int8:.0f}%")
    print()
    if failed:
        for f in failed:
            print(f"FAIL {f}")
        return 1
    if "int8" in modes:
        print(f"PASS int8 keeps the greedy choice at >= {100 * args.min_int8:.0f}% of positions "
              f"on every fixture")
    return 0


if __name__ == "__main__":
    sys.exit(main())
