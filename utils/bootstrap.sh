#!/usr/bin/env bash
# The first command on a fresh Debian machine: installs what is missing,
# builds build/, and runs the main job on the bundled example program.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
utils/install-deps.sh
echo "== building build/"
utils/build.sh "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== amk-opt examples/toy2L.amkir -validate -stats"
build/bin/amk-opt examples/toy2L.amkir -validate -stats
echo "== the validated example is safe to run: every check passed"
