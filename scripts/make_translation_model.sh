#!/usr/bin/env bash
# Builds the translation model (checkpoints/translation) from scratch, reproducibly: one Marian
# encoder-decoder that translates English into Vietnamese or Korean, the target language chosen by
# the token that starts the source (">>vie<< Inserting Tables", ">>kor<< Inserting Tables").
# Installs the LibreOffice help packages and SentencePiece's Python trainer, extracts the aligned
# help text (scripts/extract_parallel_text.py extract), trains the source.spm and target.spm
# tokenizers and writes vocab.json (extract_parallel_text.py tokenizer), trains the model with
# `attnscope-train translate` and scores greedy translations of the held-out pairs
# (tests/data/translation-heldout.jsonl) with chrF2 through attnscope's own engine, next to the
# score of copying the English source. Everything runs under `nice -n 19`.
#
#   scripts/make_translation_model.sh             # the whole recipe
#   STEPS=300 WARMUP_STEPS=100 scripts/make_translation_model.sh   # a smoke run
#
# The recipe: d_model 256, 3 encoder and 3 decoder layers of 4 heads, feed-forward 1024 (8.4 M
# parameters with the 11100-entry vocabulary: source.spm 4000 pieces, target.spm 8000, 901 of
# them shared), 2200 steps of 64 sentence pairs (about 4.6 passes over the 30449 pairs), warm-up
# 300 steps to 7e-4 then a linear decay to 0, dropout 0.1, label smoothing 0.1. Measured on 2
# cores of an AMD EPYC (Zen 5, AVX-512; OpenBLAS runs its Haswell kernels): one OpenBLAS thread
# 1.3 s a step, 76% of it in sgemm; about 0.8 s with two, so the training takes about 30 minutes
# and the whole recipe about 33. The progress lines print seconds per step: lower STEPS if they
# say much more. STEPS, WARMUP_STEPS, BATCH_SIZE, D_MODEL, LAYERS (encoder and decoder each),
# FFN_DIM, HEADS, SOURCE_VOCAB and TARGET_VOCAB override these values.
#
# Nothing else may use the CPU meanwhile: with both cores busy the steps slow down by about half
# (OpenBLAS's second thread waits for a core).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build-train}
model_dir=${MODEL_DIR:-checkpoints/translation}
heldout=tests/data/translation-heldout.jsonl
steps=${STEPS:-2200}
warmup_steps=${WARMUP_STEPS:-300}
batch_size=${BATCH_SIZE:-64}
d_model=${D_MODEL:-256}
layers=${LAYERS:-3}
ffn_dim=${FFN_DIM:-1024}
heads=${HEADS:-4}
source_vocab=${SOURCE_VOCAB:-4000}
target_vocab=${TARGET_VOCAB:-8000}

# Only this recipe needs the help pages and the SentencePiece trainer, so they are not in
# scripts/install-deps.sh.
bash scripts/install-deps.sh libreoffice-help-en-us libreoffice-help-vi libreoffice-help-ko \
  python3-sentencepiece

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
nice -n 19 cmake --build "$build_dir" -j2 --target attnscope-train
train="$build_dir/tools/train/attnscope-train"
# One LibTorch thread (--threads=1), with OpenBLAS's own two threads doing the matrix products: on
# this 2-core machine LibTorch's intra-op threads waited on each other at every small operator
# (see scripts/make_default_model.sh).
export OPENBLAS_NUM_THREADS=2
# Debian's python3-sentencepiece is installed for Debian's Python, which another python3 earlier
# in PATH would not see.
python=/usr/bin/python3

data="$build_dir/translation-data"
mkdir -p "$data" "$model_dir"
nice -n 19 "$python" scripts/extract_parallel_text.py extract --out "$data" --heldout "$heldout"
nice -n 19 "$python" scripts/extract_parallel_text.py tokenizer --out "$data" \
  --model_dir "$model_dir" --source_vocab_size "$source_vocab" --target_vocab_size "$target_vocab"
nice -n 19 "$train" translate --data="$data/train.jsonl" --model_dir="$model_dir" \
  --heldout="$heldout" --steps="$steps" --warmup_steps="$warmup_steps" --peak_lr=7e-4 \
  --batch_size="$batch_size" --d_model="$d_model" --encoder_layers="$layers" \
  --decoder_layers="$layers" --attention_heads="$heads" --ffn_dim="$ffn_dim" --dropout=0.1 \
  --label_smoothing=0.1 --max_length=128 --length_bucket_batches=64 --threads=1 \
  --save_every=1000 --history_every=50 --log_every=50
