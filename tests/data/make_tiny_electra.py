#!/usr/bin/python3
"""Builds tests/data/tiny-electra: a small random ELECTRA cross-encoder in Hugging Face's
ElectraForSequenceClassification layout (the layout of cross-encoder/ms-marco-electra-base), plus
goldens.

The reference is make_tiny_bert.py's encoder layer (nn.MultiheadAttention with
average_attn_weights=False, nn.LayerNorm, nn.GELU, nn.Linear), run in float64 on the float32
weights that are saved: ELECTRA's layers are BERT's. What differs, as transformers'
modeling_electra.py has it: the embeddings (word, position, token type and their LayerNorm) are
embedding_size wide, and embeddings_project, a Linear(embedding_size, hidden_size), maps them to
the encoder's width (it exists when the two differ, as here: 16 and 32); the encoder's first hidden
state is the projected one; no pooler, and the head is out_proj(GELU(dense(h_[CLS])))
(ElectraClassificationHead in eval mode: GELU where BERT's pooler has tanh). Two labels. The
weights are saved under transformers' names (electra.embeddings.*, electra.embeddings_project,
electra.encoder.layer.N.attention.self.query.weight, classifier.dense, classifier.out_proj).

The vocabulary is tiny-bert's (linked); ids are looked up word by word as make_tiny_bert.py does.

Outputs (tests/data/tiny-electra/): config.json, model.safetensors, vocab.txt (a symlink),
tokenizer_config.json, golden.json (per case input_ids, token_type_ids, attention_mask and the
expected last_hidden_state, hidden_states, attentions [batch, head, query, key] and logits,
rounded to 1e-9).

Run with Debian's interpreter (python3-torch):
  OMP_NUM_THREADS=1 /usr/bin/python3 tests/data/make_tiny_electra.py
"""
import json
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
from make_tiny_bert import (EPS, HEADS, HIDDEN, INTERMEDIATE, LAYERS, MAX_POSITIONS,  # noqa: E402
                            TYPE_VOCAB, VOCAB, Layer, batch, encode, write_safetensors)

OUT = os.path.join(HERE, "tiny-electra")
EMBEDDING = 16
LABELS = 2


class CrossEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(len(VOCAB), EMBEDDING)
        self.position = nn.Embedding(MAX_POSITIONS, EMBEDDING)
        self.token_type = nn.Embedding(TYPE_VOCAB, EMBEDDING)
        self.embedding_norm = nn.LayerNorm(EMBEDDING, eps=EPS)
        self.project = nn.Linear(EMBEDDING, HIDDEN)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.activation = nn.GELU()  # exact erf form
        self.out_proj = nn.Linear(HIDDEN, LABELS)

    def forward(self, input_ids, token_type_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.embedding_norm(self.word(input_ids) + self.position(positions) +
                                self.token_type(token_type_ids))
        x = self.project(x)
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, weights = layer(x, key_padding_mask=attention_mask == 0)
            hidden_states.append(x)
            attentions.append(weights)
        return x, hidden_states, attentions, self.out_proj(self.activation(self.dense(x[:, 0])))


def hf_state_dict(model):
    """The weights under ElectraForSequenceClassification's names."""
    tensors = {
        "electra.embeddings.word_embeddings.weight": model.word.weight,
        "electra.embeddings.position_embeddings.weight": model.position.weight,
        "electra.embeddings.token_type_embeddings.weight": model.token_type.weight,
        "electra.embeddings.LayerNorm.weight": model.embedding_norm.weight,
        "electra.embeddings.LayerNorm.bias": model.embedding_norm.bias,
        "electra.embeddings_project.weight": model.project.weight,
        "electra.embeddings_project.bias": model.project.bias,
        "classifier.dense.weight": model.dense.weight,
        "classifier.dense.bias": model.dense.bias,
        "classifier.out_proj.weight": model.out_proj.weight,
        "classifier.out_proj.bias": model.out_proj.bias,
    }
    for i, layer in enumerate(model.layers):
        p = f"electra.encoder.layer.{i}."
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


def rounded(values):
    if isinstance(values, list):
        return [rounded(v) for v in values]
    return round(values, 9)


def main():
    torch.manual_seed(20261208)
    model = CrossEncoder()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif "norm" in name:
                param.copy_(0.1 * torch.randn_like(param))
            else:
                param.copy_(0.3 * torch.randn_like(param))
    model.eval()
    os.makedirs(OUT, exist_ok=True)
    write_safetensors(os.path.join(OUT, "model.safetensors"), hf_state_dict(model))
    config = {
        "architectures": ["ElectraForSequenceClassification"], "model_type": "electra",
        "vocab_size": len(VOCAB), "embedding_size": EMBEDDING, "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "intermediate_size": INTERMEDIATE, "hidden_act": "gelu",
        "max_position_embeddings": MAX_POSITIONS, "type_vocab_size": TYPE_VOCAB,
        "layer_norm_eps": EPS, "pad_token_id": 0, "position_embedding_type": "absolute",
        "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "label2id": {"LABEL_0": 0, "LABEL_1": 1},
        "torch_dtype": "float32",
    }
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    link = os.path.join(OUT, "vocab.txt")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join("..", "tiny-bert", "vocab.txt"), link)
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "model_max_length": MAX_POSITIONS,
                   "tokenizer_class": "ElectraTokenizer"}, f, indent=2)
        f.write("\n")

    cases = {
        "single": [encode("what is the capital of france")],
        "pair": [encode("capital of france", "paris is the capital")],
        "padded_batch": [encode("the river", "berlin is a city in germany"),
                         encode("hello world"),
                         encode("who read books", "i love books")],
    }
    golden = {}
    reference = model.double()
    for name, encodings in cases.items():
        inputs = batch(encodings)
        with torch.no_grad():
            last, hidden_states, attentions, logits = reference(
                torch.tensor(inputs["input_ids"]), torch.tensor(inputs["token_type_ids"]),
                torch.tensor(inputs["attention_mask"]))
        golden[name] = dict(inputs, last_hidden_state=rounded(last.tolist()),
                            hidden_states=[rounded(h.tolist()) for h in hidden_states],
                            attentions=[rounded(a.tolist()) for a in attentions],
                            logits=rounded(logits.tolist()))
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f)


if __name__ == "__main__":
    main()
