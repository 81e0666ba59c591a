#!/usr/bin/python3
"""Builds the tokenizer files of tests/data/tiny-t5 and their golden encodings.

Trains a small SentencePiece unigram model with SentencePiece's own trainer (Debian package
python3-sentencepiece) in the layout of T5's spiece.model: "<pad>" 0, "</s>" 1, "<unk>" 2, no
"<s>". Writes tokenizer_config.json with extra_ids sentinels ("<extra_id_0>" is the last id, as
T5Tokenizer numbers them: <extra_id_i> = spm size + extra_ids - 1 - i) and t5_tokenizer_golden.json:
what transformers' T5Tokenizer (written out below from its source, tokenization_t5.py, legacy
behaviour) gives for a set of texts, on top of SentencePiece's own encoder and decoder:

  tokenize: spm.encode(text) pieces; encoding appends "</s>" (no BOS)
  decode:   with skip_special_tokens, <pad>, </s>, <unk> and the sentinels are dropped and the
            rest is spm.decode of the pieces

Offsets are SentencePiece's spans of the text in code points (the fast tokenizers' convention for
SentencePiece models).

Run make_encoder_decoder.py afterwards: tiny-t5's vocab_size is the spm size plus extra_ids.

  apt-get install -y python3-sentencepiece
  /usr/bin/python3 tests/data/make_t5_tokenizer.py
"""
import json
import os
import sys
import tempfile

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_marian_tokenizer import SOURCE_TEXT  # noqa: E402  (the English training text)

OUT = os.path.join(HERE, "tiny-t5")
EXTRA_IDS = 3

CASES = [
    "Inserting Tables",
    "translate English to German: Select the cells.",
    "  Printing   a document  ",
    "Zebra quiz: 😀 ü Ω",
    "ﬁne Ｔable",  # NFKC (nmt_nfkc) changes these characters
    "Delete\nthe row",
]


def train(text, path, vocab_size):
    # The trainer records its input's path in the model; a fixed relative name keeps the file
    # byte-identical from run to run.
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        with open("corpus.txt", "w") as corpus:
            corpus.write(text)
        spm.SentencePieceTrainer.train(
            input="corpus.txt", model_prefix="model", vocab_size=vocab_size,
            model_type="unigram", character_coverage=1.0, pad_id=0, eos_id=1, unk_id=2,
            bos_id=-1, hard_vocab_limit=False, num_threads=1, minloglevel=2)
        os.chdir(cwd)
        os.replace(os.path.join(scratch, "model.model"), path)
    return spm.SentencePieceProcessor(model_file=path)


def tokenize(processor, text):
    """T5Tokenizer: sp_model.encode(text) then build_inputs_with_special_tokens (+ "</s>")."""
    # The Python binding gives SentencePiece's spans in characters (the C++ API in bytes).
    encoded = processor.encode(text, out_type="immutable_proto")
    tokens, ids, offsets = [], [], []
    for piece in encoded.pieces:
        begin = min(piece.begin, len(text))
        end = max(begin, min(piece.end, len(text)))
        tokens.append(piece.piece)
        ids.append(piece.id)
        offsets.append([begin, end])
    return {"text": text, "tokens": tokens, "input_ids": ids + [processor.eos_id()],
            "offsets": offsets}


def decode(processor, ids):
    """T5Tokenizer.decode(ids, skip_special_tokens=True): the special tokens (pad, eos, unk and
    the sentinels) dropped, the remaining pieces decoded by SentencePiece."""
    size = processor.get_piece_size()
    special = {processor.pad_id(), processor.eos_id(), processor.unk_id()}
    pieces = [processor.id_to_piece(i) for i in ids if i < size and i not in special]
    return processor.decode_pieces(pieces)


def main():
    os.makedirs(OUT, exist_ok=True)
    processor = train(SOURCE_TEXT, os.path.join(OUT, "spiece.model"), vocab_size=60)
    size = processor.get_piece_size()
    assert [processor.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                   "extra_ids": EXTRA_IDS, "model_max_length": 64,
                   "tokenizer_class": "T5Tokenizer"}, f, indent=2)
        f.write("\n")
    encoded = [tokenize(processor, text) for text in CASES]
    sentinel = {f"<extra_id_{i}>": size + EXTRA_IDS - 1 - i for i in range(EXTRA_IDS)}
    decodes = []
    for case in encoded:
        decodes.append({"ids": case["input_ids"], "text": decode(processor, case["input_ids"])})
    mixed = ([0, sentinel["<extra_id_0>"]] + encoded[0]["input_ids"][:-1] + [2] +
             [sentinel["<extra_id_2>"]] + encoded[1]["input_ids"])
    decodes.append({"ids": mixed, "text": decode(processor, mixed)})
    golden = {"vocab_size": size + EXTRA_IDS, "spm_size": size, "sentinels": sentinel,
              "encode": encoded, "decode": decodes}
    with open(os.path.join(OUT, "t5_tokenizer_golden.json"), "w") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{OUT}: spiece.model {size} pieces + {EXTRA_IDS} sentinels")


if __name__ == "__main__":
    main()
