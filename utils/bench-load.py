#!/usr/bin/env python3
"""Issue 11's loading figures in one command: what a user waits for with a
real checkpoint, and whether the host keeps up with the kernel.

  utils/bench-load.py [--checkpoint DIR | --make SHAPE] [--amk-run PATH]
                      [--runs N] [--tokens N] [--device DEV]

With --make SHAPE (examples/configs/SHAPE; default llama-3.2-1b) it writes
that model with random bf16 weights through transformers' save_pretrained
(torch and transformers needed: the GPU machine has them), so the file is
what a user downloads; --checkpoint uses a folder as it is. Then, with the
checkpoint in the page cache:

  1. one run of a 6-token prompt and one generated token, which also fills
     the cubin cache (its wall time is the first run's, NVRTC included);
  2. --runs more such runs: wall time to the first token (median) and the
     peak resident memory of each (the largest), against the checkpoint;
  3. one run of --tokens tokens: amk-run's eval ms per token against its
     kernel ms per launch (the host's cost per token).

Prints one table with the bars of issue 11 item 5 and item 4 (first token
<= 1.5 s, peak RSS <= 1.2x the checkpoint, eval <= 1.05x kernel). Python's
standard library only, but for --make.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

PROMPT = "1,2,3,4,5,6"  # any six ids of any vocabulary


def make_checkpoint(shape, out):
    import torch  # noqa: deferred: only --make needs them
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(os.path.join("examples/configs", shape))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    model.save_pretrained(out)


def checkpoint_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
               if f.endswith(".safetensors"))


def warm(folder):
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with open(os.path.join(folder, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass


def run(amk_run, folder, tokens, device):
    """One amk-run in a child of its own: (wall s, peak RSS bytes, stderr)."""
    code = ("import resource, subprocess, sys, time\n"
            "t = time.time()\n"
            "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
            "wall = time.time() - t\n"
            "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
            "sys.stderr.write(p.stderr)\n"
            "print(p.returncode, wall, rss)\n")
    cmd = [sys.executable, "-c", code, amk_run, folder, "--prompt-ids", PROMPT, "-n", str(tokens),
           "--device", device, "-v"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    rc, wall, rss = p.stdout.split()
    if int(rc) != 0:
        sys.exit("bench-load: amk-run failed (exit %s):\n%s" % (rc, p.stderr[-2000:]))
    return float(wall), int(rss), p.stderr


def per_step(stderr):
    """amk-run -v's eval ms per token and kernel ms per launch (None when absent)."""
    ev = re.search(r"^amk-run:\s+eval time =\s+([\d.]+) ms /\s+(\d+) runs", stderr, re.M)
    kt = re.search(r"^amk-run:\s+kernel time =\s+([\d.]+) ms \(CUDA events, (\d+) launches", stderr, re.M)
    eval_ms = float(ev.group(1)) / int(ev.group(2)) if ev and int(ev.group(2)) else None
    kernel_ms = float(kt.group(1)) / int(kt.group(2)) if kt and int(kt.group(2)) else None
    return eval_ms, kernel_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", help="a model folder (config.json + safetensors)")
    src.add_argument("--make", default="llama-3.2-1b", metavar="SHAPE",
                     help="write examples/configs/SHAPE with transformers (default llama-3.2-1b)")
    ap.add_argument("--amk-run", default="build/bin/amk-run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--device", default="auto")
    a = ap.parse_args()
    if a.runs < 1 or a.tokens < 2:
        ap.error("--runs must be at least 1 and --tokens at least 2")
    tmp = None
    folder = a.checkpoint
    if not folder:
        tmp = tempfile.TemporaryDirectory(prefix="amk-bench-load-")
        folder = tmp.name
        t = time.time()
        make_checkpoint(a.make, folder)
        print("bench-load: wrote %s in %.1f s" % (a.make, time.time() - t), file=sys.stderr)
    if not os.path.isdir(folder):
        sys.exit("bench-load: %s is not a model folder" % folder)
    size = checkpoint_bytes(folder)
    if size == 0:
        sys.exit("bench-load: %s holds no .safetensors file" % folder)
    warm(folder)
    cold_wall, cold_rss, _ = run(a.amk_run, folder, 1, a.device)
    walls, rsses = [], []
    for _ in range(a.runs):
        wall, rss, _ = run(a.amk_run, folder, 1, a.device)
        walls.append(wall)
        rsses.append(rss)
    _, long_rss, stderr = run(a.amk_run, folder, a.tokens, a.device)
    eval_ms, kernel_ms = per_step(stderr)
    first = statistics.median(walls)
    peak = max(rsses + [cold_rss, long_rss])
    mib = 1 << 20
    print("| checkpoint | first token, first run s | first token s (median of %d) | peak RSS MiB "
          "(x checkpoint) | eval ms/token | kernel ms/launch | eval / kernel |" % a.runs)
    print("|---|---|---|---|---|---|---|")
    ratio = "%.3f" % (eval_ms / kernel_ms) if eval_ms and kernel_ms else "-"
    print("| %.1f MiB | %.3f | %.3f | %.0f (%.2fx) | %s | %s | %s |" % (
        size / mib, cold_wall, first, peak / mib, peak / size,
        "%.4f" % eval_ms if eval_ms else "-", "%.4f" % kernel_ms if kernel_ms else "-", ratio))
    print()
    print("bars (issue 11): first token <= 1.5 s with the page cache warm (the first run adds "
          "the NVRTC compiles the cubin cache then keeps); peak RSS <= 1.2x; eval <= 1.05x kernel")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
