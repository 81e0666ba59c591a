// Pieces the transformer implementations (llama.cc, encoder_decoder.cc, t5.cc) share: the boolean
// attention masks their softmax reads (true = the key is visible; a hidden key's score is set to
// the lowest float, so its probability is exactly 0) and the KV cache's growth.
#ifndef ATTNSCOPE_MODELS_MODEL_UTIL_H_
#define ATTNSCOPE_MODELS_MODEL_UTIL_H_

#include <cstdint>
#include <utility>

#include "models/transformer.h"

namespace attnscope {

// [B, 1, 1, S] bool from attention_mask [B, S] int64: every query sees the real (1) keys of its
// sequence, not the padding.
torch::Tensor PaddingMask(const torch::Tensor& attention_mask);

// [B, 1, S, S] bool from attention_mask [B, S] int64: query i sees the real keys at positions
// 0..i (causal self-attention over right-padded sequences).
torch::Tensor CausalMask(const torch::Tensor& attention_mask);

// [1, 1, T, past + T] bool: new query i, at position past + i, sees every key up to its own.
torch::Tensor CachedCausalMask(int64_t past, int64_t length);

// Adds the new positions' keys and values [B, N, T, head_dim] of layer `layer` to `cache` (a
// layer seen the first time, in order, gets its entry) and returns that layer's keys and values
// of every position so far, [B, N, past + T, head_dim].
std::pair<torch::Tensor, torch::Tensor> AppendToCache(KvCache* cache, size_t layer,
                                                      torch::Tensor key, torch::Tensor value);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_MODEL_UTIL_H_
