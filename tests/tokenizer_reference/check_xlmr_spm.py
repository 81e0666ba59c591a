#!/usr/bin/python3
"""Compares the XLM-R layout tokenizer.json (tests/data/tiny-xlmr-tokenizer), as Hugging Face's
tokenizers library runs it (the goldens of make_goldens.js, OUT/xlmr.jsonl; with --tokenizer
xlmr-converter, the variant with transformers' current SpmConverter normalizer), with
SentencePiece's own encoder on the same model (sentencepiece.bpe.model), text by text, without
special tokens:

  pieces: spm.encode(text, out_type=str) == the tokens of "plain"
  ids:    fairseq id = SentencePiece id + 1, SentencePiece's <unk> (0) -> 3 == the ids of "plain"

and prints each text that differs under the cause it is filed under:

  typed special token   the text holds <s>, </s>, <pad>, <unk> or <mask>: tokenizers matches them
                        as added tokens, SentencePiece reads them as plain text (its control
                        symbols are never matched in input)
  whitespace            SentencePiece's normalizer removes leading, trailing and repeated
                        whitespace (remove_extra_whitespaces); the tokenizer.json layout that
                        transformers' XLMRobertaConverter wrote for XLM-R has only the Precompiled
                        map (which folds tabs, newlines and other spaces to " " but removes none),
                        so Metaspace keeps a "▁" for each extra space
  decomposed text       the text is not in NFC (decomposed Vietnamese, conjoining Hangul jamo):
                        tokenizers' Precompiled normalizer works grapheme cluster by grapheme
                        cluster. A cluster shorter than 6 UTF-8 bytes is looked up in the charsmap
                        as a whole and, when only prefixes of it are there, the whole cluster is
                        replaced by the shortest such prefix's normalization, dropping the rest
                        ("o" U+031B U+0300 -> "ơ", the grave accent lost; SentencePiece gives
                        "ờ"). A longer cluster is looked up one character at a time, so sequences
                        the charsmap maps only as a whole stay as they are (the jamo of "나는"
                        stay jamo and become <unk>; SentencePiece composes them). Hugging Face's
                        library is attnscope's reference, so this is what the C++ reader must do.
  equal-score tie       both segmentations have the same total score (the same pieces in another
                        order, as "***" -> "**" "*" in SentencePiece, "*" "**" in tokenizers):
                        the two Viterbi searches break ties differently; the C++ reader must break
                        them as tokenizers does
  other                 anything else (a bug in the layout or in the reader; expected none)

A difference is filed under whitespace when the text with its whitespace collapsed (runs of
Unicode whitespace to one space, none at either end) gives SentencePiece's pieces and ids in
tokenizers too (run through make_goldens.js on those texts) and in SentencePiece unchanged.

Exit status 0 when every difference has one of the first four causes, 1 otherwise.

  apt-get install -y python3-sentencepiece
  /usr/bin/python3 tests/tokenizer_reference/check_xlmr_spm.py --goldens BUILD/tokenizer-goldens \
      --node_modules BUILD/node_modules --built BUILD/tokenizers [--tokenizer xlmr-converter]
"""
import argparse
import json
import os
import subprocess
import tempfile
import unicodedata

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "tests", "data", "tiny-xlmr-tokenizer", "sentencepiece.bpe.model")
SPECIALS = ("<s>", "</s>", "<pad>", "<unk>", "<mask>")


def fairseq_id(spm_id):
    return 3 if spm_id == 0 else spm_id + 1


def squeeze(text):
    return " ".join(text.split())


def tokenizers_on(texts, name, node_modules, built):
    """make_goldens.js --only NAME on texts: their "plain" encodings, in order."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.jsonl")
        with open(corpus, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps(t, ensure_ascii=False) + "\n")
        subprocess.run(["node", os.path.join(HERE, "make_goldens.js"), "--node_modules", node_modules,
                        "--built", built, "--corpus", corpus, "--only", name, "--out", tmp],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(tmp, name + ".jsonl"), encoding="utf-8") as f:
            return [json.loads(line)["plain"] for line in f]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--goldens", required=True, help="make_goldens.js --out folder (xlmr.jsonl)")
    parser.add_argument("--node_modules", required=True, help="npm ci of tests/tokenizer_reference")
    parser.add_argument("--built", default="", help="make_tokenizer_json.py --out (xlmr-converter)")
    parser.add_argument("--tokenizer", default="xlmr", choices=["xlmr", "xlmr-converter"])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--show", type=int, default=5, help="texts printed per cause")
    args = parser.parse_args()

    sp = spm.SentencePieceProcessor(model_file=args.model)
    causes = {"typed special token": [], "whitespace": [], "decomposed text": [],
              "equal-score tie": [], "other": []}
    score = {sp.id_to_piece(i): sp.get_score(i) for i in range(sp.get_piece_size())}
    differing = []
    total = 0
    with open(os.path.join(args.goldens, args.tokenizer + ".jsonl"), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            total += 1
            text = row["text"]
            pieces = sp.encode(text, out_type=str)
            ids = [fairseq_id(i) for i in sp.encode(text)]
            tokens, hf_ids = row["plain"]["tokens"], row["plain"]["ids"]
            if pieces != tokens or ids != hf_ids:
                differing.append((row["i"], text, pieces, tokens, ids, hf_ids))
    squeezed = tokenizers_on([squeeze(d[1]) for d in differing], args.tokenizer, args.node_modules,
                             args.built)
    for d, hf in zip(differing, squeezed):
        i, text, pieces, tokens, ids, hf_ids = d
        if any(s in text for s in SPECIALS):
            cause = "typed special token"
        elif (hf["tokens"] == pieces and hf["ids"] == ids
              and sp.encode(squeeze(text), out_type=str) == pieces):
            cause = "whitespace"
        elif not unicodedata.is_normalized("NFC", text):
            cause = "decomposed text"
        elif (all(t in score for t in tokens) and
              abs(sum(score[p] for p in pieces) - sum(score[t] for t in tokens)) < 1e-9):
            cause = "equal-score tie"
        else:
            cause = "other"
        causes[cause].append(d)
    differ = sum(len(v) for v in causes.values())
    print(f"{args.tokenizer}: {total} texts, {total - differ} identical (pieces and ids), {differ} differ")
    for cause, rows in causes.items():
        print(f"\n{cause}: {len(rows)}")
        for i, text, pieces, tokens, ids, hf_ids in rows[: args.show]:
            print(f"  text {i}: {json.dumps(text, ensure_ascii=False)}")
            print(f"    sentencepiece: {pieces} {ids}")
            print(f"    tokenizers:    {tokens} {hf_ids}")
    return 1 if causes["other"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
