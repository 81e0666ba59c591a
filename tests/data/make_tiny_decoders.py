#!/usr/bin/python3
"""Builds tests/data/tiny-qwen2, tiny-qwen3, tiny-mistral, tiny-gemma, tiny-gemma2, tiny-gemma3,
tiny-phi3 (small random checkpoints of the Llama family's other members), tiny-gpt2, tiny-gpt-neox
and tiny-opt, and each one's golden.json.

The reference is written with PyTorch's own modules (nn.Embedding, nn.Linear, nn.SiLU; RMSNorm
and the rotary embedding as transformers' modeling_qwen2.py, modeling_qwen3.py and
modeling_mistral.py compute them) and runs in float64 on the float32 weights that are saved. It
recomputes the whole sequence at every generation step (no cache). What each member adds to Llama:
  - qwen2: biases on q_proj, k_proj and v_proj (none on o_proj); here also use_sliding_window with
    max_window_layers 1, so layer 0 sees the whole causal prefix and layer 1 a window of 4
    (Qwen2Config's layer_types: "sliding_attention" from max_window_layers on); tied lm_head;
  - qwen3: an RMSNorm over head_dim of each head's queries and keys before RoPE (q_norm, k_norm),
    head_dim 8 from config.json while hidden_size / num_attention_heads is 4, untied lm_head;
  - mistral: a sliding window of 4 on every layer.
  - gemma2, gemma3 (Gemma2ForCausalLM, Gemma3ForCausalLM: modeling_gemma2.py, modeling_gemma3.py):
    RMSNorms that scale by (1 + weight) in float32, embeddings multiplied by sqrt(hidden_size) (a
    float32 tensor), post_attention_layernorm on the attention's output and pre_/
    post_feedforward_layernorm around the MLP, the MLP gated by nn.GELU(approximate="tanh"), scores
    scaled by query_pre_attn_scalar^-1/2; without layer_types, gemma2's even layers and all of
    gemma3's but every sliding_window_pattern-th have the window. gemma2 soft-caps the scores
    before the mask and the logits (cap * tanh(x / cap)); gemma3 has q_norm and k_norm, a RoPE
    base of rope_local_base_freq in its windowed layers and linear rope_scaling (the frequencies
    divided by the factor) in the others. Both tie lm_head.
  - gemma (GemmaForCausalLM: modeling_gemma.py, Gemma 1): Llama's layers with Gemma's RMSNorms,
    scaled embeddings and GELU-gated MLP (tanh approximation whatever hidden_act says: GemmaMLP
    reads hidden_activation, absent here as in the released config.json files, which say
    "hidden_act": "gelu"), scores scaled by head_dim^-1/2, one key/value head (multi-query, as
    gemma-2b), tied lm_head.
  - phi3 (Phi3ForCausalLM: modeling_phi3.py): q, k and v as row ranges of one qkv_proj and gate
    and up as the two halves of gate_up_proj (gate first), a sliding window on every layer, RoPE
    on the first partial_rotary_factor * head_dim dimensions of each head (the rest pass
    through), and LongRoPE (rope_scaling "longrope", _compute_longrope_parameters): the
    frequencies 1 / (factor_i * theta^(2i/d)) with the short factors for a sequence of at most
    original_max_position_embeddings tokens and the long ones past it, cos and sin multiplied by
    sqrt(1 + ln(max_position_embeddings / original) / ln(original)). transformers picks the
    factors by the call's longest position (a padded batch's length); this reference picks them
    per sequence, by its own length, which is what transformers gives each text alone. Its
    greedy prompts are all past original_max_position_embeddings, where recomputing the sequence
    and decoding over a cache agree (a sequence that crosses it mid-generation keeps its cached
    keys' short rotation, in transformers as in attnscope, which recomputing would not).
  - gpt2 (GPT2LMHeadModel): learned positions, pre-LayerNorm blocks, the fused c_attn and the MLP
    as Conv1D modules (weights stored [in, out]), gelu_new, ln_f, lm_head tied to wte. Its
    reference is nn.MultiheadAttention (whose packed in_proj is c_attn transposed), nn.LayerNorm,
    nn.GELU(approximate="tanh"); its checkpoint keeps the attn.bias mask buffers older GPT-2
    checkpoints store, which a loader must ignore.
  - gpt_neox (GPTNeoXForCausalLM: modeling_gpt_neox.py, the Pythia suite's architecture):
    nn.LayerNorm and biases as GPT-2's, one query_key_value nn.Linear whose output is viewed
    [..., heads, 3 * head_dim] and chunked into each head's query, key and value, RoPE on the
    first rotary_pct * head_dim dimensions (base rotary_emb_base), the MLP
    dense_4h_to_h(GELU(dense_h_to_4h)) with the exact GELU, and use_parallel_residual: x +
    attention(input_layernorm(x)) + mlp(post_attention_layernorm(x)); final_layer_norm and an
    untied embed_out; the checkpoint keeps the attention.bias, attention.masked_bias and
    attention.rotary_emb.inv_freq buffers Pythia's checkpoints store, which a loader must ignore.
  - opt (OPTForCausalLM: modeling_opt.py): nn.LayerNorm before the attention
    (self_attn_layer_norm) and before the MLP (the layer's final_layer_norm), q, k, v and out
    projections with biases, queries scaled by head_dim^-1/2 after their bias, the MLP
    fc2(relu(fc1 x)), learned positions looked up at the mask's running count - 1 + 2
    (OPTLearnedPositionalEmbedding's offset), the decoder's final_layer_norm, lm_head tied to
    embed_tokens; the weights under model.decoder.
A window W lets query i see key j when i - W < j <= i (transformers' sliding_window_overlay and
causal_mask_function, masking_utils.py); padding keys are hidden too; inputs are right-padded, and
only the rows of real tokens are goldens (a padding query may see no key at all in a window).

The tokenizer is tests/data/tiny-llama2-tokenizer's (4,000 pieces), linked, not copied: the
goldens hold ids, so nothing here depends on a tokenizer.

Outputs, under tests/data/tiny-NAME/: config.json, model.safetensors, tokenizer.json,
tokenizer.model and tokenizer_config.json (symlinks), golden.json:
  "forward": cases of input_ids / attention_mask [batch, length] with the expected attentions (per
  layer [batch, head, query, key]), hidden_states (embeddings, each layer, the last after the final
  norm, as transformers gives them), last_hidden_state and the first 64 logits of each position,
  rounded to 1e-9;
  "greedy": prompts with the greedily generated ids, each step's log-probability and each layer's
  attention row of the newest position [head, key].

Run with Debian's interpreter (python3-torch): /usr/bin/python3 tests/data/make_tiny_decoders.py
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
from make_tiny_bert import write_safetensors  # noqa: E402
TOKENIZER = "tiny-llama2-tokenizer"
VOCAB = 4000
LOGITS = 64  # the goldens keep the first 64 of each position's logits (greedy covers the rest)

BASE = {
    "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": VOCAB,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
}
# Gemma's configuration classes read hidden_activation, not hidden_act.
GEMMA_BASE = {k: v for k, v in BASE.items() if k != "hidden_act"}
CONFIGS = {
    "qwen2": dict(BASE, architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                  use_sliding_window=True, sliding_window=4, max_window_layers=1,
                  tie_word_embeddings=True, rope_theta=1000000.0),
    "qwen3": dict(BASE, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=8,
                  attention_bias=False, use_sliding_window=False, sliding_window=None,
                  max_window_layers=2, tie_word_embeddings=False),
    "mistral": dict(BASE, architectures=["MistralForCausalLM"], model_type="mistral",
                    sliding_window=4, tie_word_embeddings=False),
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": VOCAB,
             "n_embd": 16, "n_layer": 2, "n_head": 4, "n_inner": None, "n_positions": 64,
             "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
             "scale_attn_weights": True, "bos_token_id": 1, "eos_token_id": 2,
             "tie_word_embeddings": True, "torch_dtype": "float32"},
    "gemma2": dict(GEMMA_BASE, architectures=["Gemma2ForCausalLM"], model_type="gemma2",
                   head_dim=8, hidden_activation="gelu_pytorch_tanh",
                   query_pre_attn_scalar=6, sliding_window=4, attn_logit_softcapping=4.0,
                   final_logit_softcapping=2.5, attention_bias=False, tie_word_embeddings=True,
                   pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "gemma3": dict(GEMMA_BASE, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text",
                   head_dim=8, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=6,
                   sliding_window=4, sliding_window_pattern=2, rope_theta=1000000.0,
                   rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 4.0},
                   attn_logit_softcapping=None, final_logit_softcapping=None, attention_bias=False,
                   tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "gpt-neox": {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
                 "vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
                 "num_attention_heads": 2, "intermediate_size": 64, "hidden_act": "gelu",
                 "rotary_pct": 0.25, "rotary_emb_base": 10000, "max_position_embeddings": 64,
                 "layer_norm_eps": 1e-05, "use_parallel_residual": True,
                 "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 2,
                 "torch_dtype": "float32"},
    "phi3": dict(BASE, architectures=["Phi3ForCausalLM"], model_type="phi3",
                 num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-05,
                 partial_rotary_factor=0.5,
                 sliding_window=5, original_max_position_embeddings=6,
                 rope_scaling={"type": "longrope", "short_factor": [1.0, 1.7],
                               "long_factor": [2.5, 6.0]},
                 tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "gemma": dict(GEMMA_BASE, architectures=["GemmaForCausalLM"], model_type="gemma", head_dim=8,
                  num_key_value_heads=1, hidden_act="gelu", attention_bias=False,
                  tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "opt": {"architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": VOCAB,
            "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "ffn_dim": 32,
            "max_position_embeddings": 64, "activation_function": "relu",
            "do_layer_norm_before": True, "word_embed_proj_dim": 16, "enable_bias": True,
            "layer_norm_elementwise_affine": True, "_remove_final_layer_norm": False,
            "tie_word_embeddings": True, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
            "torch_dtype": "float32"},
}


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def normed(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self.weight * self.normed(x)


class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm: the stored weight is the offset from 1, the product taken in float32."""

    def __init__(self, size, eps):
        super().__init__(size, eps)
        nn.init.zeros_(self.weight)

    def forward(self, x):
        return self.normed(x) * (1.0 + self.weight)


