#include "models/architectures/model_util.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "models/kernels/fused_ops.h"
#include "models/kernels/gemm.h"
#include "models/kernels/parallel.h"
#include "models/kernels/row_kernel.h"

namespace attnscope {

torch::Tensor PaddingMask(const torch::Tensor& attention_mask) {
  return attention_mask.to(torch::kBool).view({attention_mask.size(0), 1, 1, -1});
}

torch::Tensor CausalMask(const torch::Tensor& attention_mask) {
  const int64_t length = attention_mask.size(1);
  return torch::ones({length, length}, torch::kBool)
      .tril()
      .view({1, 1, length, length})
      .logical_and(PaddingMask(attention_mask));
}

torch::Tensor CachedCausalMask(int64_t past, int64_t length) {
  return torch::ones({length, past + length}, torch::kBool).tril(past).view({1, 1, length, -1});
}

torch::Tensor VisiblePrefixes(const torch::Tensor& visible, int64_t batch) {
  const int64_t keys = visible.size(-1);
  const torch::Tensor counts = visible.sum(/*dim=*/-1);  // [B or 1, 1, T]
  const torch::Tensor prefixes =
      torch::arange(keys, torch::kInt64).view({1, 1, 1, keys}).lt(counts.unsqueeze(-1));
  if (!torch::equal(prefixes.expand_as(visible), visible) || counts.min().item<int64_t>() == 0) {
    return torch::Tensor();
  }
  return counts.squeeze(1).expand({batch, visible.size(2)}).to(torch::kInt64).contiguous();
}

PrefixAttentionOutput PrefixAttention(const torch::Tensor& query, const torch::Tensor& key,
                                      const torch::Tensor& value, int64_t heads, int64_t kv_heads,
                                      int64_t head_dim, float scale, const torch::Tensor& prefixes,
                                      bool keep_scores) {
  const int64_t batch = query.size(0);
  const int64_t length = query.size(1);
  const auto options = query.options();
  PrefixAttentionOutput out;
  out.probs = torch::empty({batch, heads, length, length}, options);
  if (keep_scores) out.scores = torch::empty({batch, heads, length, length}, options);
  out.context = torch::empty({batch, length, heads * head_dim}, options);
  const float* q = query.data_ptr<float>();
  const float* k = key.data_ptr<float>();
  const float* v = value.data_ptr<float>();
  const int64_t* visible = prefixes.data_ptr<int64_t>();
  float* p = out.probs.data_ptr<float>();
  float* s = keep_scores ? out.scores.data_ptr<float>() : nullptr;
  float* c = out.context.data_ptr<float>();
  const int64_t group = heads / kv_heads;
  const int64_t context_row = heads * head_dim;
  // The row kernel where it runs (as BertModel's attention), oneDNN otherwise; the row kernel
  // writes score rows in whole vectors of 16.
  const bool row_kernel = RowKernelAttentionApplies(head_dim);
  const auto stride_of = [row_kernel](int64_t keys) {
    return row_kernel ? (keys + 15) / 16 * 16 : keys;
  };
  ParallelClaims(batch * heads, /*grain=*/1, [&](BlockClaims& claims) {
    std::vector<float> head_scores(static_cast<size_t>(length * stride_of(length)));
    std::vector<float> head_probs(static_cast<size_t>(length * length));
    int64_t bh = 0;
    int64_t end = 0;
    while (claims.Next(&bh, &end)) {
      const int64_t b = bh / heads;
      const int64_t h = bh % heads;
      const int64_t kv = h / group;
      const int64_t block = bh * length * length;
      const float* q_head = q + b * query.stride(0) + h * head_dim;
      const float* k_head = k + b * key.stride(0) + kv * head_dim;
      const float* v_head = v + b * value.stride(0) + kv * head_dim;
      float* c_head = c + b * length * context_row + h * head_dim;
      // The keys any query of the sequence sees, its real length. The products run over them
      // alone, with the head's scores and probabilities laid out as for the sequence alone, its
      // real queries in one call and the padding's in another: a sequence padded in a batch runs
      // its real rows on the shapes and strides it has alone. oneDNN sums in another order at
      // another depth or stride: a Llama answer moved by 9e-6 in float32, and by 0.05 in bfloat16
      // whose roundings the difference flipped, when batched with a longer text.
      const int64_t used = *std::max_element(visible + b * length, visible + (b + 1) * length);
      const int64_t scores_stride = stride_of(used);
      const auto real_and_padding = {std::pair<int64_t, int64_t>{0, used}, {used, length - used}};
      for (const auto& [first, count] : real_and_padding) {
        if (count == 0) continue;
        if (row_kernel) {
          RowKernelScores(q_head + first * query.stride(1), query.stride(1), k_head, key.stride(1),
                          /*queries=*/count, /*keys=*/used, head_dim, scale,
                          head_scores.data() + first * scores_stride, scores_stride);
        } else {
          Sgemm(/*transpose_a=*/false, /*transpose_b=*/true, count, used, head_dim, scale,
                q_head + first * query.stride(1), query.stride(1), k_head, key.stride(1),
                /*beta=*/0.0f, head_scores.data() + first * scores_stride, scores_stride);
        }
      }
      for (int64_t t = 0; t < length; ++t) {
        const int64_t seen = visible[b * length + t];
        const float* row = head_scores.data() + t * scores_stride;
        if (keep_scores) {
          // Scores of keys past the sequence: none computed.
          float* kept = s + block + t * length;
          std::copy(row, row + used, kept);
          std::fill(kept + used, kept + length, 0.0f);
        }
        float* probs_row = head_probs.data() + t * used;
        SoftmaxRows(row, /*additive_mask=*/nullptr, /*rows=*/1, /*columns=*/seen, probs_row);
        std::fill(probs_row + seen, probs_row + used, 0.0f);
      }
      for (const auto& [first, count] : real_and_padding) {
        if (count == 0) continue;
        if (row_kernel) {
          RowKernelContext(head_probs.data() + first * used, used, v_head, value.stride(1),
                           /*queries=*/count, /*keys=*/used, head_dim, c_head + first * context_row,
                           context_row);
        } else {
          Sgemm(/*transpose_a=*/false, /*transpose_b=*/false, count, head_dim, used, 1.0f,
                head_probs.data() + first * used, used, v_head, value.stride(1), /*beta=*/0.0f,
                c_head + first * context_row, context_row);
        }
      }
      if (used == length) {
        CopyToOutput(head_probs.data(), length * length, p + block);
      } else {
        for (int64_t t = 0; t < length; ++t) {
          std::copy(head_probs.data() + t * used, head_probs.data() + (t + 1) * used,
                    p + block + t * length);
          std::fill(p + block + t * length + used, p + block + (t + 1) * length, 0.0f);
        }
      }
    }
  });
  return out;
}

namespace {

// Writes `added` [B, N, T, head_dim] after the first `past` positions of `storage`, first moving
// them to a new buffer of at least twice the room when it has too little, and returns the first
// past + T positions.
torch::Tensor WriteAfter(torch::Tensor* storage, int64_t past, const torch::Tensor& added,
                         int64_t reserved) {
  const int64_t length = past + added.size(2);
  if (!storage->defined() || storage->size(2) < length) {
    const int64_t room =
        std::max({length, reserved, storage->defined() ? 2 * storage->size(2) : int64_t{0}});
    torch::Tensor grown =
        torch::empty({added.size(0), added.size(1), room, added.size(3)}, added.options());
    if (past > 0) grown.narrow(/*dim=*/2, /*start=*/0, past).copy_(storage->narrow(2, 0, past));
    *storage = std::move(grown);
  }
  storage->narrow(/*dim=*/2, /*start=*/past, added.size(2)).copy_(added);
  return storage->narrow(/*dim=*/2, /*start=*/0, length);
}

}  // namespace

torch::Tensor RelativePositionBucket(torch::Tensor relative, bool bidirectional,
                                     int64_t num_buckets, int64_t max_distance) {
  torch::Tensor buckets = torch::zeros_like(relative);
  if (bidirectional) {
    num_buckets /= 2;
    buckets = buckets + relative.gt(0).to(torch::kInt64) * num_buckets;
    relative = relative.abs();
  } else {
    relative = -torch::min(relative, torch::zeros_like(relative));
  }
  const int64_t max_exact = num_buckets / 2;
  const torch::Tensor is_small = relative.lt(max_exact);
  // Distance 0 would take log(0); it is always an exact bucket, so any finite stand-in will do.
  const torch::Tensor large =
      (torch::log(relative.clamp_min(1).to(torch::kFloat32) / max_exact) /
       std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
       (num_buckets - max_exact))
          .to(torch::kInt64)
          .add(max_exact)
          .clamp_max(num_buckets - 1);
  return buckets + torch::where(is_small, relative, large);
}

torch::Tensor BatchMatmul(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t batch = a.size(0);
  if (b.size(0) != 1 || batch == 1) return torch::matmul(a, b);
  const int64_t heads = a.size(1), rows = a.size(2);
  const torch::Tensor folded = a.transpose(0, 1).reshape({heads, batch * rows, a.size(3)});
  return torch::matmul(folded, b.select(0, 0))
      .view({heads, batch, rows, b.size(3)})
      .transpose(0, 1);
}

torch::Tensor RopeInverseFrequencies(double theta, int64_t rotary_dim,
                                     const std::vector<double>& factors) {
  const torch::Tensor powers =
      torch::pow(theta, torch::arange(0, rotary_dim, 2, torch::kInt64).to(torch::kFloat32) /
                            static_cast<double>(rotary_dim));
  if (factors.empty()) return 1.0 / powers;
  return 1.0 / (torch::tensor(factors, torch::kFloat64).to(torch::kFloat32) * powers);
}

std::pair<torch::Tensor, torch::Tensor> RopeTables(const torch::Tensor& inv_freq, int64_t past,
                                                   int64_t length, double attention_factor) {
  const torch::Tensor positions = torch::arange(past, past + length, torch::kFloat32);
  const torch::Tensor freqs = torch::outer(positions, inv_freq);
  const torch::Tensor angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);
  if (attention_factor == 1.0) return {angles.cos(), angles.sin()};
  const auto factor = static_cast<float>(attention_factor);
  return {angles.cos().mul_(factor), angles.sin().mul_(factor)};
}

torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin) {
  const int64_t head_dim = x.size(-1);
  const int64_t rotary_dim = cos.size(-1);
  const int64_t half = rotary_dim / 2;
  const torch::Tensor rotated = rotary_dim < head_dim ? x.narrow(-1, 0, rotary_dim) : x;
  const torch::Tensor result =
      rotated * cos +
      torch::cat({-rotated.narrow(-1, half, half), rotated.narrow(-1, 0, half)}, -1) * sin;
  if (rotary_dim == head_dim) return result;
  return torch::cat({result, x.narrow(-1, rotary_dim, head_dim - rotary_dim)}, -1);
}

torch::Tensor TwoLayerMlp(const torch::Tensor& x, const std::string& act,
                          const torch::Tensor& fc_in_weight, const torch::Tensor& fc_in_bias,
                          const torch::Tensor& fc_out_weight, const torch::Tensor& fc_out_bias,
                          const torch::Tensor& residual) {
  if (act == "relu" || act == "silu") {
    torch::Tensor inner = Linear(x, fc_in_weight, fc_in_bias);
    inner = act == "relu" ? torch::relu(inner) : torch::silu(inner);
    return Linear(inner, fc_out_weight, fc_out_bias, residual);
  }
  return FeedForward(x, fc_in_weight, fc_in_bias,
                     act == "gelu" ? Activation::kGelu : Activation::kGeluTanh, fc_out_weight,
                     fc_out_bias, residual);
}

