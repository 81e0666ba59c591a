#!/usr/bin/python3
"""Eager PyTorch reference for bench/engine_bench: a base-sized model of --family on the same weights.

Makes (once) a random checkpoint in Hugging Face layout in --out (config.json, model.safetensors,
input_ids.json; for BERT also a synthetic vocab.txt where "w<id>" is token <id>), then times an
eager forward pass that returns every layer's attention probabilities, written the way
transformers' eager paths are (BertModel, RobertaModel: nn.Linear per projection, view/permute,
matmul, softmax, LayerNorm; GPT2Model: Conv1D as addmm, the causal mask by torch.where, gelu_new
as NewGELUActivation's formula, ln_f; no language-model head on either side), and prints one JSON
line with the timings and a few output values so the C++ engine can be checked against it.

With --onnx PATH it also exports that model (once per PATH), with torch.onnx.export, as the graph
ONNX Runtime runs for engine_bench (bench/onnxruntime_reference.js): inputs input_ids and
attention_mask [1, tokens] int64, outputs last_hidden_state and attentions.0 .. attentions.L-1
[1, heads, tokens, tokens], the sequence length fixed at --tokens.

Run with Debian's interpreter (python3-torch): /usr/bin/python3 bench/eager_reference.py --out DIR
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
from make_tiny_bert import write_safetensors  # noqa: E402  (the project's hand-written writer)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    base = 8 + size
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[base + begin:base + end]),
                                         dtype=torch.float32).view(entry["shape"])
    return tensors


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))

    def split(self, x):
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        probs = torch.softmax(scores, dim=-1)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(x.shape), probs


class Layer(nn.Module):
    def __init__(self, hidden, heads, intermediate, eps):
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, mask):
        context, probs = self.attention(x, mask)
        x = self.attention_norm(self.attention_output(context) + x)
        x = self.output_norm(self.output(nn.functional.gelu(self.intermediate(x))) + x)
        return x, probs


class Bert(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.padding_idx = cfg["pad_token_id"] if cfg["model_type"] == "roberta" else None
        self.word = nn.Embedding(cfg["vocab_size"], h)
        self.position = nn.Embedding(cfg["max_position_embeddings"], h)
        self.token_type = nn.Embedding(cfg["type_vocab_size"], h)
        self.norm = nn.LayerNorm(h, eps=cfg["layer_norm_eps"])
        self.layers = nn.ModuleList(
            Layer(h, cfg["num_attention_heads"], cfg["intermediate_size"], cfg["layer_norm_eps"])
            for _ in range(cfg["num_hidden_layers"]))

    def forward(self, input_ids, attention_mask):
        if self.padding_idx is None:
            positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        else:
            # RobertaEmbeddings.create_position_ids_from_input_ids: after padding_idx, skipping pads.
            real = input_ids.ne(self.padding_idx).int()
            positions = (torch.cumsum(real, dim=1) * real).long() + self.padding_idx
        x = self.norm(self.word(input_ids) + self.position(positions) +
                      self.token_type(torch.zeros_like(input_ids)))
        mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        attentions = []
        for layer in self.layers:
            x, probs = layer(x, mask)
            attentions.append(probs)
        return x, attentions

    def load_hf(self, tensors):
        def copy(param, name):
            param.data.copy_(tensors[name])
        copy(self.word.weight, "embeddings.word_embeddings.weight")
        copy(self.position.weight, "embeddings.position_embeddings.weight")
        copy(self.token_type.weight, "embeddings.token_type_embeddings.weight")
        copy(self.norm.weight, "embeddings.LayerNorm.weight")
        copy(self.norm.bias, "embeddings.LayerNorm.bias")
        for module, name in self.hf_layer_modules():
            copy(module.weight, name + ".weight")
            copy(module.bias, name + ".bias")

    def hf_layer_modules(self):
        """(module, Hugging Face name prefix) of every encoder Linear and LayerNorm."""
        for i, layer in enumerate(self.layers):
            p = f"encoder.layer.{i}."
            yield from [(layer.attention.query, p + "attention.self.query"),
                        (layer.attention.key, p + "attention.self.key"),
                        (layer.attention.value, p + "attention.self.value"),
                        (layer.attention_output, p + "attention.output.dense"),
                        (layer.attention_norm, p + "attention.output.LayerNorm"),
                        (layer.intermediate, p + "intermediate.dense"),
                        (layer.output, p + "output.dense"),
                        (layer.output_norm, p + "output.LayerNorm")]


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: weight [in, out], x W + b by addmm."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight).view(shape)


def gelu_new(x):
    """transformers.activations.NewGELUActivation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Gpt2Block(nn.Module):
    def __init__(self, hidden, heads, eps):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.c_attn = Conv1D(hidden, 3 * hidden)
        self.attn_proj = Conv1D(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.c_fc = Conv1D(hidden, 4 * hidden)
        self.mlp_proj = Conv1D(4 * hidden, hidden)

    def split(self, x):
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, causal):
        q, k, v = (self.split(t) for t in self.c_attn(self.ln_1(x)).split(x.shape[-1], dim=2))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = torch.where(causal, scores, torch.tensor(torch.finfo(scores.dtype).min))
        probs = torch.softmax(scores, dim=-1)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous().view(x.shape)
        x = x + self.attn_proj(context)
        x = x + self.mlp_proj(gelu_new(self.c_fc(self.ln_2(x))))
        return x, probs


