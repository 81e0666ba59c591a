#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/, byte for byte the same
on every run: small real inputs (the repository's and ../shared's configs, vocabularies and golden
texts, safetensors files laid out as the reference writer lays them out, the README's requests).

    python3 fuzz/make_corpus.py [--shared ../shared]   # needs protoc (protobuf-compiler), and
                                                        # spm_train (sentencepiece) for a charsmap
"""
import argparse
import base64
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
# The tokenizer.json layouts of the goldens (tokenizer, template, added_token, read_spm_model).
sys.path.insert(0, str(ROOT / "tests" / "tokenizer_reference"))
import make_tokenizer_json as layouts  # noqa: E402
# The hand-written torch.save pickles (Pickle) of the hostile checkpoint tests.
sys.path.insert(0, str(ROOT / "tests" / "data"))
import make_hostile_pickles as pickles  # noqa: E402


def write(target, name, data):
    path = CORPUS / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))


def safetensors(tensors, metadata=None, align=True):
    """A safetensors file as huggingface/safetensors writes one: tensors sorted by dtype size then
    name, packed in that order, the compact JSON header padded with spaces to 8 bytes."""
    sizes = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "U8": 1,
             "I8": 1, "BOOL": 1}
    header = {} if metadata is None else {"__metadata__": metadata}
    data = b""
    for name, (dtype, shape, payload) in sorted(tensors.items(),
                                                key=lambda item: (-sizes[item[1][0]], item[0])):
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    if align:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def make_safetensors():
    floats = lambda *values: struct.pack(f"<{len(values)}f", *values)
    write("safetensors", "f32_matrix", safetensors(
        {"bert.embeddings.word_embeddings.weight": ("F32", [2, 3], floats(0.5, -1, 2, 0, 3.25, 1e-3))},
        metadata={"format": "pt"}))
    write("safetensors", "mixed_dtypes", safetensors({
        "half": ("F16", [4], struct.pack("<4e", 1.0, -2.0, 0.5, 65504.0)),
        "brain": ("BF16", [2, 2], bytes.fromhex("803f0040c03f0000")),
        "double": ("F64", [1], struct.pack("<d", 3.5)),
        "ids": ("I64", [2], struct.pack("<2q", 7, -1)),
        "mask": ("BOOL", [3], b"\x01\x00\x01"),
        "empty": ("U8", [0], b""),
    }))
    write("safetensors", "scalar_and_empty", safetensors({
        "scale": ("F32", [], floats(0.125)),
        "none": ("F32", [0, 5], b""),
        "bias": ("I32", [3], struct.pack("<3i", 1, 2, 3)),
    }, metadata={"format": "pt", "source": "attnscope"}))
    # An unpadded header leaves the float32 data off 4-byte alignment: LoadFloat copies it.
    write("safetensors", "misaligned_f32", safetensors(
        {"w": ("F32", [3], floats(1, 2, 3))}, align=False))


def make_torch_pickle():
    """data.pkl of state dicts over torch_pickle_fuzzer's records data/0 (48 bytes) and data/1 (8
    bytes): the plain form, and transformers' OrderedDict with _metadata set by BUILD."""
    write("torch_pickle", "state_dict", pickles.Pickle().state_dict(pickles.VALID_TENSORS).stop())
    with_metadata = pickles.Pickle().state_dict([
        ("w", ("FloatStorage", "0", 12, 2, (2, 3), (3, 1))),
        ("tied", ("FloatStorage", "0", 12, 2, (3, 2), (1, 3))),
        ("b", ("BFloat16Storage", "1", 4, 1, (3,), (1,)))])
    with_metadata.op(b"}").string("_metadata")
    with_metadata.global_("collections", "OrderedDict").op(b")").op(b"R")
    with_metadata.string("").op(b"}").string("version").int(1).op(b"s").op(b"s").op(b"s")
    write("torch_pickle", "state_dict_with_metadata", with_metadata.op(b"b").stop())


