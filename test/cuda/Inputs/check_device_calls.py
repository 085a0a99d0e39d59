#!/usr/bin/env python3
"""Checks generated megakernel sources against the device library they paste.

Usage: check_device_calls.py SOURCE.cu...   (amk-opt --emit=cuda outputs)

Each source carries backend/megakernel.cuh verbatim followed by one wrapper
per variant calling a device function. Without NVRTC, this checks what the
compiler would: every call names a task function (the signature
(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem)) that the pasted
library defines, with as many template arguments as it declares, each an
int literal for an int parameter and an LL literal for a long long one.
Across all the sources, every task function must be called at least once,
so the inputs exercise the whole contract. Prints one summary line, or
every mismatch and exits 1.
"""
import re
import sys

LIBRARY_BEGIN = "// ---- backend/megakernel.cuh ----"
VARIANTS_BEGIN = "// ---- this program's variants ----"
TASK_ARGS = r"\(\s*AmkP P,\s*AmkI I,\s*AmkA A,\s*int idx,\s*int pos,\s*float \*smem\)"
DEFINITION = re.compile(
    r"(?:template\s*<(?P<params>[^<>]*)>\s*)?__device__\s+(?:__noinline__\s+)?void\s+"
    r"(?P<name>amk_\w+)\s*" + TASK_ARGS + r"\s*\{")
CALL = re.compile(
    r"void\s+amk_v\d+" + TASK_ARGS + r"\s*\{\s*(?P<name>amk_\w+)\s*(?:<(?P<args>[^<>]*)>)?\s*"
    r"\(P, I, A, idx, pos, smem\);")


def param_kind(param):
    """'i' for int, 'L' for long long, else the parameter as written."""
    words = param.split()
    kind = " ".join(words[:-1])
    return {"int": "i", "long long": "L"}.get(kind, param)


def arg_fits(arg, kind):
    if kind == "L":
        return re.fullmatch(r"-?\d+LL", arg) is not None
    if kind == "i":
        return re.fullmatch(r"-?\d+", arg) is not None
    return False


def library_functions(library):
    functions = {}
    for m in DEFINITION.finditer(library):
        params = m.group("params")
        kinds = [] if params is None else [param_kind(p) for p in params.split(",") if p.strip()]
        functions[m.group("name")] = kinds
    return functions


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: check_device_calls.py SOURCE.cu...")
    problems, called, n_calls, all_functions = [], set(), 0, {}
    for path in sys.argv[1:]:
        text = open(path).read()
        if LIBRARY_BEGIN not in text or VARIANTS_BEGIN not in text:
            problems.append(f"{path}: not an amk-opt --emit=cuda source")
            continue
        library = text.split(LIBRARY_BEGIN, 1)[1].split(VARIANTS_BEGIN, 1)[0]
        variants = text.split(VARIANTS_BEGIN, 1)[1]
        functions = library_functions(library)
        all_functions.update(functions)
        n_wrappers = len(re.findall(r"void\s+amk_v\d+" + TASK_ARGS, variants))
        calls = list(CALL.finditer(variants))
        if len(calls) != n_wrappers:
            problems.append(f"{path}: {n_wrappers} variant wrappers, but {len(calls)} "
                            "calls of the expected form")
        for m in calls:
            n_calls += 1
            name, args = m.group("name"), m.group("args")
            args = [] if args is None else [a.strip() for a in args.split(",")]
            call = f"{name}<{', '.join(args)}>" if args else name
            if name not in functions:
                problems.append(f"{path}: {call} calls {name}, which megakernel.cuh "
                                "does not define")
                continue
            called.add(name)
            kinds = functions[name]
            if len(args) != len(kinds):
                problems.append(f"{path}: {call} passes {len(args)} template arguments; "
                                f"{name} takes {len(kinds)}")
                continue
            for i, (arg, kind) in enumerate(zip(args, kinds)):
                if not arg_fits(arg, kind):
                    want = {"i": "int", "L": "long long (LL)"}.get(kind, kind)
                    problems.append(f"{path}: {call}: argument {i} '{arg}' does not fit "
                                    f"its parameter ({want})")
    for name in sorted(set(all_functions) - called):
        problems.append(f"{name} is never called by these programs: add one that "
                        "reaches it")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"device calls: {n_calls} calls of {len(called)} task functions, all defined "
          "with matching template arguments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
