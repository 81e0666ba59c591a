#!/usr/bin/env bash
# The test command: installs what is missing, builds everything and runs every test (unit and
# integration) with CTest. Needs root or sudo for apt on a fresh machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure --timeout 900 -j1
