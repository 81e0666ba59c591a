#include "models/json_util.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace attnscope {

absl::Status CheckJsonDepth(const nlohmann::json& json, absl::string_view what) {
  int deepest = 0;
  // Containers still to visit, with the depth of the values inside them.
  std::vector<std::pair<const nlohmann::json*, int>> pending = {{&json, 1}};
  while (!pending.empty()) {
    const auto [value, depth] = pending.back();
    pending.pop_back();
    if (!value->is_structured()) continue;
    deepest = std::max(deepest, depth);
    for (const nlohmann::json& child : *value) pending.emplace_back(&child, depth + 1);
  }
  if (deepest <= kMaxJsonDepth) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": expected JSON nested at most ",
                                                 kMaxJsonDepth, " levels deep, got ", deepest));
}

}  // namespace attnscope
