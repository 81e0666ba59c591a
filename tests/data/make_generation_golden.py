#!/usr/bin/python3
"""Builds tests/data/tiny-llama (a small random Llama checkpoint) and tests/data/generation_golden.json.

The reference is a Llama written with PyTorch's own modules (nn.Embedding, nn.Linear, nn.SiLU;
RMSNorm and the rotary embedding as in the Llama paper and transformers' modeling_llama), run in
float64 on the float32 weights, that recomputes the whole sequence at every step (no cache). On it:

- greedy search;
- beam search as transformers' BeamSearchScorer with early_stopping=True: each step ranks every
  continuation of every kept hypothesis by total log-probability (a stable descending sort, so
  ties go to the lower beam, then the lower token id) and walks the best 2 * num_beams; an eos
  among the first num_beams of them finishes that hypothesis with score
  sum(log p) / len(generated) ** length_penalty, the other continuations fill the beams. The search
  ends when num_beams hypotheses have finished, or at max_new_tokens, where the kept ones finish;
  the best score wins (the first to finish on a tie);
- sampling: log-probabilities (float32) / temperature, top-k (ties with the k-th kept), top-p
  (a token stays while the more probable ones hold less than top_p), then torch.multinomial with a
  torch.Generator seeded with the seed.

Checkpoints: ../shared/models/stories260K (real weights; its greedy output is also checked here
against the shared expected_greedy.jsonl) and tiny-llama (random, 24 tokens, so that beams meet
eos). Run with Debian's interpreter: /usr/bin/python3 tests/data/make_generation_golden.py
"""
import json
import math
import os
import struct
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_attribution_golden import read_safetensors  # noqa: E402  (float64 tensors by name)
SHARED = os.environ.get("ATTNSCOPE_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
STORIES = os.path.join(SHARED, "models", "stories260K")
TINY = os.path.join(HERE, "tiny-llama")

TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 16,
    "intermediate_size": 40,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 24,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}


