#!/usr/bin/env python3
"""Compile a generated megakernel source (amk-opt --emit=cuda) with NVRTC as
backend/nvrtc.c does, plus ptxas's -v report, and print, for each variant
function amk_vN whose body calls NAME (a device template), its registers and
spills:

  ptxas_report.py SOURCE.cu NAME [--arch sm_90]

prints `amk_vN (NAME<...>): S bytes spill stores, L bytes spill loads, F
bytes stack frame` per such variant, the kernel's registers and its own
spills (its loop: `amk_megakernel: S bytes spill stores, L bytes spill
loads`), then `spills:
none` or `spills: N variants`, then `all functions: no spills` or which
functions of the module spill. Exit 1 when NVRTC cannot be loaded or fails."""
import ctypes
import re
import sys


def load_nvrtc():
    for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                 "/usr/local/cuda/lib64/libnvrtc.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def main():
    args = sys.argv[1:]
    arch = "sm_90"
    if "--arch" in args:
        i = args.index("--arch")
        arch = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src_path, name = args
    src = open(src_path, "rb").read()
    lib = load_nvrtc()
    if lib is None:
        print("ptxas_report: cannot load libnvrtc", file=sys.stderr)
        return 1
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"amk.cu", 0, None, None) != 0:
        print("ptxas_report: nvrtcCreateProgram failed", file=sys.stderr)
        return 1
    opts = [b"--gpu-architecture=" + arch.encode(), b"--std=c++17", b"-lineinfo",
            b"--device-as-default-execution-space", b"--ptxas-options=-v"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value + 1)
    lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode(errors="replace")
    if rc != 0:
        print(log, file=sys.stderr)
        print("ptxas_report: NVRTC failed (%d)" % rc, file=sys.stderr)
        return 1
    # Which variants call NAME: "void amk_vN(...) {\n  NAME<...>(" in the source.
    text = src.decode()
    calls = {m.group(1): m.group(2) for m in re.finditer(
        r"void (amk_v\d+)\(AmkP[^)]*\) \{\n  (" + re.escape(name) + r"<[^>]*>)\(", text)}
    # ptxas -v: "Function properties for F" then "N bytes stack frame, N bytes
    # spill stores, N bytes spill loads"; "Used R registers" per entry
    # function (a __noinline__ callee's registers count in its caller's).
    props, regs = {}, {}
    cur = None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m and cur:
            props[cur] = tuple(int(v) for v in m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            regs[cur] = int(m.group(1))
    spilling = 0
    for fn, call in sorted(calls.items(), key=lambda kv: int(kv[0][5:])):
        # Variants are C++ functions: _Z<len>amk_vN...
        key = "_Z%d%s" % (len(fn), fn)
        found = [k for k in props if k.startswith(key) and not k[len(key)].isdigit()]
        if not found:
            print("ptxas_report: ptxas said nothing of %s" % fn, file=sys.stderr)
            return 1
        frame, st, ld = props[found[0]]
        print("%s (%s): %d bytes spill stores, %d bytes spill loads, %d bytes stack frame"
              % (fn, call, st, ld, frame))
        if st or ld:
            spilling += 1
    if "amk_megakernel" in regs:
        print("amk_megakernel: %d registers" % regs["amk_megakernel"])
    if "amk_megakernel" in props:
        print("amk_megakernel: %d bytes spill stores, %d bytes spill loads"
              % props["amk_megakernel"][1:])
    if not calls:
        print("ptxas_report: no variant calls %s" % name, file=sys.stderr)
        return 1
    print("spills: none" if spilling == 0 else "spills: %d variants" % spilling)
    # Every function of the module, the kernel's loop and the variants that
    # do not call NAME included: a variant's registers can make the others
    # spill (docs/Quantization.md).
    def short(fn):  # _Z6amk_v1RK13amk_program_t... -> amk_v1
        m = re.match(r"_Z\d+(amk_v\d+)", fn)
        return m.group(1) if m else fn
    spilled = sorted(short(fn) for fn, (_, st, ld) in props.items() if st or ld)
    print("all functions: no spills" if not spilled else
          "all functions: %d spill (%s)" % (len(spilled), ", ".join(spilled)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
