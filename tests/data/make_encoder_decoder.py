#!/usr/bin/python3
"""Builds tests/data/tiny-marian and tests/data/tiny-bart: small random encoder-decoder checkpoints
in Hugging Face layout (MarianMTModel, BartForConditionalGeneration), each with golden.json.

The reference is written with PyTorch's own modules: nn.Embedding, nn.MultiheadAttention (with
average_attn_weights=False, for the encoder's and the decoder's self-attention and the decoder's
cross-attention over the encoder output), nn.LayerNorm, nn.SiLU / nn.GELU and nn.Linear, in the
post-LayerNorm order of fairseq's transformer that BART and Marian keep (Lewis et al. 2020;
Junczys-Dowmunt et al. 2018): x = LayerNorm(x + Attention(x)), then x = LayerNorm(x + FFN(x)).
The two differ where transformers' classes differ:

- marian: static sinusoidal positions (first half sin, second half cos of pos / 10000^(2i/d)),
  embeddings scaled by sqrt(d_model), SiLU ("swish"), no embedding LayerNorm;
- bart: learned positions at offset 2 (BartLearnedPositionalEmbedding), no scaling, GELU, a
  LayerNorm on the embeddings (layernorm_embedding).

Both tie lm_head to the shared embeddings and add final_logits_bias. It runs in float64 on the
float32 weights that are saved; golden.json holds per case the encoder input_ids and
attention_mask, the decoder_input_ids, and the expected encoder_last_hidden_state,
encoder_attentions, decoder_attentions, cross_attentions (each [batch, head, query, key] per
layer), decoder last hidden state and logits; generation.json the greedy search (ids,
log-probabilities, each token's cross-attention rows) and beam searches of
make_generation_golden.py run on this model, recomputing the decoder from decoder_start_token_id
at every step.

Run with Debian's interpreter, after make_marian_tokenizer.py and make_bpe_tokenizer.py (the
vocabulary sizes of tiny-marian and tiny-bart):
/usr/bin/python3 tests/data/make_encoder_decoder.py
"""
import json
import math
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_generation_golden as generation  # noqa: E402  (searches, safetensors writer)

COMMON = {
    "vocab_size": 40,
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 64,
    "pad_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 1,
    "is_encoder_decoder": True,
    "torch_dtype": "float32",
}
# tiny-marian's vocabulary is its tokenizer's (make_marian_tokenizer.py): "</s>" 0, "<pad>" last.
with open(os.path.join(HERE, "tiny-marian", "vocab.json")) as vocab_file:
    MARIAN_VOCAB_SIZE = len(json.load(vocab_file))
# tiny-bart's is its byte-level BPE tokenizer's (make_bpe_tokenizer.py): "<s>" 0, "<pad>" 1,
# "</s>" 2, "<mask>" last.
with open(os.path.join(HERE, "tiny-bart", "vocab.json"), encoding="utf-8") as vocab_file:
    BART_VOCAB_SIZE = len(json.load(vocab_file))
VARIANTS = {
    "marian": dict(COMMON, model_type="marian", architectures=["MarianMTModel"],
                   activation_function="swish", scale_embedding=True,
                   vocab_size=MARIAN_VOCAB_SIZE, pad_token_id=MARIAN_VOCAB_SIZE - 1,
                   decoder_start_token_id=MARIAN_VOCAB_SIZE - 1, eos_token_id=0),
    "bart": dict(COMMON, model_type="bart", architectures=["BartForConditionalGeneration"],
                 activation_function="gelu", scale_embedding=False, bos_token_id=0,
                 vocab_size=BART_VOCAB_SIZE),
}


def sinusoidal(positions, dim):
    """MarianSinusoidalPositionalEmbedding: [sin(p w_0) .. sin(p w_{d/2-1}), cos(p w_0) ..]."""
    j = torch.arange(dim // 2, dtype=torch.float64)
    angles = positions.double().unsqueeze(-1) / torch.pow(10000.0, 2 * j / dim)
    return torch.cat([angles.sin(), angles.cos()], -1)


class EncoderLayer(nn.Module):
    def __init__(self, c, activation):
        super().__init__()
        d = c["d_model"]
        self.self_attn = nn.MultiheadAttention(d, c["encoder_attention_heads"], batch_first=True)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = nn.Linear(d, c["encoder_ffn_dim"])
        self.fc2 = nn.Linear(c["encoder_ffn_dim"], d)
        self.final_layer_norm = nn.LayerNorm(d, eps=1e-5)
        self.activation = activation

    def forward(self, x, padding):
        attended, weights = self.self_attn(x, x, x, key_padding_mask=padding, need_weights=True,
                                           average_attn_weights=False)
        x = self.self_attn_layer_norm(x + attended)
        return self.final_layer_norm(x + self.fc2(self.activation(self.fc1(x)))), weights


class DecoderLayer(nn.Module):
    def __init__(self, c, activation):
        super().__init__()
        d, heads = c["d_model"], c["decoder_attention_heads"]
        self.self_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=1e-5)
        self.encoder_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.encoder_attn_layer_norm = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = nn.Linear(d, c["decoder_ffn_dim"])
        self.fc2 = nn.Linear(c["decoder_ffn_dim"], d)
        self.final_layer_norm = nn.LayerNorm(d, eps=1e-5)
        self.activation = activation

    def forward(self, x, causal, memory, memory_padding):
        attended, self_weights = self.self_attn(x, x, x, attn_mask=causal, need_weights=True,
                                                average_attn_weights=False)
        x = self.self_attn_layer_norm(x + attended)
        attended, cross_weights = self.encoder_attn(x, memory, memory,
                                                    key_padding_mask=memory_padding,
                                                    need_weights=True, average_attn_weights=False)
        x = self.encoder_attn_layer_norm(x + attended)
        x = self.final_layer_norm(x + self.fc2(self.activation(self.fc1(x))))
        return x, self_weights, cross_weights


class EncoderDecoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d = c["d_model"]
        activation = nn.SiLU() if c["activation_function"] == "swish" else nn.GELU()
        self.shared = nn.Embedding(c["vocab_size"], d)
        self.bart = c["model_type"] == "bart"
        if self.bart:
            self.encoder_positions = nn.Embedding(c["max_position_embeddings"] + 2, d)
            self.decoder_positions = nn.Embedding(c["max_position_embeddings"] + 2, d)
            self.encoder_layernorm_embedding = nn.LayerNorm(d, eps=1e-5)
            self.decoder_layernorm_embedding = nn.LayerNorm(d, eps=1e-5)
        self.encoder_layers = nn.ModuleList(EncoderLayer(c, activation)
                                            for _ in range(c["encoder_layers"]))
        self.decoder_layers = nn.ModuleList(DecoderLayer(c, activation)
                                            for _ in range(c["decoder_layers"]))
        self.final_logits_bias = nn.Parameter(torch.zeros(1, c["vocab_size"]))
        self.scale = math.sqrt(d) if c["scale_embedding"] else 1.0

    def embed(self, ids, side):
        positions = torch.arange(ids.shape[1])
        x = self.shared(ids) * self.scale
        if self.bart:
            table = self.encoder_positions if side == "encoder" else self.decoder_positions
            norm = (self.encoder_layernorm_embedding if side == "encoder"
                    else self.decoder_layernorm_embedding)
            return norm(x + table(positions + 2))
        return x + sinusoidal(positions, self.c["d_model"]).to(x.dtype)

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        padding = attention_mask == 0
        x = self.embed(input_ids, "encoder")
        encoder_attentions = []
        for layer in self.encoder_layers:
            x, weights = layer(x, padding)
            encoder_attentions.append(weights)
        memory = x
        length = decoder_input_ids.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool).triu(1)
        y = self.embed(decoder_input_ids, "decoder")
        decoder_attentions, cross_attentions = [], []
        for layer in self.decoder_layers:
            y, self_weights, cross_weights = layer(y, causal, memory, padding)
            decoder_attentions.append(self_weights)
            cross_attentions.append(cross_weights)
        logits = y @ self.shared.weight.t() + self.final_logits_bias
        return memory, encoder_attentions, y, decoder_attentions, cross_attentions, logits


def hf_state_dict(model):
    """The weights under MarianMTModel / BartForConditionalGeneration names."""
    tensors = {"model.shared.weight": model.shared.weight,
               "final_logits_bias": model.final_logits_bias}
    if model.bart:
        for side in ("encoder", "decoder"):
            tensors[f"model.{side}.embed_positions.weight"] = getattr(
                model, side + "_positions").weight
            norm = getattr(model, side + "_layernorm_embedding")
            tensors[f"model.{side}.layernorm_embedding.weight"] = norm.weight
            tensors[f"model.{side}.layernorm_embedding.bias"] = norm.bias

    def attention(prefix, module):
        q, k, v = module.in_proj_weight.chunk(3)
        qb, kb, vb = module.in_proj_bias.chunk(3)
        tensors.update({prefix + "q_proj.weight": q, prefix + "q_proj.bias": qb,
                        prefix + "k_proj.weight": k, prefix + "k_proj.bias": kb,
                        prefix + "v_proj.weight": v, prefix + "v_proj.bias": vb,
                        prefix + "out_proj.weight": module.out_proj.weight,
                        prefix + "out_proj.bias": module.out_proj.bias})

    def linear_and_norms(prefix, layer, norms):
        for name in ("fc1", "fc2") + norms:
            module = getattr(layer, name)
            tensors[prefix + name + ".weight"] = module.weight
            tensors[prefix + name + ".bias"] = module.bias

    for i, layer in enumerate(model.encoder_layers):
        prefix = f"model.encoder.layers.{i}."
        attention(prefix + "self_attn.", layer.self_attn)
        linear_and_norms(prefix, layer, ("self_attn_layer_norm", "final_layer_norm"))
    for i, layer in enumerate(model.decoder_layers):
        prefix = f"model.decoder.layers.{i}."
        attention(prefix + "self_attn.", layer.self_attn)
        attention(prefix + "encoder_attn.", layer.encoder_attn)
        linear_and_norms(prefix, layer, ("self_attn_layer_norm", "encoder_attn_layer_norm",
                                         "final_layer_norm"))
    return tensors