def write_safetensors(path, tensors):
    """safetensors: u64 little-endian header size, JSON header, then the raw little-endian data."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c["hidden_size"] // self.heads
        hidden, inner = c["hidden_size"], c["intermediate_size"]
        self.input_layernorm = RMSNorm(hidden, c["rms_norm_eps"])
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(hidden, c["rms_norm_eps"])
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self.act = nn.SiLU()

    def forward(self, x, cos, sin):
        length = x.shape[0]

        def rotate(t):  # rotate_half layout: (x1, x2) -> (-x2, x1)
            half = t.shape[-1] // 2
            return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

        h = self.input_layernorm(x)
        q = rotate(self.q_proj(h).view(length, self.heads, self.head_dim).transpose(0, 1))
        k = rotate(self.k_proj(h).view(length, self.kv_heads, self.head_dim).transpose(0, 1))
        v = self.v_proj(h).view(length, self.kv_heads, self.head_dim).transpose(0, 1)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, 0)
        v = v.repeat_interleave(group, 0)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        future = torch.ones(length, length, dtype=torch.bool).triu(1)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
        x = x + self.o_proj((probs @ v).transpose(0, 1).reshape(length, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(self.act(self.gate_proj(h)) * self.up_proj(h)), probs


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, ids):
        """Log-probabilities of the token after the last of `ids`, and each layer's last row
        [head, len(ids)]."""
        head_dim = self.c["hidden_size"] // self.c["num_attention_heads"]
        inv_freq = 1.0 / self.c["rope_theta"] ** (
            torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)
        freqs = torch.outer(torch.arange(len(ids), dtype=torch.float32), inv_freq)
        angles = torch.cat([freqs, freqs], -1).double()
        cos, sin = angles.cos(), angles.sin()
        x = self.embed_tokens(torch.tensor(ids))
        rows = []
        for layer in self.layers:
            x, probs = layer(x, cos, sin)
            rows.append(probs[:, -1])
        logits = self.lm_head(self.norm(x))[-1]
        return torch.log_softmax(logits, -1), rows

    def load(self, tensors):
        own = {}
        for name, _ in self.named_parameters():
            key = hf_name(name)
            if key not in tensors and name == "lm_head.weight":
                key = "model.embed_tokens.weight"  # tied
            own[name] = tensors[key]
        self.load_state_dict(own)


def hf_name(name):
    """This module's parameter name as LlamaForCausalLM's checkpoint spells it."""
    if name.startswith("lm_head"):
        return name
    parts = name.split(".")
    if parts[0] == "layers":
        group = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
                 "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
        if parts[2] in group:
            parts.insert(2, group[parts[2]])
    return "model." + ".".join(parts)


def greedy(model, prompt, max_new, eos):
    ids, out = list(prompt), []
    for _ in range(max_new):
        logprobs, rows = model(ids)
        token = int(logprobs.argmax())
        out.append({"id": token, "logprob": float(logprobs[token]),
                    "attention": [r.tolist() for r in rows]})
        ids.append(token)
        if token == eos:
            break
    return out


def beam_search(model, prompt, max_new, eos, beams, length_penalty):
    running = [([], 0.0)]  # (generated ids, sum of log-probabilities)
    finished = []  # (score, generated ids, finish reason)
    for step in range(max_new):
        totals = []
        for generated, total in running:
            logprobs, _ = model(list(prompt) + generated)
            totals.append(total + logprobs)
        candidates = torch.stack(totals).view(-1)
        values, order = candidates.sort(stable=True, descending=True)
        vocab = len(totals[0])
        kept = []
        for rank in range(min(2 * beams, len(candidates))):
            if len(kept) == beams:
                break
            row, token = divmod(int(order[rank]), vocab)
            generated = running[row][0] + [token]
            if token == eos:
                if rank < beams:
                    finished.append((float(values[rank]) / len(generated) ** length_penalty,
                                     generated, "eos"))
                continue
            kept.append((generated, float(values[rank])))
        if len(finished) >= beams or not kept:
            break
        if step + 1 == max_new:
            for generated, total in kept:
                finished.append((total / len(generated) ** length_penalty, generated, "length"))
            break
        running = kept
    best = max(range(len(finished)), key=lambda i: (finished[i][0], -i))
    score, ids, reason = finished[best]
    return {"ids": ids, "score": score, "finish_reason": reason}


def sample(model, prompt, max_new, eos, temperature, top_k, top_p, seed):
    generator = torch.Generator().manual_seed(seed)
    ids, out = list(prompt), []
    for _ in range(max_new):
        logprobs, _ = model(ids)
        scores = logprobs.float() / temperature
        if 0 < top_k < len(scores):
            kth = scores.topk(top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if top_p < 1:
            ordered, order = scores.sort(stable=True, descending=True)
            probs = torch.softmax(ordered, 0)
            before = probs.cumsum(0) - probs
            scores = scores.index_fill(0, order[before >= top_p], float("-inf"))
        token = int(torch.multinomial(torch.softmax(scores, 0), 1, False, generator=generator))
        out.append(token)
        ids.append(token)
        if token == eos:
            break
    return out


def make_tiny():
    torch.manual_seed(20261202)
    model = Llama(TINY_CONFIG).double()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                param.copy_(1 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0, 0.5)
    os.makedirs(TINY, exist_ok=True)
    tensors = {hf_name(n): p.detach() for n, p in model.named_parameters()}
    write_safetensors(os.path.join(TINY, "model.safetensors"), tensors)
    with open(os.path.join(TINY, "config.json"), "w") as f:
        json.dump(TINY_CONFIG, f, indent=2)
        f.write("\n")


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    model = Llama(config).double()
    model.load(read_safetensors(os.path.join(model_dir, "model.safetensors")))
    model.eval()
    return model, config


def main():
    make_tiny()
    cases = []
    with torch.no_grad():
        stories, stories_config = load(STORIES)
        with open(os.path.join(STORIES, "expected_greedy.jsonl")) as f:
            for line in f:
                expected = json.loads(line)
                got = greedy(stories, expected["input_ids"], len(expected["greedy_ids"]), -1)
                assert [t["id"] for t in got] == expected["greedy_ids"], expected["prompt"]
        once = [1, 403, 407, 261, 378]
        cases.append({"model": "stories260K", "method": "greedy", "prompt_ids": once,
                      "max_new_tokens": 12, "eos_token_id": 2,
                      "tokens": greedy(stories, once, 12, 2)})
        for beams, penalty in [(3, 1.0), (4, 0.0)]:
            cases.append({"model": "stories260K", "method": "beam_search", "prompt_ids": once,
                          "max_new_tokens": 10, "eos_token_id": 2, "num_beams": beams,
                          "length_penalty": penalty,
                          **beam_search(stories, once, 10, 2, beams, penalty)})
        for seed, temperature, top_k, top_p in [(7, 1.0, 0, 1.0), (7, 0.8, 20, 0.9),
                                                (123, 1.5, 0, 0.5)]:
            cases.append({"model": "stories260K", "method": "sampling", "prompt_ids": once,
                          "max_new_tokens": 16, "eos_token_id": 2, "seed": seed,
                          "temperature": temperature, "top_k": top_k, "top_p": top_p,
                          "ids": sample(stories, once, 16, 2, temperature, top_k, top_p, seed)})

        tiny, _ = load(TINY)
        for prompt in ([1], [1, 5, 9], [1, 17, 3, 3, 20]):
            cases.append({"model": "tiny-llama", "method": "greedy", "prompt_ids": prompt,
                          "max_new_tokens": 12, "eos_token_id": 2,
                          "tokens": greedy(tiny, prompt, 12, 2)})
            for beams, penalty in [(1, 1.0), (2, 1.0), (3, 0.0), (5, 2.0), (8, -1.0), (24, 1.0)]:
                cases.append({"model": "tiny-llama", "method": "beam_search",
                              "prompt_ids": prompt, "max_new_tokens": 12, "eos_token_id": 2,
                              "num_beams": beams, "length_penalty": penalty,
                              **beam_search(tiny, prompt, 12, 2, beams, penalty)})
            for seed in (1, 2):
                cases.append({"model": "tiny-llama", "method": "sampling", "prompt_ids": prompt,
                              "max_new_tokens": 12, "eos_token_id": 2, "seed": seed,
                              "temperature": 1.0, "top_k": 0, "top_p": 1.0,
                              "ids": sample(tiny, prompt, 12, 2, 1.0, 0, 1.0, seed)})
    with open(os.path.join(HERE, "generation_golden.json"), "w") as f:
        json.dump({"cases": cases}, f, indent=1)
        f.write("\n")
    eos_finishes = sum(1 for c in cases if c.get("finish_reason") == "eos")
    print(f"{len(cases)} cases, {eos_finishes} beam searches ended by eos")


if __name__ == "__main__":
    main()
