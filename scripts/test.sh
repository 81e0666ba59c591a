#!/usr/bin/env bash
# The test command: installs what is missing, builds everything and runs every test (unit and
# integration) with CTest. Needs root or sudo for apt on a fresh machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# The real weights, vocabularies and goldens are read in place from ../shared (or
# ATTNSCOPE_SHARED_DIR); without them a third of the tests would fail one by one.
export ATTNSCOPE_SHARED_DIR=${ATTNSCOPE_SHARED_DIR:-$root/../shared}
if [ ! -d "$ATTNSCOPE_SHARED_DIR/models/stories260K" ]; then
  echo "scripts/test.sh: shared fixtures '$ATTNSCOPE_SHARED_DIR': expected the shared folder" \
    "(models/stories260K, vocab/, testdata/), got nothing there; clone next to it or set" \
    "ATTNSCOPE_SHARED_DIR" >&2
  exit 1
fi
bash "$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure --timeout 900 -j1
