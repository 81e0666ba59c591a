#!/usr/bin/python3
"""Builds tests/data/tiny-mpnet: a small random MPNet cross-encoder in Hugging Face's
MPNetForSequenceClassification layout (the encoder of sentence-transformers' all-mpnet-base-v2),
plus goldens.

The reference forward pass is written from transformers' modeling_mpnet.py with PyTorch's own
modules (nn.Embedding, nn.LayerNorm, nn.MultiheadAttention with average_attn_weights=False, nn.GELU,
nn.Linear), not a transcription of the C++ engine, and runs in float64 on the float32 weights that
are saved. What sets MPNet apart from BERT:
  - positions as RoBERTa's: a token that is not the pad id (pad_token_id 1) takes the next position
    after pad_token_id, counting only such tokens; a pad-id token takes pad_token_id
    (create_position_ids_from_input_ids); no token type embeddings;
  - MPNetEncoder.relative_attention_bias, nn.Embedding(32 buckets, heads): the bias of the bucket of
    each (key position - query position), positions 0 .. S - 1, added to every layer's scaled
    scores with the padding mask (relative_position_bucket below, num_buckets 32, max_distance
    128); here nn.MultiheadAttention's float attn_mask carries both;
  - layer names attention.attn.{q,k,v,o} and attention.LayerNorm; the head is
    out_proj(tanh(dense(h_<s>))) (MPNetClassificationHead in eval mode), no pooler.
One label, the relevance score. One case is longer than 2 * 8 + 1 tokens, so that distances past
the exact buckets (the logarithmic ones) are exercised.

The tokenizer is MPNet's layout (transformers' MPNetConverter): <s> <pad> </s> <unk> first, then
tiny-bert's vocabulary (as MPNet's vocab.txt is BERT's uncased one after those four), <mask> last;
WordPiece with [UNK] (MPNetTokenizer's unk_token), BertNormalizer, BertPreTokenizer and the template
<s> $A </s> / <s> $A </s> </s> $B </s>. The goldens' ids are looked up word by word (every word is
in the vocabulary); the C++ tests check the tokenizer gives them, and tests/tokenizer_reference
checks this layout with the full vocabulary against Hugging Face's tokenizers library.

Outputs (tests/data/tiny-mpnet/): config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, golden.json (per case text, text_pair, input_ids, attention_mask and the
expected position_ids, last_hidden_state, hidden_states, attentions [batch, head, query, key] and
logits, rounded to 1e-9).

Run with Debian's interpreter (python3-torch): OMP_NUM_THREADS=1 /usr/bin/python3 tests/data/make_tiny_mpnet.py
"""
import json
import math
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
from make_tiny_bert import HEADS, HIDDEN, INTERMEDIATE, LAYERS, write_safetensors  # noqa: E402
from make_tiny_bert import VOCAB as BERT_VOCAB  # noqa: E402

OUT = os.path.join(HERE, "tiny-mpnet")
VOCAB = ["<s>", "<pad>", "</s>", "<unk>"] + BERT_VOCAB + ["<mask>"]
BOS, PAD, EOS = 0, 1, 2
MAX_TOKENS = 62
MAX_POSITIONS = MAX_TOKENS + PAD + 1
BUCKETS = 32
EPS = 1e-5  # all-mpnet-base-v2's layer_norm_eps


def relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
    """modeling_mpnet's MPNetEncoder.relative_position_bucket."""
    ret = 0
    n = -relative_position
    num_buckets //= 2
    ret += (n < 0).to(torch.long) * num_buckets
    n = torch.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) *
        (num_buckets - max_exact)).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    return ret + torch.where(is_small, n, val_if_large)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
        self.attention_norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.intermediate = nn.Linear(HIDDEN, INTERMEDIATE)
        self.activation = nn.GELU()  # exact erf form, MPNetConfig's "gelu"
        self.output = nn.Linear(INTERMEDIATE, HIDDEN)
        self.output_norm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, x, attn_mask):
        attended, weights = self.attention(x, x, x, attn_mask=attn_mask, need_weights=True,
                                           average_attn_weights=False)
        x = self.attention_norm(attended + x)
        return self.output_norm(self.output(self.activation(self.intermediate(x))) + x), weights


class CrossEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(len(VOCAB), HIDDEN)
        self.position = nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.embedding_norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.relative_attention_bias = nn.Embedding(BUCKETS, HEADS)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.out_proj = nn.Linear(HIDDEN, 1)

    def position_bias(self, length):
        """MPNetEncoder.compute_position_bias: [heads, S, S]."""
        context = torch.arange(length)[:, None]
        memory = torch.arange(length)[None, :]
        buckets = relative_position_bucket(memory - context, num_buckets=BUCKETS)
        return self.relative_attention_bias(buckets).permute(2, 0, 1)

    def forward(self, input_ids, attention_mask):
        batch, length = input_ids.shape
        real = input_ids.ne(PAD).long()
        position_ids = torch.cumsum(real, dim=1) * real + PAD
        x = self.embedding_norm(self.word(input_ids) + self.position(position_ids))
        # nn.MultiheadAttention adds a float attn_mask [batch * heads, S, S] to its scaled scores.
        padding = torch.zeros(batch, 1, 1, length, dtype=x.dtype).masked_fill(
            attention_mask[:, None, None, :] == 0, float("-inf"))
        attn_mask = (self.position_bias(length)[None] + padding).reshape(batch * HEADS, length,
                                                                         length)
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, weights = layer(x, attn_mask)
            hidden_states.append(x)
            attentions.append(weights)
        logits = self.out_proj(torch.tanh(self.dense(x[:, 0])))
        return position_ids, x, hidden_states, attentions, logits


def hf_state_dict(model):
    """The weights under MPNetForSequenceClassification's names."""
    tensors = {
        "mpnet.embeddings.word_embeddings.weight": model.word.weight,
        "mpnet.embeddings.position_embeddings.weight": model.position.weight,
        "mpnet.embeddings.LayerNorm.weight": model.embedding_norm.weight,
        "mpnet.embeddings.LayerNorm.bias": model.embedding_norm.bias,
        "mpnet.encoder.relative_attention_bias.weight": model.relative_attention_bias.weight,
        "classifier.dense.weight": model.dense.weight,
        "classifier.dense.bias": model.dense.bias,
        "classifier.out_proj.weight": model.out_proj.weight,
        "classifier.out_proj.bias": model.out_proj.bias,
    }
    for i, layer in enumerate(model.layers):
        p = f"mpnet.encoder.layer.{i}."
        q, k, v = layer.attention.in_proj_weight.chunk(3)
        qb, kb, vb = layer.attention.in_proj_bias.chunk(3)
        tensors.update({
            p + "attention.attn.q.weight": q, p + "attention.attn.q.bias": qb,
            p + "attention.attn.k.weight": k, p + "attention.attn.k.bias": kb,
            p + "attention.attn.v.weight": v, p + "attention.attn.v.bias": vb,
            p + "attention.attn.o.weight": layer.attention.out_proj.weight,
            p + "attention.attn.o.bias": layer.attention.out_proj.bias,
            p + "attention.LayerNorm.weight": layer.attention_norm.weight,
            p + "attention.LayerNorm.bias": layer.attention_norm.bias,
            p + "intermediate.dense.weight": layer.intermediate.weight,
            p + "intermediate.dense.bias": layer.intermediate.bias,
            p + "output.dense.weight": layer.output.weight,
            p + "output.dense.bias": layer.output.bias,
            p + "output.LayerNorm.weight": layer.output_norm.weight,
            p + "output.LayerNorm.bias": layer.output_norm.bias,
        })
    return {name: t.detach().to(torch.float32).contiguous() for name, t in tensors.items()}


