#!/usr/bin/python3
"""Writes tests/data/tiny-bert/attribution_golden.json: token attributions of the tiny BERT.

The reference is independent of the C++ engine. It reads model.safetensors by hand (the format's
specification: u64 header size, JSON header, raw data), loads the weights into a cross-encoder built
from PyTorch's own modules (nn.Embedding, nn.LayerNorm, nn.MultiheadAttention, nn.GELU, nn.Linear)
in float64, and computes the attributions with torch.autograd, as Captum defines them:

  occlusion[i]            score(input) - score(input with token i replaced by [MASK])
                          (Captum Occlusion with a one-token window)
  gradient_x_input[i]     sum over hidden of d score / d e_i * e_i, with e the output of the word
                          embedding layer (Captum LayerGradientXActivation on word_embeddings)
  integrated_gradients[i] sum over hidden of (e_i - b_i) * mean_k d score / d e_i at
                          b + alpha_k (e - b), alpha_k = (k + 1/2) / m (the Riemann midpoint rule,
                          Sundararajan et al. 2017; Captum LayerIntegratedGradients on
                          word_embeddings with method="riemann_middle")

score is the classifier logit `target`; the baseline b keeps the embeddings of special tokens and
padding and puts the [PAD] embedding (or zeros) at every other token. Position and token type
embeddings are never interpolated: they are not inputs of the word embedding layer.

Each case records its inputs (ids, masks, word and sequence ids), the options and the expected
values, at every position (0 at padding).

  /usr/bin/python3 tests/data/make_attribution_golden.py          regenerates the golden
  /usr/bin/python3 tests/data/make_attribution_golden.py --completeness MODEL_DIR
      prints the integrated-gradients completeness error of another BERT checkpoint (for example
      checkpoints/default) on a few inputs, for step counts and integration rules side by side
"""
import argparse
import json
import os
import struct

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
TINY_BERT = os.path.join(HERE, "tiny-bert")
STEPS = 50  # the C++ default, AttributionOptions::integrated_gradients_steps
MASK, PAD, CLS, SEP = "[MASK]", "[PAD]", "[CLS]", "[SEP]"