def make_model_config(shared):
    shutil.copyfile(ROOT / "tests/data/tiny-bert/config.json", CORPUS / "model_config/tiny_bert")
    shutil.copyfile(ROOT / "checkpoints/default/config.json", CORPUS / "model_config/default_model")
    shutil.copyfile(shared / "models/stories260K/config.json", CORPUS / "model_config/stories260K")
    # bert-base-uncased's config.json as published.
    write("model_config", "bert_base_uncased", json.dumps({
        "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1,
        "gradient_checkpointing": False, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
        "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
        "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0,
        "position_embedding_type": "absolute", "transformers_version": "4.6.0.dev0",
        "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522}, indent=2))
    # A grouped-query Llama with an explicit head_dim, several end ids and nulls.
    write("model_config", "llama_gqa", json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 32000,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1,
        "eos_token_id": 2, "pad_token_id": None, "rope_scaling": None}, indent=2))


def make_tokenizer_config(shared):
    tiny_config = (ROOT / "tests/data/tiny-bert/config.json").read_text()
    stories_config = (shared / "models/stories260K/config.json").read_text()
    write("tokenizer_config", "tiny_bert", (ROOT / "tests/data/tiny-bert/tokenizer_config.json").read_text())
    write("tokenizer_config", "default_model_with_config",
          (ROOT / "checkpoints/default/tokenizer_config.json").read_text() + "\0" +
          (ROOT / "checkpoints/default/config.json").read_text())
    write("tokenizer_config", "bert_base_with_config", json.dumps(
        {"do_lower_case": True, "model_max_length": 512}) + "\0" + tiny_config)
    # transformers >= 4.34: AddedToken objects and added_tokens_decoder.
    added = lambda content, special: {"content": content, "lstrip": False, "normalized": False,
                                      "rstrip": False, "single_word": False, "special": special}
    write("tokenizer_config", "added_tokens_decoder", json.dumps({
        "added_tokens_decoder": {"0": added("[PAD]", True), "1": added("[UNK]", True),
                                 "2": added("[CLS]", True), "137": added("<ent>", True),
                                 "138": added("plain", False)},
        "additional_special_tokens": ["<ent>", {"content": "</ent>"}],
        "clean_up_tokenization_spaces": True, "cls_token": "[CLS]", "do_lower_case": False,
        "mask_token": added("[MASK]", True), "model_max_length": 1000000000000000019884624838656,
        "pad_token": "[PAD]", "sep_token": "[SEP]", "strip_accents": False,
        "tokenize_chinese_chars": False, "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]"},
        indent=2))
    write("tokenizer_config", "llama_with_config", json.dumps({
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
        "legacy": False, "model_max_length": 1000000000000000019884624838656, "pad_token": None,
        "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>"}) + "\0" + stories_config)
    write("tokenizer_config", "llama_eos_list", json.dumps({"add_eos_token": True}) + "\0" +
          json.dumps({"bos_token_id": 1, "eos_token_id": [2, 3], "pad_token_id": 0,
                      "max_position_embeddings": 64}))


def with_changes(root, changes):
    """`root` as JSON text after setting each of `changes`: a key "a__b" sets root["a"]["b"]."""
    for path, value in changes.items():
        node = root
        *parents, last = path.split("__")
        for key in parents:
            node = node[key]
        node[last] = value
    return json.dumps(root, ensure_ascii=False, indent=2)


def tokenizer_json(vocab, **changes):
    """A tokenizer.json of HF tokenizers' BertWordPieceTokenizer over `vocab`."""
    special = lambda token: {"id": vocab.index(token), "content": token, "single_word": False,
                             "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    piece = lambda kind, name, type_id: {kind: {"id": name, "type_id": type_id}}
    root = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [piece("SpecialToken", "[CLS]", 0), piece("Sequence", "A", 0),
                       piece("SpecialToken", "[SEP]", 0)],
            "pair": [piece("SpecialToken", "[CLS]", 0), piece("Sequence", "A", 0),
                     piece("SpecialToken", "[SEP]", 0), piece("Sequence", "B", 1),
                     piece("SpecialToken", "[SEP]", 1)],
            "special_tokens": {t: {"id": t, "ids": [vocab.index(t)], "tokens": [t]}
                               for t in ["[CLS]", "[SEP]"]}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100,
                  "vocab": {token: i for i, token in enumerate(vocab)}},
    }
    return with_changes(root, changes)


