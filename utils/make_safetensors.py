#!/usr/bin/env python3
"""Write small deterministic Llama-shaped checkpoints for the import tests.

  make_safetensors.py model OUT [options]   a model folder (config.json +
                                            model.safetensors or shards)
  make_safetensors.py corrupt OUT KIND      one deliberately broken file

Python standard library only. Weight values are multiples of 1/16 in
[-0.5, 0.5], exact in f32, bf16 and f16, so every dtype holds the same model.
"""
import argparse
import json
import os
import struct
import sys

DTYPE_SIZE = {"F32": 4, "BF16": 2, "F16": 2, "I8": 1, "F64": 8}


def value_at(seed, i):
    return (((i * 7 + seed * 13) % 17) - 8) / 16.0


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F64":
        return struct.pack("<%dd" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    if dtype == "BF16":
        out = bytearray()
        for v in values:  # values are exact in bf16: truncation is exact
            out += struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0] >> 16)[:2]
        return bytes(out)
    if dtype == "I8":
        return bytes((int(v * 16) & 0xFF) for v in values)
    raise ValueError(dtype)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def write_safetensors(path, tensors, pad_to=8):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % pad_to)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def model_tensors(a):
    h, q, kv = a.hidden, a.heads * a.head_dim, a.kv_heads * a.head_dim
    shapes = [("model.embed_tokens.weight", (a.vocab, h))]
    for l in range(a.layers):
        p = "model.layers.%d." % l
        shapes += [(p + "input_layernorm.weight", (h,)),
                   (p + "self_attn.q_proj.weight", (q, h)),
                   (p + "self_attn.k_proj.weight", (kv, h)),
                   (p + "self_attn.v_proj.weight", (kv, h)),
                   (p + "self_attn.o_proj.weight", (h, q)),
                   (p + "post_attention_layernorm.weight", (h,)),
                   (p + "mlp.gate_proj.weight", (a.inter, h)),
                   (p + "mlp.up_proj.weight", (a.inter, h)),
                   (p + "mlp.down_proj.weight", (h, a.inter))]
    shapes.append(("model.norm.weight", (h,)))
    if not a.tied:
        shapes.append(("lm_head.weight", (a.vocab, h)))
    for spec in a.reshape:
        name, dims = spec.split(":")
        shapes = [(n, tuple(int(d) for d in dims.split("x")) if n == name else s)
                  for n, s in shapes]
    shapes = [(n, s) for n, s in shapes if n not in a.drop]
    for spec in a.add:
        name, dims = spec.split(":")
        shapes.append((name, tuple(int(d) for d in dims.split("x"))))
    out = []
    for seed, (name, shape) in enumerate(shapes):
        dtype = a.dtype
        for spec in a.tensor_dtype:
            n, d = spec.split(":")
            if n == name:
                dtype = d
        values = [value_at(seed, i) for i in range(numel(shape))]
        for spec in a.value:
            n, rest = spec.split(":")
            index, v = rest.split("=")
            if n == name:
                values[int(index)] = float(v)
        out.append((name, dtype, shape, encode(values, dtype)))
    return out


def model_config(a):
    cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False,
           "head_dim": a.head_dim, "hidden_act": "silu",
           "hidden_size": a.hidden, "intermediate_size": a.inter,
           "max_position_embeddings": a.max_pos, "mlp_bias": False,
           "model_type": "llama", "num_attention_heads": a.heads,
           "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
           "rms_norm_eps": 1e-05, "tie_word_embeddings": a.tied,
           "vocab_size": a.vocab}
    torch_name = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}.get(a.dtype, "float32")
    rope = {"rope_type": "default"}
    if a.llama3:
        rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    if a.form == "hub":
        cfg["torch_dtype"] = torch_name
        cfg["rope_theta"] = 10000.0
        cfg["rope_scaling"] = rope if a.llama3 else None
    else:
        cfg["dtype"] = torch_name
        cfg["rope_parameters"] = dict(rope, rope_theta=10000.0)
    for spec in a.set:
        key, value = spec.split("=", 1)
        cfg[key] = json.loads(value)
    for key in a.unset:
        cfg.pop(key, None)
    return cfg


def edit_text(path, edits):
    """Apply OLD=>NEW text replacements (the first OLD each) to a written
    file: how tests make JSON that json.dump never writes (duplicate keys,
    text after the value)."""
    with open(path) as f:
        text = f.read()
    for spec in edits:
        old, new = spec.split("=>", 1)
        if old not in text:
            raise SystemExit("%s: no %r to edit" % (path, old))
        text = text.replace(old, new, 1)
    with open(path, "w") as f:
        f.write(text)


