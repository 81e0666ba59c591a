#!/usr/bin/python3
"""Trains tests/data/tiny-llama2-tokenizer/tokenizer.model: a small SentencePiece BPE model with
the trainer settings of Llama 2's own tokenizer.model (and Mistral v0.1/v0.2's and TinyLlama's,
which reuse it): <unk> 0, <s> 1, </s> 2, no pad piece; byte_fallback (the 256 "<0xXX>" pieces
follow the specials), split_digits, identity normalization (no charsmap), a dummy prefix,
whitespace kept as it is. It is trained with Debian's spm_train on the same text as
train_xlmr_spm.py (the project's English, Vietnamese and Korean text and model cards), so the
scripts that text lacks (Thai, Arabic, most CJK, emoji) fall back to bytes, as they do in Llama 2.

Then make_tokenizer_json.py --only llama2-spm-bpe writes the tokenizer.json that transformers'
LlamaConverter makes of it, in the same folder.

  apt-get install -y sentencepiece
  /usr/bin/python3 tests/tokenizer_reference/train_llama2_spm.py
  /usr/bin/python3 tests/tokenizer_reference/make_tokenizer_json.py --only llama2-spm-bpe --out tests/data/tiny-llama2-tokenizer
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
from train_xlmr_spm import training_text  # noqa: E402

OUT = os.path.join(ROOT, "tests", "data", "tiny-llama2-tokenizer")
VOCAB_SIZE = 4000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--vocab_size", type=int, default=VOCAB_SIZE)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    texts = training_text()
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "text.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        # Relative paths from inside the temporary folder: the model records them in its
        # trainer_spec, so absolute ones would change the file from one run to the next.
        subprocess.run(
            ["spm_train", "--input=text.txt", "--model_prefix=spm", "--model_type=bpe",
             f"--vocab_size={args.vocab_size}", "--character_coverage=0.99995",
             "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=-1",
             "--byte_fallback=true", "--split_digits=true", "--allow_whitespace_only_pieces=true",
             "--normalization_rule_name=identity", "--add_dummy_prefix=true",
             "--remove_extra_whitespaces=false", "--max_sentence_length=4192",
             "--input_sentence_size=0", "--shuffle_input_sentence=false", "--num_threads=1",
             "--minloglevel=2"],
            cwd=tmp, check=True, capture_output=True)
        with open(os.path.join(tmp, "spm.model"), "rb") as src:
            model = src.read()
    path = os.path.join(args.out, "tokenizer.model")
    with open(path, "wb") as f:
        f.write(model)
    print(f"{path}: {len(model)} bytes, {args.vocab_size} pieces, trained on {len(texts)} texts "
          f"({sum(len(t) for t in texts)} code points)")


if __name__ == "__main__":
    main()
