#!/usr/bin/env python3
"""Regenerates the fuzz drivers' seed corpora, fuzz/corpus/<target>/, and
their dictionaries, fuzz/dict/<target>.dict.

  fuzz/make_corpus.py [--amk-opt PATH]

Seeds are small copies of the project's fixtures: programs from the tests
(JSON ones written by amk-opt from the .amkir tests, so they are real
programs in the JSON form), config.json files from examples/ and
../shared/fixtures (when present), and tiny safetensors files written here
covering every dtype, rank 0 to 3, empty tensors, metadata and padding.
Small on purpose: libFuzzer mutates small inputs much faster, and the
drivers' -max_len (utils/fuzz.sh) is 8 KiB. The result is committed; run
this again after adding a fixture worth seeding from.

A dictionary lists the words of the format that random mutation would
hardly find: keys, op, dtype and kind names, taken from the string literals
of the reader's sources (and include/amk/tables.h), plus the format's
punctuation and literals.
"""
import argparse
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
MAX_SEED = 8192


def reset(target):
    out = os.path.join(ROOT, "fuzz", "corpus", target)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    return out


def copy(out, src, name=None):
    if os.path.getsize(src) > MAX_SEED:
        sys.exit("make_corpus: %s is larger than %d bytes" % (src, MAX_SEED))
    shutil.copyfile(src, os.path.join(out, name or os.path.basename(src)))


def rel(*parts):
    return os.path.join(ROOT, *parts)


AMKIR_SEEDS = ["test/text/roundtrip.amkir", "test/text/defaults.amkir",
               "test/text/target-defaults.amkir",
               "test/text/Inputs/every-form.amkir", "test/opt/Inputs/small.amkir",
               "test/passes/Inputs/chain.amkir", "test/passes/Inputs/fanout.amkir",
               "test/passes/Inputs/llama-layer.amkir"]


def amkir_text(amk_opt):
    out = reset("amkir_text")
    for src in AMKIR_SEEDS:
        copy(out, rel(src))


def json_module(amk_opt):
    out = reset("json_module")
    for pattern in ["test/json/Inputs/programs/hm_*.json",
                    "test/json/Inputs/programs/random_*.amk.json",
                    "test/json/Inputs/bad/*.json"]:
        for src in sorted(glob.glob(rel(pattern))):
            prefix = "bad_" if "/bad/" in src else ""
            copy(out, src, prefix + os.path.basename(src))
    # The .amkir seeds in the JSON form the reference writes (those that
    # stay small: JSON is three times as long as the text).
    for src in AMKIR_SEEDS:
        name = os.path.splitext(os.path.basename(src))[0] + ".amk.json"
        path = os.path.join(out, name)
        subprocess.run([amk_opt, rel(src), "-disable-verify", "--emit=json",
                        "-o", path], check=True)
        if os.path.getsize(path) > MAX_SEED:
            os.remove(path)


def model_config(amk_opt):
    out = reset("model_config")
    for src in sorted(glob.glob(rel("examples/configs/*/config.json"))):
        copy(out, src, os.path.basename(os.path.dirname(src)) + ".json")
    for src in sorted(glob.glob(os.path.join(SHARED, "fixtures/*/*/config.json"))):
        copy(out, src, os.path.basename(os.path.dirname(src)) + ".json")
    for src in sorted(glob.glob(os.path.join(SHARED, "fixtures/*/*/generation_config.json")))[:1]:
        copy(out, src, "generation_config.json")  # valid JSON, not a model


