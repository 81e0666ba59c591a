#include "models/architectures/model_util.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "common/json_util.h"

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
