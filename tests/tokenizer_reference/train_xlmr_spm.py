#!/usr/bin/python3
"""Trains tests/data/tiny-xlmr-tokenizer/sentencepiece.bpe.model: a small SentencePiece Unigram
model in XLM-RoBERTa's layout (<unk> 0, <s> 1, </s> 2, no pad piece; nmt_nfkc normalization,
dummy prefix, extra whitespace removed: SentencePiece's defaults, as XLM-R's own model has),
trained with SentencePiece's own trainer on the project's English, Vietnamese and Korean text
(tests/data/default-model-heldout.jsonl, default-model-first-steps.jsonl, translation-heldout.jsonl
and the model cards). The name is XLM-R's file name; the model is Unigram, as XLM-R's is.

Scripts the training text lacks (Thai, Arabic, Hindi, most CJK and emoji of the corpus) are
left out of the vocabulary on purpose: they come out as <unk>, which the goldens then cover.

Then make_tokenizer_json.py --only xlmr converts it to tokenizer.json in the same folder, and
check_xlmr_spm.py compares that tokenizer.json, run by Hugging Face's tokenizers, with
SentencePiece's own encoder on the whole corpus.

  apt-get install -y python3-sentencepiece
  /usr/bin/python3 tests/tokenizer_reference/train_xlmr_spm.py
  /usr/bin/python3 tests/tokenizer_reference/make_tokenizer_json.py --only xlmr --out tests/data/tiny-xlmr-tokenizer
"""
import argparse
import json
import os
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "tests", "data")
OUT = os.path.join(DATA, "tiny-xlmr-tokenizer")
VOCAB_SIZE = 5000  # the text allows at most about 5,500 pieces


def training_text():
    texts = []
    for name in ("default-model-heldout.jsonl", "default-model-first-steps.jsonl",
                 "translation-heldout.jsonl"):
        with open(os.path.join(DATA, name), encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                for key in ("query", "positive", "negative", "text", "a", "b", "source", "target"):
                    if isinstance(row.get(key), str):
                        texts.append(row[key])
    for card in ("default", "translation"):
        with open(os.path.join(ROOT, "checkpoints", card, "MODEL_CARD.md"), encoding="utf-8") as f:
            texts.extend(line.strip() for line in f if line.strip())
    return [t.replace("\n", " ") for t in texts]


def main():
    # Imported here so that train_llama2_spm.py can read training_text() without the module.
    import sentencepiece as spm

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--vocab_size", type=int, default=VOCAB_SIZE)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    texts = training_text()
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "text.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        # The model records its input and output paths (trainer_spec): relative ones, from
        # inside the temporary folder, keep the file the same byte for byte on every run.
        cwd = os.getcwd()
        os.chdir(tmp)
        spm.SentencePieceTrainer.train(
            input="text.txt", model_prefix="spm", model_type="unigram",
            vocab_size=args.vocab_size, character_coverage=0.9995,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            input_sentence_size=0, shuffle_input_sentence=False, num_threads=1,
            minloglevel=2)
        os.chdir(cwd)
        with open(os.path.join(tmp, "spm.model"), "rb") as src:
            model = src.read()
    path = os.path.join(args.out, "sentencepiece.bpe.model")
    with open(path, "wb") as f:
        f.write(model)
    print(f"{path}: {len(model)} bytes, {args.vocab_size} pieces, trained on {len(texts)} texts "
          f"({sum(len(t) for t in texts)} code points)")


if __name__ == "__main__":
    main()
