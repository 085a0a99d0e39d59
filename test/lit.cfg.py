# lit configuration for the AMK toolchain tests.
import os

import lit.formats

config.name = "AMK"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".amkir", ".test", ".json"]
config.excludes = ["Inputs", "unit", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.amk_obj_root, "test")

# Unit-test binaries are run by the .test files in test/unit-tests.
config.environment["PATH"] = os.pathsep.join(
    [config.amk_tools_dir, config.amk_unit_dir, os.path.dirname(config.filecheck),
     config.environment.get("PATH", "")])
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "HOME", "AMK_CACHE_DIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.environment.setdefault(
    "UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")

config.substitutions.append(("FileCheck", config.filecheck))
config.substitutions.append(("%not", config.not_tool))
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%amk-run", os.path.join(config.amk_tools_dir, "amk-run")))
config.substitutions.append(("%shared", config.amk_shared_dir))
config.substitutions.append(("%src", config.amk_src_root))
config.substitutions.append(("%unit", config.amk_unit_dir))
config.substitutions.append(("%build", config.amk_obj_root))
config.substitutions.append(("%utils", os.path.join(config.amk_src_root, "utils")))
config.substitutions.append(("%examples", os.path.join(config.amk_src_root, "examples")))

# Tests that read ../shared declare `REQUIRES: shared` and skip without it.
if os.path.isdir(os.path.join(config.amk_shared_dir, "conformance")):
    config.available_features.add("shared")
if config.amk_sanitize in ("ON", "1", "TRUE", "True"):
    config.available_features.add("asan")
# A program built outside the tree against a sanitized libamk needs the
# sanitizers' runtimes too (test/install).
config.substitutions.append(
    ("%sanitize_cflags", "-fsanitize=address,undefined" if "asan" in config.available_features
     else ""))
import shutil
# The build took `git describe` of its source tree (cmake/git_version.cmake).
if shutil.which("git") and os.path.exists(os.path.join(config.amk_src_root, ".git")):
    config.available_features.add("git-checkout")
if shutil.which("dot"):
    config.available_features.add("graphviz")
if shutil.which("help2man"):
    config.available_features.add("help2man")

# `nvrtc`: NVRTC can be loaded (programs compile to cubins, no GPU needed);
# `cuda`: a GPU is present and the driver initialises. Tests REQUIRE them.
import ctypes


def _load_first(names):
    for name in names:
        if not name:
            continue  # CDLL("") loads the running program: no library at all
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    return None


_nvrtc = _load_first([os.environ.get("AMK_NVRTC", ""), "libnvrtc.so", "libnvrtc.so.13",
                      "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"])
if _nvrtc is not None:
    config.available_features.add("nvrtc")
_cuda = _load_first(["libcuda.so.1"])
if _cuda is not None:
    try:
        _count = ctypes.c_int(0)
        if _cuda.cuInit(0) == 0 and _cuda.cuDeviceGetCount(ctypes.byref(_count)) == 0 \
                and _count.value > 0:
            config.available_features.add("cuda")
            # `cuda-2`: two GPUs, for the tensor-parallel group (one rank a GPU).
            if _count.value >= 2:
                config.available_features.add("cuda-2")
    except Exception:
        pass
for var in ("AMK_NVRTC", "CUDA_HOME", "LD_LIBRARY_PATH", "AMK_CUDA_TIMEOUT_MS"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
