#include "tools/train/chrf.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizers/unicode.h"

namespace attnscope::train {
namespace {

absl::StatusOr<std::u32string> WithoutWhitespace(std::string_view text, const char* side) {
  absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(text);
  if (!decoded.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chrF ", side, ": ", decoded.status().message()));
  }
  std::u32string out;
  for (char32_t c : decoded->code_points) {
    if (!unicode::IsWhiteSpace(c)) out.push_back(c);
  }
  return out;
}

std::map<std::u32string, int64_t> NGrams(const std::u32string& text, size_t n) {
  std::map<std::u32string, int64_t> counts;
  for (size_t i = 0; i + n <= text.size(); ++i) ++counts[text.substr(i, n)];
  return counts;
}

}  // namespace

absl::Status ChrfScorer::Add(std::string_view hypothesis, std::string_view reference) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::u32string hyp, WithoutWhitespace(hypothesis, "hypothesis"));
  ATTNSCOPE_ASSIGN_OR_RETURN(std::u32string ref, WithoutWhitespace(reference, "reference"));
  for (int order = 1; order <= kOrder; ++order) {
    const std::map<std::u32string, int64_t> hyp_counts = NGrams(hyp, order);
    const std::map<std::u32string, int64_t> ref_counts = NGrams(ref, order);
    Counts& counts = counts_[order - 1];
    for (const auto& [gram, count] : hyp_counts) {
      counts.hypothesis += count;
      const auto found = ref_counts.find(gram);
      if (found != ref_counts.end()) counts.matches += std::min(count, found->second);
    }
    for (const auto& [gram, count] : ref_counts) counts.reference += count;
  }
  return absl::OkStatus();
}

double ChrfScorer::Score() const {
  double precision = 0, recall = 0;
  int orders = 0;
  for (const Counts& counts : counts_) {
    // sacreBLEU leaves out of the averages an order that one side is too short to have.
    if (counts.hypothesis == 0 || counts.reference == 0) continue;
    precision += static_cast<double>(counts.matches) / static_cast<double>(counts.hypothesis);
    recall += static_cast<double>(counts.matches) / static_cast<double>(counts.reference);
    ++orders;
  }
  if (orders == 0) return 0;
  precision /= orders;
  recall /= orders;
  if (precision + recall == 0) return 0;
  const double factor = kBeta * kBeta;
  return 100 * (1 + factor) * precision * recall / (factor * precision + recall);
}

}  // namespace attnscope::train
