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
config.substitutions.append(("%utils", os.path.join(config.amk_src_root, "utils")))
config.substitutions.append(("%examples", os.path.join(config.amk_src_root, "examples")))

# Tests that read ../shared declare `REQUIRES: shared` and skip without it.
if os.path.isdir(os.path.join(config.amk_shared_dir, "conformance")):
    config.available_features.add("shared")
if config.amk_sanitize in ("ON", "1", "TRUE", "True"):
    config.available_features.add("asan")
