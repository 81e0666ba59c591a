#!/usr/bin/env bash
# Rebuilds the built-in default model (models/default) from scratch, reproducibly: installs the
# LibreOffice help packages, extracts their text (scripts/extract_help_text.py), builds the WordPiece
# vocabulary and trains the model with attnscope-train. Everything runs under `nice -n 19`.
#
#   scripts/make_default_model.sh   # the whole recipe (about 35 minutes of one core)
#
# Two stages: (1) masked LM + relevance on every pair and a third of the single paragraphs, from
# the seed; (2) from stage 1's weights, pairs only with the relevance loss weighted 4x, because in
# stage 1 relevance learned far slower than the masked LM.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build-train}
model_dir=models/default
heldout=tests/data/default-model-heldout.jsonl

# Only this recipe needs the help pages, so they are not in scripts/install-deps.sh.
help_packages=(libreoffice-help-en-us libreoffice-help-vi libreoffice-help-ko)
bash scripts/install-deps.sh "${help_packages[@]}"

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
nice -n 19 "$train" train --data="$data/train.jsonl" --model_dir="$model_dir" --steps=2000 \
  --warmup_steps=200 --peak_lr=1e-3 --record_examples=tests/data/default-model-first-steps.jsonl
mkdir -p "$build_dir/stage1"
cp "$model_dir"/model.safetensors "$model_dir"/config.json "$build_dir/stage1/"
nice -n 19 "$train" train --data="$data/train.jsonl" --model_dir="$model_dir" \
  --init_from="$build_dir/stage1" --single_every=1000000000 --relevance_weight=4 --peak_lr=5e-4 \
  --warmup_steps=100 --steps=1200 --record_name=training_record_stage2.json
