#include "models/architectures/model_util.h"

#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_util.h"
#include "common/status_macros.h"

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

std::pair<torch::Tensor, torch::Tensor> AppendToCache(KvCache* cache, size_t layer,
                                                      torch::Tensor key, torch::Tensor value) {
  if (layer < cache->keys.size()) {
    cache->keys[layer] = torch::cat({cache->keys[layer], key}, /*dim=*/2);
    cache->values[layer] = torch::cat({cache->values[layer], value}, /*dim=*/2);
  } else {
    cache->keys.push_back(std::move(key));
    cache->values.push_back(std::move(value));
  }
  return {cache->keys[layer], cache->values[layer]};
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
