#!/usr/bin/env bash
# Installs dependencies (Debian packages) and builds attnscope into build/ (Release, Ninja).
# Usage: scripts/build.sh [cmake --build arguments, e.g. --target attnscope-server]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j"$(nproc)" "$@"
