#!/usr/bin/env bash
# Rebuilds the built-in default model (checkpoints/default) from scratch, reproducibly: installs the
# LibreOffice help packages (and hunspell-vi, whose Vietnamese syllables the vocabulary keeps whole),
# extracts their text (scripts/extract_help_text.py), builds the WordPiece vocabulary (NFC,
# lower-cased, accents kept) and trains the model with attnscope-train in two stages. Everything
# runs under `nice -n 19`.
#
#   scripts/make_default_model.sh   # the whole recipe: 49 minutes on a 2-core AMD EPYC (MODEL_CARD.md)
#
# Stage 1, from the seed: masked LM + relevance (loss weight 2) on every help paragraph and every
# help query/document pair, 23000 steps of 32 examples (about two passes), no dropout, batches cut
# from length-sorted windows of 64, the learning rate decayed linearly to 0.
# Stage 2, from stage 1's weights: the same objectives on the help examples and general-domain
# ones (scripts/fetch_general_text.sh: Debian's translated package descriptions and translation
# catalogues), 6000 steps, warm-up to 5e-4 over 200 steps, then linear decay to 0. The help text
# alone teaches one domain: a query word the help never uses carried no matching signal
# (MODEL_CARD.md, "General text").
# Nothing else may use the CPU meanwhile: a second process on the other core slowed the steps by
# half (OpenBLAS's second thread waits for a core).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build-train}
model_dir=checkpoints/default
heldout=tests/data/default-model-heldout.jsonl

# Only this recipe needs the help pages, so they are not in scripts/install-deps.sh.
help_packages=(libreoffice-help-en-us libreoffice-help-vi libreoffice-help-ko hunspell-vi)
bash scripts/install-deps.sh "${help_packages[@]}"

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
nice -n 19 cmake --build "$build_dir" -j2 --target attnscope-train
train="$build_dir/tools/train/attnscope-train"
# One LibTorch thread, with OpenBLAS's own two threads doing the matrix products: on this 2-core
# machine LibTorch's intra-op threads waited on each other at every small operator, and training
# ran at half the speed of one thread. OpenBLAS splits a product by output blocks, so the sums, and
# the recorded losses, are the same at any OpenBLAS thread count.
export OPENBLAS_NUM_THREADS=2
# OpenBLAS's kernel decides the last bits of every sum, so the recipe picks it itself instead of
# taking OPENBLAS_CORETYPE from the environment (some hosts pin Haswell): the AVX-512 (SkylakeX)
# kernels where the CPU has every AVX-512 subset they use, and the AVX2 (Haswell) ones elsewhere.
# OpenBLAS 0.3.21 (Debian 12) does not know AMD Zen 4 and would pick Haswell there; SkylakeX made
# a training step 22% faster on it.
avx512_subsets=$(grep -m1 '^flags' /proc/cpuinfo |
  grep -ow 'avx512f\|avx512cd\|avx512bw\|avx512dq\|avx512vl' | sort -u | wc -l)
if ((avx512_subsets == 5)); then
  export OPENBLAS_CORETYPE=SkylakeX
else
  export OPENBLAS_CORETYPE=Haswell
fi

data="$build_dir/default-model-data"
mkdir -p "$data" "$model_dir"
nice -n 19 python3 scripts/extract_help_text.py --out "$data" --heldout "$heldout"
nice -n 19 "$train" vocab --corpus="$data/vocab_corpus.txt" --heldout="$heldout" \
  --model_dir="$model_dir" --vocab_size=12000 --required_tokens="$data/required_tokens.txt"
nice -n 19 "$train" train --data="$data/train.jsonl" --model_dir="$model_dir" --steps=23000 \
  --warmup_steps=400 --linear_decay --peak_lr=1e-3 --relevance_weight=2 --dropout=0 \
  --single_every=1 --length_bucket_batches=64 --threads=1 --save_every=1000 \
  --record_examples=tests/data/default-model-first-steps.jsonl

# Stage 2 starts from a copy of stage 1's weights and writes the model folder's weights again; its
# record is training_record_general.json, beside stage 1's training_record.json.
general="$build_dir/general-data"
bash scripts/fetch_general_text.sh "$general"
stage1="$build_dir/default-model-stage1"
mkdir -p "$stage1"
cp "$model_dir/model.safetensors" "$stage1/"
cat "$data/train.jsonl" "$general/general.jsonl" > "$general/train-and-general.jsonl"
nice -n 19 "$train" train --data="$general/train-and-general.jsonl" --model_dir="$model_dir" \
  --init_from="$stage1" --record_name=training_record_general.json --steps=6000 \
  --warmup_steps=200 --linear_decay --peak_lr=5e-4 --relevance_weight=2 --dropout=0 \
  --single_every=1 --length_bucket_batches=64 --threads=1 --save_every=1000
