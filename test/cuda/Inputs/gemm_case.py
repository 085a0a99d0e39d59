#!/usr/bin/env python3
"""GEMM_TILE test programs, their weights and an independent reference
(Python standard library only).

  gemm_case.py program NAME OUT.amkir   write the program of case NAME
  gemm_case.py weights NAME DIR         write DIR/model.safetensors for it
  gemm_case.py check NAME DIR LOGITS.json [--rtol R]
      compare the first row of amk-run --dump-logits (the case's output,
      flattened) with out = x W^T (+ b) computed here in double from the
      checkpoint's values: each element within R * |ref| + R * max |ref|
      (R: 2^-7 for a bf16/f16 output, 1e-5 for f32). Prints `NAME: N
      outputs match (max |diff| D)` or the first mismatches and exits 1.
  gemm_case.py names                    the case names (the benchmarks,
                                        bench and bench-wide, are not listed)

A case is out[M, N] = x[M, K] W[N, K]^T (+ bias[N]), x and W in one dtype,
cut into GEMM_TILE tasks by its row and column splits. Inputs are in the
checkpoint (x is a WEIGHT buffer, so no activation feeds it); values are
multiples of 1/16 in [-1/2, 1/2] (exact in bf16 and f16) from a seeded
formula, so the products and sums the reference forms are exact in double.
"""
import json
import struct
import sys

# name: (M, K, N, input dtype, output dtype, bias dtype or None,
#        row splits (M_tile of each task row), column splits (N_tile each))
CASES = {
    # By hand: 2 x 4 x 3, checked against literal values in gemm-vm.test.
    "tiny": (2, 4, 3, "bf16", "f32", "f32", [1, 1], [2, 1]),
    # Whole 128 x 128 sub-tiles, several per task, two tasks splitting N.
    "aligned": (256, 256, 512, "bf16", "bf16", None, [256], [256, 256]),
    # Nothing a multiple of the tile: M 200, N 300, K 72 (K % 32 = 8),
    # splits at odd places, a bias.
    "ragged": (200, 72, 300, "bf16", "f32", "bf16", [77, 123], [130, 37, 133]),
    # f16 inputs and output, one task of two sub-tiles with a short last one.
    "f16": (64, 136, 192, "f16", "f16", None, [64], [192]),
    # bf16 output of even width split at an odd column (n_off 67): the
    # paired 16-bit stores must not assume an even column.
    "odd-split": (96, 40, 200, "bf16", "bf16", None, [96], [67, 133]),
    # A tall thin task (M 512 in one task: four sub-tile rows) with an f32
    # output of an odd width.
    "tall": (512, 64, 45, "bf16", "f32", None, [512], [45]),
}
# The microbenchmark: one 512 x 8192 x 2048 GEMM (Llama-3.2-1B's gate|up
# projection over a 512-token prompt) in tasks of one sub-tile each: 256
# tasks of 128 x 128 (bench: about two per SM of an H100) or 128 of
# 128 x 256 (bench-wide, for AMK_CUDA_GEMM_TILE_N=256: one wave).
BENCH = {
    "bench": (512, 2048, 8192, "bf16", "bf16", None, [128] * 4, [128] * 64),
    "bench-wide": (512, 2048, 8192, "bf16", "bf16", None, [128] * 4, [256] * 32),
}


def case(name):
    if name in BENCH:
        return BENCH[name]
    if name not in CASES:
        sys.exit("gemm_case.py: no case '%s' (have %s, %s)"
                 % (name, ", ".join(CASES), ", ".join(BENCH)))
    return CASES[name]


