#!/usr/bin/python3
"""Builds the tokenizer files of tests/data/tiny-marian and their golden encodings.

Trains two small SentencePiece unigram models with SentencePiece's own trainer (Debian package
python3-sentencepiece): source.spm on English text, target.spm on Vietnamese and Korean text. Then
writes vocab.json in the layout of Marian checkpoints ("</s>" 0, "<unk>" 1, the pieces of both
models, the target-language codes, "<pad>" last), tokenizer_config.json, and
marian_tokenizer_golden.json: what transformers' MarianTokenizer (written out below from its
source, transformers 4.x tokenization_marian.py) gives for a set of texts, on top of
SentencePiece's own encoder and decoder:

  tokenize: language code (">>.+<<" matched at the start) + spm.encode(text with every code removed)
  ids:      vocab.json[piece], <unk>'s id for pieces it lacks; encoding appends </s>
  decode:   special tokens dropped (skip_special_tokens) or written literally plus a space, the
            other pieces joined by target.spm's decode_pieces, U+2581 -> space, stripped

Offsets (which MarianTokenizer does not give) are SentencePiece's spans of the text it encoded,
mapped back through the removed codes, in code points of the caller's text.

Run make_encoder_decoder.py afterwards: tiny-marian's vocab_size and pad id follow vocab.json.

  apt-get install -y python3-sentencepiece
  /usr/bin/python3 tests/data/make_marian_tokenizer.py
"""
import json
import os
import re
import tempfile

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiny-marian")
LANGUAGE_CODES = [">>vie<<", ">>kor<<"]
LANGUAGE_CODE_RE = re.compile(">>.+<<")

SOURCE_TEXT = """Inserting Tables
Choose Insert - Table to insert a new table into the document.
Select the cells that you want to merge.
To delete a row, select it and press Delete.
Formatting text in the spreadsheet.
The sheet contains the data of the chart.
Opens a dialog where you can set the options of the selected object.
Printing a document with several pages.
Saving documents in other formats.
Use the mouse to move the table to another place in the text.
"""

TARGET_TEXT = """Chèn bảng
Chọn Chèn - Bảng để chèn một bảng mới vào tài liệu.
Chọn các ô bạn muốn gộp.
Để xóa một hàng, hãy chọn nó và nhấn Xóa.
Định dạng văn bản trong bảng tính.
표 삽입
삽입 - 표를 선택하여 문서에 새 표를 삽입합니다.
병합할 셀을 선택합니다.
행을 삭제하려면 행을 선택하고 Delete 키를 누릅니다.
스프레드시트에서 텍스트 서식 지정.
"""

SOURCE_CASES = [
    "Inserting Tables",
    ">>vie<< Inserting Tables",
    ">>kor<<Select the cells.",
    "  Printing   a document  ",
    "Move >>kor<< the table",
    ">>vie<< first line >>x<<\nsecond >>kor<< line",
    ">><< no code",
    "Zebra quiz: 😀 ü Ω",
    ">>fra<< unknown code",
]
TARGET_CASES = [
    "Chèn bảng",
    "표 삽입",
    "Chọn các ô bạn muốn gộp.",
    "병합할 셀을 선택합니다.",
    "Xóa 행 😀",
]


def train(text, prefix, vocab_size):
    # The trainer records its input's path in the model; a fixed relative name keeps the file
    # byte-identical from run to run.
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        with open("corpus.txt", "w") as corpus:
            corpus.write(text)
        spm.SentencePieceTrainer.train(
            input="corpus.txt", model_prefix="model", vocab_size=vocab_size,
            model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=1, unk_id=0,
            pad_id=-1, hard_vocab_limit=False, num_threads=1, minloglevel=2)
        os.chdir(cwd)
        os.replace(os.path.join(scratch, "model.model"), prefix + ".spm")
    return spm.SentencePieceProcessor(model_file=prefix + ".spm")


