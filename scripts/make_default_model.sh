#!/usr/bin/env bash
# Rebuilds the built-in default model (models/default) from scratch, reproducibly: installs the
# LibreOffice help packages, extracts their text (scripts/extract_help_text.py), builds the WordPiece
# vocabulary and trains the model with attnscope-train. Everything runs under `nice -n 19`.
#
#   scripts/make_default_model.sh            # the whole recipe (about 40 minutes on 2 cores)
#   STEPS=200 scripts/make_default_model.sh  # a short trial run
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build-train}
model_dir=models/default
heldout=tests/data/default-model-heldout.jsonl
steps=${STEPS:-3500}

# Only this recipe needs the help pages, so they are not in scripts/install-deps.sh.
help_packages=(libreoffice-help-en-us libreoffice-help-vi libreoffice-help-ko)
scripts/install-deps.sh
missing=()
for p in "${help_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
nice -n 19 cmake --build "$build_dir" -j2 --target attnscope-train
train="$build_dir/tools/train/attnscope-train"
# One thread, and no separate OpenBLAS pool: on a shared 2-core machine, threads waiting for each
# other at every operator made training five times slower than one thread alone.
export OPENBLAS_NUM_THREADS=1

data="$build_dir/default-model-data"
mkdir -p "$data" "$model_dir"
nice -n 19 python3 scripts/extract_help_text.py --out "$data" --heldout "$heldout"
nice -n 19 "$train" vocab --corpus="$data/vocab_corpus.txt" --heldout="$heldout" \
  --model_dir="$model_dir" --vocab_size=8000
nice -n 19 "$train" train --data="$data/train.jsonl" --model_dir="$model_dir" --steps="$steps" \
  --record_examples=tests/data/default-model-first-steps.jsonl
