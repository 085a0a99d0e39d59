"""Prints the ids of a text's single-byte tokens in a byte-level BPE
tokenizer.json, comma-separated: one token per UTF-8 byte, so that a
character of several bytes is split across tokens. The byte-to-character
map is GPT-2's (the ByteLevel pre-tokenizer's), written out here so that
the ids do not come from the tokenizer under test.

    byte_tokens.py TOKENIZER_JSON TEXT
"""
import json
import sys


def byte_chars():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


with open(sys.argv[1], encoding="utf-8") as f:
    vocab = json.load(f)["model"]["vocab"]
chars = byte_chars()
print(",".join(str(vocab[chars[b]]) for b in sys.argv[2].encode("utf-8")))
