#!/usr/bin/env python3
"""Checks the library's layering from its object files (docs/Architecture.md).

Usage: check-layering.py BUILD_DIR [--graph]

Every object file of the `amk` library is placed in a layer by the folder of
its source. A file that uses a symbol (an `U` entry of `nm`) defined by
another file (a `T`/`D`/`B`/`R` entry) is an arrow between them. The layering
holds when

  * no arrow runs from a lower layer to a higher one, nor between layers
    that share a rank (the two engines, refvm and backend; ir and the
    tokenizer), nor from an engine to a pass;
  * no two files use each other, directly or through others (no circles).

Symbols are what the linker sees, so a call through a header's macro or an
inline function counts only where it leaves a symbol; that is the right
measure for "who may use whom". Prints each violation and exits 1 if any.
"""
import os
import subprocess
import sys
from collections import defaultdict

# Folder (of the source file) -> (rank, layer name). Generated sources are
# placed by what generates them.
LAYERS = {
    "support": (0, "support"),
    "ir": (1, "ir"),
    "tokenizer": (1, "tokenizer"),
    "frontend": (2, "frontend"),
    "passes": (3, "passes"),
    "runtime": (4, "plan"),
    "refvm": (5, "refvm"),
    "instructions": (5, "refvm"),
    "backend": (5, "backend"),
}
# Arrows that the ranks allow but the design does not: an engine runs a plan
# and never calls a pass (checking that a program was validated is the plan
# builder's job). The tokenizer and the IR share a rank and know nothing of
# each other (the rank rule refuses those arrows too; naming them here keeps
# that so if the ranks ever change).
FORBIDDEN = {("refvm", "passes"), ("backend", "passes"),
             ("tokenizer", "ir"), ("ir", "tokenizer")}
GENERATED = {
    "parser.c": "frontend",
    "lexer.c": "frontend",
    "backend_embed.c": "backend",
}


def layer_of(obj, objdir):
    rel = os.path.relpath(obj, objdir)
    top = rel.split(os.sep)[0]
    if top == "generated":
        top = GENERATED[os.path.basename(rel)[: -len(".o")]]
    if top not in LAYERS:
        sys.exit(f"check-layering: {rel}: source folder '{top}' has no layer")
    return LAYERS[top]


def symbols(obj):
    out = subprocess.run(["nm", "-P", "--no-sort", obj], check=True,
                         capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind in "TDBRVWGS" and kind.isupper():
            defined.add(name)
        elif kind == "U":
            used.add(name)
    return defined, used


def short(obj, objdir):
    rel = os.path.relpath(obj, objdir)
    return rel[: -len(".c.o")] + ".c" if rel.endswith(".c.o") else rel


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: check-layering.py BUILD_DIR [--graph]")
    objdir = os.path.join(sys.argv[1], "CMakeFiles", "amk_objects.dir")
    source_dir = None
    cache = os.path.join(sys.argv[1], "CMakeCache.txt")
    if os.path.exists(cache):
        for line in open(cache):
            if line.startswith("CMAKE_HOME_DIRECTORY:INTERNAL="):
                source_dir = line.split("=", 1)[1].strip()

    def current(obj):
        # An object whose source was moved or deleted is a leftover of an
        # earlier build, not part of the library.
        rel = os.path.relpath(obj, objdir)
        if source_dir is None or rel.startswith("generated" + os.sep):
            return True
        return os.path.exists(os.path.join(source_dir, rel[: -len(".o")]))

    objs = sorted(os.path.join(d, f) for d, _, fs in os.walk(objdir)
                  for f in fs if f.endswith(".o"))
    objs = [o for o in objs if current(o)]
    if not objs:
        sys.exit(f"check-layering: no object files under {objdir}")
    owner, uses = {}, {}
    for o in objs:
        defined, used = symbols(o)
        for s in defined:
            owner[s] = o
        uses[o] = used
    edges = defaultdict(set)
    for o, used in uses.items():
        for s in used:
            if s in owner and owner[s] != o:
                edges[o].add(owner[s])

    problems = []
    for a in objs:
        ra, la = layer_of(a, objdir)
        for b in sorted(edges[a]):
            rb, lb = layer_of(b, objdir)
            if (la, lb) in FORBIDDEN:
                problems.append(f"forbidden: {short(a, objdir)} ({la}) uses "
                                f"{short(b, objdir)} ({lb})")
            elif rb > ra or (rb == ra and la != lb):
                problems.append(f"arrow up: {short(a, objdir)} ({la}) uses "
                                f"{short(b, objdir)} ({lb})")

    # Circles: strongly connected components of more than one file (Tarjan).
    index, low, stack, on_stack, sccs = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(edges[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    sccs.append(sorted(comp))

    for o in objs:
        if o not in index:
            visit(o)
    for comp in sccs:
        problems.append("circle: " + " <-> ".join(short(c, objdir) for c in comp))

    if "--graph" in sys.argv:
        for a in objs:
            for b in sorted(edges[a]):
                print(f"{short(a, objdir)} -> {short(b, objdir)}")
    for p in problems:
        print(p)
    n_edges = sum(len(v) for v in edges.values())
    print(f"check-layering: {len(objs)} files, {n_edges} arrows, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
