#!/usr/bin/env python3
"""Checks amk-tokenize on the trained tiny-code model's folder: the golden
prompt encodes to the golden prompt ids, the golden continuation decodes to
the golden text, and those texts round-trip.

Usage: check_tiny_code.py AMK_TOKENIZE FIXTURE_DIR TMP_DIR
"""
import json
import os
import subprocess
import sys


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def main():
    tool, fixture, tmp = sys.argv[1:4]
    os.makedirs(tmp, exist_ok=True)
    failures = 0
    prompt_text = json.load(open(os.path.join(fixture, "golden.json")))["prompt_text"]
    prompt_file = os.path.join(tmp, "prompt.txt")
    with open(prompt_file, "w") as f:
        f.write(prompt_text)
    prompt_ids = [int(i) for i in run(tool, "--tokenizer", fixture, "--input",
                                      prompt_file).strip().split(",")]
    texts = [prompt_text]
    # golden-bf16.json has the same prompt and its own continuation, as ids.
    for name in ("golden.json", "golden-bf16.json"):
        golden = json.load(open(os.path.join(fixture, name)))
        if prompt_ids != golden["prompt"]:
            print(f"{name}: prompt ids {prompt_ids}, want {golden['prompt']}")
            failures += 1
        text = run(tool, "--tokenizer", fixture, "--decode",
                   ",".join(map(str, golden["generated"])))[:-1]
        if "generated_text" in golden and text != golden["generated_text"]:
            print(f"{name}: generated text {text!r}, want {golden['generated_text']!r}")
            failures += 1
        texts += [text, prompt_text + text]
    batch = os.path.join(tmp, "batch.json")
    json.dump(texts, open(batch, "w"))
    out = json.loads(run(tool, "--tokenizer", fixture, "--batch", batch))
    for t, o in zip(texts, out):
        if o["decoded"] != t:
            print(f"{t!r} decodes back as {o['decoded']!r}")
            failures += 1
    print(f"tiny-code: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