class Gpt2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["n_embd"]
        self.wte = nn.Embedding(cfg["vocab_size"], h)
        self.wpe = nn.Embedding(cfg["n_positions"], h)
        self.layers = nn.ModuleList(Gpt2Block(h, cfg["n_head"], cfg["layer_norm_epsilon"])
                                    for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(h, eps=cfg["layer_norm_epsilon"])

    def forward(self, input_ids, attention_mask):
        length = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(torch.arange(length).unsqueeze(0))
        causal = torch.tril(torch.ones(length, length, dtype=torch.bool)).view(1, 1, length, length)
        attentions = []
        for layer in self.layers:
            x, probs = layer(x, causal)
            attentions.append(probs)
        return self.ln_f(x), attentions

    def hf_modules(self):
        """(module, GPT2LMHeadModel name) of every parameter holder."""
        yield from [(self.wte, "transformer.wte"), (self.wpe, "transformer.wpe"),
                    (self.ln_f, "transformer.ln_f")]
        for i, layer in enumerate(self.layers):
            p = f"transformer.h.{i}."
            yield from [(layer.ln_1, p + "ln_1"), (layer.c_attn, p + "attn.c_attn"),
                        (layer.attn_proj, p + "attn.c_proj"), (layer.ln_2, p + "ln_2"),
                        (layer.c_fc, p + "mlp.c_fc"), (layer.mlp_proj, p + "mlp.c_proj")]

    def load_hf(self, tensors):
        for module, name in self.hf_modules():
            for key, param in module.named_parameters():
                param.data.copy_(tensors[f"{name}.{key}"])


def make_gpt2_checkpoint(out, args):
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257,
           "n_embd": args.hidden, "n_layer": args.layers, "n_head": args.heads, "n_inner": None,
           "n_positions": 1024, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
           "bos_token_id": 50256, "eos_token_id": 50256, "tie_word_embeddings": True,
           "torch_dtype": "float32"}
    torch.manual_seed(0)
    model = Gpt2(cfg)
    hf = {}
    with torch.no_grad():
        for module, name in model.hf_modules():
            for key, param in module.named_parameters():
                if not isinstance(module, nn.LayerNorm):
                    param.normal_(0.0, 0.02)
                hf[f"{name}.{key}"] = param.detach().contiguous()
    write_safetensors(os.path.join(out, "model.safetensors"), hf)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def make_checkpoint(out, args):
    if args.family == "gpt2":
        make_gpt2_checkpoint(out, args)
        return
    if args.family == "roberta":
        cfg = {"architectures": ["RobertaModel"], "model_type": "roberta", "vocab_size": 50265,
               "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
               "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
    else:
        cfg = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": 30522,
               "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
               "pad_token_id": 0}
    cfg.update({"hidden_size": args.hidden, "num_hidden_layers": args.layers,
                "num_attention_heads": args.heads, "intermediate_size": args.intermediate,
                "hidden_act": "gelu", "torch_dtype": "float32"})
    torch.manual_seed(0)
    model = Bert(cfg)
    # Export under Hugging Face BertModel names.
    hf = {}
    hf["embeddings.word_embeddings.weight"] = model.word.weight
    hf["embeddings.position_embeddings.weight"] = model.position.weight
    hf["embeddings.token_type_embeddings.weight"] = model.token_type.weight
    hf["embeddings.LayerNorm.weight"] = model.norm.weight
    hf["embeddings.LayerNorm.bias"] = model.norm.bias
    for module, name in model.hf_layer_modules():
        hf[name + ".weight"] = module.weight
        hf[name + ".bias"] = module.bias
    with torch.no_grad():
        for name, t in hf.items():
            if "LayerNorm" not in name:
                t.normal_(0.0, 0.02)
    write_safetensors(os.path.join(out, "model.safetensors"),
                      {n: t.detach().contiguous() for n, t in hf.items()})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if args.family != "bert":
        return
    # A synthetic WordPiece vocabulary so the server can tokenize: "w<id>" is token <id>.
    vocab = [f"w{i}" for i in range(cfg["vocab_size"])]
    for token, index in {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}.items():
        vocab[index] = token
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "model_max_length": 512}, f)


