#!/usr/bin/env bash
# Prints, one a line and sorted, the Debian packages that own the shared libraries the dynamic
# loader loads for the given binaries (ldd: the whole closure). The Dockerfile's runtime stage keeps
# these and removes the rest of what apt brought with them; tests/integration/dockerfile_test.cc
# checks this list against its own reading of ldd and dpkg.
# Usage: scripts/linked-packages.sh BINARY...
set -euo pipefail
(($#)) || { echo "usage: $0 BINARY..." >&2; exit 2; }

ldd_output=$(ldd "$@")
if grep -q 'not found' <<<"$ldd_output"; then
  echo "$0: a library is not found:" >&2
  grep 'not found' <<<"$ldd_output" >&2
  exit 1
fi
# "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" and the loader's own line,
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; not the "BINARY:" line before each binary's list.
mapfile -t libraries < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 }
    $1 ~ /^\// && $2 ~ /^\(0x/ { print $1 }' \
  <<<"$ldd_output" | xargs readlink -f | sort -u)
# dpkg records a library under /lib or /usr/lib as its package installed it, while the resolved
# path is under /usr (merged /usr), so both are asked; dpkg -S exits 1 for the path it does not
# know, which one of each pair always is.
asked=()
for library in "${libraries[@]}"; do
  asked+=("$library")
  [[ $library == /usr/lib/* ]] && asked+=("${library#/usr}")
done
owners=$(dpkg -S "${asked[@]}" 2>/dev/null || true)
for library in "${libraries[@]}"; do
  grep -q -e ": $library\$" -e ": ${library#/usr}\$" <<<"$owners" || {
    echo "$0: $library belongs to no Debian package" >&2
    exit 1
  }
done
# "libfoo1:amd64: /path" or "libfoo1, libfoo-dev: /dir" -> "libfoo1"; diversions are not owners.
grep -v '^diversion by' <<<"$owners" | sed 's/[,:].*//' | sort -u
