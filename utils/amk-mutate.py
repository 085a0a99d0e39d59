#!/usr/bin/env python3
"""amk-mutate: derive unsafe (or deliberately safe) variants of a real lowering.

  amk-mutate.py KIND IN.json [-o OUT.json]
  amk-mutate.py --list

Each KIND targets one validator check that the conformance population does
not exercise (or exercises only one way). The input is a reference-style
decode lowering such as shared/conformance/toy2L_pos0.amk.json; tasks are
found by label, so any layer count or tiling works. Output is JSON in the
reference's format (json.dumps indent=2). Standard library only.
"""
import argparse
import json
import sys


def by_label(prog, suffix):
    for t in prog["tasks"]:
        if t["label"].endswith(suffix):
            return t
    sys.exit(f"amk-mutate: no task labelled *{suffix}")


def buffer_named(prog, name):
    for b in prog["buffers"]:
        if b["name"] == name:
            return b
    sys.exit(f"amk-mutate: no buffer named {name}")


def tiles_of(prog, prefix):
    ts = [t for t in prog["tasks"] if t["label"].startswith(prefix + "[t")]
    if len(ts) < 2:
        sys.exit(f"amk-mutate: {prefix} needs at least 2 tiles")
    return ts


def new_counter(prog, note):
    cid = len(prog["counters"])
    prog["counters"].append({"id": cid, "init": 0, "note": note})
    return cid


def renumber(prog):
    """Make task ids list positions again after reordering the task list."""
    old_to_new = {t["id"]: i for i, t in enumerate(prog["tasks"])}
    for i, t in enumerate(prog["tasks"]):
        t["id"] = i
    cfg = prog.get("config")
    if cfg and isinstance(cfg.get("sm_assignment"), dict):
        cfg["sm_assignment"] = {str(old_to_new[int(k)]): v
                                for k, v in cfg["sm_assignment"].items()}


# ---- mutations ---------------------------------------------------------------

def waw_overlap(p):
    """Two tiles of one projection write overlapping columns."""
    t0, t1 = tiles_of(p, "L0.q_proj")[:2]
    t1["params"]["n_off"] = t0["params"]["n_off"] + t0["params"]["N_tile"] // 2


def waw_unordered(p):
    """One tile of a projection signals its own counter: writers share none."""
    ts = tiles_of(p, "L0.o_proj")
    c = new_counter(p, "split o_proj tile")
    ts[-1]["out_counter"] = c
    # Keep every reader ordered after all writers (so only WAW can fire).
    for t in p["tasks"]:
        if any(w["counter"] == ts[0]["out_counter"] for w in t["waits"]):
            for w in t["waits"]:
                if w["counter"] == ts[0]["out_counter"]:
                    w["threshold"] = len(ts) - 1
            t["waits"].append({"counter": c, "threshold": 1})


def waw_ordered(p):
    """SAFE: a second, whole-buffer writer ordered after the first (a total
    happens-before order of the writers)."""
    norm = by_label(p, "L0.post_norm")
    c = new_counter(p, "rewrite L0.mn")
    for t in p["tasks"]:
        for w in t["waits"]:
            if w["counter"] == norm["out_counter"]:
                w["counter"] = c  # readers now wait for the second writer
    again = dict(norm, id=len(p["tasks"]), out_counter=c,
                 waits=[{"counter": norm["out_counter"], "threshold": 1}],
                 label="L0.post_norm.again")
    p["tasks"].append(again)


def pages_alias(p):
    """Two buffers written by parallel tasks share one page."""
    q, k = buffer_named(p, "L0.q"), buffer_named(p, "L0.k")
    p["pages"] = {"buffer_to_page": {str(q["id"]): 0, str(k["id"]): 0},
                  "pages": [{"id": 0, "space": "GLOBAL_SCRATCH", "nbytes": 256,
                             "live_start": -1, "live_end": -1}]}


def pages_ordered(p):
    """SAFE: every use of L0.an precedes the writer of L0.mn (same page)."""
    a, b = buffer_named(p, "L0.an"), buffer_named(p, "L0.mn")
    p["pages"] = {"buffer_to_page": {str(a["id"]): 0, str(b["id"]): 0},
                  "pages": [{"id": 0, "space": "GLOBAL_SCRATCH", "nbytes": 256,
                             "live_start": -1, "live_end": -1}]}


def pages_missing_buffer(p):
    """A page binding names a buffer that does not exist."""
    pages_ordered(p)
    p["pages"]["buffer_to_page"]["999"] = 0


def onchip_across_sms(p):
    """An SMEM buffer written on SM 0 and read on SM 1."""
    buffer_named(p, "L0.an")["space"] = "SMEM"
    by_label(p, "L0.input_norm")["sm"] = 0
    tiles_of(p, "L0.q_proj")[0]["sm"] = 1


