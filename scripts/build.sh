#!/usr/bin/env bash
# Installs dependencies (Debian packages) and builds attnscope into build/ (Release, Ninja).
# Usage: scripts/build.sh [--sanitize | --shipped] [cmake --build arguments, e.g. --target NAME]
# --sanitize builds into build-sanitize/ with AddressSanitizer and UndefinedBehaviorSanitizer
# (ATTNSCOPE_SANITIZE=ON) and without the fuzz targets, which have a build of their own.
# --shipped installs only the build's packages (install-deps.sh --build-only) and builds only what
# the Docker image ships: the server, the CLI, the SentencePiece module and the dashboard.
# Prints "attnscope-stage install SECONDS" and "attnscope-stage build SECONDS" (sanitizer-build with
# --sanitize) for .ci/run's table.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$root/build
# Explicit, so that a --shipped build in the same folder does not leave them off in its cache.
options=(-DATTNSCOPE_FUZZ=ON)
deps_options=()
stage=build
if [ "${1:-}" = "--shipped" ]; then
  shift
  # The fuzz targets need clang, which is a test tool.
  options=(-DATTNSCOPE_FUZZ=OFF)
  deps_options=(--build-only)
  set -- --target attnscope-server attnscope attnscope_sentencepiece dashboard "$@"
elif [ "${1:-}" = "--sanitize" ]; then
  shift
  build_dir=$root/build-sanitize
  # The tokenizer goldens are the same for both builds: made once, in build/.
  options=(-DATTNSCOPE_SANITIZE=ON -DATTNSCOPE_FUZZ=OFF
    -DATTNSCOPE_TOKENIZER_REFERENCE="$root/build/tokenizer-reference")
  stage=sanitizer-build
fi
start=$SECONDS
bash "$root/scripts/install-deps.sh" "${deps_options[@]}"
echo "attnscope-stage install $((SECONDS - start))"
start=$SECONDS
# ccache (CMakeLists.txt uses it when installed) keys its entries on paths relative to the source
# root, so that this checkout and CI's clone elsewhere share them; the fuzz build's line tables then
# carry relative paths, which is why the build directory is not part of the key either.
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${options[@]}" >/dev/null
cmake --build "$build_dir" -j"$(nproc)" "$@"
echo "attnscope-stage $stage $((SECONDS - start))"
