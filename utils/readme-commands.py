#!/usr/bin/env python3
"""Runs the shell commands of a README top to bottom, as a new user would.

    utils/readme-commands.py [--build DIR] [--keep] [--list] README.md

Commands are the lines of the README's code blocks (indented by four spaces,
or fenced with ``` and no language or sh, bash, shell), a line ending in a backslash joined with the next, a
trailing `   # comment` dropped. Each runs with bash in a scratch folder that
holds a symbolic link to every top-level entry of the README's folder (the
source tree) and `build` -> --build (default: the tree's own build), so
commands run as written from the repository root while what they write
(prog.amkir, q8/, ...) lands in the scratch folder; HOME is a folder of it
too (`cmake --install build --prefix "$HOME/.local"`), stdin is empty.

Skipped, with the reason printed: commands that install packages or run the
whole suite (utils/bootstrap.sh, utils/test.sh, apt-get), that need a GPU
(--device cuda, --check, --bench, --trace, utils/gpu-check.sh,
utils/gpu-gemm.sh, utils/bench-gpu.sh), NVRTC (--emit=cubin) when it cannot be loaded, Graphviz
(`dot`) when it is missing, ../shared when it is absent, and commands that
name a placeholder (an upper-case word such as MODEL_DIR) or that read the
terminal (-cnv). Every other command must exit 0 within --timeout seconds.

Prints one line per command (`ran`, `skipped (why)` or `FAILED`) with its
README line, then `readme: N run, N skipped, N failed`; a failure prints the
end of the command's output and the script exits 1.
"""
import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# MODEL_DIR, not $HOME, AMK_PROGRESS=always or a path.
PLACEHOLDER = re.compile(r"(?<![\w/.$-])[A-Z][A-Z0-9]*_[A-Z0-9_]+(?![\w/.=])")
GPU_FLAGS = ("--device cuda", "--device=cuda", "--check", "--bench", "--trace")
GPU_SCRIPTS = ("utils/gpu-check.sh", "utils/gpu-gemm.sh", "utils/bench-gpu.sh")
SETUP_SCRIPTS = ("utils/bootstrap.sh", "utils/test.sh", "utils/install-deps.sh")


def code_blocks(lines):
    """(line number, text) of every line of a code block, blank lines kept
    as block separators (None)."""
    out = []
    fenced = False
    shell = False  # the fenced block is shell (no language, sh, bash, shell)
    prev_blank = True
    in_indented = False
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if line.lstrip().startswith("```"):
            fenced = not fenced
            shell = fenced and line.strip()[3:].strip() in ("", "sh", "bash", "shell")
            out.append((number, None))
            continue
        if fenced:
            if shell:
                out.append((number, line))
            continue
        if line.startswith("    ") and (prev_blank or in_indented) and line.strip():
            in_indented = True
            out.append((number, line[4:]))
        elif not line.strip():
            prev_blank = True
            if in_indented:
                out.append((number, None))
            continue
        else:
            in_indented = False
        prev_blank = not line.strip()
    return out


def strip_comment(text):
    """The command without a trailing comment: a '#' after white space and
    outside quotes."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
            elif ch == "\\" and quote == '"':
                continue
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def commands(lines):
    """(first line number, command) in README order."""
    result = []
    pending, start = None, 0
    for number, text in code_blocks(lines):
        if text is None:
            if pending is not None:
                result.append((start, pending))
                pending = None
            continue
        if pending is None:
            start = number
            if not text.strip():
                continue
            pending = ""
        text = text.strip()
        if text.endswith("\\"):
            pending += text[:-1].rstrip() + " "
            continue
        pending += text
        cmd = strip_comment(pending)
        if cmd:
            result.append((start, cmd))
        pending = None
    if pending:
        result.append((start, strip_comment(pending)))
    return result


def can_load(names):
    for name in names:
        if not name:
            continue  # CDLL("") would load the running program itself
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    return False


def skip_reason(cmd, have):
    words = cmd.split()
    first = words[0] if words else ""
    if first in SETUP_SCRIPTS or first in ("apt-get", "apt", "sudo"):
        return "installs packages or runs the whole suite"
    if any(s in cmd for s in GPU_SCRIPTS) or any(
            re.search(r"(^|\s)" + re.escape(f) + r"(\s|=|$)", cmd) for f in GPU_FLAGS):
        return "needs a GPU"
    if "--emit=cubin" in cmd and not have["nvrtc"]:
        return "needs NVRTC"
    if re.search(r"\|\s*dot\b", cmd) and not have["dot"]:
        return "needs Graphviz (dot)"
    if "../shared" in cmd and not have["shared"]:
        return "needs ../shared"
    if re.search(r"(^|\s)(-cnv|--chat)(\s|$)", cmd):
        return "reads the terminal (chat)"
    m = PLACEHOLDER.search(cmd)
    if m:
        return f"names a placeholder ({m.group(0)})"
    return None


def scratch_tree(source, build):
    root = tempfile.mkdtemp(prefix="amk-readme-")
    for entry in os.listdir(source):
        if entry == "build" or entry.startswith("build-") or entry == ".git":
            continue
        os.symlink(os.path.join(source, entry), os.path.join(root, entry))
    os.symlink(build, os.path.join(root, "build"))
    os.mkdir(os.path.join(root, "home"))
    return root


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("readme")
    ap.add_argument("--build", help="the build tree (default: build/ beside the README)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--list", action="store_true", help="only list the commands and verdicts")
    args = ap.parse_args()

    readme = os.path.abspath(args.readme)
    source = os.path.dirname(readme)
    build = os.path.abspath(args.build or os.path.join(source, "build"))
    name = os.path.basename(readme)
    with open(readme, encoding="utf-8") as f:
        cmds = commands(f.readlines())
    have = {
        "nvrtc": can_load([os.environ.get("AMK_NVRTC", ""), "libnvrtc.so", "libnvrtc.so.13",
                           "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"]),
        "dot": shutil.which("dot") is not None,
        "shared": os.path.isdir(os.path.join(source, "..", "shared")),
    }
    if args.list:
        for line, cmd in cmds:
            why = skip_reason(cmd, have)
            print(f"{name}:{line}: {'skip (' + why + ')' if why else 'run'}: {cmd}")
        return 0

    root = scratch_tree(source, build)
    env = dict(os.environ)
    env["HOME"] = os.path.join(root, "home")
    env.pop("AMK_PROGRESS", None)
    env.setdefault("AMK_CACHE_DIR", os.path.join(root, "home", "cache"))
    ran = skipped = failed = 0
    try:
        for line, cmd in cmds:
            why = skip_reason(cmd, have)
            if why:
                skipped += 1
                print(f"skipped {name}:{line} ({why}): {cmd}")
                continue
            t0 = time.monotonic()
            try:
                p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=root, env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=args.timeout)
                rc, out = p.returncode, p.stdout
            except subprocess.TimeoutExpired as e:
                rc, out = f"timeout after {args.timeout:g} s", e.stdout or b""
            took = time.monotonic() - t0
            if rc == 0:
                ran += 1
                print(f"ran {name}:{line} ({took:.1f} s): {cmd}")
            else:
                failed += 1
                tail = out.decode("utf-8", "replace").splitlines()[-15:]
                print(f"FAILED {name}:{line} (exit {rc}): {cmd}")
                for t in tail:
                    print(f"    | {t}")
    finally:
        if args.keep:
            print(f"scratch folder: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(f"readme: {ran} run, {skipped} skipped, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
