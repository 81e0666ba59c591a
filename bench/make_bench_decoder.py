#!/usr/bin/python3
"""Writes a Qwen2-layout decoder of GPT-2-small's size with random weights, for generation_bench.

  /usr/bin/python3 bench/make_bench_decoder.py OUT_DIR

OUT_DIR gets config.json and model.safetensors (about 500 MB): 12 layers, hidden_size 768,
12 attention heads over 4 key/value heads (grouped-query attention, as Qwen2 has it), a SwiGLU MLP
of 3072, GPT-2's vocabulary size (50,257) and 1,024 positions, biases on q/k/v, lm_head tied to the
embeddings. The weights are random (seed 0, std 0.02 as transformers initialises them): the
benchmark times the arithmetic of each token, which does not depend on what the weights say.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
from make_tiny_bert import write_safetensors  # noqa: E402

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "num_key_value_heads": 4, "vocab_size": 50257,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "use_sliding_window": False,
    "tie_word_embeddings": True, "torch_dtype": "float32",
}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    c = CONFIG
    hidden, inner = c["hidden_size"], c["intermediate_size"]
    kv = c["num_key_value_heads"] * hidden // c["num_attention_heads"]

    def normal(*shape):
        return torch.randn(*shape) * 0.02

    tensors = {"model.embed_tokens.weight": normal(c["vocab_size"], hidden),
               "model.norm.weight": torch.ones(hidden)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": torch.ones(hidden),
            p + "post_attention_layernorm.weight": torch.ones(hidden),
            p + "self_attn.q_proj.weight": normal(hidden, hidden),
            p + "self_attn.q_proj.bias": normal(hidden),
            p + "self_attn.k_proj.weight": normal(kv, hidden),
            p + "self_attn.k_proj.bias": normal(kv),
            p + "self_attn.v_proj.weight": normal(kv, hidden),
            p + "self_attn.v_proj.bias": normal(kv),
            p + "self_attn.o_proj.weight": normal(hidden, hidden),
            p + "mlp.gate_proj.weight": normal(inner, hidden),
            p + "mlp.up_proj.weight": normal(inner, hidden),
            p + "mlp.down_proj.weight": normal(hidden, inner),
        })
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
