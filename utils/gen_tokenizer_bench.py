#!/usr/bin/env python3
"""Writes deterministic text for the tokenizer benchmark, as JSON arrays of
strings (documents of about 2 KB), one file per kind of text.

Usage: gen_tokenizer_bench.py OUT_DIR [--megabytes N] [--seed S]

Kinds: prose (English sentences), code (Python- and C-like source),
scripts (Chinese, Japanese, Russian, Arabic, Hindi, Greek, Korean), digits
(numbers, dates, tables), emoji (emoji with words, ZWJ sequences, flags),
and mixed (the documents of all of them, interleaved). Each kind gets N MB
(default 1); the same seed gives the same bytes on every machine.
"""
import argparse
import json
import os
import random

WORDS = (
    "the of and to in is was for that with as on by at from his her it an "
    "were are which this be or had not but have one their they been has "
    "more when who its also time first new after would two other into only "
    "most over many some such years these could then about world people "
    "between during under city state through where before while because "
    "system number water history government small large early later "
    "known found called several however although within without across "
    "music river school family company language country between around "
    "development important different national research example problem"
).split()
NAMES = "Alice Bob Carol London Paris Tokyo Python Linux Europe Monday".split()
CONTRACTIONS = ["don't", "it's", "we're", "they'll", "I'm", "you'd", "can't",
                "she's", "we've", "isn't"]


def prose_sentence(rng):
    n = rng.randint(6, 22)
    words = []
    for i in range(n):
        r = rng.random()
        if r < 0.06:
            words.append(rng.choice(NAMES))
        elif r < 0.10:
            words.append(rng.choice(CONTRACTIONS))
        else:
            words.append(rng.choice(WORDS))
        if i < n - 1 and rng.random() < 0.08:
            words[-1] += ","
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice([".", ".", ".", "?", "!", ";"])


def prose(rng):
    paragraphs = []
    for _ in range(rng.randint(2, 4)):
        paragraphs.append(" ".join(prose_sentence(rng)
                                   for _ in range(rng.randint(3, 7))))
    return "\n\n".join(paragraphs)


IDENTS = ("value count index result data items buffer node parent child "
          "config options path name size offset length key token state").split()


def ident(rng):
    parts = [rng.choice(IDENTS) for _ in range(rng.randint(1, 3))]
    return "_".join(parts) if rng.random() < 0.7 else parts[0] + "".join(
        p.capitalize() for p in parts[1:])


def python_block(rng, depth):
    pad = "    " * depth
    lines = [f"{pad}def {ident(rng)}({ident(rng)}, {ident(rng)}=None):"]
    pad2 = pad + "    "
    lines.append(f'{pad2}"""Return the {rng.choice(WORDS)} of the '
                 f'{rng.choice(WORDS)}."""')
    for _ in range(rng.randint(3, 8)):
        r = rng.random()
        if r < 0.3:
            lines.append(f"{pad2}{ident(rng)} = {ident(rng)}[{rng.randint(0, 99)}]"
                         f" + {rng.randint(0, 4096)}")
        elif r < 0.5:
            lines.append(f"{pad2}if {ident(rng)} is not None and "
                         f"len({ident(rng)}) > {rng.randint(1, 64)}:")
            lines.append(f"{pad2}    raise ValueError(f\"bad {{{ident(rng)}!r}}\")")
        elif r < 0.7:
            lines.append(f"{pad2}for {ident(rng)} in range({rng.randint(1, 512)}):")
            lines.append(f"{pad2}    {ident(rng)}.append({ident(rng)} * 2)")
        else:
            lines.append(f"{pad2}# {prose_sentence(rng)}")
    lines.append(f"{pad2}return {ident(rng)}")
    return "\n".join(lines)


def c_block(rng):
    name = ident(rng)
    lines = [f"static int {name}(const char *{ident(rng)}, size_t {ident(rng)}) {{"]
    for _ in range(rng.randint(3, 8)):
        r = rng.random()
        if r < 0.4:
            lines.append(f"  int {ident(rng)} = {ident(rng)}[{rng.randint(0, 31)}] "
                         f"<< {rng.randint(1, 7)};")
        elif r < 0.7:
            lines.append(f"  if ({ident(rng)} != NULL && {ident(rng)} >= "
                         f"0x{rng.randint(0, 65535):04x})")
            lines.append(f"    return -{rng.randint(1, 9)};")
        else:
            lines.append(f"  /* {prose_sentence(rng)} */")
    lines.append("  return 0;\n}")
    return "\n".join(lines)