def onchip_unassigned(p):
    """SAFE with a warning: an SMEM buffer before SM assignment."""
    buffer_named(p, "L0.an")["space"] = "SMEM"


def sm_queue_order(p):
    """Consumer before its producer in one SM's queue."""
    i = p["tasks"].index(by_label(p, "L0.input_norm"))
    p["tasks"][i - 1], p["tasks"][i] = p["tasks"][i], p["tasks"][i - 1]
    renumber(p)
    p["tasks"][i - 1]["sm"] = 0
    p["tasks"][i]["sm"] = 0


def sm_out_of_range(p):
    p["tasks"][0]["sm"] = p["target"]["num_sms"]


def ids_not_positions(p):
    """SAFE: task ids are not list positions (nothing refers to task ids)."""
    for t in p["tasks"]:
        t["id"] += 1000


def write_read_only(p):
    """A new, unordered task overwrites an IO_INPUT others read."""
    src = buffer_named(p, "reshape_id0")
    c = new_counter(p, "clobber")
    p["tasks"].append({"id": len(p["tasks"]), "op": "COPY", "inputs": [src["id"]],
                       "outputs": [src["id"]], "out_counter": c, "waits": [],
                       "params": {}, "sm": None, "est_bytes": 0, "est_flops": 0,
                       "label": "clobber"})


def k_mismatch(p):
    by_label(p, "L0.q_proj[t0]")["params"]["K"] += 1


def tile_overflow(p):
    last = tiles_of(p, "L0.q_proj")[-1]
    last["params"]["n_off"] += last["params"]["N_tile"]


def zero_k(p):
    by_label(p, "L0.q_proj[t0]")["params"]["K"] = 0


def kv_pos_out_of_range(p):
    t = by_label(p, "L0.k_append")
    cache = next(b for b in p["buffers"] if b["id"] == t["outputs"][0])
    t["params"]["pos"] = cache["shape"][0]


def kv_window_overflow(p):
    t = by_label(p, "L0.attention")
    cache = next(b for b in p["buffers"] if b["id"] == t["inputs"][1])
    t["params"]["kv_len"] = cache["shape"][0] + 1


def kv_len_zero(p):
    by_label(p, "L0.attention")["params"]["kv_len"] = 0


def heads_not_divisible(p):
    t = by_label(p, "L0.attention")
    t["params"]["n_kv_heads"] = t["params"]["n_heads"] + 1


def head_dim_mismatch(p):
    by_label(p, "L0.attention")["params"]["head_dim"] *= 2


def hidden_mismatch(p):
    by_label(p, "L0.input_norm")["params"]["hidden"] //= 2


def rope_odd_head_dim(p):
    by_label(p, "L0.rope_q")["params"]["head_dim"] -= 1


def shape_float(p):
    b = buffer_named(p, "L0.an")
    b["shape"][-1] = b["shape"][-1] + 0.5


def shape_zero(p):
    buffer_named(p, "L0.an")["shape"][-1] = 0


MUTATIONS = {
    "waw-overlap": waw_overlap,
    "waw-unordered": waw_unordered,
    "waw-ordered": waw_ordered,
    "pages-alias": pages_alias,
    "pages-ordered": pages_ordered,
    "pages-missing-buffer": pages_missing_buffer,
    "onchip-across-sms": onchip_across_sms,
    "onchip-unassigned": onchip_unassigned,
    "sm-queue-order": sm_queue_order,
    "sm-out-of-range": sm_out_of_range,
    "ids-not-positions": ids_not_positions,
    "write-read-only": write_read_only,
    "k-mismatch": k_mismatch,
    "tile-overflow": tile_overflow,
    "zero-k": zero_k,
    "kv-pos-out-of-range": kv_pos_out_of_range,
    "kv-window-overflow": kv_window_overflow,
    "kv-len-zero": kv_len_zero,
    "heads-not-divisible": heads_not_divisible,
    "head-dim-mismatch": head_dim_mismatch,
    "hidden-mismatch": hidden_mismatch,
    "rope-odd-head-dim": rope_odd_head_dim,
    "shape-float": shape_float,
    "shape-zero": shape_zero,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", nargs="?")
    ap.add_argument("input", nargs="?")
    ap.add_argument("-o", "--output")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for name, fn in MUTATIONS.items():
            print(f"{name:22} {(fn.__doc__ or '').splitlines()[0] if fn.__doc__ else ''}")
        return 0
    if args.kind not in MUTATIONS or not args.input:
        ap.error(f"KIND must be one of: {', '.join(MUTATIONS)}")
    with open(args.input, encoding="utf-8") as f:
        prog = json.load(f)
    MUTATIONS[args.kind](prog)
    text = json.dumps(prog, indent=2)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
