#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction page.

  ncu -i REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
  utils/ncu-sass.py sass.csv [--top N] [--cubin K.cubin [--cuda K.cu]]
                    [--segments FUNCTION]

REPORT needs the warp-state sampling (`--set full`, or the SourceCounters
and WarpStateStats sections). Prints the share of the samples of each stall
reason, then the device functions (the SASS cut after each RET: the
megakernel's variants are __noinline__ functions) by their share of the
samples, with the warp instructions they executed and their main stall,
then the N instructions with the most samples. Exit 1 on a file that holds
no SASS rows, 2 on bad usage or a file that cannot be read.

With --cubin (the same program's `amk-opt --emit=cubin` output) the
functions are the cubin's: each device function the kernel calls by its
symbol (amk_v3, amk_wait; `readelf -s` reads them, so binutils), the rest
as the kernel's own code, a row's offset from the first row being its
offset in the kernel's section; --cuda (`--emit=cuda` of the same
program) adds the template each amk_vN instantiates.

The sixth column of the functions table (ex/sample) is warp instructions
executed per sample: low where the function waits, high where it issues;
the seventh (code bytes) the bytes of its instructions that ran at least
once (16 a SASS instruction), the code a task of it brings into the
instruction cache; the eighth the share of its samples waiting on an
instruction fetch (no_inst).

--segments FUNCTION (a name of the functions table: amk_v4 with --cubin,
else its [begin, end)) cuts that function into runs of consecutive
instructions executed the same number of times (a loop's body, the
straight-line code before and after it) and gives each its byte offset in
the function, its length, its executions, its share of the function's
samples and its three main stalls: where in a variant the time goes.
"""
import argparse
import csv
import re
import subprocess
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text):
    try:
        return float(text.replace(",", "")) if text else 0.0
    except ValueError:
        return 0.0


def read_rows(path):
    """The SASS rows of the CSV as dicts, and the stall reason columns."""
    rows, header = [], None
    with open(path, newline="") as f:
        for record in csv.reader(f):
            if record and record[0] == "Address" and "Source" in record:
                header = record
                continue
            if header and len(record) == len(header):
                rows.append(dict(zip(header, record)))
    if header is None or SAMPLES not in header:
        return None, None
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    return rows, reasons


def functions(rows):
    """[begin, end) index ranges: a function ends after a RET and the BRA
    and NOP padding behind it."""
    bounds = [0]
    for i, row in enumerate(rows):
        if row["Source"].strip().startswith("RET"):
            j = i + 1
            while j < len(rows) and rows[j]["Source"].strip().startswith(("BRA", "NOP")):
                j += 1
            if j < len(rows) and j != bounds[-1]:
                bounds.append(j)
    bounds.append(len(rows))
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


SYMBOL = re.compile(r"^\s*\d+:\s+([0-9a-fA-F]+)\s+(0x[0-9a-fA-F]+|\d+)\s+FUNC\s+\S+\s+\S+"
                    r"(?:\s+\[[^\]]*\])?\s+(\d+)\s+(\S+)\s*$")


def short_name(symbol):
    """amk_v3 for $amk_megakernel$_Z6amk_v3RK13..., else the symbol."""
    m = re.search(r"_Z(\d+)", symbol)
    if m:
        n = int(m.group(1))
        return symbol[m.end():m.end() + n]
    return symbol


def cubin_functions(path, kernel, rows):
    """[(name, row indices)] from the cubin's FUNC symbols in the kernel's
    section, in address order; the rows no callee covers are the kernel's.
    None with a message when readelf fails or the kernel is not there."""
    try:
        out = subprocess.run(["readelf", "-s", "-W", path], capture_output=True, text=True)
    except OSError as e:
        return None, "readelf: %s" % e.strerror
    if out.returncode != 0:
        return None, "%s: %s" % (path, (out.stderr.strip().splitlines() or ["readelf failed"])[-1])
    syms = []
    for line in out.stdout.splitlines():
        m = SYMBOL.match(line)
        if m:
            syms.append((int(m.group(1), 16), int(m.group(2), 0), m.group(3), m.group(4)))
    section = next((ndx for _, _, ndx, name in syms if name == kernel), None)
    if section is None:
        return None, "%s: no function %s" % (path, kernel)
    base = int(rows[0]["Address"], 16)
    offsets = [int(r["Address"], 16) - base for r in rows]
    owner = [kernel] * len(rows)
    for value, size, ndx, name in syms:
        if ndx != section or name == kernel:
            continue
        for i, off in enumerate(offsets):
            if value <= off < value + size:
                owner[i] = short_name(name)
    groups = {}
    for i, name in enumerate(owner):
        groups.setdefault(name, []).append(i)
    return list(groups.items()), None


def templates(path):
    """{amk_vN: the template call it makes} from the generated source."""
    found, current = {}, None
    with open(path) as f:
        for line in f:
            m = re.match(r"__device__ __noinline__ void (amk_v\d+)\(", line)
            if m:
                current = m.group(1)
            elif current:
                found[current] = line.strip().split("(P,")[0]
                current = None
    return found


def segments(rows, idx, reasons, name):
    """Prints the runs of consecutive rows of idx with one execution count."""
    runs = []
    for i in idx:
        ex = number(rows[i].get(EXECUTED, ""))
        if runs and runs[-1][-1] == i - 1 and runs[-1][0] == ex:
            runs[-1][1].append(i)
            runs[-1][-1] = i
        else:
            runs.append([ex, [i], i])
    first = int(rows[idx[0]]["Address"], 16)
    total = sum(number(rows[i][SAMPLES]) for i in idx)
    print("\nsegments of %s (%d instructions, %d samples):" % (name, len(idx), total))
    print("| offset | instructions | executed each | % of its samples | main stalls |\n"
          "|---:|---:|---:|---:|---|")
    for ex, members, _ in runs:
        samples = sum(number(rows[i][SAMPLES]) for i in members)
        stalls = {h: sum(number(rows[i][h]) for i in members) for h in reasons}
        top = sorted((v, h) for h, v in stalls.items() if v > 0)[::-1][:3]
        print("| 0x%x | %d | %d | %.1f | %s |"
              % (int(rows[members[0]]["Address"], 16) - first, len(members), ex,
                 100.0 * samples / total if total else 0.0,
                 ", ".join("%s %.1f" % (h[len("stall_"):], 100.0 * v / samples)
                           for v, h in top)))


def kernel_name(path):
    with open(path, newline="") as f:
        for record in csv.reader(f):
            if len(record) >= 2 and record[0] == "Kernel Name":
                return record[1]
            break
    return "amk_megakernel"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=20, help="instructions to list (default 20)")
    ap.add_argument("--cubin", help="the program's cubin: name the functions by its symbols")
    ap.add_argument("--cuda", help="the program's generated source: each amk_vN's template")
    ap.add_argument("--segments", metavar="FUNCTION",
                    help="that function's runs of instructions executed alike")
    args = ap.parse_args()
    if args.cuda and not args.cubin:
        print("ncu-sass: --cuda names the functions --cubin finds; give --cubin too",
              file=sys.stderr)
        return 2
    try:
        rows, reasons = read_rows(args.csv)
    except OSError as e:
        print("ncu-sass: %s: %s" % (args.csv, e.strerror), file=sys.stderr)
        return 2
    if not rows:
        print("ncu-sass: %s: no SASS rows with warp samples (expected the output of "
              "ncu --page source --csv --print-source sass on a report with sampling)"
              % args.csv, file=sys.stderr)
        return 1
    total = sum(number(r[SAMPLES]) for r in rows)
    print("samples: %d over %d instructions" % (total, len(rows)))
    if total <= 0:
        return 0
    share = lambda v: 100.0 * v / total
    print("\n| stall reason | % of samples |\n|---|---:|")
    sums = {h: sum(number(r[h]) for r in rows) for h in reasons}
    for h, v in sorted(sums.items(), key=lambda kv: -kv[1]):
        if v > 0:
            print("| %s | %.1f |" % (h[len("stall_"):], share(v)))
    print("\n| instructions | % of samples | warp instructions executed | main stall "
          "| its % | ex/sample | code bytes | no_inst % |\n|---|---:|---:|---|---:|---:|---:|---:|")
    fetch = "stall_no_inst" if "stall_no_inst" in reasons else None
    if args.cubin:
        groups, err = cubin_functions(args.cubin, kernel_name(args.csv), rows)
        if groups is None:
            print("ncu-sass: %s" % err, file=sys.stderr)
            return 2
        try:
            names = templates(args.cuda) if args.cuda else {}
        except OSError as e:
            print("ncu-sass: %s: %s" % (args.cuda, e.strerror), file=sys.stderr)
            return 2
        labelled = [("%s %s" % (n, names[n]) if n in names else n, idx) for n, idx in groups]
    else:
        labelled = [("[%d, %d)" % (a, b), range(a, b)) for a, b in functions(rows)]
    funcs = []
    for label, idx in labelled:
        samples = sum(number(rows[i][SAMPLES]) for i in idx)
        executed = sum(number(rows[i].get(EXECUTED, "")) for i in idx)
        by_reason = {h: sum(number(rows[i][h]) for i in idx) for h in reasons}
        main_reason = max(by_reason, key=by_reason.get) if by_reason else ""
        ran = sum(1 for i in idx if number(rows[i].get(EXECUTED, "")) > 0)
        funcs.append((samples, label, executed, main_reason, by_reason.get(main_reason, 0.0),
                      ran * 16, by_reason.get(fetch, 0.0) if fetch else 0.0))
    for samples, label, executed, reason, rs, code_bytes, fetched in sorted(funcs, reverse=True):
        if samples <= 0:
            continue
        print("| %s | %.1f | %.3g | %s | %.1f | %.1f | %d | %.1f |"
              % (label, share(samples), executed, reason[len("stall_"):],
                 100.0 * rs / samples, executed / samples, code_bytes, 100.0 * fetched / samples))
    if args.segments:
        match = [idx for label, idx in labelled
                 if label == args.segments or label.split(" ")[0] == args.segments]
        if not match:
            names = [label.split(" ")[0] if args.cubin else label for label, _ in labelled]
            print("ncu-sass: no function %s (the functions: %s)"
                  % (args.segments, ", ".join(names)), file=sys.stderr)
            return 2
        segments(rows, list(match[0]), reasons, args.segments)
    print("\n| instruction | % of samples | executed | main stall | source |\n|---:|---:|---:|---|---|")
    order = sorted(range(len(rows)), key=lambda i: -number(rows[i][SAMPLES]))
    for i in order[:max(args.top, 0)]:
        row = rows[i]
        if number(row[SAMPLES]) <= 0:
            break
        reason = max(reasons, key=lambda h: number(row[h])) if reasons else "stall_"
        print("| %d | %.2f | %d | %s | `%s` |"
              % (i, share(number(row[SAMPLES])), number(row.get(EXECUTED, "")),
                 reason[len("stall_"):], row["Source"].strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
