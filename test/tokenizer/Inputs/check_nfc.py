#!/usr/bin/env python3
"""Checks the NFC normalizer against Python's unicodedata.normalize.

Usage: check_nfc.py AMK_TOKENIZE BYTE_LEVEL_TOKENIZER_JSON TMP_DIR

Gives the byte-level tokenizer an NFC normalizer; through it,
decode(encode(s)) is NFC(s). The strings are seeded mixes of letters,
combining marks (out of order, stacked, blocked), Hangul jamo and
syllables, singletons and composition exclusions, all from Unicode 6 or
earlier so that any Python's tables agree.
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

MARKS = [chr(c) for c in range(0x300, 0x36F)] + [
    "\u0323", "\u093c", "\u05b0", "\u05b4", "\u0e48", "\u3099", "\u309a",
    "\u0b3e", "\u0cd5", "\u0cc2", "\u0653", "\u0654", "\u0655"]
BASES = list("aeiouyAEIOUYnNcCsSzZwW ") + [
    "\u1100", "\u1112", "\u1161", "\u1175", "\u11a8", "\u11c2", "\uac00",
    "\ud7a3", "\u0915", "\u0b47", "\u0cc6", "\u304b", "\u30cf", "\u212b",
    "\u2126", "\u0958", "\u1e0b", "\u00c5", "\u0f73", "\u0344", "\u0627",
    "\u0648", "\u00e9", "\u01d5", "\u1e69", "\u4e2d"]


def main():
    tool, tokenizer, tmp = sys.argv[1:4]
    os.makedirs(tmp, exist_ok=True)
    t = json.load(open(tokenizer, encoding="utf-8"))
    t["normalizer"] = {"type": "NFC"}
    nfc_tokenizer = os.path.join(tmp, "nfc.json")
    json.dump(t, open(nfc_tokenizer, "w"))
    rng = random.Random(15)
    texts = ["".join(rng.choice(MARKS) if rng.random() < 0.45 else rng.choice(BASES)
                     for _ in range(rng.randint(0, 12))) for _ in range(5000)]
    batch = os.path.join(tmp, "in.json")
    json.dump(texts, open(batch, "w"))
    out = json.loads(subprocess.run([tool, "--tokenizer", nfc_tokenizer, "--batch", batch],
                                    check=True, capture_output=True, text=True).stdout)
    differ = 0
    for text, o in zip(texts, out):
        want = unicodedata.normalize("NFC", text)
        if o["decoded"] != want:
            differ += 1
            if differ <= 5:
                print(f"NFC({ascii(text)}): want {ascii(want)}, got {ascii(o['decoded'])}")
    print(f"nfc: {len(texts)} strings, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