def value(seed, i):
    return (((i * 7 + seed * 13 + (i // 5) * 3) % 17) - 8) / 16.0


def tensors(name):
    m, k, n, _, _, bdt, _, _ = case(name)
    if name == "tiny":
        x = [1, 2, 0, -1,
             0.5, 0, 1, 2]
        w = [1, 0, 0, 0,
             0, 1, 1, 0,
             0.25, 0.25, 0.25, 0.25]
        b = [0, 10, -1]
        return {"x": x, "w": w, "b": b}
    t = {"x": [value(1, i) for i in range(m * k)], "w": [value(2, i) for i in range(n * k)]}
    if bdt:
        t["b"] = [value(3, i) for i in range(n)]
    return t


def program(name):
    m, k, n, xdt, odt, bdt, rows, cols = case(name)
    assert sum(rows) == m and sum(cols) == n
    lines = ["; GEMM_TILE case '%s': out[%d, %d] = x[%d, %d] W[%d, %d]^T%s (gemm_case.py)"
             % (name, m, n, m, k, n, k, " + b" if bdt else ""),
             "amkir 0.2.0, abi 0.2", 'model "."', "target h200",
             'meta {model = "gemm-%s"}' % name,
             "buffer %token_id : i32[1] io_input",
             'buffer %%x : %s[%d, %d] weight source "x"' % (xdt, m, k),
             'buffer %%w : %s[%d, %d] weight source "w"' % (xdt, n, k)]
    if bdt:
        lines.append('buffer %%b : %s[%d] weight source "b"' % (bdt, n))
    lines.append("buffer %%out : %s[%d, %d] io_output" % (odt, m, n))
    lines.append('counter #out "gemm"')
    ins = "%x, %w, %b" if bdt else "%x, %w"
    tid, m_off = 0, 0
    for mt in rows:
        n_off = 0
        for nt in cols:
            lines.append("task %d gemm_tile(%s) -> %%out signal #out {K = %d, N_tile = %d, "
                         "n_off = %d, M_tile = %d, m_off = %d} label \"gemm[%d]\""
                         % (tid, ins, k, nt, n_off, mt, m_off, tid))
            tid += 1
            n_off += nt
        m_off += mt
    return "\n".join(lines) + "\n"


def encode(vals, dt):
    if dt == "f32":
        return struct.pack("<%df" % len(vals), *vals), "F32"
    if dt == "f16":
        return struct.pack("<%de" % len(vals), *vals), "F16"
    # bf16: the values are exact, so the top half of the f32 bits.
    raw = struct.pack("<%df" % len(vals), *vals)
    return b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4)), "BF16"


def weights(name, out_dir):
    m, k, n, xdt, _, bdt, _, _ = case(name)
    t = tensors(name)
    shapes = {"x": ([m, k], xdt), "w": ([n, k], xdt), "b": ([n], bdt)}
    header, blobs, off = {}, [], 0
    for key in sorted(t):
        data, st = encode(t[key], shapes[key][1])
        header[key] = {"dtype": st, "shape": shapes[key][0], "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(out_dir + "/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def reference(name):
    m, k, n, _, _, bdt, _, _ = case(name)
    t = tensors(name)
    x, w, b = t["x"], t["w"], t.get("b")
    out = []
    for i in range(m):
        xr = x[i * k:(i + 1) * k]
        for j in range(n):
            wr = w[j * k:(j + 1) * k]
            s = sum(a * c for a, c in zip(xr, wr))
            out.append(s + (b[j] if b else 0.0))
    return out


def check(name, logits_path, rtol):
    got = json.load(open(logits_path))[0]
    ref = reference(name)
    if len(got) != len(ref):
        print("%s: %d outputs, want %d" % (name, len(got), len(ref)))
        return 1
    scale = max(abs(v) for v in ref) or 1.0
    bad, worst = [], 0.0
    for i, (g, r) in enumerate(zip(got, ref)):
        d = abs(g - r) if g == g else float("inf")
        worst = max(worst, d)
        if d > rtol * abs(r) + rtol * scale:
            bad.append((i, g, r))
    if bad:
        n = case(name)[2]
        for i, g, r in bad[:8]:
            print("%s: out[%d, %d] = %r, want %r" % (name, i // n, i % n, g, r))
        print("%s: %d of %d outputs differ (max |diff| %g)" % (name, len(bad), len(ref), worst))
        return 1
    print("%s: %d outputs match (max |diff| %g)" % (name, len(ref), worst))
    return 0


def main():
    a = sys.argv[1:]
    if a[:1] == ["names"]:
        print(" ".join(CASES))
        return 0
    if len(a) >= 3 and a[0] == "program":
        open(a[2], "w").write(program(a[1]))
        return 0
    if len(a) >= 3 and a[0] == "weights":
        weights(a[1], a[2])
        return 0
    if len(a) >= 4 and a[0] == "check":
        odt = case(a[1])[4]
        rtol = 1e-5 if odt == "f32" else 2.0 ** -7
        if "--rtol" in a:
            rtol = float(a[a.index("--rtol") + 1])
        return check(a[1], a[3], rtol)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