def make_tokenizer_json():
    vocab = (ROOT / "tests/data/tiny-bert/vocab.txt").read_text().splitlines()
    write("tokenizer_json", "template_processing", tokenizer_json(vocab))
    write("tokenizer_json", "bert_processing_truncation", tokenizer_json(
        vocab, post_processor={"type": "BertProcessing", "sep": ["[SEP]", vocab.index("[SEP]")],
                               "cls": ["[CLS]", vocab.index("[CLS]")]},
        truncation={"direction": "Right", "max_length": 8, "strategy": "LongestFirst",
                    "stride": 0},
        padding={"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None,
                 "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}))
    added = {"id": len(vocab), "content": "<ent>", "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
    write("tokenizer_json", "cased_no_post_processor", tokenizer_json(
        vocab, normalizer__lowercase=False, normalizer__strip_accents=True,
        normalizer__handle_chinese_chars=False, post_processor=None,
        model__max_input_chars_per_word=6,
        added_tokens=json.loads(tokenizer_json(vocab))["added_tokens"] + [added]))
    write("tokenizer_json", "no_normalizer", tokenizer_json(
        vocab, normalizer=None, model__continuing_subword_prefix="@@"))


def bpe_tokenizer_json(**changes):
    """A byte-level BPE tokenizer.json over tests/data/tiny-bart's vocab.json and merges.txt, in
    Llama 3's layout (a regex Split, then ByteLevel without its regex, ignore_merges), with added
    tokens of every flag and a Sequence post-processor holding a template."""
    bart = ROOT / "tests/data/tiny-bart"
    vocab = json.loads((bart / "vocab.json").read_text(encoding="utf-8"))
    merges = (bart / "merges.txt").read_text(encoding="utf-8").split("\n")[1:-1]
    added = lambda id_, content, **flags: {
        "id": id_, "content": content, "single_word": flags.get("single_word", False),
        "lstrip": flags.get("lstrip", False), "rstrip": flags.get("rstrip", False),
        "normalized": flags.get("normalized", False), "special": flags.get("special", True)}
    # A content the vocabulary has keeps its id there; the others come after it.
    ids = {}
    for content in ["<s>", "</s>", "<mask>", "[MASK]", "Việt"]:
        ids[content] = vocab.get(content, len(vocab) + sum(c not in vocab for c in ids))
    root = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(ids["<s>"], "<s>"), added(ids["</s>"], "</s>", rstrip=True),
                         added(ids["<mask>"], "<mask>", lstrip=True),
                         added(ids["[MASK]"], "[MASK]", single_word=True),
                         added(ids["Việt"], "Việt", special=False, normalized=True)],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<s>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]], "tokens": ["<s>"]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": True, "vocab": vocab,
                  "merges": [m.split(" ") for m in merges]},
    }
    return with_changes(root, changes)


