#!/usr/bin/python3
"""Builds tests/data/tiny-distilbert: a small random DistilBERT cross-encoder in Hugging Face's
DistilBertForSequenceClassification layout, plus goldens.

The reference is make_tiny_bert.py's encoder layer (nn.MultiheadAttention with
average_attn_weights=False, nn.LayerNorm, nn.GELU, nn.Linear), run in float64 on the float32
weights that are saved: DistilBERT's TransformerBlock is BERT's post-LayerNorm block. What differs,
as transformers' modeling_distilbert.py has it: no token type embeddings, no pooler, and the head
classifier(ReLU(pre_classifier(h_[CLS]))). Two labels, so that the relevance score is the last
label's logit. The weights are saved under transformers' names (distilbert.transformer.layer.N.
attention.q_lin.weight, sa_layer_norm, ffn.lin1, output_layer_norm, pre_classifier, classifier).

The vocabulary is tiny-bert's (linked); ids are looked up word by word as make_tiny_bert.py does.

Outputs (tests/data/tiny-distilbert/): config.json, model.safetensors, vocab.txt (a symlink),
tokenizer_config.json, golden.json (per case input_ids, attention_mask and the expected
last_hidden_state, hidden_states, attentions [batch, head, query, key] and logits, rounded to 1e-9).

Run with Debian's interpreter (python3-torch): /usr/bin/python3 tests/data/make_tiny_distilbert.py
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
                            VOCAB, Layer, batch, encode, write_safetensors)

OUT = os.path.join(HERE, "tiny-distilbert")
LABELS = 2


class CrossEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(len(VOCAB), HIDDEN)
        self.position = nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.embedding_norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.pre_classifier = nn.Linear(HIDDEN, HIDDEN)
        self.classifier = nn.Linear(HIDDEN, LABELS)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.embedding_norm(self.word(input_ids) + self.position(positions))
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, weights = layer(x, key_padding_mask=attention_mask == 0)
            hidden_states.append(x)
            attentions.append(weights)
        return x, hidden_states, attentions, self.classifier(torch.relu(self.pre_classifier(x[:, 0])))


def hf_state_dict(model):
    """The weights under DistilBertForSequenceClassification's names."""
    tensors = {
        "distilbert.embeddings.word_embeddings.weight": model.word.weight,
        "distilbert.embeddings.position_embeddings.weight": model.position.weight,
        "distilbert.embeddings.LayerNorm.weight": model.embedding_norm.weight,
        "distilbert.embeddings.LayerNorm.bias": model.embedding_norm.bias,
        "pre_classifier.weight": model.pre_classifier.weight,
        "pre_classifier.bias": model.pre_classifier.bias,
        "classifier.weight": model.classifier.weight,
        "classifier.bias": model.classifier.bias,
    }
    for i, layer in enumerate(model.layers):
        p = f"distilbert.transformer.layer.{i}."
        q, k, v = layer.attention.in_proj_weight.chunk(3)
        qb, kb, vb = layer.attention.in_proj_bias.chunk(3)
        tensors.update({
            p + "attention.q_lin.weight": q, p + "attention.q_lin.bias": qb,
            p + "attention.k_lin.weight": k, p + "attention.k_lin.bias": kb,
            p + "attention.v_lin.weight": v, p + "attention.v_lin.bias": vb,
            p + "attention.out_lin.weight": layer.attention.out_proj.weight,
            p + "attention.out_lin.bias": layer.attention.out_proj.bias,
            p + "sa_layer_norm.weight": layer.attention_norm.weight,
            p + "sa_layer_norm.bias": layer.attention_norm.bias,
            p + "ffn.lin1.weight": layer.intermediate.weight,
            p + "ffn.lin1.bias": layer.intermediate.bias,
            p + "ffn.lin2.weight": layer.output.weight,
            p + "ffn.lin2.bias": layer.output.bias,
            p + "output_layer_norm.weight": layer.output_norm.weight,
            p + "output_layer_norm.bias": layer.output_norm.bias,
        })
    return {name: t.detach().to(torch.float32).contiguous() for name, t in tensors.items()}


def rounded(values):
    if isinstance(values, list):
        return [rounded(v) for v in values]
    return round(values, 9)


def main():
    torch.manual_seed(20261204)
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
        "architectures": ["DistilBertForSequenceClassification"], "model_type": "distilbert",
        "vocab_size": len(VOCAB), "dim": HIDDEN, "n_layers": LAYERS, "n_heads": HEADS,
        "hidden_dim": INTERMEDIATE, "activation": "gelu", "max_position_embeddings": MAX_POSITIONS,
        "sinusoidal_pos_embds": False, "pad_token_id": 0,
        "id2label": {"0": "NOT_RELEVANT", "1": "RELEVANT"},
        "label2id": {"NOT_RELEVANT": 0, "RELEVANT": 1}, "torch_dtype": "float32",
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
                   "tokenizer_class": "DistilBertTokenizer"}, f, indent=2)
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
        del inputs["token_type_ids"]  # DistilBERT reads none
        with torch.no_grad():
            last, hidden_states, attentions, logits = reference(
                torch.tensor(inputs["input_ids"]), torch.tensor(inputs["attention_mask"]))
        golden[name] = dict(inputs, last_hidden_state=rounded(last.tolist()),
                            hidden_states=[rounded(h.tolist()) for h in hidden_states],
                            attentions=[rounded(a.tolist()) for a in attentions],
                            logits=rounded(logits.tolist()))
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f)


if __name__ == "__main__":
    main()