def inverse_frequencies(theta, head_dim):
    """RoPE's theta^(-2i/d), in float32 as transformers' rotary embeddings compute it."""
    return 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)


def rope(inv_freq, length):
    """The cos and sin of each position's angles [length, head_dim], in float64."""
    freqs = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    angles = torch.cat([freqs, freqs], -1).double()
    return angles.cos(), angles.sin()


def rotate(t, cos, sin):
    """RoPE in the rotate_half layout: (x1, x2) -> (-x2, x1)."""
    half = t.shape[-1] // 2
    return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin


def hidden_keys(length, window, key_padding):
    """[B, 1, S, S], true where query i may not see key j: later keys, keys outside a window W
    (visible when i - W < j <= i), padding keys."""
    query = torch.arange(length).view(-1, 1)
    key = torch.arange(length).view(1, -1)
    visible = key <= query
    if window is not None:
        visible = visible & (key > query - window)
    return ~visible.view(1, 1, length, length) | key_padding.view(-1, 1, 1, length)


def layer_windows(c):
    """Each layer's sliding window (None: the whole causal prefix), as the configuration classes
    derive it."""
    layers = c["num_hidden_layers"]
    if c["model_type"] in ("mistral", "phi3"):
        return [c.get("sliding_window")] * layers
    if c["model_type"] in ("gemma2", "gemma3_text"):
        every = 2 if c["model_type"] == "gemma2" else c.get("sliding_window_pattern", 6)
        return [None if (i + 1) % every == 0 else c["sliding_window"] for i in range(layers)]
    window = c.get("sliding_window") if c.get("use_sliding_window") else None
    return [window if window is not None and i >= c.get("max_window_layers", 28) else None
            for i in range(layers)]


