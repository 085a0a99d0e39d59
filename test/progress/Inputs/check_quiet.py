"""Fails, naming the file, when a stderr capture holds any progress output:
a carriage return, a progress label or a percentage."""
import sys

for path in sys.argv[1:]:
    data = open(path, "rb").read()
    for bad in (b"\r", b"amk: loading", b"evaluating the prompt", b"quantizing", b"compiling", b"% ("):
        if bad in data:
            sys.exit(f"{path}: progress output {bad!r} in {data!r}")
print(f"quiet: {len(sys.argv) - 1} files")
