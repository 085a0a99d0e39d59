#!/usr/bin/env bash
# The first command on a fresh Debian machine: installs what is missing,
# builds build/, and runs the main job: decoding with the bundled trained
# example (examples/tiny-code, a 4-layer Llama trained on code) on the GPU
# when there is one, else on the CPU reference VM, from the text prompt
# "def main():\n    " (its golden prompt): the prompt and the continuation
# are printed as text, the timing on stderr.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
utils/install-deps.sh
echo "== building build/"
utils/build.sh "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== amk-run -m examples/tiny-code -p \$'def main():\\n    ' -n 48"
build/bin/amk-run -m examples/tiny-code --device auto -p $'def main():\n    ' -n 48