class Layer(nn.Module):
    def __init__(self, c, window):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        self.window = window
        hidden, inner, eps = c["hidden_size"], c["intermediate_size"], c["rms_norm_eps"]
        qkv_bias = c["model_type"] == "qwen2" or c.get("attention_bias", False)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.qk_norm = c["model_type"] == "qwen3"
        if self.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, eps)
            self.k_norm = RMSNorm(self.head_dim, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self.act = nn.SiLU()

    def forward(self, x, cos, sin, key_padding):
        batch, length = x.shape[:2]

        def heads(t, count, norm=None):  # [B, S, count * d] -> [B, count, S, d]
            t = t.view(batch, length, count, self.head_dim)
            return (norm(t) if norm is not None else t).transpose(1, 2)

        h = self.input_layernorm(x)
        q = rotate(heads(self.q_proj(h), self.heads, self.q_norm if self.qk_norm else None), cos,
                   sin)
        k = rotate(heads(self.k_proj(h), self.kv_heads, self.k_norm if self.qk_norm else None),
                   cos, sin)
        v = heads(self.v_proj(h), self.kv_heads)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, 1)
        v = v.repeat_interleave(group, 1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        hidden = hidden_keys(length, self.window, key_padding)
        # A padding query beyond a window sees no key: its row, never compared, is made 0.
        probs = torch.softmax(scores.masked_fill(hidden, float("-inf")), -1).nan_to_num(0.0)
        x = x + self.o_proj((probs @ v).transpose(1, 2).reshape(batch, length, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(self.act(self.gate_proj(h)) * self.up_proj(h)), probs


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c, w) for w in layer_windows(c))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c["tie_word_embeddings"]:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, input_ids, attention_mask):
        cos, sin = rope(inverse_frequencies(self.c["rope_theta"], self.layers[0].head_dim),
                        input_ids.shape[1])
        x = self.embed_tokens(input_ids)
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, probs = layer(x, cos, sin, attention_mask == 0)
            hidden_states.append(x)
            attentions.append(probs)
        last = self.norm(x)
        hidden_states[-1] = last
        return last, hidden_states, attentions, self.lm_head(last)