class DecoderView:
    """The model as make_generation_golden.py's searches call it: log-probabilities of the next
    decoder token after `ids` (decoder_start_token_id first) for one source, and each layer's
    cross-attention row [head, source] of the last decoder position."""

    def __init__(self, model, source):
        self.model = model
        self.source = torch.tensor([source])

    def __call__(self, ids):
        *_, cross_attentions, logits = self.model(self.source, torch.ones_like(self.source),
                                                  torch.tensor([ids]))
        return torch.log_softmax(logits[0, -1], -1), [a[0, :, -1] for a in cross_attentions]


def generation_cases(model, config, extra_sources):
    cases = []
    start, eos = config["decoder_start_token_id"], config["eos_token_id"]
    for source in [[5, 9, 12, 7, 3, 2], [8, 30, 2], [17, 4, 4, 26, 11, 9, 21, 2]] + extra_sources:
        view = DecoderView(model, source)
        cases.append({"method": "greedy", "source_ids": source, "max_new_tokens": 10,
                      "tokens": generation.greedy(view, [start], 10, eos)})
        for beams, penalty in [(2, 1.0), (4, 0.0), (6, 2.0)]:
            cases.append({"method": "beam_search", "source_ids": source, "max_new_tokens": 10,
                          "num_beams": beams, "length_penalty": penalty,
                          **generation.beam_search(view, [start], 10, eos, beams, penalty)})
    return cases


def main():
    cases = {
        "single": ([[5, 9, 12, 7, 3, 2]], [[1, 1, 1, 1, 1, 1]], [[0, 14, 6, 21]]),
        "padded_batch": ([[5, 9, 12, 7, 3, 2], [8, 30, 2, 0, 0, 0]],
                         [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]],
                         [[0, 14, 6, 21, 17], [0, 25, 4, 11, 33]]),
    }
    for seed, (name, config) in enumerate(VARIANTS.items()):
        torch.manual_seed(20261202 + seed)
        model = EncoderDecoder(config)
        with torch.no_grad():
            for param_name, param in model.named_parameters():
                if "norm" in param_name and param_name.endswith("weight"):
                    param.copy_(1.0 + 0.1 * torch.randn_like(param))
                elif "norm" in param_name:
                    param.copy_(0.1 * torch.randn_like(param))
                else:
                    param.copy_(0.3 * torch.randn_like(param))
        model.eval()
        out = os.path.join(HERE, "tiny-" + name)
        os.makedirs(out, exist_ok=True)
        generation.write_safetensors(os.path.join(out, "model.safetensors"),
                                     hf_state_dict(model))
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        reference = model.double()
        golden = {}
        variant_cases = dict(cases)
        if name == "marian":
            # A source and a target text as the Marian tokenizer encodes them
            # (make_marian_tokenizer.py): the decoder reads decoder_start_token_id, then the
            # target's tokens without its </s> (transformers' shift_tokens_right of the labels).
            with open(os.path.join(out, "marian_tokenizer_golden.json")) as f:
                tokenizer_golden = json.load(f)
            source = tokenizer_golden["source"][1]
            target = tokenizer_golden["target"][0]
            variant_cases["texts"] = ([source["input_ids"]], [[1] * len(source["input_ids"])],
                                      [[config["decoder_start_token_id"]] +
                                       target["input_ids"][:-1]])
        for case, (ids, mask, decoder_ids) in variant_cases.items():
            with torch.no_grad():
                memory, encoder_attentions, last, decoder_attentions, cross_attentions, logits = \
                    reference(torch.tensor(ids), torch.tensor(mask), torch.tensor(decoder_ids))
            golden[case] = {
                "input_ids": ids, "attention_mask": mask, "decoder_input_ids": decoder_ids,
                "encoder_last_hidden_state": memory.tolist(),
                "encoder_attentions": [a.tolist() for a in encoder_attentions],
                "decoder_last_hidden_state": last.tolist(),
                "decoder_attentions": [a.tolist() for a in decoder_attentions],
                "cross_attentions": [a.tolist() for a in cross_attentions],
                "logits": logits.tolist(),
            }
            if case == "texts":
                golden[case]["source_text"] = source["text"]
                golden[case]["target_text"] = target["text"]
        with open(os.path.join(out, "golden.json"), "w") as f:
            json.dump(golden, f)
        with torch.no_grad():
            # tiny-marian also translates the tokenized source text of the "texts" case.
            searches = generation_cases(
                reference, config,
                [variant_cases["texts"][0][0]] if "texts" in variant_cases else [])
        with open(os.path.join(out, "generation.json"), "w") as f:
            json.dump({"cases": searches}, f, indent=1)
            f.write("\n")
        print(f"{out}: beam searches ended by eos: "
              f"{sum(1 for c in searches if c.get('finish_reason') == 'eos')} of "
              f"{sum(1 for c in searches if c['method'] == 'beam_search')}")
        print(f"{out}: {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
