"""Builds a small model folder for amk-run's text and chat tests.

    make_text_model.py OUT TOKENIZER_JSON [--special TOKEN ...] [--template FILE]
                       [--bos TOKEN] [--eos TOKEN]

OUT gets examples/llama-tiny's config.json with vocab_size set to the
tokenizer's size (run with --random-weights: there are no weights), the
tokenizer.json with the --special tokens added after its vocabulary (as the
`tokenizers` package numbers added tokens), and, with --template, a
tokenizer_config.json whose chat_template is that file's text.
"""
import argparse
import json
import os

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("tokenizer")
parser.add_argument("--special", nargs="*", default=[])
parser.add_argument("--template")
parser.add_argument("--bos")
parser.add_argument("--eos")
args = parser.parse_args()

here = os.path.dirname(os.path.abspath(__file__))
examples = os.path.join(here, "..", "..", "..", "examples")
os.makedirs(args.out, exist_ok=True)

with open(args.tokenizer, encoding="utf-8") as f:
    tok = json.load(f)
ids = set(tok["model"]["vocab"].values()) | {a["id"] for a in tok["added_tokens"]}
next_id = max(ids) + 1
for content in args.special:
    tok["added_tokens"].append({"id": next_id, "content": content, "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": True})
    next_id += 1
with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)

with open(os.path.join(examples, "llama-tiny", "config.json")) as f:
    config = json.load(f)
config["vocab_size"] = next_id
for key in ("bos_token_id", "eos_token_id"):
    config.pop(key, None)
with open(os.path.join(args.out, "config.json"), "w") as f:
    json.dump(config, f, indent=1)

if args.template or args.bos or args.eos:
    tc = {}
    if args.template:
        with open(args.template, encoding="utf-8") as f:
            tc["chat_template"] = f.read()
    if args.bos:
        tc["bos_token"] = args.bos
    if args.eos:
        tc["eos_token"] = args.eos
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False)