class GemmaLayer(nn.Module):
    def __init__(self, c, window):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c["head_dim"]
        self.window = window
        self.gemma3 = c["model_type"] == "gemma3_text"
        # Gemma 1's layer is Llama's: no norm after the attention or around the MLP but the one
        # before it (its post_attention_layernorm), no soft-capping.
        self.gemma1 = c["model_type"] == "gemma"
        self.scaling = (self.head_dim if self.gemma1 else c["query_pre_attn_scalar"]) ** -0.5
        self.softcap = None if self.gemma1 else c.get("attn_logit_softcapping")
        hidden, inner, eps = c["hidden_size"], c["intermediate_size"], c["rms_norm_eps"]
        self.input_layernorm = GemmaRMSNorm(hidden, eps)
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        if self.gemma3:
            self.q_norm = GemmaRMSNorm(self.head_dim, eps)
            self.k_norm = GemmaRMSNorm(self.head_dim, eps)
        self.post_attention_layernorm = GemmaRMSNorm(hidden, eps)
        if not self.gemma1:
            self.pre_feedforward_layernorm = GemmaRMSNorm(hidden, eps)
            self.post_feedforward_layernorm = GemmaRMSNorm(hidden, eps)
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x, rope_global, rope_local, key_padding):
        batch, length = x.shape[:2]
        cos, sin = rope_local if self.window is not None and self.gemma3 else rope_global

        def heads(t, count):  # [B, S, count * d] -> [B, count, S, d]
            return t.view(batch, length, count, self.head_dim).transpose(1, 2)

        h = self.input_layernorm(x)
        q, k = heads(self.q_proj(h), self.heads), heads(self.k_proj(h), self.kv_heads)
        if self.gemma3:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        v = heads(self.v_proj(h), self.kv_heads)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, 1)
        v = v.repeat_interleave(group, 1)
        scores = (q @ k.transpose(-1, -2)) * self.scaling
        if self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        hidden = hidden_keys(length, self.window, key_padding)
        probs = torch.softmax(scores.masked_fill(hidden, float("-inf")), -1).nan_to_num(0.0)
        attended = self.o_proj((probs @ v).transpose(1, 2).reshape(batch, length, -1))
        if self.gemma1:
            x = x + attended
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(self.act(self.gate_proj(h)) * self.up_proj(h)), probs
        x = x + self.post_attention_layernorm(attended)
        h = self.pre_feedforward_layernorm(x)
        mlp = self.down_proj(self.act(self.gate_proj(h)) * self.up_proj(h))
        return x + self.post_feedforward_layernorm(mlp), probs


class Gemma(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(GemmaLayer(c, w) for w in layer_windows(c))
        self.norm = GemmaRMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, input_ids, attention_mask):
        c, length = self.c, input_ids.shape[1]
        head_dim = c["head_dim"]
        scaling = c.get("rope_scaling") or {}
        factor = scaling.get("factor", 1.0) if scaling.get("rope_type") == "linear" else 1.0
        rope_global = rope(inverse_frequencies(c["rope_theta"], head_dim) / factor, length)
        rope_local = rope(inverse_frequencies(c.get("rope_local_base_freq", 10000.0), head_dim),
                          length)
        normalizer = torch.tensor(c["hidden_size"] ** 0.5, dtype=torch.float32)
        x = self.embed_tokens(input_ids) * normalizer.to(self.embed_tokens.weight.dtype)
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, probs = layer(x, rope_global, rope_local, attention_mask == 0)
            hidden_states.append(x)
            attentions.append(probs)
        last = self.norm(x)
        hidden_states[-1] = last
        logits = last @ self.embed_tokens.weight.T
        cap = None if c["model_type"] == "gemma" else c.get("final_logit_softcapping")
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return last, hidden_states, attentions, logits