PrefixAttentionOutput CausalSelfAttention(const torch::Tensor& query, const torch::Tensor& key,
                                          const torch::Tensor& value, int64_t heads,
                                          int64_t head_dim, float scale,
                                          const torch::Tensor& prefixes,
                                          const torch::Tensor& visible, KvCache* cache,
                                          size_t layer, bool keep_scores) {
  if (prefixes.defined()) {
    return PrefixAttention(query, key, value, heads, /*kv_heads=*/heads, head_dim, scale, prefixes,
                           keep_scores);
  }
  const int64_t batch = query.size(0);
  const int64_t length = query.size(1);
  auto split_heads = [&](const torch::Tensor& x) {
    return x.view({batch, length, heads, head_dim}).transpose(1, 2);
  };
  torch::Tensor keys = split_heads(key);
  torch::Tensor values = split_heads(value);
  if (cache != nullptr) std::tie(keys, values) = AppendToCache(cache, layer, keys, values);
  PrefixAttentionOutput out;
  out.scores = torch::matmul(split_heads(query), keys.transpose(-1, -2)).mul_(scale);
  out.probs = torch::softmax(
      out.scores.masked_fill(visible.logical_not(), std::numeric_limits<float>::lowest()), -1);
  out.context =
      torch::matmul(out.probs, values).transpose(1, 2).reshape({batch, length, heads * head_dim});
  return out;
}