def tokenizer_json():
    """MPNetConverter's tokenizer.json around VOCAB."""
    vocab = {token: i for i, token in enumerate(VOCAB)}

    def added(token, lstrip=False):
        return {"id": vocab[token], "content": token, "single_word": False, "lstrip": lstrip,
                "rstrip": False, "normalized": False, "special": True}

    def special(token, type_id):
        return {"SpecialToken": {"id": token, "type_id": type_id}}

    def sequence(name, type_id):
        return {"Sequence": {"id": name, "type_id": type_id}}

    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added("<s>"), added("<pad>"), added("</s>"), added("<unk>"),
                         added("[UNK]"), added("<mask>", lstrip=True)],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("<s>", 0), sequence("A", 0), special("</s>", 0)],
            "pair": [special("<s>", 0), sequence("A", 0), special("</s>", 0), special("</s>", 0),
                     sequence("B", 1), special("</s>", 1)],
            "special_tokens": {t: {"id": t, "ids": [vocab[t]], "tokens": [t]}
                               for t in ("<s>", "</s>")},
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }


def encode(text, text_pair=None):
    """<s> a </s> (</s> b </s>) with whole-word lookups; every word used is in VOCAB."""
    ids = [BOS] + [VOCAB.index(w) for w in text.split()] + [EOS]
    if text_pair is not None:
        ids += [EOS] + [VOCAB.index(w) for w in text_pair.split()] + [EOS]
    return ids


def rounded(values):
    if isinstance(values, list):
        return [rounded(v) for v in values]
    return round(values, 9)


def write_json(path, obj, **kwargs):
    with open(path, "w") as f:
        json.dump(obj, f, **kwargs)
        f.write("\n")


def main():
    torch.manual_seed(20261207)
    model = CrossEncoder()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif "norm" in name:
                param.copy_(0.1 * torch.randn_like(param))
            elif "relative_attention_bias" in name:
                # Large enough that a wrong bucket moves the attentions well past the tolerance.
                param.copy_(torch.randn_like(param))
            else:
                param.copy_(0.3 * torch.randn_like(param))
    model.eval()
    os.makedirs(OUT, exist_ok=True)
    write_safetensors(os.path.join(OUT, "model.safetensors"), hf_state_dict(model))
    write_json(os.path.join(OUT, "config.json"), {
        "architectures": ["MPNetForSequenceClassification"], "model_type": "mpnet",
        "vocab_size": len(VOCAB), "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "intermediate_size": INTERMEDIATE, "hidden_act": "gelu",
        "max_position_embeddings": MAX_POSITIONS, "layer_norm_eps": EPS,
        "relative_attention_num_buckets": BUCKETS, "pad_token_id": PAD, "bos_token_id": BOS,
        "eos_token_id": EOS, "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0},
        "torch_dtype": "float32",
    }, indent=2)
    write_json(os.path.join(OUT, "tokenizer.json"), tokenizer_json(), ensure_ascii=False)
    write_json(os.path.join(OUT, "tokenizer_config.json"), {
        "do_lower_case": True, "model_max_length": MAX_TOKENS, "tokenizer_class": "MPNetTokenizer",
        "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
        "unk_token": "[UNK]", "pad_token": "<pad>", "mask_token": "<mask>"}, indent=2)

    long_text = ("the river is the largest river of the country and the most populous city of "
                 "the country is on the river")
    cases = {
        "single": [("what is the capital of france", None)],
        "pair": [("capital of france", "paris is the capital")],
        "padded_batch": [("the river", "berlin is a city in germany"), ("hello world", None),
                         ("who read books", "i love books")],
        "long": [(long_text, "which city is the largest city of the country with the river")],
    }
    golden = {}
    reference = model.double()
    for name, texts in cases.items():
        encodings = [encode(*t) for t in texts]
        length = max(len(ids) for ids in encodings)
        assert length <= MAX_TOKENS
        inputs = {
            "input_ids": [ids + [PAD] * (length - len(ids)) for ids in encodings],
            "attention_mask": [[1] * len(ids) + [0] * (length - len(ids)) for ids in encodings],
        }
        with torch.no_grad():
            position_ids, last, hidden_states, attentions, logits = reference(
                torch.tensor(inputs["input_ids"]), torch.tensor(inputs["attention_mask"]))
        golden[name] = dict(inputs, texts=[list(t) for t in texts],
                            position_ids=position_ids.tolist(),
                            last_hidden_state=rounded(last.tolist()),
                            hidden_states=[rounded(h.tolist()) for h in hidden_states],
                            attentions=[rounded(a.tolist()) for a in attentions],
                            logits=rounded(logits.tolist()))
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f)


if __name__ == "__main__":
    main()
