#!/usr/bin/python3
"""Builds tests/data/tiny-bert: a small random BERT cross-encoder in Hugging Face layout, plus goldens.

The reference forward pass is written with PyTorch's own modules (nn.Embedding, nn.LayerNorm,
nn.MultiheadAttention with average_attn_weights=False, nn.GELU, nn.Linear), not a transcription of the
C++ engine, and runs in float64 on the float32 weights that are saved. Weights are exported under
Hugging Face BertForSequenceClassification names (bert.encoder.layer.N.attention.self.query.weight, ...)
in a safetensors file written by hand from the format's specification, so nothing here depends on the
C++ reader either.

Outputs (all under tests/data/tiny-bert/):
  config.json, model.safetensors, vocab.txt, tokenizer_config.json: the checkpoint.
  ../tiny-bert-pickle/: config.json and the same weights as pytorch_model.bin (torch.save).
  golden.json: for each case the input_ids / token_type_ids / attention_mask fed to the model and the
  expected last_hidden_state, hidden_states, attentions (per layer [batch, head, query, key]),
  pooler_output and logits.

Run with Debian's interpreter (python3-torch): /usr/bin/python3 tests/data/make_tiny_bert.py
"""
import json
import os
import struct

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiny-bert")
PICKLE_OUT = os.path.join(HERE, "tiny-bert-pickle")

HIDDEN = 32
HEADS = 4
LAYERS = 3
INTERMEDIATE = 64
MAX_POSITIONS = 64
TYPE_VOCAB = 2
EPS = 1e-12

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the a an is are was of to in and for on with what where who how which capital city "
         "country france paris berlin germany most populous largest river sea attention model "
         "heads layer token query document relevant score i you we love like read books nam viet "
         "student am hello world this that it be").split()
CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-")
VOCAB = SPECIALS + CHARS + [w for w in WORDS if w not in CHARS] + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
        self.attention_norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.intermediate = nn.Linear(HIDDEN, INTERMEDIATE)
        self.activation = nn.GELU()  # exact erf form
        self.output = nn.Linear(INTERMEDIATE, HIDDEN)
        self.output_norm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, x, key_padding_mask):
        attended, weights = self.attention(x, x, x, key_padding_mask=key_padding_mask,
                                           need_weights=True, average_attn_weights=False)
        x = self.attention_norm(attended + x)
        return self.output_norm(self.output(self.activation(self.intermediate(x))) + x), weights


class CrossEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(len(VOCAB), HIDDEN)
        self.position = nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.token_type = nn.Embedding(TYPE_VOCAB, HIDDEN)
        self.embedding_norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.pooler = nn.Linear(HIDDEN, HIDDEN)
        self.classifier = nn.Linear(HIDDEN, 1)

    def forward(self, input_ids, token_type_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.embedding_norm(self.word(input_ids) + self.position(positions) +
                                self.token_type(token_type_ids))
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, weights = layer(x, key_padding_mask=attention_mask == 0)
            hidden_states.append(x)
            attentions.append(weights)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, hidden_states, attentions, pooled, self.classifier(pooled)


def hf_state_dict(model):
    """The weights under Hugging Face BertForSequenceClassification names."""
    tensors = {
        "bert.embeddings.word_embeddings.weight": model.word.weight,
        "bert.embeddings.position_embeddings.weight": model.position.weight,
        "bert.embeddings.token_type_embeddings.weight": model.token_type.weight,
        "bert.embeddings.LayerNorm.weight": model.embedding_norm.weight,
        "bert.embeddings.LayerNorm.bias": model.embedding_norm.bias,
        "bert.pooler.dense.weight": model.pooler.weight,
        "bert.pooler.dense.bias": model.pooler.bias,
        "classifier.weight": model.classifier.weight,
        "classifier.bias": model.classifier.bias,
    }
    for i, layer in enumerate(model.layers):
        p = f"bert.encoder.layer.{i}."
        # nn.MultiheadAttention packs query, key and value rows into in_proj_weight.
        q, k, v = layer.attention.in_proj_weight.chunk(3)
        qb, kb, vb = layer.attention.in_proj_bias.chunk(3)
        tensors.update({
            p + "attention.self.query.weight": q, p + "attention.self.query.bias": qb,
            p + "attention.self.key.weight": k, p + "attention.self.key.bias": kb,
            p + "attention.self.value.weight": v, p + "attention.self.value.bias": vb,
            p + "attention.output.dense.weight": layer.attention.out_proj.weight,
            p + "attention.output.dense.bias": layer.attention.out_proj.bias,
            p + "attention.output.LayerNorm.weight": layer.attention_norm.weight,
            p + "attention.output.LayerNorm.bias": layer.attention_norm.bias,
            p + "intermediate.dense.weight": layer.intermediate.weight,
            p + "intermediate.dense.bias": layer.intermediate.bias,
            p + "output.dense.weight": layer.output.weight,
            p + "output.dense.bias": layer.output.bias,
            p + "output.LayerNorm.weight": layer.output_norm.weight,
            p + "output.LayerNorm.bias": layer.output_norm.bias,
        })
    return {name: t.detach().to(torch.float32).contiguous() for name, t in tensors.items()}


def write_safetensors(path, tensors):
    """safetensors: u64 little-endian header size, JSON header, then the raw little-endian data."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # align the data area to 8 bytes, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def encode(words_a, words_b=None):
    """[CLS] a [SEP] (b [SEP]) with whole-word lookups; every word used is in VOCAB."""
    ids = [VOCAB.index("[CLS]")] + [VOCAB.index(w) for w in words_a.split()] + [VOCAB.index("[SEP]")]
    types = [0] * len(ids)
    if words_b is not None:
        b = [VOCAB.index(w) for w in words_b.split()] + [VOCAB.index("[SEP]")]
        ids += b
        types += [1] * len(b)
    return ids, types


def batch(encodings):
    length = max(len(ids) for ids, _ in encodings)
    pad = VOCAB.index("[PAD]")
    return {
        "input_ids": [ids + [pad] * (length - len(ids)) for ids, _ in encodings],
        "token_type_ids": [types + [0] * (length - len(types)) for _, types in encodings],
        "attention_mask": [[1] * len(ids) + [0] * (length - len(ids)) for ids, _ in encodings],
    }


def main():
    torch.manual_seed(20261129)
    model = CrossEncoder()
    with torch.no_grad():
        # Larger-than-default weights give peaked, head-specific attention, a sharper test than the
        # near-uniform attention of a freshly initialised model.
        for name, param in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif "norm" in name:
                param.copy_(0.1 * torch.randn_like(param))
            else:
                param.copy_(0.3 * torch.randn_like(param))
    model.eval()
    os.makedirs(OUT, exist_ok=True)
    state_dict = hf_state_dict(model)
    write_safetensors(os.path.join(OUT, "model.safetensors"), state_dict)
    # The same weights in torch.save's zip format, for the pytorch_model.bin loader.
    os.makedirs(PICKLE_OUT, exist_ok=True)
    torch.save(state_dict, os.path.join(PICKLE_OUT, "pytorch_model.bin"))
    config = {
        "architectures": ["BertForSequenceClassification"], "model_type": "bert",
        "vocab_size": len(VOCAB), "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "intermediate_size": INTERMEDIATE, "hidden_act": "gelu",
        "max_position_embeddings": MAX_POSITIONS, "type_vocab_size": TYPE_VOCAB,
        "layer_norm_eps": EPS, "pad_token_id": 0, "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0}, "torch_dtype": "float32",
    }
    for directory in (OUT, PICKLE_OUT):
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
    with open(os.path.join(OUT, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "model_max_length": MAX_POSITIONS,
                   "tokenizer_class": "BertTokenizer"}, f, indent=2)

    cases = {
        "single": [encode("what is the capital of france")],
        "pair": [encode("what is the capital of france", "paris is the capital city of france")],
        "padded_batch": [encode("hello world"),
                         encode("i love to read books", "where is the river"),
                         encode("attention heads of the model")],
    }
    texts = {"pair": ["what is the capital of france", "paris is the capital city of france"]}
    golden = {}
    reference = model.double()
    for name, encodings in cases.items():
        inputs = batch(encodings)
        with torch.no_grad():
            last, hidden_states, attentions, pooled, logits = reference(
                torch.tensor(inputs["input_ids"]), torch.tensor(inputs["token_type_ids"]),
                torch.tensor(inputs["attention_mask"]))
        golden[name] = dict(inputs,
                            last_hidden_state=last.tolist(),
                            hidden_states=[h.tolist() for h in hidden_states],
                            attentions=[a.tolist() for a in attentions],
                            pooler_output=pooled.tolist(),
                            logits=logits.tolist())
        if name in texts:
            golden[name]["text"], golden[name]["text_pair"] = texts[name]
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f)


if __name__ == "__main__":
    main()