def code(rng):
    blocks = []
    for _ in range(rng.randint(2, 4)):
        blocks.append(python_block(rng, rng.randint(0, 1)) if rng.random() < 0.6
                      else c_block(rng))
    return "\n\n".join(blocks) + "\n"


def run_of(rng, lo, hi, n):
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def script_sentence(rng, kind):
    if kind == "zh":
        return "".join(run_of(rng, 0x4E00, 0x9FA5, rng.randint(2, 8)) +
                       rng.choice("，、") for _ in range(rng.randint(2, 5)))[:-1] + "。"
    if kind == "ja":
        parts = []
        for _ in range(rng.randint(3, 7)):
            parts.append(run_of(rng, 0x4E00, 0x9FA5, rng.randint(1, 3)) +
                         run_of(rng, 0x3041, 0x3093, rng.randint(1, 4)) +
                         run_of(rng, 0x30A1, 0x30F6, rng.randint(0, 4)))
        return "".join(parts) + "。"
    lo, hi, space = {
        "ru": (0x0430, 0x044F, " "), "ar": (0x0621, 0x064A, " "),
        "hi": (0x0905, 0x0939, " "), "el": (0x03B1, 0x03C9, " "),
        "ko": (0xAC00, 0xD7A3, " "),
    }[kind]
    words = [run_of(rng, lo, hi, rng.randint(2, 9)) for _ in range(rng.randint(5, 14))]
    if kind in ("ru", "el"):
        words[0] = words[0].capitalize()
    return space.join(words) + ("." if kind != "hi" else "।")


def scripts(rng):
    kind = rng.choice(["zh", "ja", "ru", "ar", "hi", "el", "ko"])
    return "\n".join(" ".join(script_sentence(rng, kind)
                              for _ in range(rng.randint(2, 4)))
                     for _ in range(rng.randint(3, 6)))


def digits(rng):
    lines = []
    for _ in range(rng.randint(10, 25)):
        r = rng.random()
        if r < 0.25:
            lines.append(f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-"
                         f"{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
                         f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}")
        elif r < 0.5:
            lines.append(", ".join(str(rng.randint(0, 10 ** rng.randint(1, 9)))
                                   for _ in range(rng.randint(4, 10))))
        elif r < 0.75:
            lines.append(" | ".join(f"{rng.uniform(-1000, 1000):.{rng.randint(1, 6)}f}"
                                    for _ in range(rng.randint(3, 7))))
        else:
            lines.append(f"+{rng.randint(1, 99)} ({rng.randint(100, 999)}) "
                         f"{rng.randint(100, 999)}-{rng.randint(1000, 9999)}, "
                         f"total {rng.randint(1, 10 ** 6):,} items")
    return "\n".join(lines)


EMOJI = ["😀", "😂", "🥲", "😍", "🤔", "🙂", "🚀", "🔥", "✨", "🎉", "👍", "❤️",
         "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "🇧🇷", "👋🏽", "🧑🏿‍🚀",
         "🐍", "☕", "🌍", "⭐", "✅"]


def emoji(rng):
    parts = []
    for _ in range(rng.randint(30, 80)):
        if rng.random() < 0.55:
            parts.append("".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4))))
        else:
            parts.append(rng.choice(WORDS))
    return " ".join(parts)


KINDS = {"prose": prose, "code": code, "scripts": scripts, "digits": digits,
         "emoji": emoji}


def documents(kind, megabytes, seed):
    rng = random.Random(f"{seed}:{kind}")
    make = KINDS[kind]
    docs, size, limit = [], 0, int(megabytes * 1e6)
    while size < limit:
        doc = make(rng)
        while len(doc.encode()) < 2000:
            doc += "\n" + make(rng)
        docs.append(doc)
        size += len(doc.encode())
    return docs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--megabytes", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=13)
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    all_docs = {}
    for kind in KINDS:
        all_docs[kind] = documents(kind, args.megabytes, args.seed)
    mixed = []
    for i in range(max(len(d) for d in all_docs.values())):
        for kind in KINDS:
            if i < len(all_docs[kind]):
                mixed.append(all_docs[kind][i])
    all_docs["mixed"] = mixed
    for kind, docs in all_docs.items():
        with open(os.path.join(args.out_dir, kind + ".json"), "w",
                  encoding="utf-8") as f:
            json.dump(docs, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