def safetensors_file(entries, pad_to=8, metadata=None):
    """entries: (name, dtype, shape, data bytes) in file order."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, blob in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % pad_to)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def safetensors(amk_opt):
    out = reset("safetensors")
    f32 = struct.pack("<6f", 1.0, -2.0, 0.5, 3.0, -0.25, 65536.0)
    seeds = {
        "f32-2x3": [("w", "F32", [2, 3], f32)],
        "mixed": [("model.embed_tokens.weight", "BF16", [2, 2], b"\x80\x3f\x00\xc0\x00\x3f\x00\x00"),
                  ("model.norm.weight", "F16", [3], b"\x00\x3c\x00\xc0\x00\x7c"),
                  ("lm_head.weight", "F64", [1, 1], struct.pack("<d", -1.5))],
        "every-dtype": [(d.lower(), d, [2], bytes(range(2 * n)))
                        for d, n in [("F64", 8), ("F32", 4), ("F16", 2), ("BF16", 2),
                                     ("F8_E4M3", 1), ("F8_E5M2", 1), ("I64", 8),
                                     ("I32", 4), ("I16", 2), ("I8", 1), ("U64", 8),
                                     ("U32", 4), ("U16", 2), ("U8", 1), ("BOOL", 1)]],
        "scalar-and-empty": [("scalar", "F32", [], struct.pack("<f", 7.0)),
                             ("empty", "F32", [0, 4], b""),
                             ("rank3", "I8", [1, 2, 2], b"\x01\x02\x03\x04")],
        "nan-inf": [("x", "F32", [3], struct.pack("<3f", float("nan"), float("inf"), -0.0))],
    }
    for name, entries in seeds.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(safetensors_file(entries, metadata={"format": "pt"}))
    with open(os.path.join(out, "empty-header.safetensors"), "wb") as f:
        f.write(safetensors_file([]))
    with open(os.path.join(out, "metadata-only.safetensors"), "wb") as f:
        f.write(safetensors_file([], metadata={"format": "pt", "note": "\u00e9"}))
    with open(os.path.join(out, "unpadded-out-of-order.safetensors"), "wb") as f:
        header = json.dumps({"b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},
                             "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}).encode()
        f.write(struct.pack("<Q", len(header)) + header + b"\x01\x02\x03\x04")


def literals(*sources):
    words = set()
    for src in sources:
        with open(rel(src)) as f:
            words.update(re.findall(r'"([A-Za-z_][A-Za-z0-9_.]*)"', f.read()))
    return words


JSON_TOKENS = ["{", "}", "[", "]", ":", ",", "null", "true", "false", "-0",
               "1e308", "1.0", "NaN", "Infinity", "\\u0000", "\\ud800"]


def write_dict(target, words, quoted_words, tokens):
    """`words` are written as they are and, with `quoted_words`, also as a
    JSON string."""
    entries = set(tokens) | set(words)
    if quoted_words:
        entries |= {'"%s"' % w for w in words}
    os.makedirs(rel("fuzz", "dict"), exist_ok=True)
    with open(rel("fuzz", "dict", target + ".dict"), "w") as f:
        f.write("# Written by fuzz/make_corpus.py.\n")
        for e in sorted(entries):
            f.write('"%s"\n' % "".join(
                c if c.isprintable() and c not in '"\\' else "\\x%02X" % ord(c)
                for c in e))


def dictionaries():
    tables = "include/amk/tables.h"
    write_dict("json_module", literals("frontend/json_read.c", tables), True,
               JSON_TOKENS)
    write_dict("amkir_text", literals("frontend/lexer.re", tables), False,
               ["%", "#", "->", "=", "{", "}", "[", "]", "(", ")", ",", ">=",
                "amkir 0.2.0, abi 0.2", "\n", "\"\"", "//"])
    write_dict("model_config", literals("passes/import_config.c"), True,
               JSON_TOKENS)
    write_dict("safetensors", literals("include/amk/safetensors.h",
                                       "frontend/safetensors.c"), True,
               JSON_TOKENS + ["__metadata__", "data_offsets", "\x00" * 7])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--amk-opt", default=rel("build/bin/amk-opt"))
    a = parser.parse_args()
    for make in (amkir_text, json_module, model_config, safetensors):
        make(a.amk_opt)
    dictionaries()


if __name__ == "__main__":
    main()
