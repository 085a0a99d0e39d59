#!/usr/bin/env python3
"""Compile every fixture x pipeline variant x dtype to a cubin with amk-opt.

With a third argument `prefill`, the variants are prefill programs of 8 rows
(import --batch-size=8, untiled and tiled with SM assignment): what
amk-run's prefill runs on the GPU."""
import os
import subprocess
import sys

VARIANTS = [
    ["-import"],
    ["-import", "-tile"],
    ["-import", "-tile", "-fuse"],
    ["-import", "-tile", "-fuse", "-sm-assign", "--sm-assignment=round_robin", "-color"],
    ["-import", "-tile", "-fuse", "-sm-assign", "--sm-assignment=load_balance", "-color"],
    # 8 partitions: the combine stays a task; 2: it folds into o_proj
    # (combine_residual).
    ["-import", "-tile", "--kv-partitions=8", "-fuse", "-sm-assign", "-color"],
    ["-import", "-tile", "--kv-partitions=2", "-fuse", "-sm-assign", "-color"],
]

PREFILL_VARIANTS = [
    ["-import", "--batch-size=8"],
    ["-import", "--batch-size=8", "-tile", "-sm-assign", "-color"],
]

# LeakSanitizer's own tracer thread sometimes crashes while NVRTC's threads
# are alive ("Tracer caught signal 11 ... LeakSanitizer has encountered a
# fatal error"): a failure of the tool, not a leak. Such a run is repeated
# once; a real leak report or any other failure is not.
LSAN_TOOL_FAILURE = "LeakSanitizer has encountered a fatal error"


def main():
    out, root = sys.argv[1], sys.argv[2]
    variants = PREFILL_VARIANTS if sys.argv[3:] == ["prefill"] else VARIANTS
    env = dict(os.environ, AMK_CACHE_DIR=os.path.join(out, "cache"))
    n = failed = 0
    for fixture in sorted(os.listdir(root)):
        for v, passes in enumerate(variants):
            for dtype in ("f32", "bf16"):
                n += 1
                cubin = os.path.join(out, f"{fixture}-{v}-{dtype}.cubin")
                cmd = ["amk-opt", os.path.join(root, fixture)] + passes + [
                    f"--dtype={dtype}", "--emit=cubin", "--arch=sm_90", "-o", cubin]
                p = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if p.returncode != 0 and LSAN_TOOL_FAILURE in p.stderr:
                    print(f"note: LeakSanitizer's tracer failed on {fixture} {v} {dtype}; again")
                    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if p.returncode != 0:
                    failed += 1
                    print(f"FAIL {fixture} {' '.join(passes)} {dtype}\n{p.stderr}")
    print(f"compiled {n} programs, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