std::pair<torch::Tensor, torch::Tensor> AppendToCache(KvCache* cache, size_t layer,
                                                      torch::Tensor key, torch::Tensor value) {
  if (layer == cache->keys.size()) {
    cache->keys.emplace_back();
    cache->values.emplace_back();
    cache->key_storage.emplace_back();
    cache->value_storage.emplace_back();
  }
  const int64_t past = cache->keys[layer].defined() ? cache->keys[layer].size(2) : 0;
  cache->keys[layer] = WriteAfter(&cache->key_storage[layer], past, key, cache->reserved_positions);
  cache->values[layer] =
      WriteAfter(&cache->value_storage[layer], past, value, cache->reserved_positions);
  return {cache->keys[layer], cache->values[layer]};
}

absl::Status DecoderOnlyModel::AddLayerOutputs(const ForwardOptions& options, size_t layer,
                                               size_t layers, torch::Tensor probs,
                                               torch::Tensor scores, const torch::Tensor& hidden,
                                               ForwardOutput& out) {
  if (options.output_attentions) out.attentions.push_back(std::move(probs));
  if (options.output_attention_scores) out.attention_scores.push_back(std::move(scores));
  if (options.output_hidden_states && layer + 1 < layers) out.hidden_states.push_back(hidden);
  if (options.on_layer_done) return options.on_layer_done(static_cast<int64_t>(layer));
  return absl::OkStatus();
}

absl::StatusOr<ForwardOutput> DecoderOnlyModel::Run(const ForwardInput& input,
                                                    const ForwardOptions& options) const {
  // Right padding keeps positions 0..S-1 for every real token.
  return Layers(input.input_ids, CausalMask(input.attention_mask), /*cache=*/nullptr, options);
}

absl::StatusOr<DecodeOutput> DecoderOnlyModel::RunDecode(const torch::Tensor& input_ids,
                                                         KvCache* cache,
                                                         bool output_attentions) const {
  const torch::Tensor visible = CachedCausalMask(cache->length(), input_ids.size(1));
  ForwardOptions options;
  options.output_attentions = output_attentions;
  ATTNSCOPE_ASSIGN_OR_RETURN(ForwardOutput out, Layers(input_ids, visible, cache, options));
  DecodeOutput decoded;
  decoded.logits = std::move(out.logits);
  decoded.attentions = std::move(out.attentions);
  return decoded;
}

absl::StatusOr<std::unique_ptr<TransformerModel>> BuildModel(
    Architecture architecture, const std::function<TransformerModel*()>& make) {
  try {
    return std::unique_ptr<TransformerModel>(make());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("building the ",
                                                     ArchitectureName(architecture),
                                                     " model: out of memory; give the server "
                                                     "more memory or serve a smaller checkpoint"));
  } catch (const c10::Error& error) {
    return absl::InternalError(
        absl::StrCat("building the ", ArchitectureName(architecture),
                     " model: ", Excerpt(error.what_without_backtrace(), 300)));
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat("building the ", ArchitectureName(architecture),
                                            " model: ", Excerpt(error.what(), 300)));
  }
}

}  // namespace attnscope
