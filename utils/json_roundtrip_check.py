#!/usr/bin/env python3
"""Round-trip every JSON program of a directory through amk-opt.

  json: amk-opt X.json --emit=json -disable-verify
        must reproduce the reference's own serialisation of X byte for byte:
        X itself, or EXPECTED_DIR/<name> when that exists (for hand-made files
        the reference re-serialises differently).
  text: amk-opt X.json --emit=amkir -disable-verify
          | amk-opt - -x amkir --emit=json -disable-verify
        must give the same bytes (JSON -> text -> JSON).

Files named in EXPECTED_DIR/REJECTED (one name a line) are ones the
reference refuses to load: amk-opt must refuse them too, with exit status 1
and a message, never a crash.

Prints one `MODE: N passed, M failed` line per mode and the first failures;
exits 1 when anything failed. Python 3 standard library only.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys


def run(cmd, stdin=None):
    return subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)


def check_file(amk_opt, path, expected_path, rejected, modes):
    """Returns a list of (mode, failure message or None)."""
    results = []
    first = run([amk_opt, path, "--emit=json", "-disable-verify"])
    if rejected:
        ok = first.returncode == 1 and b"error:" in first.stderr
        results.append(("reject", None if ok else
                        "expected a clean load error, got exit %d: %s" %
                        (first.returncode, first.stderr[-300:].decode(errors="replace"))))
        return results
    with open(expected_path, "rb") as f:
        want = f.read()
    if "json" in modes:
        if first.returncode != 0:
            msg = "exit %d: %s" % (first.returncode,
                                   first.stderr[-300:].decode(errors="replace"))
        elif first.stdout != want:
            msg = "output differs from %s" % expected_path
        else:
            msg = None
        results.append(("json", msg))
    if "text" in modes:
        text = run([amk_opt, path, "--emit=amkir", "-disable-verify"])
        if text.returncode != 0:
            msg = "to text: exit %d: %s" % (
                text.returncode, text.stderr[-300:].decode(errors="replace"))
        else:
            back = run([amk_opt, "-", "-x", "amkir", "--emit=json", "-disable-verify"],
                       stdin=text.stdout)
            if back.returncode != 0:
                msg = "from text: exit %d: %s" % (
                    back.returncode, back.stderr[-300:].decode(errors="replace"))
            elif back.stdout != want:
                msg = "JSON -> text -> JSON differs from %s" % expected_path
            else:
                msg = None
        results.append(("text", msg))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="directories of .json programs")
    ap.add_argument("--amk-opt", default="amk-opt")
    ap.add_argument("--expected-dir", help="re-serialisations and REJECTED list")
    ap.add_argument("--modes", default="json,text", help="json, text or both")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    modes = set(args.modes.split(","))

    rejected = set()
    if args.expected_dir:
        reject_list = os.path.join(args.expected_dir, "REJECTED")
        if os.path.exists(reject_list):
            with open(reject_list) as f:
                rejected = {line.strip() for line in f
                            if line.strip() and not line.startswith("#")}

    files = sorted(os.path.join(d, name) for d in args.dirs
                   for name in os.listdir(d) if name.endswith(".json"))
    if not files:
        print("no .json files found", file=sys.stderr)
        return 1

    def job(path):
        name = os.path.basename(path)
        expected = path
        if args.expected_dir and os.path.exists(os.path.join(args.expected_dir, name)):
            expected = os.path.join(args.expected_dir, name)
        return path, check_file(args.amk_opt, path, expected, name in rejected, modes)

    counts = {}
    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for path, results in pool.map(job, files):
            for mode, msg in results:
                passed, failed = counts.get(mode, (0, 0))
                if msg is None:
                    counts[mode] = (passed + 1, failed)
                else:
                    counts[mode] = (passed, failed + 1)
                    failures.append("%s [%s]: %s" % (path, mode, msg))

    for line in failures[:20]:
        print("FAIL " + line)
    if len(failures) > 20:
        print("... and %d more failures" % (len(failures) - 20))
    for mode in ("json", "text", "reject"):
        if mode in counts:
            print("%s: %d passed, %d failed" % ((mode,) + counts[mode]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