class Phi3Layer(nn.Module):
    def __init__(self, c, window):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c["hidden_size"] // self.heads
        self.rotary_dim = int(self.head_dim * c.get("partial_rotary_factor", 1.0))
        self.window = window
        hidden, inner, eps = c["hidden_size"], c["intermediate_size"], c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(hidden, eps)
        self.qkv_proj = nn.Linear(
            hidden, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.gate_up_proj = nn.Linear(hidden, 2 * inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self.act = nn.SiLU()

    def forward(self, x, cos, sin, key_padding):
        """cos, sin: [B, 1, S, rotary_dim], each sequence's own table."""
        batch, length = x.shape[:2]

        def heads(t, count):  # [B, S, count * d] -> [B, count, S, d]
            return t.view(batch, length, count, self.head_dim).transpose(1, 2)

        def partial_rotate(t):
            r = self.rotary_dim
            return torch.cat([rotate(t[..., :r], cos, sin), t[..., r:]], -1)

        h = self.input_layernorm(x)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = self.qkv_proj(h).split([q_size, kv_size, kv_size], -1)
        q = partial_rotate(heads(q, self.heads))
        k = partial_rotate(heads(k, self.kv_heads))
        v = heads(v, self.kv_heads)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, 1)
        v = v.repeat_interleave(group, 1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        hidden = hidden_keys(length, self.window, key_padding)
        probs = torch.softmax(scores.masked_fill(hidden, float("-inf")), -1).nan_to_num(0.0)
        x = x + self.o_proj((probs @ v).transpose(1, 2).reshape(batch, length, -1))
        gate, up = self.gate_up_proj(self.post_attention_layernorm(x)).chunk(2, -1)
        return x + self.down_proj(up * self.act(gate)), probs


class Phi3(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Phi3Layer(c, w) for w in layer_windows(c))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def rope_tables(self, lengths, length):
        """[B, 1, S, rotary_dim] cos and sin, each sequence's by its own length."""
        c, dim = self.c, self.layers[0].rotary_dim
        original = c["original_max_position_embeddings"]
        scale = c["max_position_embeddings"] / original
        attention_factor = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1
        powers = c["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
        tables = []
        for n in lengths:
            factors = c["rope_scaling"]["long_factor" if n > original else "short_factor"]
            inv_freq = 1.0 / (torch.tensor(factors, dtype=torch.float32) * powers)
            cos, sin = rope(inv_freq, length)
            tables.append((cos * attention_factor, sin * attention_factor))
        return (torch.stack([t[0] for t in tables]).unsqueeze(1),
                torch.stack([t[1] for t in tables]).unsqueeze(1))

    def forward(self, input_ids, attention_mask):
        cos, sin = self.rope_tables(attention_mask.sum(-1).tolist(), input_ids.shape[1])
        x = self.embed_tokens(input_ids)
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, probs = layer(x, cos, sin, attention_mask == 0)
            hidden_states.append(x)
            attentions.append(probs)
        last = self.norm(x)
        hidden_states[-1] = last
        return last, hidden_states, attentions, self.lm_head(last)


class Gpt2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden, eps = c["n_embd"], c["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.attn = nn.MultiheadAttention(hidden, c["n_head"], batch_first=True)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.c_fc = nn.Linear(hidden, c["n_inner"] or 4 * hidden)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(c["n_inner"] or 4 * hidden, hidden)

    def forward(self, x, key_padding):
        length = x.shape[1]
        future = torch.ones(length, length, dtype=torch.bool).triu(1)
        h = self.ln_1(x)
        attended, probs = self.attn(h, h, h, attn_mask=future, key_padding_mask=key_padding,
                                    need_weights=True, average_attn_weights=False)
        x = x + attended
        return x + self.c_proj(self.act(self.c_fc(self.ln_2(x)))), probs


class Gpt2(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.h = nn.ModuleList(Gpt2Block(c) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])

    def forward(self, input_ids, attention_mask):
        x = self.wte(input_ids) + self.wpe(torch.arange(input_ids.shape[1]))
        hidden_states, attentions = [x], []
        for block in self.h:
            x, probs = block(x, attention_mask == 0)
            hidden_states.append(x)
            attentions.append(probs)
        last = self.ln_f(x)
        hidden_states[-1] = last
        return last, hidden_states, attentions, last @ self.wte.weight.T


class NeoxLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden, eps = c["hidden_size"], c["layer_norm_eps"]
        self.heads = c["num_attention_heads"]
        self.head_dim = hidden // self.heads
        self.rotary_dim = int(self.head_dim * c["rotary_pct"])
        self.input_layernorm = nn.LayerNorm(hidden, eps=eps)
        self.post_attention_layernorm = nn.LayerNorm(hidden, eps=eps)
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.dense_h_to_4h = nn.Linear(hidden, c["intermediate_size"])
        self.act = nn.GELU()
        self.dense_4h_to_h = nn.Linear(c["intermediate_size"], hidden)

    def forward(self, x, cos, sin, key_padding):
        batch, length = x.shape[:2]
        qkv = self.query_key_value(self.input_layernorm(x))
        qkv = qkv.view(batch, length, self.heads, 3 * self.head_dim).transpose(1, 2)
        q, k, v = qkv.chunk(3, -1)
        r = self.rotary_dim
        q = torch.cat([rotate(q[..., :r], cos, sin), q[..., r:]], -1)
        k = torch.cat([rotate(k[..., :r], cos, sin), k[..., r:]], -1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores.masked_fill(hidden_keys(length, None, key_padding),
                                                 float("-inf")), -1)
        attended = self.dense((probs @ v).transpose(1, 2).reshape(batch, length, -1))
        mlp = self.dense_4h_to_h(self.act(self.dense_h_to_4h(self.post_attention_layernorm(x))))
        return mlp + attended + x, probs


class Neox(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_in = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(NeoxLayer(c) for _ in range(c["num_hidden_layers"]))
        self.final_layer_norm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.embed_out = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, input_ids, attention_mask):
        cos, sin = rope(inverse_frequencies(self.c["rotary_emb_base"], self.layers[0].rotary_dim),
                        input_ids.shape[1])
        x = self.embed_in(input_ids)
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, probs = layer(x, cos, sin, attention_mask == 0)
            hidden_states.append(x)
            attentions.append(probs)
        last = self.final_layer_norm(x)
        hidden_states[-1] = last
        return last, hidden_states, attentions, self.embed_out(last)


class OptLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        hidden, self.heads = c["hidden_size"], c["num_attention_heads"]
        self.head_dim = hidden // self.heads
        self.self_attn_layer_norm = nn.LayerNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)
        self.final_layer_norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, c["ffn_dim"])
        self.fc2 = nn.Linear(c["ffn_dim"], hidden)
        self.act = nn.ReLU()

    def forward(self, x, key_padding):
        batch, length = x.shape[:2]

        def heads(t):  # [B, S, N * d] -> [B, N, S, d]
            return t.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

        h = self.self_attn_layer_norm(x)
        q = heads(self.q_proj(h) * self.head_dim ** -0.5)
        k, v = heads(self.k_proj(h)), heads(self.v_proj(h))
        scores = q @ k.transpose(-1, -2)
        hidden = hidden_keys(length, None, key_padding)
        probs = torch.softmax(scores.masked_fill(hidden, float("-inf")), -1)
        x = x + self.out_proj((probs @ v).transpose(1, 2).reshape(batch, length, -1))
        return x + self.fc2(self.act(self.fc1(self.final_layer_norm(x)))), probs


class Opt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.embed_positions = nn.Embedding(c["max_position_embeddings"] + 2, c["hidden_size"])
        self.layers = nn.ModuleList(OptLayer(c) for _ in range(c["num_hidden_layers"]))
        self.final_layer_norm = nn.LayerNorm(c["hidden_size"])

    def forward(self, input_ids, attention_mask):
        positions = torch.cumsum(attention_mask, 1) * attention_mask - 1 + 2
        x = self.embed_tokens(input_ids) + self.embed_positions(positions)
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, probs = layer(x, attention_mask == 0)
            hidden_states.append(x)
            attentions.append(probs)
        last = self.final_layer_norm(x)
        hidden_states[-1] = last
        return last, hidden_states, attentions, last @ self.embed_tokens.weight.T


def opt_state_dict(model):
    """The weights under OPTForCausalLM's names (lm_head tied: not stored)."""
    tensors = {}
    for name, param in model.named_parameters():
        parts = name.split(".")
        if parts[0] == "layers" and parts[2] in ("q_proj", "k_proj", "v_proj", "out_proj"):
            parts.insert(2, "self_attn")
        tensors["model.decoder." + ".".join(parts)] = param.detach().to(torch.float32).contiguous()
    return tensors


def neox_state_dict(model, c):
    """The weights under GPTNeoXForCausalLM's names, with the buffers Pythia's checkpoints keep."""
    tensors = {"embed_out.weight": model.embed_out.weight}
    for name, param in model.named_parameters():
        if name.startswith("embed_out"):
            continue
        parts = name.split(".")
        if parts[0] == "layers" and parts[2] in ("query_key_value", "dense"):
            parts.insert(2, "attention")
        elif parts[0] == "layers" and parts[2].startswith("dense_"):
            parts.insert(2, "mlp")
        tensors["gpt_neox." + ".".join(parts)] = param
    positions = c["max_position_embeddings"]
    rotary_dim = model.layers[0].rotary_dim
    for i in range(c["num_hidden_layers"]):
        p = f"gpt_neox.layers.{i}.attention."
        tensors[p + "bias"] = torch.ones(positions, positions).tril().view(
            1, 1, positions, positions)
        tensors[p + "masked_bias"] = torch.tensor(-1e9)
        tensors[p + "rotary_emb.inv_freq"] = inverse_frequencies(c["rotary_emb_base"], rotary_dim)
    return {name: t.detach().to(torch.float32).contiguous() for name, t in tensors.items()}


def gpt2_state_dict(model, c):
    """The weights under GPT2LMHeadModel's names: Conv1D weights [in, out], no lm_head (tied), and
    each block's attn.bias causal-mask buffer."""
    tensors = {"transformer.wte.weight": model.wte.weight, "transformer.wpe.weight": model.wpe.weight,
               "transformer.ln_f.weight": model.ln_f.weight, "transformer.ln_f.bias": model.ln_f.bias}
    positions = c["n_positions"]
    for i, block in enumerate(model.h):
        p = f"transformer.h.{i}."
        tensors.update({
            p + "ln_1.weight": block.ln_1.weight, p + "ln_1.bias": block.ln_1.bias,
            p + "attn.c_attn.weight": block.attn.in_proj_weight.T,
            p + "attn.c_attn.bias": block.attn.in_proj_bias,
            p + "attn.c_proj.weight": block.attn.out_proj.weight.T,
            p + "attn.c_proj.bias": block.attn.out_proj.bias,
            p + "ln_2.weight": block.ln_2.weight, p + "ln_2.bias": block.ln_2.bias,
            p + "mlp.c_fc.weight": block.c_fc.weight.T, p + "mlp.c_fc.bias": block.c_fc.bias,
            p + "mlp.c_proj.weight": block.c_proj.weight.T, p + "mlp.c_proj.bias": block.c_proj.bias,
            p + "attn.bias": torch.ones(positions, positions).tril().view(1, 1, positions, positions),
        })
    return {name: t.detach().to(torch.float32).contiguous() for name, t in tensors.items()}


def hf_state_dict(model):
    """The weights under transformers' *ForCausalLM names (lm_head.weight only when untied)."""
    tensors = {}
    for name, param in model.named_parameters():
        parts = name.split(".")
        if parts[0] == "layers":
            group = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
                     "o_proj": "self_attn", "q_norm": "self_attn", "k_norm": "self_attn",
                     "qkv_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp",
                     "gate_up_proj": "mlp", "down_proj": "mlp"}
            if parts[2] in group:
                parts.insert(2, group[parts[2]])
        key = name if parts[0] == "lm_head" else "model." + ".".join(parts)
        tensors[key] = param.detach().to(torch.float32).contiguous()
    return tensors


def rounded(values):
    if isinstance(values, list):
        return [rounded(v) for v in values]
    return round(values, 9)


def batch(sequences):
    length = max(len(ids) for ids in sequences)
    return ([ids + [0] * (length - len(ids)) for ids in sequences],
            [[1] * len(ids) + [0] * (length - len(ids)) for ids in sequences])


def greedy(model, prompt, max_new, eos):
    ids, out = list(prompt), []
    for _ in range(max_new):
        inputs = torch.tensor([ids])
        _, _, attentions, logits = model(inputs, torch.ones_like(inputs))
        logprobs = torch.log_softmax(logits[0, -1], -1)
        token = int(logprobs.argmax())
        out.append({"id": token, "logprob": float(logprobs[token]),
                    "attention": [rounded(a[0, :, -1].tolist()) for a in attentions]})
        ids.append(token)
        if token == eos:
            break
    return out


def make(name, config, seed):
    torch.manual_seed(seed)
    gpt2 = config["model_type"] == "gpt2"
    gemma = config["model_type"] in ("gemma", "gemma2", "gemma3_text")
    phi3 = config["model_type"] == "phi3"
    neox = config["model_type"] == "gpt_neox"
    opt = config["model_type"] == "opt"
    model = (Gpt2(config) if gpt2 else Gemma(config) if gemma else Phi3(config) if phi3
             else Neox(config) if neox else Opt(config) if opt else Decoder(config))
    with torch.no_grad():
        # Large query and key weights give peaked, head-specific attention; the others are
        # smaller so that the residual stream stays near unit scale, where float32 holds 1e-5.
        for param_name, param in model.named_parameters():
            if gemma and "norm" in param_name:
                # Gemma's norm weights are offsets from 1.
                param.copy_(0.1 * torch.randn_like(param))
            elif "norm" in param_name or "ln_" in param_name or "layer_norm" in param_name:
                # LayerNorm and RMSNorm weights near 1, LayerNorm biases near 0.
                if param_name.endswith("bias"):
                    param.copy_(0.1 * torch.randn_like(param))
                else:
                    param.copy_(1 + 0.1 * torch.randn_like(param))
            elif any(n in param_name for n in ("q_proj", "k_proj", "embed", "in_proj", "wte",
                                               "wpe", "query_key_value")):
                param.normal_(0, 0.5)
            elif "qkv_proj" in param_name:
                # The query and key rows as q_proj's and k_proj's, the value rows as v_proj's.
                values = model.layers[0].kv_heads * model.layers[0].head_dim
                param.normal_(0, 0.5)
                param[-values:].normal_(0, 0.2)
            else:
                param.normal_(0, 0.2)
    model.eval()
    out = os.path.join(HERE, "tiny-" + name)
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"),
                      gpt2_state_dict(model, config) if gpt2 else
                      neox_state_dict(model, config) if neox else
                      opt_state_dict(model) if opt else hf_state_dict(model))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    for file in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json"):
        link = os.path.join(out, file)
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.join("..", TOKENIZER, file), link)

    reference = model.double()
    generator = torch.Generator().manual_seed(seed)
    sequences = [[1] + torch.randint(3, VOCAB, (n,), generator=generator).tolist()
                 for n in (11, 6, 9)]
    cases = {"single": [sequences[0]], "padded_batch": sequences}
    if "rope_scaling" in config and config["rope_scaling"].get("type") == "longrope":
        # A sequence within original_max_position_embeddings alone (the short factors), and beside
        # a longer one in a batch (each its own factors).
        short = [1] + torch.randint(3, VOCAB, (4,), generator=generator).tolist()
        cases.update({"short": [short], "mixed_batch": [short, sequences[0]]})
    golden = {"forward": {}, "greedy": []}
    with torch.no_grad():
        for case, rows in cases.items():
            input_ids, attention_mask = batch(rows)
            last, hidden_states, attentions, logits = reference(
                torch.tensor(input_ids), torch.tensor(attention_mask))
            golden["forward"][case] = {
                "input_ids": input_ids, "attention_mask": attention_mask,
                "last_hidden_state": rounded(last.tolist()),
                "hidden_states": [rounded(h.tolist()) for h in hidden_states],
                "attentions": [rounded(a.tolist()) for a in attentions],
                "logits": rounded(logits[..., :LOGITS].tolist()),
            }
        for prompt in (sequences[1], sequences[0]):
            golden["greedy"].append({"prompt_ids": prompt, "max_new_tokens": 8,
                                     "tokens": greedy(reference, prompt, 8, eos=-1)})
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f)


def main(names):
    """Builds the members named (all without names)."""
    for seed, (name, config) in enumerate(CONFIGS.items(), start=20261204):
        if not names or name in names:
            make(name, config, seed)


if __name__ == "__main__":
    main(sys.argv[1:])
