// Attention of one new position over a KV cache, for the decoding steps of generation: the
// scaled dot products of each query head with every cached key, their softmax, and the
// probability-weighted sum of the values, in one pass over the cache with AVX2 and FMA.
//
// Why our own: a decoding step's attention is a few rows against hundreds of keys, where
// LibTorch's matmul, mul_, softmax and matmul cost more in dispatch and small-matrix set-up than in
// arithmetic, and that cost grew with the context (stories260K's step took 1.24 times as long at
// 511 keys as at 16 on LibTorch's operators; bench/README.md, "Generation").
//
// Grouped-query attention (GQA, Ainslie et al. 2023; transformers' LlamaAttention): query head h
// reads key/value head h / G, G = query heads / key/value heads, without repeating the cache.
// The result is that of transformers' eager attention, softmax(q k^T * scale) v, up to float32
// summation order.
#ifndef ATTNSCOPE_MODELS_DECODE_ATTENTION_H_
#define ATTNSCOPE_MODELS_DECODE_ATTENTION_H_

#include <torch/types.h>

namespace attnscope {

// The attention probabilities and context of one decoding step.
struct DecodeAttentionOutput {
  torch::Tensor probs;    // float32 [B, N, 1, L]: each query head's weights over the L keys
  torch::Tensor context;  // float32 [B, 1, N * head_dim]: heads concatenated, as o_proj takes it
};

// Whether DecodeAttention runs here: the CPU has AVX2 and FMA, head_dim is a multiple of 8,
// the tensors are float32, `query` is contiguous and `keys` and `values` have contiguous rows
// (views of a cache [B, K, capacity, head_dim] narrowed to its L filled positions qualify).
bool DecodeAttentionApplies(const torch::Tensor& query, const torch::Tensor& keys,
                            const torch::Tensor& values);

// query: float32 [B, 1, N * head_dim], the new position's query heads after RoPE.
// keys, values: float32 [B, K, L, head_dim], every cached position including the new one; N must
// be a multiple of K. `scale` multiplies the dot products (1 / sqrt(head_dim) for Llama).
// Every key is visible (a causal step without a sliding window). Single-threaded. Requires
// DecodeAttentionApplies.
DecodeAttentionOutput DecodeAttention(const torch::Tensor& query, const torch::Tensor& keys,
                                      const torch::Tensor& values, float scale);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_DECODE_ATTENTION_H_