def read_safetensors(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        values = struct.unpack("<%df" % ((end - begin) // 4), data[begin:end])
        tensors[name] = torch.tensor(values, dtype=torch.float64).reshape(entry["shape"])
    return tensors


class Layer(nn.Module):
    def __init__(self, hidden, heads, intermediate, eps):
        super().__init__()
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.activation = nn.GELU()  # exact erf form, BERT's "gelu"
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, key_padding_mask):
        attended, _ = self.attention(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        x = self.attention_norm(attended + x)
        return self.output_norm(self.output(self.activation(self.intermediate(x))) + x)


class CrossEncoder(nn.Module):
    """BertForSequenceClassification in eval mode, scoring from given word embeddings."""

    def __init__(self, config):
        super().__init__()
        hidden, eps = config["hidden_size"], config.get("layer_norm_eps", 1e-12)
        self.word = nn.Embedding(config["vocab_size"], hidden)
        self.position = nn.Embedding(config["max_position_embeddings"], hidden)
        self.token_type = nn.Embedding(config.get("type_vocab_size", 2), hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(
            Layer(hidden, config["num_attention_heads"], config["intermediate_size"], eps)
            for _ in range(config["num_hidden_layers"]))
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, len(config.get("id2label", {"0": ""})))

    def forward(self, word_embeddings, token_type_ids, attention_mask):
        """word_embeddings [B, S, H] -> logits [B, labels]."""
        positions = torch.arange(word_embeddings.shape[1]).unsqueeze(0)
        x = self.embedding_norm(word_embeddings + self.position(positions) +
                                self.token_type(token_type_ids))
        for layer in self.layers:
            x = layer(x, key_padding_mask=attention_mask == 0)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    model = CrossEncoder(config).double()
    p = "bert."
    state = {
        "word.weight": w[p + "embeddings.word_embeddings.weight"],
        "position.weight": w[p + "embeddings.position_embeddings.weight"],
        "token_type.weight": w[p + "embeddings.token_type_embeddings.weight"],
        "embedding_norm.weight": w[p + "embeddings.LayerNorm.weight"],
        "embedding_norm.bias": w[p + "embeddings.LayerNorm.bias"],
        "pooler.weight": w[p + "pooler.dense.weight"],
        "pooler.bias": w[p + "pooler.dense.bias"],
        "classifier.weight": w["classifier.weight"],
        "classifier.bias": w["classifier.bias"],
    }
    for i in range(config["num_hidden_layers"]):
        h, m = f"{p}encoder.layer.{i}.", f"layers.{i}."
        # nn.MultiheadAttention packs the query, key and value projections into in_proj_*.
        state[m + "attention.in_proj_weight"] = torch.cat(
            [w[h + f"attention.self.{n}.weight"] for n in ("query", "key", "value")])
        state[m + "attention.in_proj_bias"] = torch.cat(
            [w[h + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
        for ours, theirs in (("attention.out_proj", "attention.output.dense"),
                             ("attention_norm", "attention.output.LayerNorm"),
                             ("intermediate", "intermediate.dense"),
                             ("output", "output.dense"),
                             ("output_norm", "output.LayerNorm")):
            state[m + ours + ".weight"] = w[h + theirs + ".weight"]
            state[m + ours + ".bias"] = w[h + theirs + ".bias"]
    model.load_state_dict(state)
    model.eval()
    return model


def attribute(model, case, vocab):
    ids = torch.tensor([case["input_ids"]])
    types = torch.tensor([case["token_type_ids"]])
    mask = torch.tensor([case["attention_mask"]])
    special = torch.tensor(case["special_tokens_mask"]).bool()
    target, steps = case["target"], case["integrated_gradients_steps"]
    real = mask[0].bool()

    def score(embeddings):
        batch = embeddings.shape[0]
        return model(embeddings, types.expand(batch, -1), mask.expand(batch, -1))[:, target]

    def gradient(embeddings):
        embeddings = embeddings.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(score(embeddings).sum(), embeddings)
        return grad

    embeddings = model.word(ids).detach()
    with torch.no_grad():
        input_score = score(embeddings)[0].item()

    occlusion = torch.zeros(ids.shape[1], dtype=torch.float64)
    with torch.no_grad():
        for i in range(ids.shape[1]):
            if real[i]:
                occluded = ids.clone()
                occluded[0, i] = vocab.index(MASK)
                occlusion[i] = input_score - score(model.word(occluded))[0].item()

    gradient_x_input = (gradient(embeddings) * embeddings)[0].sum(-1)

    if case["baseline"] == "pad":
        replacement = model.word(torch.tensor([vocab.index(PAD)])).detach()[0]
    else:
        replacement = torch.zeros(embeddings.shape[-1], dtype=torch.float64)
    replaced = (real & ~special).view(1, -1, 1)
    baseline = torch.where(replaced, replacement, embeddings)
    with torch.no_grad():
        baseline_score = score(baseline)[0].item()
    alphas = (torch.arange(steps, dtype=torch.float64) + 0.5) / steps
    path = baseline + alphas.view(-1, 1, 1) * (embeddings - baseline)
    mean_gradient = gradient(path).mean(0, keepdim=True)
    integrated_gradients = ((embeddings - baseline) * mean_gradient)[0].sum(-1)

    zero_padding = lambda t: torch.where(real, t, torch.zeros_like(t)).tolist()
    return {
        "score": input_score,
        "baseline_score": baseline_score,
        "occlusion": zero_padding(occlusion),
        "gradient_x_input": zero_padding(gradient_x_input),
        "integrated_gradients": zero_padding(integrated_gradients),
    }


def encode(vocab, first, second=None, pad_to=0):
    """Whitespace-separated words of WordPiece pieces ("capital+##s"): ids, masks, word ids."""
    tokens, types, words, sequences = [CLS], [0], [-1], [-1]
    for sequence, text in enumerate([first] if second is None else [first, second]):
        for word, pieces in enumerate(text.split()):
            for piece in pieces.split("+"):
                tokens.append(piece)
                types.append(sequence)
                words.append(word)
                sequences.append(sequence)
        tokens.append(SEP)
        types.append(sequence)
        words.append(-1)
        sequences.append(-1)
    real = len(tokens)
    padding = max(0, pad_to - real)
    return {
        "tokens": tokens + [PAD] * padding,
        "input_ids": [vocab.index(t) for t in tokens] + [vocab.index(PAD)] * padding,
        "token_type_ids": types + [0] * padding,
        "attention_mask": [1] * real + [0] * padding,
        "special_tokens_mask": [int(w < 0) for w in words] + [1] * padding,
        "word_ids": words + [-1] * padding,
        "sequence_ids": sequences + [-1] * padding,
    }


def golden():
    with open(os.path.join(TINY_BERT, "vocab.txt")) as f:
        vocab = f.read().split("\n")[:-1]
    model = load(TINY_BERT)
    cases = {
        "pair": dict(encode(vocab, "what is the capital+##s of france",
                            "paris is the capital city of france"),
                     target=0, baseline="pad", integrated_gradients_steps=STEPS),
        "padded": dict(encode(vocab, "i love to read books+##s", "where is the river", pad_to=16),
                       target=0, baseline="pad", integrated_gradients_steps=STEPS),
        "zero_baseline": dict(encode(vocab, "hello world+##s", pad_to=8),
                              target=0, baseline="zero", integrated_gradients_steps=20),
    }
    for case in cases.values():
        case["expected"] = attribute(model, case, vocab)
    with open(os.path.join(TINY_BERT, "attribution_golden.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")


def completeness(model_dir):
    """Integrated-gradients completeness error of model_dir, per rule and step count."""
    with open(os.path.join(model_dir, "vocab.txt")) as f:
        vocab = f.read().split("\n")[:-1]
    model = load(model_dir)
    generator = torch.Generator().manual_seed(7)
    # Ordinary tokens only: no special tokens, none that encode() would split.
    ordinary = torch.tensor([i for i, t in enumerate(vocab) if i >= 5 and "+" not in t])
    for length in (8, 24, 64):
        ids = ordinary[torch.randint(len(ordinary), (length,), generator=generator)].tolist()
        tokens = [vocab[i] for i in ids]
        case = encode(vocab, " ".join(tokens[: length // 3]).replace(" ##", "+##"),
                      " ".join(tokens[length // 3:]).replace(" ##", "+##"))
        for steps in (20, 50, 100, 300):
            case.update(target=0, baseline="pad", integrated_gradients_steps=steps)
            out = attribute(model, case, vocab)
            delta = out["score"] - out["baseline_score"]
            error = sum(out["integrated_gradients"]) - delta
            print(f"tokens {len(case['input_ids']):3d} steps {steps:3d} score {out['score']:+.4f} "
                  f"baseline {out['baseline_score']:+.4f} completeness error "
                  f"{abs(error):.2e} ({100 * abs(error) / max(abs(delta), 1e-12):.3f}% of the "
                  f"difference)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--completeness", metavar="MODEL_DIR")
    args = parser.parse_args()
    if args.completeness:
        completeness(args.completeness)
    else:
        golden()