def gemma_layout_tokenizer_json():
    """bpe_tokenizer_json's vocabulary as Gemma 3's layout reads it: characters, not bytes, a space
    replaced by "▁", byte fallback to "<0xXX>" tokens, unk fused, and the decoders undoing it."""
    root = json.loads(bpe_tokenizer_json(
        normalizer={"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        pre_tokenizer=None,
        decoder={"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}))
    model = root["model"]
    for b in range(256):
        model["vocab"].setdefault(f"<0x{b:02X}>", len(model["vocab"]))
    model.update(byte_fallback=True, fuse_unk=True, unk_token="<unk>", ignore_merges=False)
    # The added tokens' ids must stay after the vocabulary's.
    for offset, token in enumerate(t for t in root["added_tokens"] if t["content"] not in model["vocab"]):
        token["id"] = len(model["vocab"]) + offset
    return json.dumps(root, ensure_ascii=False, indent=2)


def llama2_layout_tokenizer_json():
    """gemma_layout_tokenizer_json's vocabulary in Llama 2's layout: "▁" prepended to each stretch
    between added tokens and written for each space, no pre-tokenizer, "<s> $A" and
    "<s> $A <s> $B", the decoders undoing it."""
    root = json.loads(gemma_layout_tokenizer_json())
    root["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    bos = next(t["id"] for t in root["added_tokens"] if t["content"] == "<s>")
    root["post_processor"] = layouts.template(
        [("S", "<s>", 0), ("Q", "A", 0)],
        [("S", "<s>", 0), ("Q", "A", 0), ("S", "<s>", 1), ("Q", "B", 1)], [("<s>", bos)])
    return json.dumps(root, ensure_ascii=False, indent=2)


def make_bpe_tokenizer_json():
    write("tokenizer_json", "bpe_llama3_layout", bpe_tokenizer_json())
    write("tokenizer_json", "bpe_roberta_layout", bpe_tokenizer_json(
        normalizer=None, model__ignore_merges=False,
        pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
        post_processor={"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                        "trim_offsets": True, "add_prefix_space": True}))
    write("tokenizer_json", "bpe_gemma_layout", gemma_layout_tokenizer_json())
    write("tokenizer_json", "bpe_llama2_layout", llama2_layout_tokenizer_json())


def compiled_charsmap(rules):
    """SentencePiece's precompiled_charsmap for `rules` (code points -> code points), compiled by
    spm_train (Debian's sentencepiece) into a model of no other use; None without spm_train. The
    charsmap depends only on the rules, so the seed is the same on every run."""
    if shutil.which("spm_train") is None:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        (scratch / "rules.tsv").write_text("".join(
            " ".join(f"{c:X}" for c in source) + "\t" + " ".join(f"{c:X}" for c in target) + "\n"
            for source, target in rules))
        (scratch / "text.txt").write_text("hello world\nthe capital of france is paris\n")
        subprocess.run(["spm_train", f"--input={scratch / 'text.txt'}",
                        f"--model_prefix={scratch / 'm'}", "--vocab_size=30",
                        "--hard_vocab_limit=false", "--model_type=unigram", "--num_threads=1",
                        f"--normalization_rule_tsv={scratch / 'rules.tsv'}", "--minloglevel=2"],
                       check=True, capture_output=True)
        return layouts.read_spm_model(scratch / "m.model")[2]


def unigram_tokenizer_json(charsmap, **changes):
    """A Unigram tokenizer.json in XLM-R's layout (fairseq's specials first, Metaspace, the
    "<s> $A </s></s> $B </s>" template) over a small vocabulary of pieces of kText, with the
    Precompiled normalizer of `charsmap` (none when it is None)."""
    pieces = ["\u2581", "\u2581the", "\u2581capital", "\u2581of", "\u2581Paris", "\u2581T",
              "ôi", "\u2581y", "ê", "u", "\u2581Vi", "ệ", "t", "北", "京", "a", "e", "i", "o", "s",
              "n", "r", "l", "c", "p", "\u2581is", "\u2581what", "I", "'", "LL", "2026", "\u2581."]
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = [[t, 0.0] for t in specials] + [[p, -1.0 - 0.25 * i] for i, p in enumerate(pieces)]
    vocab.append(["<mask>", 0.0])
    added = [layouts.added_token(i, t) for i, t in enumerate(specials)]
    added.append(layouts.added_token(len(vocab) - 1, "<mask>", lstrip=True))
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                 "split": True}
    normalizer = None if charsmap is None else {
        "type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")}
    root = layouts.tokenizer(
        added, normalizer, metaspace,
        layouts.template(
            [("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0)],
            [("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0), ("S", "</s>", 0), ("Q", "B", 0),
             ("S", "</s>", 0)],
            [("<s>", 0), ("</s>", 2)]),
        dict(metaspace), {"type": "Unigram", "unk_id": 3, "vocab": vocab, "byte_fallback": False})
    return with_changes(root, changes)


def make_unigram_tokenizer_json():
    write("tokenizer_json", "unigram_no_normalizer", unigram_tokenizer_json(
        None, pre_tokenizer__prepend_scheme="first", pre_tokenizer__split=False))
    # NFKC-like rules of every shape: one code point to one, to two, two to one, to nothing.
    charsmap = compiled_charsmap([((0xFB01,), (0x66, 0x69)), ((0xFF21,), (0x61,)),
                                  ((0x1EA0,), (0x41, 0x323)), ((0x65, 0x301), (0xE9,)),
                                  ((0x3000,), (0x20,)), ((0x200B,), ())])
    if charsmap is None:
        print("spm_train (sentencepiece) is not installed: no Unigram seed with a charsmap")
        return
    write("tokenizer_json", "unigram_xlmr_layout", unigram_tokenizer_json(charsmap))
    # T5's: whitespace split off first, Metaspace in its older spelling (add_prefix_space, no
    # prepend_scheme or split), "$A </s>" and "$A </s> $B </s>", the charsmap then runs of spaces
    # made one, as newer conversions write it.
    write("tokenizer_json", "unigram_t5_layout", unigram_tokenizer_json(
        charsmap,
        normalizer={"type": "Sequence", "normalizers": [
            json.loads(unigram_tokenizer_json(charsmap))["normalizer"],
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}]},
        post_processor=layouts.template(
            [("Q", "A", 0), ("S", "</s>", 0)],
            [("Q", "A", 0), ("S", "</s>", 0), ("Q", "B", 0), ("S", "</s>", 0)], [("</s>", 2)]),
        decoder={"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}))
    write("tokenizer_json", "unigram_xlmr_converter_layout", unigram_tokenizer_json(
        charsmap, normalizer={"type": "Sequence", "normalizers": [
            json.loads(unigram_tokenizer_json(charsmap))["normalizer"],
            {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]}))


def make_more_layouts():
    """The tokenizer.json kinds that need no charsmap and no layout above has: WordLevel,
    openai-gpt's BPE with end_of_word_suffix (BertNormalizer, BertPreTokenizer, BPEDecoder), a BPE
    with continuing_subword_prefix among Nmt, CharDelimiterSplit and BertProcessing, and a Unigram
    model with byte_fallback; vocabularies of the words of kText."""
    from collections import Counter
    words = ["tôi", "yêu", "việt", "nam", "the", "capital", "of", "paris", "is", "what", "i", "'",
             "ll", "see", ".", "<", ">", "mask", "北", "京"]
    specials = ["<unk>", "<s>", "</s>"]
    template = layouts.template(
        [("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0)],
        [("S", "<s>", 0), ("Q", "A", 0), ("S", "</s>", 0), ("Q", "B", 1), ("S", "</s>", 1)],
        [("<s>", 1), ("</s>", 2)])
    added = [layouts.added_token(i, t) for i, t in enumerate(specials)]
    vocab = {t: i for i, t in enumerate(specials + words)}
    write("tokenizer_json", "wordlevel_layout", json.dumps(layouts.tokenizer(
        added, {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
        {"type": "Whitespace"}, template, None,
        {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}), ensure_ascii=False, indent=2))
    counts = Counter(tuple(w) for w in words)
    for name, prefix, suffix in [("bpe_openai_gpt_layout", "", "</w>"),
                                 ("bpe_bert_components_layout", "##", "")]:
        alphabet, merges = layouts.train_bpe(counts, 40, prefix=prefix, suffix=suffix)
        vocab = layouts.bpe_vocab(specials, alphabet, merges, prefix=prefix)
        model = layouts.bpe_model(vocab, merges)
        model.update(unk_token="<unk>", continuing_subword_prefix=prefix, end_of_word_suffix=suffix)
        if suffix:
            root = layouts.tokenizer(
                added, {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                        "strip_accents": None, "lowercase": True},
                {"type": "BertPreTokenizer"}, None, {"type": "BPEDecoder", "suffix": suffix}, model)
        else:
            root = layouts.tokenizer(
                added, {"type": "Sequence", "normalizers": [
                    {"type": "Nmt"}, {"type": "BertNormalizer", "lowercase": True}]},
                {"type": "Sequence", "pretokenizers": [
                    {"type": "CharDelimiterSplit", "delimiter": "/"}, {"type": "BertPreTokenizer"}]},
                {"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]},
                {"type": "WordPiece", "prefix": prefix, "cleanup": True}, model)
        write("tokenizer_json", name, json.dumps(root, ensure_ascii=False, indent=2))
    root = json.loads(unigram_tokenizer_json(None))
    root["model"]["vocab"] += [[f"<0x{b:02X}>", 0.0] for b in range(256)]
    root["model"]["byte_fallback"] = True
    root["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, root["decoder"]]}
    write("tokenizer_json", "unigram_byte_fallback", json.dumps(root, ensure_ascii=False, indent=2))


def make_texts(shared):
    goldens = shared / "testdata/tokenizer"
    texts = []
    for name in ["wordpiece_bert_base_uncased.jsonl", "wordpiece_bert_base_cased.jsonl"]:
        for line in (goldens / name).read_text().splitlines():
            if line.strip() and json.loads(line).get("text") not in texts:
                texts.append(json.loads(line)["text"])
    pairs = []
    for line in (goldens / "pairs_bert_base_uncased.jsonl").read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        pair = record.get("text"), record.get("text_pair")
        if pair[0] is not None and pair[1] is not None and pair not in pairs:
            pairs.append(pair)
    # A TinyStories line, as stories260K was trained on, and the README's example texts.
    texts += ["Once upon a time, there was a little girl named Lily. She loved to play outside.",
              "[CLS] Tôi yêu [MASK] Việt Nam quá [SEP]", "<s>Once</s> upon<unk> a time"]
    for target in ["wordpiece", "sentencepiece"]:
        for i, text in enumerate(texts):
            write(target, f"text_{i:02d}", text)
        for i, (a, b) in enumerate(pairs):
            write(target, f"pair_{i:02d}", a + "\0" + b)


def make_request_proto(protoc):
    """Text-format requests encoded by protoc, as a gRPC client sends them."""
    requests = {
        "tokenize_pair": ("TokenizeRequest", 'model: "default" text: "Tôi yêu Việt Nam quá" '
                          'text_pair: "나는 오늘" tokenization { truncation: TRUNCATION_LONGEST_FIRST '
                          'max_length: 16 skip_special_tokens: true }'),
        "get_attention": ("GetAttentionRequest", 'model: "bert" text: "hello world" layers: [-1, 0] '
                          'heads: [1] head_aggregation: HEAD_AGGREGATION_MEAN rollout: true '
                          'dtype: DTYPE_FLOAT16 top_k: 4 window { query_start: 1 query_end: 3 '
                          'key_start: 0 key_end: 2 } aggregate_words: true'),
        "get_attention_scores": ("GetAttentionRequest", 'text: "the cat" include_scores: true '
                                 'dtype: DTYPE_BFLOAT16 tokenization { truncation: '
                                 'TRUNCATION_ONLY_SECOND max_length: 8 } text_pair: "sat"'),
        "get_attention_decoder": ("GetAttentionRequest", 'model: "marian" text: ">>vie<< Inserting '
                                  'Tables" decoder_text: "Chèn bảng" layers: [-1] top_k: 2 '
                                  'decoder_window { query_start: 1 query_end: 3 }'),
        "encode": ("EncodeRequest", 'model: "default" inputs { text: "a" } inputs { text: "b" '
                   'text_pair: "c" } output_hidden_states: true pooling: POOLING_MEAN '
                   'normalize: true dtype: DTYPE_FLOAT32'),
        "cross_attention": ("CrossAttentionRequest", 'model: "default" query: "랭체인 뭐야" '
                            'documents: ["오늘 저녁에는 김치찌개를 먹었다", "랭체인은 프레임워크입니다"] '
                            'layers: [0] heads: [0] include_document_to_query: true '
                            'head_aggregation: HEAD_AGGREGATION_MAX'),
        "get_parameter": ("GetParameterRequest", 'model: "default" name: '
                          '"bert.embeddings.position_embeddings.weight" dtype: DTYPE_FLOAT16 '
                          'row_start: 2 row_end: 5'),
        "attribute": ("AttributeRequest", 'model: "default" text: "làm sao chèn bảng" '
                      'text_pair: "Chèn bảng mới vào tài liệu." target: 0 '
                      'methods: [ATTRIBUTION_METHOD_OCCLUSION, '
                      'ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS] '
                      'occlusion_token: OCCLUSION_TOKEN_UNK baseline: ATTRIBUTION_BASELINE_ZERO '
                      'integrated_gradients_steps: 20'),
        "generate": ("GenerateRequest", 'model: "stories" prompt: "Once upon a time" '
                     'max_new_tokens: 8 method: DECODING_METHOD_SAMPLING temperature: 0.7 '
                     'top_k: 5 top_p: 0.9 seed: 3 output_attentions: true layers: [-1] '
                     'heads: [0, 1] head_aggregation: HEAD_AGGREGATION_MEAN dtype: DTYPE_FLOAT16'),
    }
    encoded = {}
    for name, (message, text) in requests.items():
        encoded[name] = subprocess.run(
            [protoc, f"--encode=attnscope.v1.{message}", f"--proto_path={ROOT / 'proto'}",
             "attnscope/v1/attnscope.proto"],
            input=text.encode(), capture_output=True, check=True).stdout
        write("request_proto", name, encoded[name])
    return encoded


# request_run_fuzzer.cc: byte 0 picks the RPC, byte 1 one of its 7 models (high bit: the message's
# own model name).
REQUEST_RUN_RPCS = {"tokenize_pair": [0], "get_attention": [1, 2], "get_attention_scores": [1, 2],
                    "get_attention_decoder": [1, 2], "encode": [3], "cross_attention": [4],
                    "attribute": [5], "generate": [6], "get_parameter": [7]}


def make_request_run(encoded):
    """Each request of request_proto on each of the fuzzer's models."""
    for name, rpcs in REQUEST_RUN_RPCS.items():
        for rpc in rpcs:
            for model in range(7):
                write("request_run", f"{name}_{rpc}_{model}", bytes([rpc, model]) + encoded[name])
    write("request_run", "training_record", bytes([8, 1]))


def make_http_body():
    """JSON bodies as the README's curl examples and the dashboard send them."""
    bodies = {
        "get_attention": {"model": "default", "text": "Tôi yêu Việt Nam quá", "layers": [3],
                          "heads": [1]},
        "get_attention_words": {"text": "나는 오늘 랭체인을 공부한다", "layers": [-1],
                                "aggregateWords": True, "headAggregation": "HEAD_AGGREGATION_MEAN"},
        "get_attention_window": {"text": "hello world", "dtype": "DTYPE_FLOAT16", "topK": 3,
                                 "window": {"queryStart": 1, "keyEnd": 2}, "rollout": True,
                                 "text_pair": "hi", "tokenization": {"truncation":
                                 "TRUNCATION_LONGEST_FIRST", "maxLength": 8}},
        "get_attention_decoder": {"model": "marian", "text": ">>kor<< Inserting Tables",
                                  "decoderText": "표 삽입", "headAggregation": "HEAD_AGGREGATION_MAX",
                                  "decoder_window": {"queryStart": 1, "keyEnd": 2}},
        "cross_attention": {"model": "default", "query": "랭체인 뭐야",
                            "documents": ["오늘 저녁에는 김치찌개를 먹었다",
                                          "랭체인은 대규모 언어 모델로 애플리케이션을 만드는 프레임워크입니다"],
                            "layers": [0], "heads": [0], "includeDocumentToQuery": True},
        "tokenize": {"text": "Tôi yêu Việt Nam quá"},
        "encode": {"inputs": [{"text": "a", "textPair": "b"}, {"text": "c"}],
                   "pooling": "POOLING_CLS", "normalize": True, "output_hidden_states": True},
        "get_parameter": {"model": "default", "name": "bert.embeddings.position_embeddings.weight",
                          "rowStart": "2", "rowEnd": 5, "dtype": 2},
        "attribute": {"text": "how do I insert a table",
                      "textPair": "To insert a new table, choose Table - Insert Table.",
                      "methods": ["ATTRIBUTION_METHOD_GRADIENT_X_INPUT"],
                      "baseline": "ATTRIBUTION_BASELINE_PAD", "integratedGradientsSteps": 100},
        "generate": {"model": "stories", "prompt": "Once upon a time", "maxNewTokens": 8,
                     "method": "DECODING_METHOD_BEAM_SEARCH", "numBeams": 3, "lengthPenalty": 0.5,
                     "outputAttentions": True, "layers": [-1], "dtype": "DTYPE_BFLOAT16"},
    }
    for name, body in bodies.items():
        write("http_body", name, json.dumps(body, ensure_ascii=False))
    write("http_body", "empty", "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=str(ROOT.parent / "shared"))
    parser.add_argument("--protoc", default="protoc")
    args = parser.parse_args()
    shared = pathlib.Path(args.shared)
    shutil.rmtree(CORPUS, ignore_errors=True)
    for target in ["safetensors", "model_config", "tokenizer_config", "tokenizer_json",
                   "wordpiece", "sentencepiece", "request_proto", "request_run", "http_body", "torch_pickle"]:
        (CORPUS / target).mkdir(parents=True)
    make_safetensors()
    make_torch_pickle()
    make_model_config(shared)
    make_tokenizer_config(shared)
    make_tokenizer_json()
    make_bpe_tokenizer_json()
    make_unigram_tokenizer_json()
    make_more_layouts()
    make_texts(shared)
    make_request_run(make_request_proto(args.protoc))
    make_http_body()


if __name__ == "__main__":
    main()