def write_model(a):
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(model_config(a), f, indent=2)
        f.write("\n")
    edit_text(os.path.join(a.out, "config.json"), a.edit_config)
    if a.no_weights:
        return
    tensors = model_tensors(a)
    if a.shards <= 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
        return
    per = (len(tensors) + a.shards - 1) // a.shards
    weight_map = {}
    for s in range(a.shards):
        part = tensors[s * per:(s + 1) * per]
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, a.shards)
        write_safetensors(os.path.join(a.out, fname), part)
        for name, _, _, _ in part:
            weight_map[name] = fname
    for spec in a.index_lie:
        name, fname = spec.split(":")
        weight_map[name] = fname
    index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)},
             "weight_map": weight_map}
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    edit_text(os.path.join(a.out, "model.safetensors.index.json"), a.edit_index)


def raw(path, header_bytes, data, header_len=None):
    n = len(header_bytes) if header_len is None else header_len
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", n) + header_bytes + data)


def write_corrupt(path, kind):
    good = encode([value_at(0, i) for i in range(6)], "F32")  # 24 bytes

    def header(entries):
        return json.dumps(entries).encode()

    ok_entry = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
    if kind == "short":
        with open(path, "wb") as f:
            f.write(b"\x05\x00\x00")
    elif kind == "header-past-end":
        h = header({"w": ok_entry})
        raw(path, h, good, header_len=len(h) + len(good) + 1)
    elif kind == "header-huge":
        raw(path, header({"w": ok_entry}), good, header_len=1 << 40)
    elif kind == "bad-json":
        raw(path, b'{"w": {"dtype": ', good)
    elif kind == "not-object":
        raw(path, b"[1, 2, 3]", good)
    elif kind == "unknown-dtype":
        raw(path, header({"w": dict(ok_entry, dtype="F33")}), good)
    elif kind == "bad-shape":
        raw(path, header({"w": dict(ok_entry, shape=[2, -3])}), good)
    elif kind == "offsets-reversed":
        raw(path, header({"w": dict(ok_entry, data_offsets=[24, 0])}), good)
    elif kind == "offsets-past-end":
        raw(path, header({"w": dict(ok_entry, data_offsets=[0, 48])}), good)
    elif kind == "size-mismatch":
        raw(path, header({"w": dict(ok_entry, shape=[2, 2])}), good)
    elif kind == "overlap":
        raw(path, header({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                          "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}), good)
    elif kind == "truncated-data":
        raw(path, header({"w": ok_entry}), good[:10])
    elif kind == "no-tensors":
        raw(path, b"{}", b"")
    elif kind == "metadata-only":
        raw(path, header({"__metadata__": {"format": "pt"}}), b"")
    elif kind == "trailing-garbage":  # inside the header length, after the object
        raw(path, header({"w": ok_entry}) + b"  x ", good)
    else:
        raise SystemExit("unknown corruption kind: " + kind)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model")
    m.add_argument("out")
    m.add_argument("--hidden", type=int, default=16)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--heads", type=int, default=2)
    m.add_argument("--kv-heads", type=int, default=1)
    m.add_argument("--head-dim", type=int, default=8)
    m.add_argument("--inter", type=int, default=24)
    m.add_argument("--vocab", type=int, default=32)
    m.add_argument("--max-pos", type=int, default=64)
    m.add_argument("--tied", action="store_true")
    m.add_argument("--llama3", action="store_true")
    m.add_argument("--dtype", default="F32", choices=sorted(DTYPE_SIZE))
    m.add_argument("--form", default="v5", choices=["v5", "hub"])
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--no-weights", action="store_true")
    m.add_argument("--set", action="append", default=[], help="KEY=JSON in config.json")
    m.add_argument("--unset", action="append", default=[], help="drop KEY from config.json")
    m.add_argument("--drop", action="append", default=[], help="omit TENSOR")
    m.add_argument("--add", action="append", default=[], help="extra TENSOR:AxB")
    m.add_argument("--reshape", action="append", default=[], help="TENSOR:AxB")
    m.add_argument("--tensor-dtype", action="append", default=[], help="TENSOR:DTYPE")
    m.add_argument("--value", action="append", default=[],
                   help="TENSOR:INDEX=FLOAT (nan, inf, 1e6...) for one element")
    m.add_argument("--index-lie", action="append", default=[], help="TENSOR:FILE in the index")
    m.add_argument("--edit-config", action="append", default=[], help="OLD=>NEW in config.json's text")
    m.add_argument("--edit-index", action="append", default=[], help="OLD=>NEW in the index's text")
    c = sub.add_parser("corrupt")
    c.add_argument("out")
    c.add_argument("kind")
    a = p.parse_args(argv)
    if a.cmd == "model":
        write_model(a)
    else:
        write_corrupt(a.out, a.kind)


if __name__ == "__main__":
    main(sys.argv[1:])