def export_onnx(model, ids, mask, path):
    layers = len(model.layers)

    class Flat(nn.Module):
        """The model with its outputs as a flat tuple, as the exporter needs them."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            last, attentions = self.model(input_ids, attention_mask)
            return (last, *attentions)

    partial = path + ".partial"
    with torch.no_grad():
        torch.onnx.export(Flat(), (ids, mask), partial, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"] +
                          [f"attentions.{i}" for i in range(layers)],
                          opset_version=14, do_constant_folding=True)
    os.replace(partial, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--family", choices=["bert", "roberta", "gpt2"], default="bert",
                        help="BertModel, RobertaModel or GPT2LMHeadModel (its GPT2Model timed)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads (torch.set_num_threads), 0 = PyTorch's default")
    parser.add_argument("--onnx", help="also export the model to this ONNX file when missing")
    parser.add_argument("--prepare_only", action="store_true",
                        help="make the checkpoint when missing, time nothing")
    args = parser.parse_args()
    if not 1 <= args.tokens <= 512:
        sys.exit(f"--tokens {args.tokens}: expected 1 to 512 (max_position_embeddings)")
    os.makedirs(args.out, exist_ok=True)
    if not os.path.exists(os.path.join(args.out, "config.json")):
        make_checkpoint(args.out, args)
    with open(os.path.join(args.out, "config.json")) as f:
        cfg = json.load(f)
    # A checkpoint made earlier in --out must have the shape the flags ask for: measuring another
    # one would report figures for flags that were never applied.
    if args.family == "gpt2":
        wanted = {"model_type": "gpt2", "n_layer": args.layers, "n_embd": args.hidden,
                  "n_head": args.heads}
    else:
        wanted = {"model_type": args.family, "num_hidden_layers": args.layers,
                  "hidden_size": args.hidden, "num_attention_heads": args.heads,
                  "intermediate_size": args.intermediate}
    cached = {key: cfg.get(key) for key in wanted}
    if cached != wanted:
        sys.exit(f"--out '{args.out}': expected a checkpoint of {wanted}, got {cached}; "
                 "use another --out (engine_bench --dir) or delete it")
    # The input is made for every run from --tokens, never reused from an earlier run.
    ids = torch.randint(1000, 30000, (args.tokens,), generator=torch.Generator().manual_seed(1))
    with open(os.path.join(args.out, "input_ids.json"), "w") as f:
        json.dump(ids.tolist(), f)
    if args.prepare_only:
        return
    with open(os.path.join(args.out, "input_ids.json")) as f:
        ids = torch.tensor(json.load(f)).unsqueeze(0)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model = Gpt2(cfg) if args.family == "gpt2" else Bert(cfg)
    model.load_hf(read_safetensors(os.path.join(args.out, "model.safetensors")))
    model.eval()
    mask = torch.ones_like(ids)
    if args.onnx and not os.path.exists(args.onnx):
        export_onnx(model, ids, mask, args.onnx)
    times = []
    with torch.inference_mode():
        for _ in range(2):
            model(ids, mask)
        for _ in range(args.repeats):
            start = time.perf_counter()
            last, attentions = model(ids, mask)
            times.append(time.perf_counter() - start)
    print(json.dumps({
        "eager_seconds_median": statistics.median(times),
        "eager_seconds_min": min(times),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "last_hidden_state_row0": last[0, 0, :16].tolist(),
        "attention_last_layer_head0_last_row": attentions[-1][0, 0, -1, :16].tolist(),
    }))


if __name__ == "__main__":
    main()
