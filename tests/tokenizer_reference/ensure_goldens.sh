#!/usr/bin/env bash
# The CTest fixture of the tokenizer.json golden tests (tests/unit/tokenizers/CMakeLists.txt) and
# of tokenizer_served_test (tests/integration/CMakeLists.txt): runs make_all.sh into OUT unless OUT
# already holds goldens and checkpoints made from the scripts, lockfile, corpus and tokenizer.json
# files as they are now
# (OUT/goldens/.complete newer than every one of them), so a ctest run pays the minute of npm ci
# and Node once, not every time.
#
#   bash tests/tokenizer_reference/ensure_goldens.sh OUT
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:?usage: ensure_goldens.sh OUT}"
stamp="$out/goldens/.complete"

if [[ -f "$stamp" ]]; then
  newer="$(find "$here" "$root/tests/data/multilingual_corpus.jsonl" \
    "$root/tests/data/tiny-xlmr-tokenizer/tokenizer.json" \
    "$root/tests/data/tiny-llama2-tokenizer/tokenizer.json" \
    "$root/checkpoints/default/tokenizer.json" -newer "$stamp" -type f | head -1)"
  if [[ -z "$newer" ]]; then
    echo "tokenizer goldens in $out are up to date"
    exit 0
  fi
  echo "$newer changed since the goldens were made: making them again"
fi
rm -f "$stamp"
bash "$here/make_all.sh" "$out"
touch "$stamp"
