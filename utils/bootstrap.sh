#!/usr/bin/env bash
# The first command on a fresh Debian machine: installs what is missing,
# builds build/, and runs the main job: decoding with the bundled example
# model (examples/llama-tiny, a 2-layer Llama checkpoint) on the GPU when
# there is one, else on the CPU reference VM.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
utils/install-deps.sh
echo "== building build/"
utils/build.sh "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== amk-run examples/llama-tiny --prompt-ids 1,17,42,99,3 -n 16"
build/bin/amk-run examples/llama-tiny --device auto --prompt-ids 1,17,42,99,3 -n 16
