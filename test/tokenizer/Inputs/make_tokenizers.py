#!/usr/bin/env python3
"""Writes small tokenizer.json files for the tests into OUT_DIR: a valid one
(tiny.json) and variants of it, each broken in one way.

Usage: make_tokenizers.py OUT_DIR
"""
import copy
import json
import os
import sys

ADDED = {"id": 3, "content": "<s>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}

TINY = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [ADDED],
    "normalizer": None,
    "pre_tokenizer": None,
    "post_processor": None,
    "decoder": None,
    "model": {
        "type": "BPE", "dropout": None, "unk_token": None,
        "continuing_subword_prefix": None, "end_of_word_suffix": None,
        "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
        "vocab": {"a": 0, "b": 1, "ab": 2, "<s>": 3},
        "merges": ["a b"],
    },
}

DELETE = object()


def edited(edits):
    """TINY with each (path, value) applied; a path is keys and indexes."""
    t = copy.deepcopy(TINY)
    for path, value in edits:
        node = t
        for key in path[:-1]:
            node = node[key]
        if value is DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return t


SPLIT = {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated",
         "invert": False}
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False,
              "trim_offsets": True, "use_regex": False}

VARIANTS = {
    "missing-model": [(["model"], DELETE)],
    "missing-merges": [(["model", "merges"], DELETE)],
    "missing-vocab": [(["model", "vocab"], DELETE)],
    "vocab-array": [(["model", "vocab"], ["a", "b"])],
    "vocab-id-string": [(["model", "vocab", "ab"], "2")],
    "vocab-id-negative": [(["model", "vocab", "ab"], -2)],
    "vocab-id-twice": [(["model", "vocab", "ab"], 1)],
    "merges-object": [(["model", "merges"], {"a": "b"})],
    "merge-no-space": [(["model", "merges"], ["ab"])],
    "merge-unknown": [(["model", "merges"], ["a c"])],
    "merge-result-unknown": [(["model", "merges"], ["b a"])],
    "merges-mixed": [(["model", "merges"], ["a b", ["a", "b"]])],
    "unknown-model": [(["model", "type"], "WordPiece")],
    "model-type-number": [(["model", "type"], 7)],
    "dropout": [(["model", "dropout"], 0.1)],
    "subword-prefix": [(["model", "continuing_subword_prefix"], "##")],
    "unk-unknown": [(["model", "unk_token"], "<unk>")],
    "fuse-unk-string": [(["model", "fuse_unk"], "yes")],
    "unknown-normalizer": [(["normalizer"], {"type": "NFKC"})],
    "normalizer-in-sequence": [(["normalizer"], {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "x"}, {"type": "Lowercase"}]})],
    "unknown-pre-tokenizer": [(["pre_tokenizer"], {"type": "Whitespace"})],
    "bad-regex": [(["pre_tokenizer"], dict(SPLIT, pattern={"Regex": "(a|b"}))],
    "bad-behavior": [(["pre_tokenizer"], dict(SPLIT, behavior="Dropped"))],
    "split-no-invert": [(["pre_tokenizer"], {k: v for k, v in SPLIT.items()
                                             if k != "invert"})],
    "pattern-both": [(["pre_tokenizer"], dict(SPLIT, pattern={"Regex": "a",
                                                              "String": "a"}))],
    "byte-level-not-last": [(["pre_tokenizer"], {"type": "Sequence",
                                                 "pretokenizers": [BYTE_LEVEL, SPLIT]})],
    "metaspace-not-first": [(["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
        SPLIT, {"type": "Metaspace", "replacement": "_", "prepend_scheme": "first"}]})],
    "metaspace-prefix-space": [(["pre_tokenizer"], {"type": "Metaspace", "replacement": "_",
                                                    "add_prefix_space": False})],
    "metaspace-scheme": [(["decoder"], {"type": "Metaspace", "replacement": "_",
                                        "prepend_scheme": "sometimes"})],
    "unknown-decoder": [(["decoder"], {"type": "Sequence", "decoders": [
        {"type": "Fuse"}, {"type": "WordPiece", "prefix": "##", "cleanup": True}]})],
    "strip-two-chars": [(["decoder"], {"type": "Strip", "content": "ab",
                                       "start": 1, "stop": 0})],
    "unknown-post-processor": [(["post_processor"], {"type": "BertProcessing",
                                                     "sep": ["</s>", 2], "cls": ["<s>", 3]})],
    "template-no-sequence": [(["post_processor"], {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}],
        "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}})],
    "template-unknown-special": [(["post_processor"], {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {}})],
    "template-id-out-of-range": [(["post_processor"], {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [99], "tokens": ["<s>"]}}})],
    "template-id-hole": [(["model", "vocab", "ab"], 4), (["post_processor"], {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [2], "tokens": ["<s>"]}}})],
    "added-id-mismatch": [(["added_tokens", 0, "id"], 7)],
    "added-missing-special": [(["added_tokens", 0, "special"], DELETE)],
    "added-new-id-mismatch": [(["added_tokens"], [dict(ADDED, content="<new>", id=9)])],
    "truncation": [(["truncation"], {"max_length": 8, "strategy": "LongestFirst",
                                     "stride": 0, "direction": "Right"})],
    "version-2": [(["version"], "2.0")],
    "top-level-array": None,
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    def write(name, text):
        with open(os.path.join(out, name), "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())

    write("tiny.json", json.dumps(TINY, indent=1))
    for name, edits in VARIANTS.items():
        if edits is not None:
            write(name + ".json", json.dumps(edited(edits), indent=1))
    write("top-level-array.json", "[]")
    text = json.dumps(TINY, indent=1)
    write("truncated.json", text[: len(text) // 2])
    write("trailing-text.json", text + "\n}")
    write("duplicate-key.json", text.replace('"version": "1.0"',
                                             '"version": "1.0", "version": "1.0"'))
    write("not-utf8.json", text.replace('"b": 1', '"\xff": 1').encode("latin-1"))


if __name__ == "__main__":
    main()