def build_vocab(source, target):
    vocab = {"</s>": 0, "<unk>": 1}
    for processor in (source, target):
        for i in range(processor.get_piece_size()):
            piece = processor.id_to_piece(i)
            if processor.is_control(i) or processor.is_unknown(i) or piece in vocab:
                continue
            vocab[piece] = len(vocab)
    for code in LANGUAGE_CODES:
        vocab[code] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def tokenize(processor, vocab, text):
    """MarianTokenizer._tokenize and convert_tokens_to_ids, with offsets."""
    match = LANGUAGE_CODE_RE.match(text)
    tokens, ids, offsets = [], [], []
    if match:
        tokens.append(match.group(0))
        ids.append(vocab.get(match.group(0), vocab["<unk>"]))
        offsets.append([0, match.end()])
    # The characters of `text` that SentencePiece sees, each with its position in `text`.
    kept, origin, at = "", [], 0
    for removed in list(LANGUAGE_CODE_RE.finditer(text)) + [None]:
        until = removed.start() if removed else len(text)
        kept += text[at:until]
        origin.extend(range(at, until))
        if removed:
            at = removed.end()
    # The Python binding gives SentencePiece's spans in characters (the C++ API in bytes).
    encoded = processor.encode(kept, out_type="immutable_proto")
    assert [p.piece for p in encoded.pieces] == processor.encode(kept, out_type=str)
    for piece in encoded.pieces:
        begin = min(piece.begin, len(kept))
        end = max(begin, min(piece.end, len(kept)))
        start = origin[begin] if begin < len(kept) else len(text)
        tokens.append(piece.piece)
        ids.append(vocab.get(piece.piece, vocab["<unk>"]))
        offsets.append([start, origin[end - 1] + 1 if end > begin else start])
    return {"text": text, "tokens": tokens, "input_ids": ids + [vocab["</s>"]],
            "offsets": offsets}


def decode(target, inverse, special, ids, skip_special_tokens):
    """MarianTokenizer.decode (PreTrainedTokenizer._decode + convert_tokens_to_string)."""
    tokens = [inverse[i] for i in ids if not (skip_special_tokens and inverse[i] in special)]
    out, run = "", []
    for token in tokens:
        if token in special:
            out += target.decode_pieces(run) + token + " "
            run = []
        else:
            run.append(token)
    out += target.decode_pieces(run)
    return out.replace("\u2581", " ").strip()


def main():
    source = train(SOURCE_TEXT, os.path.join(OUT, "source"), vocab_size=60)
    target = train(TARGET_TEXT, os.path.join(OUT, "target"), vocab_size=90)
    vocab = build_vocab(source, target)
    with open(os.path.join(OUT, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"source_lang": "en", "target_lang": "vi", "model_max_length": 64,
                   "separate_vocabs": False, "eos_token": "</s>", "unk_token": "<unk>",
                   "pad_token": "<pad>", "tokenizer_class": "MarianTokenizer"}, f, indent=2)
        f.write("\n")
    inverse = {i: piece for piece, i in vocab.items()}
    special = {"</s>", "<unk>", "<pad>"}
    targets = [tokenize(target, vocab, text) for text in TARGET_CASES]
    decodes = []
    for case in targets:
        ids = case["input_ids"]
        for skip in (True, False):
            decodes.append({"ids": ids, "skip_special_tokens": skip,
                            "text": decode(target, inverse, special, ids, skip)})
    mixed = [vocab["<pad>"]] + targets[0]["input_ids"] + [vocab["<unk>"], vocab["<pad>"]]
    for skip in (True, False):
        decodes.append({"ids": mixed, "skip_special_tokens": skip,
                        "text": decode(target, inverse, special, mixed, skip)})
    golden = {"vocab_size": len(vocab),
              "source": [tokenize(source, vocab, text) for text in SOURCE_CASES],
              "target": targets, "decode": decodes}
    with open(os.path.join(OUT, "marian_tokenizer_golden.json"), "w") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{OUT}: vocab.json {len(vocab)} entries (source.spm {source.get_piece_size()}, "
          f"target.spm {target.get_piece_size()} pieces)")


if __name__ == "__main__":
    main()
